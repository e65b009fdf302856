"""Run a training command several times with fingerprinting on and compare the runs.

Each run gets ``YOLO_DET_FINGERPRINT=<workdir>/run<i>/fingerprint.jsonl`` (rank r > 0 of a DDP
run writes ``fingerprint.rank<r>.jsonl`` beside it) and ``YOLO_DET_VERIFY_RUN=<i>``; ``{run}``
in the command is replaced by the run number, so runs can write to their own directories.
The command's output goes to ``<workdir>/run<i>/output.log``. Runs are sequential.

Besides the training steps and validations in the logs, each run's ``weights/last.pt``,
``weights/best.pt`` and ``results.csv`` (in the run folder its log names) are compared with run
1's; the runs are identical only when the logs prove it (at least one tensor or validation compared)
and none of those files differs. Files missing in both runs are said, not judged: the logs decide.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..core import verdicts
from ..core.processes import ProcessGroup
from .artifacts import ArtifactComparison, compare_run_dirs
from .compare import Comparison, Divergence, compare_ranked
from ..record.header import RUN_VAR
from ..record.log import ENV_VAR, FingerprintError, rank_paths, read_log
from .search import POINTER, SearchComparison, announced, compare_searches

LOG_NAME = "fingerprint.jsonl"
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


@dataclass
class VerifyResult(verdicts.Judged):
    """Every run and the comparison of run 1 with each other run."""

    runs: List[RunResult]
    comparisons: List[Comparison]
    artifacts: List[ArtifactComparison] = field(default_factory=list)  # run 1 vs each other run
    searches: List[SearchComparison] = field(default_factory=list)  # hyperparameter searches: run 1 vs each other

    @property
    def comparison(self) -> Comparison:
        """The comparison to report: the earliest divergence, else the first inconclusive one, else run 2's."""
        diverged = [c for c in self.comparisons if c.first_divergence is not None]
        if diverged:
            return min(diverged, key=lambda c: Divergence.sort_key(c.first_divergence))
        return next((c for c in self.comparisons if not c.identical), self.comparisons[0])

    @property
    def identical(self) -> bool:
        """Training steps, validations and final state proven identical by the logs (each comparison holds at
        least one compared tensor or validation), searches' rows identical, and no checkpoint or results.csv
        that differs. The logs decide: files missing in both runs are said, they do not make the verdict."""
        return (bool(self.comparisons or self.searches) and all(c.identical for c in self.comparisons)
                and not any(a.differs for a in self.artifacts) and all(s.identical for s in self.searches))

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` (a divergence, run files or searches that differ: a difference found is a
        finding even where the logs cannot be compared, e.g. of different lengths), else the logs' own verdict
        (``not proven``: they hold nothing to compare; ``inconclusive``: lengths differ, unfinished); a search
        whose rows agree and whose logs or files do not prove it is ``not proven``."""
        if self.identical:
            return verdicts.IDENTICAL
        if (any(c.first_divergence is not None for c in self.comparisons) or self.artifacts_differ is not None
                or any(s.differs for s in self.searches)):
            return verdicts.DIFFERS
        if self.comparisons and not self.searches:
            return self.comparison.verdict
        return verdicts.NOT_PROVEN

    @property
    def search(self) -> Optional[SearchComparison]:
        """The search to report: the first that differs, else the first not identical, else run 2's."""
        if not self.searches:
            return None
        return next((s for s in self.searches if s.differs), None) or next(
            (s for s in self.searches if not s.identical), self.searches[0])

    @property
    def artifacts_differ(self) -> Optional[ArtifactComparison]:
        """The first other run whose checkpoints or results.csv differ from run 1's, or None."""
        return next((a for a in self.artifacts if a.differs), None)

    @property
    def logs(self) -> List[Path]:
        return [run.log for run in self.runs]

    def to_json(self) -> Dict[str, Any]:
        """``{"identical", "steps", "tensors", "first_divergence", "logs", ...}`` for ``--json`` (a search:
        ``{"identical", "search", "searches"}``)."""
        if self.searches:
            return self.stamped({"identical": self.identical, "search": self.search.to_json(),
                                 "searches": [s.to_json() for s in self.searches]})
        comparison = self.comparison
        out = comparison.to_json()
        out["identical"] = self.identical
        out["steps_identical"] = all(c.steps_identical for c in self.comparisons)
        out["logs"] = [str(p) for p in self.logs]
        shown = self.artifacts_differ or (self.artifacts[0] if self.artifacts else None)
        out["checkpoints"] = {name: c.to_json() for name, c in shown.checkpoints.items()} if shown else {}
        out["results_csv"] = shown.results.to_json() if shown and shown.results else None
        out["artifacts"] = [a.to_json() for a in self.artifacts]
        out["runs"] = [{"run": r.index, "returncode": r.returncode, "seconds": round(r.seconds, 2),
                        "steps": r.steps, "log": str(r.log), "output": str(r.output),
                        "rank_logs": {str(k): str(v) for k, v in r.ranks.items()}} for r in self.runs]
        return self.stamped(out)


def _substitute(cmd: Sequence[str], run: int) -> List[str]:
    return [str(arg).replace("{run}", str(run)) for arg in cmd]


def _clear(run_dir: Path) -> None:
    """Remove what an earlier verify left in ``run_dir`` (only yolo-det's own files)."""
    for path in run_dir.glob("fingerprint*.jsonl"):
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


def _run_once(cmd: Sequence[str], index: int, total: int, run_dir: Path, env: Mapping[str, str],
              cwd: Optional[os.PathLike], progress: Callable[[str], None], poll: float,
              timeout: Optional[float]) -> RunResult:
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


def verify(cmd: Sequence[str], runs: int = 2, workdir: os.PathLike = "yolo-det-verify",
           progress: Optional[Callable[[str], None]] = None, *, env: Optional[Mapping[str, str]] = None,
           cwd: Optional[os.PathLike] = None, poll: float = 0.5, timeout: Optional[float] = None) -> VerifyResult:
    """Run ``cmd`` ``runs`` times (at least 2) with fingerprinting on and compare every run with run 1.

    ``progress`` receives one-line messages while runs train (None: silent). Raises
    :class:`RunFailedError` when a run exits non-zero, :class:`VerifyError` when a run writes
    no log or arguments are bad, and ``FingerprintError`` when a log cannot be read.
    """
    cmd = [str(c) for c in cmd]
    if not cmd:
        raise VerifyError("no training command given")
    if runs < 2:
        raise VerifyError(f"runs must be at least 2, got {runs}")
    report = progress or (lambda _message: None)
    if not any("{run}" in arg for arg in cmd):
        report("warning: the command has no {run}, so every run gets the same arguments and may write over the "
               "previous run's outputs (a training script with --exist-ok, a fixed --project/--name); "
               "add e.g. --name verify{run} to give each run its own folder")
    base_env = dict(os.environ if env is None else env)
    workdir = Path(workdir).resolve()
    results = [
        _run_once(_substitute(cmd, i), i, runs, workdir / f"run{i}", base_env, cwd, report, poll, timeout)
        for i in range(1, runs + 1)
    ]
    searches = _searches(workdir, runs)
    if searches and not any(run.ranks for run in results):
        return VerifyResult(results, [], [], searches)
    comparisons = [compare_ranked(results[0].ranks, other.ranks) for other in results[1:]]
    folders = [_run_dir(run.log) for run in results]
    artifacts = [compare_run_dirs(folders[0], folder) for folder in folders[1:]]
    return VerifyResult(results, comparisons, artifacts, searches)


def _searches(workdir: Path, runs: int) -> List[SearchComparison]:
    """Run 1's hyperparameter search against each other run's, when every run announced one."""
    folders = [announced(workdir / f"run{i}") for i in range(1, runs + 1)]
    if any(folder is None for folder in folders):
        return []
    return [compare_searches(folders[0], folder) for folder in folders[1:]]


def _run_dir(log: Path) -> Optional[str]:
    """The run folder a log's final line names (where its checkpoints and results.csv are), or None."""
    try:
        final = read_log(log).final
    except FingerprintError:
        return None
    return final.run_dir if final is not None else None


__all__ = ["LOG_NAME", "RUN_VAR", "RunFailedError", "RunResult", "VerifyError", "VerifyResult", "verify",
           "FingerprintError"]
