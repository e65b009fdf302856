"""Standalone Ultralytics evaluation under yolo-det: ``yolo val`` under ``verify`` and ``model.val()`` under enable().

NMS is made slow in run 2 only (tests/slow_nms). Under strict the validator yolo-det hands
``Model.val`` lifts the clock, so both runs' predictions and metrics are identical and run 2 says
which batch the release would have cut; ``model.val()`` in-process records its settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import PYTHON, run
from support.verify import ROOT, yolo_det_cmd
from yolo_det.record.log import read_log

pytestmark = pytest.mark.slow  # starts real Ultralytics validations

YOLO_CLI = str(Path(PYTHON).parent / "yolo")
SLOW_NMS = Path(__file__).resolve().parents[1] / "slow_nms"
# an untrained model scores below Ultralytics' default conf=0.001: a lower threshold gives NMS boxes to cut
ARGS = ["imgsz=64", "batch=4", "device=cpu", "workers=0", "plots=False", "conf=0.00001", "exist_ok=True"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("u") / "yolov8n-untrained.pt"
    YOLO("yolov8n.yaml").save(str(path))
    return path


def _slow_env(train_env, tmp_path):
    """strict, NMS slow in run 2: yolo-det's wrapper (named non_max_suppression too) is clock read 1, the
    release's NMS of the first batch read 2, so the release's own clock jumps there and the wrapper measures it."""
    env = dict(train_env)
    env["PYTHONPATH"] = os.pathsep.join([str(SLOW_NMS), str(ROOT)])
    env.update(YOLO_DET_TEST_SLOW_NMS="2:2-2", YOLO_DET_TEST_SLOW_NMS_LOG=str(tmp_path / "slow.log"),
               PYTHONWARNINGS="ignore", YOLO_DET_DETERMINISTIC="strict")
    return env


def test_yolo_val_under_verify_is_identical_while_nms_clock_runs_out_in_one_run(weights, dataset, train_env,
                                                                               tmp_path):
    env = _slow_env(train_env, tmp_path)
    cmd = [YOLO_CLI, "val", f"model={weights}", f"data={dataset}", f"project={tmp_path / 'runs'}", "name=v{run}",
           *ARGS]
    proc = run(yolo_det_cmd("verify", "--runs", "2", "--workdir", tmp_path / "w",
                            "--json", "--", *cmd), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["validations"]["compared"] == 1
    assert (tmp_path / "slow.log").read_text() == "slow NMS call 2\n"
    slow = json.loads((tmp_path / "runs" / "v2" / "determinism.json").read_text())
    assert slow["mode"] == "strict" and slow["nms_time_limit"]["exceeded"] == 1
    assert slow["evaluation"]["settings"]["nms_cut_batches"] == [0]
    (val,) = read_log(tmp_path / "w" / "run2" / "fingerprint.jsonl").validations
    assert sum(val.boxes) > 0 and len(val.files) == len(val.names) == 8  # boxes the release's clock would drop


def test_model_val_under_enable_records_settings(weights, dataset, tmp_path, monkeypatch, restore_environ):
    from ultralytics import YOLO

    from yolo_det.integrations.ultralytics.trainer import disable, enable

    log = tmp_path / "val.jsonl"
    monkeypatch.setenv("YOLO_DET_FINGERPRINT", str(log))
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "warn")
    enable()
    try:
        YOLO(str(weights)).val(data=str(dataset), project=str(tmp_path / "runs"), name="m", imgsz=64, batch=4,
                               device="cpu", workers=0, plots=False, exist_ok=True)
    finally:
        disable()
        from yolo_det.session import current

        session = current()
        if session is not None:
            session.finish(echo=lambda _m: None)
    report = json.loads((tmp_path / "runs" / "m" / "determinism.json").read_text())
    settings = report["evaluation"]["settings"]
    assert report["mode"] == "warn" and report["nms_time_limit"]["lifted"] is True
    assert (settings["batch_size"], settings["imgsz"], settings["split"], settings["task"]) == (4, 64, "val", "detect")
    assert settings["weights_digest"] and settings["conf_thres"] == 0.001  # the validator's default
    assert {"precision", "recall", "mAP50", "mAP50-95"} <= set(report["evaluation"]["metrics"])
    (val,) = read_log(log).validations
    assert val.settings == settings and len(val.names) == 8
    # a standalone evaluation's record labels its metrics too: the validator's rules, probed, with its settings
    assert val.evaluator["id"] == "ultralytics.ap_per_class" and val.evaluator["rules"]["probed"] is True
    assert val.evaluator["rules"]["conf"] == settings["conf_thres"] and val.evaluator["rules"]["match"] == "confidence"


def test_yolo_predict_under_verify_is_identical_while_nms_clock_runs_out_in_one_run(weights, dataset, train_env,
                                                                                   tmp_path):
    env = _slow_env(train_env, tmp_path)
    images = Path(dataset).parent / "images" / "val"
    cmd = [YOLO_CLI, "predict", f"model={weights}", f"source={images}", f"project={tmp_path / 'runs'}",
           "name=p{run}", "imgsz=64", "device=cpu", "conf=0.00001", "exist_ok=True", "save=False"]
    proc = run(yolo_det_cmd("verify", "--runs", "2", "--workdir", tmp_path / "w", "--json", "--", *cmd),
               cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert json.loads(proc.stdout)["identical"] is True
    assert (tmp_path / "slow.log").read_text() == "slow NMS call 2\n"
    (val,) = read_log(tmp_path / "w" / "run2" / "fingerprint.jsonl").validations
    assert len(val.names) == 8 and sum(val.boxes) > 0 and all(Path(f).is_file() for f in val.files)
    assert val.settings["nms_cut_batches"] == [0]
