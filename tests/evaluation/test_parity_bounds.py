"""Parity's raw-output line says which bound each element met: every element's error against its own allowance
atol + rtol x |value|, so a maximum relative error above rtol next to "within" reads as what it is, not a
contradiction (issue 60, item 10)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from yolo_det.evaluation.parity.outputs import ATOL_SCALE, RTOL, _compare_raw
from yolo_det.evaluation.parity.report import _bound_text


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-3, 1.0, 640.0]),
       noise=st.sampled_from([0.0, 1e-7, 1e-5, 1e-3, 1e-1]), channels=st.integers(2, 8))
def test_within_is_every_element_inside_its_allowance_and_the_share_says_how_close(seed, scale, noise, channels):
    rng = np.random.default_rng(seed)
    ref = (rng.standard_normal((1, channels, 40)) * scale).astype(np.float32)
    got = (ref + rng.standard_normal(ref.shape).astype(np.float32) * noise * scale).astype(np.float32)
    row = _compare_raw(ref, got, "o")
    # the oracle: each element's allowance written out (a channel's atol from its largest value, then rtol)
    err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    atol = ATOL_SCALE * np.maximum(np.abs(ref).max(axis=(0, 2), keepdims=True), 1.0)
    share = float((err / (atol + RTOL * np.abs(ref))).max())
    assert row["within"] == (share <= 1.0) == (row["max_share"] <= 1.0)
    assert np.isclose(row["max_share"], share, rtol=1e-9, atol=0.0)
    text = _bound_text(row)
    assert ("within its allowance" in text) == row["within"] and ("BEYOND" in text) == (not row["within"])
    assert row["bound"] in ("atol", "rtol") and f"rtol {RTOL:g}" in text
