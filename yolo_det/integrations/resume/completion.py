"""What a completed training leaves of its resume state, and what trackers' callbacks upload of it.

A finished training is not resumed (YOLOv5's ``--resume`` and Ultralytics' ``resume=True`` refuse a stripped
checkpoint): at its end (:func:`finish`) each sidecar keeps only the full-precision EMA and its module caches,
the weights the training validated, which ``yolo-det val`` re-runs with; the model, optimizer, gradients, RNG
states and DDP ranks' files go, unless ``$YOLO_DET_KEEP_RESUME=1`` keeps them. A training that ends in an error
or is killed never reaches it: it keeps everything to resume from. :func:`set_aside` / :func:`put_back` keep
yolo-det's own files out of ``weights/`` while the release's ``on_train_end`` callbacks upload that folder
(Ultralytics' MLflow callback logs it whole).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ...core import atomic
from ...record.run_folder import ASIDE_NAME, PREVIOUS_SUFFIX, SIDECAR_SUFFIX, own_weights_files
from .files import ResumeStateError, _link_or_copy, read
from .policy import COMPLETED, KEEP_ENV
#: what a completed training's sidecar keeps: what ``yolo-det val`` and the sidecar's readers use
KEPT = ("format", "version", "yolo_det", "torch", "checkpoint", "checkpoint_sha256", "epoch", "ema", "ema_updates",
        "settings", "extra")


def keep_requested() -> bool:
    """``$YOLO_DET_KEEP_RESUME`` is ``1`` / ``true`` / ``yes``: a completed training keeps its full resume state."""
    return os.environ.get(KEEP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def completed_state(state: Dict) -> bool:
    """Whether a sidecar was reduced at the end of its training (no resume state in it)."""
    return bool(state.get(COMPLETED))


def reduced(state: Dict) -> Dict:
    """The part of a sidecar a completed training keeps: the full-precision EMA, its caches, what it belongs to."""
    out = {k: state[k] for k in KEPT if k in state}
    out["caches"] = {"ema": (state.get("caches") or {}).get("ema") or {}}
    out[COMPLETED] = True
    return out


def _sidecars(weights: Path) -> List[Path]:
    return sorted(p for p in weights.glob(f"*{SIDECAR_SUFFIX}") if p.is_file() and not p.name.startswith("."))


def _groups(paths: List[Path]) -> List[List[Path]]:
    """Paths grouped by the file they are (hard links: ``best.pt``'s sidecar is ``last.pt``'s when one state)."""
    groups: Dict[Tuple[int, int], List[Path]] = {}
    for path in paths:
        st = path.stat()
        groups.setdefault((st.st_dev, st.st_ino), []).append(path)
    return list(groups.values())


def finish(weights: os.PathLike, keep: Optional[bool] = None, echo: Optional[Callable[[str], None]] = print) -> int:
    """At the end of a completed training (the main process): the ``.prev`` files go; unless ``keep`` (default
    :func:`keep_requested`), each sidecar is reduced to :func:`reduced` (one write per file: a hard-linked pair
    stays one file) and DDP ranks' states go. Returns the bytes freed; ``echo`` gets one line saying so."""
    folder = Path(weights)
    if not folder.is_dir():
        return 0
    keep = keep_requested() if keep is None else keep
    before = _disk_bytes(folder)
    for path in own_weights_files(folder):
        name = path.name
        if name.endswith(PREVIOUS_SUFFIX) or (not keep and SIDECAR_SUFFIX + ".rank" in name):
            _unlink(path)
    if not keep:
        for group in _groups(_sidecars(folder)):
            try:
                state = read(group[0])
            except ResumeStateError:
                continue  # not ours to rewrite: left as it is
            if completed_state(state):
                continue
            tmp = atomic.temp_path(group[0])
            torch.save(reduced(state), tmp)
            for path in group:  # each name replaced atomically: a kill leaves each readable, full or reduced
                _link_or_copy(tmp, path)
            _unlink(tmp)
    freed = max(0, before - _disk_bytes(folder))
    if echo is not None and freed:
        what = ("kept its resume state as " + KEEP_ENV + " asks" if keep else
                "removed its resume state (model, optimizer, RNG states; the full-precision EMA yolo-det val uses "
                f"stays); set {KEEP_ENV}=1 to keep it")
        echo(f"yolo-det: the training completed: {what} ({freed / 1e6:.1f} MB freed in {folder.name}/)")
    return freed


def _disk_bytes(folder: Path) -> int:
    """The bytes yolo-det's files in ``folder`` hold on disk, each file (not each hard link) once."""
    seen, total = set(), 0
    for path in own_weights_files(folder):
        try:
            st = path.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def aside_folder(weights: os.PathLike) -> Path:
    """Where :func:`set_aside` puts a weights folder's yolo-det files: ``<run>/.yolo-det-aside/<weights>``."""
    weights = Path(weights)
    return weights.parent / ASIDE_NAME / weights.name


def set_aside(weights: os.PathLike) -> List[Path]:
    """yolo-det's own files out of ``weights/`` (renames, hard links kept) while a callback uploads the folder;
    the paths moved. :func:`put_back` returns them."""
    weights = Path(weights)
    files = own_weights_files(weights)
    if not files:
        return []
    aside = aside_folder(weights)
    aside.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in files:
        try:
            atomic.replace(path, aside / path.name, sync=False)
            moved.append(path)
        except OSError as exc:  # pragma: no cover - the file system refused: it stays (and may be uploaded)
            print(f"yolo-det: warning: {path} could not be set aside while trackers upload {weights.name}/: {exc}")
    return moved


def put_back(weights: os.PathLike) -> List[Path]:
    """The files :func:`set_aside` moved, back in ``weights/``; the aside folder removed. Idempotent."""
    weights = Path(weights)
    aside = aside_folder(weights)
    if not aside.is_dir():
        return []
    back = []
    for path in sorted(aside.iterdir()):
        target = weights / path.name
        if not target.exists():  # a file written there since is newer
            atomic.replace(path, target, sync=False)
            back.append(target)
    for folder in (aside, aside.parent):
        try:
            folder.rmdir()
        except OSError:
            pass
    return back


__all__ = ["COMPLETED", "KEEP_ENV", "KEPT", "aside_folder", "completed_state", "finish", "keep_requested",
           "put_back", "reduced", "set_aside"]
