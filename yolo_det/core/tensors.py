"""The tensors inside a nested value: what module hooks, dispatch modes and probes read from arguments and outputs."""

from __future__ import annotations

from typing import Any, List

import torch


def tensors_in(value: Any) -> List[torch.Tensor]:
    """The tensors in ``value`` and in its nested lists, tuples and dict values, in order; anything else is skipped."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []
