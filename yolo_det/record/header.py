"""What a fingerprint header records about how its run was set up, so that two runs' set-ups can be compared.

:func:`run_facts` collects it when the log opens: settings, thread counts, package versions, CUDA
runtime, cuDNN, driver, GPUs, the machine (the CPU's instruction set each library dispatches to, the caps in
force, GPU models and TF32: :mod:`yolo_det.core.machine`), yolo-det's environment variables and a content digest of every command
argument that names a file (:func:`argument_files`). :mod:`yolo_det.proof.causes` compares two of them.
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from ..core import env_names, environment, machine

#: The run number ``yolo-det verify`` gives each run it starts.
RUN_VAR = env_names.VERIFY_RUN
MAX_FILE_BYTES = 64 << 20
#: Environment variables whose value differs between runs by design.
RUN_ENV_VARS = (env_names.FINGERPRINT, RUN_VAR, env_names.CAPTURE, env_names.CAPTURE_STEP,
                env_names.CAPTURE_THROUGH, "RANK", "LOCAL_RANK",
                env_names.SEED, env_names.RANK)  # the last two: set from the seed, which is compared itself


def _file_digest(path: Path) -> Optional[str]:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def argument_files(argv: Sequence[str], exclude: Iterable[os.PathLike] = ()) -> List[Dict[str, Any]]:
    """``{"index", "arg", "digest"}`` for every command argument that names a readable file.

    ``key=value`` arguments (Ultralytics) are looked at by value. Files in ``exclude`` (the
    fingerprint log being written) are skipped.
    """
    skip = {str(Path(p).resolve()) for p in exclude}
    out = []
    for index, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if "=" in arg and not arg.startswith("-") else arg
        if not value or len(value) > 4096:
            continue
        path = Path(value)
        try:
            if str(path.resolve()) in skip:
                continue
        except (OSError, RuntimeError):
            continue
        digest = _file_digest(path)
        if digest is not None:
            out.append({"index": index, "arg": arg, "digest": digest})
    return out


def _packages() -> Dict[str, str]:
    versions = {}
    for name in environment.PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_facts(session: Any = None, exclude: Iterable[os.PathLike] = ()) -> Dict[str, Any]:
    """The facts the fingerprint header adds so that two runs' set-ups can be compared."""
    import torch  # here, not at import time: ``diff`` compares set-ups without torch

    settings = getattr(session, "settings", None)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    run = os.environ.get(RUN_VAR, "")
    return {
        "settings": settings.to_dict() if settings is not None and hasattr(settings, "to_dict") else None,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "packages": _packages(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": cudnn,
        "driver": environment._driver(),
        "gpus": [g["name"] for g in environment._gpus()],
        "machine": machine.machine_facts(),
        "env": {k: os.environ[k] for k in environment.ENV_VARS if k in os.environ and k not in RUN_ENV_VARS},
        "files": argument_files(list(sys.argv), exclude),
        "verify_run": int(run) if run.isdigit() else None,
        "portable": getattr(session, "portable", None),
    }


__all__ = ["MAX_FILE_BYTES", "RUN_ENV_VARS", "RUN_VAR", "argument_files", "run_facts"]
