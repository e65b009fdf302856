"""Strict training on CPU with CUDA's alerts emulated: native fails like CUDA, replacements run."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import yolo_det
from models import BLOCKS, detector
from models.zoo import ScriptedBilinear
from yolo_det.strict.audit import emulate_cuda_alerts
from yolo_det.core.determinism import temporary_determinism


def _train(model, session, steps=2):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    with emulate_cuda_alerts():
        for _ in range(steps):
            loss = sum(o.square().mean() for o in model(torch.rand(2, 3, 32, 32, generator=generator)))
            with session.backward():
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.parametrize("name,kernel,module", [
    ("scam", "adaptive_max_pool2d_backward_cuda", "model.7.att.max"),
    ("psp", "adaptive_avg_pool2d_backward_cuda", "model.7.att.stages.1.0"),
    ("sampling", "grid_sampler_2d_backward_cuda", "model.7.att"),
])
def test_strict_native_ops_fail_with_the_op_the_module_and_the_options(name, kernel, module):
    model = detector(BLOCKS[name](8), c=8)
    session = yolo_det.configure("strict", ops="native", seed=0)
    session.track(model)
    with pytest.raises(yolo_det.NondeterministicOpError) as caught:
        _train(model, session)
    message = str(caught.value)
    assert message.startswith(f"{kernel} does not have a deterministic implementation")
    assert f"It comes from: {module}" in message
    for option in ("make_deterministic", f"deterministic_allow: [{kernel}]", "--deterministic warn"):
        assert option in message
    assert session.report.records[kernel].action == "raised"


@pytest.mark.parametrize("name", ["scam", "coordatt", "sampling", "reflect", "bicubic"])
def test_strict_training_runs_with_the_replacements(name, tmp_path):
    model = detector(BLOCKS[name](8), c=8)
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    _train(model, session)
    assert not session.report, session.report.summary()
    saved = json.loads(session.save(tmp_path).read_text())
    assert saved["replacements"] and saved["replacements"] == session.replacements
    assert all({"module", "from", "to"} <= set(r) for r in saved["replacements"])


def test_warn_mode_reports_each_cuda_alert():
    model = detector(BLOCKS["scam"](8), c=8)
    session = yolo_det.configure("warn", ops="native", seed=0)
    session.track(model)
    _train(model, session, steps=3)
    assert session.report.ops == {"adaptive_max_pool2d_backward_cuda": 3}


def test_allow_list_lets_a_native_op_run_and_reports_it():
    model = detector(BLOCKS["scam"](8), c=8)
    session = yolo_det.configure("strict", ops="native", allow=["adaptive_max_pool2d_backward_cuda"], seed=0)
    session.track(model)
    _train(model, session)
    assert session.report.records["adaptive_max_pool2d_backward_cuda"].action == "allowed"


def _strict_backward(fn, shape=(1, 2, 8, 8)):
    x = torch.randn(*shape, requires_grad=True)
    with temporary_determinism("strict"), emulate_cuda_alerts(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(x).sum().backward()
    return x.grad


def test_emulation_takes_the_routes_cuda_takes():
    _strict_backward(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"))  # route since 2.1
    _strict_backward(nn.Upsample(scale_factor=2, mode="bilinear"))
    _strict_backward(lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"))  # route since 2.3
    _strict_backward(nn.AdaptiveAvgPool2d(1))  # a mean
    for fn, kernel in [(ScriptedBilinear(2), "upsample_bilinear2d_backward_out_cuda"),
                       (lambda x: torch._C._nn.upsample_bilinear2d(x, None, False, [2.0, 2.0]),
                        "upsample_bilinear2d_backward_out_cuda"),
                       (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), "upsample_bicubic2d_backward_out_cuda"),
                       (nn.AdaptiveAvgPool2d(3), "adaptive_avg_pool2d_backward_cuda")]:
        with pytest.raises(RuntimeError, match=f"^{kernel} does not have a deterministic implementation"):
            _strict_backward(fn)


def test_emulation_ends_with_its_block():
    pool = nn.AdaptiveMaxPool2d(1)
    with pytest.raises(RuntimeError, match="adaptive_max_pool2d_backward_cuda"):
        _strict_backward(pool)
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    with temporary_determinism("strict"):
        pool(x).sum().backward()  # plain CPU: the CPU kernel is deterministic, no alert
    assert x.grad is not None
