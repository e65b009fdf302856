"""Sending evidence to the trackers in use, never failing the caller: a finished run's evidence
(:func:`log_run`, from ``Session.finish``), a command's verdict on the runs it judged (:func:`log_verdict`, from
the CLI), and the MLflow run a release's own callback started (:func:`note_active_run`, before it ends it).

A tracker that is not installed is skipped silently; one that fails (server down, bad URI) costs one warning
line and a bounded time (:mod:`.mlflow_runs`: no retries, a short timeout).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from ..core import verdicts
from . import links
from .evidence import run_evidence, verdict_evidence
from .selection import ENV, SelectionError, chosen, installed, requested

#: tracker -> the module of its backend (``log_run(run_dir, evidence, link)``, ``log_verdict(link, evidence)``)
BACKENDS = {"mlflow": "mlflow_runs", "tensorboard": "tensorboard_events"}
#: the verdict word of a command whose JSON has none, by exit code: each code's most general word, named there
_BY_CODE = {code: verdicts.by_code(code) for code in sorted(set(verdicts.EXIT_CODES.values()))}

Echo = Callable[[str], None]


def _warn(echo: Echo, tracker: str, what: str, exc: BaseException) -> None:
    reason = (str(exc).strip().splitlines() or [""])[0][:300]
    echo(f"yolo-det: warning: {tracker} could not log {what} ({type(exc).__name__}: {reason}); nothing else is "
         f"affected. Check the tracker (e.g. MLFLOW_TRACKING_URI), or set {ENV}=off to stop trying")


def _backend(name: str) -> Any:
    return importlib.import_module(f"{__package__}.{BACKENDS[name]}")


def _selected(run_dir: Path, echo: Echo) -> List[str]:
    """The trackers for this run; a bad ``YOLO_DET_TRACKERS`` or a tracker named there but not installed is one
    warning line."""
    try:
        names = chosen(run_dir, links.read(run_dir))
        missing = [name for name in requested() or () if not installed(name)]
    except SelectionError as exc:
        echo(f"yolo-det: warning: {exc}; no tracker logged this run")
        return []
    if missing:
        echo(f"yolo-det: warning: {ENV} names {', '.join(missing)}, not installed here: skipped "
             f"(pip install {' '.join(missing)})")
    return names


def log_run(run_dir: Optional[os.PathLike], echo: Echo = print) -> List[str]:
    """Log the evidence of the run in ``run_dir`` to each tracker in use and remember where in its
    ``trackers.json``; return the trackers that logged it. Never raises."""
    if run_dir is None:
        return []
    folder = Path(run_dir)
    names = _selected(folder, echo)
    if not names:
        return []
    try:
        evidence = run_evidence(folder)
    except Exception as exc:  # noqa: BLE001 - evidence is a report: it never fails the training
        _warn(echo, ", ".join(names), "the run's evidence", exc)
        return []
    if evidence is None:
        return []
    logged = []
    for name in names:
        try:
            backend = _backend(name)
            if name == "mlflow":
                link = backend.log_run(folder, evidence, links.read(folder).get(name) or {})
            else:
                link = backend.log_run(folder, evidence)
            links.remember(folder, name, link)
            logged.append(name)
        except Exception as exc:  # noqa: BLE001 - a tracker that fails never fails the training
            _warn(echo, name, "the run's evidence", exc)
    return logged


def _payload(result: Any) -> Any:
    """A command's result as JSON-ready data: a :class:`~yolo_det.core.verdicts.Result`'s ``to_json()`` (its
    verdict word stamped in), or a mapping itself."""
    if isinstance(result, verdicts.Result):
        return verdicts.stamp(result.to_json(), result.verdict)
    return dict(result) if isinstance(result, Mapping) else result


def verdict_word(result: Any, payload: Any, code: int) -> str:
    """The verdict of a command's result in :mod:`yolo_det.core.verdicts`' words: its JSON's ``verdict``, else the
    result's ``verdict`` attribute, else the word of its exit code."""
    for word in (payload.get("verdict") if isinstance(payload, Mapping) else None, getattr(result, "verdict", None)):
        try:
            return verdicts.normalize(word)
        except ValueError:
            continue
    return _BY_CODE.get(code, verdicts.INCONCLUSIVE)


def log_verdict(command: str, code: int, result: Any, runs: Iterable[Optional[os.PathLike]],
                echo: Echo = print) -> List[Path]:
    """Attach ``command``'s verdict and its evidence (``result``'s JSON) to the tracker runs of each judged run
    folder that has a ``trackers.json``; return those folders. Never raises."""
    try:
        names = requested()
        folders = links.linked_folders(runs)
        if names == () or not folders:
            return []
        payload = _payload(result)
        evidence = verdict_evidence(command, verdict_word(result, payload, code), code, payload, folders)
    except Exception as exc:  # noqa: BLE001 - the command's verdict stands whatever a tracker does
        _warn(echo, "a tracker", f"the {command} verdict", exc)
        return []
    done = set()  # a copied run folder names the same tracker run: the verdict goes there once
    for folder in folders:
        for name, link in links.read(folder).items():
            key = (name, repr(sorted(link.items())) if isinstance(link, Mapping) else repr(link))
            if name not in BACKENDS or (names is not None and name not in names) or not installed(name) or key in done:
                continue
            done.add(key)
            try:
                _backend(name).log_verdict(link, evidence)
            except Exception as exc:  # noqa: BLE001
                _warn(echo, name, f"the {command} verdict for {folder}", exc)
    return folders


def note_active_run(run_dir: Optional[os.PathLike], started_by: str, echo: Echo = print) -> Optional[Dict[str, Any]]:
    """Remember in ``run_dir/trackers.json`` the MLflow run active in this process (mlflow already imported,
    e.g. by a release's callback), so that :func:`log_run` logs into it after the callback has ended it."""
    if run_dir is None or "mlflow" not in sys.modules:
        return None
    try:
        if requested() is not None and "mlflow" not in (requested() or ()):
            return None
        link = _backend("mlflow").note_active_run(started_by)
        if link is not None:
            links.remember(run_dir, "mlflow", link)
        return link
    except Exception as exc:  # noqa: BLE001
        _warn(echo, "mlflow", "which run holds this run's evidence", exc)
        return None


__all__ = ["BACKENDS", "log_run", "log_verdict", "note_active_run", "verdict_word"]
