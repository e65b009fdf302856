"""Predict, on CPU, which ops of a model would make strict determinism fail on CUDA, and where.

:func:`audit_model` runs one forward and backward pass under a dispatch mode that records
every aten op in the op table with the module that ran it, and matches them against the
table for a torch version. For the installed torch the run takes CUDA's Python-level routes
(:mod:`yolo_det.cuda_emulation`), so e.g. bilinear ``interpolate`` on torch >= 2.1 is not
reported while TorchScript'ed or direct ``torch._C._nn`` calls are. For another version the
table's ``route_since``/``route_api`` columns decide, from the Python function that ran each op.
A backward op is attributed to the modules whose forward ran the matching forward op.

:func:`modules_for_op` answers "which modules can produce this op?" statically (module types
and the functional calls in custom classes' source); the runtime uses it in strict errors.
"""

from __future__ import annotations

import contextlib
import operator
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core import determinism, verdicts
from .cuda_emulation import CudaRoutes, current_api, emulate_cuda_alerts
from .opaque import OpaqueFinding, OpaqueWatch, merge, scan_model
from .swap import calls_row, functions_called, is_replaced
from .optable import OpRow, OpTable, Version, format_version, installed_version, load_table, parse_version

ROOT_NAME = "(model)"


class AuditError(RuntimeError):
    """The model could not be run for an audit; the message says why."""


# -- results ----------------------------------------------------------------------------------
@dataclass
class Finding:
    """One op that is nondeterministic on CUDA, where it runs and what to do about it."""

    op: str
    cuda_kernel: str
    modules: List[str]
    fix: str
    count: int = 0
    replaceable: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "cuda_kernel": self.cuda_kernel, "modules": list(self.modules), "fix": self.fix,
                "count": self.count, "replaceable": self.replaceable}


@dataclass
class AuditResult(verdicts.Judged):
    """What :func:`audit_model` found. ``ops``: strict would raise on CUDA; ``silent``:
    nondeterministic without an alert; ``notes``: environment requirements."""

    torch: str
    ops: List[Finding] = field(default_factory=list)
    silent: List[Finding] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    emulated: bool = True
    ops_seen: int = 0
    opaque: List[OpaqueFinding] = field(default_factory=list)
    probes: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.ops and not self.opaque

    @property
    def verdict(self) -> str:
        """``finding`` (ops strict would refuse on CUDA, kernels outside its switch, a probe that differed), else
        ``clean``."""
        differs = any(not p.get("identical") for p in self.probes)
        return verdicts.FINDING if self.ops or self.opaque or differs else verdicts.CLEAN

    def to_json(self) -> Dict[str, Any]:
        return self.stamped(self.to_dict())

    def to_dict(self) -> Dict[str, Any]:
        out = {"torch": self.torch, "ops": [f.to_dict() for f in self.ops],
               "silent": [f.to_dict() for f in self.silent], "opaque": [f.to_dict() for f in self.opaque],
               "notes": list(self.notes)}
        if self.probes:
            out["probes"] = list(self.probes)
        return out

    def lines(self, max_modules: int = 4) -> List[str]:
        """A human-readable report: one table row per op (op, CUDA kernel, modules, fix)."""
        head = f"yolo-det audit (torch {self.torch}, {'CUDA routes emulated' if self.emulated else 'predicted from the op table'})"
        if self.clean and not self.silent:
            out = [f"{head}: clean, strict determinism will not raise on CUDA ({self.ops_seen} aten ops run)."]
        else:
            out = [f"{head}: {len(self.ops)} op(s) would raise under strict on CUDA."]
            if self.ops:
                out += _table(self.ops, max_modules)
            if self.silent:
                out.append("Nondeterministic on CUDA without an alert (strict will not catch these):")
                out += _table(self.silent, max_modules)
        if self.opaque:
            out.append(f"{len(self.opaque)} kernel(s) outside PyTorch's determinism switch (strict refuses them unless "
                       "replaced or allowed):")
            out += _opaque_table(self.opaque, max_modules)
        for probe in self.probes:
            out.append(f"probe {probe['op']} on {probe['device']}: {probe['statement']}")
        out += [f"note: {n}" for n in self.notes]
        return out


def _table(findings: Sequence[Finding], max_modules: int) -> List[str]:
    rows = [("op", "CUDA kernel in the error", "modules", "fix")]
    for f in findings:
        modules = ", ".join(f.modules[:max_modules]) + (f" (+{len(f.modules) - max_modules} more)"
                                                        if len(f.modules) > max_modules else "")
        rows.append((f.op, f.cuda_kernel, modules or "-", f.fix))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]


def _opaque_table(findings: Sequence[OpaqueFinding], max_modules: int) -> List[str]:
    rows = [("kernel", "found by", "modules", "fix")]
    for f in findings:
        modules = ", ".join(f.modules[:max_modules]) + (f" (+{len(f.modules) - max_modules} more)"
                                                        if len(f.modules) > max_modules else "")
        found = {"known-api": "name", "extension": "source", "runtime": "run"}.get(f.kind, f.kind)
        if not f.importable:
            found += " (not importable here)"
        rows.append((f.op, found, modules or "-", f.fix))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]


# -- capture ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Call:
    op: str
    rows: Tuple[OpRow, ...]
    module: str
    api: Optional[str]
    backward: bool
    needs_grad: bool


def _tensors(args: Sequence[Any], kwargs: Dict[str, Any]) -> Iterable[torch.Tensor]:
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


class _ModulePaths:
    """Forward hooks that keep the path of the innermost module running."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.stack: List[str] = []
        self.handles: List[Any] = []
        for name, module in model.named_modules():
            if isinstance(module, torch.jit.ScriptModule):
                continue  # no hooks on TorchScript: its ops count for the enclosing module
            path = name or ROOT_NAME
            self.handles.append(module.register_forward_pre_hook(lambda m, a, p=path: self.stack.append(p)))
            self.handles.append(self._post_hook(module))

    def _post_hook(self, module: torch.nn.Module):
        def pop(*_):
            if self.stack:
                self.stack.pop()
        try:
            return module.register_forward_hook(pop, always_call=True)
        except TypeError:  # torch < 2.0
            return module.register_forward_hook(pop)

    @property
    def path(self) -> str:
        return self.stack[-1] if self.stack else ROOT_NAME

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Capture(TorchDispatchMode):
    """Records every call of a table op or of a forward op a table row points to."""

    def __init__(self, table: OpTable, paths: _ModulePaths) -> None:
        super().__init__()
        self.table = table
        self.paths = paths
        self.calls: List[_Call] = []
        self.backward = False
        self.ops_seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops_seen += 1
        name = func.overloadpacket.__name__
        if name in self.table.by_op or name in self.table.by_forward:
            rows = tuple(self.table.match(func, args, kwargs))
            needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in _tensors(args, kwargs))
            module = "" if self.backward else self.paths.path
            self.calls.append(_Call(name, rows, module, current_api(), self.backward, needs_grad))
        return func(*args, **kwargs)


# -- analysis ---------------------------------------------------------------------------------
def _sources(row: OpRow, call: _Call, forward_calls: Dict[str, List[_Call]]) -> List[_Call]:
    """The forward calls behind ``call``: itself in forward, the matching forward ops in backward."""
    if not call.backward:
        return [call]
    return [c for name in row.forward_ops for c in forward_calls.get(name, []) if c.needs_grad]


def _analyse(calls: Sequence[_Call], version: Version, emulated: bool) -> Tuple[List[Finding], List[Finding], List[str]]:
    forward_calls: Dict[str, List[_Call]] = {}
    for call in calls:
        if not call.backward:
            forward_calls.setdefault(call.op, []).append(call)
    found: Dict[OpRow, Finding] = {}
    silent: Dict[OpRow, Finding] = {}
    notes: List[str] = []
    for call in calls:
        for row in call.rows:
            if row.is_env:
                if row.raises(version) and not notes:
                    notes.append(f"torch {format_version(version)} needs CUBLAS_WORKSPACE_CONFIG=:4096:8 in the "
                                 "environment before start for deterministic cuBLAS (yolo-det run and configure set it)")
                continue
            sources = _sources(row, call, forward_calls)
            if sources:
                hits = [s for s in sources
                        if row.nondeterministic(version, routed=not emulated and s.api in row.route_api)]
                if not hits:
                    continue
            elif not row.nondeterministic(version):
                continue
            else:
                hits = []  # a backward op whose forward op was not recorded: module unknown
            target = silent if row.silent else found
            finding = target.get(row)
            if finding is None:
                finding = target[row] = Finding(row.op, row.cuda_kernel, [], row.fix,
                                                replaceable=bool(row.replacement))
            finding.count += 1
            for source in hits:
                if source.module not in finding.modules:
                    finding.modules.append(source.module)
    by_op = operator.attrgetter("op")
    return sorted(found.values(), key=by_op), sorted(silent.values(), key=by_op), notes


# -- running ----------------------------------------------------------------------------------
def _scalar(output: Any) -> Optional[torch.Tensor]:
    """Sum of every floating tensor in ``output`` that carries a gradient."""
    if isinstance(output, torch.Tensor):
        return output.float().sum() if output.requires_grad and output.is_floating_point() else None
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        parts = [p for p in (_scalar(o) for o in output) if p is not None]
        return torch.stack(parts).sum() if parts else None
    return None


def _example(model: torch.nn.Module, imgsz: int, batch: int) -> Tuple[torch.Tensor, ...]:
    param = next(iter(model.parameters()), None)
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    device = param.device if param is not None else torch.device("cpu")
    size = f"{batch} x 3 x {imgsz} x {imgsz}"
    nbytes = batch * 3 * imgsz * imgsz * 4
    memory = _physical_memory()
    if memory is not None and nbytes > memory // 4:  # the forward pass needs many times the input
        raise AuditError(f"an input batch of {size} floats takes {nbytes / 2**30:.1f} GiB, too much for this "
                         f"machine's {memory / 2**30:.1f} GiB; use a smaller --imgsz or --batch")
    generator = torch.Generator().manual_seed(0)
    try:
        return (torch.rand(batch, 3, imgsz, imgsz, generator=generator, dtype=torch.float32).to(device, dtype),)
    except (RuntimeError, MemoryError) as exc:
        raise AuditError(f"cannot allocate an input batch of {size}: {exc}; use a smaller --imgsz or --batch") from None


def example_inputs(model: torch.nn.Module, imgsz: int = 256, batch: int = 2) -> Tuple[torch.Tensor, ...]:
    """The random image batch :func:`audit_model` runs when given no inputs (seed 0)."""
    return _example(model, imgsz, batch)


def _physical_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


@contextlib.contextmanager
def _preserved(model: torch.nn.Module):
    """Restore training mode, gradients, buffers (BatchNorm statistics) and the CPU RNG."""
    training = model.training
    grads = {p: p.grad for p in model.parameters()}
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            model.train(training)
            for p, g in grads.items():
                p.grad = g
            with torch.no_grad():
                for name, b in model.named_buffers():
                    if name in buffers and b.shape == buffers[name].shape:
                        b.copy_(buffers[name])


def audit_model(model: torch.nn.Module, inputs: Union[None, torch.Tensor, Sequence[Any]] = None, *,
                imgsz: int = 256, batch: int = 2, torch_version: Optional[str] = None,
                table: Optional[OpTable] = None, emulate: Optional[bool] = None) -> AuditResult:
    """Run one training-mode forward and backward of ``model`` on CPU and report every op
    whose CUDA kernel would fail (or silently break) strict determinism in ``torch_version``
    (default: the installed torch). ``inputs`` default to a random ``batch x 3 x imgsz x imgsz``
    image batch. The model's state (mode, gradients, buffers) and the RNG are left as found.
    ``emulate`` (default: only for the installed torch) runs CUDA's Python routes for real;
    otherwise the op table's route columns decide. Raises :class:`AuditError` when the model
    cannot run.
    """
    try:
        version = parse_version(torch_version) if torch_version else installed_version()
    except ValueError as exc:
        raise AuditError(f"torch version: {exc}") from None
    if version is None:
        raise AuditError(f"torch version {torch_version!r} is not a release")
    if emulate and version != installed_version():
        raise AuditError("CUDA routes can only be emulated for the installed torch; leave emulate unset")
    emulated = version == installed_version() if emulate is None else emulate
    table = table or load_table()
    if inputs is None:
        inputs = _example(model, imgsz, batch)
    elif isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    paths = _ModulePaths(model)
    capture = _Capture(table, paths)
    watch = OpaqueWatch(lambda: paths.path)  # entered first: the capture's own ops stay out of it
    try:
        # empty() NaN-filled: the watch then knows every factory output's content
        with _preserved(model), determinism.temporary_determinism("warn", fill_uninitialized_memory=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.train()
            with watch, CudaRoutes(emulate=emulated), capture:
                try:
                    loss = _scalar(model(*inputs))
                except Exception as exc:  # noqa: BLE001 - any model failure is reported, not raised raw
                    raise AuditError(f"the model's forward pass failed: {type(exc).__name__}: {exc}") from exc
                except SystemExit as exc:
                    raise AuditError(f"the model's forward pass called sys.exit({exc.code!r})") from None
                if loss is None:
                    raise AuditError("the model's output carries no gradient: nothing would run backward")
                capture.backward = watch.backward = True
                try:
                    loss.backward()
                except Exception as exc:  # noqa: BLE001
                    raise AuditError(f"the backward pass failed: {type(exc).__name__}: {exc}") from exc
    finally:
        paths.remove()
    ops, silent, notes = _analyse(capture.calls, version, emulated)
    opaque = merge(scan_model(model) + watch.finish())
    return AuditResult(format_version(version), ops, silent, notes, emulated, capture.ops_seen, opaque)


# -- static lookup ----------------------------------------------------------------------------
def modules_for_op(model: torch.nn.Module, op: str) -> List[str]:
    """Module paths in ``model`` that can run ``op`` (an aten op or the CUDA kernel name from
    PyTorch's error), by module type and by the functional calls in custom modules' source.
    Modules yolo-det already replaced are left out. Cheap; never raises (returns [] instead).
    """
    try:
        rows = load_table().rows_for(op)
        if not rows or model is None:
            return []
        by_type: List[str] = []
        by_call: List[Tuple[str, bool]] = []
        for name, module in model.named_modules():
            path = name or ROOT_NAME
            if is_replaced(module) and any(r.replacement for r in rows):
                continue
            cls = type(module)
            if cls.__module__.split(".")[0] == "torch":
                if any(m.matches(module) for r in rows for m in r.modules):
                    by_type.append(path)
                continue
            calls = functions_called(cls)
            if any(calls & set(row.functions) for row in rows):
                by_call.append((path, any(calls_row(cls, row) for row in rows)))
        named = [p for p, mode_named in by_call if mode_named]
        return by_type + (named or [p for p, _ in by_call])
    except Exception:  # noqa: BLE001 - used inside error messages: must never raise
        return []


__all__ = ["AuditError", "AuditResult", "Finding", "audit_model", "example_inputs", "emulate_cuda_alerts", "modules_for_op"]
