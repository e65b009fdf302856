"""audit_model and modules_for_op on models with the failing shapes, and on real YOLOv5s."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from models import BLOCKS, EXPECTED, detector
from models.zoo import CoordAtt, PyramidContext, ReflectBlock, SCAMLike
from yolo_det.strict.audit import AuditError, audit_model, modules_for_op
from yolo_det.strict.swap import make_deterministic
from yolo_det.strict.optable import installed_version, load_table

INSTALLED = "{}.{}".format(*installed_version())


def _found(result):
    return {f.op: f.modules for f in result.ops}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_audit_reports_exactly_the_expected_ops_and_modules(name):
    result = audit_model(detector(BLOCKS[name](16)), imgsz=64)
    assert _found(result) == EXPECTED[name]
    assert result.torch == INSTALLED and result.emulated
    for finding in result.ops:
        assert finding.cuda_kernel == load_table().rows_for(finding.op)[0].cuda_kernel
        assert finding.fix and finding.count >= 1
    assert result.clean == (not EXPECTED[name])


def test_plain_yolo_like_model_is_clean():
    result = audit_model(detector(), imgsz=64)
    assert result.clean and not result.silent and not result.notes
    assert result.ops_seen > 100  # the capture did run every op
    assert "clean" in "\n".join(result.lines())


def test_emulated_routes_and_the_table_agree_for_the_installed_torch():
    """The same verdict from running CUDA's Python routes and from the table's route columns."""
    for name in ("psp", "reflect", "scripted"):
        model = detector(BLOCKS[name](16))
        emulated = audit_model(model, imgsz=64, emulate=True)
        predicted = audit_model(model, imgsz=64, emulate=False)
        assert _found(emulated) == _found(predicted), name


def test_predictions_for_older_torch_releases():
    psp = detector(PyramidContext(16))
    older = _found(audit_model(psp, imgsz=64, torch_version="2.0"))
    assert older["upsample_bilinear2d_backward"] == ["model.7.att"]  # no Python route before 2.1
    assert older["_adaptive_avg_pool2d_backward"] == EXPECTED["psp"]["_adaptive_avg_pool2d_backward"]
    reflect = _found(audit_model(detector(ReflectBlock(16)), imgsz=64, torch_version="2.13"))
    assert reflect["reflection_pad2d_backward"] == ["model.7.att.pad"]
    assert audit_model(detector(SCAMLike(16)), imgsz=64, torch_version="1.6").clean  # before alerts existed
    with pytest.raises(AuditError, match="emulated"):
        audit_model(psp, imgsz=64, torch_version="2.0", emulate=True)
    with pytest.raises(AuditError, match="version"):
        audit_model(psp, imgsz=64, torch_version="newest")


def test_silent_and_environment_findings():
    model = nn.Sequential(nn.Conv3d(2, 4, 1), nn.AdaptiveMaxPool3d(2), nn.Flatten(), nn.Linear(32, 3))
    inputs = torch.randn(2, 2, 5, 5, 5)
    result = audit_model(model, inputs)
    assert result.clean and [f.op for f in result.silent] == ["adaptive_max_pool3d_backward"]
    assert result.silent[0].modules == ["1"]
    assert not result.notes
    old = audit_model(model, inputs, torch_version="2.0")
    assert any("CUBLAS_WORKSPACE_CONFIG" in note for note in old.notes)


def test_audit_leaves_the_model_and_rng_as_found():
    model = detector(SCAMLike(16)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(7)
    expected_draw = torch.rand(3)
    torch.manual_seed(7)
    audit_model(model, imgsz=64)
    assert torch.equal(torch.rand(3), expected_draw)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_models_that_cannot_run_raise_audit_errors():
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("needs two inputs")

    with pytest.raises(AuditError, match="forward pass failed: ValueError: needs two inputs"):
        audit_model(Broken(), imgsz=32)
    frozen = nn.Conv2d(3, 3, 1).requires_grad_(False)
    with pytest.raises(AuditError, match="carries no gradient"):
        audit_model(frozen, imgsz=32)


def test_modules_for_op_names_the_modules_that_produce_an_alert():
    model = detector(SCAMLike(16))
    assert modules_for_op(model, "adaptive_max_pool2d_backward_cuda") == ["model.7.att.max"]
    assert modules_for_op(model, "aten::adaptive_max_pool2d_backward") == ["model.7.att.max"]
    coord = detector(CoordAtt(16))
    assert modules_for_op(coord, "adaptive_avg_pool2d_backward_cuda") == ["model.7.att.pool_h", "model.7.att.pool_w"]
    sampling = detector(BLOCKS["sampling"](16))  # a functional call inside a custom module
    assert modules_for_op(sampling, "grid_sampler_2d_backward_cuda") == ["model.7.att"]
    reflect = detector(ReflectBlock(16))
    assert modules_for_op(reflect, "reflection_pad1d_backward_out_cuda") == ["model.7.att"]
    assert modules_for_op(model, "no_such_kernel") == []
    assert modules_for_op(None, "adaptive_max_pool2d_backward_cuda") == []
    make_deterministic(model)
    assert modules_for_op(model, "adaptive_max_pool2d_backward_cuda") == []  # replaced already


def test_functional_calls_with_a_mode_need_that_mode_in_the_source():
    class ConstantPad(nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 1, 1, 1)) * 2

    model = nn.Sequential(ConstantPad())
    assert modules_for_op(model, "reflection_pad2d_backward_cuda") == ["0"]  # only candidate: kept
    both = nn.Sequential(ConstantPad(), ReflectBlock(4))
    assert modules_for_op(both, "reflection_pad1d_backward_out_cuda") == ["1"]


def test_yolov5s_from_the_installed_package_audits_clean():
    from yolo_det.strict.models import build_yolov5

    built = build_yolov5("yolov5s.yaml")
    result = audit_model(built.model, imgsz=64)
    assert result.clean and not result.silent
    assert result.ops_seen > 500
