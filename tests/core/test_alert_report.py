"""Capturing PyTorch's real nondeterminism alerts: strict, warn, allow-list, backward mode."""

import warnings

import pytest
import torch

import yolo_det
from yolo_det.core import determinism
from yolo_det.core.report import parse_alert, strict_message
from yolo_det.session import NondeterministicOpError

from support.alerts import alerting, backward_once, put_alert

KERNEL = "fake_op_backward_cuda"


def test_strict_raises_pytorchs_runtime_error():
    yolo_det.set_determinism("strict")
    with pytest.raises(RuntimeError) as err:
        backward_once()
    assert str(err.value) == strict_message(KERNEL)


def test_warn_emits_pytorchs_user_warning():
    yolo_det.set_determinism("warn")
    with pytest.warns(UserWarning, match=f"{KERNEL} does not have a deterministic implementation"):
        backward_once()


def test_warn_records_every_occurrence_even_when_caller_filtered_warnings():
    yolo_det.set_determinism("warn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with yolo_det.record_violations() as rep:
            for _ in range(3):
                backward_once()
            put_alert()
            put_alert()
    assert rep.ops == {KERNEL: 3, "put_": 2}


def test_recorded_alerts_are_not_printed(capsys):
    yolo_det.set_determinism("warn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with yolo_det.record_violations() as rep:
            backward_once()
    assert rep.ops == {KERNEL: 1}
    assert not [w for w in seen if parse_alert(str(w.message))]
    # other warnings still reach the caller
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with yolo_det.record_violations():
            warnings.warn("unrelated")
    assert [str(w.message) for w in seen] == ["unrelated"]


def test_strict_error_is_recorded_and_reraised():
    yolo_det.set_determinism("strict")
    with pytest.raises(RuntimeError):
        with yolo_det.record_violations() as rep:
            put_alert()
    assert rep.ops == {"put_": 1}
    assert rep.records["put_"].action == "raised"


def test_nested_recorders_both_count_once():
    yolo_det.set_determinism("warn")
    with yolo_det.record_violations() as outer:
        backward_once()
        with yolo_det.record_violations() as inner:
            backward_once()
    assert outer.ops == {KERNEL: 2} and inner.ops == {KERNEL: 1}
    yolo_det.set_determinism("strict")
    with pytest.raises(RuntimeError):
        with yolo_det.record_violations() as outer, yolo_det.record_violations() as inner:
            put_alert()
    assert outer.ops == inner.ops == {"put_": 1}


def test_allow_list_reports_allowed_ops_and_raises_the_rest():
    session = yolo_det.configure("strict", allow=[KERNEL])
    with session.backward():
        backward_once()  # allowed: reported, not raised
    assert session.report.ops == {KERNEL: 1}
    assert session.report.records[KERNEL].action == "allowed"
    with pytest.raises(NondeterministicOpError) as err:
        with session.backward():
            backward_once("other_op_backward_cuda")
    assert str(err.value).startswith(strict_message("other_op_backward_cuda"))
    assert "deterministic_allow: [other_op_backward_cuda]" in str(err.value)
    with pytest.raises(RuntimeError, match="put_ does not have a deterministic implementation"):
        put_alert()  # outside backward, strict + allow-list still raises for other ops
    assert session.report.records["put_"].action == "raised"


def test_backward_mode_off_lets_backward_through_while_global_stays_strict():
    session = yolo_det.configure("strict", backward="off")
    with session.backward():
        assert not torch.are_deterministic_algorithms_enabled()
        backward_once()
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert session.report.ops == {}
    with pytest.raises(RuntimeError):
        put_alert()


def test_strict_backward_error_names_op_and_options():
    session = yolo_det.configure("strict")
    with pytest.raises(NondeterministicOpError) as err:
        with session.backward():
            backward_once()
    text = str(err.value)
    assert text.startswith(strict_message(KERNEL))
    assert "make_deterministic" in text and "--deterministic warn" in text
    assert isinstance(err.value, RuntimeError)
    assert session.report.records[KERNEL].action == "raised"


def test_backward_restores_flags_after_an_error():
    session = yolo_det.configure("warn", backward="strict")
    before = determinism.snapshot()
    with pytest.raises(RuntimeError):
        with session.backward():
            backward_once()
    assert determinism.snapshot() == before


def test_first_step_is_attributed_through_optimizer_steps():
    session = yolo_det.configure("warn")
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(1, 4):  # two backward passes (gradient accumulation) per optimizer step
        opt.zero_grad()
        for micro in range(2):
            loss = alerting(w).sum() if (step, micro) == (2, 1) else w.sum()
            with session.backward():
                loss.backward()
        opt.step()
    assert session.report.records[KERNEL].first_step == 2
    assert session.step == 4 and session.optimizer_steps == 3 and session.backward_passes == 6


def test_summary_table_lists_op_count_and_step():
    session = yolo_det.configure("warn")
    with session.backward():
        backward_once()
    text = session.report.summary()
    assert KERNEL in text and "warned" in text
    session.finish(echo=lambda _: None)
    assert yolo_det.current() is None
