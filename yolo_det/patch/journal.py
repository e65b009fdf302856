"""All-or-nothing writes of several scripts, as seen by the next command: a lock, a journal, owners kept.

``apply-patch``/``revert-patch`` hold an exclusive lock on the tree's folder for the whole
command, so two of them never interleave. New contents go to temp files beside the targets
(with the target's owner, group and mode); then a journal naming every temp file is written
atomically into the tree, the temps are renamed over the targets, and the journal is removed.
Termination signals are held back meanwhile. If the process is killed anyway, the next
command finds the journal and completes the renames (every new file was on disk before the
journal existed), or, without a journal, removes the temp files left behind.

These journalled writes are kept apart from :mod:`yolo_det.core.atomic` (the one atomic writer of the rest of
the package) on purpose: a patch replaces several files as one (the journal), each keeping its owner, group and
mode, with temp files the next command can find by :data:`TMP_SUFFIX`; and ``patch/`` imports nothing of
yolo-det, so the codemod stays a standalone tool. Every file is fsynced before its rename, and the folder after.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from .files import MAX_DEPTH, SKIP_DIRS
from .result import FileChange, PatchError

JOURNAL = ".yolo-det-journal"
TMP_SUFFIX = ".yolo-det-tmp"
LOCK_TIMEOUT = 60.0
SCAN_DEPTH = MAX_DEPTH
_DEFERRED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks on folders
    fcntl = None  # type: ignore[assignment]


def _replace(src: str, dst: Path) -> None:
    os.replace(src, dst)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the lock --------------------------------------------------------------------------------

@contextlib.contextmanager
def locked(root: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``root`` (the folder itself: no lock file is left behind)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:  # once: the user sees why the command pauses
                    waiting = True
                    print(f"yolo-det: waiting for another yolo-det apply-patch/revert-patch working on {root} "
                          f"(up to {timeout:g} s)", file=sys.stderr, flush=True)
                if time.monotonic() > deadline:
                    raise PatchError(f"{root}: another yolo-det apply-patch/revert-patch has been working on "
                                     f"this tree for over {timeout:g} s; wait for it, then retry; nothing was "
                                     "changed") from None
                time.sleep(0.02)
            except OSError:  # pragma: no cover - a file system without locks (some NFS mounts): go on without
                break
        yield
    finally:
        os.close(fd)  # releases the lock


# -- deferring termination signals -------------------------------------------------------------

@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back SIGINT/SIGTERM/SIGHUP/SIGQUIT in the block; deliver the first one after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: List[int] = []
    previous: Dict[int, object] = {}
    for sig in _DEFERRED:
        try:
            previous[sig] = signal.signal(sig, lambda signum, _frame: caught.append(signum))
        except (ValueError, OSError):  # pragma: no cover - not settable here
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if caught:
            signal.raise_signal(caught[0]) if hasattr(signal, "raise_signal") else os.kill(os.getpid(), caught[0])


# -- checks before anything is written -------------------------------------------------------

def check_writable(change: FileChange) -> os.stat_result:
    """Refuse a target whose owner did not mean it to be written, or whose owner we cannot keep."""
    path, rel = change.path, change.relpath
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise PatchError(f"{rel} is not a regular file; nothing was changed", path)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & stat.S_IWUSR:
        raise PatchError(f"{rel} is read-only (mode {mode:04o}); make it writable (chmod u+w {path}) if it "
                         "should be patched; nothing was changed", path)
    if st.st_nlink > 1:
        raise PatchError(f"{rel} has {st.st_nlink} hard links; replacing it would leave the other names with "
                         "the old contents. Give it its own copy (cp -p F F.tmp && mv F.tmp F) first; nothing "
                         "was changed", path)
    euid = os.geteuid() if hasattr(os, "geteuid") else 0
    if euid != 0 and st.st_uid != euid:
        raise PatchError(f"{rel} belongs to another user (uid {st.st_uid}); the patched file could not keep "
                         "its owner. Run yolo-det as that user; nothing was changed", path)
    if euid != 0 and not os.access(path, os.W_OK):  # pragma: no cover - owner-writable files are writable
        raise PatchError(f"{rel} is not writable; nothing was changed", path)
    return st


def _write_temp(change: FileChange, st: os.stat_result) -> str:
    """The new contents in a temp file beside the target, with its owner, group and mode, on disk."""
    fd, tmp = tempfile.mkstemp(prefix=f".{change.path.name}.", suffix=TMP_SUFFIX, dir=change.path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(change.after)
            handle.flush()
            own = os.fstat(handle.fileno())
            if (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid) and hasattr(os, "fchown"):
                try:
                    os.fchown(handle.fileno(), st.st_uid, st.st_gid)
                except PermissionError:
                    raise PatchError(f"{change.relpath}: cannot give the patched file its group (gid "
                                     f"{st.st_gid}); run yolo-det as root or a member of that group; nothing "
                                     "was changed", change.path) from None
            os.chmod(tmp, stat.S_IMODE(st.st_mode))  # after chown, which clears set-id bits
            os.fsync(handle.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path: os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(fd)


# -- the journal -----------------------------------------------------------------------------

def _write_journal(root: Path, action: str, entries: List[Dict[str, str]]) -> Path:
    path = root / JOURNAL
    data = {"format": "yolo-det-journal", "version": 1, "action": action, "pid": os.getpid(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "files": entries}
    fd, tmp = tempfile.mkstemp(prefix=f"{JOURNAL}.", suffix=TMP_SUFFIX, dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(root)
    return path


def write_all(root: Path, changes: List[FileChange], action: str = "apply-patch") -> None:
    """Write every change or none: temps with the targets' owners, a journal, the renames, no journal.

    A failure before the renames removes the temps; a failed rename puts back the files already
    replaced. A kill during the renames is completed by the next command (:func:`recover`).
    """
    if not changes:
        return
    stats = [check_writable(change) for change in changes]
    temps: List[Tuple[FileChange, str]] = []
    done: List[FileChange] = []
    journal: Optional[Path] = None
    with signals_deferred():
        try:
            for change, st in zip(changes, stats):
                temps.append((change, _write_temp(change, st)))
            journal = _write_journal(root, action, [
                {"path": c.path.relative_to(root).as_posix(), "tmp": Path(t).relative_to(root).as_posix(),
                 "before": _sha(c.before), "after": _sha(c.after)} for c, t in temps])
            for change, tmp in temps:
                _replace(tmp, change.path)
                done.append(change)
            for folder in {c.path.parent for c in changes}:
                _fsync_dir(folder)
        except BaseException:
            for change in done:
                change.path.write_bytes(change.before)  # the new inode already has the owner and mode
            raise
        finally:
            for _, tmp in temps:
                _unlink(tmp)
            if journal is not None:
                _unlink(journal)


def _folders(root: Path) -> Iterator[Path]:
    """``root`` and the sub-folders targets can live in (the folders :func:`files.find_targets`
    searches), where their temps and journals are."""
    for folder, dirs, _ in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        yield Path(folder)
        dirs[:] = [] if depth >= SCAN_DEPTH else [
            d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not (Path(folder) / d).is_symlink()]


def pending(root: Path) -> List[Path]:
    """Journals of interrupted writes under ``root`` (normally none)."""
    return [f / JOURNAL for f in _folders(root) if (f / JOURNAL).is_file()]


def recover(root: Path) -> List[str]:
    """Finish what an interrupted apply/revert left (call with the lock held); returns notes.

    A journal means every new file was on disk: the renames are completed. Temp files without
    a journal belong to a write that never started renaming: they are removed.
    """
    notes: List[str] = []
    for journal in pending(root):
        notes.append(_complete(journal.parent, journal))
    stale = [f / name for f in _folders(root) for name in os.listdir(f)
             if name.startswith(".") and name.endswith(TMP_SUFFIX)]
    for path in stale:
        _unlink(path)
    if stale:
        notes.append(f"removed {len(stale)} temp file(s) an interrupted yolo-det left behind: "
                     + ", ".join(p.relative_to(root).as_posix() for p in stale))
    return notes


def _complete(base: Path, journal: Path) -> str:
    try:
        data = json.loads(journal.read_text(encoding="utf-8"))
        entries = [(base / e["path"], base / e["tmp"], e["before"], e["after"]) for e in data["files"]]
        action = str(data.get("action", "apply-patch"))
    except (OSError, ValueError, KeyError, TypeError):
        raise PatchError(f"{journal} is left from an interrupted yolo-det command but cannot be read; check "
                         "the scripts it names, then delete it; nothing was changed", journal) from None
    for target, tmp, before, after in entries:
        if not all(os.path.realpath(p).startswith(str(base) + os.sep) for p in (target, tmp)):
            raise PatchError(f"{journal} names a file outside {base}; delete it; nothing was changed", journal)
        current = _sha(target.read_bytes()) if target.is_file() else None
        if tmp.is_file():
            if current not in (before, after):
                raise PatchError(f"{target} changed after an interrupted yolo-det {action} (journal {journal}); "
                                 "check it, then delete the journal and the temp file "
                                 f"{tmp.name}; nothing was changed", target)
        elif current != after:
            raise PatchError(f"{target} is not as an interrupted yolo-det {action} left it (journal {journal}); "
                             "check it, then delete the journal; nothing was changed", target)
    with signals_deferred():
        for target, tmp, _, _ in entries:
            if tmp.is_file():
                _replace(str(tmp), target)
        _fsync_dir(base)
        _unlink(journal)
    names = ", ".join(t.relative_to(base).as_posix() for t, *_ in entries)
    return f"completed an interrupted {action} ({names})"
