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

from support.cli import cli

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
    monkeypatch.setattr(parity.comparison, "CHUNK", 1)  # where check() reads it
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

    env = {**train_env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
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


# ------------------------------------------------------------------ issue 55, item 6: verdicts a skeptic's inputs hold


def _data_copy(built, root: Path, sizes=()) -> Path:
    """The fixture's val images and labels copied under ``root`` (images/, labels/); image i resized to
    ``sizes[i % len(sizes)]`` (width, height) where sizes are given (normalized labels stay valid)."""
    import cv2

    src = Path(built["data"]).parent
    (root / "images").mkdir(parents=True)
    shutil.copytree(src / "labels" / "val", root / "labels")
    for i, image in enumerate(sorted((src / "images" / "val").iterdir())):
        img = cv2.imread(str(image))
        if sizes:
            img = cv2.resize(img, sizes[i % len(sizes)], interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(root / "images" / image.name), img)
    return root / "images"


def _verdict(report) -> str:
    from yolo_det.core import verdicts

    return verdicts.normalize(report["verdict"])


def _with_names(built, fmt: str, names, root: Path) -> Path:
    """A copy of the fixture's ONNX / OpenVINO export whose metadata carries ``names`` (None: no names at all)."""
    import yaml

    if fmt == "onnx":
        import onnx

        model = onnx.load(str(built["onnx"]))
        props = [(p.key, p.value) for p in model.metadata_props if p.key != "names"]
        del model.metadata_props[:]
        for key, value in props + ([("names", str(names))] if names is not None else []):
            model.metadata_props.add(key=key, value=value)
        out = root / "names.onnx"
        onnx.save(model, str(out))
        return out
    out = root / "names_openvino_model"
    shutil.copytree(built["openvino"], out)
    meta = yaml.safe_load((out / "metadata.yaml").read_text())
    meta.pop("names")
    if names is not None:
        meta["names"] = names
    (out / "metadata.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return out


_NAMES = {  # the export's names -> the verdict and what the reason must name (the .pt: {0: rect, 1: ellipse})
    "same, as a list (YOLOv5)": (["rect", "ellipse"], "agree", None),
    "renamed": ({0: "rect", 1: "circle"}, "differs", "class 1 is 'ellipse' in the .pt, 'circle' in the export"),
    "reordered": ({0: "ellipse", 1: "rect"}, "differs", "the same names in another order"),
    "one more": ({0: "rect", 1: "ellipse", 2: "triangle"}, "differs", "2 classes in the .pt, 3 in the export"),
    "one fewer": ({0: "rect"}, "differs", "2 classes in the .pt, 1 in the export"),
    "absent": (None, "not proven", "carries no class names"),
}


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
@pytest.mark.parametrize("case", list(_NAMES))
def test_export_class_names_are_compared_with_the_checkpoints(built, tmp_path, fmt, case):
    """Class ids that mean other classes in the export are a difference; names that cannot be read, not proven."""
    from yolo_det.core import verdicts
    from yolo_det.evaluation import parity

    names, expected, why = _NAMES[case]
    report = parity.check(built["det"], _with_names(built, fmt, names, tmp_path), built["data"])
    doc, text = report.to_json(), "\n".join(report.describe())
    assert _verdict(doc) == expected and report.exit_code == verdicts.exit_code(expected), doc["reasons"]
    assert doc["class_names"]["pt"] == ["rect", "ellipse"]
    assert doc["class_names"]["status"] == {"agree": "same", "differs": "differ", "not proven": "unknown"}[expected]
    if why:
        assert any(why in r for r in doc["reasons"]), doc["reasons"]
        assert why in text
    if expected == "differs":
        assert "class names" in _causes(doc)
    source = {"onnx": "ONNX metadata 'names'", "openvino": "metadata.yaml 'names'"}[fmt]
    assert source in doc["class_names"]["source"]


@pytest.mark.parametrize("names, expected", [
    ({"0": "rect", "1": "ellipse"}, {0: "rect", 1: "ellipse"}),  # a TensorRT header's JSON: string keys
    (["rect", "ellipse"], {0: "rect", 1: "ellipse"}),
    ("{0: 'rect', 1: 'ellipse'}", {0: "rect", 1: "ellipse"}),  # metadata text not parsed yet
    ({0: "a", 2: "c"}, {0: "a", 2: "c"}),
    (None, None), ("rect", None), ({"x": "rect"}, None), ([], None),
])
def test_class_names_read_from_every_metadata_form(names, expected):
    from yolo_det.evaluation import parity

    assert parity.class_names(names) == expected


_SKIPS = {  # how an image leaves the comparison -> what the reason names
    "unreadable image": "unreadable",
    "export runtime error": "the export's runtime failed",
    "output shape refused": "output shapes differ",
}


def _skip_second_image(monkeypatch, site: str, images: Path) -> None:
    """Make the second image (sorted) leave the comparison at ``site``."""
    from yolo_det.evaluation import parity

    second = sorted(images.iterdir())[1]
    if site == "unreadable image":
        second.write_bytes(b"not an image")
        return
    original, calls = parity._run_export, []

    def run_export(runtime, x1, batch, twice):
        calls.append(1)
        out, again = original(runtime, x1, batch, twice)
        if len(calls) % 4 != 2:  # one worker thread: calls come in image order, one per image (4 a run)
            return out, again
        if site == "export runtime error":
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions")
        return [o[..., :-1] for o in out], again

    monkeypatch.setattr(parity.comparison, "_run_export", run_export)  # where check() calls it


@pytest.mark.parametrize("site", list(_SKIPS))
def test_an_image_left_out_of_the_comparison_is_not_proven(built, tmp_path, monkeypatch, site):
    """An fp32 export that agrees on the other images: one image not compared is 'not proven', said how and why."""
    images = _data_copy(built, tmp_path / "data")
    _skip_second_image(monkeypatch, site, images)
    result = cli("parity", built["det"], built["onnx"], "--data", images, "--json")
    doc = json.loads(result.stdout)
    assert result.returncode == 3 and _verdict(doc) == "not proven", doc["reasons"]
    assert [s["image"] for s in doc["skipped"]] == [1] and _SKIPS[site] in doc["skipped"][0]["why"]
    assert any("1 of 4 images" in r and _SKIPS[site] in r for r in doc["reasons"]), doc["reasons"]
    text = cli("parity", built["det"], built["onnx"], "--data", images)
    assert text.returncode == 3 and "1 of 4 images" in text.stdout and _SKIPS[site] in text.stdout, text.stdout


def test_a_difference_on_the_images_compared_stands_when_one_is_left_out(built, tmp_path, monkeypatch):
    images = _data_copy(built, tmp_path / "data")
    _skip_second_image(monkeypatch, "export runtime error", images)
    result = cli("parity", built["det"], built["onnx_other"], "--data", images, "--json")
    doc = json.loads(result.stdout)
    assert result.returncode == 1 and _verdict(doc) == "differs" and len(doc["skipped"]) == 1


def test_no_readable_image_is_bad_input(built, tmp_path):
    images = _data_copy(built, tmp_path / "data")
    for image in images.iterdir():
        image.write_bytes(b"not an image")
    result = cli("parity", built["det"], built["onnx"], "--data", images)
    assert result.returncode == 2 and "unreadable" in result.stderr, result.stdout + result.stderr


_RECT_SHAPES = [[64, 96], [96, 64], [96, 96]]  # 96x64 and 64x96 images at imgsz 64, stride 32, and the padded square


@pytest.mark.parametrize("runtime, expected", [("as exported", "agree"), ("refuses rect shapes", "not proven"),
                                               ("wrong at rect shapes", "differs")])
def test_dynamic_export_is_compared_at_the_rect_shapes_val_feeds_it(built, tmp_path, monkeypatch, runtime, expected):
    """`yolo val` letterboxes a dynamic export rectangularly: parity feeds those shapes before saying agree."""
    import numpy as np

    from yolo_det.evaluation import parity

    images = _data_copy(built, tmp_path / "data", sizes=[(96, 64), (64, 96)])
    original = parity.OnnxRuntime.__call__

    def call(self, x):
        out = original(self, x)
        if x.shape[2] == x.shape[3]:
            return out
        if runtime == "refuses rect shapes":
            raise RuntimeError(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions {list(x.shape)}")
        return [o + np.float32(0.5) if runtime == "wrong at rect shapes" else o for o in out]

    monkeypatch.setattr(parity.OnnxRuntime, "__call__", call)
    result = cli("parity", built["det"], built["onnx_dynamic"], "--data", images, "--json")
    doc = json.loads(result.stdout)
    assert _verdict(doc) == expected and result.returncode == {"agree": 0, "differs": 1, "not proven": 3}[expected], \
        doc["reasons"]
    rect = doc["rect"]
    assert sorted(rect["shapes"]) == _RECT_SHAPES
    text = cli("parity", built["det"], built["onnx_dynamic"], "--data", images).stdout
    if expected == "agree":
        assert sorted(rect["compared"]) == _RECT_SHAPES and not rect["not_compared"]
        assert any(r["output"].endswith("rect") for r in doc["raw"]) and rect["boxes"]["agree"]
        assert "rect shapes" in text
    elif expected == "not proven":
        assert sorted(s["shape"] for s in rect["not_compared"]) == [[64, 96], [96, 64]]
        assert any("[64, 96]" in r and "[96, 64]" in r for r in doc["reasons"]), doc["reasons"]
        assert "[64, 96]" in text and "not proven" in text
    else:
        assert any("rect" in r for r in doc["reasons"]), doc["reasons"]
