"""The recorder of per-step training fingerprints: what is recorded, and when.

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
* validations (``fingerprint.record_predictions`` for each NMS batch, ``record_validation`` after
  the metrics): one ``val`` line with a digest per image's predictions, written after the line
  of the step it follows.

Under ``torch.distributed`` the ranks compare parameter digests after every step
(``all_gather``); a rank that holds different parameters is written to the log and warned
about (:mod:`.rank_check`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import operator
import os
import socket
import sys
import weakref
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch

from .. import __version__
from .capture import StepCapture
from .header import run_facts
from .digest import Digester
from .log import LogWriter, rank_path
from .pending import PendingStep, transfer
from .predictions import prediction_digests
from .rank_check import RankCheck
from .sources import (
    Snapshot, StateView, data_ptr as _data_ptr, ema_module, flatten_batch, item_values, optimizer_values,
    rng_digests, unwrap,
)


def weights_digest(hexes: List[str]) -> str:
    """One digest of a model's parameters (from their per-tensor digests): the header's ``initial_weights``."""
    return hashlib.sha256("".join(hexes).encode("ascii")).hexdigest()[:32]


class Recorder:
    """Writes the fingerprint log of one process while it is active (see :func:`start`)."""

    def __init__(self, path: Optional[os.PathLike], *, session: Any = None, model: Optional[torch.nn.Module] = None,
                 ema: Any = None, rank: Optional[int] = None, compact: bool = False) -> None:
        if rank is None:
            rank = session.rank if session is not None else int(os.environ.get("RANK", "-1") or -1)
        self.rank = rank
        self.session = session
        self._model, self._ema = model, ema
        self.path = None if path is None else rank_path(path, rank)  # None: placed later (:meth:`place`)
        self._ranks = RankCheck(rank, self.path)
        self.digester = Digester()
        self.steps = 0
        self._views: Dict[int, StateView] = {}
        self._batches: List[Tuple[int, List[str], Optional[torch.Tensor], List[Tuple[str, str]]]] = []
        self._mute_backward = 0
        self._losses: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = []
        self._items: List[torch.Tensor] = []
        self._carried: Optional[Mapping[str, Any]] = None  # an interrupted process's unfinished step (resume)
        self._current: Optional[PendingStep] = None
        self._open: Optional[PendingStep] = None
        self._last_optimizer: Optional["weakref.ref[torch.optim.Optimizer]"] = None
        self._snapshot: Optional[Snapshot] = None
        self._hooks: List[Any] = []
        self._predictions: List[Tuple[str, str, int]] = []  # (name, digest, boxes) of NMS outputs so far
        self._pending_vals: List[Dict[str, Any]] = []  # validations whose step line is not written yet
        self.validations = 0
        self.run_dir: Optional[str] = None
        self.closed = False
        self.capture = StepCapture.from_env(lambda: [(self.model(), ""), (self.ema(), "ema")],
                                            graphs=getattr(session, "compiled_graphs", None))
        if self.capture is not None:  # verify --locate: ops of one step, then the process ends
            self.capture.path = rank_path(self.capture.path, rank)
            self.on_batch = self.capture.around_batch(self.on_batch)  # type: ignore[method-assign]
        self._header_base = self._header()
        self._header_extra: Dict[str, Any] = {}
        self.compact = compact
        self._train_key: Optional[int] = None  # the loader of the last step's batches (others: validation)
        self.writer = LogWriter(self.path, self._header_base, compact=compact)

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
            # V only where an integration runs the world engine (it sets session.world_plan), never from the
            # setting alone: a header claiming V for a stock DDP run would hide its world size as a cause
            "virtual_world_size": getattr(getattr(self.session, "world_plan", None), "virtual_world_size", None),
            "command": list(sys.argv),
            "cwd": os.getcwd(),
            "pid": os.getpid(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
            "mode": getattr(settings, "mode", None),
            "seed": getattr(self.session, "seed", None),
            "seeds": self._extra("seeds"),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **run_facts(self.session, exclude=() if self.path is None else (self.path,)),
        }

    def update_header(self, **fields: Any) -> bool:
        """Add facts to the header (e.g. the seed a patched script applied itself) while no step
        is written yet; returns False when it is too late."""
        self._header_extra.update(fields)
        return self.writer.replace_header({**self._header_base, **self._header_extra})

    def place(self, path: os.PathLike) -> Path:
        """Put a log started without a path at ``path`` (``<stem>.rank<r><suffix>`` on rank r > 0): what it
        holds so far and everything after."""
        self.path = rank_path(path, self.rank)
        self._ranks.path = self.path
        self.writer.place(self.path)
        return self.path

    def epoch_end(self) -> None:
        """An epoch ended: its last step's line is written in full (also in a compact log), validation or not."""
        step = self._open if self._open is not None else self._current
        if step is not None:
            step.full = True

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
        """Register the optimizer hooks (the DataLoader and backward wrappers are :mod:`.global_hooks`)."""
        from torch.optim import optimizer as optim_mod

        pre, post = self._pre_step, self._post_step
        if self.capture is not None:
            pre, post = self.capture.around_pre(pre), self.capture.around_post(post)
        self._hooks.append(optim_mod.register_optimizer_step_pre_hook(pre))
        self._hooks.append(optim_mod.register_optimizer_step_post_hook(post))
        return self

    def _pre_step(self, optimizer, args, kwargs) -> None:
        """One digest pass over the previous step's parameters, buffers and EMA (unchanged since
        it ended) and this step's gradients and losses; then the previous step's line is written."""
        previous, self._open = self._open, None
        step = PendingStep(self.steps + 1)
        self._take_batches(step)
        names, params = self._params(optimizer)
        if self.steps == 0 and previous is None and "initial_weights" not in self._header_extra:
            self.update_header(initial_weights=weights_digest(self.digester.hex(params)))
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
        if previous is not None:  # in full when a validation follows it
            self._write(previous, full=any(v["after_step"] <= previous.number for v in self._pending_vals))
        self._flush_validations(self.steps)
        self._current = step

    def _state_of(self, previous: Optional[PendingStep], names: List[str], params: List[torch.Tensor]
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
        step = self._current if self._current is not None else PendingStep(self.steps + 1)
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
        if RankCheck.world() > 1:
            names, params = self._params(optimizer)
            digests = self.digester.digest(params, ("ddp", tuple(map(_data_ptr, params))), stable=len(params))
            step.add("param", names, digests)
            step.ddp = self._ranks.check(digests, names, step.number)
        else:
            step.params_pending = True
        rng = rng_digests()
        step.add("rng", list(rng), list(rng.values()))
        self._open = step

    def on_batch(self, source: Any, batch: Any) -> None:
        """Digest a batch as it leaves a DataLoader iterator (``source``), before anything edits it.

        The previous optimizer step is complete by now (its EMA update included): its line is written first,
        in full (also in a compact log) when the batch comes from another loader: a validation begins.
        """
        key = id(getattr(source, "_dataset", source))
        if self._open is not None:
            self._write_open(full=key != self._train_key)
        tensors: List[Tuple[str, torch.Tensor]] = []
        hosts: List[Tuple[str, str]] = []
        flatten_batch(batch, "", tensors, hosts)
        digests = self.digester.digest([t for _, t in tensors]) if tensors else None
        if self._carried is not None:  # the first batch after a resume: the interrupted step's batches come first
            carried, self._carried = self._carried, None
            self._batches.extend((key, list(b["names"]), b["digests"], [tuple(h) for h in b["hosts"]])
                                 for b in carried["batches"])
            self._losses.extend(zip(carried["losses"], carried["values"]))
            self._items.extend(carried["items"])
        self._batches.append((key, [n for n, _ in tensors], digests, hosts))

    def replace_batch(self, batch: Any) -> None:
        """The step's last loader batch is digested as ``batch`` instead (one virtual micro-batch of it).

        Under a virtual world size a process loads V/N micro-batches at once; the log holds its first one,
        the batch one GPU of the V-GPU run loads, so logs of runs with different N compare."""
        if not self._batches:
            return
        key = self._batches.pop()[0]
        tensors: List[Tuple[str, torch.Tensor]] = []
        hosts: List[Tuple[str, str]] = []
        flatten_batch(batch, "", tensors, hosts)
        digests = self.digester.digest([t for _, t in tensors]) if tensors else None
        self._batches.append((key, [n for n, _ in tensors], digests, hosts))

    @contextlib.contextmanager
    def unrecorded_backward(self) -> Iterator[None]:
        """Backward passes inside keep no loss of theirs (the other virtual micro-batches of a process)."""
        self._mute_backward += 1
        try:
            yield
        finally:
            self._mute_backward -= 1

    def on_backward(self, roots: Any) -> None:
        """Keep the tensors a backward pass starts from (the loss); digested with the gradients."""
        if self._mute_backward:
            return
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

    def _take_batches(self, step: PendingStep) -> None:
        batches, self._batches = self._batches, []
        if not batches:
            return
        train_key = batches[-1][0]  # the loader of the step's own batch; others (validation) are dropped
        self._train_key = train_key
        for j, (_, names, digests, hosts) in enumerate(b for b in batches if b[0] == train_key):
            if digests is not None:
                step.add("data", [f"batch{j}{name}" for name in names], digests)
            if hosts:
                step.add("data", [f"batch{j}{name}" for name, _ in hosts], [h for _, h in hosts])

    def _take_losses(self, step: PendingStep) -> Tuple[List[str], List[torch.Tensor]]:
        """Names and tensors of the losses (and components) since the last step; values go to ``step``."""
        losses, self._losses = self._losses, []
        items, self._items = self._items, []
        names = [f"backward{j}" for j in range(len(losses))] + [f"items{j}" for j in range(len(items))]
        step.values.extend(("loss", value) for _, value in losses if value is not None)
        step.values.extend(("items", values) for values in items)
        return names, [root for root, _ in losses] + items

    # -- resume: a step the interrupted process did not finish ---------------------------------
    def unfinished_step(self) -> Optional[Dict[str, Any]]:
        """The training batches, losses and loss items since the last optimizer step (CPU copies), or None.

        A checkpoint between optimizer steps (gradient accumulation) leaves them to the resumed
        process: :meth:`continue_step` puts them back so its first step's line is an uninterrupted run's.
        """
        if not self._losses and not self._items:
            return None
        train_key = self._batches[0][0] if self._batches else None  # validation batches come after training's
        return {"batches": [{"names": list(names), "digests": None if d is None else d.cpu(),
                             "hosts": [list(h) for h in hosts]} for key, names, d, hosts in self._batches
                            if key == train_key],
                "losses": [root.cpu() for root, _ in self._losses],
                "values": [None if value is None else value.cpu() for _, value in self._losses],
                "items": [item.cpu() for item in self._items]}

    def continue_step(self, saved: Mapping[str, Any]) -> None:
        """Continue the interrupted process's :meth:`unfinished_step` at this process's first batch."""
        self._carried = saved

    # -- validations -----------------------------------------------------------------------
    def on_predictions(self, output: Any) -> None:
        """Digest one NMS batch's predictions (a tensor per image) now; they join the next validation."""
        if isinstance(output, tuple) and output and isinstance(output[0], (list, tuple)):
            output = output[0]  # Ultralytics with return_idxs: (output, kept indices)
        tensors = [t.detach() for t in output if isinstance(t, torch.Tensor)] if isinstance(output, (list, tuple)) \
            else [output.detach()] if isinstance(output, torch.Tensor) else []
        batch = sum(1 for n, _, _ in self._predictions if n.endswith(".image0"))
        names = [f"batch{batch}.image{i}" for i in range(len(tensors))]
        boxes = [int(t.shape[0]) if t.dim() else 1 for t in tensors]
        self._predictions.extend(zip(names, prediction_digests(tensors), boxes))

    def on_validation(self, epoch: Optional[int], metrics: Dict[str, float], best: Optional[bool],
                      stop: Optional[bool], settings: Optional[Mapping[str, Any]] = None,
                      files: Optional[List[Optional[str]]] = None,
                      evaluator: Optional[Mapping[str, Any]] = None) -> None:
        """Close a validation: its predictions so far, metrics, flags and (optional) settings, image
        files (one per image, in order) and the label of the evaluator that computed the metrics, written after
        the current step's line."""
        predictions, self._predictions = self._predictions, []
        self._pending_vals.append({"epoch": epoch, "after_step": self.steps, "predictions": predictions,
                                   "metrics": dict(metrics), "best": best, "stop": stop,
                                   "settings": None if settings is None else dict(settings), "files": files,
                                   "evaluator": None if evaluator is None else dict(evaluator)})

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
            names = [n for n, _, _ in val["predictions"]]
            hexes = "".join(h for _, h, _ in val["predictions"])
            stop = val["stop"]
            if stop is None and not last:
                stop = False  # training went on after it
            files = val.get("files")
            if files is not None:
                files = (list(files) + [None] * len(names))[:len(names)]
            self.writer.write_validation(val["epoch"], val["after_step"], names, hexes, val["metrics"], val["best"],
                                         stop, settings=val.get("settings"),
                                         boxes=[b for _, _, b in val["predictions"]], files=files,
                                         evaluator=val.get("evaluator"))
            self.validations += 1
        self._pending_vals = keep

    def _ema_state(self) -> Tuple[List[str], List[torch.Tensor]]:
        ema = self.ema()
        if ema is None:
            return [], []
        names, tensors, _ = self._state(ema, None)
        return names, tensors

    def _write(self, step: PendingStep, full: bool = False) -> None:
        """Write a step's line; in a compact log in full only when ``full``, for step 1 and (by the callers)
        before a validation and at the end."""
        kinds, losses, items = step.resolve()
        self.writer.write_step(step.number, kinds, lr=step.lr, losses=losses, items=items, ddp=step.ddp,
                               full=full or step.full or step.number == 1)

    def _write_open(self, full: bool = False) -> None:
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
        self._write(step, full=full)

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
        self._write(step, full=True)

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
                hexes = transfer([self.digester.digest(tensors)])[0].view(np.uint64).astype(">u8").tobytes().hex()
            self.writer.write_final(self.steps, names, hexes, closed_by, self.run_dir)
        finally:
            self.writer.close()
        return self.path



__all__ = ["Recorder"]
