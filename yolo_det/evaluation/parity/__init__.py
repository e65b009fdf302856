"""Export parity: does an exported model (ONNX, OpenVINO, TensorRT) give the ``.pt``'s predictions and number.

The same preprocessed tensors (one letterbox, computed once) go to the PyTorch model and to the export's
runtime (CPU; a TensorRT engine on CUDA), run with deterministic settings (ONNX Runtime: one intra/inter-op
thread, sequential, deterministic compute; OpenVINO: f32 inference precision, one stream, one thread).
Three layers are compared: the raw head outputs (max absolute and relative error and where), the boxes after
NMS (matched by IoU; boxes only one model keeps, and those that cross the confidence threshold), and box mAP
under matched settings; also the export's class names against the checkpoint's, and a dynamic export at the rect
shapes `yolo val` feeds it. An image left out of a comparison (unreadable, refused by the runtime, outputs of
another shape) keeps the verdict from "agree". Each cause that applies (letterbox rect vs square, NMS baked into
the graph, the end-to-end one-to-one head, fp16/int8, opset/simplifier, dynamic shapes, batch, another source
checkpoint, class names) is named with the metric change when only it is aligned. Ultralytics YOLOv8/11/26
detection and segmentation exports and YOLOv5-family exports (one ``(B, N, 5 + nc)`` output) are understood.

Modules: ``export`` (what an export is: format, shape, precision, metadata, provenance; class names), ``runtimes``
(ONNX Runtime, OpenVINO, TensorRT), ``data`` (the images and labels, letterboxed as the validators do),
``model`` (the .pt), ``postprocess`` (NMS, a graph's own selection, boxes scaled back), ``outputs`` (raw outputs
and boxes of the two models compared, the tolerances), ``metrics`` (box mAP, and why parity keeps its own),
``rect`` (a dynamic export at the rect shapes), ``report`` (:class:`ParityReport`), ``comparison`` (:func:`check`
in named steps). Every name of the single module this package was is importable from it, as before.
"""

from .comparison import CHUNK, EXPORT_NMS_DEFAULTS, LEFT_OUT_OF_ALL, LEFT_OUT_OF_RAW, VAL_CONF, VAL_IOU, VAL_MAX_DET, \
    _run_export, check
from .data import IMAGE_SUFFIXES, _images_and_labels, _labels, load_image, pad_to, rect_shape, to_tensor
from .export import (ExportInfo, ParityInputError, class_names, compare_names, engine_header, names_source,
                     read_export)
from .metrics import box_map
from .model import TorchModel
from .outputs import ATOL_SCALE, BOX_MATCH_IOU, CONF_TOL, METRIC_TOL, RTOL
from .postprocess import SCORE_GRID, _nms_kernel, box_iou, canonical_topk, from_graph, nms, scale_back, xywh2xyxy
from .report import ParityReport
from .runtimes import OnnxRuntime, OpenVinoRuntime, Runtime, TensorRtRuntime, open_runtime

__all__ = ["ATOL_SCALE", "BOX_MATCH_IOU", "CHUNK", "CONF_TOL", "EXPORT_NMS_DEFAULTS", "ExportInfo", "IMAGE_SUFFIXES",
           "LEFT_OUT_OF_ALL", "LEFT_OUT_OF_RAW", "METRIC_TOL", "OnnxRuntime", "OpenVinoRuntime", "ParityInputError",
           "ParityReport", "RTOL", "Runtime", "SCORE_GRID", "TensorRtRuntime", "TorchModel", "VAL_CONF", "VAL_IOU",
           "VAL_MAX_DET", "box_iou", "box_map", "canonical_topk", "check", "class_names", "compare_names",
           "engine_header", "from_graph", "load_image", "names_source", "nms", "open_runtime", "pad_to", "read_export",
           "rect_shape", "scale_back", "to_tensor", "xywh2xyxy"]
