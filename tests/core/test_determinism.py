"""Flags per mode, and temporary_determinism restoring every flag (nesting, exceptions)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import yolo_det
from yolo_det.core.determinism import FlagState, restore, snapshot


def test_strict_flags():
    yolo_det.set_determinism("strict")
    assert snapshot() == FlagState(True, False, True, False, snapshot().fill_uninitialized_memory)


def test_warn_flags():
    torch.backends.cudnn.benchmark = True
    yolo_det.set_determinism("warn")
    s = snapshot()
    assert (s.deterministic, s.warn_only, s.cudnn_deterministic, s.cudnn_benchmark) == (True, True, True, False)


def test_off_turns_determinism_off_and_leaves_benchmark_as_set():
    yolo_det.set_determinism("strict")
    torch.backends.cudnn.benchmark = True
    yolo_det.set_determinism("off")
    s = snapshot()
    assert (s.deterministic, s.warn_only, s.cudnn_deterministic, s.cudnn_benchmark) == (False, False, False, True)


def test_bad_mode_is_a_value_error_listing_choices():
    before = snapshot()
    with pytest.raises(ValueError, match="'fast' is not one of strict, warn, off"):
        yolo_det.set_determinism("fast")
    assert snapshot() == before


def test_fill_uninitialized_memory_is_a_choice():
    yolo_det.set_determinism("strict", fill_uninitialized_memory=False)
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    yolo_det.set_determinism("strict", fill_uninitialized_memory=True)
    assert torch.utils.deterministic.fill_uninitialized_memory is True


def test_set_returns_previous_flags():
    yolo_det.set_determinism("off")
    previous = snapshot()
    assert yolo_det.set_determinism("strict") == previous


def test_temporary_restores_on_exception():
    yolo_det.set_determinism("strict")
    torch.utils.deterministic.fill_uninitialized_memory = False
    before = snapshot()
    with pytest.raises(KeyError):
        with yolo_det.temporary_determinism("off", fill_uninitialized_memory=True):
            assert not torch.are_deterministic_algorithms_enabled()
            raise KeyError("boom")
    assert snapshot() == before


_flags = st.builds(FlagState, st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
# A program: a list of (mode, raise_inside, children) nested blocks.
_block = st.deferred(lambda: st.tuples(st.sampled_from(yolo_det.MODES), st.booleans(), st.lists(_block, max_size=3)))


class _Boom(Exception):
    pass


def _run(block):
    mode, raise_inside, children = block
    outside = snapshot()
    try:
        with yolo_det.temporary_determinism(mode):
            inside = snapshot()
            assert inside.deterministic == (mode != "off")
            for child in children:
                _run(child)
                assert snapshot() == inside  # a child never leaks into its parent
            if raise_inside:
                raise _Boom()
    except _Boom:
        pass
    assert snapshot() == outside


@settings(max_examples=60, deadline=None)
@given(start=_flags, program=st.lists(_block, min_size=1, max_size=4))
def test_random_nesting_and_exceptions_restore_every_flag(start, program):
    if start.deterministic is False:
        start = FlagState(False, False, start.cudnn_deterministic, start.cudnn_benchmark, start.fill_uninitialized_memory)
    restore(start)
    for block in program:
        _run(block)
    assert snapshot() == start
