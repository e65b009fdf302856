"""The CycloneDX 1.7 ML-BOM of a run: the model (with its model card), the data it was trained and validated on,
and the training under ``formulation``, checked with cyclonedx-python-lib's schema validator.

cyclonedx-python-lib's object model has no model card or formulation yet, so the document is built as the 1.7
JSON schema defines it and validated by the library (``JsonStrictValidator``); an invalid BOM is never written.
"""

from __future__ import annotations

import csv
import uuid
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from .run import AttestedRun
from .signing import AttestError

SPEC_VERSION = "1.7"
#: results.csv columns that are performance metrics, by the prefix both releases use.
METRIC_PREFIXES = ("metrics/",)


def final_metrics(run_dir: Path) -> Dict[str, str]:
    """The last epoch's metrics of ``results.csv`` (``metrics/mAP_0.5`` -> ``0.0070267``); {} without one."""
    path = Path(run_dir) / "results.csv"
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [[cell.strip() for cell in row] for row in csv.reader(handle) if row]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    return {name: value for name, value in zip(rows[0], rows[-1]) if name.startswith(METRIC_PREFIXES) and value}


def bom(run: AttestedRun, intervals: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Dict[str, Any]:
    """The ML-BOM document; ``intervals`` (metric -> {"low", "high", "n"}) are a seed study's intervals."""
    manifest = run.manifest or {}
    intervals = intervals or {}
    datasets: List[Dict[str, Any]] = []
    data_components: List[Dict[str, Any]] = []
    for split, record in sorted((manifest.get("splits") or {}).items()):
        ref = f"data-{split}"
        files = {**(record.get("images") or {}), **(record.get("labels") or {})}
        data_components.append({
            "type": "data", "bom-ref": ref, "name": f"{split} split of {manifest.get('root')}",
            "data": [{"type": "dataset", "name": split, "contents": {"properties": [
                {"name": "yolo-det:files", "value": str(len(files))},
                {"name": "yolo-det:images", "value": str(len(record.get("images") or {}))},
                {"name": "yolo-det:digest-algorithm", "value": str(manifest.get("digest"))}]},
                "description": f"{len(record.get('images') or {})} images with their labels, each file's "
                               f"{manifest.get('digest')} digest in the provenance's resolved dependencies"}],
            "properties": [{"name": "yolo-det:manifest-digest", "value": str(run.data_digest())}],
        })
        datasets.append({"ref": ref})  # blake2b-128 is no CycloneDX hash algorithm: file digests are in the provenance
    metrics = []
    for name, value in final_metrics(run.path).items():
        metric: Dict[str, Any] = {"type": name, "value": value, "slice": "validation, last epoch"}
        interval = intervals.get(name)
        if interval and interval.get("low") is not None and interval.get("high") is not None:
            metric["confidenceInterval"] = {"lowerBound": str(interval["low"]), "upperBound": str(interval["high"])}
        metrics.append(metric)
    settings = run.folder.settings
    architecture = settings.get("cfg") or settings.get("model")
    model = {
        "type": "machine-learning-model", "bom-ref": "model", "name": run.weights.name,
        "version": run.final_record,
        "hashes": [{"alg": "SHA-256", "content": run.weights_sha256}],
        "description": f"weights trained under --deterministic {run.mode} by {run.folder.release or 'a YOLO release'}",
        "modelCard": {
            "modelParameters": {
                "approach": {"type": "supervised"}, "task": "object-detection",
                "architectureFamily": "YOLO",
                **({"modelArchitecture": str(architecture)} if architecture else {}),
                "datasets": datasets,
                "inputs": [{"format": "image"}], "outputs": [{"format": "bounding boxes with classes and scores"}],
            },
            **({"quantitativeAnalysis": {"performanceMetrics": metrics}} if metrics else {}),
            "properties": [{"name": "yolo-det:mode", "value": str(run.mode)},
                           {"name": "yolo-det:final-record", "value": run.final_record},
                           *({"name": f"yolo-det:seed:{k}", "value": str(v)} for k, v in run.seeds.items())],
        },
    }
    formulation = [{"bom-ref": "training", "workflows": [{
        "bom-ref": "training-workflow", "uid": f"{run.path.name}@{run.header.get('started')}",
        "name": "training", "description": " ".join(str(c) for c in run.header.get("command") or []),
        "taskTypes": ["build"],
        "inputs": [{"resource": {"ref": d["ref"]}} for d in datasets],
        "outputs": [{"resource": {"ref": "model"}}],
        "properties": [{"name": "yolo-det:mode", "value": str(run.mode)},
                       {"name": "yolo-det:steps", "value": str(run.steps)},
                       {"name": "yolo-det:fingerprint-log-sha256", "value": run.log_sha256}],
    }]}]
    document = {
        "$schema": "http://cyclonedx.org/schema/bom-1.7.schema.json",
        "bomFormat": "CycloneDX", "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'yolo-det:' + run.weights_sha256 + run.final_record)}",
        "version": 1,
        "metadata": {"component": {"type": "machine-learning-model", "bom-ref": "model-meta",
                                   "name": run.weights.name}},
        "components": [model, *data_components],
        "formulation": formulation,
    }
    validate(document)
    return document


def validate(document: Mapping[str, Any]) -> None:
    """Check a BOM against CycloneDX 1.7's JSON schema with cyclonedx-python-lib; :class:`AttestError` on error."""
    import json

    try:
        from cyclonedx.schema import SchemaVersion
        from cyclonedx.validation.json import JsonStrictValidator
    except ImportError as exc:
        from ..core import extras

        raise AttestError(f"the ML-BOM needs {exc.name}: {extras.install_hint('attest')}") from None
    error = JsonStrictValidator(SchemaVersion.V1_7).validate_str(json.dumps(document))
    if error is not None:
        raise AttestError(f"not a valid CycloneDX {SPEC_VERSION} BOM: {error}")


__all__ = ["SPEC_VERSION", "bom", "final_metrics", "validate"]
