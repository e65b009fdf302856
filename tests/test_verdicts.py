"""One ``verdict`` vocabulary and a ``schema`` version in every command's JSON (issue 55, item 8)."""

from __future__ import annotations

import pytest

from yolo_det.cli import exit_codes
from yolo_det.core import verdicts


def test_every_verdict_maps_to_a_documented_exit_code():
    codes = {exit_codes.EXIT_OK, exit_codes.EXIT_FINDING, exit_codes.EXIT_USAGE, exit_codes.EXIT_NOT_PROVEN}
    assert set(verdicts.EXIT_CODES.values()) <= codes
    assert verdicts.exit_code(verdicts.IDENTICAL) == exit_codes.EXIT_OK
    assert verdicts.exit_code(verdicts.DIFFERS) == exit_codes.EXIT_FINDING
    assert verdicts.exit_code(verdicts.NOT_PROVEN) == exit_codes.EXIT_NOT_PROVEN
    assert verdicts.exit_code(verdicts.TOO_FEW) == exit_codes.EXIT_NOT_PROVEN


@pytest.mark.parametrize("old, new", [("differ", "differs"), ("A better beyond seed noise", "beyond seed noise"),
                                      ("B better beyond seed noise", "beyond seed noise"),
                                      ("different beyond seed noise (no better direction)", "beyond seed noise"),
                                      ("too few seeds for a verdict", "too few seeds")])
def test_old_words_read_back_as_todays(old, new):
    assert verdicts.normalize(old) == new
    assert verdicts.stamp({"verdict": old}, old)["verdict"] == new


def test_unknown_word_is_refused_naming_the_vocabulary():
    with pytest.raises(ValueError, match="not proven"):
        verdicts.stamp({}, "maybe")


def test_stamp_puts_schema_and_verdict_first_and_keeps_the_rest():
    out = verdicts.stamp({"steps": 3, "verdict": "x", "schema": 0}, verdicts.DIFFERS)
    assert list(out)[:2] == ["schema", "verdict"]
    assert out == {"schema": verdicts.SCHEMA, "verdict": "differs", "steps": 3}
