"""The calls a patched YOLOv5-family ``train.py`` makes (``yolo-det apply-patch``).

The patch only inserts calls to these functions, so everything they do lives here: a patched
script picks up fixes by upgrading yolo-det, and ``revert-patch`` has little to undo. Every
function tolerates the shapes of the releases the patch targets (v5.0 ... master, PyPI
``yolov5``, yolov7, FFCA-YOLO): ``opt`` restored by ``--resume`` from a run started before the
patch has no ``deterministic``/``fingerprint``/``seed``; ``hyp`` may be a dict or None.

Over 800 lines on purpose: this is the patch's contract, every call a patched ``train.py`` makes, and they share
the run's state (the session, the resume state, the evolve generation); the tree checks, world size and
evaluation calls live in ``tree``, ``world`` and ``evaluation``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import functools
import inspect
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, MutableMapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ...core import env_names
from ...core import atomic, environment, nms_limit, roles, run_facts, search, seeding, streams
from ...session import DeterminismSetupError, Session, backward_context, configure, current
from ...core.mode import SOURCE_LABELS, ConfigError, is_yolo_det_key
from ...core.mode import pop_hyp_keys as _pop_keys
from ...core.mode import resolve as _resolve
from ...record import fingerprint
from ...record.log import rank_path
from ...record.run_folder import LOG_NAME, REPORT_NAME, WEIGHTS, generation_log_name
from ...proof import search as search_proof
from .. import label_caches, metric_labels
from .. import resume as _resume
from . import world as _world
from .tree import allow_full_checkpoint_loads, check_patched_modules
from .world import micro_batches, multi_scale_stream, world_loss  # noqa: F401 - called by the patched train.py
from .evaluation import add_eval_arguments, add_mode_options, evaluated, evaluation_start  # noqa: F401

# Imported by the patched train.py before it touches CUDA: on torch 1.7-2.9 set
# CUBLAS_WORKSPACE_CONFIG now, in time for the cuBLAS handles the run will create.
environment.prepare_cublas()

FINGERPRINT_ENV = env_names.FINGERPRINT
_EXTRA = "yolov5"

# deterministic* keys of the hyp YAML loaded last outside train(): evolve and v5.0-style
# scripts load the file once and pass train() copies that no longer hold them.
_hyp_keys: Dict[str, Any] = {}
_exit_hook = False
_epochs: Optional[int] = None  # opt.epochs of the run, to tell an early stop from the last epoch
_last_val_epoch: Optional[int] = None
# The parser's default --hyp: PyPI 7.0's train() replaces opt.hyp with the loaded dict before start().
_hyp_default: Optional[str] = None
_run = None  # the _Run of the current train() call (resume state, sampler, sidecar writer)
_fresh: Dict[str, Any] = {}  # name: (path, existed at main()'s ddp_launch), what _fail may remove


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--deterministic``, ``--fingerprint``, ``--virtual-world-size`` and, where the release has none, ``--seed``.

    ``--deterministic`` defaults to None so the hyp YAML key, ``YOLO_DET_DETERMINISTIC`` or the
    default (warn) can decide. Options the script already defines are left alone.
    """
    global _hyp_default
    existing = getattr(parser, "_option_string_actions", {})
    hyp_action = existing.get("--hyp")
    if hyp_action is not None and isinstance(hyp_action.default, (str, os.PathLike)):
        _hyp_default = str(hyp_action.default)
    group = add_mode_options(parser, "strict: every op deterministic or an error; warn: deterministic where "
                                     "possible, each nondeterministic op reported; off: fastest. Default: the hyp "
                                     "YAML's 'deterministic:', else $YOLO_DET_DETERMINISTIC, else warn",
                             f"write per-step fingerprints to PATH (JSONL; sets ${FINGERPRINT_ENV}) "
                             "for yolo-det diff / verify")
    if "--virtual-world-size" not in existing:
        group.add_argument("--virtual-world-size", type=int, default=None, metavar="V",
                           help="train the run V GPUs with batch/V images each would make, on any number of processes "
                                "dividing V (docs/world_size.md; default: the hyp YAML's 'virtual_world_size:', else "
                                "$YOLO_DET_VIRTUAL_WORLD_SIZE, else off)")
    handed = _handed_seed()
    if "--seed" not in existing:
        group.add_argument("--seed", type=int, default=handed,
                           help="global training seed, applied as seed + 1 + RANK like YOLOv5 v6.2+ "
                                f"(added by yolo-det; default: ${roles.TRAIN_SEED_ENV}, else the release's own seeding)")
    elif handed is not None:  # yolo-det run --seed / yolo-det seeds: the seed when the command gives none
        existing["--seed"].default = handed
    _refuse_unsaved_resume(sys.argv[1:])
    return parser


def _refuse_unsaved_resume(argv: Sequence[str]) -> None:
    """``--resume PATH`` of a yolo-det run killed before its first save completed: exit 2 with why (the release
    would stop on a missing file); nothing is trained."""
    path = None
    for i, arg in enumerate(argv):
        if arg.startswith("--resume="):
            path = arg.split("=", 1)[1]
        elif arg == "--resume" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            path = argv[i + 1]
    why = _resume.unsaved(path) if path else None
    if why:
        print(f"yolo-det: error: {why}", file=sys.stderr, flush=True)
        raise SystemExit(2)  # EXIT_USAGE: a refusal, nothing trained


def _handed_seed() -> Optional[int]:
    """``$YOLO_DET_TRAIN_SEED`` (set by ``yolo-det run --seed`` and ``yolo-det seeds``); a bad value exits 2."""
    try:
        return roles.train_seed()
    except ValueError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def pop_hyp_keys(hyp: Any) -> Dict[str, Any]:
    """Remove the ``deterministic*`` keys from a freshly loaded hyp dict; remember them for :func:`start`.

    YOLOv5's ``--evolve`` mutates and ``%g``-formats every hyp key, so they must leave the dict.
    """
    global _hyp_keys
    popped = _pop_keys(hyp) if isinstance(hyp, MutableMapping) else {}
    _hyp_keys = dict(popped)
    return popped


def start(opt: Any, hyp: Any = None, *, init_seed: Optional[int] = None, reseed: bool = False) -> Session:
    """Apply the determinism mode right after the release's ``init_seeds(...)``.

    Resolves ``--deterministic`` > hyp YAML keys (from ``hyp`` or the last file load) >
    ``$YOLO_DET_DETERMINISTIC`` > warn, and records which source won. ``init_seed`` is the value
    the release seeded with. With ``reseed`` (releases without their own ``--seed``) a
    ``--seed S`` the user passed re-seeds everything with ``S + 1 + RANK``. ``--fingerprint``
    sets ``$YOLO_DET_FINGERPRINT`` before the session starts. A bad value exits with status 2.
    """
    keys = dict(_hyp_keys)
    if isinstance(hyp, MutableMapping):
        keys.update(_pop_keys(hyp))  # train() loaded the file itself, or --resume restored a saved dict
    log_path = getattr(opt, "fingerprint", None)
    if log_path:
        os.environ[FINGERPRINT_ENV] = str(log_path)
    rank = _rank()
    user_seed = getattr(opt, "seed", None) if reseed else None
    seed = None if user_seed is None else int(user_seed) + 1 + rank
    caller = sys._getframe(1)
    script = _script(caller)
    allow_full_checkpoint_loads(caller.f_globals)
    global _run
    _run = _Run.for_opt(opt)
    mode = getattr(opt, "deterministic", None)
    try:
        mode, resumed_mode = _run.mode(mode, keys, _hyp_name(opt))
        session = configure(mode, hyp=keys, hyp_name=_hyp_name(opt), seed=seed, rank=rank,
                            repo=None if script is None else Path(script).parent,
                            virtual_world_size=getattr(opt, "virtual_world_size", None),
                            fingerprint=getattr(opt, "fingerprint_mode", None))
        run_seed = getattr(opt, "seed", None)
        role_record = roles.record(None if run_seed is None else int(run_seed))
        roles.check_mode(session.settings.mode)
        world = _virtual_world(session, opt, caller)
    except (ConfigError, ValueError, DeterminismSetupError) as exc:  # a refusal before training: portable's pins
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    check_patched_modules(script, session.settings.mode, _fail)
    if resumed_mode:
        session.settings = dataclasses.replace(
            session.settings, sources={**session.settings.sources, "deterministic": "resume"})
    if seed is None:
        session.seed = init_seed
    if world is not None:
        applied = world.reseed(rank)
        session.seed = applied if applied is not None else session.seed
        session.world_plan = world.plan  # the fingerprint header records V
        world.record_header()
    if "init" in role_record["overridden"]:  # before the model is built: its weights come from the init seed
        applied = session.seed if session.seed is not None else int(run_seed or 0)
        role_record["init_applied"] = roles.reseed_init(role_record["init"], applied, run_seed, rank)
    session.extra["seeds"] = role_record
    session.extra[_EXTRA] = _run_info(opt, script, seed_from="--seed" if seed is not None else "init_seeds")
    if world is not None:
        session.extra[_EXTRA]["world"] = world.describe()
    if _world.cpu_world():
        session.extra[_EXTRA]["ddp"] = {"backend": "gloo", "device": "cpu", "world_size": _world.cpu_world(),
                                        "launched_by": "torchrun", "rank": max(rank, 0)}
    global _epochs, _last_val_epoch
    _epochs, _last_val_epoch = _int_or_none(getattr(opt, "epochs", None)), None
    _record_setup(session, hyp)
    _record_generation(opt, session)
    _announce(session)
    _run.announce(session)  # a strict resume that cannot be exact stops here (exit 2), before anything is written
    if session.is_main and session.settings.mode != "off" and not getattr(opt, "evolve", None) and \
            getattr(opt, "save_dir", None):  # before the first checkpoint: a lost first sidecar is known as lost
        _resume.mark_run(Path(opt.save_dir) / "weights", session.settings.to_dict())
    if getattr(opt, "save_dir", None):  # the run folder's own log (strict/warn unless fingerprint: off)
        try:  # evolve's generations share one folder: each its own fingerprint.gen<g>.jsonl
            name = generation_log_name(_generation_number(Path(opt.save_dir))) \
                if getattr(opt, "evolve", None) else LOG_NAME
            recorder = fingerprint.start_for_run(session, opt.save_dir, name)
        except ConfigError as exc:
            print(f"yolo-det: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        if recorder is not None and not os.environ.get(FINGERPRINT_ENV):  # new: a refused start removes it
            _fresh["the run's own fingerprint log"] = (recorder.path.resolve(), False)
    _register_exit_hook()
    label_caches.reset()
    label_caches.install_yolov5()  # label caches built from other label contents are not trusted
    return session


def _virtual_world(session: Session, opt: Any, caller: Any) -> Optional[_world.YoloV5World]:
    """The virtual world of this train() call (None without V); refuses V where the script cannot run it."""
    _world.begin(None)
    world, messages = _check_world(session.settings, opt, caller.f_code.co_names)
    for message in messages:
        if world is None or session.settings.mode == "warn":
            print(f"yolo-det: warning: {message}" + ("; training as usual" if world is None else ""),
                  file=sys.stderr)
        session.report.note(message)
    if world is None:
        return None
    world.size_validation(caller.f_globals)
    _world.begin(world)
    return world


def _check_world(settings: Any, opt: Any, names: Sequence[str]) -> Tuple[Optional[_world.YoloV5World], List[str]]:
    """(the world of ``settings``' V or None, what warn reports): raises :class:`ConfigError` for what strict refuses.

    ``names``: the names train() uses. A script whose patch has no micro-batch loop (``yolo_det_v5.micro_batches``:
    another tree shape, or patched by an older yolo-det) would train as usual, its result still a function of the
    number of processes, while its settings claimed otherwise: refused under strict, reported under warn."""
    v = settings.virtual_world_size
    if v is None:
        return None, []
    if "micro_batches" not in names:
        source = settings.sources.get("virtual_world_size", "default")
        message = (f"virtual_world_size {v} (from {source}) is not supported by this train.py: its patch has no "
                   "virtual micro-batch loop (a tree of another shape, or patched by an older yolo-det: revert and "
                   "apply the patch again), so its result would still depend on the number of processes. Remove "
                   "the setting to train here")
        if settings.mode == "strict":
            raise ConfigError(message)
        return None, [message]
    world = _world.YoloV5World(v, opt)
    return world, world.check(opt, settings.mode, None, "multi_scale_stream" in names)


def ddp_launch(launched: Any, opt: Any) -> bool:
    """The test of main()'s DDP block (inserted), the patch's first call at run time, before train() writes the run
    folder: refuses now (exit 2, nothing written) what :func:`start` would refuse about V, then
    :func:`yolov5_world.ddp_launch` (a CPU torchrun rank joins gloo)."""
    preflight(opt, sys._getframe(1).f_globals.get("train"))
    return _world.ddp_launch(launched, opt)


def preflight(opt: Any, train: Any = None) -> None:
    """Resolve the settings as :func:`start` will (``--deterministic``, the hyp YAML's keys, the environment, a
    resumed run's saved mode) and refuse (exit 2) a bad value or, under strict, a virtual world size the run cannot
    train invariantly. ``train``: the script's train(), whose names tell whether its patch has the V loop.
    Warnings wait for :func:`start`, which prints them once per train() call."""
    try:
        keys = _hyp_file_keys(getattr(opt, "hyp", None))
        mode, _ = _Run.for_opt(opt).mode(getattr(opt, "deterministic", None), keys, _hyp_name(opt))
        settings = _resolve(cli={"deterministic": mode, "virtual_world_size": getattr(opt, "virtual_world_size", None)},
                            hyp=keys, hyp_name=_hyp_name(opt))
        _check_world(settings, opt, getattr(getattr(train, "__code__", None), "co_names", ("micro_batches",)))
    except (ConfigError, ValueError) as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    allow_full_checkpoint_loads(sys._getframe(1).f_globals)
    global _fresh
    _fresh = _not_yet_there(opt)


def _not_yet_there(opt: Any) -> Dict[str, Any]:
    """The run folder and this process's fingerprint log, each with whether it exists now (before train()); one that
    does not stands for its outermost missing folder (``--project`` too, when the run will create it)."""
    paths = {}
    if getattr(opt, "save_dir", None):
        paths["run folder"] = Path(opt.save_dir).resolve()
    log = getattr(opt, "fingerprint", None) or os.environ.get(FINGERPRINT_ENV)
    if log:
        paths["fingerprint log"] = rank_path(Path(log).resolve(), _rank())
    there = {}
    for name, path in paths.items():
        existed = path.exists()
        while not existed and not path.parent.exists():
            path = path.parent
        there[name] = (path, existed)
    return there


def _hyp_file_keys(hyp: Any) -> Dict[str, Any]:
    """yolo-det's keys of ``--hyp`` (a dict after --resume, else a YAML file; one that cannot be read: none, the
    release says why when it loads it)."""
    if isinstance(hyp, (str, os.PathLike)):
        import yaml  # the release's dependency, not yolo-det's

        try:
            with open(hyp, errors="ignore") as f:
                hyp = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            hyp = None
    keys = {**_hyp_keys, **(hyp if isinstance(hyp, MutableMapping) else {})}
    return {key: value for key, value in keys.items() if is_yolo_det_key(key)}


def parallel(model: torch.nn.Module) -> torch.nn.Module:
    """After the release's DDP wrap (inserted): a CPU rank's DDP through the release's ``smart_DDP``, the world engine."""
    return _world.parallel(model, sys._getframe(1).f_globals.get("smart_DDP"))


def track(model: torch.nn.Module, ema: Any = None) -> torch.nn.Module:
    """Register the training model and its EMA (before DDP wrapping); strict swaps in replacements."""
    session = current()
    return session.track(model, ema) if session is not None else model


def backward(loss_items: Any = None) -> contextlib.AbstractContextManager:
    """Context for ``scaler.scale(loss).backward()``: the run's backward mode, alerts recorded.

    ``loss_items`` (the release's loss components) go to the fingerprint log when it is on; under a virtual
    world size only the process's first micro-batch's (the log holds what one GPU of the V-GPU run does), and the
    release logs the first micro-batch's after the loop (:func:`yolov5_world.log_as_first`).
    """
    _world.log_as_first(loss_items)
    if not _world.muted():
        return backward_context(loss_items)
    stack = contextlib.ExitStack()
    recorder = fingerprint.active()
    if recorder is not None and not recorder.closed:
        stack.enter_context(recorder.unrecorded_backward())
    stack.enter_context(backward_context(None))
    return stack


@contextlib.contextmanager
def seeded_loaders(opt: Any, start_epoch: Optional[int] = None) -> Iterator[None]:
    """Around the train loader's construction: seeded workers where the release has none, and
    (strict/warn) per-sample random streams.

    For releases whose ``create_dataloader`` passes neither ``worker_init_fn`` nor ``generator``
    (v5.0-v6.1) the loader gets seeded workers and a seeded generator: their InfiniteDataLoader
    starts its iterator, and so draws worker seeds, in ``__init__``. Explicit arguments win.
    Under strict and warn the first loader built in the block also samples through
    :class:`~yolo_det.core.streams.EpochSampler` and builds each sample under its own stream
    (:class:`~yolo_det.core.streams.SampleStreams`), so its batches depend on (seed, epoch, rank,
    world size) only: not on the number of workers, nor on whether the run was resumed.
    ``start_epoch`` is the epoch training starts at (the release's resume sets it before the loader).
    """
    seed = getattr(opt, "seed", None)
    seed = 0 if seed is None else int(seed)
    rank = _rank()
    session = current()
    role_seeds = session.extra.get("seeds") if session is not None else None
    order_seed, augment_seed = roles.seed_for(role_seeds, "order", seed), roles.seed_for(role_seeds, "augment", seed)
    virtual = _world.current()
    use_streams = session is not None and (session.settings.mode != "off" or virtual is not None)
    if start_epoch is None:
        start_epoch = _run.data_epoch() if _run is not None else 0
    loader_class = torch.utils.data.DataLoader
    original = loader_class.__init__
    signature = inspect.signature(original)
    built = []
    seeded_by = []
    stream_info: Dict[str, Any] = {}

    @functools.wraps(original)
    def seeded_init(self, *args, **kwargs):
        arguments = signature.bind_partial(self, *args, **kwargs).arguments
        arguments.pop("self", None)
        filled = False
        if arguments.get("worker_init_fn") is None:
            arguments["worker_init_fn"] = seeding.seed_worker
            filled = True
        if arguments.get("generator") is None:
            arguments["generator"] = seeding.make_generator(seed, rank)
            filled = True
        seeded_by.append("yolo-det" if filled else "release")
        if use_streams and not stream_info:
            problem = virtual.loader_batch_problem(arguments.get("batch_size")) if virtual is not None else None
            if problem:
                _fail(problem)
            stream_info.update(_with_streams(arguments, order_seed, int(start_epoch), augment_seed))
        if session is not None and not built:  # the workers the release settled on (min(cpus, batch, --workers))
            run_facts.record(session, workers=arguments.get("num_workers", 0))
        built.append(type(self).__name__)
        original(self, **arguments)

    loader_class.__init__ = seeded_init
    try:
        with _world.loading_train():
            yield
        if virtual is not None and not stream_info.get("on"):
            _fail(f"virtual_world_size {virtual.plan.virtual_world_size}: the train loader could not sample per "
                  f"virtual rank ({stream_info.get('why', 'no loader was built')}), so its data would depend on the "
                  "number of processes")
    finally:
        loader_class.__init__ = original
        if session is not None and _EXTRA in session.extra:
            by_us = "yolo-det" in seeded_by
            session.extra[_EXTRA]["train_loader"] = {
                "seeded_by": "yolo-det" if by_us else "release", "seed": seed, "rank": max(rank, 0),
                "worker_init_fn": "yolo_det.seed_worker" if by_us else "release", "loaders": built,
                "streams": {k: v for k, v in stream_info.items() if k != "sampler"} or None,
            }
        if _run is not None and stream_info.get("sampler") is not None:
            _run.sampler = stream_info["sampler"]


def _drop_own_log() -> None:
    """Stop and remove the run folder's own fingerprint log this process started (a refused start wrote nothing)."""
    entry = _fresh.pop("the run's own fingerprint log", None)
    if entry is not None:
        fingerprint.stop(closed_by="refused")
        Path(entry[0]).unlink(missing_ok=True)


def _fail(message: str) -> None:
    """Stop the run with status 2 and ``message`` (no traceback): a setting found unusable after train() began
    writing. The session ends unrecorded, and what this run created is removed: the run folder and fingerprint log
    that did not exist at main()'s :func:`ddp_launch` (an earlier run's folder or log is left alone)."""
    session = current()
    if session is not None:
        session.finish(None, echo=lambda _text: None)  # no determinism.json, the fingerprint log closed
    removed, kept = [], []
    fresh = dict(_fresh)
    _fresh.clear()
    for name, (path, existed) in fresh.items():
        if existed:
            kept.append(f"{name} {path} existed before this run: not removed")
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)  # every DDP rank may try; one succeeds
            removed.append(str(path))
        elif path.exists():
            path.unlink(missing_ok=True)
            removed.append(str(path))
    print(f"yolo-det: error: {message}", file=sys.stderr)
    if removed or kept:
        print("yolo-det: " + "; ".join(([f"removed what this run wrote: {', '.join(removed)}"] if removed else [])
                                       + kept), file=sys.stderr)
    raise SystemExit(2)


def _with_streams(arguments: Dict[str, Any], seed: int, start_epoch: int,
                  augment_seed: Optional[int] = None) -> Dict[str, Any]:
    """Rewrite DataLoader ``arguments`` to sample (epoch, index) items and seed per sample; describe it.
    ``seed`` seeds the epoch order, ``augment_seed`` (default: ``seed``) the per-sample streams (both
    are recorded in determinism.json's ``seeds``)."""
    augment_seed = seed if augment_seed is None else augment_seed
    dataset = arguments.get("dataset")
    sampler = arguments.get("sampler")
    if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset) or arguments.get("batch_sampler"):
        return {"on": False, "why": "no map-style dataset with a plain sampler"}
    rank, world, drop_last = 0, 1, False
    if sampler is None:
        shuffle = bool(arguments.get("shuffle"))
    elif isinstance(sampler, torch.utils.data.distributed.DistributedSampler):
        shuffle, rank, world, drop_last = sampler.shuffle, sampler.rank, sampler.num_replicas, sampler.drop_last
    else:
        return {"on": False, "why": f"custom sampler {type(sampler).__name__}"}
    virtual = _world.current()
    if virtual is not None:  # each virtual rank's images from (seed, epoch, v), whatever N
        stream_sampler = virtual.sampler(len(dataset), seed, shuffle, start_epoch, drop_last)
    else:
        stream_sampler = streams.EpochSampler(len(dataset), seed, shuffle, start_epoch, rank, world, drop_last)
    arguments["dataset"] = streams.SampleStreams(dataset, augment_seed)
    arguments["sampler"] = stream_sampler
    arguments["shuffle"] = False
    described = {"on": True, "seed": seed, "start_epoch": start_epoch, "shuffle": shuffle, "rank": rank,
                 "world_size": world, "samples": len(dataset), "sampler": stream_sampler}
    if virtual is not None:
        described["virtual_world_size"] = virtual.plan.virtual_world_size
    return described


def resume_point(start_epoch: int, optimizer: Any = None, scaler: Any = None, last_opt_step: Any = None) -> Any:
    """Right before the epoch loop: remember the optimizer and GradScaler for the resume state; on
    ``--resume``, check the sidecar against what the release restored and apply it (full-precision
    model and EMA, GradScaler, main-process RNG states). Returns ``last_opt_step`` (the batch of the
    last optimizer step, which YOLOv5 restarts at -1) as the interrupted run left it, when restored."""
    session = current()
    if _run is None or session is None:
        return last_opt_step
    _run.optimizer, _run.scaler = optimizer, scaler
    if callable(getattr(scaler, "is_enabled", None)):  # AMP as the run uses it, after the release's check_amp
        run_facts.record(session, amp=scaler.is_enabled())
    if session.extra.get("model") is not None:  # the memory format the model trains in
        run_facts.record_fact(session, "memory_format", run_facts.memory_format(session.extra["model"]))
    applied = _run.apply(session, int(start_epoch))  # first: a refused resume writes nothing into the run folder
    info = session.extra.get(_EXTRA) or {}
    label_caches.write_manifest(info.get("save_dir"), info.get("data"))  # loaders built: a killed run keeps it
    if applied:
        saved = (_run.state or {}).get("extra", {}).get("last_opt_step")
        if saved is not None and last_opt_step is not None:
            return type(last_opt_step)(saved)
    return last_opt_step


def stage(checkpoint: os.PathLike) -> Any:
    """Where the release writes ``last.pt`` (inserted before ``torch.save(ckpt, last)``): ``last.pt.partial``
    under strict/warn, put in place by :func:`save_state` once its sidecar is on disk; else ``checkpoint``."""
    session = current()
    if _run is None or session is None or not session.is_main or session.settings.mode == "off":
        return checkpoint
    staged = _resume.staged_path(checkpoint)
    return str(staged) if isinstance(checkpoint, str) else staged


def save_state(checkpoint: os.PathLike, epoch: int, last_opt_step: Any = None) -> Any:
    """After the release wrote ``checkpoint`` (``last.pt``, or ``last.pt.partial`` from :func:`stage`) for
    ``epoch``: write its resume sidecar (strict/warn), then rename a staged checkpoint into place; for
    ``verify --resume-at``, the run info (also under off: the release's own resume). Returns ``last.pt``."""
    final: Any = _resume.final_path(checkpoint)
    if isinstance(checkpoint, str):
        final = str(final)
    session = current()
    if _run is None or session is None or not session.is_main:
        return final
    staged = Path(checkpoint) if Path(checkpoint) != Path(final) else None
    if session.settings.mode != "off":
        _run.save(session, Path(final), int(epoch), last_opt_step, staged=staged)
    elif staged is not None:  # pragma: no cover - stage() stages only under strict/warn
        atomic.replace(staged, final)
    checkpoint = Path(final).resolve()
    _resume.write_run_info(checkpoint=checkpoint, epochs_done=int(epoch) + 1, epochs=_epochs, release="yolov5",
                           resume_command=_resume.python_command("--resume", str(checkpoint)))
    return final


def placed(checkpoint: os.PathLike) -> Any:
    """After the release saved a checkpoint :func:`stage` named (``best.pt.partial``): renamed into place (if it
    was written); returns the checkpoint's own name."""
    final: Any = _resume.final_path(checkpoint)
    if Path(checkpoint) != Path(final) and Path(checkpoint).is_file():
        atomic.replace(checkpoint, final)
    return str(final) if isinstance(checkpoint, str) else final


def saves_done() -> None:
    """After the epoch loop (before the release strips ``last.pt``): the last save's sidecar is on disk and its
    checkpoint in place."""
    if _run is not None:
        _run.wait()


def epoch_end(epoch: int) -> None:
    """End of an epoch (every rank): DDP ranks other than 0 write their RNG states beside the checkpoint;
    stop cleanly when ``$YOLO_DET_STOP_AFTER_EPOCH`` says this many epochs are done
    (``yolo-det verify --resume-at``); the sidecar is on disk first. The epoch's last step goes into the
    fingerprint log in full (per-tensor records at each epoch end, also under ``--noval``)."""
    fingerprint.epoch_end()
    session = current()
    if _run is not None and session is not None and not session.is_main and session.settings.mode != "off":
        _run.save_rank(session, int(epoch))
    stop = _resume.stop_epoch()
    if stop is None or int(epoch) + 1 != stop:
        return
    if _run is not None:
        _run.wait()
    fingerprint.set_validation_stop(False)  # stopped to be resumed, not early stopping: as the uninterrupted run
    _resume.write_run_info(stopped_after_epoch=stop)
    print(f"yolo-det: stopping after epoch {stop} as ${_resume.STOP_ENV} asks (resume with the release's "
          "--resume)", flush=True)
    raise SystemExit(0)


class _Run:
    """One train() call's resume business: the sidecar read on --resume, the sampler, the writer."""

    def __init__(self, checkpoint: Optional[Path] = None, state: Optional[Dict[str, Any]] = None,
                 problems: Optional[list] = None) -> None:
        self.checkpoint, self.state = checkpoint, state
        self.problems = list(problems or [])
        self.refused = False  # a strict resume refused: the run folder's determinism.json stays the run's
        self.sampler: Optional[streams.EpochSampler] = None
        self.optimizer: Any = None
        self.scaler: Any = None
        self.writer = _resume.Writer()
        self.session: Optional[Session] = None
        self.best_epoch: Optional[int] = None  # the epoch whose validation just became the best (best.pt follows)
        self.state_path: Optional[Path] = None  # the sidecar resumed from (the previous one after a kill mid-save)
        self.mismatch: Optional[str] = None  # no sidecar was written with this checkpoint (by digest)

    @classmethod
    def for_opt(cls, opt: Any) -> "_Run":
        """Read the sidecar of the checkpoint ``--resume`` restarts from (YOLOv5 sets opt.weights to it)."""
        weights = getattr(opt, "weights", None)
        if not getattr(opt, "resume", False) or not isinstance(weights, (str, os.PathLike)) or not weights:
            return cls()
        checkpoint = Path(weights)
        if not checkpoint.is_file():
            return cls()
        found = _resume.consistent_state(checkpoint)
        run = cls(checkpoint, found["state"], problems=[] if found["state"] is not None else found["problems"])
        run.state_path, run.mismatch = found["path"], found.get("mismatch")
        return run

    @property
    def resuming(self) -> bool:
        return self.checkpoint is not None

    def data_epoch(self) -> int:
        return int(self.state["data"]["next_epoch"]) if self.state is not None else 0

    def mode(self, mode: Optional[str], keys: Dict[str, Any], hyp_name: str):
        """(mode, saved with the run?): a resumed run keeps the saved mode (the sidecar's, else what the run's
        weights folder recorded when training started) when nothing else sets one."""
        saved = (self.state or {}).get("settings") or {}
        if not saved and self.checkpoint is not None:
            saved = _resume.marked_settings(self.checkpoint)
        if mode is not None or not saved.get("mode") or saved.get("mode_source") in (None, "default"):
            return mode, False
        if _resolve(cli={}, hyp=keys, hyp_name=hyp_name).source != "default":
            return mode, False
        return saved["mode"], True

    def announce(self, session: Session) -> None:
        self.session = session
        if not self.resuming or not session.is_main or session.settings.mode == "off":
            return
        if session.settings.source == "resume":
            where = (_resume.sidecar_path(self.checkpoint).name if self.state is not None
                     else f"{self.checkpoint.parent.name}/{_resume.MARKER}")
            print(f"yolo-det: resumed run keeps determinism {session.settings.mode} (saved in {where}; set "
                  "YOLO_DET_DETERMINISTIC to override)")
        if self.problems:
            self._refuse_or_warn(session, self.problems)

    def _refuse_or_warn(self, session: Session, problems: list) -> None:
        self._record(session, exact=False, problems=problems)
        text = "; ".join(problems)
        if session.settings.mode == "strict" and not _resume.inexact_allowed():
            self.refused = True
            _drop_own_log()  # nothing of the refused attempt stays in the run folder
            print(f"yolo-det: error: {_resume.refusal(text, self.checkpoint, self._resume_anyway(session))}",
                  file=sys.stderr, flush=True)
            raise SystemExit(2)  # EXIT_USAGE: a refusal, nothing trained
        print(f"yolo-det: resume not exact: {text}; it resumes as the release does", flush=True)

    def _resume_anyway(self, session: Session) -> str:
        """How to resume this run under warn: --resume rebuilds opt from the run's opt.yaml, ignoring new flags."""
        source = session.settings.source
        if source == "cli":
            folder = _resume.run_folder(self.checkpoint)
            return (f"set deterministic: warn in {folder / 'opt.yaml'} (--resume takes the mode from there and "
                    "ignores a new --deterministic)")
        if source == "hyp":
            return "set deterministic: warn in the run's hyp YAML"
        return "run it again with YOLO_DET_DETERMINISTIC=warn"

    def _record(self, session: Session, exact: bool, problems: list) -> None:
        session.extra["resume"] = {"checkpoint": str(self.checkpoint), "exact": exact, "problems": list(problems),
                                   "sidecar": str(_resume.sidecar_path(self.checkpoint))}

    def apply(self, session: Session, start_epoch: int) -> bool:
        state = self.state
        if not self.resuming or state is None or session.settings.mode == "off":
            return False
        from ...record.sources import ema_module, unwrap

        model = unwrap(session.extra.get("model"))
        ema_obj = session.extra.get("ema")
        ema = ema_module(ema_obj) if ema_obj is not None else None
        problems = []
        if int(state["epoch"]) + 1 != start_epoch:
            problems.append(f"the resume state was saved after epoch {int(state['epoch']) + 1}, the checkpoint "
                            f"resumes after epoch {start_epoch}")
        for saved, module, what in ((state.get("model"), model, "model"), (state.get("ema"), ema, "EMA")):
            why = _resume.weight_mismatch(saved, module, what)
            if why:
                problems.append(why)
        # Gradient accumulation: YOLOv5 zeroes the gradients at every epoch start, and last_opt_step comes
        # back through resume_point()'s return value; v5.0-style releases step on ni % accumulate.
        updates = getattr(ema_obj, "updates", None)
        if state.get("ema_updates") is not None and updates is not None and int(updates) != state["ema_updates"]:
            problems.append(f"the EMA has {updates} updates, the resume state {state['ema_updates']}")
        rng = _resume.rank_rng(self.checkpoint, state, session.rank)
        if isinstance(rng, str):
            problems.append(rng)
        if not problems and self.mismatch:
            problems.append(self.mismatch)
        if problems:
            self._refuse_or_warn(session, [f"{_resume.sidecar_path(self.checkpoint).name} does not match "
                                           f"{self.checkpoint.name}: " + "; ".join(problems)])
            return False
        if self.state_path is not None:  # killed between the sidecar and the checkpoint: the previous pair
            _resume.adopt_previous(self.checkpoint, self.state_path)
        _resume.load_module(model, state.get("model"))
        _resume.load_module(ema, state.get("ema"))
        caches = state.get("caches") or {}
        _resume.load_module_caches(model, caches.get("model"))
        _resume.load_module_caches(ema, caches.get("ema"))
        if state.get("optimizer") is not None and self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler") and self.scaler is not None and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        _resume.set_rng_state(rng)
        _resume.continue_fingerprint(state)
        self._record(session, exact=True, problems=[])
        session.extra["resume"]["epoch"] = start_epoch
        if session.is_main:
            print(f"yolo-det: resumed exactly after epoch {start_epoch}: full-precision model and EMA, RNG states "
                  f"and the data stream from {_resume.sidecar_path(self.checkpoint).name}")
        return True

    def save(self, session: Session, checkpoint: Path, epoch: int, last_opt_step: Any = None,
             staged: Optional[Path] = None) -> None:
        from ...record.sources import ema_module, unwrap

        error = self.writer.wait()
        if error is not None:
            print(f"yolo-det: warning: the previous resume state could not be written: {error}")
        ema_obj = session.extra.get("ema")
        data = {}
        if self.sampler is not None:
            data = {"seed": self.sampler.seed, "shuffle": self.sampler.shuffle, "samples": self.sampler.n,
                    "world_size": self.sampler.world_size}
        state = _resume.capture(
            epoch=epoch, next_epoch=epoch + 1, model=unwrap(session.extra.get("model")),
            ema=ema_module(ema_obj) if ema_obj is not None else None, ema_updates=getattr(ema_obj, "updates", None),
            optimizer=self.optimizer, save_optimizer=False,  # YOLOv5 keeps the optimizer in fp32 itself
            cadence=_resume.cadence(session), reuse=self.writer.last,
            scaler=self.scaler, settings=session.settings.to_dict(), data=data, checkpoint=checkpoint,
            extra={"release": "yolov5", "last_opt_step": None if last_opt_step is None else int(last_opt_step)})
        # best.pt is saved from the same checkpoint right after last.pt when this epoch's validation is the best
        best = checkpoint.with_name("best.pt") if self.best_epoch == epoch else None
        self.writer.write(_resume.sidecar_path(checkpoint), state, best=best, staged=staged)

    def save_rank(self, session: Session, epoch: int) -> None:
        """A DDP rank other than 0: its RNG states beside the run's ``last.pt`` (rank 0 writes the checkpoint)."""
        save_dir = session.extra.get(_EXTRA, {}).get("save_dir")
        if save_dir is None:
            return
        try:
            _resume.write_rank_state(Path(save_dir) / "weights" / "last.pt", epoch, session.rank)
        except OSError as exc:
            print(f"yolo-det: warning: rank {session.rank}'s resume state could not be written: {exc}")

    def wait(self) -> None:
        error = self.writer.wait()
        if error is not None:
            print(f"yolo-det: warning: the resume state could not be written: {error}")


def nms_time_limit(time_limit: float) -> float:
    """The time limit the release's ``non_max_suppression`` applies (inserted after its ``time_limit = ...``).

    None under strict and warn (results must not depend on the clock; a batch that would have
    been cut is reported once), the release's own under off or outside a yolo-det run.
    """
    session = current()
    if session is None:
        return time_limit
    return nms_limit.time_limit(session.settings.mode, time_limit, session.extra, "yolov5 utils/general.py",
                                echo=_print_main(session))


def nms_output(output: Any) -> None:
    """The predictions of one NMS batch (inserted before its ``return``), for the log's validation record."""
    fingerprint.record_predictions(output)


def validated(epoch: Any, results: Any, fi: Any, best_fitness: Any) -> None:
    """After a validation (inserted after ``fi = fitness(...)``): metrics, fitness and best for the fingerprint log.

    ``results`` starts with P, R, mAP50, mAP50-95; ``best`` means this epoch's checkpoint is saved as
    best.pt (``fi`` reaches the best fitness so far, which the release updates right after).
    """
    global _last_val_epoch
    best = bool(_float(fi) >= _float(best_fitness))
    if _run is not None:
        _run.best_epoch = _int_or_none(epoch) if best else None
    if fingerprint.active() is None:
        return
    _last_val_epoch = _int_or_none(epoch)
    frame = sys._getframe(1)
    settings = _validation_settings(frame)
    fingerprint.record_validation(_last_val_epoch, validation_metrics(results, fi), best=best, settings=settings,
                                  evaluator=metric_labels.yolov5(frame.f_globals, settings))


def validation_metrics(results: Any, fi: Any) -> Dict[str, float]:
    """A validation record's metrics from the release's ``results`` (P, R, mAP50, mAP50-95, ...) and fitness."""
    metrics = dict(zip(("precision", "recall", "mAP50", "mAP50-95"), (_float(v) for v in list(results)[:4])))
    metrics["fitness"] = _float(fi)
    return metrics


def _validation_settings(frame: Any) -> Optional[Dict[str, Any]]:
    """What train() just validated with, from its locals: the EMA, the val loader (batch, rect shapes), ``half``
    (``amp`` on CUDA), ``single_cls``, the release's ``val.run``/``test.test`` defaults for conf/iou/max_det."""
    from ...evaluation import settings as eval_settings

    local, module = frame.f_locals, frame.f_globals
    loader = local.get("val_loader") if local.get("val_loader") is not None else local.get("testloader")
    opt = local.get("opt")
    device = local.get("device")
    on_cuda = getattr(device, "type", "cpu") != "cpu"
    validate = module.get("validate") if module.get("validate") is not None else module.get("test")
    run = getattr(validate, "run", None) or getattr(validate, "test", None)
    dataset = getattr(loader, "dataset", None)
    values = {"batch_size": getattr(loader, "batch_size", None), "imgsz": getattr(dataset, "img_size", None),
              "half": bool(local.get("amp", on_cuda)) and on_cuda, "model": getattr(local.get("ema"), "ema", None),
              "dataloader": loader, "single_cls": local.get("single_cls", getattr(opt, "single_cls", None)),
              "augment": False, "task": "val", "pad": 0.5, "rect": getattr(dataset, "rect", None),
              **(run_defaults(run) if callable(run) else {})}
    try:
        return eval_settings.from_yolov5(values, data=getattr(opt, "data", None))
    except Exception as exc:  # noqa: BLE001 - a tree of another shape: the record goes without settings
        print(f"yolo-det: warning: the validation's settings could not be recorded ({type(exc).__name__}: {exc})")
        return None


def run_defaults(function: Any) -> Dict[str, Any]:
    """``conf_thres``, ``iou_thres``, ``max_det`` as the release's validation function defaults them."""
    parameters = inspect.signature(function).parameters
    return {name: parameters[name].default for name in ("conf_thres", "iou_thres", "max_det")
            if name in parameters and parameters[name].default is not inspect.Parameter.empty}


def finish(opt: Any = None, save_dir: Optional[os.PathLike] = None) -> Optional[Path]:
    """End of training: print the violation report (rank 0), write ``determinism.json`` into the run's save_dir; the
    resume state a finished run no longer uses removed (``$YOLO_DET_KEEP_RESUME=1`` keeps it)."""
    session = current()
    if session is None:
        return None
    if _run is not None:
        _run.wait()
    world = _world.current()
    if world is not None and _EXTRA in session.extra:
        session.extra[_EXTRA]["world"] = world.describe()
    _world.begin(None)
    target = save_dir if save_dir is not None else getattr(opt, "save_dir", None)
    if _last_val_epoch is not None and _epochs is not None:  # the release stops early right after a validation
        fingerprint.set_validation_stop(_last_val_epoch + 1 < _epochs)
    if _EXTRA in session.extra:
        session.extra[_EXTRA]["finished"] = True
        label_caches.write_manifest(target, session.extra[_EXTRA].get("data"), again=False)
    if session.is_main and target is not None:  # train() reached its end: a finished run is not resumed
        _resume.finish_completed(Path(target) / WEIGHTS)
    path = session.finish(target)
    if path is not None:
        print(f"yolo-det: wrote {path}")
    return path


# -- --evolve ----------------------------------------------------------------------------------
_generation: Optional[search.GenerationRecord] = None  # the generation the next evolve_rng() serves


def evolve_start(opt: Any) -> None:
    """Start of the evolve branch (master's genetic algorithm): under strict/warn seed ``random`` and
    ``np.random`` from the search seed, so the initial population is a function of it."""
    mode, seed = _search_settings(opt)
    if mode != "off":
        random.setstate(search.generation_python_random(seed, 0, search.START).getstate())
        np.random.set_state(search.generation_random_state(seed, 0, search.START).get_state())


def evolve_generation(opt: Any, results: Any = None) -> None:
    """Before a generation's parent selection (inserted first in ``if <results>.exists():``).

    The generation is the number of rows already in ``results`` (evolve.csv / evolve.txt), so a
    search continued in the same folder goes on with the same sequence. Under strict/warn Python's
    ``random`` (the parent selection) is seeded from (seed, generation). Each trial's :func:`start`
    records the generation's seeding in ``search_seeds.jsonl``.
    """
    global _generation
    mode, seed = _search_settings(opt)
    generation = _rows(results) if results is not None else 1
    _generation = search.generation_record(seed, generation, mode)
    if mode != "off":
        random.setstate(search.generation_python_random(seed, generation).getstate())


#: The results files of an evolve folder, newest layout first.
_EVOLVE_RESULTS = ("evolve.csv", "evolve.txt")


def _record_generation(opt: Any, session: Session) -> None:
    """In an --evolve run, record how this generation's trial is seeded (``search_seeds.jsonl`` beside
    the results; the generation is the rows written so far) and tell ``verify`` where the search is."""
    save_dir = getattr(opt, "save_dir", None)
    if not getattr(opt, "evolve", None) or not save_dir or _rank() > 0:
        return
    folder = Path(save_dir)
    _mode, seed = _search_settings(opt)
    search.append_record(folder, search.generation_record(seed, _generation_number(folder), session.settings.mode))
    search_proof.announce(folder, os.environ.get(FINGERPRINT_ENV))


def _generation_number(folder: Path) -> int:
    """The evolve generation about to train in ``folder``: the rows its results file holds so far."""
    results = next((folder / name for name in _EVOLVE_RESULTS if (folder / name).is_file()), None)
    return 0 if results is None else _rows(results)


def evolve_rng(npr: Any) -> Any:
    """The generator the mutation draws from (inserted after the release's clock reseed ``npr.seed(...)``).

    Under strict/warn a ``RandomState`` derived from (seed, generation); under off ``npr`` itself,
    reseeded from the wall clock as the release does.
    """
    record = _generation
    if record is None:  # evolve_generation() did not run (a loop of another shape): the release's generator
        return npr
    return search.generation_random_state(record.search_seed, record.generation) if record.seeded else npr


def _search_settings(opt: Any) -> tuple:
    """(mode, seed) of a search: the mode as start() resolves it, the seed from --seed, $YOLO_DET_SEED or 0."""
    session = current()
    if session is not None:
        mode = session.settings.mode
    else:
        try:
            mode = _resolve(cli={"deterministic": getattr(opt, "deterministic", None)}, hyp=_hyp_keys,
                            hyp_name=_hyp_name(opt)).mode
        except ConfigError as exc:
            print(f"yolo-det: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    seed = getattr(opt, "seed", None)
    if seed is None:
        seed = os.environ.get(env_names.SEED) or 0
    return mode, int(seed)


def _rows(results: Any) -> int:
    """Data rows in an evolve results file (evolve.csv has a header line, evolve.txt none)."""
    try:
        lines = [line for line in Path(results).read_text(encoding="utf-8", errors="replace").splitlines()
                 if line.strip()]
    except OSError:
        return 0
    if lines and not _numeric(lines[0].replace(",", " ").split()[0]):
        lines = lines[1:]  # header
    return len(lines)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- helpers ---------------------------------------------------------------------------------

def _float(value: Any) -> float:
    """A metric as a float (YOLOv5 passes numpy arrays of one element and numpy scalars)."""
    try:
        return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return float("nan")


def _int_or_none(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _print_main(session: Session):
    return print if session.is_main else (lambda _message: None)


def _rank() -> int:
    """The global DDP rank, -1 without DDP (YOLOv5's RANK convention)."""
    try:
        return int(os.environ.get("RANK", "-1") or -1)
    except ValueError:
        return -1


def _run_info(opt: Any, script: Optional[str], seed_from: str) -> Dict[str, Any]:
    """The ``yolov5`` section of determinism.json (``train_loader``/``finished`` filled in later)."""
    save_dir = getattr(opt, "save_dir", None)
    data = getattr(opt, "data", None)
    return {"script": script, "seed_from": seed_from, "save_dir": None if save_dir is None else str(save_dir),
            "data": str(data) if isinstance(data, (str, os.PathLike)) else None,
            "train_loader": None, "finished": False}


def _hyp_name(opt: Any) -> str:
    """The hyp file for messages: ``opt.hyp``, else (train() replaced it by the dict) ``--hyp`` as given."""
    hyp = getattr(opt, "hyp", None)
    if isinstance(hyp, (str, os.PathLike)):
        return str(hyp)
    if getattr(opt, "resume", False):
        return "the resumed run's hyp (opt.yaml)"
    given = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    given.add_argument("--hyp", default=None)
    try:
        typed = given.parse_known_args(sys.argv[1:])[0].hyp
    except SystemExit:  # pragma: no cover - '--hyp' without a value; the script's parser said so already
        typed = None
    return str(typed or _hyp_default or "hyp YAML")


def _script(frame: Any) -> Optional[str]:
    """The file of the patched script that called us (its folder is the repo for the git commit)."""
    path = frame.f_globals.get("__file__")
    return None if path is None else str(Path(path).resolve())


def _record_setup(session: Session, hyp: Any) -> None:
    """Put the seed actually applied, the hyp values and where determinism.json goes in the fingerprint header."""
    from ...record import fingerprint

    save_dir = session.extra[_EXTRA].get("save_dir")
    plain = {str(k): v for k, v in hyp.items() if isinstance(v, (int, float, str, bool))} \
        if isinstance(hyp, MutableMapping) else None
    fingerprint.update_header(seed=session.seed, seeds=session.extra.get("seeds"), hyp=plain,
                              report=None if save_dir is None else str((Path(save_dir) / REPORT_NAME).resolve()))


def _announce(session: Session) -> None:
    if not session.is_main:
        return
    source = SOURCE_LABELS.get(session.settings.source, session.settings.source)
    seed = f", seed {session.seed}" if session.seed is not None else ""
    print(f"yolo-det: determinism {session.settings.mode} (from {source}){seed}")


def how_it_ended() -> Dict[str, Any]:
    """How a run that did not reach train()'s end stopped: the uncaught exception the interpreter printed
    (``sys.last_value``, set before exit hooks run), else an exit (``sys.exit``, a return before the end)."""
    error = getattr(sys, "last_value", None)
    if isinstance(error, BaseException) and not isinstance(error, SystemExit):
        lines = str(error).strip().splitlines()
        return {"closed_by": "error", "error": f"{type(error).__name__}: {lines[0][:300] if lines else ''}".strip()}
    return {"closed_by": "exit", "error": None}


def _finish_at_exit() -> None:
    """Write determinism.json for a run that ended before train()'s end (early return, error), and close its
    fingerprint log saying how it ended."""
    session = current()
    if session is None or _EXTRA not in session.extra or (_run is not None and _run.refused):
        return  # a refused resume: the run folder keeps the interrupted run's record
    save_dir = session.extra[_EXTRA].get("save_dir")
    label_caches.write_manifest(save_dir, session.extra[_EXTRA].get("data"), again=False)
    ended = how_it_ended()
    session.extra["ended"] = ended
    path = session.finish(save_dir, closed_by=ended["closed_by"])
    if path is not None:
        why = f" ({ended['error']})" if ended["error"] else ""
        print(f"yolo-det: training did not reach its end{why}; wrote {path}")


def _register_exit_hook() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_finish_at_exit)
        _exit_hook = True


__all__ = ["add_arguments", "pop_hyp_keys", "start", "track", "backward", "seeded_loaders", "resume_point",
           "ddp_launch", "parallel", "micro_batches", "multi_scale_stream", "world_loss",
           "save_state", "epoch_end", "nms_time_limit", "nms_output", "validated", "validation_metrics", "run_defaults",
           "finish", "evolve_start", "evolve_generation", "evolve_rng", "add_eval_arguments", "evaluation_start",
           "evaluated"]
