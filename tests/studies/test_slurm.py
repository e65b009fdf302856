"""`yolo-det seeds --executor slurm` (issue 40) on a real one-node SLURM (scripts/slurm_local.sh): a study run as
one submitit job array gives the local study's per-run metrics; a seed whose job is signalled as SLURM does before
preemption or time-out (USR2) is requeued and resumes from its checkpoint to the uninterrupted seed's result;
a failing seed is reported and the others kept; running the study again runs the failed seed only. The runs are a tiny resumable training script under yolo-det
(3 epochs of a linear model: results.csv, a checkpoint with its RNG states and yolo-det's run info at each
epoch)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from support.cli import cli
from support.cluster import CLUSTER, needs_slurm
from yolo_det.studies.progress import Board
from yolo_det.studies.study import load_study, run_study
from yolo_det.studies import slurm

PYTHON = sys.executable
pytestmark = CLUSTER

# 3 epochs of SGD with momentum on random batches; after each epoch: its validation (fitness: the weights' sum,
# which any inexact resume changes), last.pt (weights, optimizer, RNG states) and the run info a requeued job
# resumes from. PAUSE_RUN=<run> waits after epoch 0's save (marker "paused<run>") until the job is signalled.
SCRIPT = r'''
import os, sys, time
if os.environ.get("FAIL_RUN") == os.environ["YOLO_DET_VERIFY_RUN"]:
    sys.exit("this seed fails (FAIL_RUN)")
from pathlib import Path
import torch
import yolo_det
from yolo_det.record import fingerprint
from yolo_det.integrations import resume as state

out, markers = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
last, run = out / "last.pt", os.environ["YOLO_DET_VERIFY_RUN"]
session = yolo_det.configure("strict", seed=int(os.environ["YOLO_DET_TRAIN_SEED"]))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
start = 0
if "--resume" in sys.argv:
    saved = torch.load(last, weights_only=False)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    state.set_rng_state(saved["rng"])
    start = saved["epoch"] + 1
session.track(model)
for epoch in range(start, 3):
    x = torch.randn(16, 4)
    with session.backward():
        (model(x) - x.sum(1, keepdim=True)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    fitness = float(model.weight.detach().double().sum())
    fingerprint.record_validation(epoch, {"fitness": fitness}, best=True)
    with open(out / "results.csv", "a") as table:  # as the releases do: a row per epoch, before the checkpoint
        table.write("epoch,weight_norm\n" if epoch == 0 else "")
        table.write(f"{epoch},{float(model.weight.detach().double().norm())!r}\n")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": state.rng_state(),
                "epoch": epoch}, out / "last.pt.tmp")
    os.replace(out / "last.pt.tmp", last)
    state.write_run_info(checkpoint=last.resolve(), epochs_done=epoch + 1,
                         resume_command=[sys.executable, os.path.abspath(__file__), str(out), str(markers), "--resume"])
    if epoch == 0 and os.environ.get("PAUSE_RUN") == run and "--resume" not in sys.argv:
        (markers / f"paused{run}").write_text(os.environ.get("SLURM_JOB_ID", ""))
        time.sleep(600)
session.finish(out)
'''


def _wait(predicate, what: str, seconds: float = 240):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _squeue(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job.split("_")[0], "-o", "%i %T"], capture_output=True,
                         text=True, timeout=30).stdout
    return next((line.split()[1] for line in out.splitlines() if line.split()[0] == job), "")


def _task_folders(study) -> list:
    """The folders of the jobs that ran (``<array>_<task>``, or ``<job>`` for a single seed), with their logs."""
    return sorted(p.name for p in (study / "slurm").iterdir() if p.is_dir() and list(p.glob("*_log.out")))


@pytest.fixture(scope="module")
def studies(tmp_path_factory, train_env):
    """The same 2-seed study locally and through SLURM (2 array tasks at once); SLURM's run 2 is signalled with
    USR2 after its first checkpoint, requeued and resumed. Then the SLURM study's command again."""
    root = tmp_path_factory.mktemp("slurm")
    script = root / "tiny.py"
    script.write_text(SCRIPT)
    (root / "markers").mkdir()
    cmd = [PYTHON, str(script), str(root / "out{run}"), str(root / "markers")]
    local = run_study(cmd, n=2, workdir=root / "local", env=train_env, cwd=root, parallel=2, gpus_per_seed=0)
    cmd = [PYTHON, str(script), str(root / "slurm-out{run}"), str(root / "markers")]
    params = slurm.parameters(2, None, time_min=10, config={"signal_delay_s": 30})
    outcome: dict = {}
    board = Board(3, enabled=False)

    def study() -> None:
        try:
            outcome["study"] = run_study(cmd, n=3, workdir=root / "slurm", cwd=root, executor="slurm", slurm=params,
                                         env={**train_env, "PAUSE_RUN": "2", "FAIL_RUN": "3"}, events=board.event)
        except BaseException as exc:  # noqa: BLE001 - seed 3 fails; anything else is re-raised by the test
            outcome["error"] = exc

    driver = threading.Thread(target=study, daemon=True)
    driver.start()
    paused = root / "markers" / "paused2"
    _wait(lambda: paused.exists() or "error" in outcome, "run 2 to pause after its first checkpoint")
    if "error" in outcome:
        raise outcome["error"]
    job = next(p.name for p in (root / "slurm" / "slurm").iterdir() if p.name.endswith("_1"))
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)  # what SLURM sends before the end
    _wait(lambda: _squeue(job) == "PENDING", "the job to be requeued")
    # SLURM holds a requeued job back (BeginTime now + ~2 min); let it start now, but not within the second its
    # old credential was revoked: slurmd refuses a credential issued then ("Job credential revoked") and the job
    # ends without running (seen once, 0.7 s after the requeue)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True, timeout=30)
    driver.join(timeout=300)
    assert not driver.is_alive(), "the SLURM study did not finish"
    if not isinstance(outcome.get("error"), slurm.SeedFailed):
        raise outcome.get("error") or AssertionError("the failing seed was not reported")
    first = load_study(root / "slurm")
    tasks = _task_folders(root / "slurm")
    status = cli("seeds", "--status", "--workdir", root / "slurm")
    again = run_study(cmd, n=3, workdir=root / "slurm", env=train_env, cwd=root, executor="slurm", slurm=params)
    return {"root": root, "local": local, "slurm": first, "again": again, "job": job, "error": outcome["error"],
            "tasks": tasks, "status": status, "board": board.counts()}


@pytest.mark.slow
@needs_slurm
def test_slurm_study_equals_the_local_study(studies):
    local, cluster = studies["local"], studies["slurm"]
    assert [r.index for r in cluster.runs] == [1, 2] and [r.seed for r in cluster.runs] == [r.seed for r in local.runs]
    assert [r.seeds for r in cluster.runs] == [r.seeds for r in local.runs]
    assert [r.metrics for r in cluster.runs] == [r.metrics for r in local.runs]
    assert [r.best_epoch for r in cluster.runs] == [r.best_epoch for r in local.runs] == [2, 2]
    saved = json.loads((studies["root"] / "slurm" / "study.json").read_text())
    where = [r["placement"] for r in saved["runs"]]
    assert all(p["executor"] == "slurm" and p["host"] and p["job"] and p["node"] for p in where)
    # one array, a folder and logs per task under the study folder
    tasks = studies["tasks"]
    assert len(tasks) == 3 and len({t.split("_")[0] for t in tasks}) == 1
    assert all(list((studies["root"] / "slurm" / "slurm" / t).glob("*_log.out")) for t in tasks)


@pytest.mark.slow
@needs_slurm
def test_a_signalled_job_is_requeued_and_its_seed_resumes_exactly(studies):
    cluster = studies["slurm"]
    first, second = [r.placement for r in cluster.runs]
    assert first["preemptions"] == 0 and "resumed" not in first
    assert second["preemptions"] == 1 and second["job"] == studies["job"]
    assert [(r["attempt"], r["epochs_done"]) for r in second["resumed"]] == [(1, 1)]
    # the resumed seed's final weights (its fitness, every epoch's) are the uninterrupted local seed's; its best
    # epoch's row of results.csv is found by epoch (the interrupted attempt's log lacks the validation it was in)
    assert cluster.runs[1].metrics == studies["local"].runs[1].metrics
    assert cluster.runs[1].best == studies["local"].runs[1].best and "weight_norm" in cluster.runs[1].best


@pytest.mark.slow
@needs_slurm
def test_a_failed_seed_is_reported_and_the_others_kept(studies):
    assert "this seed fails (FAIL_RUN)" in str(studies["error"]) or "exit code 1" in str(studies["error"])
    failed = studies["slurm"].failed
    assert [f["run"] for f in failed] == [3] and "SLURM job" in failed[0]["error"]
    assert studies["board"] == {"done": 2, "running": 0, "failed": 1, "queued": 0}
    status = studies["status"]
    assert "2/3 seeds done, 1 failed" in status.stdout and "requeued 1 time(s)" in status.stdout


@pytest.mark.slow
@needs_slurm
def test_running_the_study_again_runs_the_failed_seed_only(studies):
    again = studies["again"]
    assert again.complete and [r.metrics for r in again.runs[:2]] == [r.metrics for r in studies["slurm"].runs]
    new = sorted(set(_task_folders(studies["root"] / "slurm")) - set(studies["tasks"]))
    assert len(new) == 1  # one new job: seed 3
    assert again.runs[2].placement["job"] == new[0] and again.runs[2].placement["preemptions"] == 0


def test_slurm_options_and_config_file(tmp_path, monkeypatch):
    """The options override the config file; SLURM options without --executor slurm, a bad file and a bad
    time are refused with exit 2 before anything runs."""
    config = tmp_path / "slurm.yaml"
    config.write_text("slurm_partition: cpu\nmem: 8G\ntime: 30\nmax_num_timeout: 4\n")
    params = slurm.parameters(3, 2, partition="gpu", config=slurm.load_config(config))
    assert params["partition"] == "gpu" and params["mem"] == "8G" and params["time"] == 30
    assert params["array_parallelism"] == 3 and params["gpus_per_node"] == 2 and params["max_num_timeout"] == 4
    assert slurm.parameters(1, 0, time_min=5)["time"] == 5 and "gpus_per_node" not in slurm.parameters(1, 0)
    base = ["seeds", "--n", "2", "--workdir", tmp_path / "study"]
    cmd = ["--", PYTHON, "-c", "pass", "{run}"]
    wrong = cli(*base, "--slurm-time", "5", *cmd)
    assert wrong.returncode == 2 and "need --executor slurm" in wrong.stderr
    config.write_text("- a list\n")
    bad = cli(*base, "--executor", "slurm", "--slurm-config", config, *cmd)
    assert bad.returncode == 2 and "must hold a mapping" in bad.stderr
    short = cli(*base, "--executor", "slurm", "--slurm-time", "0", *cmd)
    assert short.returncode == 2 and "at least 1 minute" in short.stderr
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sinfo: not a SLURM node
    nowhere = cli(*base, "--executor", "slurm", *cmd)
    assert nowhere.returncode == 2 and "SLURM does not answer here" in nowhere.stderr
    assert "scripts/slurm_local.sh" in nowhere.stderr
    assert not (tmp_path / "study").exists()


@needs_slurm
def test_a_later_driver_adopts_the_jobs_slurm_still_runs(tmp_path):
    """A job an earlier driver submitted (named in DIR/slurm/jobs.json) that SLURM still queues or runs is waited
    for, not submitted again; a job of another seed, or one that has ended, is not adopted."""
    job = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60"], capture_output=True,
                         text=True, check=True, timeout=30).stdout.strip().split(";")[0]
    try:
        record = tmp_path / "slurm" / slurm.JOBS_NAME
        record.parent.mkdir()
        record.write_text(json.dumps({job: [2, 22], "999999": [1, 11]}))
        items = [(1, 11, {}), (2, 22, {}), (3, 33, {})]
        adopted = slurm._adopt(items, record, tmp_path / "slurm" / "%j")
        assert list(adopted) == [job] and adopted[job][1] == (2, 22, {})
        assert slurm._adopt([(2, 23, {})], record, tmp_path / "slurm" / "%j") == {}  # another seed in run 2
    finally:
        subprocess.run(["scancel", job], timeout=30)
