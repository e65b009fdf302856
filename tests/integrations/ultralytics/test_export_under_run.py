"""The README's Ultralytics path needs no code change, and neither does its export: under `yolo-det run`,
`yolo export` and `model.export()` write the same provenance as `yolo-det ultralytics export` (which checkpoint,
which arguments), read back by parity."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ultralytics")
pytest.importorskip("onnx")

from support.verify import script_env  # noqa: E402
from yolo_det.record import export_provenance  # noqa: E402

pytestmark = pytest.mark.slow  # exports a model to ONNX in a child process

SCRIPT = """import sys
from ultralytics import YOLO
YOLO(sys.argv[1]).export(format="onnx", imgsz=64, simplify=False)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from ultralytics import YOLO

    path = tmp_path_factory.mktemp("ckpt") / "m.pt"
    YOLO("yolov8n.yaml").save(str(path))
    return path


@pytest.mark.parametrize("how", ["yolo export", "model.export()"])
def test_an_export_under_yolo_det_run_carries_its_provenance(how, checkpoint, tmp_path, train_env):
    model = tmp_path / "m.pt"
    model.write_bytes(checkpoint.read_bytes())
    if how == "yolo export":
        cmd = [str(Path(sys.executable).with_name("yolo")), "export", f"model={model}", "format=onnx", "imgsz=64",
               "simplify=False"]
    else:
        script = tmp_path / "export.py"
        script.write_text(SCRIPT)
        cmd = [sys.executable, str(script), str(model)]
    proc = subprocess.run([sys.executable, "-m", "yolo_det", "run", "--", *cmd], cwd=tmp_path,
                          env=script_env(train_env), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    artifact = tmp_path / "m.onnx"
    record = export_provenance.read(artifact)
    assert record is not None, proc.stderr[-2000:]
    assert record["source_weights_digest"] == export_provenance.weights_digest(model)
    assert export_provenance.sidecar_path(artifact).exists() and "provenance was not written" not in proc.stderr
