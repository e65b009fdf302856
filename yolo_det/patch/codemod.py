"""``yolo-det apply-patch`` / ``revert-patch``: a libcst codemod of YOLOv5-family training scripts.

The patch only inserts calls into :mod:`yolo_det.integrations.yolov5` (all logic lives there)
at anchors found by tree shape, so unseen forks of the same lineage patch too. Every line it
adds ends in ``# yolo-det``; a wrapped statement sits in ``with ...:  # yolo-det``; a line it
takes out stays in the file as a ``# yolo-det removed: <code>`` comment. Revert undoes exactly
those, so it restores the original bytes and keeps the user's edits elsewhere.

Files are transformed in memory first and written with temp-file + rename only when every
target transformed; on any failure nothing changes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import libcst as cst

from . import nms
from .anchors import analyse
from .files import check_syntax, find_targets, read_source, write_all
from .markers import MARKER
from .result import FileChange, PatchError, PatchResult
from .transforms import Apply, Revert, module_is_patched


# -- public API ------------------------------------------------------------------------------

def apply_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Patch every YOLOv5-family training script in ``repo`` (a folder, or one ``.py`` file).

    Idempotent: a patched file is left byte-identical. Raises :class:`PatchError` (nothing
    written) when no training script with the known anchors is found.
    """
    root, targets, required = find_targets(repo)
    nms_targets = nms.find_targets(root) if Path(repo).is_dir() else []
    changes = [_apply_file(root, path, path in required) for path in targets if path not in nms_targets]
    if not any(c.status != "skipped" for c in changes):
        raise _nothing_to_patch(root, changes)
    changes += [nms.apply_file(root, path) for path in nms_targets]  # the release's NMS (utils/general.py)
    if not dry_run:
        write_all([c for c in changes if c.changed])
    return PatchResult(root, "apply", dry_run, changes)


def revert_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Remove yolo-det's patch from every script in ``repo``; byte-identical to the original
    when nothing else was edited, keeping the user's edits elsewhere."""
    root, targets, _ = find_targets(repo, revert=True)
    changes = [_revert_file(root, path) for path in targets]
    if not dry_run:
        write_all([c for c in changes if c.changed])
    return PatchResult(root, "revert", dry_run, changes)


def is_patched(source: bytes) -> bool:
    """True when ``source`` carries yolo-det's patch (any marked line)."""
    return module_is_patched(cst.parse_module(source), source)


# -- per-file apply / revert -----------------------------------------------------------------
def _apply_file(root: Path, path: Path, required: bool) -> FileChange:
    rel, source, module = read_source(root, path)
    patched_before = module_is_patched(module, source)
    base = module.visit(Revert()) if patched_before else module
    plan = analyse(base, root, path)
    if plan.missing:
        if required:
            raise PatchError(
                f"{rel} does not have the layout of a YOLOv5-family training script yolo-det knows "
                "(anchors missing, see below); nothing was changed. If it is one, please report the "
                "release or fork.", path, plan.found, plan.missing)
        return FileChange(path, rel, source, source, "skipped", [f"missing: {', '.join(plan.missing)}"],
                          module.encoding)
    new = base.visit(Apply(plan)).bytes
    check_syntax(rel, source, new, module.encoding)
    if new == source:
        status = "already patched"
    else:
        status = "updated" if patched_before else "patched"
    return FileChange(path, rel, source, new, status, plan.notes, module.encoding)


def _revert_file(root: Path, path: Path) -> FileChange:
    rel, source, module = read_source(root, path)
    if not module_is_patched(module, source):
        return FileChange(path, rel, source, source, "not patched", encoding=module.encoding)
    new = module.visit(Revert()).bytes
    check_syntax(rel, source, new, module.encoding)
    return FileChange(path, rel, source, new, "reverted", encoding=module.encoding)



def _nothing_to_patch(root: Path, changes: List[FileChange]) -> PatchError:
    lines = [f"{root}: no training script with the YOLOv5 layout was found; nothing was changed"]
    lines += [f"  {c.relpath}: {'; '.join(c.notes)}" for c in changes]
    return PatchError("\n".join(lines), root)


__all__ = ["PatchError", "PatchResult", "FileChange", "apply_patch", "revert_patch", "is_patched", "MARKER"]
