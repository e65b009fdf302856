"""An empirical probe for kernels that cannot be replaced: run forward and backward twice on
identical inputs and compare outputs and gradients bit for bit.

A difference proves nondeterminism; agreement is evidence only where the kernel really runs
(on CUDA: atomics may happen to agree on a small input), and on CPU it proves nothing about
CUDA. :func:`probe_model` probes every custom ``autograd.Function`` a model applies, on the
inputs it actually receives in one forward pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..core import verdicts
from ..core.tensors import tensors_in


@dataclass
class ProbeResult(verdicts.Judged):
    """Two (or more) runs of one op on identical inputs, compared bit for bit."""

    op: str
    device: str
    runs: int
    outputs_identical: bool
    grads_identical: bool
    max_abs_diff: float
    opaque: bool = True

    @property
    def identical(self) -> bool:
        return self.outputs_identical and self.grads_identical

    @property
    def proves_nothing(self) -> bool:
        """An agreement seen on CPU says nothing about the CUDA kernel."""
        return self.identical and not self.device.startswith("cuda")

    @property
    def verdict(self) -> str:
        """The verdict in every command's JSON vocabulary: ``differs``, else ``not proven`` (runs that agree are
        evidence, not proof; on CPU, none about CUDA)."""
        return verdicts.NOT_PROVEN if self.identical else verdicts.DIFFERS

    @property
    def word(self) -> str:
        """The same as :attr:`verdict` (its earlier name)."""
        return self.verdict

    @property
    def statement(self) -> str:
        """The verdict as a sentence: what differed, or why agreeing runs prove nothing more."""
        if not self.identical:
            part = "forward" if not self.outputs_identical else "backward"
            return (f"NONDETERMINISTIC: the {part} differs between {self.runs} runs on identical inputs "
                    f"(max abs difference {self.max_abs_diff:.3g})")
        if self.proves_nothing:
            return f"bit-identical in {self.runs} runs on {self.device}, which proves nothing about CUDA: probe on the GPU"
        return f"bit-identical in {self.runs} runs on {self.device} (evidence, not proof: atomics can agree by chance)"

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "device": self.device, "runs": self.runs, "identical": self.identical,
                "outputs_identical": self.outputs_identical, "grads_identical": self.grads_identical,
                "max_abs_diff": self.max_abs_diff, "proves_nothing": self.proves_nothing, "opaque": self.opaque,
                "verdict": self.verdict, "statement": self.statement}

    def to_json(self) -> Dict[str, Any]:
        return self.stamped(self.to_dict())


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if a.dtype == torch.bool:
        return bool(torch.equal(a, b))
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape or not a.is_floating_point():
        return float("inf") if not _same_bits(a, b) else 0.0
    return float((a.double() - b.double()).abs().nan_to_num(float("inf")).max()) if a.numel() else 0.0


def _fresh(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_(True) if copy.is_floating_point() else copy
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    return value


def probe(fn: Callable[..., Any], inputs: Sequence[Any], name: str = "", runs: int = 2, seed: int = 0,
          opaque: bool = True) -> ProbeResult:
    """Run ``fn(*inputs)`` forward and backward ``runs`` times on fresh copies of the same inputs,
    with the same output gradients (random, from ``seed``), and compare every output and input
    gradient bit for bit with the first run's."""
    results: List[Tuple[List[torch.Tensor], List[torch.Tensor]]] = []
    device = "cpu"
    for _ in range(runs):
        args = [_fresh(a) for a in inputs]
        leaves = [t for t in tensors_in(args) if t.requires_grad]
        outputs = tensors_in(fn(*args))
        device = str(outputs[0].device) if outputs else device
        grads: List[torch.Tensor] = []
        differentiable = [o for o in outputs if o.requires_grad and o.is_floating_point()]
        if differentiable and leaves:
            generator = torch.Generator().manual_seed(seed)
            grad_outputs = [torch.randn(o.shape, generator=generator).to(o) for o in differentiable]
            got = torch.autograd.grad(differentiable, leaves, grad_outputs, allow_unused=True)
            grads = [g.detach().clone() if g is not None else torch.zeros(0) for g in got]
        results.append(([o.detach().clone() for o in outputs], grads))
    first_out, first_grads = results[0]
    outputs_identical = grads_identical = True
    worst = 0.0
    for outs, grads in results[1:]:
        for a, b in zip(first_out, outs):
            if not _same_bits(a, b):
                outputs_identical = False
                worst = max(worst, _diff(a, b))
        for a, b in zip(first_grads, grads):
            if not _same_bits(a, b):
                grads_identical = False
                worst = max(worst, _diff(a, b))
    return ProbeResult(name or getattr(fn, "__qualname__", repr(fn)), device, runs, outputs_identical,
                       grads_identical, worst, opaque)


@contextlib.contextmanager
def _recording_functions(calls: Dict[type, Tuple[Any, ...]]) -> Iterator[None]:
    """While active, the first call's arguments of every non-torch ``autograd.Function`` applied."""
    base = torch.autograd.Function
    original = base.__dict__["apply"]

    def apply(cls, *args, **kwargs):
        if cls not in calls and not (cls.__module__ or "").startswith("torch") and not kwargs:
            calls[cls] = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        return original.__get__(None, cls)(*args, **kwargs)

    base.apply = classmethod(apply)
    try:
        yield
    finally:
        base.apply = original


def probe_model(model: torch.nn.Module, inputs: Sequence[Any], opaque_names: Sequence[str] = (), runs: int = 2,
                device: Optional[str] = None) -> List[ProbeResult]:
    """Probe each custom ``autograd.Function`` ``model`` applies in one training-mode forward on
    ``inputs`` (moved with the model to ``device`` when given). ``opaque_names``: qualified names
    the audit found opaque; those are marked so, the rest are pure-Python Functions."""
    if device is not None:
        model = model.to(device)
        inputs = [i.to(device) if isinstance(i, torch.Tensor) else i for i in inputs]
    calls: Dict[type, Tuple[Any, ...]] = {}
    training = model.training
    model.train()
    try:
        with _recording_functions(calls):
            model(*inputs)
    finally:
        model.train(training)
    results = []
    for cls, args in calls.items():
        name = f"{cls.__module__}.{cls.__qualname__}"
        results.append(probe(cls.apply, args, name, runs, opaque=name in set(opaque_names)))
    return results


__all__ = ["ProbeResult", "probe", "probe_model"]
