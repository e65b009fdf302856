"""End to end: two CPU runs of the patched PyPI yolov5 train.py under `yolo-det verify` are
bit-identical (exit 0), with images, targets, loss components, gradients, parameters, EMA and
RNG states fingerprinted at every optimizer step."""

from __future__ import annotations

import json

import pytest

from yolo_det.record.log import read_log

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes


def test_two_patched_yolov5_runs_are_identical(yolov5_strict_verify):
    proc, root = yolov5_strict_verify  # the session's strict verify, shared with test_yolov5_e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["first_divergence"] is None and result["steps"] == 4
    assert (root / "runs" / "strict1").is_dir() and (root / "runs" / "strict2").is_dir()  # {run}
    log = read_log(result["logs"][0])
    step = log.steps[0]
    assert step.names["data"][:3] == ["batch0[0]", "batch0[1]", "batch0[2]"]  # images, targets, paths
    assert step.names["loss"] == ["backward0", "items0"] and len(step.items[0]) == 3  # lbox, lobj, lcls
    grads = step.names["grad"]
    assert len(grads) > 100 and step.names["param"][:len(grads)] == grads  # parameters, then buffers
    assert step.names["ema"] == step.names["param"] and set(step.lr) >= {"group0.lr", "group2.lr"}
    assert log.complete and any(n.startswith("ema.") for n in log.final.names)
