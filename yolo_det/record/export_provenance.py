"""Provenance of an exported model: which checkpoint it came from and how it was exported.

Written inside the artifact where the format allows it (ONNX ``metadata_props``, OpenVINO ``rt_info``,
Ultralytics' ``metadata.yaml`` beside an OpenVINO model) and beside it as ``<artifact>.provenance.json``.
The key fact is the source checkpoint's *weight digest*: a SHA-256 over the weights' names, dtypes, shapes
and bytes, so a ``best.onnx`` exported from an older ``best.pt`` no longer looks like the newer one's.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ..core import atomic
from .run_folder import REPORT_NAME

KEY = "yolo_det_provenance"
SIDECAR_SUFFIX = ".provenance.json"
FORMAT_VERSION = 1


def _torch_load(path: os.PathLike, repo: Optional[os.PathLike] = None):
    """``torch.load`` of a full YOLO checkpoint; a YOLOv5-family one pickles ``models.yolo`` classes, found in
    ``repo`` (or the ``YOLOV5_REPO`` environment variable, or the installed PyPI ``yolov5`` package)."""
    import sys

    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=False)
    except ModuleNotFoundError as exc:
        if exc.name not in ("models", "utils") and not str(exc.name).startswith(("models.", "utils.")):
            raise
        where = repo or os.environ.get("YOLOV5_REPO")
        if where is None:
            try:
                import yolov5  # the PyPI package holds the same models/ and utils/

                where = Path(yolov5.__file__).parent
            except ImportError:
                raise ModuleNotFoundError(f"{exc}: a YOLOv5-family checkpoint needs its repository's models/ "
                                          "(give --repo DIR or set YOLOV5_REPO)") from exc
        sys.path.insert(0, str(where))
        return torch.load(str(path), map_location="cpu", weights_only=False)


def load_checkpoint_model(path: os.PathLike, repo: Optional[os.PathLike] = None):
    """The model a YOLO checkpoint holds, as exporters pick it (``ema`` first, then ``model``), in float32, eval."""
    ckpt = _torch_load(path, repo)
    model = ckpt.get("ema") or ckpt.get("model") if isinstance(ckpt, dict) else ckpt
    if model is None or not hasattr(model, "state_dict"):
        raise ValueError(f"{path}: no model in this checkpoint (keys: {sorted(ckpt) if isinstance(ckpt, dict) else type(ckpt)})")
    return model.float().eval(), ckpt


def weights_digest(model_or_path) -> str:
    """SHA-256 of a model's weights (names, dtypes, shapes, bytes, in name order) or of a checkpoint file's model."""
    import torch

    model = model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        ckpt = _torch_load(model_or_path)
        model = ckpt.get("ema") or ckpt.get("model") if isinstance(ckpt, dict) else ckpt
    state = model.state_dict() if hasattr(model, "state_dict") else dict(model)
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().cpu().contiguous()
        # float weights digest as float32 so the fp16 copy a checkpoint holds and its float32 load agree
        if t.is_floating_point():
            t = t.float()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + h.hexdigest()


def _run_of(checkpoint: Path) -> Optional[str]:
    """The training run folder a checkpoint sits in (``RUN/weights/best.pt``), where one is recognisable."""
    for parent in (checkpoint.parent, checkpoint.parent.parent):
        if (parent / REPORT_NAME).exists() or (parent / "results.csv").exists() or (parent / "args.yaml").exists():
            return str(parent.resolve())
    return None


def versions() -> Dict[str, Optional[str]]:
    """Versions of everything that shapes an export: torch, exporters and runtimes (None where absent)."""
    from importlib import metadata

    out: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in ("torch", "ultralytics", "yolov5", "onnx", "onnxslim", "onnxruntime", "openvino", "tensorrt", "yolo-det"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def build(checkpoint: os.PathLike, export_args: Mapping[str, Any], exporter: str,
          opset: Optional[int] = None) -> Dict[str, Any]:
    """The provenance record of one export of ``checkpoint`` with ``export_args`` by ``exporter``."""
    from ..core import mode as _mode

    checkpoint = Path(checkpoint)
    settings = _mode.resolve()
    current_mode = f"{settings.mode} (from {settings.sources.get('deterministic', 'default')})"
    return {
        "format_version": FORMAT_VERSION,
        "source_checkpoint": str(checkpoint.resolve()),
        "source_weights_digest": weights_digest(checkpoint),
        "source_run": _run_of(checkpoint.resolve()),
        "yolo_det_mode": current_mode,
        "exporter": exporter,
        "export_args": {str(k): (str(v) if isinstance(v, Path) else v) for k, v in export_args.items()},
        "opset": opset,
        "versions": versions(),
    }


def sidecar_path(artifact: os.PathLike) -> Path:
    """``model.onnx`` -> ``model.onnx.provenance.json``; an OpenVINO folder -> a file inside it."""
    artifact = Path(artifact)
    if artifact.is_dir():
        return artifact / ("model" + SIDECAR_SUFFIX)
    return artifact.with_name(artifact.name + SIDECAR_SUFFIX)


def _openvino_xml(artifact: Path) -> Optional[Path]:
    if artifact.is_dir():
        found = sorted(artifact.glob("*.xml"))
        return found[0] if found else None
    return artifact if artifact.suffix == ".xml" else None


def embed(artifact: os.PathLike, record: Mapping[str, Any]) -> Dict[str, str]:
    """Write ``record`` into ``artifact`` (where the format allows) and beside it; return where it went."""
    artifact = Path(artifact)
    text = json.dumps(record, sort_keys=True, default=str)
    where: Dict[str, str] = {}
    if artifact.suffix == ".onnx":
        import onnx

        model = onnx.load(str(artifact), load_external_data=False)
        for prop in list(model.metadata_props):
            if prop.key == KEY:
                model.metadata_props.remove(prop)
        prop = model.metadata_props.add()
        prop.key, prop.value = KEY, text
        onnx.save(model, str(artifact))
        where["inside"] = f"{artifact} (ONNX metadata_props[{KEY!r}])"
    xml = _openvino_xml(artifact)
    if xml is not None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(xml))
        model.set_rt_info(text, ["yolo_det", "provenance"])
        tmp = xml.with_name(xml.stem + ".yolo_det_tmp.xml")
        # the read model keeps an fp16 export's f16 constants (with their decompression), so nothing is converted
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        del model
        atomic.replace(tmp.with_suffix(".bin"), xml.with_suffix(".bin"))
        atomic.replace(tmp, xml)
        where["inside"] = f"{xml} (OpenVINO rt_info yolo_det/provenance)"
        meta = xml.parent / "metadata.yaml"
        if meta.exists():
            import yaml

            data = yaml.safe_load(meta.read_text()) or {}
            data[KEY] = dict(record)
            meta.write_text(yaml.safe_dump(data, sort_keys=False))
            where["metadata.yaml"] = str(meta)
    side = sidecar_path(artifact)
    side.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    where["beside"] = str(side)
    return where


def read(artifact: os.PathLike) -> Optional[Dict[str, Any]]:
    """The provenance an export carries (inside first, then the sidecar); None when it has none."""
    artifact = Path(artifact)
    try:
        if artifact.suffix == ".onnx":
            import onnx

            model = onnx.load(str(artifact), load_external_data=False)
            for prop in model.metadata_props:
                if prop.key == KEY:
                    return json.loads(prop.value)
        xml = _openvino_xml(artifact)
        if xml is not None:
            import openvino as ov

            model = ov.Core().read_model(str(xml))
            if model.has_rt_info(["yolo_det", "provenance"]):
                return json.loads(str(model.get_rt_info(["yolo_det", "provenance"])))
    except (OSError, ValueError):
        pass
    side = sidecar_path(artifact)
    if side.exists():
        return json.loads(side.read_text())
    return None


def differences(a: os.PathLike, b: os.PathLike) -> Dict[str, Any]:
    """What differs between two exports (ONNX files): ``{}`` when byte-identical, else each differing field.

    Fields: ``graph`` (the computation and its weights), ``opset``, ``ir_version``, ``producer``, every metadata key
    (Ultralytics' ``date`` differs between two exports of one checkpoint) and every provenance field
    (``provenance.source_checkpoint``, ...), each as ``(value in a, value in b)`` (the graph as its SHA-256).
    """
    a, b = Path(a), Path(b)
    if a.read_bytes() == b.read_bytes():
        return {}
    import onnx

    ma, mb = (onnx.load(str(p), load_external_data=False) for p in (a, b))
    out: Dict[str, Any] = {}
    ga, gb = (hashlib.sha256(m.graph.SerializeToString(deterministic=True)).hexdigest() for m in (ma, mb))
    if ga != gb:
        out["graph"] = (ga, gb)
    opsets = tuple({o.domain or "ai.onnx": o.version for o in m.opset_import} for m in (ma, mb))
    for key, va, vb in (("opset", *opsets), ("ir_version", ma.ir_version, mb.ir_version),
                        ("producer", f"{ma.producer_name} {ma.producer_version}", f"{mb.producer_name} {mb.producer_version}")):
        if va != vb:
            out[key] = (va, vb)
    pa, pb = ({p.key: p.value for p in m.metadata_props} for m in (ma, mb))
    for key in sorted(set(pa) | set(pb)):
        if key == KEY:
            ra, rb = (json.loads(x) if x else {} for x in (pa.get(key), pb.get(key)))
            for field in sorted(set(ra) | set(rb)):
                if ra.get(field) != rb.get(field):
                    out[f"provenance.{field}"] = (ra.get(field), rb.get(field))
        elif pa.get(key) != pb.get(key):
            out[key] = (pa.get(key), pb.get(key))
    return out
