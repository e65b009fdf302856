"""Make CPU runs take CUDA's determinism code paths and raise CUDA's determinism alerts.

Two pieces, used together by :func:`emulate_cuda_alerts` (training and tests on CPU) and
separately by the audit:

- :class:`CudaRoutes`, a ``TorchFunctionMode``: some ``torch.nn.functional`` functions take
  a deterministic route only for CUDA tensors with determinism on (bilinear/trilinear
  ``interpolate`` since 2.1/2.9, ``pad(mode='replicate')`` since 2.3, ...). The mode hands
  those functions their tensors as :class:`CudaLike`, a subclass whose ``is_cuda`` is True,
  so the installed torch's own Python code picks the route it would pick on CUDA.
  TorchScript and direct ``torch._C._nn`` calls are not Python-level and keep the native op,
  as they do on CUDA. The functions are found by reading the installed torch's source.
- :class:`CudaAlerts`, a ``TorchDispatchMode``: when an aten op whose CUDA kernel has no
  deterministic implementation runs (per the op table, for the installed torch), it calls
  PyTorch's own alert with the CUDA kernel name, so strict raises PyTorch's RuntimeError and
  warn-only warns, exactly as on CUDA. Ops that alert on CPU too are left to PyTorch.

Active around ``.backward()``, the dispatch mode sees the backward ops as well (autograd
runs them under the modes that were active when ``backward()`` was called).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..core import report as report_mod
from .optable import OpTable, Version, installed_version, load_table

_api = threading.local()


class CudaLike(torch.Tensor):
    """A CPU tensor that answers ``is_cuda=True``/``is_cpu=False`` to Python-level checks."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Results stay plain tensors: only the function handed CudaLike inputs sees them.
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=1)
def route_functions() -> Dict[Callable, str]:
    """``torch.nn.functional`` functions whose Python code has a CUDA-only determinism route,
    and the functions that call them, read from the installed torch's source."""
    import torch.nn.functional as F

    sources: Dict[str, str] = {}
    for name, obj in vars(F).items():
        if inspect.isfunction(obj) and obj.__module__ == F.__name__:
            with contextlib.suppress(OSError, TypeError):
                sources[name] = inspect.getsource(obj)
    routed = {n for n, s in sources.items() if "are_deterministic_algorithms_enabled" in s
              and re.search(r"\.is_(cuda|cpu)\b", s)}
    grown = True
    while grown:
        callers = {n for n, s in sources.items() if n not in routed
                   and any(re.search(rf"(?<![\w.]){r}\(|\bF\.{r}\(", s) for r in routed)}
        routed |= callers
        grown = bool(callers)
    return {getattr(F, name): name for name in sorted(routed)}


def current_api() -> Optional[str]:
    """The Python-level torch function being run in this thread (under :class:`CudaRoutes`)."""
    return getattr(_api, "name", None)


def _as_cuda_like(value: Any) -> Any:
    if type(value) is torch.Tensor or isinstance(value, torch.nn.Parameter):
        return value.as_subclass(CudaLike)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, CudaLike):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        items = [_plain(v) for v in value]
        if type(value) is tuple:
            return tuple(items)
        if hasattr(value, "_make"):  # namedtuple
            return value._make(items)
        return type(value)(items)  # torch.return_types structseq
    return value


class CudaRoutes(TorchFunctionMode):
    """Run route-taking ``torch.nn.functional`` functions as if their inputs were on CUDA.

    ``emulate=False`` only records which function is running (:func:`current_api`), for an
    audit that predicts another torch version from the op table instead.
    """

    def __init__(self, emulate: bool = True) -> None:
        super().__init__()
        self.emulate = emulate
        self.routes = route_functions() if emulate else {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        previous = getattr(_api, "name", None)
        _api.name = getattr(func, "__name__", None)
        try:
            if func in self.routes:
                args = tuple(_as_cuda_like(a) for a in args)
                kwargs = {k: _as_cuda_like(v) for k, v in kwargs.items()}
                return _plain(func(*args, **kwargs))
            return func(*args, **kwargs)
        finally:
            _api.name = previous


def alert(kernel: str) -> None:
    """PyTorch's own nondeterminism alert for ``kernel``: raises under strict, warns under warn-only."""
    native = getattr(getattr(torch, "_prims_common", None), "alert_not_deterministic", None)
    if native is not None:
        native(kernel)
        return
    if torch.are_deterministic_algorithms_enabled():  # torch < 2.1: same text, same behaviour
        if torch.is_deterministic_algorithms_warn_only_enabled():
            warnings.warn(f"{kernel} does not have a deterministic implementation, but you set "
                          "'torch.use_deterministic_algorithms(True, warn_only=True)'.", stacklevel=2)
        else:
            raise RuntimeError(report_mod.strict_message(kernel))


class CudaAlerts(TorchDispatchMode):
    """Raise CUDA's determinism alert for every op the table says alerts on CUDA (only there)."""

    def __init__(self, table: Optional[OpTable] = None, version: Optional[Version] = None) -> None:
        super().__init__()
        self.table = table or load_table()
        self.version = version or installed_version()
        self._ops = {row.op for row in self.table if self._alerts(row)}

    def _alerts(self, row) -> bool:
        return row.raises(self.version) and not row.cpu_alerts and not row.is_env

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ in self._ops:
            for row in self.table.match(func, args, kwargs):
                if self._alerts(row):
                    alert(row.cuda_kernel)
                    break
        return func(*args, **kwargs)


@contextlib.contextmanager
def emulate_cuda_alerts() -> Iterator[None]:
    """Inside the block, CPU code behaves as CUDA does under the current determinism flags.

    Routes CUDA takes are taken (torch's own Python code decides), and ops with no
    deterministic CUDA kernel in the installed torch raise PyTorch's alert under strict and
    warn under warn-only. Keep ``loss.backward()`` inside the block so backward ops count.
    """
    with CudaRoutes(emulate=True), CudaAlerts():
        yield


__all__ = ["CudaAlerts", "CudaLike", "CudaRoutes", "alert", "current_api", "emulate_cuda_alerts", "route_functions"]
