"""Sending evidence to the trackers in use, never failing the caller: a finished run's evidence
(:func:`log_run`, from ``Session.finish``), a command's verdict on the runs it judged (:func:`log_verdict`, from
the CLI), and the tracker runs a release's own callbacks started (:func:`note_active_run`, before they end them).

Every tracker is a :class:`.backend.Backend` of :mod:`.registry`, called alike. A tracker that is not installed
is skipped silently; the calls of one command share one time budget (:mod:`.budget`, 10 s), and whatever fails
(server down, bad URI, the budget spent) is one warning line for the whole command.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ..core import verdicts
from . import links
from .backend import Backend
from .budget import Budget, Failures, OutOfTime
from .evidence import run_evidence, verdict_evidence
from .registry import BACKENDS
from .selection import ENV, SelectionError, chosen, installed, requested

Echo = Callable[[str], None]
HINT = f"Check the tracker (e.g. MLFLOW_TRACKING_URI), or set {ENV}=off to stop trying"


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


def _prepared(backend: Backend, failures: Failures, what: str) -> bool:
    """The backend's imports done (outside the budget); a failure is noted, not raised."""
    try:
        backend.prepare()
        return True
    except Exception as exc:  # noqa: BLE001 - a tracker that fails never fails the caller
        failures.add(backend.name, what, exc)
        return False


def log_run(run_dir: Optional[os.PathLike], echo: Echo = print) -> List[str]:
    """Log the evidence of the run in ``run_dir`` to each tracker in use and remember where in its
    ``trackers.json``; return the trackers that logged it. Never raises; at most one warning line."""
    if run_dir is None:
        return []
    folder = Path(run_dir)
    names = _selected(folder, echo)
    if not names:
        return []
    what = "the run's evidence"
    failures = Failures()
    try:
        evidence = run_evidence(folder)
    except Exception as exc:  # noqa: BLE001 - evidence is a report: it never fails the training
        failures.add(", ".join(names), what, exc)
        evidence = None
    logged = []
    budget = Budget()
    for name in names if evidence is not None else ():
        backend = BACKENDS[name]
        failures.attempt(name)
        if not _prepared(backend, failures, what):
            continue
        try:
            link = budget.call(backend.log_run, folder, evidence, links.read(folder).get(name) or {})
            links.remember(folder, name, link)
            logged.append(name)
        except Exception as exc:  # noqa: BLE001 - a tracker that fails never fails the training
            failures.add(name, what, exc)
    _report(failures, what, echo)
    return logged


def _report(failures: Failures, what: str, echo: Echo) -> None:
    line = failures.line(what, HINT)
    if line is not None:
        try:
            echo(line)
        except Exception:  # noqa: BLE001 - a closed stream never fails the caller
            pass


def judged(result: Any, code: int) -> Tuple[str, int, Any]:
    """A command's result as the trackers record it: its verdict word, that word's exit code and its JSON, read
    through :mod:`yolo_det.core.verdicts`' result protocol (``verdict``, ``exit_code``, ``to_json()`` stamped). A
    mapping is adapted here, and only here: its ``verdict``, else the word of the command's exit ``code``
    (:func:`~yolo_det.core.verdicts.by_code`). The word and code recorded never part: the code is the word's."""
    if isinstance(result, verdicts.Result):
        payload = result.to_json()
        said = (payload.get("verdict") if isinstance(payload, Mapping) else None, result.verdict)
    else:
        payload = dict(result) if isinstance(result, Mapping) else result
        said = (payload.get("verdict") if isinstance(payload, Mapping) else None,)
    for word in said:
        try:
            word = verdicts.normalize(word)
        except ValueError:
            continue
        return word, verdicts.exit_code(word), payload
    return verdicts.by_code(code), code, payload


def verdict_word(result: Any, payload: Any, code: int) -> str:
    """The verdict word of a command's result (:func:`judged`'s first element; ``payload`` is not read)."""
    return judged(result, code)[0]


def log_verdict(command: str, code: int, result: Any, runs: Iterable[Optional[os.PathLike]],
                echo: Echo = print) -> List[Path]:
    """Attach ``command``'s verdict and its evidence (``result``'s JSON) to the tracker runs of each judged run
    folder that has a ``trackers.json``; return those folders. Never raises; at most one warning line."""
    what = f"the {command} verdict"
    failures = Failures()
    try:
        names = requested()
        folders = links.linked_folders(runs)
        if names == () or not folders:
            return []
        word, word_code, payload = judged(result, code)
        evidence = verdict_evidence(command, word, word_code, payload, folders)
    except Exception as exc:  # noqa: BLE001 - the command's verdict stands whatever a tracker does
        failures.add("a tracker", what, exc)
        _report(failures, what, echo)
        return []
    calls: List[Tuple[Backend, Mapping[str, Any], Path]] = []
    done = set()  # a copied run folder names the same tracker run: the verdict goes there once
    for folder in folders:
        for name, link in links.read(folder).items():
            backend = BACKENDS.get(name)
            if backend is None or (names is not None and name not in names) or not isinstance(link, Mapping):
                continue
            key = (name, backend.target(link))
            if key in done or not backend.installed():
                continue
            done.add(key)
            calls.append((backend, link, folder))
    ready: Dict[str, bool] = {}
    budget = Budget()
    for backend, link, folder in calls:
        failures.attempt(backend.name)
        if backend.name not in ready:
            ready[backend.name] = _prepared(backend, failures, what)
        if not ready[backend.name]:
            continue
        try:
            budget.call(backend.log_verdict, link, evidence)
        except OutOfTime as exc:
            failures.add(backend.name, what, exc)
        except Exception as exc:  # noqa: BLE001
            failures.add(backend.name, f"{what} for {folder}", exc)
    _report(failures, what, echo)
    return folders


def log_files(run_dir: os.PathLike, folder: os.PathLike, name: str, echo: Echo = print) -> List[str]:
    """Attach the files of ``folder`` (``yolo-det attest``'s bundle) to the tracker runs that hold ``run_dir``'s
    evidence (its ``trackers.json``), inside one time budget; return the trackers that took them. Never raises;
    at most one warning line."""
    what = f"the {name}"
    failures = Failures()
    taken: List[str] = []
    try:
        names = requested()
        held = links.read(run_dir) if names != () else {}
    except Exception as exc:  # noqa: BLE001 - the files are written whatever a tracker does
        failures.add("a tracker", what, exc)
        held = {}
    budget = Budget()
    for tracker, link in held.items():
        backend = BACKENDS.get(tracker)
        if backend is None or (names is not None and tracker not in names) or not isinstance(link, Mapping) \
                or not backend.installed():
            continue
        failures.attempt(tracker)
        if not _prepared(backend, failures, what):
            continue
        try:
            if budget.call(backend.log_files, link, Path(folder), name):
                taken.append(tracker)
        except Exception as exc:  # noqa: BLE001
            failures.add(tracker, what, exc)
    _report(failures, what, echo)
    return taken


def note_active_run(run_dir: Optional[os.PathLike], started_by: str, echo: Echo = print) -> Dict[str, Any]:
    """Remember in ``run_dir/trackers.json`` the tracker runs active in this process (each backend's
    ``active_run``: a tracker already imported, e.g. by a release's callback), so that :func:`log_run` logs into
    them after the callback has ended them; return the links noted by tracker. Never raises."""
    noted: Dict[str, Any] = {}
    if run_dir is None:
        return noted
    failures = Failures()
    try:
        names = requested()
    except SelectionError:
        return noted  # log_run says so, once
    for name, backend in BACKENDS.items():
        if names is not None and name not in names:
            continue
        try:
            link = backend.active_run(started_by)
            if link is not None:
                links.remember(run_dir, name, link)
                noted[name] = link
        except Exception as exc:  # noqa: BLE001
            failures.add(name, "which run holds this run's evidence", exc)
    _report(failures, "which run holds this run's evidence", echo)
    return noted


__all__ = ["HINT", "judged", "log_run", "log_verdict", "note_active_run", "verdict_word"]
