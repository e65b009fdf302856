"""Facts that change a run without the user asking: what the release decided at start-up.

Ultralytics' AMP check turns AMP off on some GPUs; both families cap the loader workers at
``min(cpu_count // devices, batch, workers)``; the GPU model, their count and the cuBLAS/cuDNN
libraries torch loads may change between machines. These are recorded as the run used them
(``determinism.json``: ``run_facts``) so a diff can name them. So are the choices a release makes
while it runs: the precision switches (TF32, reduced-precision reductions, ``fp32_precision``), the
optimizer actually built (Ultralytics ``optimizer=auto`` picks by the number of iterations), the train
loader's ``drop_last``, every batch size trained (an out-of-memory halving, autobatch's pick), the memory format
(channels-last) and the head and NMS mode training-time validation used (end-to-end heads).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Dict, Optional


#: the name prefixes of the CUDA math library wheels torch installs (``nvidia-cublas-cu12``, ``nvidia-cudnn-cu12``, ...)
_MATH_WHEELS = ("nvidia-cublas", "nvidia-cudnn")


def _library_versions() -> Dict[str, str]:
    """Versions of the CUDA math libraries torch's wheels install (:data:`_MATH_WHEELS`)."""
    out = {}
    folders = tuple(prefix.replace("-", "_") for prefix in _MATH_WHEELS)  # as importlib normalizes folder names
    for dist in metadata.distributions():
        folder = getattr(dist, "_normalized_name", None)  # from the .dist-info folder's name: no file read
        if isinstance(folder, str) and not folder.lower().startswith(folders):
            continue  # reading every installed package's METADATA costs ~50 ms at each run's start
        name = (dist.metadata.get("Name") or "").lower()
        if name.startswith(_MATH_WHEELS):
            out[name] = dist.version
    return out


#: torch.backends switches that change float32/reduced-precision numerics on CUDA (read where present).
PRECISION_SWITCHES = (
    "cudnn.allow_tf32", "cuda.matmul.allow_tf32", "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction", "fp32_precision", "cuda.matmul.fp32_precision",
    "cudnn.fp32_precision", "cudnn.conv.fp32_precision", "cudnn.rnn.fp32_precision",
)


def precision() -> Dict[str, Any]:
    """``{switch: value}`` of :data:`PRECISION_SWITCHES` as set now (``torch.backends.<switch>``), those this
    torch has, plus ``float32_matmul_precision``."""
    import warnings

    import torch

    out: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch warns when legacy and fp32_precision settings are mixed
        for name in PRECISION_SWITCHES:
            value: Any = torch.backends
            try:
                for part in name.split("."):
                    value = getattr(value, part)
            except (AttributeError, RuntimeError):
                continue
            if isinstance(value, (bool, str, int)):
                out[name] = value
        try:
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except (AttributeError, RuntimeError):
            pass
    return out


def optimizer_facts(optimizer: Any) -> Dict[str, Any]:
    """The optimizer as built: class, fused/foreach, and per parameter group its size, lr (``initial_lr`` where a
    scheduler set it), momentum/betas and weight decay."""
    groups = []
    for group in getattr(optimizer, "param_groups", []):
        entry: Dict[str, Any] = {"params": sum(1 for _ in group.get("params", []))}
        entry["lr"] = float(group.get("initial_lr", group.get("lr", 0.0)))
        for key in ("momentum", "betas", "weight_decay", "nesterov"):
            if key in group:
                value = group[key]
                entry[key] = list(value) if isinstance(value, tuple) else value
        groups.append(entry)
    defaults = getattr(optimizer, "defaults", {}) or {}
    return {"class": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
            "fused": defaults.get("fused"), "groups": groups}


def memory_format(model: Any) -> Optional[str]:
    """``channels_last`` or ``contiguous``: the memory format of ``model``'s first 4-D weight as training uses it
    (Ultralytics 8.4 turns channels-last on by default on CUDA); None without one."""
    import torch

    for param in getattr(model, "parameters", lambda: [])():
        if param.dim() == 4:
            if param.is_contiguous():
                return "contiguous"
            return "channels_last" if param.is_contiguous(memory_format=torch.channels_last) else "strided"
    return None


def validation_head(nms: Any, end2end: Any, one2one: Optional[bool] = None) -> Dict[str, Any]:
    """How training-time validation turned predictions into boxes: the ``nms`` argument as given (Ultralytics: None
    = one-to-many head + NMS since 8.4.142, False = the NMS-free one-to-one head), whether the validator ran the
    end-to-end (one-to-one) head, and whether the model has one."""
    return {"nms": nms, "end2end": None if end2end is None else bool(end2end),
            "one2one_head": None if one2one is None else bool(one2one)}


def record_fact(session: Any, key: str, value: Any, once: bool = False) -> None:
    """Put ``key: value`` into ``run_facts`` (``once``: keep a value already there)."""
    section = session.extra.get("run_facts") or collect()
    if not (once and section.get(key) is not None):
        section[key] = value
    session.extra["run_facts"] = section


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
        "precision": precision(),
    }


def record(session: Any, amp: Optional[bool] = None, workers: Optional[int] = None) -> Dict[str, Any]:
    """Put what is known now into ``session.extra['run_facts']`` (collected once); returns the section."""
    section = session.extra.get("run_facts") or collect()
    if amp is not None:
        section["amp"] = bool(amp)
    if workers is not None:
        section["train_workers"] = int(workers)
    section["precision"] = precision()  # as training starts (a script may switch TF32 after start-up)
    session.extra["run_facts"] = section
    return section


def record_optimizer(session: Any, optimizer: Any, **extra: Any) -> Dict[str, Any]:
    """Put the optimizer ``optimizer_facts`` describes (and ``extra``: Ultralytics' ``auto`` pick) into
    ``run_facts``, with the precision switches as its first step sees them."""
    section = session.extra.get("run_facts") or collect()
    section["optimizer"] = {**optimizer_facts(optimizer), **extra}
    section["precision"] = precision()
    session.extra["run_facts"] = section
    return section


def record_batch(session: Any, batch: int, **facts: Any) -> None:
    """One more batch size the run trained with (``facts``: why and from which step)."""
    section = session.extra.get("run_facts") or collect()
    section.setdefault("batch_sizes", []).append({"batch": int(batch), **facts})
    session.extra["run_facts"] = section
