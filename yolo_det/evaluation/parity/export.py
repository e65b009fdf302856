"""What an exported model is: its format (ONNX, OpenVINO, a TensorRT engine), input shape and precision, baked
NMS or the one-to-one head, its metadata and provenance; its class names against the checkpoint's.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...record import export_provenance


class ParityInputError(ValueError):
    """The model, the export or the data cannot be read: a usage error (exit 2)."""


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


__all__ = ["ExportInfo", "ParityInputError", "class_names", "compare_names", "engine_header", "names_source",
           "read_export"]
