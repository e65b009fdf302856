"""Apply a determinism mode to PyTorch's process-global flags, and undo it exactly.

The flags are ``torch.use_deterministic_algorithms`` (and its ``warn_only``),
``cudnn.deterministic``, ``cudnn.benchmark`` and
``torch.utils.deterministic.fill_uninitialized_memory``. They are process-global, not
thread-local, and a backward kernel sees the value they have when ``.backward()`` runs,
so toggling them around ``.backward()`` scopes a mode to the backward pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace
from typing import Iterator, Optional

import torch

from .mode import validate_mode


def _fill_flag_available() -> bool:
    return hasattr(torch.utils, "deterministic") and hasattr(
        torch.utils.deterministic, "fill_uninitialized_memory"
    )


@dataclass(frozen=True)
class FlagState:
    """Every global flag yolo-det touches. ``fill_uninitialized_memory`` is None on torch < 2.2."""

    deterministic: bool
    warn_only: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    fill_uninitialized_memory: Optional[bool]

    def to_dict(self) -> dict:
        return asdict(self)


def snapshot() -> FlagState:
    """Read the current value of every flag."""
    return FlagState(
        deterministic=torch.are_deterministic_algorithms_enabled(),
        warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        fill_uninitialized_memory=(
            bool(torch.utils.deterministic.fill_uninitialized_memory) if _fill_flag_available() else None
        ),
    )


def restore(state: FlagState) -> None:
    """Set every flag to the values in ``state``."""
    torch.use_deterministic_algorithms(state.deterministic, warn_only=state.warn_only)
    torch.backends.cudnn.deterministic = state.cudnn_deterministic
    torch.backends.cudnn.benchmark = state.cudnn_benchmark
    if state.fill_uninitialized_memory is not None and _fill_flag_available():
        torch.utils.deterministic.fill_uninitialized_memory = state.fill_uninitialized_memory


def flags_for(mode: str, base: Optional[FlagState] = None, fill_uninitialized_memory: Optional[bool] = None) -> FlagState:
    """The flag values ``mode`` means, starting from ``base`` (default: the current flags).

    strict: deterministic algorithms, errors on nondeterministic ops, cuDNN deterministic,
    no benchmark. warn: the same with ``warn_only``. off: determinism off; ``cudnn.benchmark``
    is left as the script set it (off allows it). ``fill_uninitialized_memory`` None keeps
    the current value.
    """
    mode = validate_mode(mode)
    base = snapshot() if base is None else base
    if mode == "off":
        state = replace(base, deterministic=False, warn_only=False, cudnn_deterministic=False)
    else:
        state = replace(
            base,
            deterministic=True,
            warn_only=(mode == "warn"),
            cudnn_deterministic=True,
            cudnn_benchmark=False,
        )
    if fill_uninitialized_memory is not None and state.fill_uninitialized_memory is not None:
        state = replace(state, fill_uninitialized_memory=bool(fill_uninitialized_memory))
    return state


def set_determinism(mode: str, *, fill_uninitialized_memory: Optional[bool] = None) -> FlagState:
    """Apply ``mode`` (``strict``, ``warn`` or ``off``) globally and return the previous flags.

    Raises ValueError naming the allowed values for anything else.
    """
    previous = snapshot()
    restore(flags_for(mode, previous, fill_uninitialized_memory))
    return previous


@contextlib.contextmanager
def temporary_determinism(mode: str, *, fill_uninitialized_memory: Optional[bool] = None) -> Iterator[FlagState]:
    """Apply ``mode`` inside the block; restore every flag on exit, also on exceptions. Nests."""
    previous = set_determinism(mode, fill_uninitialized_memory=fill_uninitialized_memory)
    try:
        yield snapshot()
    finally:
        restore(previous)
