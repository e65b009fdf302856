"""Compare two training checkpoints (YOLOv5 and Ultralytics ``.pt``) by their tensors, not their bytes.

``torch.save`` bytes are not stable across machines and every checkpoint carries a date, git
info, the run's options and paths, so two runs that trained identically never write identical
files. Here every tensor (model, EMA, optimizer state, scaler) is compared bit for bit, training
values (epoch, best_fitness, updates, metrics) by value, and what is expected to differ (date,
git, wandb id, options and paths) is listed but not judged.

Loading: a path that is not a regular file, or whose first bytes are neither a zip archive
(``torch.save`` since 1.6) nor a pickle, is refused before anything is unpickled. The file is then
loaded with ``torch.load(weights_only=False)`` through an unpickler that resolves only torch,
numpy and a few standard-library classes (builtins: types only) and maps every other class (``models.yolo.DetectionModel``,
``ultralytics.nn.tasks.DetectionModel``, ...) to a placeholder that keeps the pickled state. So no
YOLOv5 or Ultralytics code is imported or run, and a checkpoint of any release or fork loads
wherever yolo-det runs. Only compare checkpoints you trust: unpickling is not a sandbox.
"""

from __future__ import annotations

import inspect
import math
import os
import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from .checkpoint_format import PICKLE_PROTO as _PICKLE_PROTO, ZIP_MAGIC as _ZIP_MAGIC, looks_like_checkpoint
from .checkpoint_format import CheckpointError
from ..core import verdicts

#: Top-level keys whose values are expected to differ between identical trainings (listed, not judged).
METADATA_KEYS = ("date", "git", "wandb_id", "opt", "train_args", "version", "license", "docs")
#: Nested entries expected to differ: Ultralytics keeps results.csv's wall-clock column in the checkpoint.
METADATA_PATHS = ("train_results.time",)
#: Module roots whose classes are resolved for real; all others become placeholders.
TRUSTED_ROOTS = ("torch", "numpy", "collections", "copyreg", "_codecs", "argparse", "pathlib", "datetime", "enum",
                 "decimal", "fractions", "uuid")
#: The builtins a checkpoint may name (types only: never eval, exec, getattr, __import__, ...).
SAFE_BUILTINS = ("set", "frozenset", "slice", "range", "complex", "bytearray", "bytes", "object", "list", "dict",
                 "tuple", "int", "float", "str", "bool")



# -- loading ---------------------------------------------------------------------------------
class Placeholder:
    """Stands in for a class yolo-det does not import; keeps what was pickled (``state``, ``args``)."""

    _yolo_det_class = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_yolo_det_args"] = args
        if kwargs:
            self.__dict__.update(kwargs)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_yolo_det_state"] = state

    def __setitem__(self, key: Any, value: Any) -> None:  # pickled dict subclasses
        self.__dict__.setdefault("_yolo_det_items", {})[key] = value

    def append(self, value: Any) -> None:  # pickled list subclasses
        self.__dict__.setdefault("_yolo_det_list", []).append(value)

    def extend(self, values: Any) -> None:
        self.__dict__.setdefault("_yolo_det_list", []).extend(values)

    def __repr__(self) -> str:
        return f"<{self._yolo_det_class} (not imported)>"


_placeholders: Dict[Tuple[str, str], type] = {}


def _placeholder(module: str, name: str) -> type:
    key = (module, name)
    cls = _placeholders.get(key)
    if cls is None:
        cls = _placeholders[key] = type(name, (Placeholder,), {"_yolo_det_class": f"{module}.{name}",
                                                                "__module__": "yolo_det.proof.checkpoint"})
    return cls


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module in ("builtins", "__builtin__"):
            if name in SAFE_BUILTINS:
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"the checkpoint calls builtins.{name}, which no checkpoint needs; refused")
        if module.split(".")[0] in TRUSTED_ROOTS:
            try:
                return super().find_class(module, name)
            except (ImportError, AttributeError):
                pass
        return _placeholder(module, name)


_pickle_module = types.ModuleType("yolo_det_checkpoint_pickle")
_pickle_module.Unpickler = _Unpickler  # type: ignore[attr-defined]
_pickle_module.load = lambda f, **kw: _Unpickler(f, **kw).load()  # type: ignore[attr-defined]
_pickle_module.__dict__.update({k: getattr(pickle, k) for k in ("UnpicklingError", "PickleError", "dumps", "loads")})


def _refuse(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if not path.is_file():
        raise CheckpointError(f"{path} is not a regular file; pass a checkpoint (.pt) file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from None
    if not head:
        raise CheckpointError(f"{path} is empty: not a PyTorch checkpoint")
    if head != _ZIP_MAGIC and head[0] != _PICKLE_PROTO:
        raise CheckpointError(f"{path} is not a PyTorch checkpoint (neither a torch.save zip archive nor a pickle)")


# torch >= 1.13 takes weights_only (and since 2.6 defaults it to True); 1.12 has no such argument.
_FULL_LOAD = {"weights_only": False} if "weights_only" in inspect.signature(torch.load).parameters else {}


def load_checkpoint(path: os.PathLike) -> Dict[str, Any]:
    """The checkpoint dict in ``path``, loaded on CPU without importing the training code (see the module doc)."""
    path = Path(path)
    _refuse(path)
    try:
        data = torch.load(str(path), map_location="cpu", pickle_module=_pickle_module, **_FULL_LOAD)
    except Exception as exc:  # torch raises RuntimeError, EOFError, UnpicklingError, ... for damaged files
        raise CheckpointError(f"{path} is corrupt or not a PyTorch checkpoint ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else 'no details'})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not a checkpoint dict (YOLOv5 and Ultralytics "
                              "save {'model': ..., 'optimizer': ..., 'epoch': ...})")
    return data


# -- flattening ------------------------------------------------------------------------------
def _module_items(obj: Any, prefix: str, seen: set) -> Iterator[Tuple[str, Any]]:
    """Parameters, buffers and tensor attributes of a module (real or placeholder), depth first."""
    state = obj.__dict__
    for key in ("_parameters", "_buffers"):
        for name, value in (state.get(key) or {}).items():
            if value is not None:
                yield f"{prefix}{name}", value
    for name, value in state.items():
        if not name.startswith("_") and isinstance(value, torch.Tensor):
            yield f"{prefix}{name}", value
    for name, child in (state.get("_modules") or {}).items():
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            yield from _module_items(child, f"{prefix}{name}.", seen)


def _is_module(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module) or (isinstance(obj, Placeholder) and "_modules" in obj.__dict__)


def flatten(value: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """``(dotted name, leaf)`` for every tensor and plain value inside a checkpoint entry."""
    if isinstance(value, torch.Tensor):
        yield prefix.rstrip("."), value
    elif _is_module(value):
        yield from _module_items(value, prefix, {id(value)})
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}{key}.")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from flatten(item, f"{prefix}{i}.")
    elif isinstance(value, Placeholder):
        yield from flatten({k: v for k, v in value.__dict__.items() if not k.startswith("_yolo_det_args")}, prefix)
    elif isinstance(value, np.ndarray):
        yield prefix.rstrip("."), torch.from_numpy(np.ascontiguousarray(value))
    elif isinstance(value, np.generic):
        yield prefix.rstrip("."), value.item()
    else:
        yield prefix.rstrip("."), value


def _section(name: str) -> str:
    top = name.split(".", 1)[0]
    return top if top in ("model", "ema", "optimizer") else "other"


def _metadata(name: str) -> bool:
    return name.split(".", 1)[0] in METADATA_KEYS or any(
        name == p or name.startswith(p + ".") for p in METADATA_PATHS)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> Optional[str]:
    """None when bit-identical, else why not."""
    if a.dtype != b.dtype:
        return f"dtype {str(a.dtype).replace('torch.', '')} vs {str(b.dtype).replace('torch.', '')}"
    if tuple(a.shape) != tuple(b.shape):
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    a, b = a.detach().contiguous(), b.detach().contiguous()
    if a.numel() == 0:
        return None
    if a.is_quantized or a.is_sparse or a.element_size() == 0:  # pragma: no cover - not in YOLO checkpoints
        return None if torch.equal(a, b) else "values differ"
    same = torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    if same:
        return None
    if a.is_floating_point():
        diff = (a.double() - b.double()).abs()
        diff = diff[torch.isfinite(diff)]
        biggest = f", max |a-b| {diff.max().item():.3g}" if diff.numel() else ""
        return f"values differ ({int((a != b).sum())} of {a.numel()} elements{biggest})"
    return f"values differ ({int((a != b).sum())} of {a.numel()} elements)"


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - exotic objects: compare their text
        return repr(a) == repr(b)


# -- comparing -------------------------------------------------------------------------------
@dataclass
class Difference:
    """One entry that differs: its dotted name and why (``only in A``, ``values differ (...)``)."""

    name: str
    reason: str

    def to_dict(self) -> Dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass
class CheckpointComparison(verdicts.Judged):
    """The result of :func:`compare_checkpoints`. ``identical``: every tensor and training value equal, and at
    least one tensor compared (two checkpoints without tensors prove nothing about a model: ``proven`` is False)."""

    paths: Tuple[str, str]
    tensors: Dict[str, int] = field(default_factory=dict)  # compared per section (model, ema, optimizer, other)
    values: int = 0
    differing: List[Difference] = field(default_factory=list)
    metadata: List[str] = field(default_factory=list)  # names of metadata entries that differ (not judged)

    @property
    def identical(self) -> bool:
        return not self.differing and self.proven

    @property
    def proven(self) -> bool:
        """Whether tensors (what decides a checkpoint) were compared: without them no verdict of identity."""
        return self.tensor_count > 0

    @property
    def verdict(self) -> str:
        """``identical``, ``differs`` or ``not proven`` (nothing differs, but no tensor was compared)."""
        return verdicts.DIFFERS if self.differing else verdicts.IDENTICAL if self.proven else verdicts.NOT_PROVEN

    @property
    def tensor_count(self) -> int:
        return sum(self.tensors.values())

    def to_json(self) -> Dict[str, Any]:
        return self.stamped({"identical": self.identical, "checkpoints": list(self.paths),
                "tensors": dict(self.tensors),
                "values": self.values, "differing": [d.to_dict() for d in self.differing],
                "metadata_differs": list(self.metadata)})

    def describe(self, limit: int = 10) -> List[str]:
        counts = ", ".join(f"{k} {n}" for k, n in self.tensors.items() if n)
        lines = []
        if self.identical:
            lines.append(f"identical: {self.tensor_count} tensors ({counts or 'none'}), {self.values} values")
        elif not self.differing:
            lines.append(f"not proven: the checkpoints hold no tensor to compare (no model, EMA or optimizer "
                         f"state); {self.values} training values compared, all equal")
        else:
            lines.append(f"checkpoints differ: {len(self.differing)} of {self.tensor_count + self.values} entries "
                         f"({counts or 'no tensors'})")
            for diff in self.differing[:limit]:
                lines.append(f"  {diff.name}: {diff.reason}")
            if len(self.differing) > limit:
                lines.append(f"  ... and {len(self.differing) - limit} more")
        if self.metadata:
            lines.append("metadata that differs (expected, not judged): " + ", ".join(self.metadata))
        return lines


def compare_checkpoints(a: os.PathLike, b: os.PathLike) -> CheckpointComparison:
    """Compare two checkpoints entry by entry. Raises :class:`CheckpointError` when one cannot be loaded."""
    da, db = load_checkpoint(a), load_checkpoint(b)
    ea, eb = dict(flatten(da)), dict(flatten(db))
    result = CheckpointComparison((str(a), str(b)))
    metadata = []
    for name in list(ea) + [n for n in eb if n not in ea]:
        if _metadata(name):
            if name not in ea or name not in eb or not _same_value_or_tensor(ea[name], eb[name]):
                top = name.split(".", 1)[0] if not name.startswith("train_results.") else "train_results.time"
                if top not in metadata:
                    metadata.append(top)
            continue
        va, vb = ea.get(name, _MISSING), eb.get(name, _MISSING)
        tensor = isinstance(va, torch.Tensor) or isinstance(vb, torch.Tensor)
        if tensor:
            section = _section(name)
            result.tensors[section] = result.tensors.get(section, 0) + 1
        else:
            result.values += 1
        if va is _MISSING or vb is _MISSING:
            result.differing.append(Difference(name, f"only in {'A' if vb is _MISSING else 'B'}"))
        elif tensor:
            reason = _same_tensor(va, vb) if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) \
                else "a tensor in one checkpoint only"
            if reason:
                result.differing.append(Difference(name, reason))
        elif not _same_value(va, vb):
            result.differing.append(Difference(name, f"{_short(va)} vs {_short(vb)}"))
    result.metadata = metadata
    return result


_MISSING = object()


def _same_value_or_tensor(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _same_tensor(a, b) is None
    return _same_value(a, b)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["CheckpointComparison", "CheckpointError", "Difference", "METADATA_KEYS", "Placeholder",
           "compare_checkpoints", "flatten", "load_checkpoint", "looks_like_checkpoint"]
