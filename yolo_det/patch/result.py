"""What apply/revert report: the refusal error and each file's before/after bytes."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence



class PatchError(Exception):
    """The target cannot be patched (or reverted); nothing was changed.

    ``found`` and ``missing`` name the anchors the codemod looked for in ``path``.
    """

    def __init__(self, message: str, path: Optional[Path] = None,
                 found: Sequence[str] = (), missing: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.found = list(found)
        self.missing = list(missing)

    def details(self) -> str:
        """The message with the found/missing anchors, one per line."""
        lines = [str(self)]
        if self.found or self.missing:
            lines.append("  found:   " + (", ".join(self.found) or "-"))
            lines.append("  missing: " + (", ".join(self.missing) or "-"))
        return "\n".join(lines)


@dataclass
class FileChange:
    """One training script: its bytes before and after, and what the codemod did."""

    path: Path
    relpath: str
    before: bytes
    after: bytes
    status: str  # patched | updated | already patched | reverted | not patched | skipped
    notes: List[str] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        """Unified diff of this file (``a/`` and ``b/`` paths relative to the repo)."""
        if not self.changed:
            return ""
        old = self.before.decode(self.encoding).splitlines(keepends=True)
        new = self.after.decode(self.encoding).splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.relpath}", f"b/{self.relpath}"))


@dataclass
class PatchResult:
    """What apply/revert did (or, with ``dry_run``, would do) to a repository."""

    repo: Path
    action: str  # apply | revert
    dry_run: bool
    files: List[FileChange]
    recovered: List[str] = field(default_factory=list)  # what an interrupted earlier command left, now finished

    @property
    def files_changed(self) -> List[Path]:
        return [f.path for f in self.files if f.changed]

    @property
    def already_patched(self) -> bool:
        """True when apply found every target patched already (nothing to change)."""
        return self.action == "apply" and bool(self.files) and all(
            f.status == "already patched" for f in self.files if f.status != "skipped")

    @property
    def diff(self) -> str:
        return "".join(f.diff() for f in self.files)
