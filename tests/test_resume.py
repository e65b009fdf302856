"""The resume sidecar: written atomically with a format version, loadable without pickle, checked
against the checkpoint, and what a resumed run does when it is missing (strict stops, warn says
"resume not exact") or when the run started before yolo-det wrote one (resumes as before)."""

from __future__ import annotations

import argparse
import copy
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


def test_runs_started_before_the_feature_resume_as_before(tmp_path, capsys):
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "last.pt").write_bytes(b"old")
    v5.start(_resume_opt(weights / "last.pt", "strict"), {})  # no marker, no sidecar: no refusal
    assert "it resumes as the release does" in capsys.readouterr().out


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


def test_mismatched_sidecar_is_refused_at_the_resume_point(tmp_path, capsys):
    checkpoint, model = _sidecar(tmp_path, epoch=4)
    v5.start(_resume_opt(checkpoint, "warn"), {})
    v5.track(_model())  # weights equal; but the checkpoint resumes after epoch 2, the sidecar is of epoch 5
    v5.resume_point(2)
    out = capsys.readouterr().out
    assert "resume not exact: last.pt.yolo-det does not match last.pt: the resume state was saved after epoch 5" in out


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
