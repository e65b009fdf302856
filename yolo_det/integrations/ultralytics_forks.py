"""Fork modules under yolo-det: flash attention's backward made deterministic (YOLOv12-style blocks).

sunsmarterjie/yolov12's attention block imports ``flash_attn.flash_attn_interface.flash_attn_func``
into its module at import time (CUDA, compute capability 8+) and calls it with the default
``deterministic=False``: flash-attn's backward is then nondeterministic, and since it is an extension
called inside a ``torch.autograd.Function`` PyTorch raises no nondeterminism alert, so strict could not
see it. Under strict and warn, every Python module that defines a layer of the trained model and holds a
flash-attn function taking ``deterministic`` gets a wrapper that passes ``deterministic=True``; the
originals are put back when training ends.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Dict, List, Tuple

import torch


def _takes_deterministic(function: Any) -> bool:
    try:
        return "deterministic" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def flash_sites(model: torch.nn.Module) -> List[Tuple[Any, str, Callable[..., Any]]]:
    """(Python module, global name, function) for each flash-attn function the model's layers' modules hold."""
    found, seen = [], set()
    for layer in model.modules():
        module = sys.modules.get(type(layer).__module__)
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        for name, value in list(vars(module).items()):
            origin = getattr(value, "__module__", "") or ""
            if callable(value) and origin.split(".")[0] == "flash_attn" and _takes_deterministic(value) \
                    and not hasattr(value, "_yolo_det_original"):
                found.append((module, name, value))
    return found


def deterministic_flash(model: torch.nn.Module, mode: str) -> Tuple[Dict[str, Any], Callable[[], None]]:
    """Under strict/warn, the model's flash-attn calls pass ``deterministic=True``; returns (facts, restore)."""
    sites = flash_sites(model) if mode != "off" else []
    for module, name, function in sites:
        @functools.wraps(function)
        def deterministic(*args: Any, _function: Callable[..., Any] = function, **kwargs: Any) -> Any:
            kwargs["deterministic"] = True
            return _function(*args, **kwargs)

        deterministic._yolo_det_original = function  # type: ignore[attr-defined]
        setattr(module, name, deterministic)

    def restore() -> None:
        for module, name, function in sites:
            setattr(module, name, function)

    facts = {"sites": [f"{module.__name__}.{name}" for module, name, _ in sites], "deterministic_backward": bool(sites)}
    return facts, restore


__all__ = ["deterministic_flash", "flash_sites"]
