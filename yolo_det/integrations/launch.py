"""The environment ``yolo-det run`` gives the command it launches, so that the Python processes it
starts (and the DDP workers they spawn) train Ultralytics models under yolo-det without code changes.

The mechanism is Python's documented ``sitecustomize`` start-up hook: :data:`BOOTSTRAP_DIR` (which
holds only ``sitecustomize.py``) goes first on ``PYTHONPATH`` and :data:`BOOTSTRAP_VAR` is set. The
bootstrap chains to any ``sitecustomize`` it shadows and does nothing without the variable. Standard
library only: the launcher must not import torch.

Under ``YOLO_DET_PORTABLE`` the launched command's environment also carries portable's dispatch pins and thread
count (:func:`yolo_det.core.portable.launch_env`): the libraries read them once, when they load, so they must be
there before the child's Python starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Mapping, Optional

from ..core import env_names, portable

#: The folder put first on the launched command's ``PYTHONPATH``.
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
#: Set in the launched command's environment; the bootstrap acts only when it is set.
BOOTSTRAP_VAR = env_names.BOOTSTRAP


def child_env(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``PYTHONPATH`` (the bootstrap folder first, once) and the bootstrap switch for a launched command; under
    ``YOLO_DET_PORTABLE`` (on, or a thread count) also portable's pins, replacing any cap ``base`` had."""
    base = os.environ if base is None else base
    bootstrap = str(BOOTSTRAP_DIR)
    rest = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and p != bootstrap]
    out = {"PYTHONPATH": os.pathsep.join([bootstrap] + rest), BOOTSTRAP_VAR: "1"}
    threads = portable.requested(base)
    if threads is not None:
        out.update(portable.launch_env(threads))
    return out


def bootstrapped() -> bool:
    """Whether this process was launched through ``yolo-det run`` (the bootstrap is switched on)."""
    return bool(os.environ.get(BOOTSTRAP_VAR))


__all__ = ["BOOTSTRAP_DIR", "BOOTSTRAP_VAR", "bootstrapped", "child_env"]
