"""Run one training command with fingerprinting on: its own folder, its log, its output, its progress.

:func:`run_once` gives the command ``YOLO_DET_FINGERPRINT=<run_dir>/fingerprint.jsonl`` and
``YOLO_DET_VERIFY_RUN=<index>``, sends its output to ``<run_dir>/output.log``, reports its steps while it
trains, stops its whole process group on a timeout, and returns the :class:`RunResult` (or raises
:class:`RunFailedError` with the tail of its output). ``verify``, ``resume_at``, ``locate`` and seed studies
run their commands through it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..core.processes import ProcessGroup
from ..record.header import RUN_VAR
from ..record import run_folder
from ..record.log import ENV_VAR, rank_paths
from ..record.run_folder import LOG_NAME
from .search import POINTER, announced

OUTPUT_NAME = "output.log"
TAIL_LINES = 40


class VerifyError(RuntimeError):
    """``verify`` could not produce a comparison (bad arguments, a run wrote no log)."""


class RunFailedError(VerifyError):
    """A training run exited with an error; ``tail`` holds the end of its output."""

    def __init__(self, run: int, returncode: int, output: Path, tail: str) -> None:
        self.run, self.returncode, self.output, self.tail = run, returncode, output, tail
        super().__init__(f"run {run} failed with exit code {returncode}; its output is in {output}")


@dataclass
class RunResult:
    """One training run: exit code, duration, its logs (``{rank: path}``) and output file."""

    index: int
    returncode: int
    seconds: float
    log: Path
    output: Path
    ranks: Dict[int, Path] = field(default_factory=dict)
    steps: int = 0


def substitute(cmd: Sequence[str], run: int) -> List[str]:
    """``cmd`` with ``{run}`` replaced by the run number (so runs can write to their own folders)."""
    return [str(arg).replace("{run}", str(run)) for arg in cmd]



def _clear(run_dir: Path) -> None:
    """Remove what an earlier verify left in ``run_dir`` (only yolo-det's own files)."""
    for path in run_folder.log_files(run_dir):
        path.unlink()
    (run_dir / OUTPUT_NAME).unlink(missing_ok=True)
    (run_dir / POINTER).unlink(missing_ok=True)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").split("\n")[-lines:])


class _StepCounter:
    """Counts the step lines written so far to a log (not its header, validations or final line),
    reading only what is new."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.count, self.rest = path, 0, 0, b""

    def steps(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.count
        self.offset += len(chunk)
        lines = (self.rest + chunk).split(b"\n")
        self.rest = lines.pop()  # an incomplete last line is counted once it is complete
        self.count += sum(1 for line in lines if line.startswith(b'{"step"'))
        return self.count


def run_once(cmd: Sequence[str], index: int, total: int, run_dir: Path, env: Mapping[str, str],
             cwd: Optional[os.PathLike], progress: Callable[[str], None], poll: float,
             timeout: Optional[float]) -> RunResult:
    """Run ``cmd`` (run ``index`` of ``total``) in its own process group with its log and output in ``run_dir``.

    ``progress`` gets one-line messages (start, steps every 5 s, done); ``poll`` is the wait between checks.
    Raises :class:`RunFailedError` on a non-zero exit, :class:`VerifyError` on a timeout or where no log was written.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _clear(run_dir)
    except OSError as exc:
        raise VerifyError(f"cannot use {run_dir} for run {index}: {exc.strerror}; choose another --workdir") from None
    log, output = run_dir / LOG_NAME, run_dir / OUTPUT_NAME
    run_env = dict(env)
    run_env[ENV_VAR] = str(log)
    run_env[RUN_VAR] = str(index)
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    progress(f"run {index}/{total}: {shlex.join(cmd)}")
    counter = _StepCounter(log)
    start = time.monotonic()
    try:
        out = open(output, "wb")
    except OSError as exc:
        raise VerifyError(f"cannot write {output}: {exc.strerror}") from None
    with out:
        try:
            group = ProcessGroup(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=run_env, cwd=cwd, foreground=False)  # Ctrl-C stops verify, not one run
        except OSError as exc:
            raise VerifyError(f"cannot run {cmd[0]!r}: {exc.strerror}") from None
        proc = group.proc
        last_report, reported = start, 0
        with group:  # a signal to verify stops the run's whole process group, grandchildren too
            while proc.poll() is None:
                time.sleep(poll)
                now = time.monotonic()
                if timeout is not None and now - start > timeout:
                    group.stop(signal.SIGKILL, wait=0)
                    raise VerifyError(f"run {index} did not finish within {timeout:g} s; its output is in {output}")
                steps = counter.steps()
                if steps != reported and now - last_report >= 5:
                    progress(f"run {index}/{total}: step {steps} ({now - start:.0f} s)")
                    last_report, reported = now, steps
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RunFailedError(index, proc.returncode, output, _tail(output))
    ranks = rank_paths(log)
    if 0 not in ranks and announced(run_dir) is None:  # a search's trials write logs of their own
        raise VerifyError(
            f"run {index} finished but wrote no fingerprint log at {log}: the command does not use yolo-det. "
            "Patch the training script (yolo-det apply-patch REPO) or call yolo_det.configure() in it; "
            f"its output is in {output}")
    steps = counter.steps()
    progress(f"run {index}/{total}: done in {seconds:.1f} s, {steps} steps, log {log}")
    return RunResult(index, proc.returncode, seconds, log, output, ranks, steps)


__all__ = ["LOG_NAME", "OUTPUT_NAME", "RunFailedError", "RunResult", "VerifyError", "run_once", "substitute"]
