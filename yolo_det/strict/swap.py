"""Swap a model's nondeterministic ops for the deterministic ones in :mod:`yolo_det.replacements`.

:func:`make_deterministic` changes the class of each module that can run an op with no
deterministic CUDA kernel in the installed torch (per the op table) to a subclass whose
calls run inside a :class:`ReplacementScope`, a
``TorchFunctionMode`` that routes the affected functional calls (``F.adaptive_max_pool2d``,
``F.interpolate``, ``F.grid_sample``, ``F.pad``, ...) to the replacements. That reaches
``nn`` modules (``nn.AdaptiveMaxPool2d`` calls ``F.adaptive_max_pool2d``) and functional calls
inside custom modules alike; custom classes are chosen by reading their source (and that of
the module-level helper functions they call) for those calls. Calls that need no gradient, or that PyTorch already runs deterministically (e.g.
bilinear ``interpolate`` on torch >= 2.1), run natively.

The swapped class pickles as the original class (``__reduce_ex__``), so checkpoints load
without yolo-det, and adds no attributes, parameters or buffers: ``state_dict`` is unchanged.
``copy.deepcopy`` keeps the swap; :func:`restore_native` undoes it.
"""

from __future__ import annotations

import copy
import copyreg
import functools
import inspect
import re
import sys
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import replacements as R
from .opaque_replacements import REPLACEMENTS, is_stand_in
from .replacements import BenchCase, bench_input
from .optable import OpTable, Version, installed_version, load_table, parse_version

_state = threading.local()
Handler = Callable[[Sequence[Any], Dict[str, Any], Version], Optional[Callable[[], Any]]]


# -- which calls need a replacement ---------------------------------------------------------
@functools.lru_cache(maxsize=512)
def needs_replacement(op: str, version: Version, routed: bool = True) -> bool:
    """Whether ``op`` is nondeterministic on CUDA in ``version`` and yolo-det can replace it."""
    return any(row.replacement and row.nondeterministic(version, routed) for row in load_table().rows_for(op))


def _arg(args: Sequence[Any], kwargs: Dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _needs_grad(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _adaptive_avg(dims: int) -> Handler:
    op = "_adaptive_avg_pool3d_backward" if dims == 3 else "_adaptive_avg_pool2d_backward"

    def handler(args, kwargs, version):
        x, size = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "output_size")
        if not _needs_grad(x) or x.dim() not in (dims + 1, dims + 2) or not needs_replacement(op, version):
            return None
        if all(o == 1 for o in R._output_size(size, tuple(x.shape[-dims:]))):
            return None  # PyTorch computes a mean: deterministic already
        return lambda: R.adaptive_avg_pool(x, size, dims)
    return handler


def _adaptive_max(dims: int, indices: Optional[bool]) -> Handler:
    """``indices`` None: the F wrapper's ``return_indices`` argument decides; else fixed."""
    op = "adaptive_max_pool3d_backward" if dims == 3 else "adaptive_max_pool2d_backward"

    def handler(args, kwargs, version):
        x, size = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "output_size")
        if not _needs_grad(x) or x.dim() not in (dims + 1, dims + 2) or not needs_replacement(op, version):
            return None
        with_indices = bool(_arg(args, kwargs, 2, "return_indices", False)) if indices is None else indices
        return lambda: R.adaptive_max_pool(x, size, with_indices, dims)
    return handler


def _interpolate() -> Handler:
    names = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
    defaults = {"mode": "nearest", "antialias": False}

    def handler(args, kwargs, version):
        call = {name: _arg(args, kwargs, i, name, defaults.get(name)) for i, name in enumerate(names)}
        x, mode, antialias = call["input"], call["mode"], bool(call["antialias"])
        kernel = R._KERNELS.get((mode, antialias))
        if kernel is None or not _needs_grad(x) or x.dim() - 2 != R._MODE_DIMS[mode]:
            return None
        if (call["size"] is None) == (call["scale_factor"] is None):
            return None  # let PyTorch raise its own error
        if not needs_replacement(f"{kernel}_backward", version):
            return None
        return lambda: R.interpolate(x, call["size"], call["scale_factor"], mode, call["align_corners"],
                                     call["recompute_scale_factor"], antialias)
    return handler


_GRID_MODE_NAMES = {v: k for k, v in R._GRID_MODES.items()}
_GRID_PADDING_NAMES = {v: k for k, v in R._GRID_PADDING.items()}


def _grid_sample(codes: bool) -> Handler:
    """F.grid_sample (string modes) or torch.grid_sampler (integer codes)."""

    def handler(args, kwargs, version):
        x, grid = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "grid")
        if codes:
            mode = _GRID_MODE_NAMES.get(_arg(args, kwargs, 2, "interpolation_mode"))
            padding = _GRID_PADDING_NAMES.get(_arg(args, kwargs, 3, "padding_mode"))
        else:
            mode, padding = _arg(args, kwargs, 2, "mode", "bilinear"), _arg(args, kwargs, 3, "padding_mode", "zeros")
        align = _arg(args, kwargs, 4, "align_corners")
        if (not _needs_grad(x, grid) or not isinstance(x, torch.Tensor) or x.dim() != 4
                or mode not in R._GRID_MODES or padding not in R._GRID_PADDING
                or not needs_replacement("grid_sampler_2d_backward", version)):
            return None
        return lambda: R.grid_sample(x, grid, mode, padding, align)
    return handler


def _pad(args, kwargs, version):
    x, widths, mode = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "pad"), _arg(args, kwargs, 2, "mode", "constant")
    if mode not in ("reflect", "replicate") or not _needs_grad(x):
        return None
    widths = tuple(int(w) for w in widths)
    dims = len(widths) // 2
    if len(widths) % 2 or dims not in (1, 2, 3) or min(widths) < 0 or x.dim() not in (dims + 1, dims + 2):
        return None
    op = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{dims}d_backward"
    if not needs_replacement(op, version):
        return None
    return lambda: R.pad(x, widths, mode)


HANDLERS: Dict[Any, Handler] = {
    torch.adaptive_avg_pool1d: _adaptive_avg(1),
    F.adaptive_avg_pool2d: _adaptive_avg(2),
    torch._C._nn.adaptive_avg_pool2d: _adaptive_avg(2),
    F.adaptive_avg_pool3d: _adaptive_avg(3),
    torch._C._nn.adaptive_avg_pool3d: _adaptive_avg(3),
    F.adaptive_max_pool1d: _adaptive_max(1, None),  # boolean_dispatch wrappers: what modes see
    F.adaptive_max_pool2d: _adaptive_max(2, None),
    F.adaptive_max_pool3d: _adaptive_max(3, None),
    F._adaptive_max_pool1d: _adaptive_max(1, None),
    F.adaptive_max_pool1d_with_indices: _adaptive_max(1, True),
    torch.adaptive_max_pool1d: _adaptive_max(1, True),
    F._adaptive_max_pool2d: _adaptive_max(2, None),
    F.adaptive_max_pool2d_with_indices: _adaptive_max(2, True),
    torch._C._nn.adaptive_max_pool2d: _adaptive_max(2, True),
    F._adaptive_max_pool3d: _adaptive_max(3, None),
    F.adaptive_max_pool3d_with_indices: _adaptive_max(3, True),
    torch._C._nn.adaptive_max_pool3d: _adaptive_max(3, True),
    F.interpolate: _interpolate(),  # F.upsample and F.upsample_bilinear call it: seen as interpolate
    F.grid_sample: _grid_sample(codes=False),
    torch.grid_sampler: _grid_sample(codes=True),
    F.pad: _pad,
}


class ReplacementScope(TorchFunctionMode):
    """Inside the block, functional calls whose CUDA backward is nondeterministic in
    ``version`` (default: installed torch) run yolo-det's deterministic replacements."""

    def __init__(self, version: Optional[Version] = None) -> None:
        super().__init__()
        self.version = version or installed_version()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = HANDLERS.get(func)
        if handler is not None and not getattr(_state, "busy", False):
            replacement = handler(args, kwargs, self.version)
            if replacement is not None:
                _state.busy = True
                try:
                    return replacement()
                finally:
                    _state.busy = False
        return func(*args, **kwargs)


# -- which modules need one -----------------------------------------------------------------
def _is_torch_class(obj: Any) -> bool:
    """Defined by torch itself (``nn`` modules, ``F`` functions)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "torch"


def _literal(word: str) -> str:
    return rf"""['"]{word}['"]"""


# Rows that are one mode of a function: the words the calling source must contain.
_MODE_WORDS = (("_aa_", (r"antialias\s*=\s*True",)), ("reflection_pad", (_literal("reflect"),)),
               ("replication_pad", (_literal("replicate"),)), ("bilinear", (_literal("bilinear") + "|upsample_bilinear",)),
               ("bicubic", (_literal("bicubic"),)), ("trilinear", (_literal("trilinear"),)),
               ("linear1d", (_literal("linear"),)))
_VARIABLE_MODE = re.compile(r"\bmode\s*=\s*[^'\"\s]")


def _mode_words(op: str) -> Tuple[str, ...]:
    words: Tuple[str, ...] = ()
    for key, patterns in _MODE_WORDS:
        if key in op:
            words += patterns
    return words


_CALLED_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")


def _read(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=1024)
def _source(cls: type) -> str:
    """The source of ``cls`` plus that of the module-level helper functions it calls (two
    levels deep), e.g. Ultralytics' ``multi_scale_deformable_attn_pytorch`` for MSDeformAttn."""
    texts, seen = [_read(cls)], set()
    frontier = [(texts[0], getattr(sys.modules.get(cls.__module__), "__dict__", {}))]
    for _ in range(2):
        found = []
        for text, scope in frontier:
            for name in set(_CALLED_NAME.findall(text)) - seen:
                helper = scope.get(name)
                if inspect.isfunction(helper) and not _is_torch_class(helper):
                    seen.add(name)
                    body = _read(helper)
                    texts.append(body)
                    found.append((body, getattr(helper, "__globals__", {})))
        frontier = found
    return "\n".join(texts)


@functools.lru_cache(maxsize=1024)
def functions_called(cls: type) -> FrozenSet[str]:
    """The table's Python functions that ``cls`` (or a helper function it calls) calls
    (``F.pad(``, ``interpolate(``; not ``self.pad(``). Empty when the source cannot be read."""
    source = _source(cls)
    if not source:
        return frozenset()
    return frozenset(_call_pattern(frozenset(n for row in load_table() for n in row.functions)).findall(source))


@functools.lru_cache(maxsize=8)
def _call_pattern(names: FrozenSet[str]) -> "re.Pattern[str]":
    """One regex for a call of any of ``names`` (one pass over a source, not one search per name: the table
    has more names than ``re``'s cache holds). A call is a name not preceded by a word character or a dot
    (``self.pad(``), unless by ``F.``, ``functional.`` or ``torch.``, nor by ``def ``, then ``(``."""
    prefix = r"(?:(?<![\w.])|(?<=F\.)|(?<=functional\.)|(?<=torch\.))"
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
    return re.compile(rf"{prefix}(?<!def )({alternatives})(?=\s*\()")


def calls_row(cls: type, row) -> bool:
    """Whether ``cls``'s source calls a function of ``row`` and, where the row is one mode of a
    function (reflect pad, bicubic interpolate, ...), names that mode or passes a variable mode."""
    if not functions_called(cls) & set(row.functions):
        return False
    source = _source(cls)
    if row.op.startswith("_adaptive_avg_pool") and _only_global_average(source):
        return False  # output 1x1: PyTorch computes a mean
    if _VARIABLE_MODE.search(source):
        return True  # the mode is chosen at run time: any mode may run
    return all(re.search(pattern, source) for pattern in _mode_words(row.op))


def _only_global_average(source: str) -> bool:
    """Every ``adaptive_avg_pool*d(x, ...)`` call in ``source`` has a literal output size of 1."""
    calls = re.findall(r"adaptive_avg_pool[123]d\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)", source)
    ones = re.compile(r"^[^,]+,\s*(?:output_size\s*=\s*)?(?:1|\(\s*1\s*(?:,\s*1\s*)*,?\s*\))\s*$")
    return bool(calls) and all(ones.match(c.strip()) for c in calls)


def ops_to_replace(module: torch.nn.Module, version: Optional[Version] = None,
                   table: Optional[OpTable] = None) -> List[str]:
    """The table ops ``module`` can run that are nondeterministic in ``version`` and replaceable:
    ``nn`` modules by type and attributes, custom modules by the calls in their source."""
    version = version or installed_version()
    table = table or load_table()
    cls = type(module)
    builtin = _is_torch_class(cls)
    found = set()
    for row in table:
        if not row.replacement or not row.nondeterministic(version, routed=True):
            continue
        if any(m.matches(module) for m in row.modules) if builtin else calls_row(cls, row):
            found.add(row.op)
    return sorted(found)


# -- the class swap ---------------------------------------------------------------------------
def _reduce_as_native(self, protocol):
    """Pickle as the original class: checkpoints never reference yolo-det.

    ``copyreg._reconstructor`` (standard library) makes a bare instance of the original
    class; the state is then restored by ``nn.Module.__setstate__``, as for any module.
    """
    return copyreg._reconstructor, (type(self)._yolo_det_native, object, None), self.__getstate__()


def _deepcopy_keeping_swap(self, memo):
    clone = type(self).__new__(type(self))
    memo[id(self)] = clone
    clone.__setstate__(copy.deepcopy(self.__getstate__(), memo))
    return clone


@functools.lru_cache(maxsize=None)
def scoped_class(native: type, version: Version) -> type:
    """A subclass of ``native`` whose calls run inside a :class:`ReplacementScope`.

    ``__call__`` (not ``forward``) is wrapped, so forward hooks, and a ``forward`` assigned on
    the instance (``self.forward = self.forward_fuse``), run inside the scope too.
    """

    def __call__(self, *args, **kwargs):
        with ReplacementScope(version):
            return native.__call__(self, *args, **kwargs)

    namespace = {
        "__call__": __call__,
        "__reduce_ex__": _reduce_as_native,
        "__deepcopy__": _deepcopy_keeping_swap,
        "__module__": native.__module__,
        "__qualname__": native.__qualname__,
        "__doc__": native.__doc__,
        "_yolo_det_native": native,
        "_yolo_det_version": version,
    }
    return type(native.__name__, (native,), namespace)


def is_replaced(module: torch.nn.Module) -> bool:
    """Whether :func:`make_deterministic` swapped this module's class."""
    return "_yolo_det_native" in type(module).__dict__


def _target(native: type, ops: List[str], table: OpTable) -> str:
    names = sorted({row.replacement for op in ops for row in table.rows_for(op) if row.replacement})
    funcs = ", ".join(f"yolo_det.replacements.{n}" for n in names)
    return funcs if _is_torch_class(native) else f"{native.__name__} with {funcs} for its functional calls"


def make_deterministic(model: torch.nn.Module, record: Optional[list] = None, *,
                       torch_version: Optional[str] = None) -> torch.nn.Module:
    """Swap, in place, every module that can run an op with no deterministic CUDA kernel in the
    installed torch (or ``torch_version``) for a deterministic equivalent; return ``model``.

    ``record``, when a list, gets one ``{"module", "from", "to", "ops"}`` dict per swap.
    Idempotent; :func:`restore_native` undoes it.
    """
    version = parse_version(torch_version) if torch_version else installed_version()
    table = load_table()
    for name, module in model.named_modules():
        if is_replaced(module):
            continue
        ops = ops_to_replace(module, version, table)
        if not ops:
            continue
        native = type(module)
        module.__class__ = scoped_class(native, version)
        if record is not None:
            record.append({"module": name or "(model)", "from": native.__name__,
                           "to": _target(native, ops, table), "ops": ops})
    return model


def restore_native(model: torch.nn.Module) -> torch.nn.Module:
    """Give every module swapped by :func:`make_deterministic` its original class back."""
    for module in model.modules():
        if is_replaced(module):
            module.__class__ = type(module)._yolo_det_native
    return model


# -- benchmark cases --------------------------------------------------------------------------
def benchmark_cases() -> Iterator[BenchCase]:
    """Each replacement with the native op (and, for bilinear, PyTorch's own CUDA route)."""
    yield BenchCase("adaptive_max_pool2d 1x1 (SCAM/CBAM)", lambda x: F.adaptive_max_pool2d(x, 1),
                    lambda x: R.adaptive_max_pool(x, 1), bench_input(8, 256, 40, 40))
    yield BenchCase("adaptive_max_pool2d 3x3 (ImagePoolingAttn)", lambda x: F.adaptive_max_pool2d(x, 3),
                    lambda x: R.adaptive_max_pool(x, 3), bench_input(8, 256, 20, 20))
    yield BenchCase("adaptive_avg_pool2d 6x6 (PSP)", lambda x: F.adaptive_avg_pool2d(x, 6),
                    lambda x: R.adaptive_avg_pool(x, 6), bench_input(8, 512, 20, 20))
    yield BenchCase("adaptive_avg_pool2d (None,1) (CoordAtt)", lambda x: F.adaptive_avg_pool2d(x, (None, 1)),
                    lambda x: R.adaptive_avg_pool(x, (None, 1)), bench_input(8, 256, 40, 40))
    yield BenchCase("interpolate bicubic x2", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"),
                    lambda x: R.interpolate(x, scale_factor=2, mode="bicubic"), bench_input(8, 128, 40, 40))
    yield BenchCase("interpolate bilinear x2", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
                    lambda x: R.interpolate(x, scale_factor=2, mode="bilinear"), bench_input(8, 128, 40, 40))
    decompositions = getattr(getattr(torch, "_decomp", None), "decompositions", None)
    route = getattr(decompositions, "_upsample_linear_vec", None)
    if route is not None:
        yield BenchCase("interpolate bilinear x2 vs PyTorch's CUDA route",
                        lambda x: route(x, None, False, [2.0, 2.0]),
                        lambda x: R.interpolate(x, scale_factor=2, mode="bilinear"), bench_input(8, 128, 40, 40))
    yield BenchCase("reflection pad 1 (2-D)", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
                    lambda x: R.pad(x, (1, 1, 1, 1), "reflect"), bench_input(8, 64, 80, 80))
    grid = {}

    def sampling_grid(x: torch.Tensor) -> torch.Tensor:
        # RT-DETR MSDeformAttn: (batch*heads, queries, points, 2), offsets learned (needs grad)
        key = (x.device, x.dtype)
        if key not in grid:
            generator = torch.Generator().manual_seed(1)
            grid[key] = (torch.rand(x.shape[0], 300, 4, 2, generator=generator) * 2 - 1).to(x).requires_grad_()
        return grid[key]

    yield BenchCase("grid_sample bilinear (MSDeformAttn)",
                    lambda x: F.grid_sample(x, sampling_grid(x), align_corners=False),
                    lambda x: R.grid_sample(x, sampling_grid(x), align_corners=False), bench_input(64, 32, 40, 40))


__all__ = ["BenchCase", "HANDLERS", "ReplacementScope", "benchmark_cases", "calls_row", "functions_called", "is_replaced",
           "make_deterministic", "needs_replacement", "ops_to_replace", "restore_native", "restore_opaque", "scoped_class",
           "swap_opaque"]


# -- opaque kernels: rebinding the names model code calls them by --------------------------------
_OPAQUE_SWAPS: List[Tuple[Any, str, Any]] = []
_STAND_INS: Dict[int, Tuple[Any, Any]] = {}


def swap_opaque(model: torch.nn.Module, findings: Optional[Sequence[Any]] = None,
                record: Optional[List[Dict[str, Any]]] = None) -> List[Any]:
    """Bind deterministic stand-ins (:mod:`yolo_det.strict.opaque_replacements`) for the
    replaceable opaque kernels ``model`` calls (default: :func:`yolo_det.strict.opaque.scan_model`).

    The name the model's code calls (``flash_attn_func`` in its module, ``MSDeformAttnFunction``,
    ``roi_align``) and the library's own attribute are rebound, process-wide, so the module
    classes and checkpoints are untouched; :func:`restore_opaque` undoes it. Returns the findings
    left: not replaceable, not importable here, or with nothing to bind.
    """
    from .opaque import scan_model

    findings = scan_model(model) if findings is None else findings
    left = []
    for finding in findings:
        spec = REPLACEMENTS.get(finding.replacement or "")
        if spec is None or not finding.importable:
            left.append(finding)
            continue
        bound, how = [], ""
        for module_name, attr in list(finding.bindings) + list(spec.homes):
            module = sys.modules.get(module_name)
            current = getattr(module, attr, None) if module is not None else None
            if current is None:
                continue
            if not is_stand_in(current):
                cached = _STAND_INS.get(id(current))
                stand_in = cached[1] if cached is not None and cached[0] is current else None
                if stand_in is None:  # one stand-in per original, wherever it is bound
                    stand_in = spec.make(current)
                    _STAND_INS[id(current)] = (current, stand_in)
                setattr(module, attr, stand_in)
                _OPAQUE_SWAPS.append((module, attr, current))
                current = stand_in
            how = current._yolo_det_how
            bound.append(f"{module_name}.{attr}")
        if not bound:
            left.append(finding)
            continue
        if record is not None:
            record.append({"module": ", ".join(finding.modules), "from": finding.op, "to": spec.target,
                           "ops": [finding.op], "bound": sorted(set(bound)), "how": how})
    return left


def restore_opaque() -> None:
    """Give every name :func:`swap_opaque` rebound its original object back."""
    while _OPAQUE_SWAPS:
        module, attr, original = _OPAQUE_SWAPS.pop()
        setattr(module, attr, original)
