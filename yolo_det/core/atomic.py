"""The one atomic file writer: a reader (or a process killed mid-write) sees the old file or the new one, never
half of one.

New contents go to a temporary file in the target's folder (the same file system, so the rename is atomic),
are flushed and fsynced, then renamed over the target with ``os.replace``, and the folder is fsynced where
the platform allows (so the rename survives a power loss too). Every module that replaces a file goes
through here: :func:`write_bytes`, :func:`write_text`, :func:`write_json`, :func:`atomic_file` (a handle),
:func:`temp_path` + :func:`replace` (a library that writes by path, such as ``torch.save``; a rename of a file
already written, such as a staged checkpoint). ``patch/journal`` keeps its own journalled writes: a patch
replaces several files as one, keeping each file's owner and mode, and ``patch/`` imports nothing of yolo-det.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import IO, Any, Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]
#: the temporary files' suffix (``.<name>.<pid>.<random>.tmp``, hidden, beside the target)
TMP_SUFFIX = ".tmp"


def temp_path(target: PathLike) -> Path:
    """A new, empty file in ``target``'s folder to write the contents into before :func:`replace` (the folder
    is created if needed); the caller removes it when the write fails."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:  # pragma: no cover - 32 random bits taken by another writer
            continue
        return tmp


def fsync_folder(folder: PathLike) -> None:
    """Make a rename in ``folder`` durable (a no-op where the platform cannot open or fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(fd)


def _fsync_file(path: PathLike) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def replace(source: PathLike, target: PathLike, sync: bool = True) -> None:
    """Rename ``source`` over ``target`` atomically (``os.replace``); with ``sync`` the source's contents are
    fsynced first and the folder after, so the new file is whole on disk whenever the rename is."""
    if sync:
        _fsync_file(source)
    os.replace(source, target)
    if sync:
        fsync_folder(Path(target).parent)


def replace_folder(source: PathLike, target: PathLike) -> None:
    """Rename a staged folder (written and fsynced file by file) over ``target`` (absent or empty), then fsync the
    parent: the folder exists whole, or not at all."""
    os.replace(source, target)
    fsync_folder(Path(target).parent)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


@contextlib.contextmanager
def atomic_file(target: PathLike, mode: str = "wb", encoding: Any = None) -> Iterator[IO[Any]]:
    """A handle to write ``target``'s new contents into; on leaving the block they are flushed, fsynced and
    renamed over ``target``; on an error ``target`` is untouched and the temporary file removed."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole new file: mode 'w' or 'wb', not {mode!r}")
    tmp = temp_path(target)
    try:
        with open(tmp, mode, encoding=encoding if "b" not in mode else None) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        replace(tmp, target, sync=False)
        fsync_folder(Path(target).parent)
    except BaseException:
        _unlink(tmp)
        raise


def write_bytes(target: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``target`` atomically; return ``target``."""
    with atomic_file(target, "wb") as f:
        f.write(data)
    return Path(target)


def write_text(target: PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``target`` atomically; return ``target``."""
    with atomic_file(target, "w", encoding=encoding) as f:
        f.write(text)
    return Path(target)


def write_json(target: PathLike, data: Any, **dump: Any) -> Path:
    """Write ``data`` as JSON to ``target`` atomically (``dump``: :func:`json.dump`'s keywords); return it."""
    with atomic_file(target, "w", encoding="utf-8") as f:
        json.dump(data, f, **dump)
    return Path(target)


__all__ = ["TMP_SUFFIX", "atomic_file", "fsync_folder", "replace", "replace_folder", "temp_path", "write_bytes", "write_json",
           "write_text"]
