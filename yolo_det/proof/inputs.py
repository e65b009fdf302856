"""What ``yolo-det diff A B`` was given, told by content, and the message when the two cannot be compared: the
argument that is wrong is named, with what ``diff`` accepts (two fingerprint logs, two run folders, two
checkpoints, two search folders)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .checkpoint_format import looks_like_checkpoint

LOG, RUN, SEARCH, CHECKPOINT, FOLDER, FILE, MISSING = ("a fingerprint log", "a run folder", "a search folder",
                                                       "a checkpoint", "a folder", "a file", "missing")
ACCEPTS = ("diff compares two fingerprint logs (fingerprint.jsonl), two run folders (runs/train/exp), two "
           "checkpoints (.pt) or two hyperparameter search folders")


def kind_of(path: os.PathLike) -> str:
    """One of the kinds above, by content (a run folder that also holds a search's results is a search)."""
    p = Path(path)
    if not p.exists():
        return MISSING
    if p.is_dir():  # the folder readers import numpy/torch: only for folders (diff of two logs starts light)
        from .run_dirs import is_run_dir
        from .search import is_search

        return SEARCH if is_search(p) else RUN if is_run_dir(p) else FOLDER
    if looks_like_checkpoint(p):
        return CHECKPOINT
    return LOG if p.suffix.lower() == ".jsonl" else FILE


def mismatch(a: os.PathLike, b: os.PathLike) -> Optional[str]:
    """Why ``diff A B`` cannot compare these two, naming the argument; None when they are of one comparable kind
    (the reader of that kind then says what is wrong inside a file)."""
    kinds = {"A": (a, kind_of(a)), "B": (b, kind_of(b))}
    for name, (path, kind) in kinds.items():
        if kind == MISSING:
            return f"{name} ({path}): no such file or folder; {ACCEPTS}"
        if kind == FOLDER:
            from .run_dirs import MARKERS
            from .search import RESULTS

            return (f"{name} ({path}) is a folder but no run folder (none of {', '.join(MARKERS)}) and no search "
                    f"folder (none of {', '.join(RESULTS)}); {ACCEPTS}")
    (pa, ka), (pb, kb) = kinds["A"], kinds["B"]
    if CHECKPOINT in (ka, kb) or {ka, kb} <= {LOG, FILE}:
        return None  # the checkpoint reader or the log reader names what is wrong inside a file
    if ka != kb:
        hint = " (a run folder's log is its fingerprint.jsonl)" if {ka, kb} == {RUN, LOG} else ""
        return f"A ({pa}) is {ka} and B ({pb}) is {kb}: give two of one kind{hint}; {ACCEPTS}"
    return None


__all__ = ["ACCEPTS", "kind_of", "mismatch"]
