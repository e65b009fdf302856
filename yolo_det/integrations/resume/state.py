"""What a sidecar holds and how it is captured and put back: the format, the RNG states (through
:mod:`yolo_det.core.rng`), full-precision CPU copies of the model and EMA, the tensors modules cache outside their
state_dict, the optimizer; the part only the next optimizer step changes is copied on the writer's thread while
an optimizer-step hook holds that step (:func:`capture`, :func:`finish_copy`); checks of the release's lossy
checkpoint against the saved weights (:func:`weight_mismatch`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import torch

from ... import __version__
from ...core.rng import rng_state, set_rng_state
from ...record import fingerprint
from .cadence import gradients, pending_gradients

FORMAT = "yolo-det-resume"
VERSION = 1


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


__all__ = ["DEFERRED", "FORMAT", "VERSION", "capture", "continue_fingerprint", "cpu_state", "finish_copy",
           "load_module", "load_module_caches", "module_caches", "rng_state", "set_rng_state", "weight_mismatch"]
