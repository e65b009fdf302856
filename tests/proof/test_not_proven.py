"""One rule for every verdict (issue 36): "identical" / "reproduced" only when the evidence that decides it was
compared; otherwise the command says what it compared, that the claim is not proven, and exits 3.

Each comparing command is tested as a class, three ways on the same kind of input: the decisive evidence
present and equal (exit 0), present and different (exit 1, the negative control), and missing with
everything that was there equal (exit 3, the output naming what was compared). No training: the inputs are
written directly (logs with :class:`LogWriter`, checkpoints with ``torch.save``, run and search folders as
the releases write them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Dict

import pytest

from yolo_det.cli import main as cli_main
from yolo_det.cli.exit_codes import EXIT_FINDING, EXIT_NOT_PROVEN, EXIT_OK
from support.builders import checkpoint, run_folder, tiny_log



def _checkpoint(path: Path, tensors: bool, value: float = 1.0) -> Path:
    """A checkpoint as the releases save one ({'model': ..., 'epoch': ...}), or one without any tensor."""
    import torch

    model = {"conv.weight": torch.full((2, 3), value), "conv.bias": torch.zeros(2)} if tensors else None
    return checkpoint(path, model, best_fitness=0.5)


_log = tiny_log


def _run_folder(path: Path, weights: bool, lr0: float = 0.01, value: float = 1.0) -> Path:
    """A YOLOv5 run folder: opt.yaml and hyp.yaml, and its weights when ``weights``."""
    hyp = {"lr0": lr0, "mosaic": 1.0}
    run_folder(path, opt={"epochs": 2, "hyp": hyp}, hyp=hyp)
    if weights:
        _checkpoint(path / "weights" / "last.pt", tensors=True, value=value)
    return path


def _search(path: Path, rows: int, lr0: float = 0.01) -> Path:
    """A YOLOv5 --evolve folder with ``rows`` generations (0: the header only)."""
    path.mkdir(parents=True)
    head = "metrics/mAP_0.5,lr0\n"
    (path / "evolve.csv").write_text(head + "".join(f"0.5,{lr0 + i}\n" for i in range(rows)))
    return path


# each form: (A, B) for "equal with evidence", "differs", "evidence missing"; and what the output must name
FORMS: Dict[str, Callable[[Path, str], tuple]] = {
    "run folders": lambda t, case: (
        _run_folder(t / "a", weights=case != "missing"),
        _run_folder(t / "b", weights=case != "missing", value=2.0 if case == "differs" else 1.0)),
    "logs": lambda t, case: (
        _log(t / "a.jsonl", 0 if case == "missing" else 3),
        _log(t / "b.jsonl", 0 if case == "missing" else 3, flip=case == "differs")),
    "checkpoints": lambda t, case: (
        _checkpoint(t / "a.pt", tensors=case != "missing"),
        _checkpoint(t / "b.pt", tensors=case != "missing", value=2.0 if case == "differs" else 1.0)),
    "searches": lambda t, case: (
        _search(t / "a", 0 if case == "missing" else 2),
        _search(t / "b", 0 if case == "missing" else 2, lr0=0.02 if case == "differs" else 0.01)),
}
#: what the "not proven" output names as compared / not compared, per form
NAMED = {
    "run folders": ("settings (hyp.yaml, opt.yaml)", "weights (weights/last.pt, weights/best.pt)"),
    "logs": ("0 steps", "0 tensors"),
    "checkpoints": ("no tensor", "2 training values compared"),
    "searches": ("0 generations", "0 judged values"),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("case, code", [("equal", EXIT_OK), ("differs", EXIT_FINDING), ("missing", EXIT_NOT_PROVEN)])
def test_diff_says_not_proven_and_exits_3_when_the_deciding_evidence_is_missing(tmp_path, capsys, form, case, code):
    a, b = FORMS[form](tmp_path, case)
    assert cli_main(["diff", str(a), str(b)]) == code
    out = capsys.readouterr().out
    first = out.splitlines()[0] if out else ""
    if case == "missing":
        assert first.startswith("not proven") and "identical:" not in out, out
        for name in NAMED[form]:
            assert name in out, (name, out)
    elif case == "equal":
        assert "identical" in out and "not proven" not in out, out
    assert cli_main(["diff", str(a), str(b), "--json"]) == code
    result = json.loads(capsys.readouterr().out)
    assert result["identical"] is (case == "equal")
    assert result["verdict"] == {"equal": "identical", "differs": "differs", "missing": "not proven"}[case]


def test_run_folders_with_matching_settings_only_name_what_was_compared(tmp_path, capsys):
    """The review's case: two folders holding only matching opt.yaml and hyp.yaml."""
    a, b = _run_folder(tmp_path / "a", weights=False), _run_folder(tmp_path / "b", weights=False)
    assert cli_main(["diff", str(a), str(b), "--json"]) == EXIT_NOT_PROVEN
    result = json.loads(capsys.readouterr().out)
    assert result["compared"] == ["settings (hyp.yaml, opt.yaml)"]
    assert result["not_compared"] == ["weights (weights/last.pt, weights/best.pt)", "results.csv"]
    # a setting that differs is a finding whatever else is missing
    c = _run_folder(tmp_path / "c", weights=False, lr0=0.02)
    assert cli_main(["diff", str(a), str(c)]) == EXIT_FINDING


def test_logs_without_a_common_step_do_not_call_zero_steps_identical(tmp_path, capsys):
    a, b = _log(tmp_path / "a.jsonl", 0), _log(tmp_path / "b.jsonl", 3)
    assert cli_main(["diff", str(a), str(b)]) == 2  # different lengths: cannot be compared (unchanged meaning)
    err = capsys.readouterr().err
    assert "no step in common" in err and "first 0 steps are identical" not in err


# -- verify: the runs' logs decide; files missing in both runs are said ------------------------------------------

WRITER = """import os, sys
from pathlib import Path
from yolo_det.record.log import LogWriter
steps = int(sys.argv[1])
run_dir = Path(sys.argv[2]) / os.environ["YOLO_DET_VERIFY_RUN"]
w = LogWriter(os.environ["YOLO_DET_FINGERPRINT"], {"torch": "x", "rank": 0, "world_size": 1, "command": ["t"]})
for s in range(1, steps + 1):
    w.write_step(s, {"param": (["w"], "a" * 32)}, lr={"lr": 0.1}, losses=[1.0], ddp={"world_size": 1, "ok": True})
if len(sys.argv) > 3:  # write results.csv, different per run when asked
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.csv").write_text("epoch,metrics/mAP_0.5\\n0,0.5" + os.environ["YOLO_DET_VERIFY_RUN"] * (
        sys.argv[3] == "differ") + "\\n")
w.write_final(steps, ["model.w"] if steps else [], "c" * 32 if steps else "", "finish", run_dir=str(run_dir))
w.close()
"""


@pytest.mark.parametrize("steps, files, code, named", [
    (0, None, EXIT_NOT_PROVEN, "not proven: the logs hold no training step"),
    (3, None, EXIT_OK, "not compared (missing in both runs): weights/last.pt, weights/best.pt, results.csv"),
    (3, "differ", EXIT_FINDING, "results.csv: differs"),  # the negative control: a run file differs
])
def test_verify_decides_on_the_logs_and_exits_3_when_they_hold_nothing(tmp_path, train_env, steps, files, code,
                                                                       named):
    from conftest import run
    from support.verify import script_env

    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    cmd = [sys.executable, "-m", "yolo_det", "verify", "--workdir", str(tmp_path / "w"), "--", sys.executable,
           str(script), str(steps), str(tmp_path / "out")] + ([files] if files else [])
    proc = run(cmd, env=script_env(train_env))
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert named in proc.stdout, proc.stdout


# -- val: a bit-for-bit proof exits 0; results.csv's printed digits are a statement, exit 3 ------------------------

@pytest.mark.parametrize("release, text, value, match", [
    ("yolov5", "0.41203", 0.412034, True),  # '%.5g': the same 5 significant digits
    ("yolov5", "0.41203", 0.41204, False),  # within 1e-4 relative (the old tolerance), not the printed digits
    ("yolov5", "0.1", 0.1000049, True),  # '%g' drops trailing zeros: 0.1 is 0.10000
    ("yolov5", "0.1", 0.100006, False),
    ("yolov5", "1.2346e-05", 1.23456e-05, True),
    ("ultralytics", "0.41203", 0.4120349, True),  # round(x, 5)
    ("ultralytics", "0.41203", 0.4120351, False),
    ("ultralytics", "0.5", 0.500004, True),
    ("ultralytics", "0.5", 0.50001, False),
    ("other", "0.412", 0.4124, True),  # unknown writer: half a unit of the last printed digit
    ("other", "0.412", 0.4126, False),
    ("yolov5", "nan", float("nan"), True),
    ("yolov5", "0.5", float("nan"), False),
])
def test_printed_digits_are_the_files_own_rounding(release, text, value, match):
    from yolo_det.evaluation.logged import printed_match

    assert printed_match(release, text, value) is match


def _csv_run(tmp_path: Path, text: str):
    """A YOLOv5 run without a fingerprint log, its results.csv row printing mAP50 as ``text``."""
    from yolo_det.evaluation import logged

    run_dir = tmp_path / "exp"
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "opt.yaml").write_text("epochs: 1\n")
    (run_dir / "weights" / "last.pt").write_bytes(b"")
    (run_dir / "results.csv").write_text("epoch,metrics/precision,metrics/mAP_0.5\n0,0.5," + text + "\n")
    run = logged.find_run(run_dir)
    assert run.log is None
    return run, logged.select(run, "last")


@pytest.mark.parametrize("rerun, code, verdict", [
    (0.412034, EXIT_NOT_PROVEN, "matches results.csv to its printed digits"),
    (0.41204, EXIT_FINDING, "differs from the logged record"),
])
def test_val_without_a_log_is_a_statement_and_exits_3(tmp_path, monkeypatch, capsys, rerun, code, verdict):
    from yolo_det.evaluation import logged
    from yolo_det.integrations import revalidation
    from yolo_det.record.log import ValRecord

    run, selection = _csv_run(tmp_path, "0.41203")
    record = ValRecord(epoch=0, after_step=1, names=[], digests="", metrics={"precision": 0.5, "mAP50": rerun},
                       best=None, stop=None)

    def reproduce(*_args, **_kwargs):
        return logged.compare(run, selection, record, {}, {})

    monkeypatch.setattr(revalidation, "reproduce", reproduce)
    assert cli_main(["val", str(run.path)]) == code
    out = capsys.readouterr().out
    assert verdict in out and "identical" not in out, out
    if code == EXIT_NOT_PROVEN:
        assert "not proven" in out and "mAP50 0.41203" in out and "precision 0.5" in out
    assert cli_main(["val", str(run.path), "--json"]) == code
    result = json.loads(capsys.readouterr().out)
    assert result["identical"] is None if code == EXIT_NOT_PROVEN else result["identical"] is not True


def test_val_with_nothing_to_compare_is_not_proven(tmp_path):
    """No log and no metric the re-run reports: never a match, never identical."""
    from yolo_det.evaluation import logged
    from yolo_det.record.log import ValRecord

    run, selection = _csv_run(tmp_path, "0.41203")
    record = ValRecord(epoch=0, after_step=1, names=[], digests="", metrics={}, best=None, stop=None)
    verdict = logged.compare(run, selection, record, {}, {})
    assert verdict.verdict == "not proven" and not verdict.printed
    assert "not proven: nothing to compare" in verdict.describe()[0]
