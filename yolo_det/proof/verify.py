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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..core import verdicts
from .artifacts import ArtifactComparison, compare_run_dirs
from .compare import Comparison, Divergence, compare_ranked
from ..record.header import RUN_VAR
from ..record.log import FingerprintError, read_log
# one training command is run by .runner; its names stay importable from here (verify.OUTPUT_NAME, ...)
from .runner import (LOG_NAME, OUTPUT_NAME, TAIL_LINES, RunFailedError, RunResult, VerifyError,  # noqa: F401
                     run_once, substitute)
from .search import SearchComparison, announced, compare_searches


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
        run_once(substitute(cmd, i), i, runs, workdir / f"run{i}", base_env, cwd, report, poll, timeout)
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
