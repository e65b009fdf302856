"""The SLURM executor of a seed study, through submitit: one job array per study, requeued on preemption.

Every seed still to run is one task of a job array (``%a`` = its place in the array), at most ``parallel`` of
them running at once (``--array=...%K``). Each task's folder is ``DIR/slurm/<array>_<task>/`` (submitit's
pickles, ``*_log.out``/``*_log.err``). A task runs the same per-seed function as the local queue, in the same
study folder (a shared file system on a multi-node cluster), and sends back the seed's record; the driver
(``yolo-det seeds``) waits, writing ``study.json`` as each task ends.

Preemption and time-out: SLURM sends ``USR2`` ``signal_delay_s`` seconds before it stops the job (submitit's
``--signal``); submitit's handler then requeues the task (``scontrol requeue``) with the same arguments
(:class:`SeedJob` is checkpointable). The requeued task finds the seed's run info (``run<i>/run-info.json``:
its last checkpoint and the release's resume command) and resumes it with yolo-det's exact resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core import atomic
from ..core.extras import install_hint

#: submitit's SlurmExecutor parameters the command-line options set (a config file may set any of them).
OPTION_KEYS = ("partition", "time", "gpus_per_node", "cpus_per_task", "mem", "array_parallelism")
#: The study's jobs (``DIR/slurm/jobs.json``: job id -> run index, seed), for a later driver to adopt.
JOBS_NAME = "jobs.json"
#: squeue states of a task that is still to end (anything else without a result: it ended without one).
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
          "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED")


class SlurmError(ValueError):
    """SLURM cannot run the study (no submitit, no SLURM, a bad option or config file); the message says why."""


def load_config(path: Optional[os.PathLike]) -> Dict[str, Any]:
    """A config file's submitit ``SlurmExecutor`` parameters (YAML or JSON mapping; ``slurm_`` prefixes dropped)."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SlurmError(f"cannot read the SLURM config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SlurmError(f"the SLURM config file {path} must hold a mapping of submitit SlurmExecutor parameters "
                         f"(partition: gpu, time: 240, mem: 32G, ...), not {type(data).__name__}")
    return {str(k)[6:] if str(k).startswith("slurm_") else str(k): v for k, v in data.items()}


def parameters(parallel: int, gpus_per_seed: Optional[int], partition: Optional[str] = None,
               time_min: Optional[int] = None, config: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The submitit ``SlurmExecutor`` parameters of a study: the config file's, then the options over them."""
    params: Dict[str, Any] = {"job_name": "yolo-det-seeds", "nodes": 1, "ntasks_per_node": 1,
                              "time": 60, "signal_delay_s": 90, "max_num_timeout": 10,
                              "stderr_to_stdout": False}
    params.update(dict(config or {}))
    params["array_parallelism"] = max(int(parallel), 1)
    if gpus_per_seed:
        params["gpus_per_node"] = int(gpus_per_seed)
    if partition:
        params["partition"] = partition
    if time_min is not None:
        if time_min < 1:
            raise SlurmError(f"--slurm-time must be at least 1 minute, got {time_min}")
        params["time"] = int(time_min)
    return params


class SeedJob:
    """One seed as a checkpointable submitit function: on preemption or time-out submitit requeues it with the
    same arguments, and the per-seed ``task`` resumes the seed from its run info."""

    def __init__(self, task: Callable[..., Any]) -> None:
        self.task = task

    def __call__(self, *item: Any) -> Tuple[str, Any]:
        """Run the seed in this SLURM task; errors come back as text (their classes may not unpickle)."""
        # the command gets the driver's environment (sbatch exports it) with this job's SLURM variables and GPUs
        slot = {k: v for k, v in os.environ.items() if k.startswith("SLURM")}
        slot["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        try:
            result = self.task(*item, slot)
        except Exception as exc:  # noqa: BLE001 - reported by the driver as the seed's failure
            return "error", f"{type(exc).__name__}: {exc}"
        where = getattr(result, "placement", None)
        if where is not None:
            where.update(executor="slurm", job=_job_id(), node=os.environ.get("SLURMD_NODENAME"),
                         preemptions=int(os.environ.get("SLURM_RESTART_COUNT") or 0))
        return "ok", result

    def checkpoint(self, *item: Any) -> Any:
        """Requeue with the same arguments (the resume state is the seed's own checkpoint on disk)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *item)


def _job_id() -> Optional[str]:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def _active(job_ids: Sequence[str]) -> Optional[Dict[str, str]]:
    """The state of each listed job still in SLURM's queue (None where squeue does not answer)."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(arrays)], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return {} if "Invalid job id" in out.stderr else None
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        states[job] = state
    return states


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").rstrip().split("\n")[-lines:])
    except OSError:
        return ""


def check_cluster() -> None:
    """submitit is installed and SLURM answers (``sinfo``), else a :class:`SlurmError` saying what to do."""
    try:
        import submitit  # noqa: F401 - the jobs are submitted through it
    except ImportError:
        raise SlurmError(f"--executor slurm needs submitit: {install_hint('slurm')}") from None
    try:
        answer = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"SLURM does not answer here (sinfo: {exc}): run yolo-det seeds on a SLURM login node, "
                         "or start a one-node SLURM with scripts/slurm_local.sh") from None
    if answer.returncode != 0:
        raise SlurmError(f"SLURM does not answer here (sinfo: {answer.stderr.strip()}): run on a SLURM login node, "
                         "or start a one-node SLURM with scripts/slurm_local.sh")


def run_slurm(task: Callable[..., Any], items: Sequence[Tuple[Any, ...]], folder: os.PathLike,
              done: Callable[[Tuple[Any, ...], Any, Optional[BaseException]], None],
              params: Mapping[str, Any], poll: float = 2.0,
              submitted: Optional[Callable[[List[str]], None]] = None,
              started: Optional[Callable[[Tuple[Any, ...]], None]] = None) -> List[BaseException]:
    """Submit ``task(*item, slot)`` for every item as one SLURM job array and call ``done(item, result, error)``
    as each task ends; returns the errors. ``submitted(job_ids)`` once the array is queued, ``started(item)``
    when SLURM first shows its job running."""
    check_cluster()
    if not items:
        return []
    record = Path(folder) / "slurm" / JOBS_NAME
    pending = _adopt(items, record, Path(folder) / "slurm" / "%j")
    left = [tuple(item) for item in items if int(item[0]) not in {int(it[0]) for _, it in pending.values()}]
    if left:
        pending.update(_submit(task, left, folder, params))
        _save_jobs(record, pending)
    if submitted is not None:
        submitted(list(pending))
    return _wait(pending, done, poll, started)


def _save_jobs(record: Path, pending: Mapping[str, Tuple[Any, Tuple[Any, ...]]]) -> None:
    """``DIR/slurm/jobs.json``: each job's run index and seed (a later driver adopts the jobs still queued)."""
    try:
        known = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    known.update({job_id: [int(item[0]), int(item[1])] for job_id, (_, item) in pending.items()})
    atomic.write_text(record, json.dumps(known, indent=2) + "\n")


def _adopt(items: Sequence[Tuple[Any, ...]], record: Path, folder: Path) -> Dict[str, Tuple[Any, Tuple[Any, ...]]]:
    """The jobs an earlier driver of this study submitted that SLURM still runs or queues (the driver was stopped,
    the login node restarted), for the seeds still to run: waited for, not submitted again."""
    from submitit.slurm.slurm import SlurmJob

    try:
        known = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    wanted = {int(item[0]): tuple(item) for item in items}
    candidates = {j: v for j, v in known.items() if int(v[0]) in wanted and int(v[1]) == int(wanted[int(v[0])][1])}
    states = _active(list(candidates)) if candidates else {}
    adopted: Dict[str, Tuple[Any, Tuple[Any, ...]]] = {}
    for job_id, (index, _seed) in candidates.items():
        if (states or {}).get(job_id) in ACTIVE:
            adopted[job_id] = (SlurmJob(folder=folder, job_id=job_id, tasks=(0,)), wanted[int(index)])
    return adopted


def _submit(task: Callable[..., Any], items: Sequence[Tuple[Any, ...]], folder: os.PathLike,
            params: Mapping[str, Any]) -> Dict[str, Tuple[Any, Tuple[Any, ...]]]:
    """One job array of ``items``; the jobs by id."""
    import submitit

    params = dict(params)
    timeouts = int(params.pop("max_num_timeout", 3))
    executor = submitit.SlurmExecutor(folder=Path(folder) / "slurm" / "%j", max_num_timeout=timeouts)
    try:
        executor.update_parameters(**params)
    except (ValueError, TypeError) as exc:
        raise SlurmError(f"bad SLURM parameters: {exc}") from None
    columns = list(zip(*[tuple(item) for item in items]))
    try:
        jobs = executor.map_array(SeedJob(task), *columns)
    except Exception as exc:  # noqa: BLE001 - sbatch refused (partition, time, GPUs): nothing was queued
        raise SlurmError(f"SLURM refused the job array: {exc}") from None
    return {job.job_id: (job, tuple(item)) for job, item in zip(jobs, items)}


def _wait(pending: Dict[str, Tuple[Any, Tuple[Any, ...]]],
          done: Callable[[Tuple[Any, ...], Any, Optional[BaseException]], None], poll: float,
          started: Optional[Callable[[Tuple[Any, ...]], None]] = None) -> List[BaseException]:
    """Wait for every job, ``done(item, result, error)`` as each ends; the errors."""
    errors: List[BaseException] = []
    gone: Dict[str, float] = {}
    running: set = set()
    while pending:
        time.sleep(poll)
        states = _active(list(pending))
        for job_id, (job, item) in list(pending.items()):
            if job_id not in running and (states or {}).get(job_id) in ("RUNNING", "COMPLETING"):
                running.add(job_id)
                if started is not None:
                    started(item)
            finished = job.paths.result_pickle.exists()
            if not finished:
                if states is None or states.get(job_id) in ACTIVE:
                    gone.pop(job_id, None)
                    continue
                first = gone.setdefault(job_id, time.monotonic())
                if time.monotonic() - first < 3 * poll + 5:  # the result file may lag behind the queue
                    continue
            del pending[job_id]
            if job_id not in running and started is not None:  # ended between two looks at the queue
                started(item)
            result, error = None, None
            if finished:
                try:
                    status, value = job.result()
                except Exception as exc:  # noqa: BLE001 - submitit's own failure (UncompletedJobError ...)
                    status, value = "error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                if status == "ok":
                    result = value
                else:
                    error = SeedFailed(f"SLURM job {job_id}: {value} (its logs: {job.paths.folder})")
            else:
                error = SeedFailed(f"SLURM job {job_id} ended without a result ({states.get(job_id, 'gone')}: "
                                   f"cancelled, out of time, out of memory or node failure); its log "
                                   f"{job.paths.stderr}:\n{_tail(job.paths.stderr)}")
            try:
                done(item, result, error)
            except Exception as exc:  # noqa: BLE001 - raised by the caller
                error = exc
            if error is not None:
                errors.append(error)
    return errors


class SeedFailed(RuntimeError):
    """A seed's SLURM task failed or ended without a result (the message says which job and where its log is)."""


__all__ = ["ACTIVE", "JOBS_NAME", "OPTION_KEYS", "check_cluster", "SeedFailed", "SeedJob", "SlurmError", "load_config", "parameters", "run_slurm"]
