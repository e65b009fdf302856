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

from cli_util import cli
from conftest import YOLOV5_TRAIN, run
from verify_util import script_env
from yolo_det.record.log import LOG_NAME, read_log

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
