"""Per-step training fingerprints: what is recorded, when, and the hooks that record it.

For every optimizer step the recorder writes digests of the input batches, the loss, every
gradient, the learning rates, every parameter and buffer after the step, the EMA weights and
the RNG states; at the end, the final model (and EMA) state. It needs no call sites in the
training script -- it hooks in while it is active:

* global optimizer step hooks: gradients before the step; lr, buffers and RNG states after it;
  the parameters and the EMA of step k when step k is complete: when the next batch leaves a
  ``DataLoader`` (parameters are unchanged since step k ended; EMAs update after
  ``optimizer.step()``, before the next batch), else when step k+1 starts, or at the end. That
  is also when the line of step k is written and flushed, so a killed run keeps every
  completed step; one digest pass over the big tensors and one transfer per step;
* ``DataLoader`` iterators: every batch, images and targets alike, as it leaves the loader;
* ``torch.autograd.backward`` (``loss.backward()`` goes through it): the loss tensor;
* the model and EMA come from ``session.track(model, ema)``; without them, the optimizer's
  parameters are fingerprinted under positional names;
* validations (:func:`record_predictions` for each NMS batch, :func:`record_validation` after
  the metrics): one ``val`` line with a digest per image's predictions, written after the line
  of the step it follows.

Under ``torch.distributed`` the ranks compare parameter digests after every step
(``all_gather``); a rank that holds different parameters is written to the log and warned
about. ``YOLO_DET_FINGERPRINT=<path>`` turns all this on in :func:`yolo_det.configure`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import hashlib
import itertools
import operator
import os
import socket
import sys
import warnings
import weakref
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import __version__
from ..core import active as active_session
from .capture import StepCapture
from .causes import run_facts
from .digest import Digester
from .log import (
    KINDS, FingerprintError, FinalRecord, Log, LogWriter, StepRecord, ValRecord, rank_path, rank_paths, read_log,
)
from .sources import (
    Snapshot, StateView, data_ptr as _data_ptr, ema_module, flatten_batch, item_values, optimizer_values,
    rng_digests, unwrap,
)

ENV_VAR = "YOLO_DET_FINGERPRINT"

_active: Optional["Recorder"] = None
_originals: Dict[str, Any] = {}
_backward_depth = 0
_atexit_registered = False


class DDPMismatchWarning(RuntimeWarning):
    """DDP ranks hold different parameters after an optimizer step."""


# -- one step's pending digests --------------------------------------------------------------
class _Step:
    """Digests of one step, on device until the step's line is written."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.kinds: Dict[str, List[Tuple[List[str], Any]]] = collections.defaultdict(list)
        self.values: List[Tuple[str, torch.Tensor]] = []  # ("loss"|"items", float tensor)
        self.lr: Dict[str, float] = {}
        self.ddp: Optional[Dict[str, Any]] = None
        self.params_pending = False  # parameters still to digest (at the next step's start)
        self.buffers: Tuple[List[str], List[torch.Tensor]] = ([], [])  # copies, digested later

    def add(self, kind: str, names: Sequence[str], digests: Any) -> None:
        """``digests``: a ``T x 2`` int64 tensor, or a list of hex strings (host digests)."""
        if names:
            self.kinds[kind].append((list(names), digests))

    def resolve(self) -> Tuple[Dict[str, Tuple[List[str], str]], List[float], List[List[float]]]:
        """Transfer every device digest and value at once; return hex per kind, losses, items."""
        order = [k for k in KINDS if k in self.kinds] + sorted(set(self.kinds) - set(KINDS))
        parts = [d for kind in order for _, d in self.kinds[kind] if isinstance(d, torch.Tensor)]
        host = _transfer(parts + [v for _, v in self.values])
        kinds: Dict[str, Tuple[List[str], str]] = {}
        cursor = 0
        for kind in order:
            names: List[str] = []
            hexes: List[str] = []
            for part_names, digests in self.kinds[kind]:
                names.extend(part_names)
                if isinstance(digests, torch.Tensor):
                    hexes.append(host[cursor].view(np.uint64).astype(">u8").tobytes().hex())
                    cursor += 1
                else:
                    hexes.extend(digests)
            kinds[kind] = (names, "".join(hexes))
        losses: List[float] = []
        items: List[List[float]] = []
        for (what, _), raw in zip(self.values, host[cursor:]):
            floats = raw.view(np.float64).tolist()
            if what == "loss":
                losses.append(floats[0])
            else:
                items.append(floats)
        return kinds, losses, items


def _transfer(parts: Sequence[torch.Tensor]) -> List[np.ndarray]:
    """Bring int64 parts (or float64 parts, as raw bits) to the host with one copy per device."""
    out: List[Optional[np.ndarray]] = [None] * len(parts)
    by_device: Dict[torch.device, List[int]] = collections.defaultdict(list)
    for i, part in enumerate(parts):
        by_device[part.device].append(i)
    for indices in by_device.values():
        flat = [parts[i].reshape(-1) for i in indices]
        flat = [t.view(torch.int64) if t.dtype == torch.float64 else t for t in flat]
        joined = torch.cat(flat).cpu().numpy()
        offset = 0
        for i, t in zip(indices, flat):
            n = t.numel()
            out[i] = joined[offset:offset + n].reshape(parts[i].shape) if parts[i].dtype != torch.float64 \
                else joined[offset:offset + n]
            offset += n
    return [a for a in out]  # type: ignore[misc]


# -- the recorder ----------------------------------------------------------------------------
class Recorder:
    """Writes the fingerprint log of one process while it is active (see :func:`start`)."""

    def __init__(self, path: os.PathLike, *, session: Any = None, model: Optional[torch.nn.Module] = None,
                 ema: Any = None, rank: Optional[int] = None) -> None:
        if rank is None:
            rank = session.rank if session is not None else int(os.environ.get("RANK", "-1") or -1)
        self.rank = rank
        self.session = session
        self._model, self._ema = model, ema
        self.path = rank_path(path, rank)
        self.digester = Digester()
        self.steps = 0
        self._views: Dict[int, StateView] = {}
        self._batches: List[Tuple[int, List[str], Optional[torch.Tensor], List[Tuple[str, str]]]] = []
        self._losses: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = []
        self._items: List[torch.Tensor] = []
        self._current: Optional[_Step] = None
        self._open: Optional[_Step] = None
        self._last_optimizer: Optional["weakref.ref[torch.optim.Optimizer]"] = None
        self._snapshot: Optional[Snapshot] = None
        self._ddp_warned = False
        self._ddp_disabled = False
        self._ddp_size_checked = False
        self._hooks: List[Any] = []
        self._predictions: List[Tuple[str, torch.Tensor]] = []  # NMS outputs since the last validation
        self._pending_vals: List[Dict[str, Any]] = []  # validations whose step line is not written yet
        self.validations = 0
        self.run_dir: Optional[str] = None
        self.closed = False
        self.capture = StepCapture.from_env(lambda: [(self.model(), ""), (self.ema(), "ema")])
        if self.capture is not None:  # verify --locate: ops of one step, then the process ends
            self.capture.path = rank_path(self.capture.path, rank)
            self.on_batch = self.capture.around_batch(self.on_batch)  # type: ignore[method-assign]
        self._header_base = self._header()
        self._header_extra: Dict[str, Any] = {}
        self.writer = LogWriter(self.path, self._header_base)

    # -- header, model lookup ----------------------------------------------------------------
    def _header(self) -> Dict[str, Any]:
        settings = getattr(self.session, "settings", None)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            world = dist.get_world_size()
        return {
            "yolo_det": __version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "host": socket.gethostname(),
            "rank": max(self.rank, 0),
            "world_size": world,
            "command": list(sys.argv),
            "cwd": os.getcwd(),
            "pid": os.getpid(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
            "mode": getattr(settings, "mode", None),
            "seed": getattr(self.session, "seed", None),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **run_facts(self.session, exclude=(self.path,)),
        }

    def update_header(self, **fields: Any) -> bool:
        """Add facts to the header (e.g. the seed a patched script applied itself) while no step
        is written yet; returns False when it is too late."""
        self._header_extra.update(fields)
        return self.writer.replace_header({**self._header_base, **self._header_extra})

    def model(self) -> Optional[torch.nn.Module]:
        model = self._model if self._model is not None else self._extra("model")
        return unwrap(model) if model is not None else None

    def ema(self) -> Optional[torch.nn.Module]:
        ema = self._ema if self._ema is not None else self._extra("ema")
        return ema_module(ema) if ema is not None else None

    def _extra(self, key: str) -> Any:
        extra = getattr(self.session, "extra", None)
        return extra.get(key) if isinstance(extra, dict) else None

    def _view(self, module: torch.nn.Module) -> StateView:
        view = self._views.get(id(module))
        if view is None or view.module is not module:
            view = self._views[id(module)] = StateView(module)
        return view

    def _params(self, optimizer: Optional[torch.optim.Optimizer]) -> Tuple[List[str], List[torch.Tensor]]:
        """Trainable tensors with names: the tracked model's parameters, else the optimizer's."""
        model = self.model()
        if model is not None:
            view = self._view(model)
            return view.names[:view.n_params], view.tensors(0, view.n_params)
        names, params = [], []
        for g, group in enumerate(optimizer.param_groups if optimizer is not None else []):
            for i, p in enumerate(group["params"]):
                names.append(f"group{g}.{i}")
                params.append(p)
        return names, params

    def _state(self, module: Optional[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer],
               prefix: str = "") -> Tuple[List[str], List[torch.Tensor], int]:
        """Parameters and buffers of ``module`` (or the optimizer's parameters) and the parameter count."""
        if module is not None:
            view = self._view(module)
            return [prefix + n for n in view.names], view.tensors(), view.n_params
        if optimizer is None:
            return [], [], 0
        names, params = self._params(optimizer)
        return [prefix + n for n in names], params, len(params)

    # -- hooks -------------------------------------------------------------------------------
    def install(self) -> "Recorder":
        """Register the optimizer hooks and wrap DataLoader iterators and ``torch.autograd.backward``."""
        from torch.optim import optimizer as optim_mod

        pre, post = self._pre_step, self._post_step
        if self.capture is not None:
            pre, post = self.capture.around_pre(pre), self.capture.around_post(post)
        self._hooks.append(optim_mod.register_optimizer_step_pre_hook(pre))
        self._hooks.append(optim_mod.register_optimizer_step_post_hook(post))
        _patch()
        return self

    def _pre_step(self, optimizer, args, kwargs) -> None:
        """One digest pass over the previous step's parameters, buffers and EMA (unchanged since
        it ended) and this step's gradients and losses; then the previous step's line is written."""
        previous, self._open = self._open, None
        step = _Step(self.steps + 1)
        self._take_batches(step)
        names, params = self._params(optimizer)
        state_names, state = self._state_of(previous, names, params)
        all_grads = [p.grad for p in params]
        has_grad = tuple(map(operator.is_not, all_grads, itertools.repeat(None)))
        if all(has_grad):
            grad_names, grads = names, all_grads
        else:
            grad_names = list(itertools.compress(names, has_grad))
            grads = list(itertools.compress(all_grads, has_grad))
        if any(g.is_sparse for g in grads):
            grads = [g.to_dense() if g.is_sparse else g for g in grads]
        loss_names, losses = self._take_losses(step)
        tensors = state + grads + losses
        if tensors:
            hint = ("pre", tuple(map(_data_ptr, state)), tuple(map(_data_ptr, params)), has_grad,
                    tuple((t.dtype, t.shape) for t in losses))
            digests = self.digester.digest(tensors, hint, stable=len(state))
            start = 0
            for target, kind, kind_names in ((previous, "param", state_names[0]), (previous, "ema", state_names[1]),
                                             (step, "grad", grad_names), (step, "loss", loss_names)):
                if target is not None:
                    target.add(kind, kind_names, digests[start:start + len(kind_names)])
                start += len(kind_names)
        if previous is not None:
            self._write(previous)
        self._flush_validations(self.steps)
        self._current = step

    def _state_of(self, previous: Optional[_Step], names: List[str], params: List[torch.Tensor]
                  ) -> Tuple[Tuple[List[str], List[str]], List[torch.Tensor]]:
        """What is left to digest of the previous step: (param names, ema names) and their tensors.

        Parameters (unless already digested for the DDP check), the buffer copies taken after
        the step, and the EMA, which updates after ``optimizer.step()``.
        """
        if previous is None:
            return ([], []), []
        kept_names, kept = (names, params) if previous.params_pending else ([], [])
        buffer_names, buffers = previous.buffers
        ema_names, ema = self._ema_state()
        return (kept_names + buffer_names, ema_names), kept + buffers + ema

    def _post_step(self, optimizer, args, kwargs) -> None:
        """After the step: lr, buffers and RNG states now; parameters with the next step's digest
        pass (or now, under DDP, for the cross-rank check)."""
        step = self._current if self._current is not None else _Step(self.steps + 1)
        self._current = None
        self.steps = step.number
        step.lr = optimizer_values(optimizer)
        self._last_optimizer = weakref.ref(optimizer)
        model = self.model()
        if model is not None:  # buffers change in the next forward: copy them now, digest them later
            view = self._view(model)
            buffers = view.tensors(view.n_params)
            if buffers:
                if self._snapshot is None or self._snapshot.key != tuple(map(_data_ptr, buffers)):
                    self._snapshot = Snapshot(buffers)
                step.buffers = (view.names[view.n_params:], self._snapshot.take())
        if self._ddp_world() > 1:
            names, params = self._params(optimizer)
            digests = self.digester.digest(params, ("ddp", tuple(map(_data_ptr, params))), stable=len(params))
            step.add("param", names, digests)
            step.ddp = self._ddp_check(digests, names, step.number)
        else:
            step.params_pending = True
        rng = rng_digests()
        step.add("rng", list(rng), list(rng.values()))
        self._open = step

    def on_batch(self, source: Any, batch: Any) -> None:
        """Digest a batch as it leaves a DataLoader iterator (``source``), before anything edits it.

        The previous optimizer step is complete by now (its EMA update included): its line is written first.
        """
        if self._open is not None:
            self._write_open()
        tensors: List[Tuple[str, torch.Tensor]] = []
        hosts: List[Tuple[str, str]] = []
        flatten_batch(batch, "", tensors, hosts)
        digests = self.digester.digest([t for _, t in tensors]) if tensors else None
        key = id(getattr(source, "_dataset", source))
        self._batches.append((key, [n for n, _ in tensors], digests, hosts))

    def on_backward(self, roots: Any) -> None:
        """Keep the tensors a backward pass starts from (the loss); digested with the gradients."""
        roots = [roots] if isinstance(roots, torch.Tensor) else [r for r in roots if isinstance(r, torch.Tensor)]
        for root in roots:
            root = root.detach()
            value = root.reshape(1).to(torch.float64) if root.numel() == 1 and root.is_floating_point() else None
            self._losses.append((root, value))

    def on_items(self, items: Any) -> None:
        """Keep loss components passed to ``session.backward(loss=...)`` (a float64 copy)."""
        values = item_values(items)
        if values is not None:
            self._items.append(values)

    def _take_batches(self, step: _Step) -> None:
        batches, self._batches = self._batches, []
        if not batches:
            return
        train_key = batches[-1][0]  # the loader of the step's own batch; others (validation) are dropped
        for j, (_, names, digests, hosts) in enumerate(b for b in batches if b[0] == train_key):
            if digests is not None:
                step.add("data", [f"batch{j}{name}" for name in names], digests)
            if hosts:
                step.add("data", [f"batch{j}{name}" for name, _ in hosts], [h for _, h in hosts])

    def _take_losses(self, step: _Step) -> Tuple[List[str], List[torch.Tensor]]:
        """Names and tensors of the losses (and components) since the last step; values go to ``step``."""
        losses, self._losses = self._losses, []
        items, self._items = self._items, []
        names = [f"backward{j}" for j in range(len(losses))] + [f"items{j}" for j in range(len(items))]
        step.values.extend(("loss", value) for _, value in losses if value is not None)
        step.values.extend(("items", values) for values in items)
        return names, [root for root, _ in losses] + items

    # -- validations -----------------------------------------------------------------------
    def on_predictions(self, output: Any) -> None:
        """Digest one NMS batch's predictions (a tensor per image) now; they join the next validation."""
        if isinstance(output, tuple) and output and isinstance(output[0], (list, tuple)):
            output = output[0]  # Ultralytics with return_idxs: (output, kept indices)
        tensors = [t.detach() for t in output if isinstance(t, torch.Tensor)] if isinstance(output, (list, tuple)) \
            else [output.detach()] if isinstance(output, torch.Tensor) else []
        batch = sum(1 for n, _ in self._predictions if n.endswith(".image0"))
        names = [f"batch{batch}.image{i}" for i in range(len(tensors))]
        self._predictions.extend(zip(names, prediction_digests(tensors)))

    def on_validation(self, epoch: Optional[int], metrics: Dict[str, float], best: Optional[bool],
                      stop: Optional[bool]) -> None:
        """Close a validation: its predictions so far, metrics and flags, written after the current step's line."""
        predictions, self._predictions = self._predictions, []
        self._pending_vals.append({"epoch": epoch, "after_step": self.steps, "predictions": predictions,
                                   "metrics": dict(metrics), "best": best, "stop": stop})

    def set_stop(self, stop: bool) -> None:
        """Whether training stops after the latest validation (early stopping), if its line is not written yet."""
        if self._pending_vals:
            self._pending_vals[-1]["stop"] = bool(stop)

    def _flush_validations(self, written_step: int, last: bool = False) -> None:
        keep = []
        for val in self._pending_vals:
            if val["after_step"] > written_step:
                keep.append(val)
                continue
            names = [n for n, _ in val["predictions"]]
            hexes = "".join(h for _, h in val["predictions"])
            stop = val["stop"]
            if stop is None and not last:
                stop = False  # training went on after it
            self.writer.write_validation(val["epoch"], val["after_step"], names, hexes, val["metrics"], val["best"],
                                         stop)
            self.validations += 1
        self._pending_vals = keep

    def _ema_state(self) -> Tuple[List[str], List[torch.Tensor]]:
        ema = self.ema()
        if ema is None:
            return [], []
        names, tensors, _ = self._state(ema, None)
        return names, tensors

    def _write(self, step: _Step) -> None:
        kinds, losses, items = step.resolve()
        self.writer.write_step(step.number, kinds, lr=step.lr, losses=losses, items=items, ddp=step.ddp)

    def _write_open(self) -> None:
        """Digest what is left of the completed step (parameters, buffers, EMA) and write its line.

        Runs outside inference mode (the next batch may come from a validation loop inside it), so
        the digester's reusable buffers stay ordinary tensors.
        """
        step, self._open = self._open, None
        optimizer = self._last_optimizer() if self._last_optimizer is not None else None
        names, params = self._params(optimizer) if step.params_pending else ([], [])
        (param_names, ema_names), state = self._state_of(step, names, params)
        if state:
            with torch.inference_mode(False):
                digests = self.digester.digest(state, ("open", tuple(map(_data_ptr, state))), stable=len(state))
            step.add("param", param_names, digests[:len(param_names)])
            step.add("ema", ema_names, digests[len(param_names):])
        self._write(step)

    def _flush_open(self) -> None:
        """At the end of training: add the parameters and EMA to the last step and write its line."""
        step, self._open = self._open, None
        if step is None:
            return
        names, tensors = self._ema_state()
        optimizer = self._last_optimizer() if self._last_optimizer is not None else None
        kept_names, kept = [], []
        if step.params_pending and (optimizer is not None or self.model() is not None):
            kept_names, kept = self._params(optimizer)
        kept_names, kept = kept_names + step.buffers[0], kept + step.buffers[1]
        if kept or tensors:
            digests = self.digester.digest(kept + tensors)
            step.add("param", kept_names, digests[:len(kept)])
            step.add("ema", names, digests[len(kept):])
        self._write(step)

    # -- DDP ---------------------------------------------------------------------------------
    def _ddp_check(self, digests: torch.Tensor, names: List[str], step: int) -> Optional[Dict[str, Any]]:
        dist = torch.distributed
        if self._ddp_disabled or not (dist.is_available() and dist.is_initialized()):
            return None
        world = dist.get_world_size()
        if world < 2:
            return None
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        flat = digests.reshape(-1).to(device)
        if not self._ddp_size_checked:
            sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
            dist.all_gather(sizes, torch.tensor([flat.numel()], dtype=torch.int64, device=device))
            self._ddp_size_checked = True
            if len({int(s) for s in sizes}) > 1:
                self._ddp_disabled = True
                self._warn(f"yolo-det: DDP ranks train different parameter lists ({[int(s) for s in sizes]} "
                           "digest words); the cross-rank check is off")
                return {"world_size": world, "ok": False, "rank": None, "tensor": None, "ranks": []}
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        rows = [g.cpu().numpy().reshape(-1, 2) for g in gathered]
        keys = [r.tobytes() for r in rows]
        counts = collections.Counter(keys)
        reference = min(range(world), key=lambda r: (-counts[keys[r]], r))
        differ = [r for r in range(world) if keys[r] != keys[reference]]
        if not differ:
            return {"world_size": world, "ok": True}
        first = differ[0]
        index = int(np.nonzero((rows[first] != rows[reference]).any(1))[0][0])
        info = {"world_size": world, "ok": False, "ranks": differ, "rank": first, "tensor": names[index],
                "reference_rank": reference}
        if not self._ddp_warned:
            self._ddp_warned = True
            self._warn(f"yolo-det: DDP ranks diverged at step {step}: rank {first}'s parameters differ from rank "
                       f"{reference}'s, first at {names[index]} (ranks differing: {differ}); see {self.path}")
        return info

    @staticmethod
    def _ddp_world() -> int:
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    def _warn(self, message: str) -> None:
        if self.rank <= 0:
            warnings.warn(message, DDPMismatchWarning, stacklevel=2)

    # -- closing -----------------------------------------------------------------------------
    def close(self, closed_by: str = "finish") -> Path:
        """Write the pending step and the final state, remove the hooks, close the file."""
        if self.closed:
            return self.path
        self.closed = True
        if self.capture is not None:
            self.capture.finish(exit_process=False)  # the run ended inside the captured step
        try:
            for hook in self._hooks:
                hook.remove()
            self._hooks = []
            self._flush_open()
            self._flush_validations(self.steps, last=True)
            names: List[str] = []
            tensors: List[torch.Tensor] = []
            model = self.model()
            if model is not None:
                names, tensors, _ = self._state(model, None, "model.")
            ema = self.ema()
            if ema is not None:
                ema_names, ema_tensors, _ = self._state(ema, None, "ema.")
                names, tensors = names + ema_names, tensors + ema_tensors
            hexes = ""
            if tensors:
                hexes = _transfer([self.digester.digest(tensors)])[0].view(np.uint64).astype(">u8").tobytes().hex()
            self.writer.write_final(self.steps, names, hexes, closed_by, self.run_dir)
        finally:
            self.writer.close()
        return self.path


def prediction_digests(tensors: Sequence[torch.Tensor]) -> List[str]:
    """One hex digest per tensor: BLAKE2b-128 of its dtype, shape and bytes, after one transfer per dtype.

    NMS outputs are small and of a new shape every batch, where the device digest's per-layout
    set-up would dominate; hashing their bytes on the host is exact and costs well under 1% of NMS.
    """
    out: List[str] = [""] * len(tensors)
    by_dtype: Dict[torch.dtype, List[int]] = collections.defaultdict(list)
    for i, t in enumerate(tensors):
        by_dtype[t.dtype].append(i)
    for dtype, indices in by_dtype.items():
        flat = torch.cat([tensors[i].reshape(-1) for i in indices]).cpu().contiguous()
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        offset = 0
        for i in indices:
            t = tensors[i]
            size = t.numel() * t.element_size()
            meta = f"{str(t.dtype).replace('torch.', '')}|{tuple(t.shape)}|".encode()
            out[i] = hashlib.blake2b(meta + raw[offset:offset + size], digest_size=16).hexdigest()
            offset += size
    return out


# -- global patches --------------------------------------------------------------------------
def _patch() -> None:
    from torch.utils.data import dataloader

    if "next" not in _originals:
        original = dataloader._BaseDataLoaderIter.__next__
        _originals["next"] = original

        def __next__(self):  # noqa: N807 - replaces the iterator's own method
            capture = getattr(_active, "capture", None)
            if capture is not None and capture.active:  # loader traffic is no op of the step (its batch is digested)
                with capture.paused():
                    batch = original(self)
            else:
                batch = original(self)
            recorder = _active
            if recorder is not None and not recorder.closed:
                recorder.on_batch(self, batch)
            return batch

        dataloader._BaseDataLoaderIter.__next__ = __next__
    if "backward" not in _originals:
        original_backward = torch.autograd.backward
        _originals["backward"] = original_backward

        def backward(tensors, *args, **kwargs):
            global _backward_depth
            recorder = _active
            if recorder is not None and not recorder.closed and _backward_depth == 0:
                recorder.on_backward(tensors)
            _backward_depth += 1
            try:
                return original_backward(tensors, *args, **kwargs)
            finally:
                _backward_depth -= 1

        backward.__wrapped__ = original_backward  # type: ignore[attr-defined]
        backward.__doc__ = original_backward.__doc__
        torch.autograd.backward = backward


def _unpatch() -> None:
    from torch.utils.data import dataloader

    original = _originals.pop("next", None)
    if original is not None:
        dataloader._BaseDataLoaderIter.__next__ = original
    original_backward = _originals.pop("backward", None)
    if original_backward is not None and getattr(torch.autograd.backward, "__wrapped__", None) is original_backward:
        torch.autograd.backward = original_backward


# -- public API ------------------------------------------------------------------------------
def start(path: os.PathLike, *, session: Any = None, model: Optional[torch.nn.Module] = None, ema: Any = None,
          rank: Optional[int] = None) -> Recorder:
    """Start fingerprinting this process into ``path`` (``<stem>.rank<r><suffix>`` on DDP rank r > 0).

    ``session`` (default: the current :func:`yolo_det.configure` session) supplies the rank, the
    tracked model and EMA; ``model``/``ema`` override them. A recorder already running is closed
    first. Returns the :class:`Recorder`; :func:`stop` ends it.
    """
    global _active, _atexit_registered
    if session is None:
        session = active_session.current()
    stop(closed_by="restart")
    recorder = Recorder(path, session=session, model=model, ema=ema, rank=rank)
    _active = recorder.install()
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True
    return recorder


def stop(closed_by: str = "finish") -> Optional[Path]:
    """Stop fingerprinting: write the last step and the final state; returns the log path (or None)."""
    global _active
    recorder, _active = _active, None
    _unpatch()
    if recorder is None:
        return None
    return recorder.close(closed_by)


def active() -> Optional[Recorder]:
    """The running recorder, or None."""
    return _active


@contextlib.contextmanager
def fingerprinting(path: os.PathLike, **kwargs: Any) -> Iterator[Recorder]:
    """``with fingerprinting(path, model=..., ema=...):`` -- :func:`start` and :func:`stop` around a block."""
    recorder = start(path, **kwargs)
    try:
        yield recorder
    finally:
        if _active is recorder:
            stop()


def start_from_env(session: Any) -> Optional[Recorder]:
    """Start fingerprinting for ``session`` when ``$YOLO_DET_FINGERPRINT`` names a log path."""
    path = os.environ.get(ENV_VAR, "").strip()
    if not path:
        return None
    return start(path, session=session)


def finish_session(session: Any, run_dir: Optional[os.PathLike] = None) -> None:
    """Close the recorder that belongs to ``session`` (called by ``Session.finish``).

    ``run_dir``: the run's folder (checkpoints, results.csv), recorded in the final line for ``verify``.
    """
    if _active is not None and _active.session is session:
        if run_dir is not None:
            _active.run_dir = str(Path(run_dir).resolve())
        stop()


def record_predictions(output: Any) -> None:
    """Predictions of one NMS batch (a list with a tensor per image), if fingerprinting."""
    if _active is not None and not _active.closed:
        _active.on_predictions(output)


def record_validation(epoch: Optional[int], metrics: Dict[str, float], *, best: Optional[bool] = None,
                      stop: Optional[bool] = None) -> None:
    """End of one validation: the predictions recorded since the last one, ``metrics`` (precision, recall,
    mAP50, mAP50-95, fitness), whether it became best and whether training stops after it."""
    if _active is not None and not _active.closed:
        _active.on_validation(epoch, metrics, best, stop)


def set_validation_stop(stop: bool) -> None:
    """Whether training stops (early) after the latest validation, when that was decided after it."""
    if _active is not None and not _active.closed:
        _active.set_stop(stop)


def update_header(**fields: Any) -> bool:
    """Add facts to the running recorder's header before its first step (False: none, or too late)."""
    return _active is not None and not _active.closed and _active.update_header(**fields)


def record_loss(loss: Any) -> None:
    """Record loss components (a tensor, or a list/dict of them) for the current step, if fingerprinting."""
    if _active is not None and loss is not None and not _active.closed:
        _active.on_items(loss)


def _close_at_exit() -> None:
    if _active is not None:
        with contextlib.suppress(Exception):
            stop(closed_by="exit")


__all__ = [
    "DDPMismatchWarning", "ENV_VAR", "FingerprintError", "FinalRecord", "Log", "Recorder", "StepRecord", "active",
    "finish_session", "fingerprinting", "optimizer_values", "rank_path", "rank_paths", "read_log", "record_loss",
    "record_predictions", "record_validation", "rng_digests", "set_validation_stop", "start", "start_from_env", "stop",
    "update_header", "ValRecord",
]
