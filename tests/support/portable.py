"""The portable golden's tool (scripts/portable_golden.py) as a module: the tiny run's environment and command, the
golden's path and the verdict against it; scripts/gpu_check.py, whose comparison of a device run with the CPU
portable run is tested on CPU records."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def golden_tool() -> ModuleType:
    """scripts/portable_golden.py, imported once."""
    return _script("portable_golden")


def gpu_check() -> ModuleType:
    """scripts/gpu_check.py, imported once (its check 12's CPU-side logic is tested without a GPU)."""
    return _script("gpu_check")
