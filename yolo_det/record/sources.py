"""What a fingerprint reads from the training process: the model's tensors by name, a
snapshot of its buffers, a batch split into tensor and non-tensor parts, loss components,
RNG states and optimizer hyperparameters."""

from __future__ import annotations

import array
import itertools
import operator
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ..core import rng
from .digest import bytes_digest

MAX_ITEMS = 64  # loss components kept as values per backward pass
data_ptr = torch.Tensor.data_ptr


def unwrap(model: Any) -> Optional[torch.nn.Module]:
    """The module inside DDP/DataParallel wrappers, or None for anything that is not a module."""
    parallel = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, parallel):
        model = model.module
    return model if isinstance(model, torch.nn.Module) else None


def ema_module(ema: Any) -> Optional[torch.nn.Module]:
    """The averaged module of a YOLOv5/Ultralytics-style ``ModelEMA`` (``.ema``), or a module."""
    inner = getattr(ema, "ema", None)
    return unwrap(inner) if isinstance(inner, torch.nn.Module) else unwrap(ema)


class StateView:
    """A module's parameters then buffers by state_dict name, read cheaply every step."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self._build()

    def _build(self) -> None:
        seen: set = set()
        params: List[Tuple[dict, str, str]] = []
        buffers: List[Tuple[dict, str, str]] = []
        for prefix, mod in self.module.named_modules():
            for store, out in ((mod._parameters, params), (mod._buffers, buffers)):
                for key, tensor in store.items():
                    if tensor is None or id(tensor) in seen:
                        continue
                    seen.add(id(tensor))
                    out.append((store, key, f"{prefix}.{key}" if prefix else key))
        self.entries = params + buffers
        self.n_params = len(params)
        self.names = [name for _, _, name in self.entries]
        self._lookups = [(store, key) for store, key, _ in self.entries]

    def tensors(self, start: int = 0, stop: Optional[int] = None) -> List[torch.Tensor]:
        """Current tensors ``start:stop`` (parameters first); rebuilt when tensors were removed."""
        try:
            out = [store[key] for store, key in self._lookups[start:stop]]
        except KeyError:
            out = [None]
        if not all(map(operator.is_not, out, itertools.repeat(None))):  # not `None in out`: that compares tensors
            self._build()
            out = [store[key] for store, key in self._lookups[start:stop]]
        return out


class Snapshot:
    """Copies of a list of tensors (a model's buffers) into storage of its own, one
    concatenation per dtype, so they can be digested later together with other tensors."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.key = tuple(map(data_ptr, tensors))
        self.tensors = [t.detach() for t in tensors]
        self.copies: List[torch.Tensor] = [torch.Tensor()] * len(tensors)
        self.groups: List[Tuple[List[int], torch.Tensor]] = []
        by_dtype: Dict[Tuple[torch.dtype, torch.device], List[int]] = {}
        for i, t in enumerate(tensors):
            by_dtype.setdefault((t.dtype, t.device), []).append(i)
        for (dtype, device), members in by_dtype.items():
            flat = torch.empty(sum(tensors[i].numel() for i in members), dtype=dtype, device=device)
            offset = 0
            for i in members:
                n = tensors[i].numel()
                self.copies[i] = flat[offset:offset + n].view(tensors[i].shape)
                offset += n
            self.groups.append((members, flat))
        # views of contiguous tensors alias their storage, so they track in-place updates
        self.sources = [t.view(-1) if t.is_contiguous() else None for t in self.tensors]

    def take(self) -> List[torch.Tensor]:
        """Copy the tensors' current values; returns the copies (same order and shapes)."""
        with torch.no_grad():
            for members, flat in self.groups:
                parts = [self.sources[i] if self.sources[i] is not None else self.tensors[i].reshape(-1)
                         for i in members]
                torch.cat(parts, out=flat)
        return self.copies


def flatten_batch(obj: Any, path: str, tensors: List[Tuple[str, torch.Tensor]], hosts: List[Tuple[str, str]],
             depth: int = 0) -> None:
    """Split a batch into tensor leaves (digested on device) and other leaves (digested on host)."""
    if isinstance(obj, torch.Tensor):
        tensors.append((path, obj.to_dense() if obj.is_sparse else obj))
    elif isinstance(obj, np.ndarray) and obj.dtype != object:
        tensors.append((path, torch.from_numpy(np.ascontiguousarray(obj))))
    elif depth < 4 and isinstance(obj, Mapping) and _has_tensor(obj.values()):
        for key, value in obj.items():
            flatten_batch(value, f"{path}.{key}", tensors, hosts, depth + 1)
    elif depth < 4 and isinstance(obj, (list, tuple)) and _has_tensor(obj):
        for i, value in enumerate(obj):
            flatten_batch(value, f"{path}[{i}]", tensors, hosts, depth + 1)
    else:
        hosts.append((path, bytes_digest(_canonical(obj).encode("utf-8", "surrogatepass"))))


def _has_tensor(items: Any, depth: int = 0) -> bool:
    """Whether ``items`` hold a tensor or array, looking a few containers deep."""
    for value in items:
        if isinstance(value, torch.Tensor) or (isinstance(value, np.ndarray) and value.dtype != object):
            return True
        if depth < 3 and isinstance(value, (list, tuple)) and _has_tensor(value, depth + 1):
            return True
        if depth < 3 and isinstance(value, Mapping) and _has_tensor(value.values(), depth + 1):
            return True
    return False


def _canonical(obj: Any, depth: int = 0) -> str:
    """A stable text form of plain data; other objects by type only (their repr holds addresses)."""
    if isinstance(obj, str):
        return "s" + repr(obj)
    if isinstance(obj, bytes):
        return "b" + obj.hex()
    if obj is None or isinstance(obj, (bool, int, float, np.generic)):
        return repr(obj.item() if isinstance(obj, np.generic) else obj)
    if depth < 6 and isinstance(obj, (list, tuple)):
        return "[" + ",".join(_canonical(v, depth + 1) for v in obj) + "]"
    if depth < 6 and isinstance(obj, Mapping):
        return "{" + ",".join(f"{_canonical(k, depth + 1)}:{_canonical(v, depth + 1)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return "t" + repr(getattr(obj, "dtype", "")) + repr(tuple(getattr(obj, "shape", ())))
    return "<" + type(obj).__qualname__ + ">"


def item_values(items: Any) -> Optional[torch.Tensor]:
    """Loss components as one float64 vector (at most MAX_ITEMS values), or None."""
    if isinstance(items, Mapping):
        parts = list(items.values())
    elif isinstance(items, (list, tuple)):
        parts = list(items)
    else:
        parts = [items]
    vectors: List[torch.Tensor] = []
    for part in parts:
        if isinstance(part, torch.Tensor) and not part.is_complex():
            vectors.append(part.detach().reshape(-1).to(torch.float64))
        elif isinstance(part, (int, float, np.number)) and not isinstance(part, bool):
            vectors.append(torch.tensor([float(part)], dtype=torch.float64))
    if not vectors:
        return None
    device = vectors[0].device
    return torch.cat([v.to(device) for v in vectors])[:MAX_ITEMS]


def rng_digests() -> Dict[str, str]:
    """Digests of the RNG states of this process: python, numpy, torch (CPU) and the current CUDA device."""
    state, np_state, cpu = rng.host_states()
    out = {"python": bytes_digest(array.array("Q", state[1]).tobytes() + repr((state[0], state[2])).encode())}
    out["numpy"] = bytes_digest(np.asarray(np_state[1]).tobytes() + repr(tuple(np_state[2:])).encode())
    out["torch"] = bytes_digest(cpu.numpy().tobytes())
    cuda = rng.current_cuda_state()
    if cuda is not None:
        out["cuda"] = bytes_digest(cuda.numpy().tobytes())
    return out


def optimizer_values(optimizer: torch.optim.Optimizer) -> Dict[str, float]:
    """Learning rate (and momentum, where the optimizer has one) of every parameter group."""
    out: Dict[str, float] = {}
    for g, group in enumerate(optimizer.param_groups):
        for key in ("lr", "momentum"):
            value = group.get(key)
            if isinstance(value, torch.Tensor):
                value = float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"group{g}.{key}"] = float(value)
    return out


__all__ = ["MAX_ITEMS", "Snapshot", "StateView", "data_ptr", "ema_module", "flatten_batch", "item_values",
           "optimizer_values", "rng_digests", "unwrap"]
