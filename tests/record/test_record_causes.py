"""What the release chose, flipped between two records and named with both values (no training needed): AMP
after its check, the memory format (channels-last), a fused optimizer, autobatch's pick, the validation head /
NMS mode. Each record is built by the same ``run_facts`` calls the integrations make, from real objects."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from yolo_det.core import run_facts
from yolo_det.proof.causes import report_causes


def _session() -> SimpleNamespace:
    return SimpleNamespace(extra={})


def _named(a: SimpleNamespace, b: SimpleNamespace, what: str) -> str:
    causes = [c for c in report_causes({"run_facts": a.extra["run_facts"]}, {"run_facts": b.extra["run_facts"]})
              if c.what == what]
    assert len(causes) == 1, [c.what for c in report_causes({"run_facts": a.extra["run_facts"]},
                                                            {"run_facts": b.extra["run_facts"]})]
    return causes[0].message


def _model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1))


def test_amp_after_its_check_is_named_with_both_values():
    a, b = _session(), _session()
    run_facts.record(a, amp=True)
    run_facts.record(b, amp=False)
    assert "AMP was on in A and off in B" in _named(a, b, "amp")
    same = _session()
    run_facts.record(same, amp=True)
    assert not [c for c in report_causes({"run_facts": a.extra["run_facts"]},
                                         {"run_facts": same.extra["run_facts"]}) if c.what == "amp"]


def test_the_memory_format_the_model_trained_in_is_named():
    a, b = _session(), _session()
    run_facts.record_fact(a, "memory_format", run_facts.memory_format(_model()))
    run_facts.record_fact(b, "memory_format", run_facts.memory_format(_model().to(memory_format=torch.channels_last)))
    assert a.extra["run_facts"]["memory_format"] == "contiguous"
    assert "contiguous in A, channels_last in B" in _named(a, b, "channels_last")


def test_a_fused_optimizer_is_named():
    a, b = _session(), _session()
    params = list(_model().parameters())
    run_facts.record_optimizer(a, torch.optim.AdamW(params, lr=1e-3, fused=False))
    run_facts.record_optimizer(b, torch.optim.AdamW(params, lr=1e-3, fused=True))
    message = _named(a, b, "optimizer")
    assert "AdamW (" in message and message.count(", fused)") == 1 and message.index("fused") > message.index(" vs ")


def test_autobatchs_pick_is_named_with_both_batch_sizes():
    a, b = _session(), _session()
    run_facts.record_batch(a, 16, from_step=1, why="autobatch")
    run_facts.record_batch(b, 12, from_step=1, why="autobatch")
    message = _named(a, b, "batch_sizes")
    assert "16 (autobatch, from step 1) vs 12 (autobatch, from step 1)" in message


def test_the_validation_head_and_nms_mode_are_named():
    """Ultralytics 8.4.142 made nms=None mean one-to-many + NMS for end-to-end heads (False: one-to-one)."""
    a, b = _session(), _session()
    run_facts.record_fact(a, "validation_head", run_facts.validation_head(None, False, True))
    run_facts.record_fact(b, "validation_head", run_facts.validation_head(False, True, True))
    message = _named(a, b, "validation_head")
    assert "nms=None: one-to-many head + NMS in A" in message and "nms=False: one-to-one head, no NMS in B" in message
    run_facts.record_fact(b, "validation_head", run_facts.validation_head(None, False, True), once=True)
    assert b.extra["run_facts"]["validation_head"]["end2end"] is True  # the first validation's is kept


def test_the_cuda_math_library_versions_are_those_every_package_metadata_names(tmp_path, monkeypatch):
    """The cuBLAS / cuDNN wheels' versions, found by folder name without reading every package's metadata:
    the same as reading them all, also for a wheel whose folder name has other case or separators."""
    import sys
    from importlib import metadata

    for folder, name, version in (("nvidia_cublas_cu12-12.4.5.8", "nvidia-cublas-cu12", "12.4.5.8"),
                                  ("NVIDIA.CuDNN_cu12-9.1.0.70", "nvidia-cudnn-cu12", "9.1.0.70"),
                                  ("nvidia_nccl_cu12-2.21.5", "nvidia-nccl-cu12", "2.21.5")):
        info = tmp_path / f"{folder}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    every = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if name.startswith(("nvidia-cublas", "nvidia-cudnn")):
            every[name] = dist.version
    found = run_facts._library_versions()
    assert found == every
    assert (found["nvidia-cublas-cu12"], found["nvidia-cudnn-cu12"]) == ("12.4.5.8", "9.1.0.70")
