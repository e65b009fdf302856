"""Whole-run determinism on the real PyPI yolov5: NMS is made slow in run 2 only (a clock that jumps inside
``non_max_suppression``, injected by tests/slow_nms/sitecustomize.py). Under strict the patched NMS ignores the
clock, so both runs write identical validations, results.csv and checkpoints; under off (the release's
behaviour) run 2 drops predictions, so its validation and results.csv differ while its training steps do not
(best.pt differs exactly when the cut changed which epoch was best)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from support.verify import ROOT
from support.cli import cli
from yolo_det.record.log import read_log

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes

SLOW_NMS = Path(__file__).resolve().parents[2] / "slow_nms"


def _verify(copy: Path, dataset: Path, train_env: dict, tmp_path: Path, mode: str) -> tuple:
    """`yolo-det verify --runs 2 --json` of the patched copy, its second (last) validation slow in run 2."""
    train = [sys.executable, "train.py", "--data", dataset, "--cfg", "yolov5n.yaml", "--weights", "", "--img", "64",
             "--epochs", "2", "--batch-size", "8", "--workers", "2", "--noplots", "--device", "cpu",
             "--project", tmp_path / "runs", "--name", f"{mode}{{run}}", "--deterministic", mode]
    env = dict(train_env)
    # The copy must be the imported `yolov5` (its train.py imports yolov5.utils.general by absolute name).
    env["PYTHONPATH"] = os.pathsep.join([str(SLOW_NMS), str(copy.parent), str(ROOT)])
    env["PYTHONWARNINGS"] = "ignore"
    env["YOLO_DET_TEST_SLOW_NMS"] = "2:2-2"  # run 2, its second NMS call (epoch 1's validation)
    env["YOLO_DET_TEST_SLOW_NMS_LOG"] = str(tmp_path / f"slow-{mode}.log")
    proc = cli("verify", "--runs", "2", "--workdir", tmp_path / f"w-{mode}", "--json", "--", *train, cwd=copy, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:] + proc.stdout[-3000:]
    assert (tmp_path / f"slow-{mode}.log").read_text() == "slow NMS call 2\n"  # the clock jumped in run 2 only
    return proc, json.loads(proc.stdout)


def _report(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "runs" / name / "determinism.json").read_text())


@pytest.fixture
def patched_copy(patched_yolov5):
    """The session's patched copy: its NMS (utils/general.py) is patched, which the fixture checks."""
    return patched_yolov5


def test_strict_results_do_not_depend_on_the_nms_clock(patched_copy, dataset, train_env, tmp_path):
    proc, result = _verify(patched_copy, dataset, train_env, tmp_path, "strict")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert result["identical"] is True and result["steps_identical"] is True
    assert result["validations"] == {"compared": 2, "identical": True, "differing": []}
    assert result["results_csv"]["identical"] is True and result["results_csv"]["rows"] == 2
    for name in ("weights/last.pt", "weights/best.pt"):
        assert result["checkpoints"][name]["identical"] is True, name
        assert result["checkpoints"][name]["tensors"]["model"] > 300
    slow = _report(tmp_path, "strict2")["nms_time_limit"]
    # the patched NMS of the copy ran (not the installed package's) and saw the clock jump
    assert slow["lifted"] is True and slow["calls"] >= 2 and slow["exceeded"] == 1
    output = (tmp_path / "w-strict" / "run2" / "output.log").read_text()
    assert output.count("more than the release's time limit") == 1 and "NMS time limit" not in output
    assert _report(tmp_path, "strict1")["nms_time_limit"]["exceeded"] == 0


def test_off_keeps_the_release_clock_and_verify_names_the_validation(patched_copy, dataset, train_env, tmp_path):
    proc, result = _verify(patched_copy, dataset, train_env, tmp_path, "off")
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert result["identical"] is False and result["steps_identical"] is True
    first = result["first_divergence"]
    assert (first["kind"], first["epoch"], first["step"]) == ("val", 1, 4)  # after epoch 1's last step
    assert "predictions differ" in first["detail"]
    assert result["results_csv"]["identical"] is False
    # best.pt is the checkpoint of the last epoch whose validation was a new best (YOLOv5 strips its fitness):
    # identical exactly when both runs chose the same epoch, whichever way the cut moved run 2's fitness
    logs = [tmp_path / "w-off" / f"run{i}" / "fingerprint.jsonl" for i in (1, 2)]
    chosen = [max(v.epoch for v in read_log(log).validations if v.best) for log in logs]
    assert result["checkpoints"]["weights/best.pt"]["identical"] is (chosen[0] == chosen[1]), chosen
    assert _report(tmp_path, "off2")["nms_time_limit"]["lifted"] is False
    assert "NMS time limit" in (tmp_path / "w-off" / "run2" / "output.log").read_text()  # the release's own cut

    text = cli("diff", *logs, env=dict(train_env, PYTHONPATH=str(ROOT)))
    assert text.returncode == 1
    assert "diverged at epoch 1 validation (after step 4): predictions differ" in text.stdout
    assert "training steps identical" in text.stdout
    best = [tmp_path / "runs" / f"off{i}" / "weights" / "best.pt" for i in (1, 2)]
    ckpt = cli("diff", *best, env=dict(train_env, PYTHONPATH=str(ROOT)))
    if chosen[0] == chosen[1]:  # the same epoch's weights: the training steps are identical
        assert ckpt.returncode == 0 and "identical" in ckpt.stdout, ckpt.stdout
    else:  # two epochs' weights
        assert ckpt.returncode == 1 and "checkpoints differ" in ckpt.stdout
        assert "model.model.0.conv.weight: values differ" in ckpt.stdout
    assert "metadata that differs (expected, not judged): opt, date" in ckpt.stdout


def _verify_ultralytics(dataset: Path, train_env: dict, tmp_path: Path, mode: str) -> tuple:
    """`yolo-det verify` of two Ultralytics trainings (yolo-det ultralytics train), NMS slow in run 2."""
    pytest.importorskip("ultralytics")
    train = [sys.executable, "-m", "yolo_det", "ultralytics", "train", "model=yolov8n.yaml", f"data={dataset}",
             "epochs=2", "imgsz=64", "batch=8", "workers=2", "plots=False", "amp=False", "device=cpu",
             f"project={tmp_path / 'runs'}", f"name=u{mode}{{run}}", "exist_ok=True", "seed=0", f"deterministic={mode}"]
    env = dict(train_env)
    env["PYTHONPATH"] = os.pathsep.join([str(SLOW_NMS), str(ROOT)])
    env["PYTHONWARNINGS"] = "ignore"
    env["YOLO_DET_TEST_SLOW_NMS"] = "2:1"  # run 2, every NMS call
    env["YOLO_DET_TEST_SLOW_NMS_LOG"] = str(tmp_path / f"slow-u{mode}.log")
    proc = cli("verify", "--runs", "2", "--workdir", tmp_path / f"w-u{mode}", "--json", "--", *train, cwd=tmp_path,
               env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "slow NMS call 1\n" in (tmp_path / f"slow-u{mode}.log").read_text()
    return proc, json.loads(proc.stdout)


def test_ultralytics_trainer_validation_ignores_the_nms_clock_under_strict(dataset, train_env, tmp_path):
    proc, result = _verify_ultralytics(dataset, train_env, tmp_path, "strict")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert result["identical"] is True and result["validations"]["compared"] == 2
    table = result["results_csv"]
    assert table["identical"] is True and table["rows"] == 2 and table["not_judged"] == ["time"]
    for name in ("weights/last.pt", "weights/best.pt"):
        checkpoint = result["checkpoints"][name]
        assert checkpoint["identical"] is True and checkpoint["tensors"]["model"] > 300, name  # the EMA, stripped
        assert {"date", "train_args"} <= set(checkpoint["metadata_differs"])
    limit = _report(tmp_path, "ustrict2")["nms_time_limit"]
    assert limit["lifted"] is True and limit["where"] == "ultralytics utils/nms.py" and limit["calls"] >= 2

    proc, result = _verify_ultralytics(dataset, train_env, tmp_path, "off")
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    first = result["first_divergence"]
    # an untrained yolov8n scores mAP 0 with or without the cut: what differs is the predictions
    assert (first["kind"], first["epoch"]) == ("val", 0) and "predictions differ" in first["detail"]
    assert result["steps_identical"] is True
    assert _report(tmp_path, "uoff2")["nms_time_limit"]["lifted"] is False
