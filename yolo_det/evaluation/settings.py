"""The settings of one evaluation (a training-time validation or a standalone ``val.py``/``yolo val``).

Every ``val`` record of a fingerprint log may carry them under ``settings``, and a standalone
evaluation writes them under ``"evaluation"`` in its ``determinism.json``, so two evaluations
can be told apart by what they ran with, not only by the number they gave. One dict, the
same keys for every release (None where a release has no such thing): :data:`KEYS`.
Built here, from YOLOv5's ``val.run``/``test.test`` values (:func:`from_yolov5`) or an
Ultralytics validator (:func:`from_ultralytics`); nothing else builds it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import torch

#: The keys of a settings dict, in the order they are written.
KEYS = ("split", "data", "batch_size", "imgsz", "rect", "pad", "half", "conf_thres", "iou_thres", "max_det",
        "single_cls", "augment", "task", "weights", "weights_dtype", "weights_digest", "batch_shapes",
        "nms_cut_batches")
SPLITS = ("train", "val", "test")
#: The section of a standalone evaluation's ``determinism.json`` (and session extra) that holds its settings.
KEY = "evaluation"
_ABSENT = object()


def build(**values: Any) -> Dict[str, Any]:
    """A settings dict with every key of :data:`KEYS` (None where not given), as plain JSON values."""
    unknown = set(values) - set(KEYS)
    if unknown:
        raise TypeError(f"unknown evaluation setting(s): {', '.join(sorted(unknown))}")
    return {key: _plain(values.get(key)) for key in KEYS}


def state_digest(module: Any) -> Optional[str]:
    """BLAKE2b-128 over every state_dict entry's name, dtype, shape and bytes: the weights actually evaluated."""
    state = _state_dict(module)
    if state is None:
        return None
    hasher = hashlib.blake2b(digest_size=16)
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        flat = tensor.detach().reshape(-1).cpu().contiguous()
        hasher.update(f"{name}|{str(tensor.dtype).replace('torch.', '')}|{tuple(tensor.shape)}|".encode())
        if flat.numel():
            hasher.update(flat.view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()


def weights_dtype(module: Any) -> Optional[str]:
    """The floating dtype the model's parameters are in (``float16``/``float32``), None when unknown."""
    state = _state_dict(module)
    if state is None:
        return None
    for tensor in state.values():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            return str(tensor.dtype).replace("torch.", "")
    return None


def distinct_shapes(shapes: Iterable[Sequence[int]]) -> List[List[int]]:
    """The distinct shapes in order of first appearance, as lists of ints."""
    out: List[List[int]] = []
    for shape in shapes:
        row = [int(v) for v in shape]
        if row not in out:
            out.append(row)
    return out


def from_yolov5(values: Mapping[str, Any], *, task: str = "detect", batch_shapes: Optional[Sequence] = None,
                nms_cut_batches: Optional[Sequence[int]] = None, data: Any = None, weights: Any = None) -> Dict[str, Any]:
    """Settings of a YOLOv5-family evaluation from the names of its ``val.run``/``test.test`` (their locals).

    ``values`` holds what the function ran with (``batch_size``, ``imgsz``, ``half``, ``conf_thres`` ...);
    ``model`` there is the module evaluated, ``dataloader`` its loader (rect and batch shapes come from
    its dataset where the function has no ``rect``/``pad`` of its own: training's validation loader).
    ``data``/``weights`` override the values (the paths as the user gave them).
    """
    model = values.get("model")
    dataset = getattr(values.get("dataloader"), "dataset", None)
    rect = values.get("rect", getattr(dataset, "rect", None))
    split = values.get("task")
    if batch_shapes is None:
        batch_shapes = dataset_shapes(dataset, values.get("imgsz"))
    given_data = data if data is not None else values.get("data")
    if isinstance(given_data, Mapping):
        given_data = given_data.get("yaml_file")
    return build(
        split=split if split in SPLITS else None, data=given_data, batch_size=values.get("batch_size"),
        imgsz=values.get("imgsz"), rect=rect, pad=values.get("pad"), half=values.get("half"),
        conf_thres=values.get("conf_thres"), iou_thres=values.get("iou_thres"), max_det=values.get("max_det"),
        single_cls=values.get("single_cls"), augment=values.get("augment"), task=task,
        weights=weights if weights is not None else values.get("weights"), weights_dtype=weights_dtype(model),
        weights_digest=state_digest(model), batch_shapes=batch_shapes, nms_cut_batches=nms_cut_batches)


def dataset_shapes(dataset: Any, imgsz: Any) -> Optional[List[List[int]]]:
    """The distinct input shapes ``[h, w]`` a YOLOv5 dataset letterboxes its batches to, in order.

    With ``rect`` the dataset holds one shape per batch (``batch_shapes``, sorted by aspect ratio);
    without it every batch is ``imgsz`` square.
    """
    shapes = getattr(dataset, "batch_shapes", None) if getattr(dataset, "rect", False) else None
    if shapes is not None:
        return distinct_shapes(shapes)
    if isinstance(imgsz, int):
        return [[imgsz, imgsz]]
    return None


def from_ultralytics(args: Any, *, model: Any = None, batch_shapes: Optional[Sequence] = None,
                     nms_cut_batches: Optional[Sequence[int]] = None, half: Optional[bool] = None) -> Dict[str, Any]:
    """Settings of an Ultralytics evaluation from its validator's ``args`` (and the model it ran).

    ``half`` overrides ``args.half`` (training-time validation runs in half on CUDA whatever args say).
    """
    def get(name: str, default: Any = None) -> Any:
        if isinstance(args, Mapping):
            return args.get(name, default)
        return getattr(args, name, default)

    split = get("split")
    weights = get("model")
    if half is None:  # Ultralytics 8.4 replaced the half argument by quantize=16
        half = get("half") if get("half", _ABSENT) is not _ABSENT else str(get("quantize")) in ("16", "fp16")
    return build(
        split=split if split in SPLITS else None, data=get("data"), batch_size=get("batch"), imgsz=get("imgsz"),
        rect=get("rect"), pad=None, half=half, conf_thres=get("conf"),
        iou_thres=get("iou"), max_det=get("max_det"), single_cls=get("single_cls"), augment=get("augment"),
        task=get("task"), weights=None if weights is None else str(weights) if isinstance(weights, (str, os.PathLike))
        else None, weights_dtype=weights_dtype(model), weights_digest=state_digest(model),
        batch_shapes=batch_shapes, nms_cut_batches=nms_cut_batches)


def _state_dict(module: Any) -> Optional[Mapping[str, Any]]:
    if isinstance(module, torch.nn.Module):
        return module.state_dict()
    return None


def _plain(value: Any) -> Any:
    """``value`` as JSON: numbers, strings, bools, lists; paths as strings; tensors/arrays as lists."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays, tensors
        return _plain(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


__all__ = ["KEYS", "build", "dataset_shapes", "distinct_shapes", "from_ultralytics", "from_yolov5", "state_digest",
           "weights_dtype"]
