"""Where code ran in a compiled graph: the innermost frame of an FX node's stack trace (``node.meta["stack_trace"]``)
and the module path Dynamo names (``L['self'].model[0]._modules['conv']``)."""

from __future__ import annotations

import re

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_PREFIX = re.compile(r"^L\['[^']*'\]\.?")
_GETITEM = re.compile(r"\[(?:'([^']*)'|(-?\d+))\]")


def source_line(trace: str) -> str:
    """``file.py:N in fn: code`` of the innermost frame of ``trace`` (the code line left out where the trace has
    none); "" without a frame."""
    lines = [line.strip() for line in (trace or "").splitlines()]
    for index in range(len(lines) - 1, -1, -1):
        found = _FRAME.match(lines[index])
        if found:
            code = lines[index + 1] if index + 1 < len(lines) else ""
            where = f"{found.group(1).rsplit('/', 1)[-1]}:{found.group(2)} in {found.group(3)}"
            return f"{where}: {code}" if code and not code.startswith("File ") else where
    return ""


def module_path(raw: str) -> str:
    """Dynamo's module path (``L['self'].model[0]._modules['conv']``) as ``model.0.conv`` (``(model)`` for the
    model itself)."""
    path = _PREFIX.sub("", raw or "").replace("._modules", "").replace("_modules", "")
    path = _GETITEM.sub(lambda m: "." + (m.group(1) if m.group(1) is not None else m.group(2)), path)
    return re.sub(r"\.+", ".", path).strip(".") or "(model)"


__all__ = ["module_path", "source_line"]
