"""Seed studies: one training command run under N seeds (:func:`run_study`), each run's metrics, their spread.

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

This module runs a study: the seeds' plan and environment, each seed's run (resumed where an attempt was stopped
after a checkpoint), the checks that it ran with its seed in its own folder. What a study holds and its files are
:mod:`.results`, a run's metrics :mod:`.metrics`, resumed attempts :mod:`.resumes`, taints :mod:`.taints`, the
variance decomposition :mod:`.decomposition`; their names stay importable from here (``yolo_det.studies.study``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core import env_names, environment, roles
from ..core.seeding import trial_seeds

from . import executors
from ..record.log import ENV_VAR, FingerprintError, Log, read_log
from ..proof.runner import LOG_NAME, run_once
# the parts of a study in their own modules; their names stay importable from here (the old path)
from .decomposition import decompose  # noqa: F401
from .metrics import NOT_METRICS, _study_run, hardware_of, run_metrics  # noqa: F401
from .results import (SCHEMA, STUDY_CSV, STUDY_JSON, Study, StudyError, StudyRun, StudyStop,  # noqa: F401
                      _other_mode, higher_is_better, load_study)
from .resumes import (INFO_ENV, INFO_NAME, RESUMED_NAME, _resumed, _with_earlier_validations,  # noqa: F401
                      attempts, resume_point)
from .taints import INEXACT_RESUME, taints  # noqa: F401

#: The keys of study.json's ``settings`` that must match for a study to be continued in its folder.
SAME_STUDY = ("command", "base_seed", "vary", "mode")
#: yolo-det's variables that steer one run, not a study: the driver's values are not handed to the seeds unless
#: the study passes them on (``pass_env``; ``yolo-det seeds --pass-env NAME``). The study sets its own seeds, run
#: number, fingerprint log and run info for each seed.
RUN_CONTROLS = (
    env_names.RESUME,  # strict resumes inexactly
    env_names.KILL_AT, env_names.STOP_AFTER_EPOCH,  # a kill point, a stop after some epochs (tests, resume-at)
    env_names.CAPTURE, env_names.CAPTURE_STEP, env_names.CAPTURE_THROUGH, env_names.CAPTURE_READ,  # locate
    env_names.VERIFY_RUN, env_names.RANK,  # one run's number, one process' rank
    env_names.MODE_FROM_RUN,  # the study sets each seed's mode itself
)


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


def fixed_seed(cmd: Sequence[str]) -> Optional[str]:
    """A seed the command sets itself (``--seed 0``, ``--seed=0``, ``seed=0``), which no study seed could change;
    None where it gives none or gives the study's (``{seed}``)."""
    for i, arg in enumerate(cmd):
        key, eq, value = arg.partition("=")
        if key in ("--seed", "seed") and eq:
            given = value
        elif arg == "--seed" and i + 1 < len(cmd):
            given = cmd[i + 1]
        else:
            continue
        if "{seed}" not in given:
            return f"{key}{'=' if eq else ' '}{given}"
    return None


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
    fixed = fixed_seed(cmd)
    if fixed is not None:  # before any seed starts: every seed would train with this one
        raise StudyStop(f"the command sets its own seed ({fixed}): every run of the study would train with it. "
                        "Remove --seed / seed= from it, or write --seed {seed} (seed={seed} for Ultralytics)")
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




__all__ = ["RUN_CONTROLS", "STUDY_CSV", "STUDY_JSON", "Study", "StudyError", "StudyRun", "decompose", "device_slots",
           "hardware_of", "higher_is_better", "load_study", "plan", "run_metrics", "run_study", "seed_environment",
           "share_first_run", "taints", "visible_gpus"]
