"""The always-on record on the Ultralytics models of today: YOLO11 (``yolo11n.yaml``) and YOLO26
(``yolo26n.yaml``, end-to-end head, ``optimizer=auto``) trained strict with no fingerprint option, tiny
(4 images, 64 px). Each run folder holds a compact log; ``diff`` names the first divergent step of two YOLO11
runs that differ in their seed, and says the YOLO26 runs trained identically while their validations ran
another head (``nms=False``: one-to-one), naming that cause with both values. With ``val=False`` the last step
of every epoch is still written in full; ``model.val()`` keeps its own log in its save_dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ultralytics")

from ultralytics import YOLO  # noqa: E402

from support.cli import cli  # noqa: E402
from yolo_det.record.log import read_log  # noqa: E402
from yolo_det.record.run_folder import LOG_NAME  # noqa: E402
from yolo_det.synthetic import make_dataset  # noqa: E402
from yolo_det.ultralytics import DeterministicTrainer  # noqa: E402

pytestmark = pytest.mark.slow  # trains real models

ARGS = dict(imgsz=64, workers=0, plots=False, amp=False, device="cpu", exist_ok=True, deterministic="strict",
            close_mosaic=0, warmup_epochs=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """YOLO11 twice (seeds 0 and 1, 2 epochs of 2 steps, val=False) and YOLO26 twice (nms default and False)."""
    root = tmp_path_factory.mktemp("models")
    data = make_dataset(root / "data", n_train=4, n_val=2, imgsz=64)
    folders = {}
    for name, model, extra in (("v11a", "yolo11n.yaml", dict(seed=0)), ("v11b", "yolo11n.yaml", dict(seed=1)),
                               ("v26a", "yolo26n.yaml", dict()), ("v26b", "yolo26n.yaml", dict(nms=False))):
        shape = dict(epochs=2, batch=2, nbs=2, val=False) if model == "yolo11n.yaml" else dict(epochs=1, batch=4, nbs=4)
        YOLO(model).train(trainer=DeterministicTrainer, data=str(data), project=str(root), name=name,
                          **{"seed": 0, **ARGS, **shape, **extra})
        folders[name] = root / name
    return folders, data


def test_each_model_carries_a_compact_log_and_what_auto_picked(runs):
    folders, _ = runs
    for name, folder in folders.items():
        log = read_log(folder / LOG_NAME)
        assert log.header["record"] == "compact" and log.complete, name
    facts = json.loads((folders["v26a"] / "determinism.json").read_text())["run_facts"]
    optimizer = facts["optimizer"]
    assert optimizer["requested"] == "auto" and optimizer["iterations"] <= 10_000
    assert optimizer["class"].endswith(".AdamW")  # auto's pick below 10000 iterations (MuSGD above)
    assert facts["memory_format"] == "contiguous"  # channels_last is CUDA-only in 8.4


def test_val_false_still_writes_every_epoch_end_in_full(runs):
    log = read_log(runs[0]["v11a"] / LOG_NAME)
    assert len(log.steps) == 4 and [s.step for s in log.steps if not s.compact] == [1, 2, 4]
    assert [v.epoch for v in log.validations] == [1]  # the final epoch validates anyway


def test_diff_of_two_yolo11_runs_names_the_first_divergent_step(runs):
    folders, _ = runs
    proc = cli("diff", folders["v11a"], folders["v11b"], "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = json.loads(proc.stdout)["steps"]["first_divergence"]
    assert (first["step"], first["kind"]) == (1, "data")  # the seed orders and augments the batches
    assert "fingerprint logs: diverged at step 1: kind data" in cli("diff", folders["v11a"], folders["v11b"]).stdout


def test_yolo26_runs_train_identically_and_the_validation_head_is_named(runs):
    folders, _ = runs
    heads = [json.loads((folders[n] / "determinism.json").read_text())["run_facts"]["validation_head"]
             for n in ("v26a", "v26b")]
    assert heads[0] == {"nms": None, "end2end": False, "one2one_head": True}
    assert heads[1] == {"nms": False, "end2end": True, "one2one_head": True}
    result = json.loads(cli("diff", folders["v26a"], folders["v26b"], "--json").stdout)
    steps = result["steps"]
    assert not any(steps["differing_per_step"]) and steps["first_divergence"]["kind"] == "val"  # training agreed
    (head,) = [c for c in result["causes"] if c["what"] == "validation_head"]
    assert "nms=None: one-to-many head + NMS in A, nms=False: one-to-one head, no NMS in B" in head["message"]


def test_model_val_keeps_its_own_log_in_its_save_dir(runs, tmp_path, monkeypatch, restore_environ):
    from yolo_det.integrations.ultralytics.trainer import disable, enable
    from yolo_det.session import current

    folders, data = runs
    monkeypatch.delenv("YOLO_DET_FINGERPRINT", raising=False)
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "strict")
    enable()
    try:
        YOLO(str(folders["v26a"] / "weights" / "last.pt")).val(data=str(data), project=str(tmp_path), name="v",
                                                               imgsz=64, batch=2, device="cpu", workers=0,
                                                               plots=False, exist_ok=True)
    finally:
        disable()
        session = current()
        if session is not None:
            session.finish(echo=lambda _m: None)
    log = read_log(tmp_path / "v" / LOG_NAME)
    (val,) = log.validations
    assert not log.steps and len(val.names) == 2 and val.settings["batch_size"] == 2
    report = json.loads((tmp_path / "v" / "determinism.json").read_text())
    assert report["fingerprint_log"] == str((tmp_path / "v" / LOG_NAME).resolve())


@pytest.mark.parametrize("record", ["compact", "off"])
def test_model_predict_keeps_its_own_log_unless_off(runs, tmp_path, monkeypatch, restore_environ, record):
    from yolo_det.integrations.ultralytics.trainer import disable, enable
    from yolo_det.session import current

    folders, data = runs
    monkeypatch.delenv("YOLO_DET_FINGERPRINT", raising=False)
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "warn")
    monkeypatch.setenv("YOLO_DET_FINGERPRINT_MODE", record)
    enable()
    try:
        YOLO(str(folders["v11a"] / "weights" / "last.pt")).predict(
            source=str(data.parent / "images" / "val"), project=str(tmp_path), name="p", imgsz=64, device="cpu",
            save=False, exist_ok=True, verbose=False)
    finally:
        disable()
        session = current()
        if session is not None:
            session.finish(echo=lambda _m: None)
    report = json.loads((tmp_path / "p" / "determinism.json").read_text())
    if record == "off":
        assert not (tmp_path / "p" / LOG_NAME).exists() and "fingerprint_log" not in report
        return
    (val,) = read_log(tmp_path / "p" / LOG_NAME).validations
    assert len(val.names) == len(val.files) == 2 and all(Path(f).is_file() for f in val.files)
