"""The process's random number generators, read and set in one place: Python's ``random``, NumPy's global
generator, torch's CPU generator and (where initialised) the CUDA generators.

The resume sidecar saves them (:func:`rng_state`, tensors and plain values, loadable with ``weights_only``),
the fingerprint log digests them (``record/sources.rng_digests``), and a seeded sample restores them around
its fetch (``core/streams``, :func:`host_states`).
"""

from __future__ import annotations

import random
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import torch

HostStates = Tuple[Any, Any, torch.Tensor]


def host_states() -> HostStates:
    """The CPU-side generators' states as their libraries give them: (random, numpy, torch CPU)."""
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def set_host_states(states: HostStates) -> None:
    """Restore what :func:`host_states` returned."""
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def cuda_ready() -> bool:
    """Whether CUDA's generators exist in this process (initialised; reading them never initialises CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def rng_state() -> Dict[str, Any]:
    """Every generator's state, as tensors and plain values (a sidecar loads it with ``weights_only``)."""
    (version, internal, gauss), (kind, keys, pos, has_gauss, cached), cpu = host_states()
    state: Dict[str, Any] = {
        "torch": cpu,
        "random": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "cuda": None,
    }
    if cuda_ready():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    r, n = state["random"], state["numpy"]
    set_host_states(((r["version"], tuple(int(v) for v in r["state"].tolist()), r["gauss"]),
                     (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]),
                     state["torch"]))
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def current_cuda_state() -> Optional[torch.Tensor]:
    """The current CUDA device's generator state, None where CUDA is not initialised."""
    return torch.cuda.get_rng_state(torch.cuda.current_device()) if cuda_ready() else None


__all__ = ["HostStates", "cuda_ready", "current_cuda_state", "host_states", "rng_state", "set_host_states",
           "set_rng_state"]
