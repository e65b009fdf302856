"""The gradient-accumulation cadence across a checkpoint: gradients waiting for an optimizer step, saved and put
back, and the loop's ``last_opt_step`` the release restarts (:class:`StepCadence`); why accumulation makes a
resume inexact where they cannot be restored (:func:`accumulation_problem`).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional

import torch

from ...strict.compiled import compiling


def pending_gradients(optimizer: Optional[torch.optim.Optimizer]) -> bool:
    """Whether gradients are waiting for an optimizer step (a checkpoint inside gradient accumulation)."""
    if optimizer is None:
        return False
    return any(p.grad is not None and bool(p.grad.any()) for group in optimizer.param_groups for p in group["params"])


PENDING = ("the checkpoint was written between optimizer steps (gradient accumulation in progress): the "
           "accumulated gradients and the step cadence are not restored")
CADENCE = ("the run accumulates gradients ({steps} optimizer steps for {passes} batches before the checkpoint): "
           "on resume the release restarts its step cadence (last_opt_step), so the steps after it differ")


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


__all__ = ["CADENCE", "PENDING", "StepCadence", "accumulation_problem", "cadence", "gradients", "loop_variable",
           "pending_gradients", "set_gradients"]
