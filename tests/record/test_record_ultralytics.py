"""What Ultralytics 8.4 decides while a run runs, recorded and named, and its always-on record: a strict
training given no fingerprint option carries a compact ``fingerprint.jsonl``; two runs that differ only in
a TF32 switch are step-identical and ``diff`` names the switch with both values; ``optimizer=auto`` either
side of its iteration threshold is named as an optimizer change; an out-of-memory error in the first
backward is refused under strict (saying what to set) and recorded under warn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("ultralytics")

from ultralytics import YOLO  # noqa: E402

from support.cli import cli  # noqa: E402
from yolo_det.integrations.ultralytics import trainer as integ  # noqa: E402
from yolo_det.proof.causes import report_causes  # noqa: E402
from yolo_det.record.log import read_log  # noqa: E402
from yolo_det.record.run_folder import LOG_NAME  # noqa: E402
from yolo_det.ultralytics import DeterministicTrainer  # noqa: E402

pytestmark = pytest.mark.slow  # trains real models

ARGS = dict(epochs=1, imgsz=64, batch=8, nbs=8, workers=0, plots=False, val=True, amp=False, device="cpu",
            exist_ok=True, seed=0, deterministic="strict")


def _train(dataset: Path, project: Path, name: str, **overrides) -> Path:
    YOLO("yolov8n.yaml").train(trainer=DeterministicTrainer, data=str(dataset), project=str(project), name=name,
                               **{**ARGS, **overrides})
    return project / name


@pytest.fixture(scope="module")
def tf32_pair(dataset, tmp_path_factory):
    """Two strict runs, the second with cudnn.allow_tf32 switched off by the script before training."""
    project = tmp_path_factory.mktemp("tf32")
    before = torch.backends.cudnn.allow_tf32
    try:
        a = _train(dataset, project, "a")
        torch.backends.cudnn.allow_tf32 = not before
        b = _train(dataset, project, "b")
    finally:
        torch.backends.cudnn.allow_tf32 = before
    return a, b


def test_a_strict_training_carries_its_own_compact_log(tf32_pair):
    log = read_log(tf32_pair[0] / LOG_NAME)
    assert log.header["record"] == "compact" and log.complete and log.validations and log.validations[0].names
    facts = json.loads((tf32_pair[0] / "determinism.json").read_text())["run_facts"]
    assert facts["optimizer"]["requested"] == "auto" and facts["optimizer"]["groups"]
    assert facts["drop_last"] is False and facts["batch_sizes"] == [{"batch": 8, "from_step": 1, "why": "batch="}]


def test_a_tf32_switch_flipped_between_two_runs_is_named_with_both_values(tf32_pair):
    proc = cli("diff", *tf32_pair, "--json")
    result = json.loads(proc.stdout)
    assert result["steps"]["identical"]  # on the CPU TF32 changes nothing: the logs agree step by step
    precision = [c for c in result["causes"] if c["what"] == "precision"]
    assert precision and "torch.backends.cudnn.allow_tf32: True vs False" in precision[0]["message"]


def test_optimizer_auto_either_side_of_its_threshold_is_named(dataset, tmp_path, restore_environ):
    """Ultralytics' auto picks by iterations (dataset size x epochs / batch): AdamW below 10000, MuSGD above."""
    reports = []
    for iterations in (100, 20_000):
        trainer = DeterministicTrainer(overrides=dict(model="yolov8n.yaml", data=str(dataset), project=str(tmp_path),
                                                      name="o", **{**ARGS, "deterministic": "warn"}))
        model = trainer.get_model(cfg="yolov8n.yaml", verbose=False)
        trainer.build_optimizer(model, name="auto", lr=0.01, momentum=0.9, decay=5e-4, iterations=iterations)
        reports.append({"run_facts": dict(trainer.yolo_det.extra["run_facts"])})
        trainer.yolo_det.finish(echo=lambda _: None)
    causes = [c for c in report_causes(*reports) if c.what == "optimizer"]
    assert causes and "AdamW (optimizer=auto's pick" in causes[0].message and "MuSGD" in causes[0].message


def _oom_once(monkeypatch):
    """A ``RuntimeError("CUDA out of memory ...")`` from the first backward, once, as a full GPU raises it."""
    calls = []
    real = integ.ScaledLoss.backward

    def backward(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (injected by the test)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(integ.ScaledLoss, "backward", backward)


def test_an_out_of_memory_halving_is_refused_under_strict(dataset, tmp_path, monkeypatch):
    _oom_once(monkeypatch)
    with pytest.raises(integ.BatchHalvingRefused, match=r"batch=8 .*halve the batch to 4.*set a batch that fits, "
                                                        r"e\.g\. batch=4"):
        _train(dataset, tmp_path, "strict")


def test_an_out_of_memory_halving_is_recorded_under_warn(dataset, tmp_path, monkeypatch):
    _oom_once(monkeypatch)
    folder = _train(dataset, tmp_path, "warn", deterministic="warn")
    report = json.loads((folder / "determinism.json").read_text())
    sizes = report["run_facts"]["batch_sizes"]
    assert [s["batch"] for s in sizes] == [8, 4] and "out of memory at batch=8" in sizes[1]["why"]
    assert any("halved the batch from 8 to 4" in note for note in report["violations"]["notes"])
