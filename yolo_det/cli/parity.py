"""``yolo-det parity MODEL.pt EXPORTED``: does the exported model give the .pt's predictions and number, and why not."""

from __future__ import annotations

import argparse
import sys

from .exit_codes import EXIT_USAGE
from .evidence import attach
from .output import print_result


def register(sub) -> None:
    """Add ``parity`` to the ``yolo-det`` parser."""
    p = sub.add_parser(
        "parity",
        help="compare an exported model (ONNX, OpenVINO, TensorRT) with its .pt: raw outputs, boxes, mAP, and the causes",
        description=(
            "Feed the same letterboxed tensors to the PyTorch model and to the export's runtime (ONNX Runtime\n"
            "or OpenVINO on CPU, deterministic settings; TensorRT on CUDA), compare raw head outputs, boxes after NMS and box\n"
            "mAP under matched settings, and name each cause that applies (letterbox rect vs square, NMS in\n"
            "the graph, the end-to-end one-to-one head, fp16/int8, opset/simplifier, dynamic shapes, batch,\n"
            "another source checkpoint) with the metric change when only it is aligned. See docs/export.md."
        ),
        epilog="example: yolo-det parity runs/detect/train/weights/best.pt best.onnx --data data.yaml\n"
               "exit codes: 0 agree within fp32 tolerance and the metrics match, 1 differs (causes printed), "
               "2 bad input, 3 not proven (what an agree needs was not compared: labels, the export's class names, an "
               "image left out, a dynamic export's rect shapes)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL.pt", help="the PyTorch checkpoint (Ultralytics or YOLOv5 family)")
    p.add_argument("exported", metavar="EXPORTED", help="the .onnx file, the OpenVINO folder / .xml, or a TensorRT .engine "
                                                     "(needs the tensorrt package and a CUDA GPU)")
    p.add_argument("--data", metavar="DATA", help="data YAML (its val images and labels) or an image folder; "
                                                  "default: the data the checkpoint was trained on")
    p.add_argument("--max-images", type=int, default=100, metavar="N", help="compare on at most N images (100)")
    p.add_argument("--repo", metavar="DIR", help="a YOLOv5-family checkpoint's repository (its models/ unpickle the "
                                                 "model; default: $YOLOV5_REPO, else the installed yolov5 package)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_parity)


def _default_data(model: str):
    """The data the checkpoint's training used (Ultralytics ``train_args['data']``, YOLOv5 ``opt['data']``)."""
    try:
        import torch

        ckpt = torch.load(model, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - the comparison reports an unreadable model itself
        return None
    for key in ("train_args", "opt"):
        args = ckpt.get(key) if isinstance(ckpt, dict) else None
        data = args.get("data") if isinstance(args, dict) else getattr(args, "data", None)
        if data:
            return data
    return None


def _parity(args: argparse.Namespace) -> int:
    from ..evaluation.parity import ParityInputError, check

    if args.repo:
        import os

        os.environ["YOLOV5_REPO"] = args.repo
    data = args.data or _default_data(args.model)
    echo = lambda text: print(text, file=sys.stderr)  # noqa: E731
    try:
        report = check(args.model, args.exported, data, max_images=args.max_images, echo=echo)
    except ParityInputError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    attach("parity", report, [args.model])
    if args.json:
        print_result(report)
    else:
        print("\n".join(report.describe()))
    return report.exit_code
