"""The portable golden's tool (scripts/portable_golden.py) as a module: the tiny run's environment and command, the
golden's path and the verdict against it, shared by the tests of portable runs and of scripts/gpu_check.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def golden_tool() -> ModuleType:
    """scripts/portable_golden.py, imported once."""
    import sys

    name = "portable_golden"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "portable_golden.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
