"""Safe file I/O for the codemod: which files are targets, reading them, writing all or nothing."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import libcst as cst

from . import skeleton
from .markers import MARKER
from .result import PatchError
from .skeleton import Skeleton

MAX_DEPTH = 2  # train.py, classify/train.py, segment/train.py; deeper folders are library code
SKIP_DIRS = {"__pycache__", "venv", "env", "site-packages", "node_modules", "runs", "build", "dist", "wandb"}


# -- discovering targets ---------------------------------------------------------------------

def find_targets(repo: os.PathLike, revert: bool = False) -> Tuple[Path, List[Path], set]:
    """(root, candidate scripts, scripts that must patch) for a folder or a single file."""
    given = Path(repo)
    root = tree_root(given)
    if given.is_file():
        path = given.resolve()
        return path.parent, [path], {path}
    found = sorted(_scan(root), key=lambda p: (len(p.relative_to(root).parts), str(p)))
    if revert:
        return root, [p for p in found if MARKER.encode() in p.read_bytes()], set()
    main = root / "train.py"
    if os.path.lexists(main) and not main.is_symlink() and not main.is_file():
        raise PatchError(f"{main} is not a regular file (a FIFO, device or folder); nothing was changed", main)
    if not found and not main.is_file():
        raise PatchError(f"{root}: no train.py and no other YOLOv5-style training script found; "
                         "pass the repository folder (the one with train.py) or the script itself")
    if main.is_file() and main not in found:
        found.insert(0, main)
    return root, found, {main}


def tree_root(repo: os.PathLike) -> Path:
    """The folder apply/revert work in (and lock): ``repo`` itself, or the folder of one script."""
    given = Path(repo)
    if not given.exists():
        raise PatchError(f"{given}: no such file or directory")
    if given.is_file():
        if given.is_symlink():
            raise PatchError(f"{given} is a symbolic link; patch the file it points to instead")
        return given.resolve().parent
    if not given.is_dir():
        raise PatchError(f"{given} is not a regular file or a folder (a FIFO or device?); nothing was changed")
    return given.resolve()


def _scan(root: Path) -> Iterator[Path]:
    """Training-script candidates under ``root``: no symlinks, no hidden or library folders."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = [] if depth >= MAX_DEPTH else sorted(
            d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not (Path(folder) / d).is_symlink())
        for name in files:
            path = Path(folder) / name
            if (name.endswith(".py") and not path.is_symlink() and path.is_file() and inside(root, path)
                    and _looks_like_trainer(path)):
                yield path


def scripts_where(root: Path, wanted: Callable[[bytes], bool]) -> List[Path]:
    """Scripts ``root/*.py`` and ``root/*/*.py`` whose bytes ``wanted`` accepts (no links, no hidden or library
    folders, nothing outside ``root``): the candidates of the export and evaluation codemods."""
    found = []
    for depth, pattern in ((0, "*.py"), (1, "*/*.py")):
        if depth >= MAX_DEPTH:
            break
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).parts
            if any(part.startswith(".") or part in SKIP_DIRS for part in rel[:-1]):
                continue
            if path.is_symlink() or not path.is_file() or not inside(root, path):
                continue
            try:
                text = path.read_bytes()
            except OSError:
                continue
            if wanted(text):
                found.append(path)
    return found


def inside(root: Path, path: Path) -> bool:
    return os.path.realpath(path).startswith(str(root) + os.sep)


def _looks_like_trainer(path: Path) -> bool:
    try:
        text = path.read_bytes()
    except OSError:
        return False
    return (b"backward(" in text and b"init_seeds" in text and b"ArgumentParser" in text) or MARKER.encode() in text


def _read(root: Path, path: Path) -> Tuple[str, bytes]:
    rel = path.relative_to(root).as_posix()
    if path.is_symlink() or not inside(root, path):
        raise PatchError(f"{rel} is a symbolic link or lies outside {root}; refusing to touch it", path)
    if not path.is_file():
        raise PatchError(f"{rel} is not a regular file (a FIFO, device or folder); nothing was changed", path)
    return rel, path.read_bytes()


def read_source(root: Path, path: Path) -> Tuple[str, bytes, cst.Module]:
    """(path relative to ``root``, bytes, libcst module) of a target; refuses links, odd files, non-Python."""
    rel, source = _read(root, path)
    return rel, source, parse(rel, path, source)


def read_large(root: Path, path: Path, min_lines: Optional[int] = None,
               keep: Sequence[bytes] = skeleton.KEEP_WORDS) -> Tuple[str, bytes, cst.Module, Optional[Skeleton]]:
    """Like :func:`read_source`; for a file of ``min_lines`` or more the module is that of a
    :class:`~yolo_det.patch.skeleton.Skeleton` keeping the statements that hold one of ``keep``
    (returned too), which is much faster to parse."""
    rel, source = _read(root, path)
    outline = skeleton.build(source, skeleton.MIN_LINES if min_lines is None else min_lines, keep)
    return rel, source, parse(rel, path, source if outline is None else outline.text), outline


def parse(rel: str, path: Path, source: bytes) -> cst.Module:
    """``source`` as a libcst module, or a one-line :class:`PatchError` saying why it is not Python."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        where = f"line {exc.raw_line}, column {exc.raw_column}: " if getattr(exc, "raw_line", None) else ""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise PatchError(f"{rel}: cannot parse it as Python ({where}{reason}); nothing was changed", path) from None
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        # libcst reads PEP 263 cookies: bytes that are not UTF-8 need one naming a real codec
        raise PatchError(f"{rel}: cannot decode it as Python source ({exc}); save it as UTF-8 or add a "
                         "coding cookie (# -*- coding: latin-1 -*-) naming its encoding; nothing was changed",
                         path) from None



def check_syntax(rel: str, before: bytes, after: bytes, encoding: str) -> None:
    """Refuse to write a result this Python cannot parse when it could parse the original."""
    try:
        ast.parse(after.decode(encoding))
        return
    except SyntaxError as exc:
        error = exc
    try:  # only now is the original worth parsing: newer syntax than this Python's is not our fault
        ast.parse(before.decode(encoding))
    except (SyntaxError, ValueError):
        return
    raise PatchError(f"{rel}: the patched file would not compile ({error}); nothing was changed")  # pragma: no cover
