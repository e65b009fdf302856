"""A kill at any instant of a checkpoint save keeps exact resume (issue 40), YOLOv5 and Ultralytics.

``$YOLO_DET_KILL_AT=point:epoch`` SIGKILLs the training process at a point of that epoch's save:
``before`` (the checkpoint staged as ``last.pt.partial``, no sidecar written yet), ``between`` (the
sidecar in place, the checkpoint not yet renamed) or ``after`` (both in place). One chain of kills and
strict resumes per release (after the first epoch's save, then before and between the later one's)
must end with the same full-precision model, EMA and RNG states as one uninterrupted strict run; a run
killed before or between its first save is refused (exit 2, nothing trained), never trained inexactly.
YOLOv5's uninterrupted run is the session's ``yolov5_strict_verify`` (same command). The first-save kills need
no reference: they train one 32 px epoch of 4 images, the two kills (then the two refused resumes) started
together as single-threaded processes (docs/testing.md, "Tests that train").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from support.trees import with_package_copy
from support.cli import cli
from conftest import YOLOV5_TRAIN, run
from support.verify import script_env
from yolo_det.integrations import resume as _resume
from yolo_det.synthetic import make_dataset

pytestmark = pytest.mark.slow  # trains real models and kills them

EPOCHS = 2
KILLED = -getattr(signal, "SIGKILL", signal.SIGTERM)
#: (kill point, the epoch the resume after it continues from); the last resume runs to the end. A kill
#: between the sidecar and the rename leaves last.pt of the epoch before: the resume pairs it with the
#: previous sidecar (and the next kill of that resumed run must find the pair again)
CHAIN = [("after:0", 1), ("before:1", 1), ("between:1", 1)]
FIRST = ("before:0", "between:0")


def _same_state(a: dict, b: dict) -> list:
    """What differs between two sidecars' full-precision model, EMA, optimizer and RNG states."""
    diffs = []
    for part in ("model", "ema", "optimizer"):
        x, y = a.get(part), b.get(part)
        if (x is None) != (y is None):
            diffs.append(part)
        elif x is not None and not _equal(x, y):
            diffs.append(part)
    if not torch.equal(a["rng"]["torch"], b["rng"]["torch"]) or a["epoch"] != b["epoch"]:
        diffs.append("rng/epoch")
    return diffs


def _equal(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and set(x) == set(y) and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y))
    return x == y


def _chain(start, resume, last: Path, env: dict, cwd: Path) -> dict:
    """Start a run killed at CHAIN's first point, resume it killed at each next point, then to the end."""
    procs = {"start": run(start, cwd=cwd, env={**env, _resume.KILL_ENV: CHAIN[0][0]})}
    points = [p for p, _ in CHAIN[1:]] + [None]
    for (killed_at, epoch), point in zip(CHAIN, points):
        extra = {_resume.KILL_ENV: point} if point else {}
        procs[killed_at] = (epoch, run(resume(last), cwd=cwd, env={**env, **extra}))
    return procs


def _together(jobs: list) -> list:
    """Run independent commands ``(cmd, cwd, env)`` at the same time; their CompletedProcesses in order."""
    started = []
    for cmd, cwd, env in jobs:
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # no pipe to fill while waiting
        started.append((subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=with_package_copy(env, cwd), stdout=out,
                                         stderr=err, text=True),
                        out, err))
    done = []
    for proc, out, err in started:
        proc.wait(timeout=600)
        out.seek(0), err.seek(0)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read()))
        out.close(), err.close()
    return done


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """4+4 images at 32 px: one step of one epoch, all a first-save kill needs."""
    return make_dataset(tmp_path_factory.mktemp("killsafe-data"), n_train=4, n_val=4, imgsz=32)


def _first_epoch_kills(start, resume, folder, env: dict, cwd: Path) -> dict:
    """Runs killed before / between the first save's sidecar and checkpoint (started together, one thread each),
    each followed by a strict resume (``resume(lasts)``: a CompletedProcess per checkpoint)."""
    env = {**env, "OMP_NUM_THREADS": "1"}
    killed = _together([(start(p.split(":")[0]), cwd, {**env, _resume.KILL_ENV: p}) for p in FIRST])
    lasts = [folder(point.split(":")[0]) / "weights" / "last.pt" for point in FIRST]
    files = [sorted(p.name for p in last.parent.iterdir()) if last.parent.is_dir() else [] for last in lasts]
    resumed = resume(lasts)
    return {point: (k, last, f, r) for point, k, last, f, r in zip(FIRST, killed, lasts, files, resumed)}


# -- YOLOv5 (the patched PyPI package) ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def yolov5_kills(tmp_path_factory, patched_yolov5, dataset, tiny_data, train_env, yolov5_strict_verify):
    root = tmp_path_factory.mktemp("killsafe-v5")
    env = script_env(train_env, YOLO_DET_DETERMINISTIC="strict")

    def start(name):  # the command of yolov5_strict_verify's runs
        return [sys.executable, "train.py", "--data", dataset, "--epochs", str(EPOCHS), *YOLOV5_TRAIN,
                "--project", root, "--name", name, "--deterministic", "strict"]

    def first(name):  # a first-save kill: one 32 px epoch of one step
        return [sys.executable, "train.py", "--data", tiny_data, "--epochs", "1", "--cfg", "yolov5n.yaml",
                "--weights", "", "--img", "32", "--workers", "0", "--batch-size", "4", "--noplots", "--device", "cpu",
                "--project", root, "--name", name, "--deterministic", "strict"]

    def resume(last):
        return [sys.executable, "train.py", "--resume", last]

    proc, verify_root = yolov5_strict_verify
    chain = _chain(start("chain"), resume, root / "chain" / "weights" / "last.pt", env, patched_yolov5)
    first = _first_epoch_kills(
        first, lambda lasts: _together([(resume(last), patched_yolov5, {**env, "OMP_NUM_THREADS": "1"})
                                        for last in lasts]),
        lambda name: root / name, env, patched_yolov5)
    return {"root": root, "ref": (proc, verify_root / "runs" / "strict1"), "chain": chain, "first": first}


def _check_chain(kills: dict, resumed_text: str) -> None:
    (ref, ref_dir), chain, root = kills["ref"], kills["chain"], kills["root"]
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    start = chain["start"]
    assert start.returncode == KILLED, start.stdout[-2000:] + start.stderr[-3000:]
    for i, (killed_at, (epoch, proc)) in enumerate(list(chain.items())[1:]):
        final = i == len(CHAIN) - 1
        assert proc.returncode == (0 if final else KILLED), f"after {killed_at}:\n" + proc.stderr[-3000:]
        assert resumed_text.format(epoch=epoch) in proc.stdout, f"after {killed_at}:\n" + proc.stdout[-3000:]
    a = torch.load(ref_dir / "weights" / "last.pt.yolo-det", weights_only=True)
    b = torch.load(root / "chain" / "weights" / "last.pt.yolo-det", weights_only=True)
    assert a["epoch"] == EPOCHS - 1 and not _same_state(a, b), _same_state(a, b)


def _check_first(kills: dict) -> None:
    for point, (killed, last, files, resumed) in kills["first"].items():
        assert killed.returncode == KILLED, killed.stderr[-3000:]
        assert "last.pt" not in files and "last.pt.partial" in files, (point, files)
        assert ("last.pt.yolo-det" in files) == (point.startswith("between")), (point, files)
        assert resumed.returncode == 2, resumed.stdout[-2000:] + resumed.stderr[-3000:]
        assert "Epoch" not in resumed.stdout + resumed.stderr
        assert f"yolo-det: error: {last} does not exist: last.pt.partial is a save that was interrupted" \
            in resumed.stderr and "nothing to resume; nothing was trained" in resumed.stderr
        assert sorted(p.name for p in last.parent.iterdir()) == files  # the refusal wrote nothing


def test_yolov5_killed_at_each_point_of_a_later_save_resumes_exactly(yolov5_kills):
    _check_chain(yolov5_kills, "yolo-det: resumed exactly after epoch {epoch}")


def test_yolov5_killed_in_the_first_save_is_refused(yolov5_kills):
    _check_first(yolov5_kills)


# -- Ultralytics (yolo-det's trainer) ----------------------------------------------------------------------
def _u_args(dataset, project, name, epochs=EPOCHS, imgsz=64) -> list:
    args = dict(model="yolov8n.yaml", data=str(dataset), epochs=epochs, imgsz=imgsz, batch=4, nbs=4, workers=0,
                plots=False, val=True, amp=False, device="cpu", project=str(project), name=name, exist_ok=True,
                seed=0, deterministic="strict")
    return [f"{k}={v}" for k, v in args.items()]


@pytest.fixture(scope="module")
def ultralytics_kills(tmp_path_factory, train_env, tiny_data):
    pytest.importorskip("ultralytics")
    root = tmp_path_factory.mktemp("killsafe-u")
    dataset = make_dataset(root / "data", n_train=8, n_val=4, imgsz=64)  # batch 4: two steps an epoch
    env = script_env(train_env)
    cmd = [sys.executable, "-m", "yolo_det", "ultralytics", "train"]

    def start(name):
        return [*cmd, *_u_args(dataset, root, name)]

    def first(name):  # a first-save kill: one 32 px epoch of one step
        return [*cmd, *_u_args(tiny_data, root, name, epochs=1, imgsz=32)]

    def resume(last):
        return [*cmd, f"model={last}", "resume=True", "deterministic=strict"]

    ref = run(start("ref"), cwd=root, env=env)
    chain = _chain(start("chain"), resume, root / "chain" / "weights" / "last.pt", env, root)
    first = _first_epoch_kills(first, lambda lasts: [cli(*resume(last)[3:], cwd=root, env=env) for last in lasts],
                               lambda name: root / name, env, root)  # the refused resumes in this process
    return {"root": root, "ref": (ref, root / "ref"), "chain": chain, "first": first}


def test_ultralytics_killed_at_each_point_of_a_later_save_resumes_exactly(ultralytics_kills):
    _check_chain(ultralytics_kills, "yolo-det: resumed exactly after epoch {epoch}")


def test_ultralytics_killed_in_the_first_save_is_refused(ultralytics_kills):
    _check_first(ultralytics_kills)


# -- the pair logic without training ------------------------------------------------------------------------
def test_the_sidecar_is_matched_to_the_checkpoint_by_digest(tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    last = weights / "last.pt"
    writer = _resume.Writer()
    for epoch in (0, 1):
        staged = _resume.staged_path(last)
        torch.save({"epoch": epoch}, staged)
        state = {"format": _resume.FORMAT, "version": _resume.VERSION, "epoch": epoch, "checkpoint": "last.pt"}
        writer.write(_resume.sidecar_path(last), state, background=False, staged=staged)
    assert not _resume.staged_path(last).exists()
    found = _resume.consistent_state(last)
    assert found["state"]["epoch"] == 1 and found["path"] == _resume.sidecar_path(last) and not found["problems"]
    assert not _resume.previous_path(last).exists()  # served only the instant of the swap
    # a kill between the sidecar of epoch 2 and its rename: last.pt of epoch 1 pairs with the previous sidecar
    previous = _resume.sidecar_path(last).read_bytes()
    os.replace(_resume.sidecar_path(last), _resume.previous_path(last))
    torch.save({"format": _resume.FORMAT, "version": _resume.VERSION, "epoch": 2,
                "checkpoint_sha256": "0" * 64}, _resume.sidecar_path(last))
    found = _resume.consistent_state(last)
    assert found["state"]["epoch"] == 1 and found["path"] == _resume.previous_path(last)
    _resume.adopt_previous(last, found["path"])
    assert _resume.sidecar_path(last).read_bytes() == previous
    # a checkpoint replaced after its save: no pair, and the reason says so
    torch.save({"epoch": 9}, last)
    found = _resume.consistent_state(last)
    assert "no resume state was written with this last.pt" in found["mismatch"]
