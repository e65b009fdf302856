"""Export parity: does an exported model (ONNX, OpenVINO, TensorRT) give the ``.pt``'s predictions and number.

The same preprocessed tensors (one letterbox, computed once) go to the PyTorch model and to the export's
runtime (CPU; a TensorRT engine on CUDA), run with deterministic settings (ONNX Runtime: one intra/inter-op
thread, sequential, ``use_deterministic_compute``; OpenVINO: f32 inference precision, one stream, one thread).
Three layers are compared: the raw head outputs (max absolute and relative error and where), the boxes after
NMS (matched by IoU; boxes only one model keeps, and those that cross the confidence threshold), and box mAP
under matched settings; also the export's class names against the checkpoint's, and a dynamic export at the rect
shapes `yolo val` feeds it. An image left out of a comparison (unreadable, refused by the runtime, outputs of
another shape) keeps the verdict from "agree". Each cause that applies (letterbox rect vs square, NMS baked into
the graph, the end-to-end one-to-one head, fp16/int8, opset/simplifier, dynamic shapes, batch, another source
checkpoint, class names) is named with the metric change when only it is aligned. Ultralytics YOLOv8/11/26 detection and segmentation exports and
YOLOv5-family exports (one ``(B, N, 5 + nc)`` output) are understood.
"""

from __future__ import annotations

import ast
import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..core import verdicts
from ..record import export_provenance

VAL_CONF, VAL_IOU, VAL_MAX_DET = 0.001, 0.7, 300
EXPORT_NMS_DEFAULTS = {"conf": 0.25, "iou": 0.7, "max_det": 300, "agnostic_nms": False}
#: fp32 CPU runtimes state no tolerance; kernels that sum in another order differ by a few ulps per layer.
RTOL, ATOL_SCALE = 1e-4, 1e-5
BOX_MATCH_IOU = 0.9
SCORE_GRID = 1e-5
METRIC_TOL = 5e-5  # half the last digit of a 4-decimal mAP
CONF_TOL = 1e-4  # matched boxes' confidences (scores in [0, 1]; the raw outputs' relative tolerance)
CHUNK = 8  # images per batched .pt forward (memory: 8 letterboxed images and their activations)
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


class ParityInputError(ValueError):
    """The model, the export or the data cannot be read: a usage error (exit 2)."""


# --------------------------------------------------------------------------------------------- the export


@dataclass
class ExportInfo:
    """What an exported artifact is: format, input shape, precision, baked NMS, head, metadata, provenance."""

    path: Path
    format: str
    file: Path
    metadata: Dict[str, Any]
    input_shape: List[Optional[int]]
    input_dtype: str
    opset: Optional[int] = None
    fp16_weights: bool = False
    int8: bool = False
    provenance: Optional[Dict[str, Any]] = None

    @property
    def dynamic(self) -> bool:
        """True when height or width is not fixed in the graph."""
        return any(d is None for d in self.input_shape[2:])

    @property
    def batch(self) -> Optional[int]:
        return self.input_shape[0] if self.input_shape else None

    @property
    def imgsz(self) -> Optional[Tuple[int, int]]:
        if not self.dynamic and len(self.input_shape) == 4:
            return int(self.input_shape[2]), int(self.input_shape[3])
        size = self.metadata.get("imgsz")
        if isinstance(size, (list, tuple)) and len(size) == 2:
            return int(size[0]), int(size[1])
        return None

    @property
    def args(self) -> Dict[str, Any]:
        args = self.metadata.get("args")
        return args if isinstance(args, dict) else {}

    @property
    def export_args(self) -> Dict[str, Any]:
        """Every export argument yolo-det recorded (provenance), else the subset Ultralytics keeps in metadata."""
        recorded = (self.provenance or {}).get("export_args")
        return {**self.args, **recorded} if isinstance(recorded, dict) else self.args

    @property
    def end2end(self) -> bool:
        return bool(self.metadata.get("end2end"))

    @property
    def nms_baked(self) -> bool:
        return bool(self.args.get("nms")) and not self.end2end

    @property
    def half(self) -> bool:
        q = str(self.export_args.get("quantize", "")).lower()
        return self.fp16_weights or self.input_dtype in ("float16", "f16") or q in ("16", "fp16", "half") \
            or bool(self.export_args.get("half"))


def _literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def read_export(path: os.PathLike) -> ExportInfo:
    """Read an ONNX file or an OpenVINO model (folder or ``.xml``): shape, precision, metadata, provenance."""
    path = Path(path)
    if not path.exists():
        raise ParityInputError(f"{path}: no such exported model (give the .onnx file or the OpenVINO folder/.xml)")
    if path.suffix == ".onnx":
        import onnx

        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError and others
            raise ParityInputError(f"{path}: not a readable ONNX model ({exc})") from exc
        meta = {p.key: _literal(p.value) for p in model.metadata_props if p.key != export_provenance.KEY}
        inp = model.graph.input[0].type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else None for d in inp.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.elem_type).name
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        fp16 = any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
        int8 = any(n.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger")
                   for n in model.graph.node)
        return ExportInfo(path, "onnx", path, meta, shape, dtype, opset, fp16, int8, export_provenance.read(path))
    if path.suffix == ".engine":
        return _read_engine(path)
    xml = path if path.suffix == ".xml" else (sorted(path.glob("*.xml"))[0] if path.is_dir() and list(path.glob("*.xml")) else None)
    if xml is None:
        raise ParityInputError(f"{path}: neither an .onnx file nor an OpenVINO model (a folder with an .xml, or the .xml)")
    import openvino as ov
    import yaml

    model = ov.Core().read_model(str(xml))
    meta_file = xml.parent / "metadata.yaml"
    meta = (yaml.safe_load(meta_file.read_text()) or {}) if meta_file.exists() else {}
    meta.pop(export_provenance.KEY, None)
    pshape = model.inputs[0].get_partial_shape()
    shape = [d.get_length() if d.is_static else None for d in pshape]
    dtype = {"f32": "float32", "f16": "float16"}.get(model.inputs[0].get_element_type().get_type_name(),
                                                      model.inputs[0].get_element_type().get_type_name())
    types = [(op.get_type_name(), op.get_output_element_type(0).get_type_name() if op.get_output_size() else "")
             for op in model.get_ops()]
    fp16 = any(t == "Constant" and et == "f16" for t, et in types)
    int8 = any(t == "FakeQuantize" for t, _ in types) or any(t == "Constant" and et in ("i8", "u8") for t, et in types)
    return ExportInfo(path, "openvino", xml, meta, shape, dtype, None, fp16, int8, export_provenance.read(path))


def engine_header(path: Path) -> Tuple[int, Dict[str, Any]]:
    """A TensorRT ``.engine``'s metadata header (Ultralytics: 4-byte little-endian length, then JSON) and where the
    serialized engine starts; ``(0, {})`` for a bare engine (trtexec, polygraphy)."""
    import json

    with open(path, "rb") as f:
        n = int.from_bytes(f.read(4), "little")
        size = f.seek(0, 2)
        if 0 < n <= size - 4:
            f.seek(4)
            try:
                meta = json.loads(f.read(n))
                if isinstance(meta, dict):
                    return 4 + n, meta
            except ValueError:  # engine bytes, not a header
                pass
    return 0, {}


def _read_engine(path: Path) -> ExportInfo:
    """A TensorRT engine: its metadata header; the input shape from it (the runtime reads the engine's own)."""
    _, meta = engine_header(path)
    if not meta.get("imgsz"):
        raise ParityInputError(f"{path}: a TensorRT engine without Ultralytics' metadata header (trtexec, polygraphy): "
                               "its input size and letterbox are unknown; build it with `yolo-det ultralytics export "
                               "format=engine`, or compare the ONNX file it was built from")
    meta.pop(export_provenance.KEY, None)
    args = meta.get("args") if isinstance(meta.get("args"), dict) else {}
    size = meta.get("imgsz")
    dims: List[Optional[int]] = [None, None] if args.get("dynamic") else [int(v) for v in size]
    shape = [int(meta.get("batch") or 1), 3, *dims]
    q = str(args.get("quantize", "")).lower()
    return ExportInfo(path, "engine", path, meta, shape, "float32", None,
                      fp16_weights=bool(args.get("half")) or q in ("16", "fp16", "half"),
                      int8=bool(args.get("int8")) or q in ("8", "int8"), provenance=export_provenance.read(path))


# --------------------------------------------------------------------------------------------- class names


def class_names(value: Any) -> Optional[Dict[int, str]]:
    """Class names by id from any form a checkpoint or an export keeps them in: a dict (int keys, or the digit
    strings of a JSON header), a list, or that text not yet parsed; None where there are none to read."""
    if isinstance(value, str):
        value = _literal(value)
    if isinstance(value, (list, tuple)):
        value = dict(enumerate(value))
    if not isinstance(value, dict) or not value:
        return None
    try:
        return {int(k): str(v) for k, v in value.items()}
    except (TypeError, ValueError):  # keys that are not class ids
        return None


def names_source(info: "ExportInfo") -> str:
    """Where an export of this format keeps its class names (what the report says was read, or was missing)."""
    return {"onnx": "ONNX metadata 'names'", "openvino": "metadata.yaml 'names' beside the .xml",
            "engine": "the engine's metadata header 'names'"}.get(info.format, "its metadata 'names'")


def compare_names(pt: Optional[Dict[int, str]], export: Optional[Dict[int, str]], source: str) -> Dict[str, Any]:
    """The export's class names against the checkpoint's: ``status`` same / differ / unknown and ``detail``.

    An export whose class ids mean other classes (renamed, reordered, another count) scores every detection
    against the wrong label; names that cannot be read leave that unchecked, which is said, never agreed.
    """
    out: Dict[str, Any] = {"pt": _as_list(pt), "export": _as_list(export), "source": source}
    if export is None or pt is None:
        where = f"the export carries no class names ({source})" if export is None else "the .pt carries no class names"
        return {**out, "status": "unknown",
                "detail": f"{where}: whether its class ids mean the same classes cannot be checked"}
    if pt == export:
        return {**out, "status": "same", "detail": f"the same {len(pt)} class names in the same order ({source})"}
    if len(pt) != len(export):
        detail = f"{len(pt)} classes in the .pt, {len(export)} in the export ({source})"
    elif sorted(pt.values()) == sorted(export.values()):
        detail = "the same names in another order: " + _name_changes(pt, export)
    else:
        detail = _name_changes(pt, export)
    return {**out, "status": "differ", "detail": detail}


def _as_list(names: Optional[Dict[int, str]]) -> Optional[Any]:
    """Names as a list where the ids run 0..n-1 (the usual case), else the dict itself."""
    if names is None:
        return None
    return [names[i] for i in range(len(names))] if set(names) == set(range(len(names))) else dict(names)


def _name_changes(pt: Dict[int, str], export: Dict[int, str], shown: int = 5) -> str:
    """The ids whose name differs, the first ``shown`` of them spelled out."""
    ids = sorted(i for i in set(pt) | set(export) if pt.get(i) != export.get(i))
    text = ", ".join(f"class {i} is {pt.get(i)!r} in the .pt, {export.get(i)!r} in the export" for i in ids[:shown])
    return text + (f" (and {len(ids) - shown} more)" if len(ids) > shown else "")


# ------------------------------------------------------------------------------------------------ runtimes


class Runtime:
    """One exported model in its runtime on CPU, run deterministically where the runtime allows."""

    name = ""
    settings: Dict[str, Any] = {}
    notes: List[str] = []

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError


class OnnxRuntime(Runtime):
    """ONNX Runtime, CPU execution provider, one thread, sequential, deterministic compute."""

    name = "onnxruntime"

    def __init__(self, file: Path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.use_deterministic_compute = True
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(file), so, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0]
        self.settings = {"version": ort.__version__, "providers": self.session.get_providers(),
                         "intra_op_num_threads": 1, "inter_op_num_threads": 1, "execution_mode": "sequential",
                         "use_deterministic_compute": True,
                         "graph_optimization_level": str(so.graph_optimization_level)}
        self.notes = ["CPU kernels repeat bit for bit at a fixed thread count; use_deterministic_compute changes only "
                      "GPU kernels (CUDA EP), where atomics-based ops otherwise have no deterministic mode"]

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        dtype = np.float16 if "float16" in self.input.type else np.float32
        return [np.asarray(o) for o in self.session.run(None, {self.input.name: x.astype(dtype)})]


class OpenVinoRuntime(Runtime):
    """OpenVINO CPU plugin, f32 inference precision, one stream, one thread."""

    name = "openvino"

    def __init__(self, file: Path):
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
                  "PERFORMANCE_HINT": "LATENCY"}
        core = ov.Core()
        self.compiled = core.compile_model(str(file), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.settings = {"version": ov.__version__, "device": "CPU", **config}
        self.notes = ["OpenVINO has no deterministic switch; with one stream, one thread and f32 precision its CPU "
                      "plugin repeats bit for bit (checked each run: the first image twice). Without "
                      "INFERENCE_PRECISION_HINT=f32 CPUs with bf16/fp16 units compute in lower precision"]

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        result = self.request.infer({0: x.astype(np.float32)})
        return [np.asarray(result[o]) for o in self.compiled.outputs]


class TensorRtRuntime(Runtime):
    """TensorRT on the first CUDA GPU (torch's CUDA tensors as its buffers); TensorRT 10's named-tensor API, else
    the bindings API of 8.x. Not run in CI (no GPU): ``scripts/gpu_check.py`` exercises it."""

    name = "tensorrt"

    def __init__(self, file: Path):
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise ParityInputError(f"{file}: a TensorRT engine, but the tensorrt package is not installed ({exc}); "
                                   "install NVIDIA's tensorrt wheel matching the engine's version on a machine with "
                                   "a CUDA GPU, or compare the ONNX export it was built from") from exc
        import torch

        if not torch.cuda.is_available():
            raise ParityInputError(f"{file}: a TensorRT engine needs a CUDA GPU, and torch sees none "
                                   "(compare the ONNX export it was built from on CPU instead)")
        self.torch, self.device = torch, torch.device("cuda", 0)
        start, _ = engine_header(file)
        blob = file.read_bytes()[start:]
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
        self.engine = self.runtime.deserialize_cuda_engine(blob)
        if self.engine is None:
            raise ParityInputError(f"{file}: TensorRT {trt.__version__} cannot deserialize this engine (built by "
                                   "another TensorRT version or for another GPU: rebuild it here)")
        self.context = self.engine.create_execution_context()
        self.trt10 = hasattr(self.engine, "num_io_tensors")
        if self.trt10:
            names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
            is_input = lambda n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT  # noqa: E731
            dtype_of = self.engine.get_tensor_dtype
        else:  # TensorRT 8.x bindings
            names = [self.engine.get_binding_name(i) for i in range(self.engine.num_bindings)]
            is_input = lambda n: self.engine.binding_is_input(n)  # noqa: E731
            dtype_of = self.engine.get_binding_dtype
        self.inputs = [n for n in names if is_input(n)]
        self.outputs = [n for n in names if not is_input(n)]
        self.names = names
        self.dtypes = {n: torch.from_numpy(np.zeros(0, trt.nptype(dtype_of(n)))).dtype for n in names}
        self.settings = {"version": trt.__version__, "device": torch.cuda.get_device_name(0),
                         "api": "named tensors (TensorRT 10)" if self.trt10 else "bindings (TensorRT 8)",
                         "engine_bytes": len(blob)}
        self.notes = ["a built engine runs repeatably for a fixed input on one GPU (checked: the first image twice); "
                      "building is not deterministic: tactic selection times kernels, so two builds from one ONNX can "
                      "pick different kernels and differ (NVIDIA/TensorRT #4730, #3316); compare each build with the "
                      ".pt, or reuse one timing cache / one engine",
                      "fp16/int8 engines (half=True, int8=True) compute in reduced precision by design"]

    def _shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self.context.get_tensor_shape(name) if self.trt10 else self.context.get_binding_shape(
            self.engine.get_binding_index(name)))

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        torch = self.torch
        inp = torch.from_numpy(np.ascontiguousarray(x)).to(self.device, self.dtypes[self.inputs[0]])
        if self.trt10:
            self.context.set_input_shape(self.inputs[0], tuple(inp.shape))
        else:
            self.context.set_binding_shape(self.engine.get_binding_index(self.inputs[0]), tuple(inp.shape))
        outs = {n: torch.empty(self._shape(n), dtype=self.dtypes[n], device=self.device) for n in self.outputs}
        buffers = {self.inputs[0]: inp, **outs}
        stream = torch.cuda.current_stream(self.device)
        if self.trt10:
            for n, t in buffers.items():
                self.context.set_tensor_address(n, t.data_ptr())
            ok = self.context.execute_async_v3(stream.cuda_stream)
        else:
            ok = self.context.execute_v2([buffers[n].data_ptr() for n in self.names])
        stream.synchronize()
        if not ok:
            raise RuntimeError("TensorRT execution failed")
        return [outs[n].float().cpu().numpy() for n in self.outputs]


def open_runtime(info: ExportInfo) -> Runtime:
    """The runtime that runs this export: ONNX Runtime or OpenVINO on CPU, TensorRT on CUDA."""
    if info.format == "engine":
        return TensorRtRuntime(info.file)
    return OnnxRuntime(info.file) if info.format == "onnx" else OpenVinoRuntime(info.file)


# ------------------------------------------------------------------------------------------- preprocessing


def load_image(file: Path, imgsz: int) -> Tuple[np.ndarray, Tuple[int, int]]:
    """BGR image resized so its long side is ``imgsz`` (area when shrinking), as the validators load it."""
    import cv2

    img = cv2.imread(str(file))
    if img is None:
        raise ParityInputError(f"{file}: not a readable image")
    h0, w0 = img.shape[:2]
    r = imgsz / max(h0, w0)
    if r != 1:
        interp = cv2.INTER_LINEAR if r > 1 else cv2.INTER_AREA
        img = cv2.resize(img, (min(round(w0 * r), imgsz), min(round(h0 * r), imgsz)), interpolation=interp)
    return img, (h0, w0)


def rect_shape(hw: Tuple[int, int], imgsz: int, stride: int) -> Tuple[int, int]:
    """The canvas a rectangular validation (batch 1) pads an image to: a stride multiple, half a stride of margin."""
    h, w = hw
    shape = np.ceil(np.array([h, w]) / max(h, w) * imgsz / stride + 0.5).astype(int) * stride
    return int(shape[0]), int(shape[1])


def pad_to(img: np.ndarray, shape: Tuple[int, int]) -> Tuple[np.ndarray, float, Tuple[float, float]]:
    """Letterbox ``img`` into ``shape`` (no upscaling, centred, grey 114): the canvas, the scale and the padding."""
    import cv2

    h, w = img.shape[:2]
    r = min(shape[0] / h, shape[1] / w, 1.0)
    nh, nw = round(h * r), round(w * r)
    if (nh, nw) != (h, w):
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    dh, dw = (shape[0] - nh) / 2, (shape[1] - nw) / 2
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return img, r, (left, top)


def to_tensor(img: np.ndarray, batch: int = 1) -> np.ndarray:
    """BGR HWC uint8 -> RGB NCHW float32 in [0, 1], repeated to ``batch``."""
    x = np.ascontiguousarray(img[..., ::-1].transpose(2, 0, 1), dtype=np.float32) / 255.0
    return np.repeat(x[None], max(batch, 1), axis=0)


# ----------------------------------------------------------------------------------------- post-processing


def xywh2xyxy(b: np.ndarray) -> np.ndarray:
    out = b.copy()
    out[..., 0], out[..., 1] = b[..., 0] - b[..., 2] / 2, b[..., 1] - b[..., 3] / 2
    out[..., 2], out[..., 3] = b[..., 0] + b[..., 2] / 2, b[..., 1] + b[..., 3] / 2
    return out


def nms(pred: np.ndarray, nc: int, conf: float, iou: float, max_det: int, multi_label: bool,
        agnostic: bool = False, yolov5: bool = False, max_nms: int = 30000) -> np.ndarray:
    """Detections ``(n, 6)`` [x1, y1, x2, y2, conf, cls] from one image's decoded head output.

    ``pred``: ``(4 + nc [+ extra], anchors)`` (Ultralytics) or ``(anchors, 5 + nc)`` (YOLOv5, objectness times
    class score). ``multi_label``: every class above ``conf`` per anchor (validation); else the best class only.
    """
    import torch

    p = torch.from_numpy(np.ascontiguousarray(pred, dtype=np.float32))
    if yolov5:
        boxes, scores = p[:, :4], p[:, 5:5 + nc] * p[:, 4:5]
    else:
        p = p.T
        boxes, scores = p[:, :4], p[:, 4:4 + nc]
    boxes = torch.from_numpy(xywh2xyxy(boxes.numpy()))
    if multi_label:
        i, j = (scores > conf).nonzero(as_tuple=True)
        b, s, c = boxes[i], scores[i, j], j.float()
    else:
        s, j = scores.max(1)
        keep = s > conf
        b, s, c = boxes[keep], s[keep], j[keep].float()
    if not len(s):
        return np.zeros((0, 6), np.float32)
    # ties (flat image regions, the grey padding) are broken by anchor order with scores compared on a 1e-5 grid,
    # so the last-ulp differences of two runtimes do not reorder equal boxes and change which one NMS keeps
    s_np, b_np, c_np = s.numpy().astype(np.float64), b.numpy(), c.numpy()
    order = np.lexsort((np.arange(len(s_np)), -np.round(s_np / SCORE_GRID)))[:max_nms]
    offset = 0 if agnostic else c_np[order, None] * (float(np.abs(b_np).max()) * 2 + 1)
    boxes_o = torch.from_numpy(np.ascontiguousarray(b_np[order] + offset, dtype=np.float32))
    # greedy NMS in exactly this order: torchvision's kernel ranks by score, so the rank itself is the score
    rank = torch.arange(len(order), 0, -1, dtype=torch.float32)
    keep = _nms_kernel(boxes_o, rank, iou)[:max_det]
    idx = order[np.sort(keep.numpy())]
    return np.concatenate([b_np[idx], s_np[idx, None], c_np[idx, None]], 1).astype(np.float32)


def _nms_kernel(boxes: "torch.Tensor", scores: "torch.Tensor", iou: float) -> "torch.Tensor":
    """Indices greedy NMS keeps (IoU > ``iou`` suppresses), highest score first: torchvision's, else a loop."""
    import torch

    try:
        import torchvision

        return torchvision.ops.nms(boxes, scores, iou)
    except (ImportError, RuntimeError):  # torchvision absent or built without its C++ ops
        order = torch.argsort(scores, descending=True, stable=True)
        b = boxes[order].numpy()
        alive = np.ones(len(b), bool)
        keep: List[int] = []
        for k in range(len(b)):
            if alive[k]:
                keep.append(k)
                alive[k + 1:] &= box_iou(b[k:k + 1], b[k + 1:])[0] <= iou
        return order[keep]


def canonical_topk(out: np.ndarray) -> np.ndarray:
    """A one-to-one head's ranked ``(B, k, 6+)`` output in a canonical row order, the tie group at the cut dropped.

    Top-k picks arbitrarily among equal scores (flat image regions give exactly equal ones), so rows are ordered
    by score (on the tie grid), class and box, and the rows tied with the last kept score, which either model may
    have chosen differently, are left out of the comparison.
    """
    rows = out[0]
    key = np.round(rows[:, 4] / SCORE_GRID)
    order = np.lexsort((rows[:, 3], rows[:, 2], rows[:, 1], rows[:, 0], rows[:, 5], -key))
    rows, key = rows[order], key[order]
    if len(rows) and rows[-1, 4] > 0:
        rows = rows[key > key[-1]]
    return rows[None]


def from_graph(out: np.ndarray, conf: float) -> np.ndarray:
    """Detections from a graph that already chose them (NMS inside, or the one-to-one head): ``(k, 6+)`` rows."""
    out = np.asarray(out, np.float32)[:, :6]
    return out[out[:, 4] > conf]


def scale_back(dets: np.ndarray, r: float, pad: Tuple[float, float]) -> np.ndarray:
    out = dets.copy()
    out[:, [0, 2]] = (out[:, [0, 2]] - pad[0]) / r
    out[:, [1, 3]] = (out[:, [1, 3]] - pad[1]) / r
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (n, 4) with every box in ``b`` (m, 4), xyxy."""
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.clip(rb - lt, 0, None).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-9)


# ------------------------------------------------------------------------------------------------- metrics


def _correct(dets: np.ndarray, gt: np.ndarray, iouv: np.ndarray) -> np.ndarray:
    """(n, 10) bool: detection i is a true positive at IoU threshold t (greedy, one ground truth each)."""
    correct = np.zeros((len(dets), len(iouv)), bool)
    if not len(dets) or not len(gt):
        return correct
    iou = box_iou(gt[:, 1:5], dets[:, :4]) * (gt[:, :1] == dets[None, :, 5])
    for t, thr in enumerate(iouv):
        gi, di = np.nonzero(iou >= thr)
        if not len(gi):
            continue
        order = np.argsort(-iou[gi, di], kind="stable")
        gi, di = gi[order], di[order]
        _, first = np.unique(di, return_index=True)
        gi, di = gi[np.sort(first)], di[np.sort(first)]
        _, first = np.unique(gi, return_index=True)
        correct[di[first], t] = True
    return correct


def box_map(per_image: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Dict[str, float]:
    """Box mAP50 and mAP50-95 (101-point interpolation) over ``(detections, labels[cls, x1, y1, x2, y2])`` pairs."""
    iouv = np.linspace(0.5, 0.95, 10)
    tps, confs, classes, gts = [], [], [], []
    for dets, gt in per_image:
        tps.append(_correct(dets, gt, iouv))
        confs.append(dets[:, 4])
        classes.append(dets[:, 5])
        gts.append(gt[:, 0])
    tp, conf, pcls, gcls = (np.concatenate(x) if x else np.zeros(0) for x in (tps, confs, classes, gts))
    tp = tp.reshape(-1, len(iouv))
    aps = []
    for c in np.unique(gcls):
        n_gt = int((gcls == c).sum())
        sel = np.nonzero(pcls == c)[0]
        # equal confidences (on the tie grid) keep image and detection order: last-ulp noise does not reorder them
        sel = sel[np.lexsort((sel, -np.round(conf[sel] / SCORE_GRID)))]
        ap = np.zeros(len(iouv))
        if len(sel):
            ctp = tp[sel].cumsum(0)
            cfp = (~tp[sel]).cumsum(0)
            recall, precision = ctp / n_gt, ctp / (ctp + cfp)
            for t in range(len(iouv)):
                mrec = np.concatenate(([0.0], recall[:, t], [1.0]))
                mpre = np.flip(np.maximum.accumulate(np.flip(np.concatenate(([1.0], precision[:, t], [0.0])))))
                x = np.linspace(0, 1, 101)
                ap[t] = np.trapezoid(np.interp(x, mrec, mpre), x) if hasattr(np, "trapezoid") else np.trapz(np.interp(x, mrec, mpre), x)
        aps.append(ap)
    aps = np.array(aps) if aps else np.zeros((0, len(iouv)))
    return {"map50": float(aps[:, 0].mean()) if len(aps) else 0.0,
            "map50_95": float(aps.mean()) if len(aps) else 0.0}


def _delta(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, float]:
    return {k: round(a[k] - b[k], 6) for k in a}


# ----------------------------------------------------------------------------------------------- the data


def _images_and_labels(data: os.PathLike, limit: int) -> List[Tuple[Path, Optional[Path]]]:
    """The validation images of a data YAML (or an image folder) and their label files where they exist."""
    import yaml

    data = Path(data)
    if data.is_dir():
        sources, root = [data], data
    else:
        if not data.exists():
            raise ParityInputError(f"{data}: no such data YAML or image folder")
        cfg = yaml.safe_load(data.read_text()) or {}
        root = Path(cfg.get("path") or data.parent)
        if not root.is_absolute():
            root = (data.parent / root).resolve()
        val = cfg.get("val") or cfg.get("test")
        if not val:
            raise ParityInputError(f"{data}: no 'val' entry")
        sources = [root / v for v in (val if isinstance(val, list) else [val])]
    files: List[Path] = []
    for s in sources:
        if s.is_dir():
            files += sorted(p for p in s.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif s.suffix == ".txt" and s.exists():
            files += [(root / line.strip()).resolve() for line in s.read_text().splitlines() if line.strip()]
        elif s.exists():
            files.append(s)
    if not files:
        raise ParityInputError(f"{data}: no validation images found")
    out = []
    for f in files[:limit]:
        parts = list(f.parts)
        label = None
        if "images" in parts:
            i = len(parts) - 1 - parts[::-1].index("images")
            label = Path(*parts[:i], "labels", *parts[i + 1:]).with_suffix(".txt")
        out.append((f, label if label is not None and label.exists() else None))
    return out


def _labels(file: Optional[Path], hw: Tuple[int, int]) -> Optional[np.ndarray]:
    """``(n, 5)`` [cls, x1, y1, x2, y2] in pixels of the original image; polygons reduced to their box."""
    if file is None:
        return None
    h, w = hw
    rows = []
    for line in file.read_text().splitlines():
        v = [float(x) for x in line.split()]
        if len(v) < 5:
            continue
        if len(v) > 5 and (len(v) - 1) % 2 == 0 and len(v) > 7:  # polygon
            xs, ys = np.array(v[1::2]) * w, np.array(v[2::2]) * h
            rows.append([v[0], xs.min(), ys.min(), xs.max(), ys.max()])
        else:
            x, y, bw, bh = v[1] * w, v[2] * h, v[3] * w, v[4] * h
            rows.append([v[0], x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2])
    return np.array(rows, np.float32).reshape(-1, 5)


# ---------------------------------------------------------------------------------------- the torch model


class TorchModel:
    """The ``.pt`` model in float32 on CPU; the head switched between one-to-many and one-to-one on request."""

    def __init__(self, path: Path):
        import torch

        try:
            self.model, _ = export_provenance.load_checkpoint_model(path)
        except (OSError, RuntimeError, ValueError, ModuleNotFoundError) as exc:
            raise ParityInputError(f"{path}: cannot load the PyTorch model ({exc})") from exc
        self.digest = export_provenance.weights_digest(self.model)
        self.head = self.model.model[-1] if hasattr(self.model, "model") else None
        self.yolov5 = type(self.head).__name__ == "Detect" and hasattr(self.head, "anchors") and hasattr(self.head, "na")
        names = getattr(self.model, "names", None)
        self.nc = len(names) if names else int(getattr(self.head, "nc", 0))
        self.names = class_names(names)
        self.stride = int(max(self.model.stride)) if hasattr(self.model, "stride") else 32
        self.has_one2one = getattr(self.head, "one2one_cv2", None) is not None
        if hasattr(self.model, "fuse") and not self.has_one2one:
            # Conv+BN folded, as `yolo val` / val.py and the exporters run it (fusing an end-to-end model would drop
            # its one-to-many head, which the one-to-one cause needs)
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    self.model = self.model.fuse(verbose=False)
                except TypeError:  # YOLOv5's fuse() takes no verbose
                    self.model = self.model.fuse()
            self.model.eval()
        self.torch = torch
        self._fp16 = None

    def __call__(self, x: np.ndarray, end2end: bool = False, fp16_weights: bool = False) -> List[np.ndarray]:
        """The decoded outputs for the batch ``x`` (one-to-one head when ``end2end``)."""
        return self.run(x, end2end, fp16_weights=fp16_weights)[0]

    def run(self, x: np.ndarray, end2end: bool = False, one2many: bool = False,
            fp16_weights: bool = False) -> Tuple[List[np.ndarray], Optional[List[np.ndarray]]]:
        """The decoded outputs, and with ``one2many`` those of the one-to-many head from the same forward pass.

        An end-to-end head computes both heads in every eval forward (the one-to-many raw maps come back beside the
        one-to-one result), so its one-to-many decoding costs no second pass through the backbone.
        """
        model = self._half_rounded() if fp16_weights else self.model
        head = model.model[-1] if hasattr(model, "model") else None
        if self.has_one2one:
            head.end2end = end2end
        with self.torch.no_grad():
            out = model(self.torch.from_numpy(x))
            o2m = None
            if one2many:
                raw = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
                if isinstance(raw, dict) and isinstance(raw.get("one2many"), dict) and hasattr(head, "_inference"):
                    head.end2end = False  # decode as the one-to-many head does (xywh boxes)
                    try:
                        o2m = [head._inference(raw["one2many"]).float().numpy()]
                    finally:
                        head.end2end = end2end
                else:
                    o2m = self.run(x, False, fp16_weights=fp16_weights)[0]
        first = out[0] if isinstance(out, (tuple, list)) else out
        tensors = list(first) if isinstance(first, (tuple, list)) else [first]
        return [t.float().numpy() for t in tensors if isinstance(t, self.torch.Tensor)], o2m

    def clone(self) -> "TorchModel":
        """An independent copy (own modules and head state) for a forward on another thread."""
        import copy

        twin = copy.copy(self)
        twin.model, twin.head, twin._fp16 = copy.deepcopy(self.model), None, None
        twin.head = twin.model.model[-1] if hasattr(twin.model, "model") else None
        return twin

    def _half_rounded(self):
        """The model with every float weight rounded to fp16 and back: what an fp16-weight export computes with."""
        if self._fp16 is None:
            import copy

            self._fp16 = copy.deepcopy(self.model).half().float().eval()
        return self._fp16


# ------------------------------------------------------------------------------------------------ the report


@dataclass
class ParityReport(verdicts.Judged):
    """Everything one ``yolo-det parity`` compared and concluded."""

    model: str
    exported: str
    format: str
    runtime: Dict[str, Any]
    images: int
    imgsz: Optional[Tuple[int, int]]
    raw: List[Dict[str, Any]] = field(default_factory=list)
    raw_note: Optional[str] = None
    boxes: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, Any] = field(default_factory=dict)
    causes: List[Dict[str, Any]] = field(default_factory=list)
    provenance: Dict[str, Any] = field(default_factory=dict)
    class_names: Dict[str, Any] = field(default_factory=dict)
    skipped: List[Dict[str, Any]] = field(default_factory=list)
    rect: Dict[str, Any] = field(default_factory=dict)
    verdict: str = verdicts.NOT_PROVEN
    reasons: List[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        """The report as a JSON-able dict."""
        from dataclasses import asdict

        out = asdict(self)
        out["exit_code"] = self.exit_code
        return self.stamped(out)

    def describe(self) -> List[str]:
        """The report as text lines."""
        rt = self.runtime
        lines = [f"parity: {self.model} vs {self.exported} ({self.format}, {rt['name']} {rt['settings'].get('version', '')})",
                 f"  runtime settings: " + ", ".join(f"{k}={v}" for k, v in rt["settings"].items() if k != "version"),
                 f"  runtime repeat on the same input: {'bit-identical' if rt.get('repeatable') else 'DIFFERS'}",
                 f"  {self.images} images, square letterbox {self.imgsz}, the same float32 tensors fed to both"]
        if self.raw_note:
            lines.append(f"  raw outputs: {self.raw_note}")
        for r in self.raw:
            lines.append(f"  raw {r['output']} {r['shape']}: max abs error {r['max_abs']:.3g} at {r['where_abs']}, "
                         f"max rel error {r['max_rel']:.3g} at {r['where_rel']} "
                         f"({'within' if r['within'] else 'BEYOND'} tolerance rtol={RTOL:g}, atol={r['atol']:.3g})")
        b = self.boxes
        if b:
            lines.append(f"  boxes after NMS: {b['matched']} matched (IoU >= {BOX_MATCH_IOU}, same class), "
                         f"{b['only_pt']} only in the .pt, {b['only_export']} only in the export"
                         + (f", max conf difference {b['max_conf_diff']:.3g}" if b.get("max_conf_diff") is not None else ""))
            for c in b.get("threshold_crossers", [])[:5]:
                lines.append(f"    crosses conf {c['threshold']}: image {c['image']} class {c['cls']} "
                             f"pt conf {c['pt_conf']} vs export {c['export_conf']}")
        m = self.metrics
        if m.get("pt_matched"):
            pe = m.get("export_matched")
            lines.append(f"  box mAP50-95 under matched settings: .pt {m['pt_matched']['map50_95']:.4f}"
                         + (f", export {pe['map50_95']:.4f}" if pe else "")
                         + f"  (mAP50 {m['pt_matched']['map50']:.4f}" + (f" / {pe['map50']:.4f}" if pe else "") + ")")
        lines += self._describe_rect()
        for s in self.skipped[:10]:
            lines.append(f"  image {s['image']} ({s['file']}) left out of {s['left_out_of']}: {s['why']}")
        if len(self.skipped) > 10:
            lines.append(f"  ... and {len(self.skipped) - 10} more images left out (see --json)")
        if self.class_names:
            lines.append(f"  class names: {self.class_names['detail']}")
        if self.causes:
            lines.append("  causes (metric change when only it is aligned):")
            for c in self.causes:
                ch = c.get("metric_change")
                change = (f"mAP50-95 {ch['map50_95']:+.4f}, mAP50 {ch['map50']:+.4f}" if ch else "not measurable")
                lines.append(f"    - {c['cause']}: {c['detail']} [{change}]"
                             + (" (aligned in this comparison)" if c.get("aligned") else ""))
        if self.provenance:
            lines.append(f"  provenance: {self.provenance.get('status')}")
        lines.append(f"verdict: {self.verdict}" + (": " + "; ".join(self.reasons) if self.reasons else ""))
        return lines

    def _describe_rect(self) -> List[str]:
        """Text lines of a dynamic export's comparison at the rect shapes `yolo val` feeds it."""
        r = self.rect
        if not r:
            return []
        lines = [f"  rect shapes `yolo val` feeds this dynamic export: {r['shapes']}, compared {r['compared']}"]
        lines += [f"    NOT compared {s['shape']} (image {', '.join(map(str, s['images']))}): {s['why']}"
                  for s in r["not_compared"]]
        b, m = r["boxes"], r.get("metrics")
        lines.append(f"    boxes at the rect shapes: {b['matched']} matched, {b['only_pt']} only in the .pt, "
                     f"{b['only_export']} only in the export"
                     + (f", max conf difference {b['max_conf_diff']:.3g}" if b.get("max_conf_diff") is not None else ""))
        if m:
            lines.append(f"    box mAP50-95 at the rect shapes: .pt {m['pt']['map50_95']:.4f}, export "
                         f"{m['export']['map50_95']:.4f}")
        return lines


def _compare_raw(ref: np.ndarray, got: np.ndarray, name: str) -> Dict[str, Any]:
    err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    # the absolute tolerance scales with each channel's magnitude (pixel boxes vs [0, 1] scores): the channel axis
    # is the shorter of the last two (4 + nc vs anchors; 6 vs max_det), prototypes use their whole range
    axis = (1 if ref.shape[1] <= ref.shape[2] else 2) if ref.ndim == 3 else None
    mag = np.abs(ref).max(axis=tuple(i for i in range(ref.ndim) if i != axis), keepdims=True) if axis and ref.size \
        else np.full((1,) * ref.ndim, np.abs(ref).max() if ref.size else 0.0)
    atol_arr = ATOL_SCALE * np.maximum(mag, 1.0)
    atol = float(atol_arr.max())
    rel = err / (np.abs(ref) + atol_arr)
    ia, ir = np.unravel_index(int(err.argmax()), err.shape), np.unravel_index(int(rel.argmax()), rel.shape)
    return {"output": name, "shape": list(ref.shape), "max_abs": float(err.max()), "where_abs": [int(i) for i in ia],
            "max_rel": float(rel.max()), "where_rel": [int(i) for i in ir], "atol": atol,
            "within": bool(np.all(err <= atol_arr + RTOL * np.abs(ref)))}


def _match_boxes(pt: List[np.ndarray], ex: List[np.ndarray], conf: float,
                 pt_low: Optional[List[np.ndarray]] = None, ex_low: Optional[List[np.ndarray]] = None) -> Dict[str, Any]:
    matched = only_pt = only_ex = 0
    conf_diff: List[float] = []
    crossers: List[Dict[str, Any]] = []
    for i, (a, b) in enumerate(zip(pt, ex)):
        iou = box_iou(a[:, :4], b[:, :4]) * (a[:, None, 5] == b[None, :, 5]) if len(a) and len(b) else np.zeros((len(a), len(b)))
        # greedy, highest .pt confidence first, each export box used once; only rows with a candidate loop
        iou = np.where(iou >= BOX_MATCH_IOU, iou, -1.0)
        used = np.zeros(len(b), bool)
        hit_a = np.zeros(len(a), bool)
        for ia in (np.argsort(-a[:, 4], kind="stable") if len(a) else []):
            if iou[ia].max(initial=-1.0) < 0:
                continue
            row = np.where(used, -1.0, iou[ia])
            j = int(row.argmax())
            if row[j] >= 0:
                used[j] = True
                hit_a[ia] = True
                conf_diff.append(abs(float(a[ia, 4]) - float(b[j, 4])))
        matched += int(hit_a.sum())
        only_pt += int((~hit_a).sum())
        only_ex += int((~used).sum())
        for src, dst, low, key in ((a[~hit_a], b, ex_low, "pt"), (b[~used], a, pt_low, "export")):
            if low is None or low[i] is None:
                continue
            for row in src:
                other = low[i]
                ious = box_iou(row[None, :4], other[:, :4])[0] * (other[:, 5] == row[5]) if len(other) else np.zeros(0)
                if len(ious) and ious.max() >= 0.5 and other[ious.argmax(), 4] <= conf:
                    c = float(other[ious.argmax(), 4])
                    crossers.append({"image": i, "cls": int(row[5]), "threshold": conf, "kept_by": key,
                                     "pt_conf": round(float(row[4]) if key == "pt" else c, 6),
                                     "export_conf": round(c if key == "pt" else float(row[4]), 6)})
    return {"matched": matched, "only_pt": only_pt, "only_export": only_ex,
            "max_conf_diff": max(conf_diff) if conf_diff else None, "threshold_crossers": crossers,
            "agree": only_pt == 0 and only_ex == 0}


@contextlib.contextmanager
def _restore_threads(torch: Any, threads: int) -> Iterator[None]:
    """Put torch's intra-op thread count back to ``threads`` on leaving."""
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _rect_variant(model: "TorchModel", images: List[Tuple[int, np.ndarray]], imgsz: Tuple[int, int], stride: int,
                  post: Callable[[List[np.ndarray]], np.ndarray], end2end: bool) -> Dict[int, np.ndarray]:
    """The .pt's detections on each image's rectangular canvas (as `yolo val` of a .pt letterboxes), batched by shape."""
    canvases = [(k, *pad_to(img, rect_shape(img.shape[:2], max(imgsz), stride))) for k, img in images]
    outs = _forward_by_shape(model, [to_tensor(canvas) for _, canvas, _, _ in canvases], end2end)
    return {k: scale_back(post(out), r, pad) for (k, _, r, pad), out in zip(canvases, outs)}


def _forward_by_shape(model: "TorchModel", xs: List[np.ndarray], end2end: bool) -> List[List[np.ndarray]]:
    """The .pt's outputs for each tensor of ``xs``, those of one shape run as one batch (conv kernels do not mix
    images, so a row is its batch-1 result)."""
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, x in enumerate(xs):
        groups.setdefault(x.shape, []).append(i)
    out: List[List[np.ndarray]] = [[] for _ in xs]
    for members in groups.values():
        outs = model(np.concatenate([xs[i] for i in members]), end2end=end2end)
        for j, i in enumerate(members):
            out[i] = _row(outs, j)
    return out


def _run_export(runtime: Runtime, x1: np.ndarray, batch: int,
                twice: bool) -> Tuple[List[np.ndarray], Optional[List[np.ndarray]]]:
    """The export's outputs for one image at its static batch (copies), and a second run when ``twice``."""
    x = np.repeat(x1, batch, axis=0) if batch > 1 else x1
    out = runtime(x)
    return out, (runtime(x) if twice else None)


def _row(outs: List[np.ndarray], i: int) -> List[np.ndarray]:
    """Image ``i`` of a batched forward's outputs, keeping the batch axis."""
    return [o[i:i + 1] for o in outs]


LEFT_OUT_OF_ALL, LEFT_OUT_OF_RAW = "every comparison", "the raw comparison"


@dataclass
class _Image:
    """One validation image as parity feeds it: loaded, letterboxed square into the export's input, its labels."""

    n: int
    file: Path
    img: np.ndarray
    hw0: Tuple[int, int]
    x: np.ndarray
    r: float
    pad: Tuple[float, float]
    gt: Optional[np.ndarray]


def _load_chunk(items: List[Tuple[Path, Optional[Path]]], start: int, imgsz: Tuple[int, int],
                skipped: List[Dict[str, Any]]) -> List[_Image]:
    """The readable images of the chunk at ``start``; an unreadable one is added to ``skipped`` (``yolo val`` drops
    it too), so the verdict can say what was not compared."""
    chunk = []
    for n, (file, label_file) in enumerate(items[start:start + CHUNK], start):
        try:
            img, hw0 = load_image(file, max(imgsz))
        except ParityInputError:
            skipped.append({"image": n, "file": str(file), "why": "unreadable image (OpenCV cannot decode it)",
                            "left_out_of": LEFT_OUT_OF_ALL})
            continue
        canvas, r, pad = pad_to(img, imgsz)
        chunk.append(_Image(n, file, img, hw0, to_tensor(canvas), float(r), pad, _labels(label_file, hw0)))
    return chunk


def _skip(image: _Image, why: str, left_out_of: str) -> Dict[str, Any]:
    """An image left out of a comparison, as the report lists it."""
    return {"image": image.n, "file": str(image.file), "why": why, "left_out_of": left_out_of}


def _skip_reasons(skipped: List[Dict[str, Any]], total: int) -> List[str]:
    """One line per comparison images were left out of: how many of ``total``, which, and why."""
    lines = []
    for where in (LEFT_OUT_OF_ALL, LEFT_OUT_OF_RAW):
        group = [s for s in skipped if s["left_out_of"] == where]
        if not group:
            continue
        whys = list(dict.fromkeys(s["why"] for s in group))
        ids = ", ".join(str(s["image"]) for s in group[:10]) + (", ..." if len(group) > 10 else "")
        lines.append(f"{len(group)} of {total} images left out of {where} (image {ids}): " + "; ".join(whys[:3])
                     + (f"; and {len(whys) - 3} other reasons" if len(whys) > 3 else ""))
    return lines


def _run_export_guarded(runtime: Runtime, x1: np.ndarray, batch: int, twice: bool
                        ) -> Tuple[Optional[List[np.ndarray]], Optional[List[np.ndarray]], Optional[str]]:
    """:func:`_run_export`, and the runtime's error as text where it refuses this input (the image is then left
    out of the comparison, said why) instead of ending the whole comparison."""
    try:
        out, again = _run_export(runtime, x1, batch, twice)
    except Exception as exc:  # noqa: BLE001 - each runtime raises its own error types
        return None, None, f"{type(exc).__name__}: {exc}"
    return out, again, None


def _aligned(pt_out: List[np.ndarray], ex_out: List[np.ndarray],
             end2end: bool) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """One image's outputs of both models ready to compare: the export's first batch row; a one-to-one head's rows
    in canonical order (see :func:`canonical_topk`)."""
    if end2end:
        pt_out = [canonical_topk(pt_out[0]), *pt_out[1:]]
        ex_out = [canonical_topk(ex_out[0][:1]), *ex_out[1:]]
    return pt_out, [o[:1] for o in ex_out]


def _fold_raw(rows: Dict[str, Dict[str, Any]], pt_out: List[np.ndarray], ex_out: List[np.ndarray], n: int,
              suffix: str = "") -> Optional[str]:
    """Fold image ``n``'s raw comparison into ``rows`` (the worst error per output); why it cannot be compared, else
    None. Outputs of equal shape are compared in order (a YOLOv5 export may carry per-level maps after the first)."""
    if not (pt_out and ex_out and pt_out[0].shape == ex_out[0].shape):
        return (f"output shapes differ: the .pt gives {[list(a.shape) for a in pt_out]}, the export "
                f"{[list(b.shape) for b in ex_out]}")
    for j, (a, b) in enumerate(zip(pt_out, ex_out)):
        if a.shape != b.shape:
            break
        row = _compare_raw(a, b, f"output{j}{suffix}")
        best = rows.get(row["output"])
        if best is None:
            rows[row["output"]] = {**row, "image": n}
            continue
        if row["max_abs"] > best["max_abs"]:
            best.update({k: row[k] for k in ("max_abs", "where_abs", "shape")}, image=n)
        if row["max_rel"] > best["max_rel"]:
            best.update({k: row[k] for k in ("max_rel", "where_rel")})
        best["within"] = best["within"] and row["within"]
    return None


@dataclass
class _Canvas:
    """An image letterboxed into one of the rect shapes `yolo val` feeds a dynamic export."""

    image: _Image
    shape: Tuple[int, int]
    x: np.ndarray
    r: float
    pad: Tuple[float, float]
    own: bool  # the image's own shape (batch 1); False: the padded square of a batch mixing wide and tall images


def _rect_canvases(chunk: List[_Image], imgsz: Tuple[int, int], stride: int, with_square: bool) -> List[_Canvas]:
    """Every shape `yolo val` letterboxes these images into at any batch size: a batch's shape is that of its
    widest-tall or tallest-wide image alone, or the padded square where it holds both (Ultralytics' and YOLOv5's
    ``batch_shapes``, pad 0.5). Each image at its own shape; with ``with_square`` the first also at that square."""
    canvases = []
    for im in chunk:
        shape = rect_shape(im.hw0, max(imgsz), stride)
        canvas, r, pad = pad_to(im.img, shape)
        canvases.append(_Canvas(im, shape, to_tensor(canvas), float(r), pad, True))
    square = rect_shape((1, 1), max(imgsz), stride)
    if with_square and chunk and all(c.shape != square for c in canvases):
        canvas, r, pad = pad_to(chunk[0].img, square)
        canvases.append(_Canvas(chunk[0], square, to_tensor(canvas), float(r), pad, False))
    return canvases


class _RectPass:
    """A dynamic export compared with the .pt at the rect shapes `yolo val` feeds it: raw outputs, boxes, metrics."""

    def __init__(self, post: Callable[..., np.ndarray], end2end: bool, graph_selected: bool, export_conf: float,
                 nms_baked: bool):
        self.post, self.end2end, self.graph_selected = post, end2end, graph_selected
        self.export_conf, self.nms_baked = export_conf, nms_baked
        self.rows: Dict[str, Dict[str, Any]] = {}
        self.fed: Dict[Tuple[int, int], None] = {}
        self.failed: Dict[Tuple[int, int], Dict[str, Any]] = {}
        self.pt: List[np.ndarray] = []
        self.ex: List[np.ndarray] = []
        self.labelled: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, c: _Canvas, pt_out: List[np.ndarray],
            result: Tuple[Optional[List[np.ndarray]], Optional[List[np.ndarray]], Optional[str]]) -> None:
        """Compare one canvas: the .pt's outputs and the export's (``_run_export_guarded``'s result)."""
        ex_out, _, error = result
        self.fed[tuple(c.shape)] = None
        if error is not None:
            self._fail(c, f"the export's runtime failed: {error}")
            return
        pt_out, ex_out = _aligned(pt_out, ex_out, self.end2end)
        why = _fold_raw(self.rows, pt_out, ex_out, c.image.n, " rect")
        if why is not None and not self.nms_baked:
            self._fail(c, why)
        pt = scale_back(self.post(pt_out, self.end2end), c.r, c.pad)
        ex = scale_back(self.post(ex_out, self.graph_selected, self.export_conf), c.r, c.pad)
        self.pt.append(pt), self.ex.append(ex)
        if c.own and c.image.gt is not None:
            self.labelled.append((pt, ex, c.image.gt))

    def _fail(self, c: _Canvas, why: str) -> None:
        entry = self.failed.setdefault(tuple(c.shape), {"shape": list(c.shape), "images": [], "why": why})
        entry["images"].append(c.image.n)

    def summary(self, conf: float) -> Dict[str, Any]:
        """The shapes fed, compared and not (with why), the boxes matched and box mAP at those shapes."""
        metrics: Dict[str, Any] = {}
        if self.labelled and sum(len(g) for _, _, g in self.labelled):
            pm = box_map([(p, g) for p, _, g in self.labelled])
            em = box_map([(e, g) for _, e, g in self.labelled])
            metrics = {"pt": pm, "export": em, "delta": _delta(em, pm)}
        return {"shapes": sorted(list(s) for s in self.fed),
                "compared": sorted(list(s) for s in self.fed if s not in self.failed),
                "not_compared": [self.failed[s] for s in sorted(self.failed)],
                "boxes": _match_boxes(self.pt, self.ex, conf), "metrics": metrics}


def _rect_reasons(rect: Dict[str, Any]) -> List[str]:
    """The differences a dynamic export shows at the rect shapes (raw errors are named with the other raw outputs)."""
    if not rect:
        return []
    out = []
    b, m = rect["boxes"], rect.get("metrics")
    if not b["agree"]:
        out.append(f"at the rect shapes: {b['only_pt']} boxes only in the .pt, {b['only_export']} only in the export")
    elif b.get("max_conf_diff") is not None and b["max_conf_diff"] > CONF_TOL:
        out.append(f"at the rect shapes: matched boxes' confidences differ by up to {b['max_conf_diff']:.3g} "
                   f"(tolerance {CONF_TOL:g})")
    if m and any(abs(v) > METRIC_TOL for v in m["delta"].values()):
        out.append(f"at the rect shapes: mAP50-95 {m['pt']['map50_95']:.4f} (.pt) vs {m['export']['map50_95']:.4f} "
                   "(export)")
    return out


def check(model_path: os.PathLike, exported: os.PathLike, data: Optional[os.PathLike] = None,
          max_images: int = 100, conf: float = VAL_CONF, echo: Callable[[str], None] = lambda _: None) -> ParityReport:
    """Compare ``model_path`` (.pt) with ``exported`` on the validation images of ``data``; see the module doc."""
    t0 = time.perf_counter()
    model_path, exported = Path(model_path), Path(exported)
    if not model_path.exists():
        raise ParityInputError(f"{model_path}: no such PyTorch model")
    info = read_export(exported)
    torch_model = TorchModel(model_path)
    try:
        runtime = open_runtime(info)
    except ParityInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - each runtime raises its own error types
        raise ParityInputError(f"{exported}: the {info.format} runtime cannot load it ({exc})") from exc
    if data is None:
        raise ParityInputError("no images to compare on: give --data DATA (a data YAML or an image folder)")
    items = _images_and_labels(data, max_images)
    imgsz = info.imgsz or (tuple(info.metadata.get("imgsz")) if info.metadata.get("imgsz") else None)
    if imgsz is None:
        raise ParityInputError(f"{exported}: a dynamic export without an image size in its metadata")
    batch = info.batch or 1
    stride = int(info.metadata.get("stride") or torch_model.stride)
    nc = torch_model.nc
    e2e = info.end2end
    yolov5 = torch_model.yolov5
    baked = {k: info.export_args.get(k, EXPORT_NMS_DEFAULTS[k]) for k in EXPORT_NMS_DEFAULTS}
    if baked["conf"] is None:
        baked["conf"] = EXPORT_NMS_DEFAULTS["conf"]
    baked_recorded = bool((info.provenance or {}).get("export_args"))

    def post(out: List[np.ndarray], graph_selected: bool, c: float = conf, single: Optional[dict] = None) -> np.ndarray:
        o = out[0][0]
        if graph_selected:
            return from_graph(o, c)
        if single:
            return nms(o, nc, single["conf"], single["iou"], single["max_det"], False, bool(single["agnostic_nms"]), yolov5)
        return nms(o, nc, c, VAL_IOU, VAL_MAX_DET, True, False, yolov5)

    raw_rows: Dict[str, Dict[str, Any]] = {}
    pt_dets, ex_dets, pt_low, ex_low = [], [], [], []
    variants: Dict[str, List[np.ndarray]] = {k: [] for k in ("pt_rect", "pt_o2m", "pt_baked", "pt_fp16")}
    labels: List[Optional[np.ndarray]] = []
    compared: List[int] = []  # the images in the box and metric comparison, in order
    skipped: List[Dict[str, Any]] = []  # the images left out of a comparison, and why
    repeatable, repeat_checked = True, False
    raw_note = None
    graph_selected = info.nms_baked or e2e
    # a dynamic export is what `yolo val` letterboxes rect: compared at those shapes too
    rect_pass = _RectPass(post, e2e, graph_selected, conf if not info.nms_baked else 0.0, info.nms_baked) \
        if info.dynamic else None
    # two threads share the cores: this one runs the .pt on the square tensors, the other the export (one thread,
    # its deterministic setting) and the .pt on the rect canvases (the letterbox cause) with its own model copy
    # (a head caches its anchors per input shape); torch's intra-op threads are split between the two
    rect_model = None if info.dynamic else torch_model.clone()
    torch_threads = torch_model.torch.get_num_threads()
    torch_model.torch.set_num_threads(max(1, torch_threads // 2 if rect_model is not None else torch_threads - 1))
    with _restore_threads(torch_model.torch, torch_threads), \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="parity-export") as pool:
        for start in range(0, len(items), CHUNK):
            # one letterbox per image; the .pt runs each chunk as one batch (its rows are the batch-1 results: conv
            # kernels do not mix images), the export image by image at its own static batch
            chunk = _load_chunk(items, start, imgsz, skipped)
            if not chunk:
                continue
            xs = np.concatenate([im.x for im in chunk])
            # the export runs on its own thread while the .pt computes (both release the GIL in their kernels; each
            # runtime's result does not depend on what else runs); the first image runs twice (repeatability)
            ex_jobs = [pool.submit(_run_export_guarded, runtime, im.x, batch, not repeat_checked and k == 0)
                       for k, im in enumerate(chunk)]
            canvases = _rect_canvases(chunk, imgsz, stride, with_square=start == 0) if rect_pass else []
            rect_jobs = [pool.submit(_run_export_guarded, runtime, c.x, batch, False) for c in canvases]
            pt_batch, o2m_batch = torch_model.run(xs, end2end=e2e, one2many=e2e)
            # cause variants, each differing from the matched .pt in one setting only: only for images with labels
            # (they feed the metric changes), each setting's forward batched too
            labelled = [k for k, im in enumerate(chunk) if im.gt is not None]
            rect_job = pool.submit(_rect_variant, rect_model, [(k, chunk[k].img) for k in labelled], imgsz, stride,
                                   lambda outs: post(outs, e2e), e2e) if labelled and rect_model is not None else None
            fp16_batch = torch_model(xs[labelled], end2end=e2e, fp16_weights=True) if labelled and info.half else None
            rect = rect_job.result() if rect_job is not None else {}
            pt_rect = _forward_by_shape(torch_model, [c.x for c in canvases], e2e)
            for c, pt_out, job in zip(canvases, pt_rect, rect_jobs):
                rect_pass.add(c, pt_out, job.result())
            for k, im in enumerate(chunk):
                n, r0, p0, gt = im.n, im.r, im.pad, im.gt
                ex_out, again, error = ex_jobs[k].result()
                if error is not None:
                    skipped.append(_skip(im, f"the export's runtime failed: {error}", LEFT_OUT_OF_ALL))
                    continue
                if again is not None:
                    repeatable, repeat_checked = all(np.array_equal(a, b) for a, b in zip(ex_out, again)), True
                pt_out, ex_out = _aligned(_row(pt_batch, k), ex_out, e2e)
                why = _fold_raw(raw_rows, pt_out, ex_out, n)
                if why is not None:
                    raw_note = f"not comparable: {why}" + (" (NMS inside the graph)" if info.nms_baked else "")
                    if not info.nms_baked:  # a baked-NMS graph never gives the raw head: said by raw_note
                        skipped.append(_skip(im, why, LEFT_OUT_OF_RAW))
                compared.append(n)
                pt_dets.append(scale_back(post(pt_out, e2e), r0, p0))
                ex_dets.append(scale_back(post(ex_out, graph_selected, conf if not info.nms_baked else 0.0), r0, p0))
                # boxes just under the threshold, to name threshold-crossers: only where this image's boxes differ
                if _match_boxes(pt_dets[-1:], ex_dets[-1:], conf)["agree"]:
                    pt_low.append(None), ex_low.append(None)
                else:
                    pt_low.append(scale_back(post(pt_out, e2e, conf / 2), r0, p0))
                    ex_low.append(scale_back(post(ex_out, graph_selected, conf / 2 if not info.nms_baked else 0.0), r0, p0))
                labels.append(gt)
                echo(f"parity: image {n + 1}/{len(items)}") if (n + 1) % 25 == 0 else None
                if gt is None:
                    continue
                i = labelled.index(k)
                if k in rect:
                    variants["pt_rect"].append(rect[k])
                if o2m_batch is not None:
                    variants["pt_o2m"].append(scale_back(post(_row(o2m_batch, k), False), r0, p0))
                if info.nms_baked:  # the same .pt output through the baked NMS: no forward
                    variants["pt_baked"].append(scale_back(post(pt_out, False, single=baked), r0, p0))
                if fp16_batch is not None:
                    variants["pt_fp16"].append(scale_back(post(_row(fp16_batch, i), e2e), r0, p0))
    if not compared:
        raise ParityInputError(f"{data}: none of the {len(items)} images could be compared: "
                               + "; ".join(_skip_reasons(skipped, len(items))))

    box_conf = conf if not info.nms_baked else baked["conf"]
    report = ParityReport(str(model_path), str(exported), info.format,
                          {"name": runtime.name, "settings": runtime.settings, "notes": runtime.notes,
                           "repeatable": repeatable},
                          len(items), imgsz, list(raw_rows.values()), raw_note)
    report.boxes = _match_boxes(pt_dets, ex_dets, box_conf, pt_low, None if info.nms_baked else ex_low)
    for crosser in report.boxes["threshold_crossers"]:
        crosser["image"] = compared[crosser["image"]]  # the image's number among the data's, not among those compared
    report.skipped = skipped
    report.class_names = compare_names(torch_model.names, class_names(info.metadata.get("names")), names_source(info))
    if rect_pass is not None:
        report.rect = rect_pass.summary(box_conf)
        report.raw += list(rect_pass.rows.values())
    have_labels = all(g is not None for g in labels)
    objects = sum(len(g) for g in labels if g is not None)
    pairs = lambda dets: [(d, g) for d, g in zip(dets, labels) if g is not None]  # noqa: E731
    if have_labels and objects:  # no ground-truth object: both mAPs would be 0, a match that proves nothing
        pm, em = box_map(pairs(pt_dets)), box_map(pairs(ex_dets))
        report.metrics = {"pt_matched": pm, "export_matched": em, "delta": _delta(em, pm),
                          "note": "box mAP computed by yolo-det on both models' detections from the same tensors "
                                  "(val conf 0.001, IoU 0.7, max_det 300, multi-label NMS unless the graph selects)"}
    else:
        pm = em = None

    # ----- provenance
    prov = info.provenance
    if prov and prov.get("source_weights_digest"):
        same = prov["source_weights_digest"] == torch_model.digest
        report.provenance = {"status": "same source checkpoint (weight digests match)" if same else
                             f"DIFFERENT source checkpoint: exported from {prov.get('source_checkpoint')} "
                             f"({prov['source_weights_digest'][:19]}...), this .pt is {torch_model.digest[:19]}...",
                             "same_checkpoint": same, "export": prov, "pt_digest": torch_model.digest}
    else:
        report.provenance = {"status": "the export records no source checkpoint (not exported through yolo-det)",
                             "same_checkpoint": None, "pt_digest": torch_model.digest}

    # ----- causes
    causes: List[Dict[str, Any]] = []

    def cause(name: str, detail: str, change: Optional[Dict[str, float]], aligned: bool, artifact: bool) -> None:
        causes.append({"cause": name, "detail": detail, "metric_change": change, "aligned": aligned,
                       "artifact": artifact})

    if report.class_names["status"] == "differ":
        cause("class names", report.class_names["detail"], None, False, True)
    if report.provenance.get("same_checkpoint") is False:
        cause("different source checkpoint", report.provenance["status"], _delta(em, pm) if pm else None, False, True)
    if not info.dynamic:
        cause("letterbox rect vs square",
              f"`yolo val`/predict letterbox a .pt rectangularly (rect canvas, a stride multiple plus half a stride), "
              f"this static export square {imgsz}; parity fed both the square tensor",
              _delta(pm, box_map(pairs(variants["pt_rect"]))) if pm and variants["pt_rect"] else None, True, False)
    else:
        cause("dynamic shapes", f"the export has dynamic axes {info.input_shape}: validators keep rect letterbox for "
              f"it; parity fed the square {imgsz} tensor and the rect shapes {report.rect['shapes']} `yolo val` uses "
              "to both", None, True, False)
    if info.nms_baked:
        cause("NMS in graph",
              f"export(nms=True) baked conf={baked['conf']}, iou={baked['iou']}, max_det={baked['max_det']}, "
              f"agnostic_nms={baked['agnostic_nms']} and keeps one class per anchor (argmax); validation's NMS is "
              f"multi-label at conf {VAL_CONF}" + ("" if baked_recorded else " (settings not recorded in the export: "
                                                   "Ultralytics' export defaults assumed)"),
              _delta(box_map(pairs(variants["pt_baked"])), pm) if pm else None, False, True)
    if e2e:
        cause("end-to-end one-to-one head",
              "the export carries the one-to-one head (top-k, no NMS); `yolo val` of the .pt runs the one-to-many "
              "head with NMS (nms=None); parity ran the .pt's one-to-one head too",
              _delta(pm, box_map(pairs(variants["pt_o2m"]))) if pm and variants["pt_o2m"] else None, True, False)
    if info.half:
        cause("precision fp16", ("weights stored in fp16" if info.fp16_weights else "fp16 export")
              + (f", input {info.input_dtype}" if info.input_dtype != "float32" else "")
              + "; the change is the .pt with its weights rounded to fp16",
              _delta(box_map(pairs(variants["pt_fp16"])), pm) if pm and variants["pt_fp16"] else None, False, True)
    if info.int8:
        cause("precision int8", "quantized (int8) graph", _delta(em, pm) if pm else None, False, True)
    if batch > 1:
        cause("batch", f"static batch {batch}: every input is padded to {batch} images; parity fed copies and "
              "compared the first", None, True, False)
    raw_beyond = [r for r in report.raw if not r["within"]]
    explained = any(c["artifact"] and c["cause"] != "class names" for c in causes)  # names change no raw value
    if raw_beyond and not explained:
        graph = f"opset {info.opset}" if info.opset else "the runtime's graph transformations"
        simp = info.export_args.get("simplify")
        cause("opset/simplifier", f"{graph}" + (", simplified by onnxslim" if simp else "")
              + f": raw errors beyond fp32 tolerance with the same weights and no precision change",
              _delta(em, pm) if pm else None, False, True)
    report.causes = causes

    # ----- verdict
    raw_ok = all(r["within"] for r in report.raw) and (bool(report.raw) or info.nms_baked)
    boxes_ok = report.boxes["agree"]
    metrics_ok = pm is not None and all(abs(em[k] - pm[k]) <= METRIC_TOL for k in pm)
    artifact_changes = [c for c in causes if c["artifact"] and (
        c["cause"] == "different source checkpoint"
        or not c["metric_change"] or any(abs(v) > METRIC_TOL for v in c["metric_change"].values())
        or raw_beyond)]
    if not repeatable:
        report.reasons.append("the runtime gave different outputs for the same input twice")
    if not raw_ok and report.raw:
        report.reasons.append(f"raw outputs beyond tolerance: {', '.join(r['output'] for r in raw_beyond)}")
    if not boxes_ok:
        report.reasons.append(f"{report.boxes['only_pt']} boxes only in the .pt, {report.boxes['only_export']} "
                              f"only in the export")
    if pm is not None and not metrics_ok:
        report.reasons.append(f"mAP50-95 {pm['map50_95']:.4f} (.pt) vs {em['map50_95']:.4f} (export)")
    if info.nms_baked:
        report.reasons.append("NMS is inside the graph: the export cannot give validation's multi-label NMS")
    if report.class_names["status"] == "differ":
        report.reasons.append(f"class names differ: {report.class_names['detail']}")
    report.reasons += _rect_reasons(report.rect)
    conf_diff = report.boxes.get("max_conf_diff")
    if boxes_ok and conf_diff is not None and conf_diff > CONF_TOL:
        report.reasons.append(f"matched boxes' confidences differ by up to {conf_diff:.3g} (tolerance {CONF_TOL:g})")
    differs = bool(report.reasons) or bool(artifact_changes)
    missing = []  # what an "agree" needs and was not there to compare
    if not report.raw and not info.nms_baked:
        missing.append("raw outputs not compared" + (f" ({raw_note})" if raw_note else ""))
    if report.class_names["status"] == "unknown":
        missing.append(report.class_names["detail"])
    missing += _skip_reasons([s for s in skipped if s["left_out_of"] == LEFT_OUT_OF_ALL or raw_rows], len(items))
    if report.rect.get("not_compared"):
        missing.append("rect shapes `yolo val` feeds this dynamic export not compared: " + "; ".join(
            f"{s['shape']} (image {', '.join(map(str, s['images']))}: {s['why']})" for s in report.rect["not_compared"]))
    if boxes_ok and not report.boxes["matched"]:  # two empty sets agree whatever the models compute
        missing.append(f"no box compared: neither model kept a box above conf {box_conf} on these images")
    if pm is None:
        missing.append("metrics not compared: " + ("the images' labels hold no object" if have_labels
                                                   else "the images have no labels"))
    if differs:
        report.verdict = verdicts.DIFFERS
        if artifact_changes and not report.reasons:
            report.reasons.append("; ".join(c["cause"] for c in artifact_changes))
    elif missing:
        report.verdict = verdicts.NOT_PROVEN
        report.reasons.append("predictions agree but " + "; ".join(missing))
    else:
        report.verdict = verdicts.AGREE
    report.seconds = round(time.perf_counter() - t0, 3)
    return report
