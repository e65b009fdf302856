"""Releases installed side by side (``scripts/compat.py``) for tests; a test skips, saying why, without the registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("yolo_det_compat", ROOT / "scripts" / "compat.py")
compat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compat)


def release(version: str) -> Path:
    """The folder holding ``ultralytics==version`` (installed once, reused; another session's copy too)."""
    try:
        return compat.install(version)
    except Exception as exc:  # noqa: BLE001 - no registry: say why
        pytest.skip(f"cannot install ultralytics=={version} into {compat.cache_dir()}: {exc}")
