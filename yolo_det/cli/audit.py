"""``yolo-det audit``: which ops of a model would make strict determinism fail on CUDA, and where."""

from __future__ import annotations

import argparse
import sys

from .output import print_result
from ..core import verdicts

EXAMPLES = """examples:
  yolo-det audit --cfg models/yolov5s.yaml                 # the installed yolov5 package's model code
  yolo-det audit --cfg models/ffca.yaml --repo ./FFCA-YOLO # a repo's own models/yolo.py and custom modules
  yolo-det audit --ultralytics yolov8n.yaml --json
  yolo-det audit --model my_models.py:build --torch 2.0    # any nn.Module factory, predicted for torch 2.0
  yolo-det audit --model my_models.py:build --probe --device cuda   # run custom kernels twice, compare bits

exit codes: 0 clean, 1 strict would raise on CUDA, a kernel outside PyTorch's switch was found, or a probe
differed; 2 error (bad path, build failure)."""


def register(sub) -> None:
    """Add ``yolo-det audit`` to the parser."""
    parser = sub.add_parser(
        "audit",
        help="predict on CPU which ops would fail strict determinism on CUDA, and where",
        description=("Build the model on CPU, run one forward and backward pass on random input while recording "
                     "every aten op and the module that ran it, and match the ops against the op table for the "
                     "installed torch (or --torch). CUDA's Python-level deterministic routes are emulated."),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--cfg", help="YOLOv5 model yaml, e.g. models/yolov5s.yaml; a bare name is also looked "
                                      "for in the repository's (or package's) models/, a path is that file only")
    source.add_argument("--model", metavar="FILE.py:FUNCTION",
                        help="a function returning an nn.Module, or (module, example_inputs)")
    source.add_argument("--ultralytics", metavar="YAML", help="Ultralytics model yaml, e.g. yolov8n.yaml")
    parser.add_argument("--repo", help="with --cfg: YOLOv5 repository whose models/yolo.py builds the model "
                                       "(default: the installed yolov5 package)")
    parser.add_argument("--imgsz", type=int, default=256, help="input image size (default 256)")
    parser.add_argument("--batch", type=int, default=2, help="input batch size (default 2)")
    parser.add_argument("--torch", metavar="X.Y", help="predict for this torch release (default: the installed one)")
    parser.add_argument("--probe", action="store_true",
                        help="run each custom autograd.Function the model applies twice (forward and backward) on "
                             "identical inputs and compare bit for bit; proves nothing on CPU")
    parser.add_argument("--device", default="cpu", help="device for --probe (default cpu; e.g. cuda)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_audit)


def _error(message: str) -> int:
    print(f"yolo-det audit: error: {message}", file=sys.stderr)
    return 2


def _audit(args) -> int:
    from ..strict.audit import AuditError, audit_model
    from ..strict.models import BuildError, build_factory, build_ultralytics, build_yolov5
    from ..strict.optable import TableError, parse_version

    if args.repo and not args.cfg:
        return _error("--repo goes with --cfg")
    if args.imgsz <= 0 or args.batch <= 0:
        return _error("--imgsz and --batch must be positive")
    if args.torch:
        try:
            parse_version(args.torch)
        except ValueError as exc:
            return _error(f"--torch: {exc}")
    try:
        if args.cfg:
            built = build_yolov5(args.cfg, args.repo)
        elif args.ultralytics:
            built = build_ultralytics(args.ultralytics)
        else:
            built = build_factory(args.model)
        result = audit_model(built.model, built.inputs, imgsz=args.imgsz, batch=args.batch, torch_version=args.torch)
        if args.probe:
            result.probes = _probe(built, result, args)
    except (BuildError, AuditError, TableError) as exc:
        return _error(str(exc))
    except RuntimeError as exc:  # e.g. --device cuda without a GPU
        return _error(f"--probe on {args.device}: {exc}")
    result.notes.extend(built.notes)  # what the audit of this model leaves out
    if args.json:
        return print_result(verdicts.Document(result.verdict, {"model": built.name, "file": built.file,
                                                               **result.to_json()}))
    print(f"model: {built.name}" + (f"  (file: {built.file})" if built.file else ""))
    print("\n".join(result.lines()))
    return result.exit_code


def _probe(built, result, args) -> list:
    from ..strict.audit import example_inputs
    from ..strict.probe import probe_model

    inputs = built.inputs or example_inputs(built.model, args.imgsz, args.batch)
    names = [f.op for f in result.opaque] + [f.via for f in result.opaque if f.via]
    probes = [p.to_dict() for p in probe_model(built.model, inputs, names, device=args.device)]
    if not probes:
        result.notes.append("probe: the model applies no custom autograd.Function; nothing to probe")
    return probes
