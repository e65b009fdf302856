"""`yolo-det diff A B` with inputs it cannot compare names the argument that is wrong and what it accepts (two
fingerprint logs, run folders, checkpoints or searches), exit 2, never a message about the other argument."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from support.cli import cli
from yolo_det.proof import inputs

KINDS = ("missing", "folder", "run", "search", "log", "checkpoint")


def _make(root: Path, kind: str, name: str) -> Path:
    path = root / name
    if kind == "folder":
        path.mkdir()
        (path / "images").mkdir()
    elif kind == "run":
        path.mkdir()
        (path / "results.csv").write_text("epoch,metrics/mAP_0.5\n0,0.1\n")
    elif kind == "search":
        path.mkdir()
        (path / "evolve.csv").write_text("lr0,fitness\n0.01,0.1\n")
    elif kind == "log":
        path = path.with_suffix(".jsonl")
        path.write_text('{"format": "yolo-det-fingerprint", "schema": 1}\n')
    elif kind == "checkpoint":
        path = path.with_suffix(".pt")
        path.write_bytes(b"PK\x03\x04not a real archive")
    return path


def _oracle(ka: str, kb: str):
    """Which argument is refused by the inputs alone (None: a reader of that kind decides)."""
    for name, kind in (("A", ka), ("B", kb)):
        if kind in ("missing", "folder"):
            return name
    if "checkpoint" in (ka, kb) or ka == kb:
        return None
    return "A"  # two kinds: the message names both, A first


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ka=st.sampled_from(KINDS), kb=st.sampled_from(KINDS))
def test_the_wrong_argument_is_named_with_what_diff_accepts(ka, kb, tmp_path_factory):
    root = tmp_path_factory.mktemp("d")
    a, b = _make(root, ka, "a"), _make(root, kb, "b")
    message = inputs.mismatch(a, b)
    wrong = _oracle(ka, kb)
    assert (message is None) == (wrong is None), (ka, kb, message)
    if message is not None:
        assert message.startswith(f"{wrong} (") and inputs.ACCEPTS in message
        proc = cli("diff", a, b)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("other", ["ds", "/nonexistent-yolo-det-path"])
def test_the_issues_two_cases_name_b(other, tmp_path):
    run = _make(tmp_path, "run", "a")
    if other == "ds":
        _make(tmp_path, "folder", "ds")
    proc = cli("diff", run, tmp_path / other if other == "ds" else other)
    assert proc.returncode == 2 and "error: B (" in proc.stderr
    assert "holds no search results" not in proc.stderr and "is a folder, not a fingerprint log" not in proc.stderr
