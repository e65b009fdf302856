"""``yolo-det apply-patch`` / ``revert-patch``: a libcst codemod of YOLOv5-family training scripts.

The patch only inserts calls into :mod:`yolo_det.integrations.yolov5` (all logic lives there)
at anchors found by tree shape, so unseen forks of the same lineage patch too. Every line it
adds ends in ``# yolo-det``; a wrapped statement sits in ``with ...:  # yolo-det``; a line it
takes out stays in the file as a ``# yolo-det removed: <code>`` comment. Revert undoes exactly
those, so it restores the original bytes and keeps the user's edits elsewhere.

Files are transformed in memory first and written only when every target transformed, under a
lock on the tree, through a journal the next command completes if this one is killed
(:mod:`yolo_det.patch.journal`); on any failure nothing changes. Large files are parsed through
a :mod:`~yolo_det.patch.skeleton`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, List, Optional

import libcst as cst

from . import evaluation, evolve, export, nms
from .anchors import analyse
from . import journal
from .files import check_syntax, find_targets, read_large, tree_root
from .markers import ALIAS, MARKER
from .result import FileChange, PatchError, PatchResult
from .skeleton import Skeleton
from .transforms import Apply, MarkerError, Revert, module_is_patched, unmarked_uses


# -- public API ------------------------------------------------------------------------------

def apply_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Patch every YOLOv5-family training script in ``repo`` (a folder, or one ``.py`` file).

    Idempotent: a patched file is left byte-identical. Raises :class:`PatchError` (nothing
    written) when no training script with the known anchors is found.
    """
    with _session(repo, dry_run) as recovered:
        root, targets, required = find_targets(repo)
        nms_targets = nms.find_targets(root) if Path(repo).is_dir() else []
        export_targets = [p for p in export.find_targets(root) if p not in required] if Path(repo).is_dir() else []
        eval_targets = [p for p in evaluation.find_targets(root) if p not in required and p not in export_targets] \
            if Path(repo).is_dir() else []
        changes = [_apply_file(root, path, path in required) for path in targets
                   if path not in nms_targets and path not in eval_targets and path not in export_targets]
        if not any(c.status != "skipped" for c in changes):
            raise _nothing_to_patch(root, changes)
        changes += [nms.apply_file(root, path) for path in nms_targets]  # the release's NMS (utils/general.py)
        evaluations = [evaluation.apply_file(root, path) for path in eval_targets]  # val.py, detect.py ...
        changes += [c for c in evaluations if c.status != "skipped"]
        exports = [export.apply_file(root, path) for path in export_targets]  # export.py
        changes += [c for c in exports if c.status != "skipped"]
        if not dry_run:
            journal.write_all(root, [c for c in changes if c.changed], "apply-patch")
    return PatchResult(root, "apply", dry_run, changes, recovered)


def revert_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Remove yolo-det's patch from every script in ``repo``; byte-identical to the original
    when nothing else was edited, keeping the user's edits elsewhere."""
    with _session(repo, dry_run) as recovered:
        root, targets, _ = find_targets(repo, revert=True)
        changes = [_revert_file(root, path) for path in targets]
        if not dry_run:
            journal.write_all(root, [c for c in changes if c.changed], "revert-patch")
    return PatchResult(root, "revert", dry_run, changes, recovered)


@contextlib.contextmanager
def _session(repo: os.PathLike, dry_run: bool) -> Iterator[List[str]]:
    """Hold the tree's lock; first finish whatever an interrupted apply/revert left behind."""
    root = tree_root(repo)
    with journal.locked(root):
        if dry_run:
            left = journal.pending(root)
            if left:
                raise PatchError(f"{left[0]} is left from an interrupted yolo-det command: run apply-patch or "
                                 "revert-patch without --dry-run once to finish it; nothing was changed", left[0])
            yield []
        else:
            yield journal.recover(root)


def is_patched(source: bytes) -> bool:
    """True when ``source`` carries yolo-det's patch (any marked line)."""
    return module_is_patched(cst.parse_module(source), source)


# -- per-file apply / revert -----------------------------------------------------------------
def _apply_file(root: Path, path: Path, required: bool) -> FileChange:
    rel, source, module, outline = read_large(root, path)
    text = source if outline is None else outline.text  # what libcst parsed
    patched_before = module_is_patched(module, text)
    base = _reverted(rel, path, module, text, "apply-patch", outline) if patched_before else module
    if not patched_before and ALIAS.encode() in text:
        _refuse_unmarked(rel, path, module, "apply-patch", outline)
    plan = analyse(base, root, path)
    if plan.missing:
        if required:
            raise PatchError(
                f"{rel} does not have the layout of a YOLOv5-family training script yolo-det knows "
                "(anchors missing, see below); nothing was changed. If it is one, please report the "
                "release or fork.", path, plan.found, plan.missing)
        return FileChange(path, rel, source, source, "skipped", [f"missing: {', '.join(plan.missing)}"],
                          module.encoding)
    plan.notes += evolve.plan(base, plan)  # the --evolve loop, where the script has one
    new = _expanded(rel, text, base.visit(Apply(plan)).bytes, module.encoding, outline)
    if new == source:
        status = "already patched"
    else:
        status = "updated" if patched_before else "patched"
    return FileChange(path, rel, source, new, status, plan.notes, module.encoding)


def _revert_file(root: Path, path: Path) -> FileChange:
    rel, source, module, outline = read_large(root, path)
    text = source if outline is None else outline.text
    if not module_is_patched(module, text):
        return FileChange(path, rel, source, source, "not patched", encoding=module.encoding)
    new = _expanded(rel, text, _reverted(rel, path, module, text, "revert-patch", outline).bytes,
                    module.encoding, outline)
    return FileChange(path, rel, source, new, "reverted", encoding=module.encoding)


def _expanded(rel: str, before: bytes, after: bytes, encoding: str, outline: Optional[Skeleton]) -> bytes:
    """The transformed text checked to compile, with what a skeleton left out put back."""
    check_syntax(rel, before, after, encoding)
    return after if outline is None else outline.expand(after)


def _reverted(rel: str, path: Path, module: cst.Module, source: bytes, command: str,
              outline: Optional[Skeleton] = None) -> cst.Module:
    """``module`` without the patch; refuses when edited markers would leave part of it behind."""
    try:
        base = module.visit(Revert())
    except MarkerError as exc:
        raise PatchError(f"{rel}: {exc}; nothing was changed", path) from None
    if ALIAS.encode() in source and ALIAS in base.code:
        _refuse_unmarked(rel, path, module, command, outline)
    return base


def _refuse_unmarked(rel: str, path: Path, module: cst.Module, command: str,
                     outline: Optional[Skeleton] = None) -> None:
    """Refuse (naming the lines) when statements use yolo-det without the exact ``# yolo-det`` marker."""
    uses = unmarked_uses(module)
    if not uses:
        return
    lines = "\n".join(f"  line {outline.original_line(line) if outline else line}: {code}" for line, code in uses)
    raise PatchError(
        f"{rel}: {len(uses)} line(s) call yolo-det but do not end in the exact marker `{MARKER}` (it was "
        f"removed or changed), so {command} cannot treat the patch as one unit (it would remove the rest and "
        f"keep these lines; a call left without its import fails with NameError). Put `{MARKER}` back at the end of each, or delete them; nothing "
        f"was changed:\n{lines}", path)


def _nothing_to_patch(root: Path, changes: List[FileChange]) -> PatchError:
    lines = [f"{root}: no training script with the YOLOv5 layout was found; nothing was changed"]
    lines += [f"  {c.relpath}: {'; '.join(c.notes)}" for c in changes]
    return PatchError("\n".join(lines), root)


__all__ = ["PatchError", "PatchResult", "FileChange", "apply_patch", "revert_patch", "is_patched", "MARKER"]
