"""Standalone evaluation on the real PyPI yolov5: the patched ``val.py`` (detection) and ``segment/val.py``.

NMS is made slow in run 2 only (tests/slow_nms). Under strict the patched NMS ignores the clock, so
``yolo-det verify -- python val.py ...`` finds both runs' predictions and metrics identical, and the
run the clock would have cut says so in its settings; under off (the release's behaviour) run 2 drops
boxes and verify names the image file and the box counts. The models are real, untrained YOLOv5n
checkpoints (as the release saves them: fp16 ``model``), so no training run is needed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from support.cli import cli
from conftest import run
from support.verify import ROOT
from yolo_det.record.log import read_log
from yolo_det.synthetic import make_dataset

pytestmark = pytest.mark.slow  # starts real val.py processes

SLOW_NMS = Path(__file__).resolve().parents[1] / "slow_nms"


@pytest.fixture(scope="module")
def patched(patched_yolov5, yolov5_package):
    """The session's patched copy of the PyPI package (it must be the imported `yolov5`: val.py imports it by
    name), its evaluation scripts and NMS patched (which this checks against the package)."""
    for relpath in ("val.py", "segment/val.py", "detect.py", "utils/general.py"):
        patched_file = (patched_yolov5 / relpath).read_text()
        assert patched_file != (yolov5_package / relpath).read_text() and "yolo_det" in patched_file, relpath
    return patched_yolov5


def _checkpoint(path: Path, cfg: str, cls_name: str) -> Path:  # cfg: under yolov5/models/
    """An untrained model saved the way YOLOv5 saves one (fp16 ``model``, names, stride)."""
    import torch
    from yolov5.models import yolo

    torch.manual_seed(0)
    model = getattr(yolo, cls_name)(str(Path(yolo.__file__).parent / cfg), ch=3, nc=2)
    model.nc, model.names = 2, {0: "box", 1: "disc"}  # as train.py sets them
    torch.save({"epoch": -1, "model": model.half(), "ema": None, "optimizer": None}, path)
    return path


@pytest.fixture(scope="module")
def detect_weights(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("w") / "det.pt", "yolov5n.yaml", "DetectionModel")


def _env(train_env, patched, tmp_path, slow=None):
    env = dict(train_env)
    env["PYTHONPATH"] = os.pathsep.join([str(SLOW_NMS), str(patched.parent), str(ROOT)])
    env["PYTHONWARNINGS"] = "ignore"
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    if slow:
        env["YOLO_DET_TEST_SLOW_NMS"] = slow
        env["YOLO_DET_TEST_SLOW_NMS_LOG"] = str(tmp_path / "slow.log")
    return env


def _val(script, dataset, weights, project, name, mode):
    return [sys.executable, script, "--data", dataset, "--weights", weights, "--img", "64", "--batch-size", "4",
            "--device", "cpu", "--workers", "0", "--project", project, "--name", name, "--exist-ok",
            "--deterministic", mode]


def _verify(patched, dataset, weights, train_env, tmp_path, mode):
    env = _env(train_env, patched, tmp_path, slow="2:1-1")  # run 2, its first NMS call
    cmd = _val("val.py", dataset, weights, tmp_path / "runs", f"{mode}{{run}}", mode)
    proc = cli("verify", "--runs", "2", "--workdir", tmp_path / "w", "--json", "--", *cmd, cwd=patched, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:] + proc.stdout[-3000:]
    assert (tmp_path / "slow.log").read_text() == "slow NMS call 1\n"  # the clock jumped in run 2 only
    return proc, json.loads(proc.stdout)


def _report(tmp_path, name):
    return json.loads((tmp_path / "runs" / name / "determinism.json").read_text())


def test_strict_val_py_is_identical_while_the_nms_clock_runs_out_in_one_run(patched, dataset, detect_weights,
                                                                            train_env, tmp_path):
    proc, result = _verify(patched, dataset, detect_weights, train_env, tmp_path, "strict")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert result["identical"] is True and result["steps"] == 0
    assert result["validations"] == {"compared": 1, "identical": True, "differing": []}
    slow, fast = _report(tmp_path, "strict2"), _report(tmp_path, "strict1")
    # the copy's patched NMS ran (not the installed package's), saw the jump and kept every box
    assert slow["nms_time_limit"]["lifted"] is True and slow["nms_time_limit"]["exceeded"] == 1
    assert slow["evaluation"]["settings"]["nms_cut_batches"] == [0]
    assert fast["evaluation"]["settings"]["nms_cut_batches"] == []
    settings = fast["evaluation"]["settings"]
    assert (settings["split"], settings["batch_size"], settings["imgsz"], settings["rect"], settings["pad"]) == \
        ("val", 4, 64, True, 0.5)
    assert settings["half"] is False and settings["weights_dtype"] == "float32"  # val.py loads fp16 as fp32 on CPU
    assert settings["weights_digest"] == slow["evaluation"]["settings"]["weights_digest"]
    assert fast["mode"] == "strict" and fast["mode_source"] == "cli"
    (val,) = read_log(tmp_path / "w" / "run1" / "fingerprint.jsonl").validations
    assert len(val.names) == 8 and val.files and all(Path(f).is_file() for f in val.files)
    assert set(val.metrics) == {"precision", "recall", "mAP50", "mAP50-95"}


def test_off_keeps_the_release_clock_and_verify_names_the_image(patched, dataset, detect_weights, train_env,
                                                                tmp_path):
    proc, result = _verify(patched, dataset, detect_weights, train_env, tmp_path, "off")
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    first = result["first_divergence"]
    assert first["kind"] == "val" and "predictions differ" in first["detail"]
    assert "file " in first["detail"] and " boxes" in first["detail"]
    assert "evaluations differ" in proc.stderr + proc.stdout or result["identical"] is False
    assert _report(tmp_path, "off2")["nms_time_limit"]["lifted"] is False


def test_segment_val_records_box_and_mask_metrics(patched, train_env, tmp_path, tmp_path_factory):
    data = make_dataset(tmp_path_factory.mktemp("seg"), n_train=2, n_val=4, imgsz=64, segments=True)
    weights = _checkpoint(tmp_path / "seg.pt", "segment/yolov5n-seg.yaml", "SegmentationModel")
    log = tmp_path / "seg.jsonl"
    cmd = _val("segment/val.py", data, weights, tmp_path / "runs", "seg", "warn") + ["--fingerprint", log]
    proc = run(cmd, cwd=patched, env=_env(train_env, patched, tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (val,) = read_log(log).validations
    assert len(val.names) == 4 and val.settings["task"] == "segment" and val.settings["split"] == "val"
    assert {"mAP50", "mAP50(M)", "mAP50-95(M)"} <= set(val.metrics)
    report = _report(tmp_path, "seg")
    assert report["mode"] == "warn" and report["evaluation"]["task"] == "segment"
    assert report["nms_time_limit"]["lifted"] is True
