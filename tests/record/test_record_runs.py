"""The always-on record on real runs: a strict PyPI YOLOv5 run given no fingerprint option carries its own
compact ``fingerprint.jsonl``; ``diff`` of two run folders names the first divergent step and kind (or says
identical) with no preparation; ``yolo-det val RUN_DIR`` reproduces from the default record.

Reuses the session's two strict runs (``yolov5_strict_verify``, fingerprinted by ``verify``: their folders'
``determinism.json`` points at the logs) and trains one more, with another seed and no option at all.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from support.cli import cli
from conftest import YOLOV5_TRAIN, run
from support.verify import script_env
from yolo_det.record.log import read_log
from yolo_det.record.run_folder import LOG_NAME

pytestmark = pytest.mark.slow  # trains a real model


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, patched_yolov5, dataset, train_env):
    """A strict run as the README's quick start makes it: no --fingerprint, another --seed than the verify runs."""
    root = tmp_path_factory.mktemp("plain")
    env = script_env(train_env)
    env["PYTHONPATH"] = os.pathsep.join([str(patched_yolov5.parent), env["PYTHONPATH"]])  # its NMS records boxes
    proc = run([sys.executable, "train.py", "--data", dataset, "--epochs", "2", *YOLOV5_TRAIN, "--project",
                root / "runs", "--name", "seed1", "--deterministic", "strict", "--seed", "1"],
               cwd=patched_yolov5, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return root / "runs" / "seed1", script_env(train_env)


def _strict(verify, n: int):
    proc, root = verify
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return root / "runs" / f"strict{n}"


def test_a_strict_run_without_options_carries_a_compact_log(plain_run):
    folder, _ = plain_run
    log = read_log(folder / LOG_NAME)
    assert log.header["record"] == "compact" and log.complete and len(log.validations) == 2
    assert all(v.names for v in log.validations)  # every image's predictions, as in a full log
    assert log.steps[0].names["grad"] and all(s.compact for s in log.steps[1:-1] if s.step not in
                                              {v.after_step for v in log.validations})
    report = json.loads((folder / "determinism.json").read_text())
    assert report["fingerprint_log"] == str((folder / LOG_NAME).resolve()) and report["fingerprint_record"] == "compact"
    assert report["run_facts"]["memory_format"] == "contiguous"  # the format the model trained in


def test_diff_of_two_run_folders_uses_their_logs(plain_run, yolov5_strict_verify):
    a, b = _strict(yolov5_strict_verify, 1), _strict(yolov5_strict_verify, 2)
    same = cli("diff", a, b, "--json")
    assert same.returncode == 0, same.stdout + same.stderr
    result = json.loads(same.stdout)
    assert result["identical"] and result["steps"]["identical"]
    assert any(c.startswith("fingerprint logs (") for c in result["compared"])
    other = cli("diff", a, plain_run[0])  # a full log against a compact one: roots compared
    assert other.returncode == 1, other.stdout + other.stderr
    assert "fingerprint logs: diverged at step 1: kind " in other.stdout


def test_val_of_a_run_folder_reproduces_from_the_default_record(plain_run):
    folder, env = plain_run
    proc = cli("val", folder, "--json", env=env)
    assert proc.returncode == 0, proc.stdout[:3000] + proc.stderr[-3000:]
    assert json.loads(proc.stdout)["identical"] is True


def test_val_py_and_detect_py_keep_their_own_log_under_strict_and_none_under_off(plain_run, patched_yolov5,
                                                                                  dataset, tmp_path):
    """A standalone val.py/detect.py given no fingerprint option: its save_dir holds the validation record
    (settings, every image's predictions) as ``--fingerprint`` would; ``--fingerprint-mode off`` writes none."""
    folder, env = plain_run
    env = {**env, "PYTHONPATH": os.pathsep.join([str(patched_yolov5.parent), env["PYTHONPATH"]])}
    weights = folder / "weights" / "best.pt"
    common = ["--weights", weights, "--img", "128", "--device", "cpu", "--project", tmp_path]
    val = run([sys.executable, "val.py", "--data", dataset, "--workers", "0", "--batch-size", "4", *common,
               "--name", "val", "--deterministic", "strict"], cwd=patched_yolov5, env=env)
    assert val.returncode == 0, val.stdout[-2000:] + val.stderr[-3000:]
    log = read_log(tmp_path / "val" / LOG_NAME)
    assert log.complete and not log.steps and len(log.validations) == 1
    record = log.validations[0]
    assert len(record.names) == 8 and record.settings["batch_size"] == 4 and record.metrics["mAP50"] >= 0
    report = json.loads((tmp_path / "val" / "determinism.json").read_text())
    assert report["fingerprint_log"] == str((tmp_path / "val" / LOG_NAME).resolve())
    images = dataset.parent / "images" / "val"
    detect = run([sys.executable, "detect.py", "--source", images, *common, "--name", "off", "--nosave",
                  "--deterministic", "strict", "--fingerprint-mode", "off"], cwd=patched_yolov5, env=env)
    assert detect.returncode == 0, detect.stdout[-2000:] + detect.stderr[-3000:]
    assert (tmp_path / "off" / "determinism.json").is_file() and not list((tmp_path / "off").glob("*.jsonl"))


def test_val_of_a_run_folder_with_your_command_explains_from_the_default_record(plain_run, patched_yolov5, dataset):
    """``yolo-det val RUN_DIR -- python val.py ...`` on a run trained with no fingerprint option: your command's
    settings are compared with the logged validation's (the issue's exit 2 "holds no settings" is gone)."""
    folder, env = plain_run
    proc = cli("val", folder, "--json", "--", "python", "val.py", "--weights", folder / "weights" / "last.pt",
               "--data", dataset, "--img", "128", "--batch-size", "3", "--device", "cpu", "--workers", "0",
               cwd=patched_yolov5, env=env)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    batch = {d["setting"]: d for d in result["differences"]}["batch_size"]
    assert batch["yours"] == 3 and batch["training"] == 8  # 2 x --batch-size 8, capped at the 8 val images
