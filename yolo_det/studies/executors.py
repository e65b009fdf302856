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
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

EXECUTORS = ("local", "slurm", "ray")


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


def placement(slot: Mapping[str, str], started: float, ended: float) -> Dict[str, Any]:
    """Where and when a seed ran (for its record in study.json)."""
    devices = slot.get("CUDA_VISIBLE_DEVICES")
    return {"executor": "local", "host": socket.gethostname(),
            "devices": None if devices is None else (devices or "cpu"),
            "started": round(started, 3), "seconds": round(ended - started, 3)}


def run_queue(task: Callable[..., Any], items: Sequence[Tuple[Any, ...]], slots: Sequence[Mapping[str, str]],
              done: Callable[[Tuple[Any, ...], Any, Optional[BaseException]], None],
              fatal: Tuple[type, ...] = ()) -> List[BaseException]:
    """Run ``task(*item, slot)`` for every item, a free slot taking the next item; ``done(item, result, error)``
    after each (under a lock, in the order they finish). An error of a ``fatal`` type (from the task or from
    ``done``) starts no further item; the others are recorded and the queue goes on. Returns the errors in
    the order they happened."""
    waiting: "queue.Queue[Tuple[Any, ...]]" = queue.Queue()
    for item in items:
        waiting.put(tuple(item))
    lock = threading.Lock()
    stop = threading.Event()
    errors: List[BaseException] = []

    def worker(slot: Mapping[str, str]) -> None:
        while not stop.is_set():
            try:
                item = waiting.get_nowait()
            except queue.Empty:
                return
            result, error = None, None
            try:
                result = task(*item, slot)
            except Exception as exc:  # noqa: BLE001 - reported through done(); the other seeds go on
                error = exc
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
        raise SlotError("--executor ray needs Ray: pip install 'yolo-det[ray]'") from None
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


__all__ = ["EXECUTORS", "SeedFailed", "SlotError", "run_ray", "local_slots", "now", "placement", "run_queue", "visible_gpus"]
