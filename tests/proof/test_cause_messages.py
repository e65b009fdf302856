"""Causes a user can act on: two command lines of different lengths are shown by the tokens that differ
(``seed=0 vs seed=1``, ``--seed 1 added``), never both sides cut at the same place; each cause is said once."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings, strategies as st

from yolo_det.proof.causes import OUTPUT_OPTIONS, header_causes, setup_causes

TOKENS = st.sampled_from(["train", "model=yolov8n.yaml", "data=d.yaml", "epochs=1", "epochs=2", "seed=0", "seed=1",
                          "--seed", "1", "3", "--img", "640", "imgsz=64", "lr0=0.01", "lr0=0.02", "x" * 80])


@settings(max_examples=300, deadline=None)
@given(a=st.lists(TOKENS, min_size=1, max_size=12), b=st.lists(TOKENS, min_size=1, max_size=12))
def test_every_token_one_command_line_has_more_of_is_named(a, b):
    causes = [c for c in header_causes({"command": ["yolo"] + a}, {"command": ["yolo"] + b}) if c.what == "command"]
    if len(a) == len(b):
        return  # same length: compared argument by argument (test_causes.py)
    extra = (Counter(b) - Counter(a)) + (Counter(a) - Counter(b))
    if not extra:
        assert not causes
        return
    assert len(causes) == 1
    message = causes[0].message
    named = message.split(": ", 1)[1]
    if "more" not in named:
        for token in extra:
            assert token in named, (token, message)
    assert "..." not in message  # no side cut short


def test_output_locations_and_run_numbers_are_no_cause_in_lines_of_different_lengths():
    a = {"command": ["train.py", "--data", "d.yaml", "--name", "v1", "--project", "r/1"], "verify_run": 1}
    b = {"command": ["train.py", "--data", "d.yaml", "--name", "v2", "--project", "r/2", "--seed", "3"],
         "verify_run": 2}
    assert [c.message for c in header_causes(a, b)] == ["runs used different command lines: --seed 3 added"]
    assert "--project" in OUTPUT_OPTIONS


def test_a_thread_count_the_header_and_determinism_json_both_hold_is_named_once(tmp_path):
    import json

    for name, threads in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "determinism.json").write_text(json.dumps({"environment": {"cpu_threads": threads}}))
    ha = {"threads": 1, "report": str(tmp_path / "a" / "determinism.json")}
    hb = {"threads": 2, "report": str(tmp_path / "b" / "determinism.json")}
    messages = [c.message for c in setup_causes(ha, hb, tmp_path / "a" / "f.jsonl", tmp_path / "b" / "f.jsonl")]
    assert sum("CPU thread counts" in m for m in messages) == 1, messages
