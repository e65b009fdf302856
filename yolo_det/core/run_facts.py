"""Facts that change a run without the user asking: what the release decided at start-up.

Ultralytics' AMP check turns AMP off on some GPUs; both families cap the loader workers at
``min(cpu_count // devices, batch, workers)``; the GPU model, their count and the cuBLAS/cuDNN
libraries torch loads may change between machines. These are recorded as the run used them
(``determinism.json``: ``run_facts``) so a diff can name them.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Dict, Optional


def _library_versions() -> Dict[str, str]:
    """Versions of the CUDA math libraries torch's wheels install (``nvidia-cublas-cu12``, ``nvidia-cudnn-cu12``, ...)."""
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if name.startswith(("nvidia-cublas", "nvidia-cudnn")):
            out[name] = dist.version
    return out


def collect(amp: Optional[bool] = None, workers: Optional[int] = None) -> Dict[str, Any]:
    """``{amp, train_workers, devices, device_names, cudnn, libraries}`` as this run used them (None: unknown)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "amp": None if amp is None else bool(amp),
        "train_workers": None if workers is None else int(workers),
        "devices": count,
        "device_names": [torch.cuda.get_device_name(i) for i in range(count)],
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "libraries": _library_versions(),
    }


def record(session: Any, amp: Optional[bool] = None, workers: Optional[int] = None) -> Dict[str, Any]:
    """Put what is known now into ``session.extra['run_facts']`` (collected once); returns the section."""
    section = session.extra.get("run_facts") or collect()
    if amp is not None:
        section["amp"] = bool(amp)
    if workers is not None:
        section["train_workers"] = int(workers)
    session.extra["run_facts"] = section
    return section
