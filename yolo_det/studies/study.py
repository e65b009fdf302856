"""Seed studies: one training command run under N seeds, each run's metrics, their spread.

Run ``i`` (from 1) trains with seed ``trial_seeds(base, N)[i - 1]`` handed on through the
environment (:func:`yolo_det.core.roles.study_env`), with its fingerprint log in
``DIR/run<i>/fingerprint.jsonl``. Its metrics are its ``results.csv`` columns (names stripped, as
the release writes them) at the final epoch and at the best one (highest fitness), plus
``fitness`` from the log's validation records. ``DIR/study.json`` is rewritten after every run,
so a stopped study continues with the seeds still missing when the same command runs again.

A seed gets the driver's environment without yolo-det's per-run controls (:data:`RUN_CONTROLS`: an inexact
resume, a kill point, a capture, ...) unless the study passes them on; a seed whose records show that it resumed
inexactly or ran under another mode than the study's is *tainted*: ``study.json`` names it and ``compare`` gives
no verdict on it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core import environment, roles
from ..core.seeding import trial_seeds
from scipy import stats

from . import executors, statistics
from ..proof.artifacts import RESULTS, _read_table
from ..record.log import ENV_VAR, FingerprintError, Log, LogReader, read_log
from ..proof.runner import LOG_NAME, OUTPUT_NAME, VerifyError, run_once

STUDY_JSON = "study.json"
STUDY_CSV = "study.csv"
SCHEMA = 1
#: results.csv columns that are not metrics (the epoch, wall-clock time).
NOT_METRICS = ("epoch", "time")
#: The keys of study.json's ``settings`` that must match for a study to be continued in its folder.
SAME_STUDY = ("command", "base_seed", "vary", "mode")
#: The run info yolo-det's integrations write at every checkpoint (``proof.resume_at``'s, which imports torch).
INFO_ENV, INFO_NAME = "YOLO_DET_RUN_INFO", "run-info.json"
#: yolo-det's variables that steer one run, not a study: the driver's values are not handed to the seeds unless
#: the study passes them on (``pass_env``; ``yolo-det seeds --pass-env NAME``). The study sets its own seeds, run
#: number, fingerprint log and run info for each seed.
RUN_CONTROLS = (
    "YOLO_DET_RESUME",  # strict resumes inexactly
    "YOLO_DET_KILL_AT", "YOLO_DET_STOP_AFTER_EPOCH",  # a kill point, a stop after some epochs (tests, resume-at)
    "YOLO_DET_CAPTURE", "YOLO_DET_CAPTURE_STEP", "YOLO_DET_CAPTURE_THROUGH", "YOLO_DET_CAPTURE_READ",  # locate
    "YOLO_DET_VERIFY_RUN", "YOLO_DET_RANK",  # one run's number, one process' rank
)
#: What yolo-det's integrations print when a resume is not exact (the attempt's output.log keeps it).
INEXACT_RESUME = "yolo-det: resume not exact:"


class StudyError(VerifyError):
    """A study cannot be run or read (bad arguments, another study in the folder, a run that ignored its seed)."""


class StudyStop(StudyError):
    """The study cannot go on (a command that sets its own seed, runs sharing a folder): no further seed starts."""


def higher_is_better(metric: str) -> Optional[bool]:
    """The direction of a metric: losses lower, learning rates none, everything else (mAP, P, R, fitness) higher."""
    name = metric.split(":", 1)[-1].lower()
    if "loss" in name:
        return False
    if name.startswith(("x/lr", "lr/", "lr")):
        return None
    return True


@dataclass
class StudyRun:
    """One seed's run: its seeds, log, run folder, metrics at the final epoch and at the best epoch."""

    index: int
    seed: int
    seeds: Dict[str, Any]
    log: str
    run_dir: Optional[str]
    metrics: Dict[str, float]
    best: Dict[str, float]
    best_epoch: Optional[int]
    mode: Optional[str]
    initial_weights: Optional[str] = None
    placement: Optional[Dict[str, Any]] = None  # where and when it ran (executor, host, devices)
    tainted: List[str] = field(default_factory=list)  # why it did not run as its study says (empty: it did)

    def to_dict(self, folder: Optional[Path] = None) -> Dict[str, Any]:
        """As study.json stores it: with ``folder``, the paths relative to it (the study stays readable when its
        folder is copied or mounted elsewhere), else as they are."""
        log, run_dir = self.log, self.run_dir
        if folder is not None:
            log, run_dir = _relative(log, folder), (None if run_dir is None else _relative(run_dir, folder))
        return {"run": self.index, "seed": self.seed, "seeds": self.seeds, "log": log, "run_dir": run_dir,
                "mode": self.mode, "initial_weights": self.initial_weights, "metrics": self.metrics,
                "best_epoch": self.best_epoch, "best": self.best, "placement": self.placement,
                "tainted": list(self.tainted)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StudyRun":
        return cls(int(data["run"]), int(data["seed"]), dict(data.get("seeds") or {}), str(data["log"]),
                   data.get("run_dir"), {k: float(v) for k, v in (data.get("metrics") or {}).items()},
                   {k: float(v) for k, v in (data.get("best") or {}).items()}, data.get("best_epoch"),
                   data.get("mode"), data.get("initial_weights"), data.get("placement"),
                   [str(t) for t in data.get("tainted") or []])


@dataclass
class Study:
    """A study's settings, its finished runs and the summary per metric."""

    settings: Dict[str, Any]
    runs: List[StudyRun] = field(default_factory=list)
    path: Optional[Path] = None
    failed: List[Dict[str, Any]] = field(default_factory=list)  # seeds whose run failed this time: run, seed, error

    @property
    def seeds(self) -> List[int]:
        return list(self.settings.get("seeds") or [])

    @property
    def complete(self) -> bool:
        return len(self.runs) == len(self.seeds)

    @property
    def folder(self) -> Optional[Path]:
        return None if self.path is None else Path(self.path).parent

    def log_path(self, run: StudyRun) -> Path:
        """Where ``run``'s log is: its stored path (relative to the study folder, or an old absolute one)."""
        return Path(run.log)

    def tainted(self) -> List[Dict[str, Any]]:
        """The runs that did not run as the study says (``run``, ``seed``, ``why``): an inexact resume or another
        mode in their records, or (a study written before those were read) another mode in the run's log."""
        out = []
        for run in self.runs:
            why = list(run.tainted)
            other = _other_mode(run.mode, self.settings.get("mode"))
            if other and other not in why:
                why.append(other)
            if why:
                out.append({"run": run.index, "seed": run.seed, "why": why})
        return out

    def missing_logs(self) -> List[StudyRun]:
        """The runs whose fingerprint log is not where study.json says (a study copied without its runs)."""
        return [r for r in self.runs if not self.log_path(r).is_file()]

    def metric_names(self) -> List[str]:
        names: List[str] = []
        for run in self.runs:
            names += [n for n in run.metrics if n not in names]
        return names

    def values(self, metric: str) -> List[float]:
        """The metric in every run, in seed order (``best:NAME`` for the best epoch; NaN where missing)."""
        if metric.startswith("best:"):
            return [run.best.get(metric[5:], float("nan")) for run in self.runs]
        return [run.metrics.get(metric, float("nan")) for run in self.runs]

    def summary(self) -> Dict[str, statistics.Summary]:
        """Per metric of the final epoch and (``best:NAME``) of the best epoch: mean, std, range, interval."""
        out = {name: statistics.summarize(self.values(name)) for name in self.metric_names()}
        best = [n for run in self.runs for n in run.best]
        for name in dict.fromkeys(best):
            out[f"best:{name}"] = statistics.summarize(self.values(f"best:{name}"))
        return out

    def to_dict(self, folder: Optional[Path] = None) -> Dict[str, Any]:
        return {"schema": SCHEMA, "settings": self.settings, "complete": self.complete,
                "runs": [run.to_dict(folder) for run in self.runs], "failed": list(self.failed),
                "tainted": self.tainted(), "summary": {k: v.to_dict() for k, v in self.summary().items()}}

    def write(self, folder: os.PathLike) -> Path:
        """``study.json`` and ``study.csv`` (one row per seed), each written atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _atomic(folder / STUDY_JSON, json.dumps(self.to_dict(folder.resolve()), indent=2) + "\n")
        names = self.metric_names()
        best = list(dict.fromkeys(n for run in self.runs for n in run.best))
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["run", "seed", "init_seed", "order_seed", "augment_seed", "best_epoch"] + names
                        + [f"best:{n}" for n in best] + ["log"])
        for run in self.runs:
            writer.writerow([run.index, run.seed] + [run.seeds.get(r) for r in roles.ROLES] + [run.best_epoch]
                            + [_cell(run.metrics.get(n)) for n in names] + [_cell(run.best.get(n)) for n in best]
                            + [_relative(run.log, folder.resolve())])
        _atomic(folder / STUDY_CSV, text.getvalue())
        self.path = folder / STUDY_JSON
        return self.path


def _cell(value: Optional[float]) -> str:
    return "" if value is None else repr(float(value))


def _relative(path: str, folder: Path) -> str:
    """``path`` relative to ``folder`` (POSIX separators), if it is absolute; else as it is."""
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    try:
        return Path(os.path.relpath(p, folder)).as_posix()
    except ValueError:  # another drive (Windows)
        return str(path)


def _resolve(path: Optional[str], folder: Path, fallback: Optional[Path] = None) -> Optional[str]:
    """A stored path as an absolute one: relative ones from the study folder; an old absolute one as it is,
    unless it is gone and ``fallback`` (the same file under this folder: a study moved) exists."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute():
        return str((folder / p).resolve())
    if not p.exists() and fallback is not None and fallback.exists():
        return str(fallback)
    return str(p)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def load_study(path: os.PathLike) -> Study:
    """A study from its folder or its ``study.json``; :class:`StudyError` when it is not one."""
    path = Path(path)
    file = path / STUDY_JSON if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        runs = [StudyRun.from_dict(r) for r in data.get("runs") or []]
        folder = file.resolve().parent
        for run in runs:  # paths relative to the folder; old studies stored absolute ones
            run.log = _resolve(run.log, folder, folder / f"run{run.index}" / LOG_NAME)
            run.run_dir = _resolve(run.run_dir, folder)
        study = Study(dict(data["settings"]), runs, file, list(data.get("failed") or []))
    except FileNotFoundError:
        raise StudyError(f"{path} is not a seed study: no {STUDY_JSON} (make one with yolo-det seeds)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StudyError(f"{file} cannot be read as a seed study ({type(exc).__name__}: {exc})") from None
    return study


# -- one run's metrics -----------------------------------------------------------------------
def run_metrics(log: Log) -> Dict[str, Any]:
    """``metrics`` (final epoch), ``best`` and ``best_epoch`` of one finished run.

    Metric names are the run's ``results.csv`` columns (stripped) and ``fitness`` from the log's
    validation records; without a results.csv, the names the validation records carry. The best
    epoch is the last validation with the highest fitness (the one the release saves as best.pt).
    """
    validations = [v for v in log.validations if v.metrics]
    run_dir = log.final.run_dir if log.final is not None else None
    columns: List[str] = []
    rows: List[List[str]] = []
    table = Path(run_dir) / RESULTS if run_dir else None
    if table is not None and table.is_file():
        columns, rows = _read_table(table)
    best_index = None
    if validations:
        fitness = [v.metrics.get("fitness", float("nan")) for v in validations]
        finite = [f for f in fitness if f == f]
        if finite:
            top = max(finite)
            best_index = max(i for i, f in enumerate(fitness) if f == top)

    def row_metrics(row: Sequence[str]) -> Dict[str, float]:
        out = {}
        for name, cell in zip(columns, row):
            if name.lower() in NOT_METRICS:
                continue
            try:
                out[name] = float(cell)
            except ValueError:
                continue
        return out

    def at(k: Optional[int], row: Optional[Sequence[str]]) -> Dict[str, float]:
        values = row_metrics(row) if row is not None else (dict(validations[k].metrics) if k is not None else {})
        if k is not None and "fitness" in validations[k].metrics:
            values["fitness"] = float(validations[k].metrics["fitness"])
        return values

    paired = bool(rows) and len(rows) == len(validations)  # one validation per epoch: rows and records align
    final_k = len(validations) - 1 if validations else None
    final = at(final_k, rows[-1] if rows else None)
    best_row = rows[best_index] if paired and best_index is not None else None
    if best_row is None and best_index is not None and rows:  # a resumed run: its log may lack earlier epochs
        best_row = _rows_by_epoch(columns, rows).get(validations[best_index].epoch)
    best = at(best_index, best_row) if best_index is not None else {}
    epoch = validations[best_index].epoch if best_index is not None else None
    return {"metrics": final, "best": best, "best_epoch": epoch, "run_dir": run_dir}


def _rows_by_epoch(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Dict[int, Sequence[str]]:
    """results.csv rows by their ``epoch`` column (the last row of an epoch written twice: once before a kill,
    again after the resume); empty without one."""
    names = [c.lower() for c in columns]
    if "epoch" not in names:
        return {}
    k = names.index("epoch")
    out: Dict[int, Sequence[str]] = {}
    for row in rows:
        try:
            out[int(float(row[k]))] = row
        except (ValueError, IndexError):
            continue
    return out


# -- running -----------------------------------------------------------------------------------
def plan(base_seed: int, n: int, vary: str) -> Dict[str, Any]:
    """The seeds of a study: ``trial_seeds(base, n)`` (a longer study starts with the same seeds) and
    the fixed seed the other roles keep under one ``vary`` role (the first trial seed)."""
    if n < 2:
        raise StudyError(f"--n must be at least 2 (a spread needs two runs), got {n}")
    if vary not in roles.VARY:
        raise StudyError(f"--vary {vary!r} is not one of {', '.join(roles.VARY)}")
    seeds = trial_seeds(base_seed, n)
    return {"base_seed": int(base_seed), "n": int(n), "vary": vary, "seeds": seeds, "fixed_seed": seeds[0]}


def seed_environment(driver: Mapping[str, str], passed: Sequence[str] = ()) -> Tuple[Dict[str, str], List[str]]:
    """(the environment a seed starts from, the names withheld): ``driver`` without its :data:`RUN_CONTROLS`,
    except those named in ``passed``."""
    withheld = [name for name in RUN_CONTROLS if name in driver and name not in passed]
    return {k: v for k, v in driver.items() if k not in withheld}, withheld


def _substitute(cmd: Sequence[str], run: int, seed: int) -> List[str]:
    return [str(a).replace("{run}", str(run)).replace("{seed}", str(seed)) for a in cmd]


def _expected(settings: Mapping[str, Any], trial_seed: int) -> Dict[str, Any]:
    env = roles.study_env(settings["vary"], trial_seed, settings["fixed_seed"])
    run_seed = int(env[roles.TRAIN_SEED_ENV])
    return {"run_env": env, "run_seed": run_seed, **roles.role_seeds(run_seed, env)}


def _same_command(log: Log, cmd: Sequence[str]) -> bool:
    """Whether a log was written by ``cmd``: the training process' ``sys.argv`` after its program
    (``train.py --data ...``, ``train model=...``) is the end of ``cmd`` (after ``python``, the ``yolo`` path)."""
    argv = [str(a) for a in log.header.get("command") or []]
    if not argv:
        return False
    tail = argv[1:]
    return len(tail) < len(cmd) and list(cmd[len(cmd) - len(tail):]) == tail


def _finished(log_path: Path) -> Optional[Log]:
    try:
        log = read_log(log_path)
    except (FingerprintError, OSError):
        return None
    return log if log.complete and log.validations else None


def _check_run(log: Log, index: int, expected: Mapping[str, Any], output: Path) -> None:
    """The run trained with the seeds the study handed it, else a :class:`StudyError` saying why not."""
    seeds = log.header.get("seeds")
    if not isinstance(seeds, dict) and not expected["run_env"].keys() - {roles.TRAIN_SEED_ENV}:
        # a script of its own (yolo_det.configure(seed=...)): the seed it applied is all there is to check
        seeds = {"run": log.header.get("seed"), **{r: log.header.get("seed") for r in roles.ROLES}}
    if not isinstance(seeds, dict):
        raise StudyError(f"run {index}'s log records no role seeds: this yolo-det is older than the study or "
                         f"the command trains without yolo-det's integration; its output is in {output}")
    got = {r: seeds.get(r) for r in roles.ROLES}
    want = {r: expected[r] for r in roles.ROLES}
    if seeds.get("run") != expected["run_seed"] or got != want:
        raise StudyStop(
            f"run {index} trained with seed {seeds.get('run')} (roles {got}), not the seed the study handed it "
            f"({expected['run_seed']}, roles {want}): the command sets its own seed. Remove --seed / seed= from it, "
            "or write --seed {seed} (seed={seed} for Ultralytics)")


def run_study(cmd: Sequence[str], n: int, base_seed: int = 0, vary: str = "all", workdir: os.PathLike = "yolo-det-seeds",
              mode: str = "strict", env: Optional[Mapping[str, str]] = None, cwd: Optional[os.PathLike] = None,
              progress: Optional[Callable[[str], None]] = None, poll: float = 0.5,
              timeout: Optional[float] = None, parallel: int = 1, gpus_per_seed: Optional[int] = None,
              executor: str = "local", ray_address: Optional[str] = None,
              events: Optional[Callable[[str, int, int], None]] = None,
              slurm: Optional[Mapping[str, Any]] = None, pass_env: Sequence[str] = ()) -> Study:
    """Run ``cmd`` under each seed still missing from ``workdir``'s study and return the study.

    A folder holding another study (other command, base seed, ``vary`` or mode) is refused with
    nothing changed. ``parallel`` > 1 runs that many seeds at a time on a work queue (a free slot starts
    the next seed), ``gpus_per_seed`` GPUs each (0: CPU slots; :func:`executors.local_slots`). A seed
    that fails is recorded under ``failed`` while the others go on; the first failure is raised at the end.
    ``executor="ray"``: each seed a Ray task (``ray_address``: an existing cluster, else a local one with
    ``parallel`` CPUs), ``gpus_per_seed`` GPUs each. ``events(what, run, seed)``: ``start``, ``done``,
    ``failed`` of each seed (a progress display, :class:`progress.Board`). ``executor="slurm"``: one SLURM job
    array through submitit, ``slurm`` its ``SlurmExecutor`` parameters (:func:`slurm.parameters`).

    Every seed, wherever it runs, starts from ``env`` (default: this environment) without yolo-det's per-run
    controls (:func:`seed_environment`) except those in ``pass_env``; study.json's ``settings["env"]`` names both.
    A seed that resumed inexactly or ran under another mode is recorded as tainted (:meth:`Study.tainted`).

    A seed whose earlier attempt was stopped after a checkpoint (preempted, requeued, killed, out of time)
    resumes from it with the release's resume command (``run<i>/run-info.json``; under strict and warn the
    resume is exact), in ``run<i>/resume<k>/``; it is never started over once a checkpoint exists.
    """
    cmd = [str(c) for c in cmd]
    if not cmd:
        raise StudyError("no training command given")
    report = progress or (lambda _message: None)
    tell = events or (lambda _what, _index, _seed: None)
    settings = {"command": cmd, "mode": mode, "cwd": str(Path(cwd or os.getcwd()).resolve()),
                **plan(base_seed, n, vary)}
    folder = Path(workdir).resolve()
    study = Study(settings)
    if (folder / STUDY_JSON).is_file():
        earlier = load_study(folder)
        differ = [k for k in SAME_STUDY if earlier.settings.get(k) != settings.get(k)]
        if differ:
            raise StudyError(f"{folder} holds another study (its {', '.join(differ)} differ"
                             f"{_show(earlier.settings, settings, differ)}); continue it with the same command or "
                             "choose another --workdir")
        done = {(r.index, r.seed): r for r in earlier.runs}
        study.runs = [done[(i, s)] for i, s in enumerate(settings["seeds"], 1) if (i, s) in done]
    base_env, withheld = seed_environment(dict(os.environ if env is None else env), pass_env)
    settings["env"] = {"passed": sorted(set(pass_env)), "withheld": withheld}
    if withheld:
        report(f"not handed to the seeds: {', '.join(withheld)} (yolo-det's per-run controls in this environment; "
               "--pass-env NAME hands one on)")
    todo = []
    kept = {r.index for r in study.runs}
    for index, seed in enumerate(settings["seeds"], 1):
        if index in kept:
            report(f"seed {seed} (run {index}/{n}): finished earlier, kept")
            tell("done", index, seed)
            continue
        latest = ([folder / f"run{index}"] + attempts(folder / f"run{index}"))[-1]
        log = _finished(latest / LOG_NAME)
        expected = _expected(settings, seed)
        same = (latest / RESUMED_NAME).is_file() if latest.name.startswith("resume") else \
            log is not None and _same_command(log, _substitute(cmd, index, expected["run_seed"]))
        if log is not None and same \
                and (log.header.get("seeds") or {"run": log.header.get("seed")}).get("run") == expected["run_seed"]:
            _check_run(log, index, expected, folder / f"run{index}")
            kept_run = _study_run(_with_earlier_validations(log, folder / f"run{index}"), index, seed)
            kept_run.tainted = taints(log, folder / f"run{index}", mode)
            study.runs.append(kept_run)
            report(f"seed {seed} (run {index}/{n}): its log was complete, kept")
            tell("done", index, seed)
            continue
        todo.append((index, seed, expected))
    study.runs.sort(key=lambda r: r.index)
    _own_folders(study.runs)
    study.write(folder)

    def one(index: int, seed: int, expected: Mapping[str, Any], device_env: Mapping[str, str]) -> StudyRun:
        run_env = {**base_env, **_launch_env(mode, expected["run_seed"]), **expected["run_env"], **device_env}
        for role in roles.ROLES:
            if roles.ROLE_ENV[role] not in expected["run_env"]:
                run_env.pop(roles.ROLE_ENV[role], None)
        run_env.pop(ENV_VAR, None)

        def say(message: str) -> None:
            report(f"seed {seed} " + message)

        run_dir = folder / f"run{index}"
        info = run_dir / INFO_NAME
        point = resume_point(run_dir) if mode != "off" else None
        run_env[INFO_ENV] = str(info)
        if point is None:
            info.unlink(missing_ok=True)
            for old in run_dir.glob("resume*/"):
                shutil.rmtree(old, ignore_errors=True)
            result = run_once(_substitute(cmd, index, expected["run_seed"]), index, n, run_dir, run_env, cwd, say,
                               poll, timeout)
        else:
            attempt = run_dir / f"resume{len(attempts(run_dir)) + 1}"
            say(f"(run {index}/{n}): resuming from {point['checkpoint']} ({point.get('epochs_done', '?')} epochs done)")
            _resumed(attempt, point)
            result = run_once(point["resume_command"], index, n, attempt, run_env, point.get("cwd") or cwd, say,
                               poll, timeout)
        log = _finished(result.log)
        if log is None:
            raise StudyError(f"run {index} (seed {seed}) finished but its log {result.log} has no validation or is "
                             f"incomplete; its output is in {result.output}")
        _check_run(log, index, expected, result.output)
        run = _study_run(_with_earlier_validations(log, run_dir), index, seed)
        run.tainted = taints(log, run_dir, mode)
        if run.tainted:
            say(f"(run {index}/{n}) did not run as the study says: {'; '.join(run.tainted)}")
        resumes = [json.loads((a / RESUMED_NAME).read_text(encoding="utf-8")) for a in attempts(run_dir)
                   if (a / RESUMED_NAME).is_file()]
        if resumes:
            run.placement = {**(run.placement or {}), "resumed": resumes}
        return run

    if executor not in executors.EXECUTORS:
        raise StudyError(f"--executor {executor!r} is not one of {', '.join(executors.EXECUTORS)}")
    slots = [{}] if executor != "local" else \
        device_slots(parallel, base_env, gpus_per_seed=gpus_per_seed) if len(todo) > 1 or gpus_per_seed else [{}]

    def remote(index: int, seed: int, expected: Mapping[str, Any], slot: Mapping[str, str]) -> StudyRun:
        started = executors.now()
        run = one(index, seed, expected, slot)
        run.placement = {**executors.placement(slot, started, executors.now()), **(run.placement or {})}
        return run

    def placed(index: int, seed: int, expected: Mapping[str, Any], slot: Mapping[str, str]) -> StudyRun:
        tell("start", index, seed)
        return remote(index, seed, expected, slot)

    def done(item: tuple, run: Optional[StudyRun], error: Optional[BaseException]) -> None:
        tell("failed" if error is not None else "done", item[0], item[1])
        if error is not None:
            study.failed.append({"run": item[0], "seed": item[1], "error": str(error)})
            report(f"seed {item[1]} (run {item[0]}/{n}) failed: {error}")
        else:
            study.runs = sorted(study.runs + [run], key=lambda r: r.index)
            _own_folders(study.runs)
        study.write(folder)

    if executor == "ray":  # a Ray task or SLURM job runs elsewhere: its start is told when it is submitted
        try:
            errors = executors.run_ray(remote, todo, done, gpus_per_seed or 0, ray_address, num_cpus=max(parallel, 1))
        except executors.SlotError as exc:
            raise StudyError(str(exc)) from None
    elif executor == "slurm":
        from . import slurm as _slurm

        params = dict(slurm) if slurm is not None else _slurm.parameters(parallel, gpus_per_seed)
        try:
            errors = _slurm.run_slurm(remote, todo, folder, done, params,
                                      submitted=lambda ids: report(f"SLURM jobs {', '.join(ids)} (one per seed; "
                                                                   f"logs in {folder / 'slurm'})"),
                                      started=lambda item: tell("start", item[0], item[1]))
        except _slurm.SlurmError as exc:
            raise StudyError(str(exc)) from None
    else:
        per_seed = len([d for d in slots[0].get("CUDA_VISIBLE_DEVICES", "").split(",") if d])
        shared = None
        if per_seed:  # GPU slots: taken from the GPUs other studies here leave free
            shared = executors.SharedGpus(executors.visible_gpus(base_env), per_seed,
                                          executors.lock_folder(base_env))
        errors = executors.run_queue(placed, todo, slots, done, fatal=(StudyStop,), shared=shared)
    if errors:
        raise errors[0]
    return study


RESUMED_NAME = "resumed.json"


def attempts(run_dir: Path) -> List[Path]:
    """A seed's resumed attempts (``run<i>/resume1``, ``resume2``, ...), in order."""
    found = [p for p in Path(run_dir).glob("resume*") if p.is_dir() and p.name[6:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[6:]))


def resume_point(run_dir: Path) -> Optional[Dict[str, Any]]:
    """Where an earlier, unfinished attempt of a seed can be resumed: its run info (``run-info.json``, written by
    yolo-det's integrations at every checkpoint) naming a checkpoint that is on disk and the release's resume
    command; None where there is none or it is the training's last (the seed starts over: under strict it gives
    the same run)."""
    try:
        info = json.loads((Path(run_dir) / INFO_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not info.get("resume_command") or not info.get("checkpoint"):
        return None
    if not Path(info["checkpoint"]).is_file():
        return None
    done, total = info.get("epochs_done"), info.get("epochs")
    if isinstance(done, int) and isinstance(total, int) and done >= total:
        return None  # its last checkpoint is the final one: the releases refuse to resume it, the seed reruns
    return info


def _other_mode(recorded: Optional[str], mode: Optional[str]) -> Optional[str]:
    """The taint of a run recorded under ``recorded`` in a study of ``mode`` (None: the same, or unknown)."""
    if not recorded or not mode or recorded == mode:
        return None
    return f"ran under {recorded}, not the study's {mode}"


def _attempt_name(folder: Path, run_dir: Path) -> str:
    return "the first attempt" if folder == run_dir else f"attempt {folder.name[6:]} ({folder.name}/)"


def _record_of(log: Log) -> Dict[str, Any]:
    """The run record (``determinism.json``) the final attempt wrote: where its log header says, else in its run
    folder; {} where there is none."""
    where = log.header.get("report") or (Path(log.final.run_dir) / "determinism.json"
                                         if log.final is not None and log.final.run_dir else None)
    try:
        data = json.loads(Path(where).read_text(encoding="utf-8")) if where else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def taints(log: Log, run_dir: Path, mode: str) -> List[str]:
    """Why a seed did not run as its study says (empty: it did): a resume the integrations reported not exact in
    any attempt's output (a lost attempt writes no run record) or in the final run record, and a mode (of the run
    or of its backward passes) other than the study's in an attempt's log header or the run record."""
    folders = [run_dir] + attempts(run_dir)
    final = next((f for f in folders if (f / LOG_NAME).resolve() == Path(log.path).resolve()), folders[-1])
    inexact: Dict[Path, str] = {}
    modes = []
    for folder in folders:
        try:
            text = (folder / OUTPUT_NAME).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            if line.startswith(INEXACT_RESUME):
                inexact.setdefault(folder, line[len(INEXACT_RESUME):].split("; it resumes")[0].strip())
        try:
            with LogReader(folder / LOG_NAME) as reader:
                modes.append(reader.header.get("mode"))
        except (FingerprintError, OSError, ValueError):
            continue
    record = _record_of(log)
    resume = record.get("resume") if isinstance(record.get("resume"), dict) else {}
    if resume.get("exact") is False:
        inexact.setdefault(final, "; ".join(str(p) for p in resume.get("problems") or []) or "not exact")
    found = [f"resumed inexactly ({_attempt_name(f, run_dir)}: {why})" for f, why in inexact.items()]
    for recorded in modes + [record.get("mode")]:
        other = _other_mode(recorded, mode)
        if other and other not in found:
            found.append(other)
    backward = (record.get("settings") or {}).get("backward_mode") if isinstance(record.get("settings"), dict) else None
    if backward and backward != mode and record.get("mode") == mode:
        found.append(f"ran its backward passes under {backward}, not the study's {mode}")
    return found


def _resumed(attempt: Path, point: Mapping[str, Any]) -> None:
    """Record in a resumed attempt's folder what it resumed from (the seed's record in study.json lists them)."""
    attempt.mkdir(parents=True, exist_ok=True)
    record = {"attempt": int(attempt.name[6:]), "checkpoint": str(point["checkpoint"]),
              "epochs_done": point.get("epochs_done"), "host": os.uname().nodename,
              "slurm_job": (f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
                            if os.environ.get("SLURM_ARRAY_JOB_ID") else os.environ.get("SLURM_JOB_ID"))}
    _atomic(attempt / RESUMED_NAME, json.dumps(record, indent=2) + "\n")


def _with_earlier_validations(log: Log, run_dir: Path) -> Log:
    """A resumed seed's last log with the validations of its earlier attempts before it (per epoch, the latest
    attempt's: an epoch validated and then lost to the kill is validated again), so its best epoch is the run's."""
    parts = [run_dir / LOG_NAME] + [a / LOG_NAME for a in attempts(run_dir)]
    if len(parts) == 1 or Path(log.path).resolve() != parts[-1].resolve():
        return log
    by_epoch: Dict[Any, Any] = {}
    for part in parts[:-1]:
        try:
            earlier = read_log(part)
        except (FingerprintError, OSError):
            continue
        for v in earlier.validations:
            by_epoch[v.epoch] = v
    for v in log.validations:
        by_epoch[v.epoch] = v
    merged = [by_epoch[k] for k in sorted(by_epoch, key=lambda e: (e is None, e if e is not None else 0))]
    return dataclasses.replace(log, validations=merged)


def _own_folders(runs: Sequence[StudyRun]) -> None:
    """Every run wrote its own output folder, else a :class:`StudyError`: runs sharing one (a fixed ``--name``
    with ``--exist-ok``/``exist_ok=True``) overwrite each other's results.csv, so a run's metrics could be
    another run's."""
    seen: Dict[str, int] = {}
    for run in runs:
        if run.run_dir is None:
            continue
        key = os.path.normcase(os.path.realpath(run.run_dir))
        if key in seen:
            raise StudyStop(f"runs {seen[key]} and {run.index} wrote the same output folder {run.run_dir}: their "
                             "metrics cannot be told apart. Put {run} in the command's output name (--name exp{run}, "
                             "name=exp{run}) and run the study again in a new --workdir")
        seen[key] = run.index


def share_first_run(source: Study, workdir: os.PathLike) -> bool:
    """Give the study in ``workdir`` ``source``'s run 1: under every ``--vary`` run 1 is the plain run of the
    first seed, so a ``--decompose`` trains it once. Copies its log unless ``workdir`` has one for run 1."""
    first = next((r for r in source.runs if r.index == 1), None)
    target = Path(workdir) / "run1" / LOG_NAME
    if first is None or target.exists() or not Path(first.log).is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(first.log, target)
    return True


def _show(a: Mapping[str, Any], b: Mapping[str, Any], keys: Sequence[str]) -> str:
    parts = [f"{k}: {a.get(k)!r} there, {b.get(k)!r} now" for k in keys if k != "command"]
    return (": " + "; ".join(parts)) if parts else ""


def _launch_env(mode: str, seed: int) -> Dict[str, str]:
    return environment.launcher_env(mode, seed, {})


def hardware_of(header: Mapping[str, Any]) -> str:
    """A run's hardware from its fingerprint header: its GPU models with their counts (``2 x NVIDIA A100``),
    ``CPU`` where it saw none, ``unknown`` where the header does not say."""
    if "gpus" not in header:
        return "unknown"
    gpus = Counter(str(g) for g in header.get("gpus") or [])
    return ", ".join(f"{n} x {name}" for name, n in sorted(gpus.items())) if gpus else "CPU"


def _study_run(log: Log, index: int, seed: int) -> StudyRun:
    found = run_metrics(log)
    return StudyRun(index, seed, dict(log.header.get("seeds") or {}), str(log.path), found["run_dir"],
                    found["metrics"], found["best"], found["best_epoch"], log.header.get("mode"),
                    log.header.get("initial_weights"), {"hardware": hardware_of(log.header)})


def visible_gpus(env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The GPUs runs may be given (``$CUDA_VISIBLE_DEVICES`` entries, else every device torch counts)."""
    return executors.visible_gpus(env)


def device_slots(k: int, env: Optional[Mapping[str, str]] = None, gpus: Optional[List[str]] = None,
                 gpus_per_seed: Optional[int] = None) -> List[Dict[str, str]]:
    """The environment of each of ``k`` seeds at a time (:func:`executors.local_slots`); a :class:`StudyError`
    where the visible devices cannot make them."""
    try:
        return executors.local_slots(k, gpus_per_seed, env, gpus)
    except executors.SlotError as exc:
        raise StudyError(str(exc)) from None


# -- decomposition -------------------------------------------------------------------------------
def decompose(studies: Mapping[str, Study], metric: str, confidence: float = statistics.CONFIDENCE) -> Dict[str, Any]:
    """Each source's share of a metric's variance, from one study per ``--vary`` role (and ``all``).

    A role's variance is its study's sample variance, with its chi-square interval; its share is that
    variance over the sum of the three (the sources as if independent), with an interval that holds while
    all three variance intervals hold (each at ``1 - (1 - confidence) / 3``, Bonferroni): the share's lowest
    value with its own variance at its low end and the others at their high ends, and the reverse. ``all``
    (every source at once) is reported beside them: a total well above the sum says the sources interact.
    A source whose runs are all equal is not resolved at the metric's ``resolution`` (estimated from every
    study's values): not a variance of 0 but one below what that resolution can show, so its variance
    interval runs from 0 to the chi-square bound of the largest spread hidden within one step, and it has no
    share, only a share interval from 0. A metric no study has is a :class:`StudyError`; a source without a
    variance (fewer than two runs with the metric) is named in ``missing`` and no shares are given, rather
    than shares of the others alone.
    """
    known = {n for study in studies.values() for n in study.metric_names()}
    known |= {f"best:{n}" for study in studies.values() for r in study.runs for n in r.best}
    if metric not in known:
        raise StudyError(f"metric {metric!r} is not in the studies; they have: {', '.join(sorted(known)) or 'none'}")
    each = 1.0 - (1.0 - confidence) / len(roles.ROLES)
    step = statistics.resolution([v for study in studies.values() for v in study.values(metric)])
    rows = {vary: _source_row(studies[vary].values(metric), each, step) for vary in roles.VARY if vary in studies}
    missing = [r for r in roles.ROLES if r not in rows or rows[r]["variance"] is None]
    total = None if missing else sum(rows[r]["variance"] for r in roles.ROLES)
    highs = [None if total is None else rows[r]["variance_ci"][1] for r in roles.ROLES]
    if None not in highs and any(h > 0 for h in highs):  # None: all values 0, no resolution to bound them
        for role in roles.ROLES:
            others = [r for r in roles.ROLES if r != role]
            low, high = rows[role]["variance_ci"]
            rows[role]["share"] = rows[role]["variance"] / total if rows[role]["resolved"] and total > 0 else None
            rows[role]["share_ci"] = [_ratio(low, low + sum(rows[o]["variance_ci"][1] for o in others)),
                                      _ratio(high, high + sum(rows[o]["variance_ci"][0] for o in others))]
    return {"metric": metric, "sources": rows, "sum_of_sources": total, "missing": missing,
            "confidence": confidence, "resolution": step,
            "unresolved": [r for r in roles.VARY if r in rows and rows[r]["resolved"] is False]}


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _source_row(values: List[float], each: float, step: Optional[float]) -> Dict[str, Any]:
    """One source's runs, standard deviation and variance with its chi-square interval at ``each``; runs all
    equal are ``resolved`` False, their interval from 0 to the bound of a spread hidden within ``step``."""
    summary = statistics.summarize(values)
    row = {"n": summary.n, "std": summary.std, "variance": None, "variance_ci": None, "resolved": summary.resolved,
           "share": None, "share_ci": None}
    if summary.std is None:
        return row
    df = summary.n - 1
    row["variance"] = summary.std ** 2
    if summary.resolved:
        row["variance_ci"] = [row["variance"] * df / stats.chi2.ppf(1 - (1 - each) / 2, df),
                              row["variance"] * df / stats.chi2.ppf((1 - each) / 2, df)]
    else:
        hidden = statistics.unresolved_variance_bound(step, summary.n)
        row["variance_ci"] = [0.0, None if hidden is None else hidden * df / stats.chi2.ppf((1 - each) / 2, df)]
    return row


__all__ = ["RUN_CONTROLS", "STUDY_CSV", "STUDY_JSON", "Study", "StudyError", "StudyRun", "decompose", "device_slots",
           "hardware_of", "higher_is_better", "load_study", "plan", "run_metrics", "run_study", "seed_environment",
           "share_first_run", "taints", "visible_gpus"]
