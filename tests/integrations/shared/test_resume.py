"""The resume sidecar: written atomically with a format version, loadable without pickle, checked
against the checkpoint, and what a resumed run does when it cannot be exact (missing, of another
epoch): strict refuses with exit 2 before anything is written, with a true reason (told from the run
folder: a run yolo-det trained lost its sidecar; a run trained under off or without yolo-det never had
one) and what to do; warn says "resume not exact" and why, and resumes."""

from __future__ import annotations

import argparse
import copy
import json
import random

import numpy as np
import pytest
import torch

from yolo_det import session as runtime
from yolo_det.integrations import resume
from yolo_det.integrations.yolov5 import script as v5


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))


def _sidecar(tmp_path, settings=None, epoch=0):
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    checkpoint = weights / "last.pt"
    checkpoint.write_bytes(b"checkpoint")
    model = _model()
    state = resume.capture(epoch=epoch, next_epoch=epoch + 1, model=model, ema=None,
                           settings=settings or {"mode": "warn", "mode_source": "default"}, checkpoint=checkpoint)
    resume.Writer().write(resume.sidecar_path(checkpoint), state, background=False)
    return checkpoint, model


def test_sidecar_round_trip_is_atomic_versioned_and_weights_only(tmp_path):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    checkpoint, model = _sidecar(tmp_path)
    path = resume.sidecar_path(checkpoint)
    assert path.name == "last.pt.yolo-det" and not list(path.parent.glob("*.tmp*"))
    assert resume.expects_sidecar(checkpoint)  # the marker: later resumes expect a sidecar
    state = torch.load(path, weights_only=True)  # no pickled objects: safe to load
    assert state["format"] == resume.FORMAT and state["version"] == resume.VERSION
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    resume.set_rng_state(resume.read(path)["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    state["version"] = 99
    torch.save(state, path)
    with pytest.raises(resume.ResumeStateError, match="version 99"):
        resume.read(path)


def test_an_optimizer_whose_warm_up_set_numpy_learning_rates_gives_a_weights_only_sidecar(tmp_path):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 3, 5, 5)).sum().backward()
    optimizer.step()
    for group in optimizer.param_groups:  # Ultralytics' warm-up: x["lr"] = np.interp(...)
        group["lr"] = np.interp(1, [0, 4], [0.0, 0.1])
        group["momentum"] = np.float64(0.85)
    path = tmp_path / "last.pt.yolo-det"
    resume.Writer().write(path, resume.capture(epoch=0, next_epoch=1, model=model, ema=None, optimizer=optimizer),
                          background=False)
    groups = resume.read(path)["optimizer"]["param_groups"]  # weights_only: plain numbers only
    assert [(g["lr"], g["momentum"]) for g in groups] == [(0.025, 0.85)]
    assert all(type(g["lr"]) is float for g in groups)


def test_learning_rates_set_after_the_save_reach_the_sidecar_at_the_epoch_end(tmp_path):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1 - 0.5 * e)
    path = tmp_path / "last.pt.yolo-det"
    writer = resume.Writer()
    writer.write(path, resume.capture(epoch=3, next_epoch=4, model=model, ema=None, optimizer=optimizer))
    assert not writer.settle_param_groups(path, optimizer, 3)  # nothing changed: no second write
    optimizer.step()
    scheduler.step()  # Ultralytics 8.0 steps its scheduler between the save and the epoch end
    assert not writer.settle_param_groups(path, optimizer, 2)  # another epoch's sidecar is left alone
    assert writer.settle_param_groups(path, optimizer, 3)
    assert writer.wait() is None and len(writer.written) == 2
    state = resume.read(path)
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.05 and state["epoch"] == 3
    assert state["model"].keys() == model.state_dict().keys()


def test_weights_are_checked_against_the_lossy_checkpoint(tmp_path):
    _, model = _sidecar(tmp_path)
    saved = resume.cpu_state(model)
    lossy = _model()
    lossy.load_state_dict({k: v.half().float() if v.is_floating_point() else v for k, v in saved.items()})
    assert resume.weight_mismatch(saved, lossy, "model") is None  # the checkpoint holds the rounded values
    with torch.no_grad():
        lossy[0].weight[0, 0, 0, 0] += 1
    assert "0.weight" in resume.weight_mismatch(saved, lossy, "model")
    resume.load_module(lossy, saved)
    assert all(torch.equal(lossy.state_dict()[k], v) for k, v in saved.items())


def _resume_opt(checkpoint, mode=None):
    return argparse.Namespace(resume=True, weights=str(checkpoint), deterministic=mode, save_dir=str(checkpoint.parents[1]))


def test_missing_sidecar_stops_strict_and_warn_says_resume_not_exact(tmp_path, capsys):
    checkpoint, _ = _sidecar(tmp_path)
    resume.sidecar_path(checkpoint).unlink()
    with pytest.raises(SystemExit) as stop:
        v5.start(_resume_opt(checkpoint, "strict"), {})
    assert stop.value.code == 2
    assert "strict mode cannot resume exactly: last.pt.yolo-det is missing" in capsys.readouterr().err
    v5.start(_resume_opt(checkpoint, "warn"), {})
    assert "yolo-det: resume not exact: last.pt.yolo-det is missing" in capsys.readouterr().out
    assert runtime.current().extra["resume"]["exact"] is False


# How the run folder tells why the sidecar is missing: (what to put there, words the reason must have).
LOST = "although this run saves resume state with every checkpoint"
RUN_FOLDERS = {
    "marker": ({"marker": True}, [LOST, "yolo-det-resume.txt says it trained under yolo-det"]),
    # the issue-36 case: killed after its first last.pt, before the sidecar (a yolo-det that marked the
    # folder only with the first sidecar); determinism.json says yolo-det trained it
    "record strict": ({"record": "strict"},
                      [LOST, "determinism.json says it trained under yolo-det, determinism strict"]),
    "record warn": ({"record": "warn"}, [LOST, "determinism warn"]),
    "record unreadable": ({"record": "{not json"}, [LOST, "it has a yolo-det determinism.json"]),
    "trained under off": ({"record": "off"},
                          ["its run trained under yolo-det with determinism off", "which saves none"]),
    "without yolo-det": ({}, ["nothing in", "shows that yolo-det trained it", "trained without yolo-det"]),
}


def _run_folder(tmp_path, marker=False, record=None):
    """A run folder whose last.pt has no sidecar; ``record``: determinism.json's mode (or raw text)."""
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "last.pt").write_bytes(b"checkpoint")
    if marker:
        (weights / resume.MARKER).write_text("yolo-det-resume 1: checkpoints here have a sidecar\n")  # an old marker
    if record is not None:
        text = record if record.startswith("{") else json.dumps({"mode": record, "mode_source": "cli"})
        (tmp_path / "determinism.json").write_text(text)
    return weights / "last.pt"


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(RUN_FOLDERS))
def test_a_resume_without_its_sidecar_is_refused_under_strict_and_warned_under_warn(tmp_path, capsys, case):
    setup, reason = RUN_FOLDERS[case]
    checkpoint = _run_folder(tmp_path, **setup)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as stop:
        v5.start(_resume_opt(checkpoint, "strict"), {})
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "yolo-det: error: strict mode cannot resume exactly: " in err and "Nothing was trained" in err
    assert all(words in err for words in reason), err
    assert "started before yolo-det" not in err
    assert "YOLO_DET_RESUME=inexact" in err and "earlier checkpoint that has its resume state" in err
    assert ("restore last.pt.yolo-det" in err) == (LOST in reason)  # restoring only what the run had
    v5._finish_at_exit()  # what the interpreter runs at exit: the refused resume leaves the folder as it was
    assert _snapshot(tmp_path) == before

    session = v5.start(_resume_opt(checkpoint, "warn"), {})
    out = capsys.readouterr().out
    assert "yolo-det: resume not exact: " in out and all(words in out for words in reason), out
    assert "it resumes as the release does" in out
    recorded = session.extra["resume"]
    assert recorded["exact"] is False and all(words in recorded["problems"][0] for words in reason)
    assert resume.expects_sidecar(checkpoint)  # warn trains on and writes sidecars from now on: the folder is marked
    v5.start(_resume_opt(checkpoint, "warn"), {})
    if LOST not in reason:  # from now on the folder expects its sidecar
        assert LOST in capsys.readouterr().out


def test_training_start_marks_the_run_before_its_first_checkpoint(tmp_path):
    """A run killed after its first last.pt and before that checkpoint's sidecar must read as a lost sidecar."""
    for mode, marked in (("strict", True), ("warn", True), ("off", False)):
        run = tmp_path / mode
        (run / "weights").mkdir(parents=True)
        v5.start(argparse.Namespace(save_dir=str(run), deterministic=mode), {})
        assert (run / "weights" / resume.MARKER).is_file() == marked
        assert resume.expects_sidecar(run / "weights" / "last.pt") == marked
    assert resume.marked_settings(tmp_path / "strict" / "weights" / "last.pt")["mode"] == "strict"
    evolve = tmp_path / "evolve"
    (evolve / "weights").mkdir(parents=True)
    v5.start(argparse.Namespace(save_dir=str(evolve), deterministic="strict", evolve=3), {})  # no checkpoints
    assert not (evolve / "weights" / resume.MARKER).exists()


def test_a_run_killed_before_its_first_sidecar_resumes_in_its_own_mode_and_is_refused(tmp_path, capsys, monkeypatch):
    """The mode the run started in (recorded by the marker) comes back without a sidecar: strict refuses."""
    run = tmp_path / "run"
    (run / "weights").mkdir(parents=True)
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "strict")
    v5.start(argparse.Namespace(save_dir=str(run)), {})
    (run / "weights" / "last.pt").write_bytes(b"epoch 1")  # killed here: no sidecar
    monkeypatch.delenv("YOLO_DET_DETERMINISTIC")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        v5.start(_resume_opt(run / "weights" / "last.pt"), {})  # --resume: opt.yaml has no mode
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert "keeps determinism strict (saved in weights/yolo-det-resume.txt" in captured.out
    assert "last.pt.yolo-det is missing beside" in captured.err and LOST in captured.err
    assert "YOLO_DET_DETERMINISTIC=warn" in captured.err  # the advice fits where the mode came from
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "warn")
    assert v5.start(_resume_opt(run / "weights" / "last.pt"), {}).settings.mode == "warn"


def test_the_refusal_names_an_earlier_checkpoint_that_has_its_resume_state(tmp_path, capsys):
    checkpoint, _ = _sidecar(tmp_path)
    best = checkpoint.with_name("best.pt")
    best.write_bytes(b"best")
    resume.sidecar_path(checkpoint).rename(resume.sidecar_path(best))
    with pytest.raises(SystemExit):
        v5.start(_resume_opt(checkpoint, "strict"), {})
    assert "earlier checkpoint that has its resume state (best.pt in " in capsys.readouterr().err


def test_resumed_run_keeps_the_saved_mode_unless_overridden(tmp_path, capsys, monkeypatch):
    checkpoint, _ = _sidecar(tmp_path, settings={"mode": "strict", "mode_source": "env"})
    monkeypatch.delenv("YOLO_DET_DETERMINISTIC", raising=False)
    session = v5.start(_resume_opt(checkpoint), {})
    assert (session.settings.mode, session.settings.source) == ("strict", "resume")
    out = capsys.readouterr().out
    assert "determinism strict (from the resumed run's saved settings)" in out and "keeps determinism strict" in out
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "warn")
    session = v5.start(_resume_opt(checkpoint), {})
    assert (session.settings.mode, session.settings.source) == ("warn", "env")


@pytest.mark.parametrize("saved_epoch", [0, 4])  # a sidecar older than last.pt (killed between the two), a newer one
def test_a_sidecar_of_another_epoch_is_refused_under_strict_and_warned_under_warn(tmp_path, capsys, saved_epoch):
    checkpoint, model = _sidecar(tmp_path, epoch=saved_epoch)
    reason = (f"last.pt.yolo-det does not match last.pt: the resume state was saved after epoch {saved_epoch + 1}, "
              "the checkpoint resumes after epoch 2")
    (tmp_path / "determinism.json").write_text(json.dumps({"mode": "strict"}))
    before = _snapshot(tmp_path)
    v5.start(_resume_opt(checkpoint, "strict"), {})
    v5.track(_model())  # weights equal; but the checkpoint resumes after epoch 2
    with pytest.raises(SystemExit) as stop:
        v5.resume_point(2)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"strict mode cannot resume exactly: {reason}. Nothing was trained." in err
    assert "restore last.pt.yolo-det or resume from an earlier checkpoint" in err
    v5._finish_at_exit()
    assert _snapshot(tmp_path) == before  # no determinism.json of the refused attempt

    v5.start(_resume_opt(checkpoint, "warn"), {})
    v5.track(_model())
    v5.resume_point(2)
    assert f"resume not exact: {reason}; it resumes as the release does" in capsys.readouterr().out


def test_gradient_accumulation_is_reported_as_inexact():
    """YOLOv5 and Ultralytics restart last_opt_step on resume: with accumulation the steps after it differ."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert not resume.pending_gradients(optimizer)
    model(torch.rand(1, 3, 5, 5)).sum().backward()
    assert resume.pending_gradients(optimizer)
    assert resume.accumulation_problem({"pending_gradients": True}) == resume.PENDING
    assert "3 optimizer steps for 6 batches" in resume.accumulation_problem(
        {"cadence": {"optimizer_steps": 3, "backward_passes": 6}})
    assert resume.accumulation_problem({"cadence": {"optimizer_steps": 6, "backward_passes": 6}}) is None


def _resume_result(identical: bool):
    from pathlib import Path

    from yolo_det.proof.compare import Comparison, Divergence
    from yolo_det.proof.resume_at import ResumedRun, ResumeResult
    from yolo_det.proof.verify import RunResult

    run = RunResult(1, 0, 1.0, Path("run1/fingerprint.jsonl"), Path("run1/output.log"), steps=6)
    part = RunResult(2, 0, 1.0, Path("run2/fingerprint.jsonl"), Path("run2/output.log"), steps=2)
    comparison = Comparison(identical=identical, steps=6, tensors=60, lengths=(6, 6),
                            first_divergence=None if identical else Divergence(3, "loss", "backward0", 0))
    resumed = ResumedRun(2, part, part, Path("runs/v2/weights/last.pt"), comparison,
                         None if identical else "model.model.0.conv.weight differs")
    return ResumeResult(run, Path("runs/v1/weights/last.pt"), [resumed], 1)


@pytest.mark.parametrize("identical,code", [(True, 0), (False, 1)])
def test_verify_cli_resume_at_reports_and_exits(monkeypatch, capsys, identical, code):
    from yolo_det.cli import main as cli_main
    from yolo_det.proof import resume_at

    calls = []
    monkeypatch.setattr(resume_at, "verify_resume",
                        lambda cmd, k, **kw: calls.append((cmd, k, kw["runs"])) or _resume_result(identical))
    assert cli_main(["verify", "--resume-at", "1", "--", "python", "train.py"]) == code
    out = capsys.readouterr().out
    assert calls == [(["python", "train.py"], 1, 2)]
    assert ("identical to run 1: 6 steps" in out) if identical else ("diverged at step 3: kind loss" in out)
    assert cli_main(["verify", "--resume-at", "0", "--", "python", "train.py"]) == 2


def test_a_step_right_after_the_save_does_not_leak_into_the_sidecar(tmp_path):
    """Parameters and EMA are copied on the writer's thread; the next optimizer step waits for that copy."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.rand(1, 3, 5, 5)).sum().backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    writer = resume.Writer()
    path = tmp_path / "last.pt.yolo-det"
    writer.write(path, resume.capture(epoch=0, next_epoch=1, model=model, ema=model, optimizer=optimizer))
    optimizer.step()  # changes every parameter
    assert writer.wait() is None
    saved = resume.read(path)
    assert all(torch.equal(saved["model"][k], v) for k, v in before.items())
    assert all(torch.equal(saved["ema"][k], v) for k, v in before.items()) and saved["optimizer"] is not None
    assert not torch.equal(model[0].weight, before["0.weight"])


def test_detect_grids_cached_by_the_first_validation_come_back_on_resume(tmp_path, yolov5_package):
    """YOLOv5's Detect computes grid/anchor_grid at the EMA's first validation and keeps them; the EMA's
    anchors buffer moves by rounding in every EMA update, so a resumed process that recomputed the grids
    validated with other anchors (issue 23: 'predictions differ' after identical training)."""
    import copy
    import math

    from yolov5.models.yolo import Model

    torch.manual_seed(0)
    model = Model(str(yolov5_package / "models" / "yolov5n.yaml"), ch=3, nc=2).eval()
    images = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        model(images)  # the first validation fills the grids
    detect = model.model[-1]
    anchors = detect.anchors.clone()
    with torch.no_grad():  # an EMA update that moves the anchors, as rounding does: bound to change the grid
        detect.anchors.copy_(torch.nextafter(anchors, torch.full_like(anchors, math.inf)))
        expected = model(images)[0]  # the uninterrupted process still uses the cached grid
    assert torch.equal(detect.anchor_grid[0][0, :, 0, 0], (anchors[0] * detect.stride[0]))

    state = resume.capture(epoch=0, next_epoch=1, model=None, ema=model)
    path = tmp_path / "last.pt.yolo-det"
    resume.Writer().write(path, state, background=False)
    saved = resume.read(path)["caches"]["ema"]
    assert {"model.24.grid", "model.24.anchor_grid"} <= set(saved)

    resumed = copy.deepcopy(model)
    resumed.model[-1].grid = [torch.empty(0)] * detect.nl  # a new process: the release's empty caches
    resumed.model[-1].anchor_grid = [torch.empty(0)] * detect.nl
    with torch.no_grad():
        assert not torch.equal(resumed(images)[0], expected)  # recomputed from the moved anchors
    resumed.model[-1].grid = [torch.empty(0)] * detect.nl
    resumed.model[-1].anchor_grid = [torch.empty(0)] * detect.nl
    assert resume.load_module_caches(resumed, saved) == len(saved)  # the grids and the plain stride
    with torch.no_grad():
        assert torch.equal(resumed(images)[0], expected)


class _Trainer:
    """The shape of Ultralytics' loop that StepCadence relies on: callbacks, ``accumulate``, a local
    ``last_opt_step`` restarted at -1 and gradients zeroed at train start (written here)."""

    def __init__(self, accumulate):
        self.callbacks = {"on_train_epoch_start": [], "on_train_batch_start": []}
        self.accumulate = accumulate
        torch.manual_seed(0)
        self.model = torch.nn.Linear(2, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.steps = []

    def add_callback(self, event, fn):
        self.callbacks[event].append(fn)

    def train(self, start_epoch, epochs, nb, stop=None):
        last_opt_step = -1
        self.optimizer.zero_grad()
        for epoch in range(start_epoch, epochs):
            for fn in self.callbacks["on_train_epoch_start"]:
                fn(self)
            for i in range(nb):
                for fn in self.callbacks["on_train_batch_start"]:
                    fn(self)
                ni = i + nb * epoch
                self.model(torch.full((1, 2), float(ni))).sum().backward()
                if ni - last_opt_step >= self.accumulate:
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    self.steps.append(ni)
                    last_opt_step = ni
            if stop == epoch + 1:
                return resume.loop_variable("last_opt_step", self), resume.gradients(self.optimizer)


@pytest.mark.parametrize("nb, accumulate", [(4, 3), (2, 8), (5, 2), (3, 3), (7, 4)])
def test_step_cadence_steps_a_resumed_loop_at_the_uninterrupted_batches(nb, accumulate):
    epochs = 4
    whole = _Trainer(accumulate)
    whole.train(0, epochs, nb)
    for stop in range(1, epochs):
        first = _Trainer(accumulate)
        last_opt_step, grads = first.train(0, epochs, nb, stop=stop)
        assert last_opt_step == max(first.steps, default=-1)  # read from the loop's frame
        second = _Trainer(accumulate)
        second.model.load_state_dict(first.model.state_dict())
        cadence = resume.StepCadence(second, last_opt_step, grads)
        assert resume.StepCadence.supported(second)
        cadence.install(second.model)
        assert not second.model._forward_pre_hooks  # the model stays copyable: 8.0 pickles it into last.pt
        copy.deepcopy(second.model)
        second.train(stop, epochs, nb)
        assert first.steps + second.steps == whole.steps, (stop, first.steps, second.steps)
        assert torch.equal(second.model.weight, whole.model.weight)  # the pending gradients came back too
        assert second.accumulate == accumulate


@pytest.mark.parametrize("case", ["marker", "record strict", "without yolo-det"])
def test_ultralytics_refuses_a_strict_resume_without_its_sidecar_before_building_anything(tmp_path, capsys,
                                                                                         monkeypatch, case):
    """The check DeterminismMixin runs before Ultralytics' trainer is built: through the API an exception,
    under `yolo-det run` (the `yolo` CLI) exit 2 with the message; warn and a present sidecar pass."""
    pytest.importorskip("ultralytics")
    from yolo_det.integrations.launch import BOOTSTRAP_VAR
    from yolo_det.integrations.ultralytics import streams

    setup, reason = RUN_FOLDERS[case]
    checkpoint = _run_folder(tmp_path, **setup)
    monkeypatch.delenv(BOOTSTRAP_VAR, raising=False)
    with pytest.raises(resume.ResumeStateError) as error:
        streams.refuse_missing(checkpoint, "strict")
    assert all(words in str(error.value) for words in reason) and "deterministic=warn" in str(error.value)
    monkeypatch.setenv(BOOTSTRAP_VAR, "1")
    with pytest.raises(SystemExit) as stop:
        streams.refuse_missing(checkpoint, "strict")
    assert stop.value.code == 2 and "yolo-det: error: strict mode cannot resume exactly" in capsys.readouterr().err
    streams.refuse_missing(checkpoint, "warn")  # warn: checked and reported after _setup_train
    monkeypatch.setenv(resume.INEXACT_ENV, "inexact")
    streams.refuse_missing(checkpoint, "strict")
    monkeypatch.delenv(resume.INEXACT_ENV)
    resume.sidecar_path(checkpoint).write_bytes(b"x")  # there: whether it matches is checked after _setup_train
    streams.refuse_missing(checkpoint, "strict")
