"""End to end: two CPU runs of the patched PyPI yolov5 train.py under `yolo-det verify` are
bit-identical (exit 0), with images, targets, loss components, gradients, parameters, EMA and
RNG states fingerprinted at every optimizer step."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import run
from verify_util import script_env, yolo_det_cmd

from yolo_det.record.log import read_log

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes


def test_two_patched_yolov5_runs_are_identical(patched_yolov5, dataset, train_env, tmp_path):
    train = [sys.executable, "train.py", "--data", dataset, "--cfg", "yolov5n.yaml", "--weights", "",
             "--img", "128", "--epochs", "1", "--batch-size", "8", "--workers", "2", "--noplots",
             "--device", "cpu", "--project", tmp_path / "runs", "--name", "verify{run}"]
    proc = run(yolo_det_cmd("verify", "--runs", "2", "--workdir", tmp_path / "w", "--json", "--", *train),
               cwd=patched_yolov5, env=script_env(train_env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["first_divergence"] is None and result["steps"] == 2
    assert (tmp_path / "runs" / "verify1").is_dir() and (tmp_path / "runs" / "verify2").is_dir()  # {run}
    log = read_log(result["logs"][0])
    step = log.steps[0]
    assert step.names["data"][:3] == ["batch0[0]", "batch0[1]", "batch0[2]"]  # images, targets, paths
    assert step.names["loss"] == ["backward0", "items0"] and len(step.items[0]) == 3  # lbox, lobj, lcls
    grads = step.names["grad"]
    assert len(grads) > 100 and step.names["param"][:len(grads)] == grads  # parameters, then buffers
    assert step.names["ema"] == step.names["param"] and set(step.lr) >= {"group0.lr", "group2.lr"}
    assert log.complete and any(n.startswith("ema.") for n in log.final.names)
