"""An evaluation command that scores an *exported* model: which checkpoint the export came from and why its
number is not the training's.

``yolo-det val RUN_DIR -- yolo val model=best.onnx ...`` (or ``python val.py --weights best.onnx``) evaluates
an export, not the checkpoint the training validated. Besides the evaluation settings that differ, the
explanation then names the export's own causes: its source checkpoint (from the provenance yolo-det writes
into the artifact) and what :func:`yolo_det.evaluation.parity.check` finds comparing the export with the
validated checkpoint on the same tensors (letterbox rect vs square, NMS in the graph, precision, the one-to-one
head, another checkpoint). The causes are parity's, not re-derived here; the release-measured effects (the
``.pt`` re-run through the release's own validator at square letterbox and at rect) are attached by the
release integration with :func:`attach_release_effects`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

#: File endings of exported models (Ultralytics' and YOLOv5's exporters).
EXPORT_SUFFIXES = (".onnx", ".engine", ".xml", ".torchscript", ".tflite", ".pb", ".mlpackage", ".mlmodel", ".mnn",
                   ".pte", ".aimodel")
#: Folder name endings of exported models (OpenVINO, TensorFlow SavedModel, NCNN, Paddle, ...).
EXPORT_FOLDERS = ("_openvino_model", "_saved_model", "_ncnn_model", "_paddle_model", "_web_model", "_imx_model",
                  "_rknn_model", "_executorch_model", "_edgetpu.tflite")
#: Evaluation settings a validator sets itself for a non-dynamic export (Ultralytics: ``rect=False`` and the
#: export's batch; YOLOv5 val.py: square letterbox, batch 1), and the weights, which an export has no checkpoint of.
FORCED = {
    "rect": "the validator forces square letterbox (rect=False) for an export that is not dynamic: not alignable "
            "on the export; measured on the .pt below",
    "batch_size": "the validator evaluates an export at the batch it was exported with: not alignable on the "
                  "export; measured on the .pt below",
    "batch_shapes": "follows from rect and batch (forced for the export)",
    "weights_dtype": "an export has no checkpoint weights to align; its precision is an export cause below",
    "weights_digest": "an export has no checkpoint weights to digest; its source checkpoint is named below",
    "half": "an export's precision is fixed when it is exported (an export cause below)",
}


def is_export(weights: Any) -> bool:
    """Whether ``weights`` (a path, or the first of a list) names an exported model rather than a checkpoint."""
    if isinstance(weights, (list, tuple)):
        weights = weights[0] if weights else None
    if not isinstance(weights, (str, os.PathLike)) or not str(weights):
        return False
    name = Path(str(weights).rstrip("/\\")).name.lower()
    return name.endswith(EXPORT_SUFFIXES) or name.endswith(EXPORT_FOLDERS)


#: The settings of :data:`FORCED` that Ultralytics' validator leaves alone for a dynamic export (YOLOv5's val.py
#: forces batch 1 and square letterbox for every export).
STATIC_ONLY = ("rect", "batch_size", "batch_shapes")


def forced(weights: Any, release: str) -> Dict[str, str]:
    """The settings the release's validator forces for the export ``weights`` (of :data:`FORCED`), with why."""
    if release == "ultralytics" and _dynamic(weights):
        return {k: v for k, v in FORCED.items() if k not in STATIC_ONLY}
    return dict(FORCED)


def _dynamic(weights: Any) -> bool:
    """Whether an ONNX/OpenVINO export has dynamic height or width (False where it cannot be read)."""
    from . import parity

    try:
        return parity.read_export(weights).dynamic
    except Exception:  # noqa: BLE001 - a format parity does not read: treated as static, as validators treat most
        return False


def annotate(differences: List[Dict[str, Any]], settings: Mapping[str, str] = FORCED) -> None:
    """Mark the ``settings`` a validator forces for an export as not alignable on it, saying why (in place)."""
    for difference in differences:
        why = settings.get(difference["setting"])
        if why and not difference.get("alignable"):
            difference["alignable"] = False
            difference["why"] = why


def explain(checkpoint: os.PathLike, exported: os.PathLike, data: Optional[os.PathLike],
            echo: Callable[[str], None] = lambda _: None) -> Dict[str, Any]:
    """The export causes of ``exported`` against ``checkpoint`` (the weights the logged validation evaluated).

    Runs :func:`yolo_det.evaluation.parity.check` (the same tensors through both) and keeps its provenance
    (same or another source checkpoint), its causes with their parity-measured metric change, its verdict
    and runtime; where the export cannot be read (a format parity does not run), its provenance alone.
    """
    from ..record import export_provenance
    from . import parity

    exported = Path(str(exported))
    out: Dict[str, Any] = {"model": str(exported), "checkpoint": str(checkpoint), "causes": [], "notes": []}
    try:
        report = parity.check(checkpoint, exported, data, echo=echo)
    except Exception as exc:  # noqa: BLE001 - ParityInputError, or a runtime's own error: said, the rest still told
        out["notes"].append(f"parity could not compare the export with {Path(str(checkpoint)).name}: "
                            f"{type(exc).__name__}: {exc}")
        out["provenance"] = _provenance_only(checkpoint, export_provenance.read(exported) if exported.exists()
                                             else None)
        if out["provenance"].get("same_checkpoint") is False:
            out["causes"].append({"cause": "different source checkpoint", "detail": out["provenance"]["status"],
                                  "metric_change": None, "aligned": False, "artifact": True})
        return out
    out.update(format=report.format, provenance=report.provenance, causes=[dict(c) for c in report.causes],
               parity_verdict=report.verdict, parity_reasons=list(report.reasons), runtime=report.runtime,
               parity_metrics=report.metrics, images=report.images)
    return out


def _provenance_only(checkpoint: os.PathLike, prov: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Parity's provenance verdict without its comparison: the recorded source digest against the checkpoint's."""
    from ..record import export_provenance

    if not prov or not prov.get("source_weights_digest"):
        return {"status": "the export records no source checkpoint (not exported through yolo-det)",
                "same_checkpoint": None}
    digest = export_provenance.weights_digest(checkpoint)
    same = prov["source_weights_digest"] == digest
    return {"status": "same source checkpoint (weight digests match)" if same else
            f"DIFFERENT source checkpoint: exported from {prov.get('source_checkpoint')}",
            "same_checkpoint": same, "export": dict(prov), "pt_digest": digest}


def attach_release_effects(result: Dict[str, Any], yours: Mapping[str, float], pt_square: Mapping[str, float],
                           pt_rect: Optional[Mapping[str, float]], how: str, yours_rect: bool = False) -> None:
    """Add what the release's own validator measured to ``result`` (from :func:`explain`), in place.

    ``pt_square``: the validated checkpoint evaluated with your command's settings (square, the export's batch);
    ``pt_rect``: the same with only ``rect=True``. The change from the export to the .pt is what the export
    itself (runtime, graph, precision, NMS, another checkpoint) changes; square minus rect is the letterbox cause
    (signed as parity signs it: the export's letterbox minus the .pt's). ``yours_rect``: your evaluation of the
    export letterboxed rect (a dynamic export), so the .pt's rect run is the one at your settings.
    """
    keys = ("mAP50", "mAP50-95")
    same = pt_rect if yours_rect and pt_rect is not None else pt_square
    effects = {"how": how, "pt_square_metrics": dict(pt_square), "pt_at_your_settings": "rect" if same is pt_rect
               else "square", "export_to_pt": {k: same[k] - yours[k] for k in keys if k in same and k in yours}}
    if pt_rect is not None:
        effects["pt_rect_metrics"] = dict(pt_rect)
        # as parity signs it: the letterbox aligned with the export's (square) minus the .pt's own (rect)
        effects["rect_to_square"] = {k: pt_square[k] - pt_rect[k] for k in keys if k in pt_rect and k in pt_square}
        for cause in result.get("causes", []):
            if cause["cause"] == "letterbox rect vs square":
                cause["release_change"] = effects["rect_to_square"]
    result["release"] = effects


def describe(result: Mapping[str, Any]) -> List[str]:
    """Text lines of the export's part of an explanation."""
    lines = [f"  exported model {result['model']}" + (f" ({result['format']})" if result.get("format") else "")
             + f" against {Path(result['checkpoint']).name}, the weights of the logged validation:"]
    prov = result.get("provenance") or {}
    lines.append(f"    provenance: {prov.get('status', 'unknown')}")
    release = result.get("release") or {}
    if release.get("export_to_pt"):
        shown = ", ".join(f"{k} {v:+.6g}" for k, v in release["export_to_pt"].items())
        lines.append(f"    the export replaced by {Path(result['checkpoint']).name} with your settings "
                     f"({release.get('pt_at_your_settings', 'square')}, the export's batch; {release['how']}): {shown}")
    if result.get("causes"):
        lines.append("    export causes (parity: the .pt and the export on the same tensors; change when only it is "
                     "aligned):")
    for cause in result.get("causes", []):
        change = cause.get("metric_change")
        text = (f"parity mAP50-95 {change['map50_95']:+.4f}, mAP50 {change['map50']:+.4f}" if change
                else "not measurable by parity")
        if cause.get("release_change"):
            text += "; the release's validator on the .pt, rect -> square: " + ", ".join(
                f"{k} {v:+.6g}" for k, v in cause["release_change"].items())
        lines.append(f"      - {cause['cause']}: {cause['detail']} [{text}]")
    if result.get("parity_verdict"):
        lines.append(f"    parity verdict: {result['parity_verdict']}"
                     + (": " + "; ".join(result.get("parity_reasons") or []) if result.get("parity_reasons") else ""))
    lines += [f"    note: {n}" for n in result.get("notes", [])]
    return lines


__all__ = ["EXPORT_FOLDERS", "EXPORT_SUFFIXES", "FORCED", "STATIC_ONLY", "annotate", "forced", "attach_release_effects", "describe",
           "explain", "is_export"]
