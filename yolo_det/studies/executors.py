"""Where a study's seeds run: the local work queue (slots of G GPUs each, or CPU slots), or Ray.

A *slot* is the environment one seed's process gets (``CUDA_VISIBLE_DEVICES``). The queue gives the
next waiting seed to whichever slot is free first: a slow seed holds its own slot only, never the others
(no batch barrier). Each finished seed is handed to ``done`` at once (the study is rewritten then), and
a failed seed is reported while the other seeds go on.

Ray (:func:`run_ray`): each seed is a Ray task asking for ``gpus_per_seed`` GPUs, on an existing cluster
(``address``) or on a local one started for the study (``ray.init(num_cpus=...)``); the task starts the
same command in the same study folder (a shared file system on a multi-node cluster). SLURM: :mod:`.slurm`.
"""

from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core import env_names
from ..core.extras import install_hint

EXECUTORS = ("local", "slurm", "ray")
#: The folder of the GPU locks through which studies on one machine (or in one SLURM allocation) share its GPUs.
LOCKS_ENV = env_names.GPU_LOCKS


class SlotError(ValueError):
    """The slots asked for cannot be made from the visible devices; the message says what to do."""


def visible_gpus(env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The GPUs runs may be given (``$CUDA_VISIBLE_DEVICES`` entries, else every device torch counts)."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def local_slots(k: int, gpus_per_seed: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                gpus: Optional[List[str]] = None) -> List[Dict[str, str]]:
    """The environment of each of ``k`` seeds at a time.

    ``gpus_per_seed`` G >= 1: ``CUDA_VISIBLE_DEVICES`` of G GPUs each, no GPU in two slots (a seed that
    trains DDP over them starts torchrun itself); 0: CPU slots (no GPU visible to the runs). None (the
    default): one GPU each where ``k`` > 1, as ``--parallel`` always did, and the process's own devices for
    one seed at a time.
    """
    if k < 1:
        raise SlotError(f"--parallel must be at least 1, got {k}")
    if gpus_per_seed is not None and gpus_per_seed < 0:
        raise SlotError(f"--gpus-per-seed must be 0 (CPU slots) or more, got {gpus_per_seed}")
    if gpus_per_seed == 0:
        return [{"CUDA_VISIBLE_DEVICES": ""} for _ in range(k)]
    if gpus_per_seed is None:
        if k == 1:
            return [{}]
        gpus_per_seed = 1
    gpus = visible_gpus(env) if gpus is None else gpus
    need = k * gpus_per_seed
    if len(gpus) < need or (k > 1 and gpus_per_seed == 1 and len(gpus) < 2):
        if k > 1 and len(gpus) < 2:
            raise SlotError(f"--parallel {k} needs more than one visible GPU ({len(gpus)} visible); on CPU give "
                            f"each seed a CPU slot with --gpus-per-seed 0, or leave --parallel out")
        raise SlotError(f"--parallel {k} with {gpus_per_seed} GPU(s) per seed needs {need} visible GPUs, "
                        f"{len(gpus)} are visible ({','.join(gpus) or 'none'})")
    return [{"CUDA_VISIBLE_DEVICES": ",".join(gpus[i * gpus_per_seed:(i + 1) * gpus_per_seed])} for i in range(k)]


def lock_folder(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where seeds lock the GPUs they train on: ``$YOLO_DET_GPU_LOCKS``, else a folder of this user in the temporary
    folder, one per SLURM job where there is one (a job's GPU numbers are its own, another job's GPU 0 is another
    device)."""
    env = os.environ if env is None else env
    if env.get(LOCKS_ENV):
        return Path(env[LOCKS_ENV])
    job = env.get("SLURM_JOB_ID")
    return Path(tempfile.gettempdir()) / (f"yolo-det-gpu-locks-{os.getuid()}" + (f"-job{job}" if job else ""))


class SharedGpus:
    """The visible GPUs in groups of G, each seed taking a free group for its run: a lock file per GPU
    (``fcntl.flock``, released by the kernel when its holder dies), so that two studies started on one machine
    or in one SLURM allocation share its GPUs and never put two seeds on one GPU."""

    def __init__(self, gpus: Sequence[str], per_seed: int, folder: Path, poll: float = 0.5) -> None:
        self.groups = [list(gpus[i:i + per_seed]) for i in range(0, len(gpus) - per_seed + 1, per_seed)]
        self.folder, self.poll = Path(folder), poll
        self.folder.mkdir(parents=True, exist_ok=True)

    def _try(self, group: Sequence[str]) -> Optional[List[Any]]:
        import fcntl

        held = []
        for gpu in group:
            handle = open(self.folder / f"gpu{gpu}.lock", "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                for other in held:
                    other.close()
                return None
            held.append(handle)
        return held

    def take(self, stop: threading.Event) -> Optional[Tuple[Dict[str, str], Callable[[], None]]]:
        """A free group's slot and the call that gives it back; waits while every group is taken (by this study or
        another), None once ``stop`` is set."""
        while not stop.is_set():
            for group in self.groups:
                held = self._try(group)
                if held is not None:
                    def give_back(held: List[Any] = held) -> None:
                        for handle in held:
                            handle.close()
                    return {"CUDA_VISIBLE_DEVICES": ",".join(group)}, give_back
            stop.wait(self.poll)
        return None


def placement(slot: Mapping[str, str], started: float, ended: float) -> Dict[str, Any]:
    """Where and when a seed ran (for its record in study.json)."""
    devices = slot.get("CUDA_VISIBLE_DEVICES")
    return {"executor": "local", "host": socket.gethostname(),
            "devices": None if devices is None else (devices or "cpu"),
            "started": round(started, 3), "seconds": round(ended - started, 3)}


def run_queue(task: Callable[..., Any], items: Sequence[Tuple[Any, ...]], slots: Sequence[Mapping[str, str]],
              done: Callable[[Tuple[Any, ...], Any, Optional[BaseException]], None],
              fatal: Tuple[type, ...] = (), shared: Optional[SharedGpus] = None) -> List[BaseException]:
    """Run ``task(*item, slot)`` for every item, a free slot taking the next item; ``done(item, result, error)``
    after each (under a lock, in the order they finish). An error of a ``fatal`` type (from the task or from
    ``done``) starts no further item; the others are recorded and the queue goes on. Returns the errors in
    the order they happened. With ``shared``, ``len(slots)`` seeds run at a time, each on a group of GPUs it
    takes from ``shared`` for its run (free of other studies' seeds) instead of a fixed slot."""
    waiting: "queue.Queue[Tuple[Any, ...]]" = queue.Queue()
    for item in items:
        waiting.put(tuple(item))
    lock = threading.Lock()
    stop = threading.Event()
    errors: List[BaseException] = []

    claim = threading.Lock()  # a group of GPUs and the next item are taken together: the first item, the first group

    def worker(slot: Mapping[str, str]) -> None:
        while not stop.is_set():
            give_back: Callable[[], None] = lambda: None
            with claim:
                if shared is not None:
                    taken = shared.take(stop)
                    if taken is None:
                        return
                    slot, give_back = taken
                try:
                    item = waiting.get_nowait()
                except queue.Empty:
                    give_back()
                    return
            result, error = None, None
            try:
                result = task(*item, slot)
            except Exception as exc:  # noqa: BLE001 - reported through done(); the other seeds go on
                error = exc
            finally:
                give_back()
            with lock:
                try:
                    done(item, result, error)
                except Exception as exc:  # noqa: BLE001 - raised by the caller after the queue ended
                    error = exc
                if error is not None:
                    errors.append(error)
                    if isinstance(error, fatal):
                        stop.set()

    used = list(slots)[:max(len(items), 1)]
    if len(used) == 1:
        worker(used[0])
        return errors
    threads = [threading.Thread(target=worker, args=(slot,), name=f"yolo-det-seed-slot{i}", daemon=True)
               for i, slot in enumerate(used)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _ray_call(task: Callable[..., Any], item: Tuple[Any, ...], gpus: int) -> Tuple[str, Any]:
    """Inside a Ray task: the seed's slot is the GPUs Ray gave it (none: a CPU slot); errors come back as text."""
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()] if gpus else []
    slot = {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
    try:
        result = task(*item, slot)
    except Exception as exc:  # noqa: BLE001 - exceptions with their own constructors do not cross processes
        return "error", f"{type(exc).__name__}: {exc}"
    if getattr(result, "placement", None) is not None:
        result.placement["executor"] = "ray"
        result.placement["node"] = ray.get_runtime_context().get_node_id()
    return "ok", result


class SeedFailed(RuntimeError):
    """A seed's task failed on a remote worker (the message is the worker's error)."""


def run_ray(task: Callable[..., Any], items: Sequence[Tuple[Any, ...]],
            done: Callable[[Tuple[Any, ...], Any, Optional[BaseException]], None], gpus_per_seed: int = 0,
            address: Optional[str] = None, num_cpus: Optional[int] = None) -> List[BaseException]:
    """Run ``task(*item, slot)`` for every item as a Ray task with ``gpus_per_seed`` GPUs; ``done`` as each ends.

    ``address``: an existing cluster (``auto`` or ``ray://host:port``); else a local cluster for this call
    (``num_cpus`` CPUs, default all), shut down afterwards."""
    try:
        import ray
    except ImportError:
        raise SlotError(f"--executor ray needs Ray: {install_hint('ray')}") from None
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    errors: List[BaseException] = []
    try:
        remote = ray.remote(num_cpus=1, num_gpus=max(int(gpus_per_seed or 0), 0), max_retries=0)(_ray_call)
        refs = {remote.remote(task, tuple(item), int(gpus_per_seed or 0)): tuple(item) for item in items}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            item = refs[ready[0]]
            try:
                status, value = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - the worker died (killed, out of memory)
                status, value = "error", f"{type(exc).__name__}: {exc}"
            error = SeedFailed(value) if status == "error" else None
            try:
                done(item, None if error else value, error)
            except Exception as exc:  # noqa: BLE001 - raised by the caller
                error = exc
            if error is not None:
                errors.append(error)
    finally:
        if started:
            ray.shutdown()
    return errors


def now() -> float:
    """Wall-clock seconds (placement records)."""
    return time.time()


__all__ = ["EXECUTORS", "LOCKS_ENV", "SeedFailed", "SharedGpus", "SlotError", "local_slots", "lock_folder", "now",
           "placement", "run_queue", "run_ray", "visible_gpus"]
