"""`yolo-det verify` and `yolo-det diff` end to end on a small CPU training script (2 DataLoader
workers, BatchNorm, an EMA): identical runs prove identical; nondeterminism injected at a known
step is named with its step and kind; failed runs and commands without yolo-det exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run
from support.verify import script_env, write_script, yolo_det_cmd
from support.cli import cli

from yolo_det.proof.compare import compare_logs
from yolo_det.record.log import read_log


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, train_env):
    """`yolo-det verify` of two clean runs, from a fresh directory with the default --workdir."""
    root = tmp_path_factory.mktemp("verify")
    script = write_script(root)
    proc = run(yolo_det_cmd("verify", "--json", "--", sys.executable, script), cwd=root, env=script_env(train_env))
    return root, script, proc


@pytest.mark.slow
def test_two_clean_runs_are_identical(baseline):
    root, _, proc = baseline
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["first_divergence"] is None
    assert result["steps"] == 6 and result["tensors"] > 6 * 30
    logs = [Path(p) for p in result["logs"]]
    assert logs == [root / "yolo-det-verify" / f"run{i}" / "fingerprint.jsonl" for i in (1, 2)]
    log = read_log(logs[0])
    assert set(log.steps[0].digests) == {"data", "loss", "grad", "param", "ema", "rng"}
    assert log.complete and log.header["command"][0].endswith("tiny_train.py")
    assert "run 1/2: done" in proc.stderr and "run 2/2: done" in proc.stderr  # progress


@pytest.mark.slow
def test_a_flipped_gradient_bit_is_named(baseline, tmp_path, train_env):
    _, script, _ = baseline
    env = script_env(train_env, INJECT="grad:3", INJECT_RUN="2")
    png = tmp_path / "plot.png"
    proc = run(yolo_det_cmd("verify", "--runs", "2", "--workdir", tmp_path / "w", "--plot", png, "--",
                            sys.executable, script), cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "diverged at step 3: kind grad, tensor 7.weight" in proc.stdout
    assert "losses around step 3" in proc.stdout and str(tmp_path / "w" / "run2" / "fingerprint.jsonl") in proc.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("inject, expected", [
    ("data:4", {"step": 4, "kind": "data", "tensor": "batch0[0]"}),  # unseeded noise in a worker
    ("param:2", {"step": 2, "kind": "param", "tensor": "0.weight"}),  # a bit flipped inside the step
])
@pytest.mark.slow
def test_injected_nondeterminism_is_found_at_its_step(baseline, tmp_path, train_env, inject, expected):
    root, script, _ = baseline
    log = tmp_path / "fp.jsonl"
    proc = run([sys.executable, script], cwd=tmp_path,
               env=script_env(train_env, INJECT=inject, YOLO_DET_FINGERPRINT=str(log)))
    assert proc.returncode == 0, proc.stderr
    reference = root / "yolo-det-verify" / "run1" / "fingerprint.jsonl"
    diff = cli("diff", "--json", reference, log, env=script_env(train_env))
    assert diff.returncode == 1, diff.stderr
    assert json.loads(diff.stdout)["first_divergence"] == expected
    assert compare_logs(reference, log).differing[:expected["step"] - 1] == [0] * (expected["step"] - 1)


def test_a_failing_run_exits_2_with_the_tail_of_its_output(tmp_path, train_env):
    cmd = [sys.executable, "-c", "import sys; print('loading data'); print('boom: no such file'); sys.exit(3)"]
    proc = run(yolo_det_cmd("verify", "--workdir", tmp_path, "--", *cmd), env=script_env(train_env))
    assert proc.returncode == 2
    assert "run 1 failed with exit code 3" in proc.stderr and "boom: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_command_without_yolo_det_exits_2(tmp_path, train_env):
    proc = run(yolo_det_cmd("verify", "--workdir", tmp_path, "--", sys.executable, "-c", "print('hi')"),
               env=script_env(train_env))
    assert proc.returncode == 2 and "wrote no fingerprint log" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["verify"], "no training command"),
    (["verify", "--runs", "1", "--", "true"], "at least 2"),
])
def test_usage_errors_exit_2(capsys, args, message):
    from yolo_det.cli import main

    assert main(args) == 2
    assert message in capsys.readouterr().err
