"""End to end on the PyPI yolov5 package (yolov5n, 64 px, CPU): the batches do not depend on
--workers, and a run stopped after epoch 1 and resumed with YOLOv5's own --resume is bit-identical
to an uninterrupted one (fingerprints, full-precision model and EMA, results.csv); with the
sidecar deleted (the negative control) warn diverges and says why, and strict refuses (exit 2, no
epoch trained), as it does for a last.pt one epoch ahead of its sidecar.

The runs are independent: the module's ``trained`` fixture starts the off verify and the workers=0 run in a
thread while the warn verify trains (every run its own process; docs/testing.md, "Tests that train"). The
workers=2 run is the session's ``yolov5_strict_verify`` (128 px, the same command but --workers)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from conftest import YOLOV5_TRAIN, run
from support.patch import same_tensors, state_dict
from support.verify import Background, outcome, reraise, script_env
from yolo_det.proof.compare import compare_logs
from yolo_det.record.log import read_log
from yolo_det.proof.resume_at import verify_resume

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes

TRAIN = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--batch-size", "8", "--noplots",
         "--device", "cpu"]


@pytest.fixture(scope="module")
def repo(patched_yolov5) -> Path:
    """The session's patched copy (its runs write under tmp_path only)."""
    return patched_yolov5


def _env(repo: Path, train_env: dict) -> dict:
    """The copy must be the imported ``yolov5`` (its train.py imports yolov5.utils.general by absolute name)."""
    env = script_env(train_env)
    env["PYTHONPATH"] = os.pathsep.join([str(repo.parent), env["PYTHONPATH"]])
    return env


def _cmd(data, project, name, epochs, workers):
    return [sys.executable, "train.py", "--data", data, *TRAIN, "--epochs", str(epochs), "--workers", str(workers),
            "--project", project, "--name", name]


def _workers_0(patched_yolov5, dataset, train_env, root: Path):
    """The command of yolov5_strict_verify's runs with --workers 0: (CompletedProcess, fingerprint log, run folder)."""
    train = list(YOLOV5_TRAIN)
    train[train.index("--workers") + 1] = "0"
    log = root / "w0.jsonl"
    cmd = [sys.executable, "train.py", "--data", dataset, "--epochs", "2", *train, "--project", root / "runs",
           "--name", "w0", "--deterministic", "strict"]
    proc = run(cmd, cwd=patched_yolov5, env={**script_env(train_env), "YOLO_DET_FINGERPRINT": str(log)})
    return proc, log, root / "runs" / "w0"


def test_workers_do_not_change_the_batches_or_the_weights(trained, yolov5_strict_verify):
    proc, log0, run0 = reraise(trained["workers0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    verify, root = yolov5_strict_verify
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    logs = {0: log0, 2: root / "w" / "run1" / "fingerprint.jsonl"}  # run 1 of the session's strict verify
    comparison = compare_logs(logs[0], logs[2])
    assert comparison.identical, "\n".join(comparison.describe())
    assert comparison.steps == 4 and read_log(logs[0]).steps[0].names["data"][:2] == ["batch0[0]", "batch0[1]"]
    a, b = run0 / "weights" / "last.pt", root / "runs" / "strict1" / "weights" / "last.pt"
    assert same_tensors(state_dict(a), state_dict(b))  # final weights (the EMA after YOLOv5's strip)
    streams = json.loads((a.parents[1] / "determinism.json").read_text())["yolov5"]["train_loader"]["streams"]
    assert streams["on"] is True and streams["shuffle"] is True and streams["samples"] == 16


LOST = "although this run saves resume state with every checkpoint"


def _training_output(run_dir: Path) -> dict:
    """What training writes (weights, sidecars, results, the run's records), by content; YOLOv5 itself rewrites
    opt.yaml/hyp.yaml and opens a TensorBoard file before yolo-det is called."""
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in ("opt.yaml", "hyp.yaml") and not p.name.startswith("events.out.")}


def _strict_resumes_are_refused(checkpoint: Path, repo: Path, env: dict) -> None:
    """Run 3 stopped after epoch 1 (warn): strict refuses to --resume it with last.pt one epoch ahead of its
    sidecar (killed between the two), then with the sidecar gone (killed after last.pt, before its sidecar):
    exit 2, a true reason, what to do; no epoch trained and the run's own records left as they were."""
    run_dir = checkpoint.parents[1]
    env = {**env, "YOLO_DET_DETERMINISTIC": "strict"}
    cmd = [sys.executable, "train.py", "--resume", str(checkpoint)]
    before = _training_output(run_dir)
    original = checkpoint.read_bytes()
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    ckpt["epoch"] += 1
    torch.save(ckpt, checkpoint)
    proc = run(cmd, cwd=repo, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("yolo-det: error: strict mode cannot resume exactly: last.pt.yolo-det does not match last.pt: the resume "
            "state was saved after epoch 1, the checkpoint resumes after epoch 2. Nothing was trained.") in proc.stderr
    assert "YOLO_DET_DETERMINISTIC=warn" in proc.stderr and "restore last.pt.yolo-det" in proc.stderr
    checkpoint.write_bytes(original)
    assert _training_output(run_dir) == before

    checkpoint.with_name(checkpoint.name + ".yolo-det").unlink()
    before = _training_output(run_dir)
    proc = run(cmd, cwd=repo, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert f"yolo-det: error: strict mode cannot resume exactly: last.pt.yolo-det is missing beside {checkpoint}" in err
    assert LOST in err and "determinism.json says it trained under yolo-det, determinism warn" in err
    assert "started before yolo-det" not in err and "Nothing was trained" in err and "YOLO_DET_RESUME=inexact" in err
    assert _training_output(run_dir) == before


@pytest.fixture(scope="module")
def trained(repo, dataset, train_env, tmp_path_factory) -> dict:
    """The warn verify (3 runs, run 3's sidecar deleted after the strict refusals), the off verify and the
    workers=0 run; the last two in a thread alongside the first. Each entry: its result or the exception it raised."""
    root = tmp_path_factory.mktemp("resume-v5")
    off_env = {**_env(repo, train_env), "YOLO_DET_DETERMINISTIC": "off"}
    background = Background(lambda: {
        "off": outcome(lambda: verify_resume(_cmd(dataset, root / "off" / "runs", "o{run}", 2, 2), 1, runs=2,
                                             workdir=root / "off" / "w", cwd=repo, env=off_env)),
        "workers0": outcome(lambda: _workers_0(repo, dataset, train_env, root / "workers"))})
    deleted = []

    def delete_sidecar_of_run_3(checkpoint: Path) -> None:
        if checkpoint.parts[-3] == "v3":
            _strict_resumes_are_refused(checkpoint, repo, _env(repo, train_env))  # deletes the sidecar
            deleted.append(checkpoint)

    # batch 4: 4 batches an epoch; YOLOv5's warm-up raises accumulate to 2 from batch 5 on, so the first
    # resumed batch must not step: last_opt_step has to come back from the interrupted run
    cmd = _cmd(dataset, root / "warn" / "runs", "v{run}", 2, 2)
    cmd[cmd.index("--batch-size") + 1] = "4"
    warn = outcome(lambda: verify_resume(cmd, 1, runs=3, workdir=root / "warn" / "w", cwd=repo,
                                         env=_env(repo, train_env), before_resume=delete_sidecar_of_run_3))
    return {"warn": warn, "deleted": deleted, **background.result()}


def test_verify_resume_at_is_identical_and_the_negative_control_diverges(trained):
    result = reraise(trained["warn"])
    exact, control = result.resumed
    assert exact.comparison.identical, "\n".join(exact.comparison.describe())
    # the validations carry predictions (the copy's patched NMS ran): the resumed EMA's cached Detect grids
    # are the uninterrupted run's, not recomputed from anchors the EMA updates moved by rounding
    validations = read_log(exact.second.log).validations
    assert validations and all(v.names for v in validations) and exact.comparison.validations == 2
    assert exact.checkpoints is None and exact.results is None
    assert exact.first.steps == 4 and exact.second.steps == exact.comparison.steps - 4 < 4  # accumulating
    assert "yolo-det: resumed exactly after epoch 1" in exact.second.output.read_text()
    final = torch.load(str(exact.checkpoint) + ".yolo-det", weights_only=True)
    assert final["epoch"] == 1 and final["model"] and final["ema"]  # fp32 model and EMA of the last epoch

    assert trained["deleted"] and not control.comparison.identical
    first = control.comparison.first_divergence
    assert first is not None and first.step == control.first.steps + 1  # the first resumed step (fp16 weights)
    assert control.checkpoints and control.checkpoints.endswith("differs")  # final fp32 model/EMA
    out = control.second.output.read_text()
    assert "yolo-det: resume not exact: last.pt.yolo-det is missing" in out and LOST in out
    assert "it resumes as the release does" in out and "resumed exactly" not in out
    assert not result.identical


def test_off_resumes_as_the_release_does_and_verify_shows_it(trained):
    """Under off (here from $YOLO_DET_DETERMINISTIC) nothing is restored: verify --resume-at runs and names
    where the release's own --resume leaves the uninterrupted run (issue 23: it used to refuse, exit 2)."""
    result = reraise(trained["off"])
    (resumed,) = result.resumed
    assert not result.identical and resumed.comparison.first_divergence is not None
    assert resumed.comparison.first_divergence.step == resumed.first.steps + 1  # the first resumed step
    assert not list(resumed.checkpoint.parent.glob("*.yolo-det"))  # off writes no resume state
    assert "resumed exactly" not in resumed.second.output.read_text()
    assert resumed.checkpoints is None or "values differ" in resumed.checkpoints  # the release's checkpoints
    assert any("release's own resume" in note for note in result.notes)
