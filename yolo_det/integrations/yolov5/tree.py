"""The patched tree as Python runs it: whether its checkpoints load on this torch, and whether the modules the patch
changed are the ones imported.

YOLOv5 7.0 and older load their own checkpoints with a bare ``torch.load``, which torch >= 2.6 refuses by default
(the run would fail after its last epoch); a copy of the PyPI ``yolov5`` run without its parent on ``PYTHONPATH``
imports the installed, unpatched package (the NMS time limit and the evaluation's record never run). Both are told
at start-up, by :func:`yolo_det.integrations.yolov5.script.start` and ``preflight``.
"""

from __future__ import annotations

import inspect
import io
import os
import pickle
import re
import sys
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple

import torch

from ...patch import markers


class _Probe:
    """An object only a full unpickler loads: tells whether ``torch.load`` is weights-only by default."""


def _weights_only_by_default() -> bool:
    buffer = io.BytesIO()
    torch.save(_Probe(), buffer)
    buffer.seek(0)
    try:
        torch.load(buffer)
    except pickle.UnpicklingError:
        return True
    except Exception:  # noqa: BLE001 - any other refusal is weights-only too
        return True
    return False


def _bare_torch_load(function: Any) -> bool:
    """``function``'s source calls ``torch.load(...)`` without ``weights_only`` (YOLOv5 7.0's strip_optimizer)."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return re.search(r"torch\.load\((?![^)]*weights_only)", source) is not None


_LOADS_ALLOWED = False


def allow_full_checkpoint_loads(script_globals: Mapping[str, Any]) -> None:
    """YOLOv5 7.0 and older pickle the whole model into their checkpoints and load them (``--weights``, the
    final ``strip_optimizer`` of last.pt/best.pt, ``--resume``) with a bare ``torch.load``, which torch >= 2.6
    refuses by default: the run would fail after its last epoch. Such a release gets full loads in this process
    (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, said once); under ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` it cannot
    train to its end, which is said now (exit 2), not after the last epoch."""
    global _LOADS_ALLOWED
    strip = script_globals.get("strip_optimizer")
    if _LOADS_ALLOWED or strip is None or not _bare_torch_load(strip) or \
            os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "").lower() in ("1", "y", "yes", "true"):
        return
    if os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "").lower() in ("1", "y", "yes", "true"):
        print(f"yolo-det: error: this YOLOv5 loads its own checkpoints with a bare torch.load ({strip.__module__}."
              f"strip_optimizer), which TORCH_FORCE_WEIGHTS_ONLY_LOAD=1 refuses: the run would fail after its last "
              "epoch. Unset TORCH_FORCE_WEIGHTS_ONLY_LOAD, or use a release that passes weights_only=False",
              file=sys.stderr)
        raise SystemExit(2)
    if not _weights_only_by_default():
        return
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    _LOADS_ALLOWED = True
    if int(os.environ.get("RANK", -1)) in (-1, 0):
        print(f"yolo-det: torch {torch.__version__.split('+')[0]} loads checkpoints weights-only by default and this "
              "YOLOv5 pickles whole models into them: its checkpoints load in full in this process "
              "(TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1; load only checkpoints you trust)")


def _patched(path: Path) -> bool:
    try:
        return markers.MARKER in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def shadowed_patches(tree: Path) -> List[Tuple[str, str]]:
    """``(module, file imported)`` for each module the patch changed in ``tree`` that Python imported from another
    place: the PyPI ``yolov5``'s train.py imports ``yolov5.*`` by absolute name, so a patched copy run without its
    parent folder on ``PYTHONPATH`` runs the installed, unpatched package."""
    out = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not name:
            continue
        parts = name.split(".")
        for rel in ([parts[1:], parts] if parts[0] == tree.name else [parts]):
            local = tree.joinpath(*rel).with_suffix(".py") if rel else None
            if local is not None and local.is_file():
                if Path(file).resolve() != local.resolve() and _patched(local):
                    out.append((name, file))
                break
    return sorted(out)


def check_patched_modules(script: Optional[str], mode: str, refuse: Callable[[str], Any]) -> None:
    """Refuse under strict (``refuse(message)``: exit 2; warn otherwise) a patched tree whose patched modules are
    not the ones imported."""
    if script is None:
        return
    tree = Path(script).resolve().parent
    shadowed = shadowed_patches(tree)
    if not shadowed:
        return
    name, file = shadowed[0]
    message = (f"{tree / 'train.py'} imported {name} from {file}, not the patched {tree.name}/"
               f"{'/'.join(name.split('.')[1:] if name.split('.')[0] == tree.name else name.split('.'))}.py beside it"
               f"{f' ({len(shadowed)} modules)' if len(shadowed) > 1 else ''}: the patch's changes there (the NMS "
               f"time limit, the evaluation's record) do not run. Set PYTHONPATH={tree.parent} so that "
               f"`import {tree.name}` finds the patched copy")
    if mode == "strict":
        refuse(message)  # exit 2, removing the run folder this start created
    print(f"yolo-det: warning: {message}", file=sys.stderr)


__all__ = ["allow_full_checkpoint_loads", "check_patched_modules", "shadowed_patches"]
