"""The kill-safe file protocol of exact resume: a sidecar written atomically on a background thread beside each
checkpoint, paired with the checkpoint by its digest, so that a kill at any instant of a save leaves a
consistent pair (:func:`consistent_state`); DDP ranks' own RNG states beside it. Reading a sidecar:
:func:`read`. The protocol is described in :mod:`yolo_det.integrations.resume`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import torch

from ...core import atomic
from ...core.data_manifest import sha256_file
from ...record.run_folder import final_path, previous_path, rank_state_path, sidecar_path
from .plumbing import kill_if_asked
from .policy import COMPLETED, PREVIOUS_SUFFIX, completed, mark_run, missing_state
from .state import DEFERRED, FORMAT, VERSION, _copied, _cpu_tree, _install_step_hook, finish_copy, rng_state


class ResumeStateError(RuntimeError):
    """A sidecar cannot be used (unreadable, another format); the message says what to do."""


file_digest = sha256_file  # the checkpoint's SHA-256, as its sidecar records it


def consistent_state(checkpoint: os.PathLike) -> Dict[str, Any]:
    """The resume state that belongs to ``checkpoint``: ``{"state", "path", "problems"}``.

    The sidecar whose ``checkpoint_sha256`` is the checkpoint's digest: the current one, else the one the
    last save replaced (a kill between the sidecar and the checkpoint's rename). Sidecars written before
    digests were recorded are taken as they are (checked by weights and epoch as before). ``state`` None:
    ``problems`` says why no state can be used; ``path`` the previous sidecar when that is the one.
    """
    checkpoint = Path(checkpoint)
    current, previous = sidecar_path(checkpoint), previous_path(checkpoint)
    if not current.is_file() and not previous.is_file():
        return {"state": None, "path": current, "problems": [missing_state(checkpoint)]}
    candidates, problems = [], []
    for path in (current, previous):
        if path.is_file():
            try:
                candidates.append((path, read(path)))
            except ResumeStateError as exc:
                problems.append(str(exc))
    if any(state.get(COMPLETED) for _, state in candidates):  # reduced at the end of a completed training
        return {"state": None, "path": current, "problems": [completed(checkpoint)]}
    digested = [(path, state) for path, state in candidates if state.get("checkpoint_sha256")]
    if not digested:  # no digests (an older yolo-det, or only unreadable files): the sidecar as it is
        state = next((s for p, s in candidates if p == current), None)
        if state is None:
            problems = problems or [missing_state(checkpoint)]
        return {"state": state, "path": current, "problems": [] if state is not None else problems}
    digest = file_digest(checkpoint)
    for path, state in digested:
        if state["checkpoint_sha256"] == digest:
            return {"state": state, "path": path, "problems": []}
    epochs = ", ".join(f"{p.name} (epoch {s.get('epoch')}, of a checkpoint with sha256 {s['checkpoint_sha256'][:12]})"
                       for p, s in digested)
    state = next((s for p, s in candidates if p == current), None)
    mismatch = (f"no resume state was written with this {checkpoint.name} (sha256 {digest[:12]}): {epochs}; the "
                "checkpoint was replaced or edited after its save")
    return {"state": state, "path": current, "problems": problems, "mismatch": mismatch}


def adopt_previous(checkpoint: os.PathLike, path: os.PathLike) -> None:
    """A resume that uses the previous sidecar puts it back in place, so the next save keeps it as ``.prev``; one
    that uses the current sidecar removes a ``.prev`` a kill left after the checkpoint's rename (it pairs with
    nothing)."""
    current = sidecar_path(checkpoint)
    if Path(path) != current and Path(path).is_file():
        atomic.replace(path, current)
    elif Path(path) == current:
        _remove_previous(current)


class Writer:
    """Writes sidecars atomically on a background thread; one write in flight at a time.

    The state is copied before :meth:`write` returns, so training goes on while the file is
    written. :meth:`wait` blocks until the last write is on disk (before the next save, before a
    requested stop, at exit).
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.written: List[Path] = []
        self.last: Optional[Mapping[str, Any]] = None

    def write(self, path: os.PathLike, state: Dict[str, Any], background: bool = True,
              best: Optional[os.PathLike] = None, staged: Optional[os.PathLike] = None) -> None:
        """Write ``state`` to ``path``; with ``best`` (the ``best.pt`` the release just saved from the same
        state) that checkpoint gets the same sidecar too: a hard link, so it costs no copy.

        ``staged``: the release's checkpoint written as ``last.pt.partial``. The sidecar records its digest,
        replaces the previous sidecar (kept as ``.prev`` for that instant), and only then is the checkpoint renamed
        into place, the ``.prev`` removed after it: a kill at any instant leaves ``last.pt`` with a sidecar of its
        digest (:func:`consistent_state`)."""
        self.wait()
        self.last = state  # its tensors are refilled by the next capture(reuse=writer.last), after wait()
        path = Path(path)
        best = None if best is None else sidecar_path(best)
        staged = None if staged is None else Path(staged)
        if not background or not _install_step_hook():
            finish_copy(state)
            if not background:
                self._write(path, state, best, staged)
                return
        elif state.get(DEFERRED):
            _copied.clear()
        self._thread = threading.Thread(target=self._copy_and_write, args=(path, state, best, staged),
                                        name="yolo-det-sidecar", daemon=False)
        self._thread.start()

    def _copy_and_write(self, path: Path, state: Dict[str, Any], best: Optional[Path] = None,
                        staged: Optional[Path] = None) -> None:
        try:
            finish_copy(state)
        except BaseException as exc:  # reported by wait()
            self.error = exc
            if staged is not None:  # the checkpoint goes in place all the same (its old sidecar no longer matches)
                _replace_quietly(staged, final_path(staged))
            return
        finally:
            _copied.set()
        self._write(path, state, best, staged)

    def _write(self, path: Path, state: Dict[str, Any], best: Optional[Path] = None,
               staged: Optional[Path] = None) -> None:
        tmp: Optional[Path] = None
        epoch = state.get("epoch")
        written = False
        try:
            if staged is not None:
                state["checkpoint_sha256"] = file_digest(staged)
            elif not state.get("checkpoint_sha256") and state.get("checkpoint"):
                checkpoint = path.with_name(str(state["checkpoint"]))  # a tree patched before staging existed
                if checkpoint.is_file():
                    state["checkpoint_sha256"] = file_digest(checkpoint)
            if staged is not None:
                kill_if_asked("before", epoch)
            tmp = atomic.temp_path(path)
            torch.save(dict(state), tmp)
            if best is not None:  # before the rename: the link keeps this inode when the next save replaces path
                _link_or_copy(tmp, best)
            if staged is not None and path.is_file():  # the sidecar of the checkpoint still in place
                _link_or_copy(path, path.with_name(path.name + PREVIOUS_SUFFIX))
            atomic.replace(tmp, path)
            mark_run(path.parent, state.get("settings"))  # a run whose training start did not mark it
            self.written.append(path)
            written = True
        except BaseException as exc:  # reported by wait(); a failed sidecar must not kill training
            self.error = exc
            try:
                if tmp is not None:
                    tmp.unlink()
            except OSError:
                pass
        if staged is not None:
            kill_if_asked("between", epoch)
            placed = _replace_quietly(staged, final_path(staged))
            if placed and written:
                _remove_previous(path)  # the checkpoint now pairs with the current sidecar: no instant needs it
            kill_if_asked("after", epoch)

    def settle_param_groups(self, path: os.PathLike, optimizer: Optional[torch.optim.Optimizer], epoch: int) -> bool:
        """Write the last sidecar (of ``epoch``) again when ``optimizer``'s hyperparameters changed since it
        was captured; whether it was.

        Called where the loop leaves the epoch: 8.0 steps its learning-rate scheduler after the save, and
        the writer thread copies the optimizer at a moment that races with that step.
        """
        error = self.wait()
        if error is not None:
            self.error = error  # reported by the next wait()
            return False
        saved = None if self.last is None or self.last.get("epoch") != epoch else self.last.get("optimizer")
        if saved is None or optimizer is None:
            return False
        live = _cpu_tree(optimizer.state_dict()["param_groups"])
        if live == saved.get("param_groups"):
            return False
        saved["param_groups"] = live
        self.write(path, self.last)
        return True

    def wait(self) -> Optional[BaseException]:
        """Block until the write in flight is done; return (and clear) its error, if any."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self.error = self.error, None
        return error


def _replace_quietly(source: Path, target: Path) -> bool:
    try:
        atomic.replace(source, target)
    except OSError as exc:  # pragma: no cover - the file system refused: said, training goes on
        print(f"yolo-det: warning: {source} could not be renamed to {target.name}: {exc}", flush=True)
        return False
    return True


def _remove_previous(sidecar: Path) -> None:
    """The sidecar a save replaced (``.prev``), once its checkpoint is no longer the one in place: it serves only
    the instant between the new sidecar's rename and the checkpoint's, so none stays at rest."""
    try:
        sidecar.with_name(sidecar.name + PREVIOUS_SUFFIX).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:  # pragma: no cover - the file system refused: a stale file, said
        print(f"yolo-det: warning: the previous resume state {sidecar.name}{PREVIOUS_SUFFIX} could not be "
              f"removed: {exc}", flush=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes ``source``'s contents, atomically: a hard link where the file system allows it."""
    tmp = atomic.temp_path(target)
    try:
        tmp.unlink()
        os.link(source, tmp)
    except OSError:
        import shutil

        shutil.copyfile(source, tmp)
    atomic.replace(tmp, target)


def rank_path(checkpoint: os.PathLike, rank: int) -> Path:
    """Where DDP rank ``rank`` (> 0) keeps its RNG states beside ``checkpoint``: ``last.pt.yolo-det.rank1``."""
    return rank_state_path(checkpoint, rank)


def write_rank_state(checkpoint: os.PathLike, epoch: int, rank: int) -> Path:
    """At the end of ``epoch``, a DDP rank other than 0 writes its RNG states (atomically).

    Rank 0's go into the sidecar; the others draw their own augmentation and dropout streams, so a
    resumed rank that took rank 0's would train on other batches than the uninterrupted one.
    """
    path = rank_path(checkpoint, rank)
    tmp = atomic.temp_path(path)
    torch.save({"format": FORMAT, "version": VERSION, "rank": int(rank), "epoch": int(epoch), "rng": rng_state()},
               tmp)
    if path.is_file():  # kept until the next save: rank 0 may be killed before its checkpoint of this epoch is in place
        _link_or_copy(path, path.with_name(path.name + PREVIOUS_SUFFIX))
    atomic.replace(tmp, path)
    return path


def rank_rng(checkpoint: os.PathLike, state: Mapping[str, Any], rank: int) -> Any:
    """The RNG states rank ``rank`` resumes with: the sidecar's for rank 0 (and without DDP), else its own
    file's; a string saying why when that is missing or of another epoch."""
    if rank <= 0:
        return state["rng"]
    path = rank_path(checkpoint, rank)
    try:
        saved = read(path)
    except ResumeStateError as exc:
        return f"rank {rank}'s RNG states: {exc}"
    if saved.get("rank") != rank or saved.get("epoch") != state.get("epoch"):
        previous = path.with_name(path.name + PREVIOUS_SUFFIX)  # this rank saved the epoch whose checkpoint a kill
        try:                                                     # kept from its place: the one before it matches
            kept = read(previous) if previous.is_file() else None
        except ResumeStateError:
            kept = None
        if kept is not None and kept.get("rank") == rank and kept.get("epoch") == state.get("epoch"):
            return kept["rng"]
        return (f"{path.name} holds rank {saved.get('rank')}'s RNG states of epoch {saved.get('epoch')}, "
                f"the sidecar is of epoch {state.get('epoch')}")
    return saved["rng"]


def read(path: os.PathLike) -> Dict[str, Any]:
    """Load a sidecar; raises :class:`ResumeStateError` when it is unreadable or of another format."""
    path = Path(path)
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            state = torch.load(path, map_location="cpu")
    except FileNotFoundError:
        raise ResumeStateError(f"{path} does not exist") from None
    except Exception as exc:
        raise ResumeStateError(f"{path} cannot be read ({type(exc).__name__}: {exc}); it is damaged or "
                               "was not written by yolo-det") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ResumeStateError(f"{path} is not a yolo-det resume state")
    if state.get("version") != VERSION:
        raise ResumeStateError(f"{path} has resume-state version {state.get('version')!r}; this yolo-det reads "
                               f"version {VERSION}: resume with the yolo-det version that wrote it")
    return state


__all__ = ["ResumeStateError", "Writer", "adopt_previous", "consistent_state", "file_digest", "rank_path",
           "rank_rng", "read", "write_rank_state"]
