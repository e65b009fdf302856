"""A copy of the PyPI ``yolov5`` package run from its folder: its ``train.py`` imports ``yolov5.*`` by absolute name,
so the copy's parent goes first on ``PYTHONPATH`` (docs/patch.md says the same to users): the patched copy runs,
not the installed package. ``conftest.run`` and ``support.cli.cli`` apply it to every command started there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional


def package_copy(cwd: Optional[os.PathLike]) -> Optional[Path]:
    """``cwd`` when it is a copy of a package with a training script (``__init__.py`` beside ``train.py``)."""
    if cwd is None:
        return None
    folder = Path(cwd)
    return folder if (folder / "__init__.py").is_file() and (folder / "train.py").is_file() else None


def with_package_copy(env: Optional[Mapping[str, str]], cwd: Optional[os.PathLike]) -> Optional[dict]:
    """``env`` (None: unchanged) with the parent of the package copy at ``cwd`` first on ``PYTHONPATH``."""
    tree = package_copy(cwd)
    if tree is None or env is None:
        return None if env is None else dict(env)
    out = dict(env)
    parent = str(tree.resolve().parent)
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != parent]
    out["PYTHONPATH"] = os.pathsep.join([parent] + rest)
    return out
