"""The calls a patched YOLOv5-family ``train.py`` makes (``yolo-det apply-patch``).

The patch only inserts calls to these functions, so everything they do lives here: a patched
script picks up fixes by upgrading yolo-det, and ``revert-patch`` has little to undo. Every
function tolerates the shapes of the releases the patch targets (v5.0 ... master, PyPI
``yolov5``, yolov7, FFCA-YOLO): ``opt`` restored by ``--resume`` from a run started before the
patch has no ``deterministic``/``fingerprint``/``seed``; ``hyp`` may be a dict or None.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, MutableMapping, Optional

import torch

from ..core import environment, seeding
from ..session import Session, backward_context, configure, current
from ..core.mode import MODES, ConfigError
from ..core.mode import pop_hyp_keys as _pop_keys

# Imported by the patched train.py before it touches CUDA: on torch 1.7-2.9 set
# CUBLAS_WORKSPACE_CONFIG now, in time for the cuBLAS handles the run will create.
environment.prepare_cublas()

FINGERPRINT_ENV = "YOLO_DET_FINGERPRINT"
_EXTRA = "yolov5"

# deterministic* keys of the hyp YAML loaded last outside train(): evolve and v5.0-style
# scripts load the file once and pass train() copies that no longer hold them.
_hyp_keys: Dict[str, Any] = {}
_exit_hook = False


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--deterministic``, ``--fingerprint`` and, where the release has none, ``--seed``.

    ``--deterministic`` defaults to None so the hyp YAML key, ``YOLO_DET_DETERMINISTIC`` or the
    default (warn) can decide. Options the script already defines are left alone.
    """
    existing = getattr(parser, "_option_string_actions", {})
    group = parser.add_argument_group("yolo-det (reproducibility)")
    if "--deterministic" not in existing:
        group.add_argument("--deterministic", choices=MODES, default=None,
                           help="strict: every op deterministic or an error; warn: deterministic where "
                                "possible, each nondeterministic op reported; off: fastest. Default: the hyp "
                                "YAML's 'deterministic:', else $YOLO_DET_DETERMINISTIC, else warn")
    if "--fingerprint" not in existing:
        group.add_argument("--fingerprint", metavar="PATH", default=None,
                           help=f"write per-step fingerprints to PATH (JSONL; sets ${FINGERPRINT_ENV}) "
                                "for yolo-det diff / verify")
    if "--seed" not in existing:
        group.add_argument("--seed", type=int, default=None,
                           help="global training seed, applied as seed + 1 + RANK like YOLOv5 v6.2+ "
                                "(added by yolo-det; default: the release's own seeding)")
    return parser


def pop_hyp_keys(hyp: Any) -> Dict[str, Any]:
    """Remove the ``deterministic*`` keys from a freshly loaded hyp dict; remember them for :func:`start`.

    YOLOv5's ``--evolve`` mutates and ``%g``-formats every hyp key, so they must leave the dict.
    """
    global _hyp_keys
    popped = _pop_keys(hyp) if isinstance(hyp, MutableMapping) else {}
    _hyp_keys = dict(popped)
    return popped


def start(opt: Any, hyp: Any = None, *, init_seed: Optional[int] = None, reseed: bool = False) -> Session:
    """Apply the determinism mode right after the release's ``init_seeds(...)``.

    Resolves ``--deterministic`` > hyp YAML keys (from ``hyp`` or the last file load) >
    ``$YOLO_DET_DETERMINISTIC`` > warn, and records which source won. ``init_seed`` is the value
    the release seeded with. With ``reseed`` (releases without their own ``--seed``) a
    ``--seed S`` the user passed re-seeds everything with ``S + 1 + RANK``. ``--fingerprint``
    sets ``$YOLO_DET_FINGERPRINT`` before the session starts. A bad value exits with status 2.
    """
    keys = dict(_hyp_keys)
    if isinstance(hyp, MutableMapping):
        keys.update(_pop_keys(hyp))  # train() loaded the file itself, or --resume restored a saved dict
    fingerprint = getattr(opt, "fingerprint", None)
    if fingerprint:
        os.environ[FINGERPRINT_ENV] = str(fingerprint)
    rank = _rank()
    user_seed = getattr(opt, "seed", None) if reseed else None
    seed = None if user_seed is None else int(user_seed) + 1 + rank
    script = _script(sys._getframe(1))
    try:
        session = configure(getattr(opt, "deterministic", None), hyp=keys, hyp_name=_hyp_name(opt),
                                    seed=seed, rank=rank, repo=None if script is None else Path(script).parent)
    except ConfigError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if seed is None:
        session.seed = init_seed
    session.extra[_EXTRA] = _run_info(opt, script, seed_from="--seed" if seed is not None else "init_seeds")
    _record_setup(session, hyp)
    _announce(session)
    _register_exit_hook()
    return session


def track(model: torch.nn.Module, ema: Any = None) -> torch.nn.Module:
    """Register the training model and its EMA (before DDP wrapping); strict swaps in replacements."""
    session = current()
    return session.track(model, ema) if session is not None else model


def backward(loss_items: Any = None) -> contextlib.AbstractContextManager:
    """Context for ``scaler.scale(loss).backward()``: the run's backward mode, alerts recorded.

    ``loss_items`` (the release's loss components) go to the fingerprint log when it is on.
    """
    return backward_context(loss_items)


@contextlib.contextmanager
def seeded_loaders(opt: Any) -> Iterator[None]:
    """Make DataLoaders built in the block default to seeded workers and a seeded generator.

    For releases whose ``create_dataloader`` passes neither ``worker_init_fn`` nor ``generator``
    (v5.0-v6.1). Their InfiniteDataLoader starts its iterator, and so draws worker seeds, in
    ``__init__``: seeding after construction would be too late. Explicit arguments win.
    """
    seed = getattr(opt, "seed", None)
    seed = 0 if seed is None else int(seed)
    rank = _rank()
    loader_class = torch.utils.data.DataLoader
    original = loader_class.__init__
    signature = inspect.signature(original)
    built = []

    @functools.wraps(original)
    def seeded_init(self, *args, **kwargs):
        given = signature.bind_partial(self, *args, **kwargs).arguments
        if given.get("worker_init_fn") is None:
            kwargs["worker_init_fn"] = seeding.seed_worker
        if given.get("generator") is None:
            kwargs["generator"] = seeding.make_generator(seed, rank)
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    loader_class.__init__ = seeded_init
    try:
        yield
    finally:
        loader_class.__init__ = original
        session = current()
        if session is not None and _EXTRA in session.extra:
            session.extra[_EXTRA]["train_loader"] = {
                "seeded_by": "yolo-det", "seed": seed, "rank": max(rank, 0),
                "worker_init_fn": "yolo_det.seed_worker", "loaders": built,
            }


def finish(opt: Any = None, save_dir: Optional[os.PathLike] = None) -> Optional[Path]:
    """End of training: print the violation report (rank 0), write ``determinism.json`` into the run's save_dir."""
    session = current()
    if session is None:
        return None
    target = save_dir if save_dir is not None else getattr(opt, "save_dir", None)
    if _EXTRA in session.extra:
        session.extra[_EXTRA]["finished"] = True
    path = session.finish(target)
    if path is not None:
        print(f"yolo-det: wrote {path}")
    return path


# -- helpers ---------------------------------------------------------------------------------

def _rank() -> int:
    """The global DDP rank, -1 without DDP (YOLOv5's RANK convention)."""
    try:
        return int(os.environ.get("RANK", "-1") or -1)
    except ValueError:
        return -1


def _run_info(opt: Any, script: Optional[str], seed_from: str) -> Dict[str, Any]:
    """The ``yolov5`` section of determinism.json (``train_loader``/``finished`` filled in later)."""
    save_dir = getattr(opt, "save_dir", None)
    return {"script": script, "seed_from": seed_from, "save_dir": None if save_dir is None else str(save_dir),
            "train_loader": None, "finished": False}


def _hyp_name(opt: Any) -> str:
    hyp = getattr(opt, "hyp", None)
    return str(hyp) if isinstance(hyp, (str, os.PathLike)) else "hyp YAML"


def _script(frame: Any) -> Optional[str]:
    """The file of the patched script that called us (its folder is the repo for the git commit)."""
    path = frame.f_globals.get("__file__")
    return None if path is None else str(Path(path).resolve())


def _record_setup(session: Session, hyp: Any) -> None:
    """Put the seed actually applied, the hyp values and where determinism.json goes in the fingerprint header."""
    from ..proof import fingerprint

    save_dir = session.extra[_EXTRA].get("save_dir")
    plain = {str(k): v for k, v in hyp.items() if isinstance(v, (int, float, str, bool))} \
        if isinstance(hyp, MutableMapping) else None
    fingerprint.update_header(seed=session.seed, hyp=plain,
                              report=None if save_dir is None else str((Path(save_dir) / "determinism.json").resolve()))


def _announce(session: Session) -> None:
    if not session.is_main:
        return
    source = {"cli": "--deterministic", "hyp": "hyp YAML", "env": "$YOLO_DET_DETERMINISTIC",
              "default": "default"}[session.settings.source]
    seed = f", seed {session.seed}" if session.seed is not None else ""
    print(f"yolo-det: determinism {session.settings.mode} (from {source}){seed}")


def _finish_at_exit() -> None:
    """Write determinism.json for a run that ended before train()'s end (early return, error)."""
    session = current()
    if session is None or _EXTRA not in session.extra:
        return
    save_dir = session.extra[_EXTRA].get("save_dir")
    path = session.finish(save_dir)
    if path is not None:
        print(f"yolo-det: training did not reach its end; wrote {path}")


def _register_exit_hook() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_finish_at_exit)
        _exit_hook = True


__all__ = ["add_arguments", "pop_hyp_keys", "start", "track", "backward", "seeded_loaders", "finish"]
