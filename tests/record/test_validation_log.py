"""Validation records in the fingerprint log: written after the step they follow, compared and ranked by diff."""

from __future__ import annotations

import json

import torch
from torch import nn

from yolo_det.record import fingerprint
from yolo_det.proof.compare import compare_logs
from yolo_det.record.log import read_log


def _train(path, lr_at=None, predictions_at=None, stop_last=None):
    """2 epochs x 2 optimizer steps of a tiny model, a validation (2 NMS batches of 2 images) after each epoch."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    with fingerprint.fingerprinting(path, model=model):
        for epoch in range(2):
            for _ in range(2):
                step += 1
                if step == lr_at:
                    optimizer.param_groups[0]["lr"] = 0.2
                model(torch.ones(3, 4)).pow(2).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            with torch.no_grad():
                for batch in range(2):
                    out = [model(torch.full((5, 4), float(batch + i))) for i in range(2)]
                    if epoch == predictions_at and batch == 1:
                        out[0] = out[0][:1]  # the release's clock cut this image short
                    fingerprint.record_predictions(out)
            fingerprint.record_validation(epoch, {"precision": 0.5, "mAP50": 0.25 + epoch, "fitness": 0.1 * epoch},
                                          best=True)
        if stop_last is not None:
            fingerprint.set_validation_stop(stop_last)
    return read_log(path)


def test_records_follow_their_step_and_carry_metrics(tmp_path):
    log = _train(tmp_path / "a.jsonl", stop_last=True)
    lines = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    kinds = ["val" if line.get("val") else "final" if line.get("final") else line.get("step", "header")
             for line in lines]
    assert kinds == ["header", 1, 2, "val", 3, 4, "val", "final"]
    first, last = log.validations
    assert (first.epoch, first.after_step, last.after_step) == (0, 2, 4)
    assert first.names == ["batch0.image0", "batch0.image1", "batch1.image0", "batch1.image1"]
    assert first.metrics == {"precision": 0.5, "mAP50": 0.25, "fitness": 0.0}
    assert (first.best, first.stop, last.stop) == (True, False, True)


def test_diff_names_a_validation_that_differs_when_the_steps_agree(tmp_path):
    a, b = _train(tmp_path / "a.jsonl"), _train(tmp_path / "b.jsonl", predictions_at=1)
    result = compare_logs(a, b)
    assert not result.identical and result.steps_identical
    first = result.first_divergence
    assert (first.kind, first.step, first.epoch, first.tensor) == ("val", 4, 1, "batch1.image0")
    text = "\n".join(result.describe())
    assert ("diverged at epoch 1 validation (after step 4): predictions differ (1 of 4 images, first batch1.image0 (5 vs 1 boxes)), "
            "training steps identical") in text
    assert result.to_json()["validations"]["differing"][0]["epoch"] == 1
    assert compare_logs(a, _train(tmp_path / "c.jsonl")).identical


def test_a_validation_ranks_after_its_step_and_before_the_next(tmp_path):
    a = _train(tmp_path / "a.jsonl")
    later_step = compare_logs(a, _train(tmp_path / "b.jsonl", lr_at=3, predictions_at=0))
    first = later_step.first_divergence
    assert (first.kind, first.step) == ("val", 2)  # epoch 0's validation comes before step 3
    assert "training steps identical up to step 2, they differ from step 3" in "\n".join(later_step.describe())
    assert not later_step.steps_identical
    same_step = compare_logs(a, _train(tmp_path / "c.jsonl", lr_at=2, predictions_at=0))
    assert (same_step.first_divergence.kind, same_step.first_divergence.step) == ("lr", 2)


def test_yolov5_validated_records_metrics_best_and_an_early_stop(tmp_path):
    import numpy as np

    import yolo_det
    from yolo_det.integrations.yolov5 import script as v5

    def one_run(name, epochs):
        session = yolo_det.configure("warn")
        fingerprint.start(tmp_path / f"{name}.jsonl", session=session)
        v5._epochs = epochs  # what start(opt) takes from opt.epochs
        v5.nms_output([torch.ones(2, 6), torch.zeros(0, 6)])
        v5.validated(0, (0.5, 0.25, 0.125, 0.0625, 0.1, 0.2, 0.3), np.array([0.07]), 0.0)
        v5.finish(save_dir=tmp_path / name)
        return read_log(tmp_path / f"{name}.jsonl")

    stopped = one_run("stopped", epochs=10).validations[0]  # the run ended after epoch 0 of 10
    assert stopped.metrics == {"precision": 0.5, "recall": 0.25, "mAP50": 0.125, "mAP50-95": 0.0625, "fitness": 0.07}
    assert (stopped.epoch, stopped.best, stopped.stop) == (0, True, True)
    assert stopped.names == ["batch0.image0", "batch0.image1"]
    last = one_run("last", epochs=1)
    assert last.validations[0].stop is False and last.final.run_dir == str((tmp_path / "last").resolve())
