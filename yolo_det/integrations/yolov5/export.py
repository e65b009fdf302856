"""What a patched YOLOv5-family ``export.py`` calls: the ONNX exporter it was written for, and provenance after.

``torch_for_export()`` gives the export functions a view of ``torch`` whose ``onnx.export`` passes
``dynamo=False`` where the installed torch's signature has that parameter (torch >= 2.9 defaults to the dynamo
exporter, which needs ``onnxscript`` and traces differently); ``exports_done(locals())`` writes the provenance
(source checkpoint weight digest, every export argument, versions) into each ONNX / OpenVINO artifact and beside it.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping

from ...record import export_provenance

#: The export arguments of YOLOv5 ``run()`` recorded as provenance (the names every release uses).
ARG_NAMES = ("data", "weights", "imgsz", "batch_size", "device", "include", "half", "inplace", "keras", "optimize",
             "int8", "dynamic", "simplify", "opset", "verbose", "workspace", "nms", "agnostic_nms", "topk_per_class",
             "topk_all", "iou_thres", "conf_thres", "train")


class _Onnx:
    """``torch.onnx`` with ``export`` pinned to the TorchScript exporter where torch offers both."""

    def __init__(self, onnx_module):
        self._onnx = onnx_module
        try:
            self._has_dynamo = "dynamo" in inspect.signature(onnx_module.export).parameters
        except (TypeError, ValueError):
            self._has_dynamo = False

    def export(self, *args, **kwargs):
        """``torch.onnx.export`` with ``dynamo=False`` added where the signature has it and it was not given."""
        if self._has_dynamo:
            kwargs.setdefault("dynamo", False)
        return self._onnx.export(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._onnx, name)


class _Torch:
    """``torch`` as the patched export functions see it: everything the module's, ``onnx`` through :class:`_Onnx`."""

    def __init__(self, torch_module):
        self._torch = torch_module
        self.onnx = _Onnx(torch_module.onnx)

    def __getattr__(self, name: str):
        return getattr(self._torch, name)


def torch_for_export(torch_module: Any = None) -> Any:
    """The ``torch`` a patched export function uses (bound as its local ``torch``, so it takes no argument there)."""
    if torch_module is None:
        import torch as torch_module
    return torch_module if isinstance(torch_module, _Torch) else _Torch(torch_module)


def _artifacts(files: Any) -> List[Path]:
    out = []
    for f in files if isinstance(files, (list, tuple)) else [files]:
        if not f:
            continue
        p = Path(str(f))
        if p.suffix == ".onnx" or (p.is_dir() and list(p.glob("*.xml"))):
            out.append(p)
    return out


def exports_done(local_vars: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    """Write provenance into every ONNX / OpenVINO artifact ``run()`` produced; return where it went, per file."""
    weights = local_vars.get("weights")
    weights = weights[0] if isinstance(weights, (list, tuple)) else weights
    if not weights or not Path(str(weights)).is_file():
        return {}
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in local_vars.items() if k in ARG_NAMES}
    done: Dict[str, Dict[str, str]] = {}
    for artifact in _artifacts(local_vars.get("f")):
        opset = None
        if artifact.suffix == ".onnx":
            import onnx

            model = onnx.load(str(artifact), load_external_data=False)
            opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        record = export_provenance.build(weights, args, exporter=f"yolov5 export.py ({Path(sys.argv[0]).resolve()})",
                                         opset=opset)
        done[str(artifact)] = export_provenance.embed(artifact, record)
        print(f"yolo-det: provenance of {artifact}: " + ", ".join(f"{k} {v}" for k, v in done[str(artifact)].items()))
    return done
