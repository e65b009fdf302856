"""What this machine and process are: the manifest saved with every run, and the
environment variables that only work when set before the interpreter or CUDA starts.

``CUBLAS_WORKSPACE_CONFIG`` is needed for deterministic cuBLAS on torch 1.7 to 2.9 (2.10
removed the check); cuBLAS reads it when a handle is created, so it must be present before
the first CUDA matmul. ``PYTHONHASHSEED`` only affects interpreters started after it is set.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import env_names

CUBLAS_VAR = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_VALUES = (":4096:8", ":16:8")
CUBLAS_DEFAULT = ":4096:8"
PACKAGES = ("torch", "torchvision", "numpy", "opencv-python", "opencv-python-headless", "ultralytics",
            "yolov5", "albumentations", "libcst", "yolo-det")
ENV_VARS = ("CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
            env_names.DETERMINISTIC, env_names.BACKWARD, env_names.ALLOW, env_names.OPS,
            env_names.FILL_MEMORY, env_names.FINGERPRINT, env_names.SEED, "RANK", "LOCAL_RANK", "WORLD_SIZE",
            "NCCL_ALGO", "NVIDIA_TF32_OVERRIDE", "TORCH_CUDNN_V8_API_DISABLED")


def _torch() -> Any:
    """torch, imported when first needed: ``yolo-det run`` and ``env --exports`` start without it."""
    import torch

    return torch


def torch_version(version: Optional[str] = None) -> Tuple[int, int]:
    """(major, minor) of ``version`` (default: the installed torch)."""
    text = (version or _torch().__version__).split("+")[0]
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in text.split(".")[:2]]
    return parts[0], parts[1] if len(parts) > 1 else 0


def cublas_config_required(version: Optional[str] = None) -> bool:
    """True for torch 1.7 .. 2.9, whose deterministic mode needs CUBLAS_WORKSPACE_CONFIG."""
    return (1, 7) <= torch_version(version) < (2, 10)


def launch_environment() -> Dict[str, str]:
    """The environment this process was started with (Linux ``/proc``; else ``os.environ``)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _gpu_memory_used() -> bool:
    """Whether anything was ever allocated on a GPU (a cuBLAS handle's workspace would be)."""
    torch = _torch()
    try:
        return any(torch.cuda.memory_stats(i).get("allocation.all.allocated", 0)
                   for i in range(torch.cuda.device_count()))
    except Exception:  # cannot tell: assume the worst
        return True


def prepare_cublas() -> Dict[str, object]:
    """Make sure cuBLAS starts deterministic where torch needs ``CUBLAS_WORKSPACE_CONFIG``.

    Returns ``{"value", "state", "ok"}``; state is one of ``not-required`` (torch >= 2.10 or
    no CUDA), ``launch`` (set before the process started), ``set`` (set now, before any GPU
    memory was allocated, so before any cuBLAS handle: in time) or ``late`` (GPU memory was
    already in use without it: cuBLAS handles made before now ignore it; export it before
    launch instead).
    """
    torch = _torch()
    value = os.environ.get(CUBLAS_VAR)
    if not cublas_config_required() or not torch.cuda.is_available():
        return {"value": value, "state": "not-required", "ok": True}
    if launch_environment().get(CUBLAS_VAR) in CUBLAS_VALUES and value in CUBLAS_VALUES:
        return {"value": value, "state": "launch", "ok": True}
    if not torch.cuda.is_initialized() or not _gpu_memory_used():
        os.environ[CUBLAS_VAR] = value if value in CUBLAS_VALUES else CUBLAS_DEFAULT
        return {"value": os.environ[CUBLAS_VAR], "state": "set", "ok": True}
    return {"value": value, "state": "late", "ok": False}


CUBLAS_LATE_MESSAGE = (
    f"{CUBLAS_VAR} was not set when this process started and the GPU was already in use, so "
    "cuBLAS may run nondeterministic kernels (torch {torch}). Export it before launch: "
    f"`export {CUBLAS_VAR}={CUBLAS_DEFAULT}`, or start training with `yolo-det run -- python train.py ...`."
)


def hash_seed_status() -> Dict[str, object]:
    """Whether ``str``/``bytes`` hashes differ between processes (decided at interpreter start).

    Hashes are reproducible only when PYTHONHASHSEED held an integer when the interpreter
    started; setting it later in ``os.environ`` changes nothing for this process.
    """
    at_launch = launch_environment().get("PYTHONHASHSEED")
    fixed = at_launch is not None and at_launch.isdigit() or not sys.flags.hash_randomization
    return {"randomized": not fixed, "PYTHONHASHSEED_at_launch": at_launch}


SEED_MAX = 2**32 - 1  # PYTHONHASHSEED's range; a value outside it makes Python refuse to start


def check_seed(seed: Any, where: str = "--seed") -> int:
    """``seed`` as an int in 0..4294967295, or :class:`~yolo_det.core.mode.ConfigError` naming ``where``."""
    from .mode import ConfigError

    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{where} {seed!r} is out of range: a seed is a whole number from 0 to {SEED_MAX} "
                          "(PYTHONHASHSEED's range)")
    return seed


def launcher_env(mode: Optional[str] = None, seed: Optional[int] = None,
                 base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Variables to export before launching training (``yolo-det run`` and ``env --exports``).

    ``CUBLAS_WORKSPACE_CONFIG`` (kept if already valid), ``PYTHONHASHSEED`` (the seed, or 0)
    and, when given, ``YOLO_DET_DETERMINISTIC``.
    """
    base = os.environ if base is None else base
    if seed is not None:
        check_seed(seed)
    cublas = base.get(CUBLAS_VAR)
    out = {
        CUBLAS_VAR: cublas if cublas in CUBLAS_VALUES else CUBLAS_DEFAULT,
        "PYTHONHASHSEED": str(seed if seed is not None else base.get("PYTHONHASHSEED", "0")),
    }
    if mode is not None:
        out[env_names.DETERMINISTIC] = mode
    if seed is not None:
        out[env_names.SEED] = str(seed)
    return out


def _package_versions() -> Dict[str, Optional[str]]:
    versions: Dict[str, Optional[str]] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _gpus() -> List[Dict[str, object]]:
    torch = _torch()
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": props.name, "capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / 2**30, 1)})
    return out


def _driver() -> Optional[str]:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for token in text.split():
        if token[:1].isdigit() and token.count(".") >= 1:
            return token
    return None


def git_commit(path: Optional[os.PathLike] = None) -> Optional[str]:
    """The commit checked out at ``path`` (None outside a git work tree or without git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path or None, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def manifest(repo: Optional[os.PathLike] = None) -> Dict[str, object]:
    """Versions, hardware and environment that decide whether two runs can be identical."""
    from .seeding import albumentations_status

    torch = _torch()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_available": torch.cuda.is_available(),
        "gpus": _gpus(),
        "driver": _driver(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
        "cpu_threads": torch.get_num_threads(),
        "packages": _package_versions(),
        "env": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
        "hash_seed": hash_seed_status(),
        "albumentations": albumentations_status(),
        "cublas_config_required": cublas_config_required(),
        "git_commit": git_commit(repo),
    }
