"""Cause first: what differed between two runs' set-ups, before looking at any step.

Two runs that diverge most often differ in how they were started: another seed, mode, hyp,
argument, data file, package version, GPU, driver, cuDNN, thread count or world size. The
fingerprint header records these facts (:func:`yolo_det.record.header.run_facts`); :func:`header_causes` and
:func:`report_causes` (the runs' ``determinism.json``) name each difference as a likely cause
with its class. Arguments that ``yolo-det verify`` filled in from ``{run}`` (run names,
output folders) and output locations are expected to differ and are not causes.

Cause classes: ``config`` (seed, mode, hyp, arguments), ``environment`` (versions, hardware,
threads, world size, environment variables), ``data``, ``rng``, ``kernel`` (same inputs,
different output), ``collective`` (DDP ranks differ), ``clock`` (validation cut by a time
limit), ``unknown``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence


from ..core import data_manifest, machine
from ..record.run_folder import REPORT_NAME
from . import settings as run_settings

CLASSES = ("config", "environment", "data", "rng", "kernel", "collective", "clock", "unknown")
#: Options whose value is where a run writes, not what it computes.
OUTPUT_OPTIONS = ("--name", "--project", "--save-dir", "--save_dir", "--fingerprint", "--workdir", "--log-dir",
                  "--logdir", "--output", "--output-dir", "--out", "name", "project", "save_dir")
DATA_OPTIONS = ("--data", "--dataset", "data", "--data-dir", "--data_dir")


@dataclass(frozen=True)
class Cause:
    """One difference between two runs' set-ups: its class, what differed, a sentence."""

    cls: str
    what: str
    message: str

    def to_dict(self) -> Dict[str, str]:
        return {"class": self.cls, "what": self.what, "message": self.message}


# -- comparing --------------------------------------------------------------------------------
def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dict_changes(a: Mapping[str, Any], b: Mapping[str, Any], limit: int = 4) -> str:
    keys = [k for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)]
    parts = [f"{k} {_short(a.get(k, '-'))} vs {_short(b.get(k, '-'))}" for k in keys[:limit]]
    if len(keys) > limit:
        parts.append(f"and {len(keys) - limit} more")
    return ", ".join(parts)


def _option_of(argv: Sequence[str], index: int) -> str:
    """The option an argument belongs to: ``--data`` for ``--data x.yaml``, ``data`` for ``data=x``."""
    arg = argv[index]
    if "=" in arg:
        return arg.split("=", 1)[0]
    if index > 0 and argv[index - 1].startswith("-"):
        return argv[index - 1]
    return ""


def _from_run(a: str, b: str, run_a: Optional[int], run_b: Optional[int]) -> bool:
    """Whether ``a`` and ``b`` are one ``{run}`` template filled with the two run numbers."""
    if run_a is None or run_b is None or run_a == run_b:
        return False
    def template(text: str, run: int) -> str:  # the run number as a whole number: v1, run1/, not 0.01
        return re.sub(rf"(?<![0-9.]){run}(?![0-9])", "{run}", text)
    return template(a, run_a) == template(b, run_b)


def _token_changes(argv_a: Sequence[str], argv_b: Sequence[str], run_a: Optional[int], run_b: Optional[int],
                   limit: int = 4) -> List[str]:
    """The tokens two command lines of different lengths differ in (``seed=0 vs seed=1``, ``--seed 1 added``),
    output locations and ``{run}`` fillings left out; at most ``limit``, then how many more."""
    argv_a, argv_b = list(argv_a), list(argv_b)

    def expected(i: int, x: str, y: str) -> bool:  # where a run writes, or verify's {run}: no cause
        key = x.split("=", 1)[0]
        return _from_run(x, y, run_a, run_b) or (key in OUTPUT_OPTIONS and key == y.split("=", 1)[0]) or \
            _option_of(argv_a, i) in OUTPUT_OPTIONS

    out: List[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=argv_a, b=argv_b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)  # a replace: token for token, the rest added or removed
        out += [f"{argv_a[i1 + k]} vs {argv_b[j1 + k]}" for k in range(paired)
                if not expected(i1 + k, argv_a[i1 + k], argv_b[j1 + k])]
        if j2 - j1 > paired:
            out.append(f"{' '.join(argv_b[j1 + paired:j2])} added")
        if i2 - i1 > paired:
            out.append(f"{' '.join(argv_a[i1 + paired:i2])} removed")
    return out[:limit] + ([f"and {len(out) - limit} more"] if len(out) > limit else [])


def _argument_causes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Cause]:
    argv_a, argv_b = list(a.get("command") or []), list(b.get("command") or [])
    run_a, run_b = a.get("verify_run"), b.get("verify_run")
    files_a = {f.get("index"): f for f in a.get("files") or [] if isinstance(f, dict)}
    files_b = {f.get("index"): f for f in b.get("files") or [] if isinstance(f, dict)}
    causes: List[Cause] = []
    if len(argv_a) != len(argv_b):
        changes = _token_changes(argv_a, argv_b, run_a, run_b)
        return [Cause("config", "command", f"runs used different command lines: {'; '.join(changes)}")] \
            if changes else []
    for i, (x, y) in enumerate(zip(argv_a, argv_b)):
        fa, fb = files_a.get(i), files_b.get(i)
        option = _option_of(argv_a, i)
        if fa and fb and fa.get("digest") != fb.get("digest"):
            label = f"the file given as {option}" if option else ("the training script" if i == 0 else "a file argument")
            cls = "data" if option.lstrip("-") in {o.lstrip("-") for o in DATA_OPTIONS} else "config"
            causes.append(Cause(cls, "data file" if cls == "data" else "file",
                                f"{label} differs: {x} vs {y} (their contents differ)"))
            continue
        if x == y or (fa and fb):  # same text, or same file contents under another name
            continue
        if option in OUTPUT_OPTIONS or _from_run(x, y, run_a, run_b):
            continue
        if x.split("=", 1)[0] in OUTPUT_OPTIONS and x.split("=", 1)[0] == y.split("=", 1)[0]:
            continue
        what = f"{option} {x} vs {y}" if option and "=" not in x else f"{x} vs {y}"
        causes.append(Cause("config", "command", f"runs used different command arguments: {what}"))
    return causes


def virtual_world(a: Mapping[str, Any], b: Mapping[str, Any]) -> Optional[int]:
    """V when two headers record the same virtual world size on different numbers of processes: the runs are
    then one V-GPU run (yolo_det.world), and their world sizes are no cause."""
    va, vb = a.get("virtual_world_size"), b.get("virtual_world_size")
    if va is None or va != vb or int(a.get("world_size", 1) or 1) == int(b.get("world_size", 1) or 1):
        return None
    return int(va)


def _machine_causes(a: Mapping[str, Any], b: Mapping[str, Any], found: Sequence[Cause]) -> List[Cause]:
    """The machine's differences (instruction sets, CPU and GPU models, TF32) as causes; a GPU model that the
    header's ``cuda``/``gpus`` already named is not named twice."""
    ma, mb = a.get("machine"), b.get("machine")
    if not isinstance(ma, Mapping) or not isinstance(mb, Mapping):
        return []
    named_gpus = any(c.what in ("cuda", "gpus") for c in found)
    return [Cause("environment", what, f"runs used {sentence}") for what, sentence in machine.machine_differences(ma, mb)
            if not (what == "gpu_model" and named_gpus)]


def header_causes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Cause]:
    """Likely causes from two fingerprint headers, most specific first (config, data, environment)."""
    causes: List[Cause] = []

    def differ(key: str) -> bool:
        return key in a and key in b and a.get(key) != b.get(key)

    if differ("seed"):
        causes.append(Cause("config", "seed", f"runs used different seeds: {a.get('seed')} vs {b.get('seed')}"))
    if differ("seeds") and not differ("seed"):
        roles_a, roles_b = a.get("seeds") or {}, b.get("seeds") or {}
        changed = [r for r in ("init", "order", "augment") if roles_a.get(r) != roles_b.get(r)]
        if changed:
            causes.append(Cause("config", "seeds", "runs used different role seeds: " + ", ".join(
                f"{r} {roles_a.get(r)} vs {roles_b.get(r)}" for r in changed)))
    if differ("mode"):
        causes.append(Cause("config", "mode", f"runs used different determinism modes: {a.get('mode')} vs {b.get('mode')}"))
    if a.get("virtual_world_size") != b.get("virtual_world_size"):
        causes.append(Cause("config", "virtual_world_size",
                            f"runs used different virtual world sizes (V): {a.get('virtual_world_size')} vs "
                            f"{b.get('virtual_world_size')}; each V is the run of another number of GPUs"))
    sa, sb = a.get("settings"), b.get("settings")
    if isinstance(sa, dict) and isinstance(sb, dict):
        ignore = {"mode", "mode_source", "sources", "virtual_world_size"}
        ka = {k: v for k, v in sa.items() if k not in ignore}
        kb = {k: v for k, v in sb.items() if k not in ignore}
        if ka != kb:
            causes.append(Cause("config", "settings", f"runs used different determinism settings: {_dict_changes(ka, kb)}"))
    if isinstance(a.get("hyp"), dict) and isinstance(b.get("hyp"), dict) and a["hyp"] != b["hyp"]:
        causes.append(Cause("config", "hyp", f"runs used different hyperparameters: {_dict_changes(a['hyp'], b['hyp'])}"))
    causes.extend(_argument_causes(a, b))
    for key, what in (("torch", "torch versions"), ("python", "Python versions"), ("cuda_runtime", "CUDA runtimes"),
                      ("cudnn", "cuDNN versions"), ("driver", "GPU drivers"), ("cuda", "GPUs"), ("gpus", "GPUs"),
                      ("machine", ""), ("world_size", "world sizes"), ("threads", "CPU thread counts"),
                      ("interop_threads", "inter-op thread counts")):
        if key == "machine":
            causes.extend(_machine_causes(a, b, causes))
            continue
        if key == "world_size" and virtual_world(a, b) is not None:
            continue
        if differ(key) and not (key == "gpus" and any(c.what == "cuda" for c in causes)):
            causes.append(Cause("environment", key, f"runs used different {what}: {_short(a.get(key))} vs "
                                                    f"{_short(b.get(key))}"))
    if isinstance(a.get("packages"), dict) and isinstance(b.get("packages"), dict) and a["packages"] != b["packages"]:
        changes = _dict_changes({k: v for k, v in a["packages"].items() if k != "torch"},
                                {k: v for k, v in b["packages"].items() if k != "torch"})
        if changes:
            causes.append(Cause("environment", "packages", f"runs used different package versions: {changes}"))
    if isinstance(a.get("env"), dict) and isinstance(b.get("env"), dict) and a["env"] != b["env"]:
        causes.append(Cause("environment", "env", f"runs had different environment variables: "
                                                  f"{_dict_changes(a['env'], b['env'])}"))
    return causes


def report_causes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Cause]:
    """Likely causes from two runs' ``determinism.json`` (what the header cannot know); compile first."""
    causes: List[Cause] = compile_causes(a, b)
    fa, fb = a.get("flags_applied"), b.get("flags_applied")
    if isinstance(fa, dict) and isinstance(fb, dict) and fa != fb:
        causes.append(Cause("config", "flags", f"runs applied different determinism flags: {_dict_changes(fa, fb)}"))
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    for key, what in (("cuda", "CUDA runtimes"), ("cudnn", "cuDNN versions"), ("driver", "GPU drivers"),
                      ("cpu_threads", "CPU thread counts"), ("git_commit", "code commits")):
        if key in ea and key in eb and ea[key] != eb[key]:
            causes.append(Cause("environment", key, f"runs used different {what}: {_short(ea[key])} vs {_short(eb[key])}"))
    causes.extend(run_fact_causes(a, b))
    for section in ("yolov5", "ultralytics"):
        la = (a.get(section) or {}).get("train_loader") if isinstance(a.get(section), dict) else None
        lb = (b.get(section) or {}).get("train_loader") if isinstance(b.get(section), dict) else None
        la, lb = _seeding(la), _seeding(lb)
        if isinstance(la, dict) and isinstance(lb, dict) and la != lb:
            causes.append(Cause("config", "train_loader", f"the train loaders were seeded differently: "
                                                          f"{_dict_changes(la, lb)}"))
    return causes


def compile_facts(report: Mapping[str, Any]) -> Dict[str, Any]:
    """Whether a run compiled its model (``torch.compile``: the report's ``compile`` section, or Ultralytics'
    ``compile`` argument), in which mode, and whether its train loader dropped the last incomplete batch."""
    section = report.get("compile") if isinstance(report.get("compile"), dict) else {}
    ultra = report.get("ultralytics") if isinstance(report.get("ultralytics"), dict) else {}
    arg = ultra.get("compile")
    compiled = bool(section.get("calls") or section.get("graphs")) or bool(arg and str(arg).lower() != "false")
    mode = section.get("mode") if section.get("calls") else None
    if mode is None and compiled:
        mode = "default" if arg is True or str(arg).lower() == "true" else str(arg or "unknown")
    loader = ultra.get("train_loader") if isinstance(ultra.get("train_loader"), dict) else {}
    return {"compiled": compiled, "mode": mode if compiled else None, "drop_last": loader.get("drop_last"),
            "settings": section.get("settings")}


def compile_causes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Cause]:
    """Compile first: one run compiled (``torch.compile``) and the other ran eager, or both compiled in other
    modes; with the train loaders' ``drop_last`` where it differs (Ultralytics drops the last batch when
    compiling)."""
    fa, fb = compile_facts(a), compile_facts(b)
    causes: List[Cause] = []
    loader = ""
    if fa["drop_last"] is not None and fb["drop_last"] is not None and fa["drop_last"] != fb["drop_last"]:
        loader = (f"; the train loaders also differ: drop_last={fa['drop_last']} in A, {fb['drop_last']} in B "
                  "(Ultralytics drops the last incomplete batch when compiling), so the runs saw different samples")
    if fa["compiled"] != fb["compiled"]:
        side, other = ("A", "B") if fa["compiled"] else ("B", "A")
        mode = (fa if fa["compiled"] else fb)["mode"]
        causes.append(Cause("config", "compile", f"run {side} was compiled (torch.compile, mode {mode!r}) and run "
                                                 f"{other} ran eager: Inductor's generated kernels fuse and reorder "
                                                 "floating-point operations, so compiled and eager runs are not "
                                                 f"bit-identical even when each is deterministic{loader}"))
    elif fa["compiled"] and fa["mode"] != fb["mode"]:
        causes.append(Cause("config", "compile", f"the runs compiled in different torch.compile modes: "
                                                 f"{fa['mode']!r} vs {fb['mode']!r}{loader}"))
    elif fa["compiled"] and fa["settings"] and fb["settings"] and fa["settings"] != fb["settings"]:
        causes.append(Cause("config", "compile", f"the runs compiled with different Inductor settings: "
                                                 f"{_dict_changes(fa['settings'], fb['settings'])}{loader}"))
    elif loader:
        causes.append(Cause("config", "drop_last", loader[2:].replace("also ", "", 1)))
    return causes


def run_fact_causes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Cause]:
    """What the releases decided silently at start-up (``run_facts``): AMP after the AMP check, loader
    workers, GPU count and model, cuDNN and cuBLAS libraries. Workers only matter under ``off``: under
    strict and warn each sample has its own random stream."""
    fa, fb = a.get("run_facts"), b.get("run_facts")
    if not isinstance(fa, dict) or not isinstance(fb, dict):
        return []
    causes = []
    if fa.get("amp") is not None and fb.get("amp") is not None and fa["amp"] != fb["amp"]:
        causes.append(Cause("environment", "amp", f"AMP was {'on' if fa['amp'] else 'off'} in A and "
                                                  f"{'on' if fb['amp'] else 'off'} in B as the runs used it (the "
                                                  "release's AMP check decides on each GPU): set amp= explicitly"))
    off = "off" in (a.get("mode"), b.get("mode"))
    wa, wb = fa.get("train_workers"), fb.get("train_workers")
    if off and wa is not None and wb is not None and wa != wb:
        causes.append(Cause("environment", "workers", f"the train loaders used {wa} vs {wb} worker processes "
                                                      "(min(cpus // devices, batch, workers)); under off each "
                                                      "worker count gives other augmentations"))
    for key, what in (("devices", "GPU counts"), ("device_names", "GPU models"), ("libraries", "cuBLAS/cuDNN libraries")):
        if key in fa and key in fb and fa[key] != fb[key]:
            causes.append(Cause("environment", key, f"runs used different {what}: {_short(fa[key])} vs {_short(fb[key])}"))
    causes.extend(_choice_causes(fa, fb))
    return causes


def _choice_causes(fa: Mapping[str, Any], fb: Mapping[str, Any]) -> List[Cause]:
    """What the release or the script chose while the run ran: precision switches, the optimizer built, the
    train loader's drop_last, the batch sizes trained; each difference named with both values."""
    causes = []
    pa, pb = fa.get("precision"), fb.get("precision")
    if isinstance(pa, dict) and isinstance(pb, dict):
        changed = [f"torch.backends.{k}: {pa[k]!r} vs {pb[k]!r}" if "." in k or k == "fp32_precision" else
                   f"{k}: {pa[k]!r} vs {pb[k]!r}" for k in pa if k in pb and pa[k] != pb[k]]
        if changed:
            causes.append(Cause("config", "precision", "the runs trained with different precision switches (TF32 / "
                                                       "reduced-precision reductions change CUDA results): "
                                                       + "; ".join(changed)))
    oa, ob = fa.get("optimizer"), fb.get("optimizer")
    if isinstance(oa, dict) and isinstance(ob, dict) and oa != ob:
        causes.append(Cause("config", "optimizer", f"the runs stepped different optimizers: {_optimizer(oa)} vs "
                                                   f"{_optimizer(ob)}"))
    for key, what in (("drop_last", "the train loader's drop_last"), ("batch_sizes", "batch sizes trained")):
        va, vb = fa.get(key), fb.get(key)
        if va is not None and vb is not None and va != vb:
            show = _batches if key == "batch_sizes" else _short
            causes.append(Cause("config", key, f"{what} differed: {show(va)} vs {show(vb)}"))
    ma, mb = fa.get("memory_format"), fb.get("memory_format")
    if ma is not None and mb is not None and ma != mb:
        causes.append(Cause("config", "channels_last", f"the models trained in different memory formats: {ma} in A, "
                                                       f"{mb} in B (Ultralytics turns channels_last on by default on "
                                                       "CUDA; cuDNN picks other kernels): set channels_last="))
    ha, hb = fa.get("validation_head"), fb.get("validation_head")
    if isinstance(ha, dict) and isinstance(hb, dict) and ha != hb:
        causes.append(Cause("config", "validation_head", "training-time validation (it picks best.pt) used another "
                                                         f"head / NMS mode: {_head(ha)} in A, {_head(hb)} in B"))
    return causes


def _batches(sizes: Any) -> str:
    """``8 (batch=, from step 1), 4 (out of memory at batch=8 ..., from step 3)`` for a cause."""
    if not isinstance(sizes, list) or not all(isinstance(s, dict) for s in sizes):
        return _short(sizes)
    return ", ".join(f"{s.get('batch')} ({s.get('why', '?')}, from step {s.get('from_step', '?')})" for s in sizes)


def _head(facts: Mapping[str, Any]) -> str:
    """``nms=None: one-to-many head + NMS`` for a cause."""
    head = ("one-to-one head, no NMS" if facts.get("end2end") else "one-to-many head + NMS"
            if facts.get("end2end") is not None else "head unknown")
    return f"nms={facts.get('nms')!r}: {head}"


def _optimizer(facts: Mapping[str, Any]) -> str:
    """``AdamW (optimizer=auto's pick; groups: 3/1/2 params, lr 0.000714, ...)`` for a cause."""
    name = str(facts.get("class", "?")).rsplit(".", 1)[-1]
    picked = f"optimizer={facts['requested']}'s pick, " if facts.get("requested") == "auto" else ""
    groups = facts.get("groups") or []
    sizes = "/".join(str(g.get("params")) for g in groups)
    lrs = sorted({g.get("lr") for g in groups if g.get("lr") is not None})
    momentum = sorted({str(g.get("momentum", g.get("betas"))) for g in groups})
    decay = sorted({g.get("weight_decay") for g in groups if g.get("weight_decay") is not None})
    fused = ", fused" if facts.get("fused") else ""
    return (f"{name} ({picked}{len(groups)} groups of {sizes} tensors, lr {', '.join(f'{v:g}' for v in lrs)}, "
            f"momentum {', '.join(momentum)}, decay {', '.join(f'{v:g}' for v in decay)}{fused})")


def _seeding(loader: Any) -> Any:
    """A train loader's description without where its stream started (a resumed run starts later by design)."""
    if not isinstance(loader, dict):
        return loader
    loader = {k: v for k, v in loader.items() if k != "drop_last"}  # named by compile_causes
    if not isinstance(loader.get("streams"), dict):
        return loader
    return {**loader, "streams": {k: v for k, v in loader["streams"].items() if k != "start_epoch"}}


def _report_candidates(header: Mapping[str, Any], log_path: os.PathLike) -> List[Path]:
    candidates = [Path(str(header.get("cwd") or ".")) / str(header["report"])] if header.get("report") else []
    return candidates + [Path(log_path).parent / REPORT_NAME]


def read_report(header: Mapping[str, Any], log_path: os.PathLike) -> Optional[Dict[str, Any]]:
    """The run's ``determinism.json``: the path its header names, else one beside the log; None if absent."""
    for candidate in _report_candidates(header, log_path):
        try:
            data = json.loads(Path(str(candidate)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def read_manifest(header: Mapping[str, Any], log_path: os.PathLike) -> Optional[Dict[str, Any]]:
    """The run's ``data_manifest.json`` (beside its ``determinism.json``); None if absent or unreadable."""
    for candidate in _report_candidates(header, log_path):
        try:
            manifest = data_manifest.read(candidate.parent)
        except ValueError:
            continue
        if manifest is not None:
            return manifest
    return None


def _run_dir(header: Mapping[str, Any], log_path: os.PathLike) -> Optional[Path]:
    return next((c.parent for c in _report_candidates(header, log_path) if c.is_file()), None)


def _settings_causes(a_header: Mapping[str, Any], a_path: os.PathLike, ra: Mapping[str, Any],
                     b_header: Mapping[str, Any], b_path: os.PathLike, rb: Mapping[str, Any]) -> List[Cause]:
    """Resolved settings the releases wrote beside the reports (args.yaml, opt.yaml, hyp.yaml), when the
    command lines and hyp values agree: defaults that differ between releases show only here."""
    da, db = _run_dir(a_header, a_path), _run_dir(b_header, b_path)
    if da is None or db is None or da == db:
        return []
    try:
        (sa, fa), (sb, fb) = run_settings.read_settings(da), run_settings.read_settings(db)
    except run_settings.SettingsError:
        return []
    runs = (a_header.get("verify_run"), b_header.get("verify_run"))

    def filled_from_run(va: Any, vb: Any) -> bool:  # verify's {run} in an option that is no output location
        return isinstance(va, str) and isinstance(vb, str) and _from_run(va, vb, *runs)

    diffs = run_settings.differences(sa, sb, run_settings.release_from_report(ra),
                                     run_settings.release_from_report(rb), ignore=filled_from_run) if fa and fb else []
    return [Cause("config", "settings", run_settings.settings_cause_message(diffs, fa, fb))] if diffs else []


def _stale_caches(manifest: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return [c for c in manifest.get("label_caches") or [] if isinstance(c, dict) and c.get("action") == "warned"]


def manifest_causes(a: Mapping[str, Any], b: Mapping[str, Any], limit: int = 5) -> List[Cause]:
    """Likely causes from two runs' data manifests: image and label files that changed, appeared or
    disappeared, class names, and label caches a run trained from although its labels had changed."""
    causes: List[Cause] = []
    changes = data_manifest.compare(a, b)
    if not changes.empty:
        causes.append(Cause("data", "data_files", f"the runs read different data: {changes.describe(limit)}"))
    for side, manifest in (("A", a), ("B", b)):
        for cache in _stale_caches(manifest):
            files = list(cache.get("changed") or []) + list(cache.get("added") or []) + list(cache.get("removed") or [])
            shown = ", ".join(files[:limit]) + (f" and {len(files) - limit} more" if len(files) > limit else "")
            causes.append(Cause("data", "label_cache", f"run {side} trained from a stale label cache "
                                                       f"{cache.get('cache')} (determinism off): the labels it "
                                                       f"holds are not the files' contents ({shown})"))
    return causes


def setup_causes(a_header: Mapping[str, Any], b_header: Mapping[str, Any], a_path: os.PathLike = ".",
                 b_path: os.PathLike = ".") -> List[Cause]:
    """Header causes, then ``determinism.json`` causes not already named."""
    causes = header_causes(a_header, b_header)
    ra, rb = read_report(a_header, a_path), read_report(b_header, b_path)
    if ra is not None and rb is not None:
        causes = compile_causes(ra, rb) + causes  # first: it explains the rest (loader, arguments, kernels)
        seen = {c.what for c in causes}
        if "gpus" in seen or "cuda" in seen:  # the header named the GPUs already
            seen |= {"devices", "device_names"}
        if "threads" in seen:  # the header's torch thread count is determinism.json's cpu_threads
            seen.add("cpu_threads")
        causes.extend(c for c in report_causes(ra, rb) if c.what not in seen)
    ma, mb = read_manifest(a_header, a_path), read_manifest(b_header, b_path)
    if ma is not None and mb is not None:
        causes.extend(manifest_causes(ma, mb))
    if ra is not None and rb is not None and not any(c.cls == "config" for c in causes):
        causes.extend(_settings_causes(a_header, a_path, ra, b_header, b_path, rb))
    order = {"config": 0, "data": 1, "environment": 2}
    once = list({c.message: c for c in reversed(causes)}.values())[::-1]  # each sentence once, first place kept
    return sorted(once, key=lambda c: -1 if c.what == "compile" else order.get(c.cls, 3))


def cause_of_kind(kind: str) -> str:
    """The cause class a first divergence of ``kind`` points to without a re-run."""
    if kind == "data":
        return "data"
    if kind == "rng":
        return "rng"
    return "unknown"


__all__ = ["CLASSES", "Cause", "cause_of_kind", "compile_causes", "compile_facts", "header_causes", "manifest_causes", "read_manifest",
           "read_report", "report_causes", "run_fact_causes", "setup_causes", "virtual_world"]
