"""Safe file I/O for the codemod: which files are targets, reading them, writing all or nothing."""

from __future__ import annotations

import ast
import os
import tempfile
from pathlib import Path
from typing import Iterator, List, Tuple

import libcst as cst

from .markers import MARKER
from .result import FileChange, PatchError

MAX_DEPTH = 2  # train.py, classify/train.py, segment/train.py; deeper folders are library code
SKIP_DIRS = {"__pycache__", "venv", "env", "site-packages", "node_modules", "runs", "build", "dist", "wandb"}


# -- discovering targets ---------------------------------------------------------------------

def find_targets(repo: os.PathLike, revert: bool = False) -> Tuple[Path, List[Path], set]:
    """(root, candidate scripts, scripts that must patch) for a folder or a single file."""
    given = Path(repo)
    if not given.exists():
        raise PatchError(f"{given}: no such file or directory")
    if given.is_file():
        if given.is_symlink():
            raise PatchError(f"{given} is a symbolic link; patch the file it points to instead")
        path = given.resolve()
        return path.parent, [path], {path}
    root = given.resolve()
    found = sorted(_scan(root), key=lambda p: (len(p.relative_to(root).parts), str(p)))
    if revert:
        return root, [p for p in found if MARKER.encode() in p.read_bytes()], set()
    main = root / "train.py"
    if not found and not main.is_file():
        raise PatchError(f"{root}: no train.py and no other YOLOv5-style training script found; "
                         "pass the repository folder (the one with train.py) or the script itself")
    if main.is_file() and main not in found:
        found.insert(0, main)
    return root, found, {main}


def _scan(root: Path) -> Iterator[Path]:
    """Training-script candidates under ``root``: no symlinks, no hidden or library folders."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = [] if depth >= MAX_DEPTH else sorted(
            d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not (Path(folder) / d).is_symlink())
        for name in files:
            path = Path(folder) / name
            if name.endswith(".py") and not path.is_symlink() and inside(root, path) and _looks_like_trainer(path):
                yield path


def inside(root: Path, path: Path) -> bool:
    return os.path.realpath(path).startswith(str(root) + os.sep)


def _looks_like_trainer(path: Path) -> bool:
    try:
        text = path.read_bytes()
    except OSError:
        return False
    return (b"backward(" in text and b"init_seeds" in text and b"ArgumentParser" in text) or MARKER.encode() in text


def read_source(root: Path, path: Path) -> Tuple[str, bytes, cst.Module]:
    rel = path.relative_to(root).as_posix()
    if path.is_symlink() or not inside(root, path):
        raise PatchError(f"{rel} is a symbolic link or lies outside {root}; refusing to touch it", path)
    source = path.read_bytes()
    try:
        return rel, source, cst.parse_module(source)
    except (cst.ParserSyntaxError, UnicodeDecodeError) as exc:
        raise PatchError(f"{rel}: cannot parse it as Python ({exc}); nothing was changed", path) from None



def check_syntax(rel: str, before: bytes, after: bytes, encoding: str) -> None:
    """Refuse to write a result this Python cannot parse when it could parse the original."""
    try:
        ast.parse(before.decode(encoding))
    except (SyntaxError, ValueError):
        return
    try:
        ast.parse(after.decode(encoding))
    except SyntaxError as exc:  # pragma: no cover - a codemod bug; keep the user's file safe
        raise PatchError(f"{rel}: the patched file would not compile ({exc}); nothing was changed") from None



# -- writing ---------------------------------------------------------------------------------

def _replace(src: str, dst: Path) -> None:
    os.replace(src, dst)


def write_all(changes: List[FileChange]) -> None:
    """Write every file to a temp file beside it, then rename all; undo renames on failure."""
    temps: List[Tuple[FileChange, str]] = []
    done: List[FileChange] = []
    try:
        for change in changes:
            fd, tmp = tempfile.mkstemp(prefix=f".{change.path.name}.", suffix=".yolo-det-tmp", dir=change.path.parent)
            temps.append((change, tmp))
            with os.fdopen(fd, "wb") as handle:
                handle.write(change.after)
            os.chmod(tmp, change.path.stat().st_mode & 0o7777)
        for change, tmp in temps:
            _replace(tmp, change.path)
            done.append(change)
    except BaseException:
        for change in done:
            change.path.write_bytes(change.before)
        raise
    finally:
        for _, tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
