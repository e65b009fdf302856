"""Re-running the validation a training logged, in a child process, with the release's own code.

``yolo-det val RUN_DIR`` hands a :class:`Plan` (which run, which weights, which settings) to
:func:`rerun`; it starts ``python -m yolo_det.integrations.revalidation PLAN.json``, which loads the
run's training program (the YOLOv5 tree that trained it; Ultralytics' trainer for the run's task),
the weights the training validated (the full-precision EMA from the checkpoint's yolo-det sidecar,
else the checkpoint's fp16 weights, saying so), rebuilds the validation loader exactly as training
built it and runs the release's validation under the run's determinism mode, so NMS has no wall
clock. Its predictions and metrics go into a fingerprint log of one validation record, which
:mod:`yolo_det.evaluation.logged` compares with the logged one. A child keeps the release's imports
and module-level state out of the caller's process.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import torch

from ..core import environment, nms_limit
from ..evaluation import exported as eval_exported, gap as eval_gap, settings as eval_settings, logged as evaluation
from ..record import fingerprint
from ..record.log import ValRecord, read_log
from . import label_caches, metric_labels


@dataclass
class Plan:
    """What to re-run: the run folder, its release, the checkpoint and sidecar, the settings and the mode."""

    run_dir: str
    release: str  # "yolov5" | "ultralytics"
    checkpoint: str
    sidecar: Optional[str]
    epoch: Optional[int]
    mode: str = "strict"
    repo: Optional[str] = None  # YOLOv5: the tree whose train.py trained the run
    cwd: Optional[str] = None
    settings: Dict[str, Any] = field(default_factory=dict)  # the logged settings, when the record has them
    log: str = ""
    result: str = ""
    command: List[str] = field(default_factory=list)  # explain: the user's own evaluation command
    logged_metrics: Dict[str, float] = field(default_factory=dict)  # explain: the logged validation's metrics
    evaluator: str = "release"  # "coco": keep the predictions and score them with the COCO API as well


@dataclass
class Rerun:
    """What the child did: its validation record, the weights it used, notes, its environment."""

    record: Optional[ValRecord]
    weights: Dict[str, Any]
    notes: List[str]
    environment: Dict[str, Any]
    error: Optional[str] = None
    output: str = ""
    explain: Dict[str, Any] = field(default_factory=dict)
    coco: Optional[Dict[str, Any]] = None  # --evaluator coco: the COCO API's numbers and the gap


def rerun(plan: Plan, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> Rerun:
    """Run ``plan`` in a child process and read back its validation record."""
    with tempfile.TemporaryDirectory(prefix="yolo-det-val-") as tmp:
        plan.log = str(Path(tmp) / "rerun.jsonl")
        plan.result = str(Path(tmp) / "rerun.json")
        spec = Path(tmp) / "plan.json"
        spec.write_text(json.dumps(asdict(plan)), encoding="utf-8")
        child_env = dict(os.environ if env is None else env)
        child_env.pop(fingerprint.ENV_VAR, None)
        child_env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # YOLOv5 checkpoints pickle the model
        if plan.repo and (Path(plan.repo) / "__init__.py").is_file():  # PyPI layout: the tree is the imported package
            child_env["PYTHONPATH"] = os.pathsep.join(
                [str(Path(plan.repo).parent)] + [p for p in [child_env.get("PYTHONPATH", "")] if p])
        proc = subprocess.run([sys.executable, "-m", __name__, str(spec)], cwd=plan.cwd or None, env=child_env,
                              capture_output=True, text=True, timeout=timeout)
        output = proc.stdout + proc.stderr
        result: Dict[str, Any] = {}
        if Path(plan.result).is_file():
            result = json.loads(Path(plan.result).read_text(encoding="utf-8"))
        error = result.get("error")
        if proc.returncode != 0 and not error:
            error = f"the re-run exited with status {proc.returncode}: {output.strip()[-1500:]}"
        record = None
        if not error and plan.command:
            return Rerun(None, {}, list(result.get("notes") or []), result.get("environment") or {}, None, output,
                         result.get("explain") or {})
        if not error and Path(plan.log).is_file():
            validations = read_log(plan.log).validations
            record = validations[-1] if validations else None
            if record is None:
                error = "the re-run wrote no validation record"
        return Rerun(record, result.get("weights") or {}, list(result.get("notes") or []),
                     result.get("environment") or {}, error, output, coco=result.get("coco"))


def reproduce(run_dir: os.PathLike, epoch: str = "last", log: Optional[os.PathLike] = None,
              echo: Any = print, evaluator: str = "release") -> evaluation.Verdict:
    """Re-run the validation training logged at ``epoch`` (last, best, N) and compare it with the record.

    ``evaluator="coco"`` also keeps the re-run's predictions and scores them with the COCO API: the verdict's
    ``coco`` holds both numbers and the gap (:func:`yolo_det.integrations.coco_eval.report`).
    Raises :class:`~yolo_det.evaluation.logged.NotARunError` for a folder that is not a run (nothing run).
    """
    run = evaluation.find_run(run_dir, log)
    if evaluator == "coco" and run.task not in (None, "detect", "segment"):
        raise evaluation.NotARunError(f"--evaluator coco scores detect and segment runs (boxes, masks); a {run.task} "
                                      "run is not scored yet: run yolo-det val without it")
    selection = evaluation.select(run, epoch)
    plan = Plan(run_dir=str(run.path.resolve()), release=run.release, checkpoint=str(selection.checkpoint),
                sidecar=None if selection.sidecar is None else str(selection.sidecar), epoch=selection.epoch,
                mode="strict" if run.mode == "strict" else "warn", repo=run.repo, cwd=run.repo,
                settings=dict((selection.record.settings if selection.record is not None else None) or {}),
                evaluator=evaluator)
    weights = "its full-precision EMA" if plan.sidecar else "fp16 weights"
    echo(f"yolo-det: re-running the {run.release} validation of {evaluation.label(selection.which, selection.epoch)} "
         f"with {weights} ({Path(plan.checkpoint).name}) ...")
    result = rerun(plan)
    if result.error:
        raise RerunError(f"the re-run of {run.path}'s validation failed: {result.error}")
    verdict = evaluation.compare(run, selection, result.record, result.weights, result.environment, result.notes)
    verdict.coco = result.coco
    return verdict


def explain(run_dir: os.PathLike, command: List[str], epoch: str = "last", log: Optional[os.PathLike] = None,
            echo: Any = print, evaluator: str = "release") -> evaluation.Explanation:
    """Run the user's evaluation ``command`` and list how it differs from the training's validation at
    ``epoch``: every setting with both values and, per setting, the metric change when only it is aligned."""
    run = evaluation.find_run(run_dir, log)
    if run.task == "classify":
        raise evaluation.NotARunError("explaining an evaluation command compares mAP: a classification run has "
                                      "none; yolo-det val RUN_DIR re-runs and compares its validation")
    selection = evaluation.select(run, epoch)
    if selection.record is None or not selection.record.settings:
        raise evaluation.NotARunError("the run's log holds no settings for that validation (fingerprint the "
                                      "training with this yolo-det): there is nothing to compare the command with")
    plan = Plan(run_dir=str(run.path), release=run.release, checkpoint=str(selection.checkpoint),
                sidecar=None if selection.sidecar is None else str(selection.sidecar), epoch=selection.epoch,
                mode="strict" if run.mode == "strict" else "warn", repo=run.repo, cwd=None,
                settings=dict(selection.record.settings), command=list(command),
                logged_metrics=dict(selection.record.metrics), evaluator=evaluator)
    echo(f"yolo-det: running your evaluation and one re-run per setting that differs from the training's "
         f"validation of {evaluation.label(selection.which, selection.epoch)} ...")
    result = rerun(plan)
    if result.error:
        raise RerunError(f"your evaluation command failed: {result.error}")
    return evaluation.explanation(selection, result.explain, result.notes)


class RerunError(RuntimeError):
    """The release's validation could not be re-run (its message says why)."""


# -- in the child ----------------------------------------------------------------------------
def _main(spec_path: str) -> int:
    plan = Plan(**json.loads(Path(spec_path).read_text(encoding="utf-8")))
    notes: List[str] = []
    result: Dict[str, Any] = {"notes": notes, "weights": {}, "environment": {}}
    coco_state: Dict[str, Any] = {}
    try:
        from .. import session as _session

        session = _session.configure(plan.mode, repo=plan.repo)
        fingerprint.start(plan.log, session=session)
        if plan.command:
            explainer = _yolov5_explain if plan.release == "yolov5" else _ultralytics_explain
            result["explain"] = explainer(plan, notes)
            _export_causes(plan, result["explain"])
        else:
            runner = _yolov5 if plan.release == "yolov5" else _ultralytics
            result["weights"] = runner(plan, notes, coco_state)
        fingerprint.stop()
        if plan.evaluator == "coco" and not plan.command:
            from . import coco_eval

            validations = read_log(plan.log).validations
            logged = validations[-1].metrics if validations else {}
            rules = coco_state["rules"] or eval_gap.release_rules(  # Ultralytics: the space is known after the run
                "ultralytics", coco_state["matching"], coco_state["curve"], space=coco_state["capture"].space)
            result["coco"] = coco_eval.report(coco_state["capture"], coco_state["files"], coco_state["names"],
                                              plan.release, rules, logged, coco_state["single_cls"],
                                              coco_state.get("data"))
            if validations and validations[-1].evaluator:  # the re-run record's label: version and settings too
                result["coco"]["release_metrics"]["evaluator"] = validations[-1].evaluator
        nms = session.extra.get(nms_limit.KEY)
        if isinstance(nms, dict) and nms.get("exceeded"):
            notes.append(f"NMS ran past the release's time limit in {nms.get('exceeded')} batch(es) of the re-run "
                         "(not cut: the clock is lifted)")
        session.finish(echo=lambda _message: None)
        result["environment"] = environment.manifest(plan.repo)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as what went wrong
        result["error"] = f"{type(exc).__name__}: {exc}"
    Path(plan.result).write_text(json.dumps(result, default=str), encoding="utf-8")
    return 0 if "error" not in result else 1


def _export_causes(plan: Plan, explained: Dict[str, Any]) -> None:
    """Where your command evaluated an exported model: its source checkpoint and parity's causes against the
    checkpoint the logged validation evaluated, with what the release's validator measured on that .pt."""
    settings = explained["yours"]["settings"]
    if not eval_exported.is_export(settings.get("weights")):
        return
    weights = settings["weights"]
    weights = weights[0] if isinstance(weights, (list, tuple)) else weights
    part = eval_exported.explain(plan.checkpoint, weights, settings.get("data"))
    runs = explained.pop("pt_runs", None)
    if runs:
        eval_exported.attach_release_effects(part, explained["yours"]["metrics"], runs["square"], runs.get("rect"),
                                             runs["how"], bool(settings.get("rect")))
    explained["export"] = part


def _load_weights(module: torch.nn.Module, plan: Plan, checkpoint_weights: str, notes: List[str]) -> Dict[str, Any]:
    """Put the sidecar's full-precision EMA (and the tensors its modules cache) into ``module``."""
    from . import resume as _resume

    weights = {"checkpoint": plan.checkpoint, "source": checkpoint_weights, "sidecar": None}
    if plan.sidecar:
        state = _resume.read(plan.sidecar)
        why = _resume.weight_mismatch(state.get("ema"), module, "EMA")
        if why:
            notes.append(f"{Path(plan.sidecar).name} does not belong to {Path(plan.checkpoint).name} ({why}); "
                         "its full-precision EMA is used anyway")
        module.float()
        _resume.load_module(module, state.get("ema"))
        _resume.load_module_caches(module, (state.get("caches") or {}).get("ema"))
        weights.update(source="full-precision EMA (yolo-det sidecar)", sidecar=plan.sidecar,
                       sidecar_epoch=state.get("epoch"))
    else:
        module.float()
    weights["dtype"] = eval_settings.weights_dtype(module)
    weights["digest"] = eval_settings.state_digest(module)
    return weights


def _yolov5(plan: Plan, notes: List[str], coco_state: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The training-time validation of a YOLOv5-family run: ``val.run`` (``test.test``) on the EMA with the
    loader train.py builds (rect, pad 0.5, ``2 * batch // world_size``), ``half=amp``, the run's single_cls."""
    import yaml

    from .yolov5 import script as _v5

    opt = yaml.safe_load((Path(plan.run_dir) / "opt.yaml").read_text(encoding="utf-8"))
    segment = "mask_ratio" in opt  # segment/train.py's options: its validation is segment/val.py
    val, run, metrics_module = _yolov5_tree(plan, segment)
    settings = plan.settings
    ckpt = torch.load(plan.checkpoint, map_location="cpu", weights_only=False)
    model = ckpt.get("ema") or ckpt["model"]
    weights = _load_weights(model, plan, "fp16 weights of the checkpoint", notes)
    device = val.select_device(opt.get("device", ""), batch_size=opt.get("batch_size"))
    model.to(device)
    gs = max(int(model.stride.max()), 32)
    imgsz = settings.get("imgsz") or val.check_img_size(_first(opt, "imgsz", "img_size"), gs, floor=gs * 2)
    world = max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)
    batch = settings.get("batch_size") or int(opt["batch_size"]) // world * 2
    single_cls = bool(settings.get("single_cls", opt.get("single_cls", False)))
    half = bool(settings.get("half")) if settings.get("half") is not None else device.type != "cpu"
    data_dict = val.check_dataset(opt["data"])
    hyp = opt.get("hyp") if isinstance(opt.get("hyp"), dict) else None
    loader_kwargs = dict(hyp=hyp, rect=True, rank=-1, workers=0, pad=0.5, prefix="val: ")
    masks = dict(mask_downsample_ratio=opt.get("mask_ratio"), overlap=not opt.get("no_overlap")) if segment else {}
    if segment:
        loader_kwargs.update(mask_downsample_ratio=masks["mask_downsample_ratio"], overlap_mask=masks["overlap"])
    create = val.create_dataloader
    accepted = inspect.signature(create).parameters
    loader = create(data_dict["val"], imgsz, batch, gs, single_cls,
                    **{k: v for k, v in loader_kwargs.items() if k in accepted})[0]
    kwargs = dict(batch_size=batch, imgsz=imgsz, half=half, model=model, single_cls=single_cls, dataloader=loader,
                  save_dir=Path(plan.result).parent, plots=False, compute_loss=None, **masks)
    if plan.evaluator == "coco" and coco_state is not None:
        callbacks = _yolov5_coco(val, metrics_module, data_dict, loader, single_cls, coco_state, segment)
        coco_state["data"] = str(opt["data"])
        if segment:  # segment/val.py runs no per-image callback: its loop is followed instead
            kwargs["dataloader"] = coco_state["capture"].yolov5_segment(val, loader)
        else:
            kwargs["callbacks"] = callbacks
    accepted = inspect.signature(run).parameters
    results = run(data_dict, **{k: v for k, v in kwargs.items() if k in accepted})[0]
    fitness = importlib.import_module(metrics_module.__name__[:-len("metrics")] + "segment.metrics").fitness \
        if segment else metrics_module.fitness  # segment/train.py weighs the box and mask metrics
    fi = fitness(_as_row(results))
    record_settings = eval_settings.from_yolov5(
        {**kwargs, **_v5.run_defaults(run), "augment": False, "task": "val", "pad": 0.5, "rect": True},
        data=opt["data"], weights=plan.checkpoint)
    fingerprint.record_validation(plan.epoch, _v5.validation_metrics(results, fi), settings=record_settings,
                                  evaluator=metric_labels.yolov5(vars(val), record_settings))
    return weights


def _yolov5_coco(val: Any, metrics_module: Any, data_dict: Mapping[str, Any], loader: Any, single_cls: bool,
                 coco_state: Dict[str, Any], segment: bool = False) -> Any:
    """The release's rules probed on its own code, and the callbacks that keep every image's predictions (None for
    segment/val.py, which calls none: ``Capture.yolov5_segment`` follows its loop)."""
    from . import coco_eval

    prefix = metrics_module.__name__[:-len("utils.metrics")]
    objects = torch.tensor([[0.0, *b] for b in coco_eval.PROBE_OBJECTS])
    detections = torch.tensor(coco_eval.PROBE_DETECTIONS)
    iouv = torch.linspace(0.5, 0.95, 10)
    matching = coco_eval.probe_matching(lambda: bool(val.process_batch(detections, objects, iouv)[1, 0]))
    curve = coco_eval.probe_curve(metrics_module.compute_ap)
    capture = coco_eval.Capture()
    callbacks = None if segment else capture.yolov5(val, importlib.import_module(prefix + "utils.callbacks"))
    coco_state.update(capture_object=capture, rules=eval_gap.release_rules("yolov5", matching, curve))
    if loader is not None:
        names = data_dict["names"]
        names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
        coco_state.update(capture=capture, files=[str(f) for f in loader.dataset.im_files], names=names,
                          single_cls=single_cls)
    return callbacks


def _yolov5_tree(plan: Plan, segment: bool = False) -> Any:
    """The run's YOLOv5 tree imported as training imported it: (val module, its run/test function, utils.metrics);
    ``segment``: segment/val.py."""
    repo = Path(plan.repo or ".")
    if segment and repo.name == "segment" and (repo.parent / "segment" / "val.py").is_file():
        repo = repo.parent  # segment/train.py ran: the tree is its parent
    if (repo / "__init__.py").is_file():  # the PyPI layout imports itself by package name
        prefix = repo.name + "."
        sys.path.insert(0, str(repo.parent))
    else:
        prefix = ""
        sys.path.insert(0, str(repo))
    val = importlib.import_module(prefix + "segment.val") if segment else _first_module(prefix, ("val", "test"))
    label_caches.install_yolov5()  # a cache of other label contents is rebuilt, as in training under strict/warn
    return val, getattr(val, "run", None) or getattr(val, "test"), importlib.import_module(prefix + "utils.metrics")


#: A setting of the evaluation -> the option of YOLOv5's val.py that sets it (how it is aligned).
YOLOV5_OPTIONS = {"batch_size": "batch_size", "imgsz": "imgsz", "half": "half", "conf_thres": "conf_thres",
                  "iou_thres": "iou_thres", "max_det": "max_det", "single_cls": "single_cls", "augment": "augment",
                  "split": "task", "data": "data", "weights_dtype": "weights"}


def _yolov5_explain(plan: Plan, notes: List[str]) -> Dict[str, Any]:
    """The user's ``val.py`` command, evaluated as it stands and once more per setting that differs from the
    training's validation with only that setting aligned (the weights: the checkpoint's full-precision EMA)."""
    import copy

    from .yolov5 import script as _v5

    val, run, metrics_module = _yolov5_tree(plan)
    argv = list(plan.command)
    script = next((i for i, a in enumerate(argv) if Path(a).name in ("val.py", "test.py")), None)
    if script is None:
        raise ValueError("the command runs no val.py: give it as `-- python val.py --weights ... --data ...`")
    sys.argv = argv[script:]
    opt = val.parse_opt()
    seen: Dict[str, Any] = {}
    backend, create = val.DetectMultiBackend, val.create_dataloader

    fuse = {"fuse": True}

    def loaded(*args: Any, **kwargs: Any) -> Any:
        if "fuse" in inspect.signature(backend).parameters:
            kwargs["fuse"] = fuse["fuse"]
        seen["model"] = backend(*args, **kwargs)
        return seen["model"]

    force: Dict[str, Any] = {}  # loader arguments set for the .pt runs an export is explained with (rect)

    def loader(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(force)
        seen["loader"] = create(*args, **kwargs)
        if coco_state and "dataset" not in coco_state:  # the image order of your evaluation
            coco_state["dataset"] = seen["loader"][0].dataset
        return seen["loader"]

    val.DetectMultiBackend, val.create_dataloader = loaded, loader
    training = plan.settings

    coco_state: Dict[str, Any] = {}

    def evaluate(overrides: Mapping[str, Any]) -> Dict[str, Any]:
        values = {**copy.deepcopy(vars(opt)), **overrides}
        values.update(project=str(Path(plan.result).parent / "val"), name="exp", exist_ok=True, plots=False,
                      save_json=False, save_txt=False)
        if plan.evaluator == "coco" and "rules" not in coco_state:  # your own evaluation: its predictions kept
            values["callbacks"] = _yolov5_coco(val, metrics_module, {}, None, False, coco_state)
        results = run(**{k: v for k, v in values.items() if k in inspect.signature(run).parameters})[0]
        model = seen.get("model")
        weights = values.get("weights")
        weights = weights[0] if isinstance(weights, (list, tuple)) else weights
        dtype = _checkpoint_dtype(weights)
        batches = (seen.get("loader") or [None])[0]
        settings = eval_settings.from_yolov5(
            {**values, "half": bool(getattr(model, "fp16", values.get("half"))), "dataloader": batches,
             "batch_size": getattr(batches, "batch_size", values.get("batch_size")),  # the loader's, as training's
             "rect": getattr(getattr(batches, "dataset", None), "rect", None),
             "pad": 0.5 if values.get("task") != "speed" else 0.0},
            data=values.get("data"), weights=weights)
        settings["weights_dtype"] = dtype
        metrics = _v5.validation_metrics(results, metrics_module.fitness(_as_row(results)))
        evaluator = metric_labels.yolov5(vars(val), settings)
        fingerprint.record_validation(None, metrics, settings=settings, evaluator=evaluator)
        return {"metrics": metrics, "settings": settings, "evaluator": evaluator}

    def fp32(yours_settings: Mapping[str, Any]) -> Optional[List[str]]:
        path = _fp32_checkpoint(plan, yours_settings.get("weights"), notes)
        return None if path is None else [path]

    def unfused(overrides: Mapping[str, Any]) -> Dict[str, Any]:
        fuse["fuse"] = False
        try:
            return evaluate(overrides)
        finally:
            fuse["fuse"] = True

    result = _explained(training, evaluate, YOLOV5_OPTIONS, fp32, plan.logged_metrics, unfused,
                        "val.py folds each Conv's BatchNorm into its weights (other float rounding); the training "
                        "validates the unfused EMA; val.py has no option for it", "yolov5")
    if eval_exported.is_export(result["yours"]["settings"].get("weights")):
        # the validated checkpoint through the same val.py at your settings: square letterbox and the export's batch
        # (what val.py forces for an export), then rect (what it gives a .pt): the loader's rect set, nothing else
        same = {"weights": [plan.checkpoint], "batch_size": result["yours"]["settings"].get("batch_size")}
        runs: Dict[str, Any] = {"how": f"val.py of {Path(plan.checkpoint).name}, its loader square then rect"}
        for name, rect in (("square", False), ("rect", True)):
            force["rect"] = rect
            try:
                runs[name] = evaluate(same)["metrics"]
            finally:
                force.clear()
        result["pt_runs"] = runs
    if plan.evaluator == "coco":
        from . import coco_eval
        import yaml

        data = str(vars(opt).get("data"))
        names = yaml.safe_load(Path(data).read_text(encoding="utf-8")).get("names") or []
        names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
        files = [str(f) for f in getattr(coco_state.get("dataset"), "im_files", [])]
        result["coco"] = coco_eval.report(coco_state["capture_object"], files, names, "yolov5", coco_state["rules"],
                                          result["yours"]["metrics"], bool(vars(opt).get("single_cls")), data)
        if result["yours"].get("evaluator"):
            result["coco"]["release_metrics"]["evaluator"] = result["yours"]["evaluator"]
    return result


def _explained(training: Mapping[str, Any], evaluate: Any, options: Mapping[str, str], fp32: Any,
               logged: Mapping[str, float], unfused: Any, fuse_why: str, release: str) -> Dict[str, Any]:
    """The explanation both releases share: the user's evaluation (``evaluate({})``), each setting that differs
    from ``training`` aligned alone (``evaluate({option: value})``; the weights by ``fp32(yours)``, a
    full-precision copy), then all at once; where that still misses ``logged``, the unfused model is tried."""
    yours = evaluate({})
    differences = evaluation.setting_differences(dict(training), yours["settings"])
    weights: Dict[str, Any] = {}
    export = eval_exported.is_export(yours["settings"].get("weights"))
    forced = eval_exported.forced(yours["settings"]["weights"], release) if export else {}
    if export:  # what the validator forces for an export is not aligned on it (measured on the .pt instead)
        options = {k: v for k, v in options.items() if k not in forced}

    def aligned_value(setting: str, value: Any) -> Any:
        if options[setting] != options.get("weights_dtype"):
            return value
        if "value" not in weights:
            weights["value"] = fp32(yours["settings"])
        return weights["value"]

    aligned_all: Dict[str, Any] = {}
    for difference in differences:
        option = options.get(difference["setting"])
        value = None if option is None else aligned_value(difference["setting"], difference["training"])
        if value is None:
            difference["effect"], difference["alignable"] = None, False
            continue
        aligned = evaluate({option: value})
        aligned_all[option] = value
        difference["alignable"] = True
        difference["aligned_metrics"] = aligned["metrics"]
        difference["effect"] = _effect(aligned["metrics"], yours["metrics"])
    everything = evaluate(aligned_all) if aligned_all else yours
    result: Dict[str, Any] = {"yours": yours, "differences": differences, "all_aligned": everything["metrics"]}
    if export:
        eval_exported.annotate(differences, forced)
        return result  # an export is not fused or unfused: its causes are named by _export_causes
    if logged and not _same_metrics(everything["metrics"], logged):
        # what is left: the standalone evaluation folds Conv+BatchNorm, the training validates the unfused EMA
        without = unfused(aligned_all)
        if without is not None and _same_metrics(without["metrics"], logged):
            differences.append({"setting": "fuse", "training": False, "yours": True, "alignable": False,
                                "effect": _effect(without["metrics"], everything["metrics"]), "why": fuse_why})
    return result


def _effect(aligned: Mapping[str, float], yours: Mapping[str, float]) -> Dict[str, float]:
    return {k: aligned[k] - yours[k] for k in ("mAP50", "mAP50-95") if k in aligned and k in yours}


def _same_metrics(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("mAP50", "mAP50-95"))


def _checkpoint_dtype(weights: Any) -> Optional[str]:
    """The floating dtype a YOLOv5 checkpoint stores its evaluated model in (``float16`` for best.pt/last.pt)."""
    try:
        ckpt = torch.load(str(weights), map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - not a checkpoint file: unknown
        return None
    model = ckpt.get("ema") or ckpt.get("model") if isinstance(ckpt, dict) else None
    return eval_settings.weights_dtype(model)


def _fp32_checkpoint(plan: Plan, weights: Any, notes: List[str]) -> Optional[str]:
    """A copy of the user's checkpoint holding the full-precision EMA of its yolo-det sidecar (the weights the
    training validated), or None (no sidecar beside it: said in ``notes``)."""
    from . import resume as _resume

    path = Path(str(weights))
    sidecar = _resume.sidecar_path(path)
    if not sidecar.is_file():
        notes.append(f"{path.name} has no full-precision EMA beside it ({sidecar.name}): the weight precision "
                     "cannot be aligned")
        return None
    ckpt = torch.load(str(path), map_location="cpu", weights_only=False)
    model = (ckpt.get("ema") or ckpt["model"]).float()
    state = _resume.read(sidecar)
    _resume.load_module(model, state.get("ema"))
    _resume.load_module_caches(model, (state.get("caches") or {}).get("ema"))
    target = Path(plan.result).parent / f"{path.stem}-fp32.pt"
    torch.save({**ckpt, "model": model, "ema": None}, target)
    return str(target)


def _ultralytics(plan: Plan, notes: List[str], coco_state: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The training-time validation of an Ultralytics run: its task's trainer set up from ``args.yaml`` (in a
    scratch folder), the EMA replaced by the validated weights, the trainer's own ``validate()``."""
    import yaml

    from .ultralytics import api
    from .ultralytics.validation import record_validation, training_settings, validation_nms
    from .. import session as _session

    args = yaml.safe_load((Path(plan.run_dir) / "args.yaml").read_text(encoding="utf-8"))
    task = args.get("task") or "detect"
    trainer_class = api.task_trainers()[task]
    label_caches.install_ultralytics()
    scratch = Path(plan.result).parent / "trainer"
    overrides = {**args, "project": str(scratch), "name": "val", "exist_ok": True, "resume": False, "plots": False,
                 "save": False, "val": True}
    trainer = trainer_class(overrides=overrides)
    setup = trainer._setup_train
    setup(*([1] if "world_size" in inspect.signature(setup).parameters else []))
    ckpt = torch.load(plan.checkpoint, map_location="cpu", weights_only=False)
    ema = trainer.ema.ema
    ema.load_state_dict({k: v.float() if v.is_floating_point() else v  # the checkpoint's fp16 EMA, upcast
                         for k, v in (ckpt.get("ema") or ckpt["model"]).state_dict().items()})
    weights = _load_weights(ema, plan, "fp16 weights of the checkpoint", notes)
    trainer.epoch = plan.epoch if plan.epoch is not None else 0
    batch = next(iter(trainer.test_loader))
    with torch.no_grad():
        _loss, trainer.loss_items = trainer.model.loss(trainer.preprocess_batch(batch))
    trainer.loss = _loss
    session = _session.current()
    trainer.best_fitness = None
    if plan.evaluator == "coco" and coco_state is not None:
        _ultralytics_coco(trainer, args, coco_state)
    with validation_nms(session, validator=trainer.validator):
        metrics, fitness = trainer.validate()
    record_validation(trainer, metrics, fitness, settings=training_settings(trainer))
    return weights


def _ultralytics_probes(validator: Any) -> Any:
    """(matching, curve): the rules of the installed Ultralytics, from its own matcher and compute_ap."""
    from ultralytics.utils import metrics as _metrics

    from . import coco_eval

    objects = torch.tensor(coco_eval.PROBE_OBJECTS)
    detections = torch.tensor(coco_eval.PROBE_DETECTIONS)
    if not hasattr(validator, "iouv"):
        validator.iouv = torch.linspace(0.5, 0.95, 10)
    matching = coco_eval.probe_matching(lambda: bool(validator.match_predictions(
        detections[:, 5], torch.zeros(2), _metrics.box_iou(objects, detections[:, :4]))[1, 0]))
    return matching, coco_eval.probe_curve(_metrics.compute_ap)


def _ultralytics_coco(trainer: Any, args: Mapping[str, Any], coco_state: Dict[str, Any]) -> None:
    """The release's rules probed on its own code, and its validator's matcher wrapped to keep every image."""
    from ultralytics.utils import ops

    from . import coco_eval

    validator = trainer.validator
    matching, curve = _ultralytics_probes(validator)
    capture = coco_eval.Capture()
    capture.ultralytics(validator, ops.scale_boxes)
    names = trainer.data["names"]
    names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
    coco_state.update(capture=capture, files=[str(f) for f in trainer.test_loader.dataset.im_files], names=names,
                      single_cls=bool(args.get("single_cls")), rules=None, release="ultralytics",
                      matching=matching, curve=curve, data=str(args.get("data") or "") or None)


#: A setting of the evaluation -> the Ultralytics argument that sets it (``half``: ``quantize`` where it replaced it).
ULTRALYTICS_OPTIONS = {"batch_size": "batch", "imgsz": "imgsz", "rect": "rect", "half": "half", "conf_thres": "conf",
                       "iou_thres": "iou", "max_det": "max_det", "single_cls": "single_cls", "augment": "augment",
                       "split": "split", "data": "data", "weights_dtype": "model"}


def _ultralytics_explain(plan: Plan, notes: List[str]) -> Dict[str, Any]:
    """The user's ``yolo val ...`` (or a ``python`` script calling ``model.val()``), run as it stands under
    yolo-det's validator; its ``model.val()`` arguments, re-run once per setting that differs from the training's
    validation with only that setting aligned through Ultralytics' own arguments (weights: a full-precision copy)."""
    import functools
    import runpy

    from ultralytics.cfg import DEFAULT_CFG_DICT
    from ultralytics.engine import validator as _validator

    from .ultralytics import trainer as _ultralytics
    from .ultralytics import api
    from ..evaluation.settings import KEY
    from .. import session as _session

    _ultralytics.enable()  # model.val() picks yolo-det's validator: unclocked NMS, settings and metrics recorded
    label_caches.install_ultralytics()
    Model = api.model_class()
    original_val = Model.val
    calls: List[Any] = []

    def val(self: Any, validator: Any = None, **kwargs: Any) -> Any:
        calls.append((type(self), getattr(self, "task", None), dict(self.overrides), dict(kwargs)))
        return original_val(self, validator=validator, **kwargs)

    argv = list(plan.command)
    restore = None
    if plan.evaluator == "coco":  # the first validation your command runs: its predictions kept
        from ultralytics.models.yolo.detect.val import DetectionValidator
        from ultralytics.utils import ops

        from . import coco_eval

        capture = coco_eval.Capture()
        restore = capture.ultralytics_class(DetectionValidator, ops.scale_boxes)
    Model.val = val
    try:
        if Path(argv[0]).name in ("yolo", "ultralytics"):
            from ultralytics import cfg

            sys.argv[:] = ["yolo", *argv[1:]]  # the CLI reads the argv list it saw at import (cfg.ARGV)
            cfg.ARGV = sys.argv
            cfg.entrypoint()
        elif Path(argv[0]).name.startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
            sys.argv = argv[1:]
            runpy.run_path(argv[1], run_name="__main__")
        else:
            raise ValueError("the command is neither `yolo val ...` nor `python SCRIPT.py` (a script calling "
                             "model.val()): give it as `-- yolo val model=... data=...`")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise ValueError(f"your command exited with status {exc.code}") from None
    finally:
        Model.val = original_val
        first_validator = restore() if restore is not None else None
    if not calls:
        raise ValueError("your command ran no Ultralytics validation (model.val() / yolo val)")
    if len(calls) > 1:
        notes.append(f"your command validated {len(calls)} times: the first is explained")
    model_class, task, model_overrides, given = calls[0]
    runs = _session.current().extra[KEY]["runs"]
    scratch = Path(plan.result).parent / "val"
    fuse = {"fuse": True, "first": True}
    backend = _validator.AutoBackend

    def evaluate(overrides: Mapping[str, Any]) -> Dict[str, Any]:
        if not overrides and fuse.pop("first", False):
            record = runs[0]  # the user's own evaluation, as their command ran it
        else:
            arguments = {**given, **overrides}
            weights = arguments.pop("model", None) or model_overrides.get("model")
            arguments.update(project=str(scratch), name="exp", exist_ok=True, plots=False, save_json=False)
            _validator.AutoBackend = backend if fuse["fuse"] else functools.partial(backend, fuse=False)
            try:
                original_val(model_class(str(weights), task=task), **arguments)
            finally:
                _validator.AutoBackend = backend
            record = runs[-1]
        settings = dict(record["settings"])
        settings["weights_dtype"] = _checkpoint_dtype(settings.get("weights")) or settings.get("weights_dtype")
        return {"metrics": dict(record["metrics"]), "settings": settings, "evaluator": record.get("evaluator")}

    def fp32(yours_settings: Mapping[str, Any]) -> Optional[str]:
        return _fp32_checkpoint(plan, yours_settings.get("weights"), notes)

    def unfused(overrides: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        if "fuse" not in inspect.signature(backend).parameters:
            return None
        fuse["fuse"] = False
        try:
            return evaluate(overrides)
        finally:
            fuse["fuse"] = True

    options = dict(ULTRALYTICS_OPTIONS)
    if "half" not in DEFAULT_CFG_DICT:
        options.pop("half")  # replaced by quantize=16: not a bool to align with (said as not alignable)
    result = _explained(plan.settings, evaluate, options, fp32, plan.logged_metrics, unfused,
                        "Ultralytics' AutoBackend folds each Conv's BatchNorm into its weights (other float "
                        "rounding); the training validates the unfused EMA; yolo val has no argument for it",
                        "ultralytics")
    if eval_exported.is_export(result["yours"]["settings"].get("weights")):
        # the validated checkpoint through the same validator: with your settings (square, the export's batch),
        # then with only rect aligned (what the validator forces away for a static export)
        # (a dynamic export keeps rect: then the rect run is the one at your settings)
        same = {"model": plan.checkpoint, "rect": False, "batch": result["yours"]["settings"].get("batch_size")}
        result["pt_runs"] = {"square": evaluate(same)["metrics"], "rect": evaluate({**same, "rect": True})["metrics"],
                             "how": f"yolo val of {Path(plan.checkpoint).name}, rect=False then rect=True"}
    if first_validator is not None:
        from . import coco_eval

        matching, curve = _ultralytics_probes(first_validator)
        names = first_validator.names
        names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
        files = [str(f) for f in first_validator.dataloader.dataset.im_files]
        rules = eval_gap.release_rules("ultralytics", matching, curve, space=capture.space)
        result["coco"] = coco_eval.report(capture, files, names, "ultralytics", rules, result["yours"]["metrics"],
                                          bool(first_validator.args.single_cls), str(first_validator.args.data))
        if result["yours"].get("evaluator"):
            result["coco"]["release_metrics"]["evaluator"] = result["yours"]["evaluator"]
    return result


def _first_module(prefix: str, names: Any) -> Any:
    for name in names:
        try:
            return importlib.import_module(prefix + name)
        except ModuleNotFoundError as exc:
            if exc.name not in (prefix + name, name):
                raise
    raise ModuleNotFoundError(f"no {' or '.join(names)}.py in the run's YOLOv5 tree")


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if mapping.get(key) is not None:
            value = mapping[key]
            return value[0] if isinstance(value, (list, tuple)) else value
    return None


def _as_row(results: Any) -> Any:
    import numpy as np

    return np.array(results).reshape(1, -1)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))


__all__ = ["Plan", "Rerun", "RerunError", "ULTRALYTICS_OPTIONS", "YOLOV5_OPTIONS", "explain", "reproduce", "rerun"]
