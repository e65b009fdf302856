"""``yolo-det parity``: an export agrees with its .pt, or each cause of a difference is named.

One module fixture builds tiny untrained models (yolov8n, yolov8n-seg, yolo26n at 64 px, 2 classes; training
is not the point of parity) and exports them through ``yolo_det.integrations.ultralytics.export`` (real
Ultralytics export, real ONNX Runtime and OpenVINO); every test only reads them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_util import cli

pytestmark = pytest.mark.slow

pytest.importorskip("ultralytics")
pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")


def _tiny(cfg: str, out: Path, seed: int) -> Path:
    """An untrained 2-class model saved as an Ultralytics checkpoint, class biases spread so boxes pass conf."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(seed)
    yolo = YOLO(cfg)
    yolo.model = type(yolo.model)(cfg, nc=2, verbose=False)
    yolo.model.names = {0: "rect", 1: "ellipse"}
    head = yolo.model.model[-1]
    for seq in list(head.cv3) + list(getattr(head, "one2one_cv3", None) or []):
        torch.nn.init.normal_(seq[-1].bias, -1.0, 1.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    yolo.save(str(out))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from yolo_det.integrations.ultralytics.export import export
    from yolo_det.synthetic import make_dataset

    root = tmp_path_factory.mktemp("parity")
    data = make_dataset(root / "data", n_train=1, n_val=4, imgsz=96)
    det = _tiny("yolov8n.yaml", root / "det" / "a.pt", 0)
    other = _tiny("yolov8n.yaml", root / "other" / "b.pt", 1)
    seg = _tiny("yolov8n-seg.yaml", root / "seg" / "s.pt", 0)
    e2e = _tiny("yolo26n.yaml", root / "e2e" / "y.pt", 0)
    out = {"data": data, "det": det, "other": other, "seg": seg, "e2e": e2e}

    def variant(name: str, src: Path, **kwargs) -> Path:
        copy = root / name / src.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, copy)
        artifact, _ = export(copy, imgsz=64, **kwargs)
        return artifact

    out["onnx"] = variant("onnx", det, format="onnx")
    out["openvino"] = variant("openvino", det, format="openvino")
    out["onnx_fp16"] = variant("onnx_fp16", det, format="onnx", quantize=16)  # fp16 graph on CPU (onnxruntime float16)
    out["onnx_nms"] = variant("onnx_nms", det, format="onnx", nms=True)
    out["onnx_other"] = variant("onnx_other", other, format="onnx")
    out["onnx_dynamic"] = variant("onnx_dynamic", det, format="onnx", dynamic=True)
    out["seg_onnx"] = variant("seg_onnx", seg, format="onnx")
    out["e2e_onnx"] = variant("e2e_onnx", e2e, format="onnx", nms=False)
    return out


def _parity(built, exported: str, model: str = "det"):
    result = cli("parity", built[model], built[exported], "--data", built["data"], "--json")
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def _causes(report) -> dict:
    return {c["cause"]: c for c in report["causes"]}


@pytest.mark.parametrize("exported", ["onnx", "openvino"])
def test_fp32_export_agrees_with_its_pt(built, exported):
    code, report = _parity(built, exported)
    assert code == 0, report["reasons"]
    assert report["verdict"] == "agree"
    assert report["raw"] and all(r["within"] for r in report["raw"])
    assert report["boxes"]["matched"] > 0 and report["boxes"]["only_pt"] == report["boxes"]["only_export"] == 0
    assert report["runtime"]["repeatable"]
    settings = report["runtime"]["settings"]
    if exported == "onnx":
        assert settings["intra_op_num_threads"] == 1 and settings["use_deterministic_compute"] is True
    else:
        assert settings["INFERENCE_PRECISION_HINT"] == "f32" and settings["NUM_STREAMS"] == "1"
    assert report["provenance"]["same_checkpoint"] is True
    # a static export: the default `yolo val` of the .pt letterboxes rect, of the export square - named, measured
    letterbox = _causes(report)["letterbox rect vs square"]
    assert letterbox["aligned"] and letterbox["metric_change"] is not None


def test_fp16_export_is_named_as_the_cause(built):
    code, report = _parity(built, "onnx_fp16")
    assert code == 1
    assert "precision fp16" in _causes(report)
    assert not all(r["within"] for r in report["raw"])  # fp16 compute: beyond fp32 tolerance


def test_nms_in_graph_is_named_with_its_baked_settings(built):
    code, report = _parity(built, "onnx_nms")
    assert code == 1
    nms = _causes(report)["NMS in graph"]
    assert "conf=0.25" in nms["detail"] and "argmax" in nms["detail"]
    assert nms["metric_change"] is not None
    assert report["raw_note"] and "NMS inside the graph" in report["raw_note"]


def test_export_from_another_checkpoint_is_named(built):
    code, report = _parity(built, "onnx_other")
    assert code == 1
    assert report["provenance"]["same_checkpoint"] is False
    assert "different source checkpoint" in _causes(report)
    assert not all(r["within"] for r in report["raw"])


def test_dynamic_shape_export_is_named_and_agrees(built):
    code, report = _parity(built, "onnx_dynamic")
    assert code == 0, report["reasons"]
    dynamic = _causes(report)["dynamic shapes"]
    assert dynamic["aligned"] and not dynamic["artifact"]
    assert "letterbox rect vs square" not in _causes(report)  # validators keep rect for a dynamic export
    assert report["imgsz"] == [64, 64]  # the size recorded in its metadata, fed square to both


def test_chunked_and_threaded_comparison_gives_the_one_image_at_a_time_result(built, monkeypatch):
    """The .pt runs batched per chunk and the export on another thread: the report does not depend on either."""
    from yolo_det.evaluation import parity

    whole = parity.check(built["e2e"], built["e2e_onnx"], built["data"]).to_json()
    monkeypatch.setattr(parity, "CHUNK", 1)
    single = parity.check(built["e2e"], built["e2e_onnx"], built["data"]).to_json()
    for key in ("raw", "boxes", "metrics", "causes", "verdict"):
        assert single[key] == whole[key], key
    # the one-to-many decoding taken from the end-to-end forward equals a forward of the one-to-many head
    import numpy as np

    model = parity.TorchModel(built["e2e"])
    x = np.random.default_rng(0).random((2, 3, 64, 64), dtype=np.float32)
    _, one2many = model.run(x, end2end=True, one2many=True)
    assert np.array_equal(one2many[0], model(x, end2end=False)[0])


def test_nms_kernel_is_greedy_nms_in_the_given_order():
    import numpy as np
    import torch

    from yolo_det.evaluation import parity

    rng = np.random.default_rng(1)
    xy = rng.random((300, 2), dtype=np.float32) * 50
    boxes = torch.from_numpy(np.concatenate([xy, xy + 5 + rng.random((300, 2), dtype=np.float32) * 20], 1))
    rank = torch.arange(300, 0, -1, dtype=torch.float32)
    keep = parity._nms_kernel(boxes, rank, 0.5).tolist()
    reference, alive = [], np.ones(300, bool)  # the textbook loop
    for k in range(300):
        if alive[k]:
            reference.append(k)
            alive[k + 1:] &= parity.box_iou(boxes[k:k + 1].numpy(), boxes[k + 1:].numpy())[0] <= 0.5
    assert keep == reference and 0 < len(keep) < 300


def test_tensorrt_engine_without_tensorrt_or_gpu_is_bad_input(built, tmp_path):
    """An .engine (Ultralytics' metadata header, then the engine) where TensorRT or CUDA is missing: exit 2, why."""
    import torch

    from yolo_det.evaluation.parity import engine_header, read_export

    meta = json.dumps({"imgsz": [64, 64], "batch": 1, "stride": 32, "task": "detect", "args": {"half": True}}).encode()
    engine = tmp_path / "a.engine"
    engine.write_bytes(len(meta).to_bytes(4, "little") + meta + b"\x00not-a-real-engine")
    info = read_export(engine)
    assert info.format == "engine" and info.input_shape == [1, 3, 64, 64] and info.half
    assert engine_header(built["onnx"]) == (0, {})  # no header: a bare engine reads as one
    bare = tmp_path / "bare.engine"
    bare.write_bytes(b"\x00not-a-real-engine")
    result = cli("parity", built["det"], bare, "--data", built["data"])
    assert result.returncode == 2 and "without Ultralytics' metadata header" in result.stderr, result.stderr
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        expected = "tensorrt package is not installed"
    else:
        expected = "cannot deserialize" if torch.cuda.is_available() else "needs a CUDA GPU"
    result = cli("parity", built["det"], engine, "--data", built["data"])
    assert result.returncode == 2 and expected in result.stderr, result.stderr


def test_segmentation_export_agrees_on_boxes_and_prototypes(built):
    code, report = _parity(built, "seg_onnx", model="seg")
    assert code == 0, report["reasons"]
    assert len(report["raw"]) == 2  # detections with mask coefficients, and the mask prototypes


def test_yolo26_end_to_end_head_is_named_and_aligned(built):
    code, report = _parity(built, "e2e_onnx", model="e2e")
    assert code == 0, report["reasons"]
    head = _causes(report)["end-to-end one-to-one head"]
    assert head["aligned"] and head["metric_change"] is not None
    assert report["raw"][0]["shape"][-1] == 6  # [x1, y1, x2, y2, score, class]: the one-to-one output


def test_provenance_is_inside_the_artifacts_and_beside_them(built):
    from yolo_det.record import export_provenance

    for key in ("onnx", "openvino"):
        record = export_provenance.read(built[key])
        assert record["source_weights_digest"] == export_provenance.weights_digest(built["det"])
        assert record["export_args"]["format"] == key and "opset" in record["export_args"]
        assert export_provenance.sidecar_path(built[key]).exists()


def test_bad_input_exits_2_and_no_labels_is_not_proven(built, tmp_path):
    result = cli("parity", built["det"], tmp_path / "missing.onnx", "--data", built["data"])
    assert result.returncode == 2 and "no such exported model" in result.stderr
    images = tmp_path / "images"
    shutil.copytree(Path(built["data"]).parent / "images" / "val", images)
    result = cli("parity", built["det"], built["onnx"], "--data", images)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "not proven" in result.stdout
    # labels that hold no object: both mAPs would be 0, which proves nothing either
    empty = tmp_path / "empty"
    shutil.copytree(Path(built["data"]).parent / "images" / "val", empty / "images")
    (empty / "labels").mkdir()
    for image in (empty / "images").iterdir():
        (empty / "labels" / f"{image.stem}.txt").write_text("")
    result = cli("parity", built["det"], built["onnx"], "--data", empty / "images")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "not proven" in result.stdout and "labels hold no object" in result.stdout


_V5_EXPORT = """
import runpy, sys, torch
from models.yolo import Model
torch.manual_seed(0)
model = Model('models/yolov5n.yaml', nc=2)
model.names = ['rect', 'ellipse']
torch.save({'model': model.half(), 'ema': None, 'epoch': -1}, sys.argv[1])
sys.argv = ['export.py', '--weights', sys.argv[1], '--include', 'onnx', '--imgsz', '64']
runpy.run_path('export.py', run_name='__main__')  # the release's own export.py, as `python export.py` runs it
"""


def test_yolov5_export_through_the_patch_agrees_and_records_provenance(patched_yolov5, built, train_env, tmp_path):
    """Real export.py of the patched PyPI yolov5 (torch's dynamo exporter default pinned off), then parity."""
    import subprocess
    import sys

    from yolo_det.record import export_provenance

    env = {**train_env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    weights = tmp_path / "v5.pt"
    exp = subprocess.run([sys.executable, "-c", _V5_EXPORT, weights], cwd=patched_yolov5, env=env,
                         capture_output=True, text=True, timeout=300)
    onnx_file = tmp_path / "v5.onnx"
    assert onnx_file.exists(), exp.stdout[-2000:] + exp.stderr[-2000:]
    record = export_provenance.read(onnx_file)
    assert record["export_args"]["imgsz"] == [64, 64] and record["opset"]
    par = subprocess.run([sys.executable, "-m", "yolo_det", "parity", weights, onnx_file, "--data", built["data"],
                          "--json"], cwd=tmp_path, env={**env, "YOLOV5_REPO": str(patched_yolov5)},
                         capture_output=True, text=True, timeout=300)
    assert par.returncode == 0, par.stdout[-3000:] + par.stderr[-2000:]
    report = json.loads(par.stdout)
    assert report["provenance"]["same_checkpoint"] is True and report["raw"][0]["within"]


def test_ultralytics_export_command_records_provenance(built, tmp_path):
    from yolo_det.record import export_provenance

    model = tmp_path / "a.pt"
    shutil.copy(built["det"], model)
    result = cli("ultralytics", "export", f"model={model}", "format=onnx", "imgsz=64")
    assert result.returncode == 0, result.stderr[-2000:]
    record = export_provenance.read(tmp_path / "a.onnx")
    assert record["source_weights_digest"] == export_provenance.weights_digest(model)
    assert record["export_args"]["imgsz"] == 64 and record["versions"]["onnxruntime"]
    assert cli("ultralytics", "export", "format=onnx").returncode == 2  # no model=


def test_two_exports_of_one_checkpoint_differ_only_in_named_fields(built, tmp_path):
    from yolo_det.integrations.ultralytics.export import export
    from yolo_det.record import export_provenance

    model = tmp_path / "a.pt"
    shutil.copy(built["det"], model)
    again, _ = export(model, format="onnx", imgsz=64)
    diff = export_provenance.differences(built["onnx"], again)
    assert "graph" not in diff and "opset" not in diff  # the same computation and weights, bit for bit
    assert "provenance.source_weights_digest" not in diff
    assert set(diff) <= {"date", "provenance.source_checkpoint", "provenance.source_run"}, diff
    assert export_provenance.differences(built["onnx"], built["onnx"]) == {}
    assert "graph" in export_provenance.differences(built["onnx"], built["onnx_other"])
