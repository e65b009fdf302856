"""Issue 59, item 6: ``verify`` printed ``"verdict": "differs"`` and exited 2, and a tracker recorded both.

Logs of unequal length whose common steps are equal cannot be compared (``inconclusive``, exit 2), but the run
files (``results.csv``, checkpoints) were compared and differ: a difference found in what *was* compared is a
finding (docs/exit-codes.md: "missing evidence never hides one"), so the verdict is ``differs`` and the exit 1 --
in the JSON, the exit code and the tracker alike, all from the result's one word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import cli
from support.builders import tiny_log
from yolo_det.core import verdicts


def _result(tmp_path: Path, steps=(3, 5), rows=("0.5", "0.6")):
    from yolo_det.proof.artifacts import compare_run_dirs
    from yolo_det.proof.compare import compare_logs
    from yolo_det.proof.verify import RunResult, VerifyResult

    runs, folders = [], []
    for i, (n, row) in enumerate(zip(steps, rows), 1):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        (folder / "results.csv").write_text(f"epoch,mAP50\n0,{row}\n")
        log = tiny_log(folder / "fingerprint.jsonl", n)
        runs.append(RunResult(i, 0, 1.0, log, folder / "output.log", {0: log}, n))
        folders.append(folder)
    comparison = compare_logs(runs[0].log, runs[1].log)
    return VerifyResult(runs, [comparison], [compare_run_dirs(*folders)])


@pytest.fixture
def unequal(tmp_path, monkeypatch):
    """verify's runs: logs of 3 and 5 equal steps, results.csv that differ; the trackers' calls recorded."""
    from yolo_det import trackers
    from yolo_det.proof import verify

    result = _result(tmp_path)
    monkeypatch.setattr(verify, "verify", lambda *a, **k: result)
    logged = []
    monkeypatch.setattr(trackers, "log_verdict", lambda command, code, res, runs, echo=print:
                        logged.append((command, code, res)))
    return result, logged


def test_the_logs_alone_are_inconclusive_and_the_run_files_differ(unequal):
    result, _ = unequal
    assert result.comparison.verdict == verdicts.INCONCLUSIVE and result.comparison.problem
    assert result.artifacts_differ is not None


def test_verify_json_word_and_exit_code_are_one(unequal, tmp_path):
    proc = cli("verify", "--json", "--workdir", tmp_path / "w", "--", "python", "train.py")
    data = json.loads(proc.stdout)
    assert data["verdict"] == verdicts.DIFFERS
    assert proc.returncode == verdicts.exit_code(data["verdict"]) == 1


def test_verify_text_exits_with_the_finding_and_says_why(unequal, tmp_path):
    proc = cli("verify", "--workdir", tmp_path / "w", "--", "python", "train.py")
    assert proc.returncode == 1
    assert "diverged: the files the runs wrote differ" in proc.stdout
    assert "results.csv" in proc.stdout


def test_the_tracker_records_the_results_word_and_its_code(unequal, tmp_path):
    from yolo_det.trackers.publish import judged

    cli("verify", "--json", "--workdir", tmp_path / "w", "--", "python", "train.py")
    (command, code, res), = unequal[1]
    word = judged(res, code)[0]
    assert command == "verify" and word == verdicts.DIFFERS and code == verdicts.exit_code(word)


def test_unequal_logs_with_equal_run_files_stay_inconclusive(tmp_path, monkeypatch):
    from yolo_det.proof import verify

    result = _result(tmp_path, rows=("0.5", "0.5"))
    monkeypatch.setattr(verify, "verify", lambda *a, **k: result)
    proc = cli("verify", "--json", "--workdir", tmp_path / "w", "--", "python", "train.py")
    data = json.loads(proc.stdout)
    assert data["verdict"] == verdicts.INCONCLUSIVE and proc.returncode == 2
    assert "cannot decide" in proc.stderr
