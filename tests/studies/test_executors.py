"""The local work queue of `yolo-det seeds` (issue 40): a free slot starts the next seed (a slow seed does
not hold the others back), slots of G GPUs or CPU slots, a failed seed recorded while the others go on, and
each seed's record of where it ran. The runs are a tiny script under yolo-det (no training)."""

from __future__ import annotations

import json
import threading
import sys

import pytest

from support.cli import cli
from yolo_det.core.seeding import trial_seeds
from yolo_det.studies.progress import Board, eta_seconds, seed_epoch
from yolo_det.studies.executors import SlotError, local_slots
from yolo_det.proof.verify import VerifyError
from yolo_det.studies.study import run_study
from support.cluster import CLUSTER

pytestmark = CLUSTER  # Ray studies
PYTHON = sys.executable
SEEDS = trial_seeds(0, 4)

# run 1 is the slow seed: it ends only once run 4 has ended, which a queue with a batch barrier
# (runs 1+2, then 3+4) can never reach; FAIL_RUN makes one run exit 1 (before it imports torch: it costs little)
QUEUE_SCRIPT = r'''
import os, sys, time
from pathlib import Path

markers, run = Path(sys.argv[1]), os.environ["YOLO_DET_VERIFY_RUN"]
(markers / f"{run}.start").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "none"))
if run == os.environ.get("FAIL_RUN"):
    sys.exit(1)
import torch
import yolo_det
from yolo_det.proof import fingerprint

if run == "1" and not os.environ.get("NO_WAIT"):
    deadline = time.monotonic() + 600
    while not (markers / "4.end").exists():
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.05)
seed = int(os.environ["YOLO_DET_TRAIN_SEED"])
session = yolo_det.configure("strict", seed=seed)
model = torch.nn.Linear(2, 1)
session.track(model)
with session.backward():
    model(torch.ones(1, 2)).sum().backward()
fingerprint.record_validation(0, {"fitness": seed % 1000 / 1000}, best=True)
session.finish(markers / f"run{run}")
(markers / f"{run}.end").write_text("")
'''


def _script(folder):
    path = folder / "tiny.py"
    path.write_text(QUEUE_SCRIPT)
    (folder / "markers").mkdir()
    return path


@pytest.fixture
def script(tmp_path):
    return _script(tmp_path)


@pytest.fixture(scope="module")
def slow_seed_study(tmp_path_factory, train_env):
    """A 4-seed study on 2 CPU slots whose run 1 ends only after run 4: (the study, its folder's parent).
    The slow-seed test reads it; the Ray test compares its first two runs with Ray's."""
    root = tmp_path_factory.mktemp("queue")
    script = _script(root)
    study = run_study([PYTHON, str(script), str(root / "markers")], n=4, workdir=root / "study",
                      env=train_env, parallel=2, gpus_per_seed=0, cwd=root)
    return study, root


@pytest.mark.slow  # runs a study's processes
def test_a_slow_seed_does_not_hold_the_other_slot(slow_seed_study):
    study, tmp_path = slow_seed_study
    assert [r.seed for r in study.runs] == SEEDS  # run 1 waited for run 4: the other slot ran 2, 3 and 4
    assert [r.metrics["fitness"] for r in study.runs] == [s % 1000 / 1000 for s in SEEDS]
    assert all((tmp_path / "markers" / f"{i}.start").read_text() == "" for i in (1, 2, 3, 4))  # CPU slots
    saved = json.loads((tmp_path / "study" / "study.json").read_text())
    where = [r["placement"] for r in saved["runs"]]
    assert all(p["executor"] == "local" and p["host"] and p["devices"] == "cpu" for p in where)
    assert where[0]["seconds"] > max(p["seconds"] for p in where[1:])  # the slow seed, alone in its slot


@pytest.mark.slow  # runs a study's processes
def test_a_failed_seed_is_recorded_and_the_others_finish(tmp_path, script, train_env):
    env = {**train_env, "FAIL_RUN": "2"}
    board = Board(4, enabled=False)
    with pytest.raises(VerifyError):
        run_study([PYTHON, str(script), str(tmp_path / "markers")], n=4, workdir=tmp_path / "study", env=env,
                  parallel=2, gpus_per_seed=0, cwd=tmp_path, events=board.event)
    assert board.counts() == {"done": 3, "running": 0, "failed": 1, "queued": 0}
    saved = json.loads((tmp_path / "study" / "study.json").read_text())
    assert [r["run"] for r in saved["runs"]] == [1, 3, 4] and [f["run"] for f in saved["failed"]] == [2]
    status = cli("seeds", "--status", "--workdir", tmp_path / "study", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == {"done": 3, "failed": 1, "missing": 0, "total": 4}
    text = cli("seeds", "--status", "--workdir", tmp_path / "study").stdout
    assert "3/4 seeds done, 1 failed" in text and "run 2 seed" in text and "failed: run 2 failed with exit code 1" in text
    # the same command again runs the failed seed only, and never a finished one
    for i in (1, 3, 4):
        (tmp_path / "markers" / f"{i}.start").unlink()
    (tmp_path / "markers" / "4.end").write_text("")  # run 1 is not run again, nothing waits on it
    study = run_study([PYTHON, str(script), str(tmp_path / "markers")], n=4, workdir=tmp_path / "study",
                      env=train_env, parallel=2, gpus_per_seed=0, cwd=tmp_path)
    assert study.complete and [r.seed for r in study.runs] == SEEDS
    assert sorted(p.name for p in (tmp_path / "markers").glob("*.start")) == ["2.start"]


def test_slots_of_g_gpus_and_cpu_slots():
    assert local_slots(2, 2, gpus=["0", "1", "2", "3"]) == [{"CUDA_VISIBLE_DEVICES": "0,1"},
                                                          {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert local_slots(3, gpus=["4", "6", "7"]) == [{"CUDA_VISIBLE_DEVICES": d} for d in "467"]
    assert local_slots(2, 0, gpus=[]) == [{"CUDA_VISIBLE_DEVICES": ""}] * 2
    assert local_slots(1, gpus=[]) == [{}]
    with pytest.raises(SlotError, match="needs 6 visible GPUs, 4 are visible"):
        local_slots(3, 2, gpus=["0", "1", "2", "3"])
    with pytest.raises(SlotError, match="--gpus-per-seed 0"):
        local_slots(2, gpus=[])


@pytest.mark.slow  # runs a study's processes
def test_ray_runs_the_same_study_on_a_local_cluster(tmp_path, script, train_env, slow_seed_study):
    """Each seed a Ray task on a local Ray cluster (2 CPUs): the same seeds and metrics as the local queue (the
    slow-seed study's first two runs: the same command and seeds), and each run records that Ray ran it and on
    which node."""
    pytest.importorskip("ray")
    env = {**train_env, "NO_WAIT": "1"}
    cmd = [PYTHON, str(script), str(tmp_path / "markers")]
    local = slow_seed_study[0].runs[:2]
    ray = run_study(cmd, n=2, workdir=tmp_path / "ray", env=env, cwd=tmp_path, executor="ray", parallel=2)
    assert [r.seed for r in ray.runs] == [r.seed for r in local] == SEEDS[:2]
    assert [r.metrics for r in ray.runs] == [r.metrics for r in local]
    assert [r.seeds for r in ray.runs] == [r.seeds for r in local]
    saved = json.loads((tmp_path / "ray" / "study.json").read_text())
    assert all(r["placement"]["executor"] == "ray" and r["placement"]["node"] for r in saved["runs"])


def test_eta_adds_each_running_seeds_remaining_epochs_and_the_queued_seeds_over_the_slots():
    # two running seeds: 2 of 10 epochs in 60 s (30 s/epoch, 240 s left), 5 of 10 in 50 s (50 s left)
    running = {1: (60.0, (2, 10)), 2: (50.0, (5, 10))}
    assert eta_seconds(running, queued=0, seed_seconds=None, slots=2) == pytest.approx(240.0)
    # 4 queued seeds over 2 slots, each the length of the finished seeds' mean (200 s): 400 s after the running end
    assert eta_seconds(running, queued=4, seed_seconds=200.0, slots=2) == pytest.approx(640.0)
    # nothing finished yet: a queued seed is estimated from the running ones (300 s and 100 s a seed: 200 s)
    assert eta_seconds(running, queued=2, seed_seconds=None, slots=2) == pytest.approx(240.0 + 200.0)
    # before any checkpoint and with no seed finished nothing allows an estimate
    assert eta_seconds({1: (5.0, None)}, queued=1, seed_seconds=None, slots=1) is None
    assert eta_seconds({1: (5.0, None)}, queued=0, seed_seconds=30.0, slots=1) == pytest.approx(25.0)


def test_the_board_shows_each_running_seeds_epoch_from_its_run_info(tmp_path):
    board = Board(3, enabled=False, folder=tmp_path, slots=2)
    board.event("start", 1, 111)
    board.event("start", 2, 222)
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "run-info.json").write_text(json.dumps({"epochs_done": 2, "epochs": 5, "checkpoint": "x"}))
    assert seed_epoch(tmp_path, 1) == (2, 5) and seed_epoch(tmp_path, 2) is None
    line = board.status_line()
    assert line.startswith("running 2 (seed 111 epoch 2/5, seed 222), queued 1, failed 0")
    assert "ETA" in line  # seed 111's pace gives one
    board.event("done", 1, 111)
    assert board.counts() == {"done": 1, "running": 1, "failed": 0, "queued": 1}
    board.close()


# records its GPUs and start/end; with BARRIER_N it waits until that many runs (of any study) have started
SHARE_SCRIPT = r'''
import os, sys, time
from pathlib import Path
import torch
import yolo_det
from yolo_det.record import fingerprint

markers, tag = Path(sys.argv[1]), sys.argv[2] + os.environ["YOLO_DET_VERIFY_RUN"]
(markers / f"{tag}.start").write_text(f"{os.environ['CUDA_VISIBLE_DEVICES']} {time.time()!r}")
deadline = time.monotonic() + 60
while len(list(markers.glob("*.start"))) < int(os.environ.get("BARRIER_N", "0")):
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.05)
seed = int(os.environ["YOLO_DET_TRAIN_SEED"])
session = yolo_det.configure("strict", seed=seed)
fingerprint.record_validation(0, {"fitness": seed % 1000 / 1000}, best=True)
session.finish(markers / tag)
(markers / f"{tag}.end").write_text(repr(time.time()))
'''


def _intervals(markers):
    """Each run's GPUs and (start, end) from its markers."""
    out = {}
    for start in markers.glob("*.start"):
        gpus, began = start.read_text().split()
        out[start.stem] = (gpus, float(began), float((markers / f"{start.stem}.end").read_text()))
    return out


@pytest.mark.slow  # runs a study's processes
def test_two_studies_in_one_allocation_share_its_gpus_and_never_one_gpu(tmp_path, train_env):
    script = tmp_path / "share.py"
    script.write_text(SHARE_SCRIPT)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**train_env, "CUDA_VISIBLE_DEVICES": "0,1,2,3", "YOLO_DET_GPU_LOCKS": str(tmp_path / "locks"),
           "BARRIER_N": "4"}  # all four seeds must run at once: the two studies cannot both take GPUs 0 and 1
    results, errors = {}, []

    def study(name):
        try:
            results[name] = run_study([PYTHON, str(script), str(markers), name], n=2, workdir=tmp_path / name,
                                      env=env, parallel=2, gpus_per_seed=1, cwd=tmp_path)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=study, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    runs = _intervals(markers)
    assert sorted(runs) == ["a1", "a2", "b1", "b2"]
    assert sorted(gpus for gpus, _, _ in runs.values()) == ["0", "1", "2", "3"]  # four seeds, four GPUs
    for name in ("a", "b"):
        assert [r.placement["devices"] for r in results[name].runs] == [runs[f"{name}{i}"][0] for i in (1, 2)]


@pytest.mark.slow  # runs a study's processes
def test_a_gpu_another_study_holds_is_left_to_it(tmp_path, train_env):
    import fcntl

    script = tmp_path / "share.py"
    script.write_text(SHARE_SCRIPT)
    markers = tmp_path / "markers"
    markers.mkdir()
    locks = tmp_path / "locks"
    locks.mkdir()
    env = {**train_env, "CUDA_VISIBLE_DEVICES": "0,1", "YOLO_DET_GPU_LOCKS": str(locks)}
    with open(locks / "gpu0.lock", "a+") as held:  # another study's seed trains on GPU 0 all along
        fcntl.flock(held, fcntl.LOCK_EX)
        study = run_study([PYTHON, str(script), str(markers), "s"], n=2, workdir=tmp_path / "s", env=env,
                          parallel=2, gpus_per_seed=1, cwd=tmp_path)  # two slots, both seeds wait for GPU 1
    runs = _intervals(markers)
    assert study.complete and {gpus for gpus, _, _ in runs.values()} == {"1"}
    spans = sorted((began, ended) for _, began, ended in runs.values())
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))  # one at a time on GPU 1
