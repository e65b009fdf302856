"""`yolo-det diff` on logs a hostile or broken writer produced (issue 16, items 7 and 12): one
line, exit 2, never a traceback; a BOM and a trailing blank line are accepted; logs are read as
streams. The logs here are written directly (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yolo_det.cli import main as cli_main
from yolo_det.proof.compare import compare_logs
from support.builders import every_field_log as write_log
from yolo_det.record.log import FingerprintError, LogReader, read_log


@pytest.fixture
def good(tmp_path) -> Path:
    return write_log(tmp_path / "good.jsonl")


def _edit(good: Path, dest: Path, line: int, old: str, new: str) -> Path:
    lines = good.read_text().split("\n")
    assert old in lines[line], lines[line]
    lines[line] = lines[line].replace(old, new, 1)
    dest.write_text("\n".join(lines))
    return dest


@pytest.mark.parametrize("line, old, new, message", [
    (1, '"names":{"grad":["w","b"],"param":["w","b"]}', '"names":"w b"', "has names 'w b', not a mapping"),
    (1, '"names":{"grad":["w","b"]', '"names":{"grad":"wb"', "bad names for 'grad'"),
    (2, '"lr":{"group0.lr":0.02}', '"lr":[0.02]', "has lr [0.02], not a mapping"),
    (2, '"lr":{"group0.lr":0.02}', '"lr":{"group0.lr":[1]}', "has lr 'group0.lr' [1], not a number"),
    (2, '"loss":[2.0]', '"loss":"two"', "has loss 'two', not a list of numbers"),
    (2, '"loss":[2.0]', '"loss":["x"]', "has loss 'x', not a number"),
    (2, '"items":[[0.1,0.2,0.3]]', '"items":[0.1,0.2,0.3]', "has items 0.1, not a list of numbers"),
    (2, '"items":[[0.1,0.2,0.3]]', '"items":"abc"', "has items 'abc', not a list of lists"),
    (2, '"step":2', '"step":"abc"', "is step 'abc', expected 2"),
    (2, '"step":2', '"step":true', "is step True, expected 2"),
    (2, '"ddp":{"world_size":1,"ok":true}', '"ddp":"yes"', "has ddp 'yes', not a DDP check record"),
    (2, '"ddp":{"world_size":1,"ok":true}', '"ddp":{"ok":"no"}', "not a DDP check record"),
    (0, '"world_size":1', '"world_size":"two"', "has world_size 'two', not a whole number"),
    (0, '"rank":0', '"rank":[0]', "has rank [0], not a whole number"),
    (4, '"steps":3', '"steps":"abc"', "has steps 'abc', not a whole number"),
    (4, '"names":["model.w"]', '"names":"model.w"', "the final line (line 5) has no names"),
])
def test_wrong_typed_fields_are_one_line_errors(good, tmp_path, capsys, line, old, new, message):
    bad = _edit(good, tmp_path / "bad.jsonl", line, old, new)
    with pytest.raises(FingerprintError, match="is corrupt"):
        read_log(bad)
    for args in ((good, bad), (bad, good)):
        code = cli_main(["diff", *map(str, args)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and str(bad) in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1


def test_a_trailing_blank_line_and_a_bom_are_accepted(good, tmp_path, capsys):
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(good.read_bytes() + b"\n")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + good.read_bytes())
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(good.read_bytes().replace(b"\n", b"\r\n"))
    for other in (blank, bom, crlf):
        assert cli_main(["diff", str(good), str(other)]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.startswith("identical: 3 steps")
    middle = tmp_path / "middle.jsonl"
    lines = good.read_text().split("\n")
    middle.write_text("\n".join(lines[:2] + [""] + lines[2:]))
    assert cli_main(["diff", str(good), str(middle)]) == 2
    assert "is corrupt: line 3 is empty" in capsys.readouterr().err


def test_a_folder_or_binary_file_is_not_a_log(good, tmp_path, capsys):
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    for other, message in ((tmp_path, "is a folder"), (tmp_path / "bin.jsonl", "not UTF-8")):
        assert cli_main(["diff", str(good), str(other)]) == 2
        assert message in capsys.readouterr().err


def test_logs_are_compared_as_streams(tmp_path):
    a = write_log(tmp_path / "a.jsonl", steps=50)
    b = write_log(tmp_path / "b.jsonl", steps=50, flip=40)
    reader = LogReader(a)
    first = next(iter(reader))
    assert first.step == 1 and reader.final is None  # one step read, not the whole file
    reader.close()
    streamed, loaded = compare_logs(a, b), compare_logs(read_log(a), read_log(b))
    assert streamed.to_json() == loaded.to_json()
    assert streamed.first_divergence.step == 40 and streamed.first_divergence.kind == "grad"
    short = write_log(tmp_path / "short.jsonl", steps=10)
    assert compare_logs(a, short).lengths == (50, 10) and "different lengths" in compare_logs(a, short).problem


# -- (12) --plot paths -----------------------------------------------------------------------

@pytest.mark.parametrize("given, written", [
    ("out.png", "out.png"), ("noext", "noext.png"), ("plots/", "plots/comparison.png"), ("out.svg", "out.svg"),
])
def test_plot_writes_the_path_it_reports(good, tmp_path, capsys, given, written):
    target = tmp_path / given
    if given.endswith("/"):
        target.mkdir()
    assert cli_main(["diff", str(good), str(good), "--plot", str(target)]) == 0
    err = capsys.readouterr().err
    expected = tmp_path / written
    assert expected.is_file() and f"plot written to {expected}" in err, err


def test_a_plot_format_matplotlib_cannot_write_is_one_line(good, tmp_path, capsys):
    assert cli_main(["diff", str(good), str(good), "--plot", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "out.txt" in err and ".png" in err
    assert not (tmp_path / "out.txt").exists()
