"""Exact resume: the state a release's checkpoint lacks, saved beside it and restored on resume.

At every checkpoint save a *sidecar* ``<checkpoint>.yolo-det`` is written next to ``last.pt``
(atomically, with a format version): the main process's RNG states (torch CPU and CUDA, numpy,
random), the GradScaler state, where the data stream is (the next epoch), the full-precision
model and EMA (YOLOv5 and Ultralytics keep them in fp16) and the tensors their modules cache
outside the state_dict (YOLOv5's ``Detect`` grids), where the release stores it lossy, the
optimizer state, plus the yolo-det settings and where they came from. On resume it is read,
checked against the checkpoint the release loaded (epoch, and the fp16 weights it holds must be
the sidecar's weights rounded), and applied right before the first resumed epoch.

A resume that cannot be exact (no sidecar, or one that does not match the checkpoint) is refused
under strict (nothing is trained; the message says why and what to do) and resumed as the release
does under warn, with a warning that says why. Why the sidecar is missing is told from the run
folder (:func:`missing_state`): a run that yolo-det trained (its ``determinism.json``, or the
marker written into ``weights/`` when training starts) saves one with every checkpoint, so its
absence means the process ended between ``last.pt`` and its sidecar (or the file was removed).

A kill at any instant keeps a consistent pair (:func:`consistent_state`). The release's checkpoint is
staged as ``last.pt.partial``; the sidecar, carrying the staged file's ``checkpoint_sha256``, replaces
the previous one (kept as ``last.pt.yolo-det.prev``); only then is the checkpoint renamed into place.
Whatever instant the process dies, ``last.pt`` has its sidecar by digest: the current one, or the
previous one when the kill came between the sidecar and the rename. ``$YOLO_DET_KILL_AT=point:epoch``
(points ``before``, ``between``, ``after``) SIGKILLs the process at that point of that epoch's save,
for tests of exactly this.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import torch

from ..core import atomic, env_names
from ..core.rng import rng_state, set_rng_state
from .. import __version__
from ..record import fingerprint
from ..strict.compiled import compiling
from ..proof.resume_at import INFO_ENV, STOP_ENV
from ..record import run_folder as _layout
from ..record.run_folder import REPORT_NAME as RUN_RECORD  # the run record yolo-det writes into the run folder

FORMAT = "yolo-det-resume"
VERSION = 1
SUFFIX = _layout.SIDECAR_SUFFIX
#: marker written into the run's weights folder when training starts under strict/warn (and with the
#: first sidecar, for runs started otherwise): every checkpoint of this run has its sidecar
MARKER = _layout.RESUME_MARKER
#: the environment variable that lets strict resume inexactly anyway
INEXACT_ENV = env_names.RESUME
#: ``point:epoch``: SIGKILL this process at that point of that epoch's save (tests of kill-safety)
KILL_ENV = env_names.KILL_AT
KILL_POINTS = ("before", "between", "after")
#: the release's checkpoint while its sidecar is written: ``last.pt.partial``
STAGED_SUFFIX = _layout.STAGED_SUFFIX
#: the sidecar a save replaced, kept until the next save: ``last.pt.yolo-det.prev``
PREVIOUS_SUFFIX = _layout.PREVIOUS_SUFFIX


class ResumeStateError(RuntimeError):
    """A sidecar cannot be used (unreadable, another format); the message says what to do."""


def sidecar_path(checkpoint: os.PathLike) -> Path:
    """The sidecar of ``checkpoint``: ``last.pt`` -> ``last.pt.yolo-det`` (never matches ``last*.pt``)."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + SUFFIX)


def staged_path(checkpoint: os.PathLike) -> Path:
    """Where the release writes ``checkpoint`` until its sidecar is on disk: ``last.pt`` -> ``last.pt.partial``."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + STAGED_SUFFIX)


def final_path(path: os.PathLike) -> Path:
    """The checkpoint a staged path stands for (``last.pt.partial`` -> ``last.pt``); other paths unchanged."""
    path = Path(path)
    return path.with_name(path.name[:-len(STAGED_SUFFIX)]) if path.name.endswith(STAGED_SUFFIX) else path


def previous_path(checkpoint: os.PathLike) -> Path:
    """The sidecar the last save replaced: ``last.pt`` -> ``last.pt.yolo-det.prev``."""
    sidecar = sidecar_path(checkpoint)
    return sidecar.with_name(sidecar.name + PREVIOUS_SUFFIX)


def file_digest(path: os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def kill_if_asked(point: str, epoch: Any) -> None:
    """``$YOLO_DET_KILL_AT=point:epoch``: SIGKILL this process here (a preemption at that instant of the save)."""
    raw = os.environ.get(KILL_ENV, "").strip()
    if not raw or raw != f"{point}:{epoch}":
        return
    import signal

    print(f"yolo-det: killed {point} the save of epoch {epoch} as ${KILL_ENV} asks", flush=True)
    sys.stderr.flush()
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


def unsaved(checkpoint: os.PathLike) -> Optional[str]:
    """Why there is nothing to resume when ``checkpoint`` does not exist but its folder shows a yolo-det run
    whose first save did not complete (its staged ``.partial`` or the run's marker); None otherwise."""
    checkpoint = Path(checkpoint)
    if checkpoint.exists() or not checkpoint.parent.is_dir():
        return None
    staged = staged_path(checkpoint)
    if staged.exists():
        why = (f"{staged.name} is a save that was interrupted before it completed (the process ended before "
               f"{checkpoint.name} was put in place)")
    elif (checkpoint.parent / MARKER).is_file():
        why = f"{checkpoint.parent.name}/{MARKER} shows the run started under yolo-det, and no save completed"
    else:
        return None
    return (f"{checkpoint} does not exist: {why}. No checkpoint of this run was saved, so there is nothing to "
            "resume; nothing was trained. Start the training again")


def consistent_state(checkpoint: os.PathLike) -> Dict[str, Any]:
    """The resume state that belongs to ``checkpoint``: ``{"state", "path", "problems"}``.

    The sidecar whose ``checkpoint_sha256`` is the checkpoint's digest: the current one, else the one the
    last save replaced (a kill between the sidecar and the checkpoint's rename). Sidecars written before
    digests were recorded are taken as they are (checked by weights and epoch as before). ``state`` None:
    ``problems`` says why no state can be used; ``path`` the previous sidecar when that is the one.
    """
    checkpoint = Path(checkpoint)
    current, previous = sidecar_path(checkpoint), previous_path(checkpoint)
    if not current.is_file() and not previous.is_file():
        return {"state": None, "path": current, "problems": [missing_state(checkpoint)]}
    candidates, problems = [], []
    for path in (current, previous):
        if path.is_file():
            try:
                candidates.append((path, read(path)))
            except ResumeStateError as exc:
                problems.append(str(exc))
    digested = [(path, state) for path, state in candidates if state.get("checkpoint_sha256")]
    if not digested:  # no digests (an older yolo-det, or only unreadable files): the sidecar as it is
        state = next((s for p, s in candidates if p == current), None)
        if state is None:
            problems = problems or [missing_state(checkpoint)]
        return {"state": state, "path": current, "problems": [] if state is not None else problems}
    digest = file_digest(checkpoint)
    for path, state in digested:
        if state["checkpoint_sha256"] == digest:
            return {"state": state, "path": path, "problems": []}
    epochs = ", ".join(f"{p.name} (epoch {s.get('epoch')}, of a checkpoint with sha256 {s['checkpoint_sha256'][:12]})"
                       for p, s in digested)
    state = next((s for p, s in candidates if p == current), None)
    mismatch = (f"no resume state was written with this {checkpoint.name} (sha256 {digest[:12]}): {epochs}; the "
                "checkpoint was replaced or edited after its save")
    return {"state": state, "path": current, "problems": problems, "mismatch": mismatch}


def adopt_previous(checkpoint: os.PathLike, path: os.PathLike) -> None:
    """A resume that uses the previous sidecar puts it back in place, so the next save keeps it as ``.prev``."""
    current = sidecar_path(checkpoint)
    if Path(path) != current and Path(path).is_file():
        atomic.replace(path, current)


def expects_sidecar(checkpoint: os.PathLike) -> bool:
    """Whether the run of ``checkpoint`` saves sidecars: the marker in its weights folder, or a run record
    (``determinism.json``) saying yolo-det trained it under strict or warn."""
    if (Path(checkpoint).parent / MARKER).is_file():
        return True
    record = run_record(checkpoint)
    return record is not None and record.get("mode") != "off"


def run_folder(checkpoint: os.PathLike) -> Path:
    """The run folder of ``checkpoint``: ``runs/train/exp`` for ``runs/train/exp/weights/last.pt``."""
    return _layout.checkpoint_folder(checkpoint)


def run_record(checkpoint: os.PathLike) -> Optional[Dict[str, Any]]:
    """What the run folder's ``determinism.json`` says about the training of ``checkpoint``: ``{"mode": ...,
    "path": ...}`` (mode None when the file cannot be read), or None when there is no such file."""
    path = run_folder(checkpoint) / RUN_RECORD
    try:
        data = _layout.read_report(run_folder(checkpoint))
    except _layout.RunFolderError:
        return {"mode": None, "path": path}
    if data is None:
        return None
    mode = data.get("mode")
    return {"mode": mode if mode in ("strict", "warn", "off") else None, "path": path}


def mark_run(weights: os.PathLike, settings: Optional[Mapping[str, Any]] = None) -> Optional[Path]:
    """At the start of training under strict/warn: the marker in the run's weights folder (if not there yet),
    so that a checkpoint without its sidecar is known to have lost it, even the first one. None when the
    folder does not exist (nothing is created) or cannot be written."""
    folder = Path(weights)
    marker = folder / MARKER
    if not folder.is_dir() or marker.exists():
        return None
    body = {"format": FORMAT, "version": VERSION, "settings": dict(settings or {}),
            "note": f"every checkpoint in this folder gets a '{SUFFIX}' sidecar for exact resume (yolo-det)"}
    try:
        atomic.write_text(marker, json.dumps(body, indent=2, default=str) + "\n")
    except OSError:
        return None
    return marker


def marked_settings(checkpoint: os.PathLike) -> Dict[str, Any]:
    """The yolo-det settings the marker beside ``checkpoint`` recorded when training started ({} if none)."""
    try:
        data = json.loads((Path(checkpoint).parent / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no marker, or one of a yolo-det that wrote a line of text
        return {}
    settings = data.get("settings") if isinstance(data, dict) else None
    return dict(settings) if isinstance(settings, dict) else {}


def missing_state(checkpoint: os.PathLike) -> str:
    """Why ``checkpoint`` has no sidecar, as its run folder tells it (a true statement, for the message)."""
    checkpoint = Path(checkpoint)
    sidecar = sidecar_path(checkpoint)
    record = run_record(checkpoint)
    marker = (checkpoint.parent / MARKER).is_file()
    if marker or (record is not None and record["mode"] != "off"):
        if record is not None and record["mode"] is not None:
            evidence = f"{record['path'].name} says it trained under yolo-det, determinism {record['mode']}"
        elif marker:
            evidence = f"{checkpoint.parent.name}/{MARKER} says it trained under yolo-det"
        else:
            evidence = f"it has a yolo-det {record['path'].name}"
        return (f"{sidecar.name} is missing beside {checkpoint}, although this run saves resume state with every "
                f"checkpoint ({evidence}): the process ended after writing {checkpoint.name} and before its "
                "resume state, or the file was removed; the data stream, RNG states and full-precision weights "
                "cannot be restored")
    if record is not None:
        return (f"{checkpoint} has no resume state: its run trained under yolo-det with determinism off "
                f"({record['path']}), which saves none")
    return (f"{checkpoint} has no resume state, and nothing in {run_folder(checkpoint)} shows that yolo-det "
            f"trained it (no {RUN_RECORD}, no {checkpoint.parent.name}/{MARKER}): the run was trained without "
            "yolo-det, so the data stream, RNG states and full-precision weights cannot be restored")


def inexact_allowed() -> bool:
    """``$YOLO_DET_RESUME=inexact``: strict resumes anyway, as the release does (with the warning)."""
    return os.environ.get(INEXACT_ENV, "").strip().lower() == "inexact"


def refusal(why: str, checkpoint: os.PathLike, resume_anyway: str) -> str:
    """The message of a strict resume that cannot be exact: why, that nothing was trained, what to do.

    ``resume_anyway``: how this program resumes under warn (its own syntax).
    """
    checkpoint = Path(checkpoint)
    others = sorted(p.name for p in checkpoint.parent.glob("*.pt") if p != checkpoint and sidecar_path(p).is_file())
    earlier = (f"from an earlier checkpoint that has its resume state ({', '.join(others)} in {checkpoint.parent} "
               "has a sidecar)" if others else
               f"from an earlier checkpoint that has its resume state (a '<checkpoint>{SUFFIX}' beside it; "
               f"{checkpoint.parent} holds none)")
    restore = f"restore {sidecar_path(checkpoint).name} or " if expects_sidecar(checkpoint) else ""
    return (f"strict mode cannot resume exactly: {why}. Nothing was trained. To resume anyway, not exactly "
            f"(as the release resumes, with a warning saying why), {resume_anyway}, or set "
            f"{INEXACT_ENV}=inexact; to resume exactly, {restore}resume {earlier}")


# -- capture and write -----------------------------------------------------------------------
def cpu_state(module: Optional[torch.nn.Module], reuse: Optional[Dict[str, torch.Tensor]] = None,
              part: str = "all") -> Optional[Dict[str, torch.Tensor]]:
    """A private full-precision CPU copy of ``module``'s state_dict (None for no module).

    ``reuse``: the copy made at the previous save (written to disk since), refilled in place.
    ``part``: ``all``, ``params`` (what only an optimizer step changes) or ``buffers`` (the rest:
    BatchNorm statistics change in every training forward).
    """
    if module is None:
        return None
    state = module.state_dict()
    if part != "all":
        params = {name for name, _ in module.named_parameters()}
        state = {k: v for k, v in state.items() if (k in params) == (part == "params")}
    names = [k for k, v in state.items() if v.device.type == "cpu"]
    copies = dict.fromkeys(state)
    if names:
        sources = [state[k].detach() for k in names]
        old = reuse or {}
        targets = [old[k] if k in old and old[k].shape == t.shape and old[k].dtype == t.dtype else torch.empty_like(t)
                   for k, t in zip(names, sources)]
        copy = getattr(torch, "_foreach_copy_", None)
        if copy is not None:
            copy(targets, sources)  # one call for all tensors: the save blocks training for less
        else:  # pragma: no cover - torch < 2.1
            for target, source in zip(targets, sources):
                target.copy_(source)
        copies.update(zip(names, targets))
    for k, v in state.items():
        if copies[k] is None:
            copies[k] = v.detach().to("cpu", copy=True)
    return copies


def module_caches(module: Optional[torch.nn.Module]) -> Dict[str, Dict[str, Any]]:
    """Tensors modules keep as plain attributes, outside their state_dict, keyed ``<module>.<attr>``.

    They carry state from one forward to the next one: YOLOv5's ``Detect`` computes ``grid`` and
    ``anchor_grid`` at the EMA's first validation and reuses them while the feature-map size stays,
    while the EMA's ``anchors`` buffer keeps moving by rounding in every EMA update. A resumed
    process that recomputed them would validate with other anchors than the uninterrupted one.
    """
    caches: Dict[str, Dict[str, Any]] = {}
    if module is None:
        return caches
    for name, sub in module.named_modules():
        for attr, value in vars(sub).items():
            if attr.startswith("_"):
                continue
            many = isinstance(value, (list, tuple))
            tensors = list(value) if many else [value]
            if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
                continue
            if not any(t.numel() for t in tensors) or isinstance(value, torch.nn.Parameter):
                continue
            caches[f"{name}.{attr}" if name else attr] = {
                "list": many, "tensors": [t.detach().to("cpu", copy=True) for t in tensors]}
    return caches


def load_module_caches(module: Optional[torch.nn.Module], caches: Optional[Mapping[str, Mapping[str, Any]]]) -> int:
    """Put what :func:`module_caches` saved back (on the device of the module's tensors); how many attributes."""
    if module is None or not caches:
        return 0
    modules = dict(module.named_modules())
    restored = 0
    for key, saved in caches.items():
        name, _, attr = key.rpartition(".")
        sub = modules.get(name)
        if sub is None or attr not in vars(sub):
            continue
        current = getattr(sub, attr)
        many = isinstance(current, (list, tuple))
        probe = next((t for t in (current if many else [current]) if isinstance(t, torch.Tensor)), None)
        device = probe.device if probe is not None else torch.device("cpu")
        values = [t.to(device) for t in saved["tensors"]]
        setattr(sub, attr, type(current)(values) if saved["list"] and many else values[0])
        restored += 1
    return restored


def _cpu_tree(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, np.generic):  # Ultralytics' warm-up sets param groups' lr with np.interp
        return obj.item()  # a plain number: the sidecar stays loadable with weights_only
    if isinstance(obj, dict):
        return {k: _cpu_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_tree(v) for v in obj)
    return obj


def pending_gradients(optimizer: Optional[torch.optim.Optimizer]) -> bool:
    """Whether gradients are waiting for an optimizer step (a checkpoint inside gradient accumulation)."""
    if optimizer is None:
        return False
    return any(p.grad is not None and bool(p.grad.any()) for group in optimizer.param_groups for p in group["params"])


PENDING = ("the checkpoint was written between optimizer steps (gradient accumulation in progress): the "
           "accumulated gradients and the step cadence are not restored")
CADENCE = ("the run accumulates gradients ({steps} optimizer steps for {passes} batches before the checkpoint): "
           "on resume the release restarts its step cadence (last_opt_step), so the steps after it differ")


# -- gradient accumulation across a checkpoint ----------------------------------------------------
def gradients(optimizer: Optional[torch.optim.Optimizer]) -> Optional[List[Optional[torch.Tensor]]]:
    """CPU copies of the gradients waiting for the next optimizer step, in the optimizer's parameter
    order; None when none wait."""
    if not pending_gradients(optimizer):
        return None
    return [None if p.grad is None else p.grad.detach().to("cpu", copy=True)
            for group in optimizer.param_groups for p in group["params"]]


def set_gradients(optimizer: torch.optim.Optimizer, saved: List[Optional[torch.Tensor]]) -> bool:
    """Put :func:`gradients` back into the optimizer's parameters; False when they do not fit."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != len(saved) or any(g is not None and g.shape != p.shape for p, g in zip(params, saved)):
        return False
    for p, g in zip(params, saved):
        p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype, copy=True)
    return True


def loop_variable(name: str, owner: Any) -> Optional[int]:
    """The integer local ``name`` of the running method of ``owner`` that holds one (a training loop's
    ``last_opt_step``, which the release keeps nowhere else), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        local = frame.f_locals
        if local.get("self") is owner and name in local:
            value = local[name]
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
        frame = frame.f_back
    return None


class StepCadence:
    """Resumes a training loop's gradient-accumulation cadence, which the release restarts.

    Ultralytics keeps ``last_opt_step`` (the batch of the last optimizer step) in a local of its
    loop, restarts it at -1 on resume and zeroes the gradients at train start: the first resumed
    batch steps, although the interrupted run had gradients accumulated toward a later step. Here
    the saved gradients come back at the first epoch start (after the release zeroed them) and,
    until the first resumed optimizer step, the loop's ``accumulate`` (compared with
    ``ni - last_opt_step``) is raised by ``last_opt_step + 1`` at each training forward (after the
    warm-up set it) and put back at the next batch start: ``ni + 1 >= A + L + 1`` is ``ni - L >= A``.
    """

    def __init__(self, trainer: Any, last_opt_step: int, grads: Optional[List[Optional[torch.Tensor]]]) -> None:
        self.trainer, self.last, self.grads = trainer, int(last_opt_step), grads
        self.nominal: Optional[int] = None
        self.done = False
        self.restored: Optional[bool] = None
        self.model: Optional[torch.nn.Module] = None
        self.forward_hook: Any = None

    @staticmethod
    def supported(trainer: Any) -> bool:
        """The loop this emulates: callbacks, an ``accumulate`` attribute, an optimizer with step hooks."""
        return (callable(getattr(trainer, "add_callback", None)) and isinstance(getattr(trainer, "accumulate", None), int)
                and hasattr(getattr(trainer, "optimizer", None), "register_step_pre_hook"))

    def install(self, model: torch.nn.Module) -> None:
        self.trainer.add_callback("on_train_epoch_start", self._epoch_start)
        self.trainer.add_callback("on_train_batch_start", self._batch_start)
        # a global hook, not one on the model: releases that deep-copy and pickle the training model
        # into their checkpoint (8.0) would copy a hook on it, and with it the trainer
        self.model = model
        self.forward_hook = torch.nn.modules.module.register_module_forward_pre_hook(self._shift)
        self.trainer.optimizer.register_step_pre_hook(self._stepped)

    def last_opt_step(self) -> Optional[int]:
        """The true last optimizer step while the loop's own has not caught up (no step since resume), else None."""
        return None if self.done else self.last

    def _epoch_start(self, trainer: Any) -> None:
        if self.grads is not None:
            self.restored = set_gradients(trainer.optimizer, self.grads)
            self.grads = None

    def _batch_start(self, trainer: Any) -> None:
        if self.nominal is not None:
            trainer.accumulate, self.nominal = self.nominal, None

    def _shift(self, module: torch.nn.Module, args: Any) -> None:
        if compiling():  # traced by Dynamo: the hook fires again, eagerly, for the compiled wrapper (self.model)
            return
        if module is not self.model or self.done or not module.training or self.nominal is not None:
            return
        self.nominal = int(self.trainer.accumulate)
        self.trainer.accumulate = self.nominal + self.last + 1

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.done:
            return
        self.done = True  # the loop now holds the true last_opt_step (the step hook stays, as a no-op: removing
        self.forward_hook.remove()  # it here would change the hook table torch is iterating)
        if self.nominal is not None:
            self.trainer.accumulate, self.nominal = self.nominal, None


def cadence(session: Any) -> Dict[str, int]:
    """Optimizer steps and backward passes this process made (empty when steps cannot be counted)."""
    if getattr(session, "_step_hook", None) is None:
        return {}
    return {"optimizer_steps": int(session.optimizer_steps), "backward_passes": int(session.backward_passes)}


def accumulation_problem(state: Mapping[str, Any]) -> Optional[str]:
    """Why gradient accumulation makes this resume inexact, or None (also when the sidecar holds the
    pending gradients and the loop's last optimizer step: :class:`StepCadence` resumes them)."""
    accumulation = state.get("accumulation") or {}
    if accumulation.get("last_opt_step") is not None and (
            accumulation.get("gradients") is not None or not state.get("pending_gradients")):
        return None
    if state.get("pending_gradients"):
        return PENDING
    cadence = state.get("cadence") or {}
    steps, passes = cadence.get("optimizer_steps"), cadence.get("backward_passes")
    if steps is not None and passes is not None and steps < passes:
        return CADENCE.format(steps=steps, passes=passes)
    return None


def capture(*, epoch: int, next_epoch: int, model: Optional[torch.nn.Module], ema: Optional[torch.nn.Module],
            ema_updates: Optional[int] = None, optimizer: Optional[torch.optim.Optimizer] = None,
            scaler: Any = None, settings: Optional[Mapping[str, Any]] = None,
            data: Optional[Mapping[str, Any]] = None, checkpoint: Optional[os.PathLike] = None,
            extra: Optional[Mapping[str, Any]] = None, save_optimizer: bool = True,
            cadence: Optional[Mapping[str, int]] = None, reuse: Optional[Mapping[str, Any]] = None,
            last_opt_step: Optional[int] = None) -> Dict[str, Any]:
    """The sidecar's contents. ``save_optimizer`` False: the release stores the optimizer exactly
    (YOLOv5), only its pending gradients are checked.

    What the next training forward changes (RNG states, the model's BatchNorm buffers, gradients,
    the GradScaler) is copied now. What only the next optimizer step changes (the model's
    parameters, the EMA, which updates after the step, the optimizer state) is copied by
    :class:`Writer` on its thread, and an optimizer-step hook holds the next step until that copy
    is done: the save blocks training for the small part only. ``last_opt_step``: the loop's batch
    of the last optimizer step, saved with the pending gradients where the release restarts it.
    """
    pending = pending_gradients(optimizer)
    scaler_state = None
    if scaler is not None and getattr(scaler, "is_enabled", lambda: False)():
        scaler_state = dict(scaler.state_dict())
    reuse = reuse or {}
    deferred = []
    if model is not None:
        deferred.append(lambda state: state["model"].update(cpu_state(model, reuse.get("model"), "params")))
    if ema is not None:
        deferred.append(lambda state: state.__setitem__("ema", cpu_state(ema, reuse.get("ema"))))
    if optimizer is not None and save_optimizer:
        deferred.append(lambda state: state.__setitem__("optimizer", _cpu_tree(optimizer.state_dict())))
    return {
        "format": FORMAT, "version": VERSION, "yolo_det": __version__, "torch": str(torch.__version__),
        "checkpoint": None if checkpoint is None else Path(checkpoint).name,
        "epoch": int(epoch), "data": {"next_epoch": int(next_epoch), "step": 0, **dict(data or {})},
        "rng": rng_state(), "scaler": scaler_state,
        "model": cpu_state(model, reuse.get("model"), "buffers"), "ema": None,
        "ema_updates": None if ema_updates is None else int(ema_updates), "optimizer": None,
        "caches": {"model": module_caches(model), "ema": module_caches(ema)},
        "settings": dict(settings or {}), "pending_gradients": pending, "cadence": dict(cadence or {}),
        "fingerprint_step": _unfinished_fingerprint_step(),
        "accumulation": None if last_opt_step is None else {
            "last_opt_step": int(last_opt_step), "gradients": gradients(optimizer) if pending else None},
        "extra": dict(extra or {}), DEFERRED: deferred,
    }


def _unfinished_fingerprint_step() -> Optional[Dict[str, Any]]:
    recorder = fingerprint.active()
    return None if recorder is None else recorder.unfinished_step()


def continue_fingerprint(state: Mapping[str, Any]) -> None:
    """A resumed process's fingerprint log continues the step the interrupted one left unfinished."""
    recorder = fingerprint.active()
    if recorder is not None and state.get("fingerprint_step"):
        recorder.continue_step(state["fingerprint_step"])


DEFERRED = "_copy_on_writer_thread"
_copied = threading.Event()
_copied.set()
_step_hook: List[Any] = []


def _hold_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    _copied.wait()  # the writer thread is still copying parameters/EMA/optimizer state of the last save


def _install_step_hook() -> bool:
    """A global optimizer-step pre-hook that waits for the writer's copy (torch >= 2.0), once."""
    if not _step_hook:
        try:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
        except ImportError:  # pragma: no cover - torch < 2.0: the copy stays on the training thread
            return False
        _step_hook.append(register_optimizer_step_pre_hook(_hold_step))
    return True


def finish_copy(state: Dict[str, Any]) -> Dict[str, Any]:
    """Run what :func:`capture` left for later (also for a state written synchronously)."""
    for fill in state.pop(DEFERRED, None) or ():
        fill(state)
    return state


class Writer:
    """Writes sidecars atomically on a background thread; one write in flight at a time.

    The state is copied before :meth:`write` returns, so training goes on while the file is
    written. :meth:`wait` blocks until the last write is on disk (before the next save, before a
    requested stop, at exit).
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.written: List[Path] = []
        self.last: Optional[Mapping[str, Any]] = None

    def write(self, path: os.PathLike, state: Dict[str, Any], background: bool = True,
              best: Optional[os.PathLike] = None, staged: Optional[os.PathLike] = None) -> None:
        """Write ``state`` to ``path``; with ``best`` (the ``best.pt`` the release just saved from the same
        state) that checkpoint gets the same sidecar too: a hard link, so it costs no copy.

        ``staged``: the release's checkpoint written as ``last.pt.partial``. The sidecar records its digest,
        replaces the previous sidecar (kept as ``.prev``), and only then is the checkpoint renamed into place:
        a kill at any instant leaves ``last.pt`` with a sidecar of its digest (:func:`consistent_state`)."""
        self.wait()
        self.last = state  # its tensors are refilled by the next capture(reuse=writer.last), after wait()
        path = Path(path)
        best = None if best is None else sidecar_path(best)
        staged = None if staged is None else Path(staged)
        if not background or not _install_step_hook():
            finish_copy(state)
            if not background:
                self._write(path, state, best, staged)
                return
        elif state.get(DEFERRED):
            _copied.clear()
        self._thread = threading.Thread(target=self._copy_and_write, args=(path, state, best, staged),
                                        name="yolo-det-sidecar", daemon=False)
        self._thread.start()

    def _copy_and_write(self, path: Path, state: Dict[str, Any], best: Optional[Path] = None,
                        staged: Optional[Path] = None) -> None:
        try:
            finish_copy(state)
        except BaseException as exc:  # reported by wait()
            self.error = exc
            if staged is not None:  # the checkpoint goes in place all the same (its old sidecar no longer matches)
                _replace_quietly(staged, final_path(staged))
            return
        finally:
            _copied.set()
        self._write(path, state, best, staged)

    def _write(self, path: Path, state: Dict[str, Any], best: Optional[Path] = None,
               staged: Optional[Path] = None) -> None:
        tmp: Optional[Path] = None
        epoch = state.get("epoch")
        try:
            if staged is not None:
                state["checkpoint_sha256"] = file_digest(staged)
            elif not state.get("checkpoint_sha256") and state.get("checkpoint"):
                checkpoint = path.with_name(str(state["checkpoint"]))  # a tree patched before staging existed
                if checkpoint.is_file():
                    state["checkpoint_sha256"] = file_digest(checkpoint)
            if staged is not None:
                kill_if_asked("before", epoch)
            tmp = atomic.temp_path(path)
            torch.save(dict(state), tmp)
            if best is not None:  # before the rename: the link keeps this inode when the next save replaces path
                _link_or_copy(tmp, best)
            if staged is not None and path.is_file():  # the sidecar of the checkpoint still in place
                _link_or_copy(path, path.with_name(path.name + PREVIOUS_SUFFIX))
            atomic.replace(tmp, path)
            mark_run(path.parent, state.get("settings"))  # a run whose training start did not mark it
            self.written.append(path)
        except BaseException as exc:  # reported by wait(); a failed sidecar must not kill training
            self.error = exc
            try:
                if tmp is not None:
                    tmp.unlink()
            except OSError:
                pass
        if staged is not None:
            kill_if_asked("between", epoch)
            _replace_quietly(staged, final_path(staged))
            kill_if_asked("after", epoch)

    def settle_param_groups(self, path: os.PathLike, optimizer: Optional[torch.optim.Optimizer], epoch: int) -> bool:
        """Write the last sidecar (of ``epoch``) again when ``optimizer``'s hyperparameters changed since it
        was captured; whether it was.

        Called where the loop leaves the epoch: 8.0 steps its learning-rate scheduler after the save, and
        the writer thread copies the optimizer at a moment that races with that step.
        """
        error = self.wait()
        if error is not None:
            self.error = error  # reported by the next wait()
            return False
        saved = None if self.last is None or self.last.get("epoch") != epoch else self.last.get("optimizer")
        if saved is None or optimizer is None:
            return False
        live = _cpu_tree(optimizer.state_dict()["param_groups"])
        if live == saved.get("param_groups"):
            return False
        saved["param_groups"] = live
        self.write(path, self.last)
        return True

    def wait(self) -> Optional[BaseException]:
        """Block until the write in flight is done; return (and clear) its error, if any."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self.error = self.error, None
        return error


def _replace_quietly(source: Path, target: Path) -> None:
    try:
        atomic.replace(source, target)
    except OSError as exc:  # pragma: no cover - the file system refused: said, training goes on
        print(f"yolo-det: warning: {source} could not be renamed to {target.name}: {exc}", flush=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes ``source``'s contents, atomically: a hard link where the file system allows it."""
    tmp = atomic.temp_path(target)
    try:
        tmp.unlink()
        os.link(source, tmp)
    except OSError:
        import shutil

        shutil.copyfile(source, tmp)
    atomic.replace(tmp, target)


# -- DDP: every other rank's RNG states ------------------------------------------------------------
def rank_path(checkpoint: os.PathLike, rank: int) -> Path:
    """Where DDP rank ``rank`` (> 0) keeps its RNG states beside ``checkpoint``: ``last.pt.yolo-det.rank1``."""
    return sidecar_path(checkpoint).with_name(f"{sidecar_path(checkpoint).name}.rank{int(rank)}")


def write_rank_state(checkpoint: os.PathLike, epoch: int, rank: int) -> Path:
    """At the end of ``epoch``, a DDP rank other than 0 writes its RNG states (atomically).

    Rank 0's go into the sidecar; the others draw their own augmentation and dropout streams, so a
    resumed rank that took rank 0's would train on other batches than the uninterrupted one.
    """
    path = rank_path(checkpoint, rank)
    tmp = atomic.temp_path(path)
    torch.save({"format": FORMAT, "version": VERSION, "rank": int(rank), "epoch": int(epoch), "rng": rng_state()},
               tmp)
    if path.is_file():  # kept until the next save: rank 0 may be killed before its checkpoint of this epoch is in place
        _link_or_copy(path, path.with_name(path.name + PREVIOUS_SUFFIX))
    atomic.replace(tmp, path)
    return path


def rank_rng(checkpoint: os.PathLike, state: Mapping[str, Any], rank: int) -> Any:
    """The RNG states rank ``rank`` resumes with: the sidecar's for rank 0 (and without DDP), else its own
    file's; a string saying why when that is missing or of another epoch."""
    if rank <= 0:
        return state["rng"]
    path = rank_path(checkpoint, rank)
    try:
        saved = read(path)
    except ResumeStateError as exc:
        return f"rank {rank}'s RNG states: {exc}"
    if saved.get("rank") != rank or saved.get("epoch") != state.get("epoch"):
        previous = path.with_name(path.name + PREVIOUS_SUFFIX)  # this rank saved the epoch whose checkpoint a kill
        try:                                                     # kept from its place: the one before it matches
            kept = read(previous) if previous.is_file() else None
        except ResumeStateError:
            kept = None
        if kept is not None and kept.get("rank") == rank and kept.get("epoch") == state.get("epoch"):
            return kept["rng"]
        return (f"{path.name} holds rank {saved.get('rank')}'s RNG states of epoch {saved.get('epoch')}, "
                f"the sidecar is of epoch {state.get('epoch')}")
    return saved["rng"]


# -- read and check --------------------------------------------------------------------------
def read(path: os.PathLike) -> Dict[str, Any]:
    """Load a sidecar; raises :class:`ResumeStateError` when it is unreadable or of another format."""
    path = Path(path)
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            state = torch.load(path, map_location="cpu")
    except FileNotFoundError:
        raise ResumeStateError(f"{path} does not exist") from None
    except Exception as exc:
        raise ResumeStateError(f"{path} cannot be read ({type(exc).__name__}: {exc}); it is damaged or "
                               "was not written by yolo-det") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ResumeStateError(f"{path} is not a yolo-det resume state")
    if state.get("version") != VERSION:
        raise ResumeStateError(f"{path} has resume-state version {state.get('version')!r}; this yolo-det reads "
                               f"version {VERSION}: resume with the yolo-det version that wrote it")
    return state


def weight_mismatch(saved: Optional[Mapping[str, torch.Tensor]], module: Optional[torch.nn.Module],
                    what: str) -> Optional[str]:
    """Why ``module`` (loaded from the release's lossy checkpoint) is not ``saved`` rounded, or None.

    Floating tensors must equal the saved fp32 values rounded to the module's checkpoint
    precision (fp16); other tensors must be equal.
    """
    if saved is None or module is None:
        return None
    current = module.state_dict()
    if set(current) != set(saved):
        missing = sorted(set(saved) ^ set(current))[:3]
        return f"the {what} has other tensors than the resume state ({', '.join(missing)} ...)"
    for name, value in current.items():
        ref = saved[name]
        if ref.shape != value.shape:
            return f"{what} tensor {name} has shape {tuple(value.shape)}, the resume state {tuple(ref.shape)}"
        value = value.detach().cpu()
        if ref.is_floating_point():
            if not (torch.equal(ref.half().to(value.dtype), value) or torch.equal(ref.to(value.dtype), value)):
                return f"{what} tensor {name} in the checkpoint is not the resume state's value (rounded)"
        elif not torch.equal(ref.to(value.dtype), value):
            return f"{what} tensor {name} in the checkpoint differs from the resume state"
    return None


def load_module(module: Optional[torch.nn.Module], saved: Optional[Mapping[str, torch.Tensor]]) -> bool:
    """Copy the full-precision ``saved`` state into ``module`` in place; False when either is missing."""
    if module is None or saved is None:
        return False
    with torch.no_grad():
        current = module.state_dict()
        for name, value in saved.items():
            current[name].copy_(value.to(current[name].dtype) if not current[name].is_floating_point() else value)
    return True


def write_run_info(**fields: Any) -> None:
    """Update ``$YOLO_DET_RUN_INFO`` (set by ``yolo-det verify --resume-at``): the checkpoint, the
    release's resume command, whether the run stopped early. Nothing happens when it is unset."""
    path = os.environ.get(INFO_ENV, "").strip()
    if not path:
        return
    target = Path(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {}
    except ValueError:
        data = {}
    data.update({k: (str(v) if isinstance(v, Path) else v) for k, v in fields.items()})
    data.setdefault("cwd", os.getcwd())
    data.setdefault("pid", os.getpid())
    atomic.write_text(target, json.dumps(data, indent=2) + "\n")  # DDP ranks each write it (the same fields)


def python_command(*args: str) -> list:
    """This interpreter running this process's script (``sys.argv[0]``, absolute) with ``args``."""
    return [sys.executable, os.path.abspath(sys.argv[0]), *args]


def stop_epoch() -> Optional[int]:
    """``$YOLO_DET_STOP_AFTER_EPOCH``: stop cleanly once this many epochs are complete (None: unset)."""
    raw = os.environ.get(STOP_ENV, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


__all__ = ["FORMAT", "KILL_ENV", "KILL_POINTS", "MARKER", "STOP_ENV", "adopt_previous", "consistent_state",
           "file_digest", "final_path", "kill_if_asked", "previous_path", "staged_path", "unsaved", "SUFFIX", "VERSION", "ResumeStateError", "StepCadence", "Writer",
           "accumulation_problem", "cadence", "capture", "continue_fingerprint", "expects_sidecar", "finish_copy", "gradients",
           "INEXACT_ENV", "RUN_RECORD", "inexact_allowed", "mark_run", "marked_settings", "missing_state", "refusal",
           "run_folder", "run_record",
           "load_module", "load_module_caches", "loop_variable", "module_caches", "python_command", "rank_path",
           "rank_rng", "read", "rng_state", "write_rank_state", "set_gradients", "set_rng_state", "sidecar_path", "stop_epoch", "weight_mismatch",
           "write_run_info"]
