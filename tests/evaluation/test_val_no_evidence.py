"""Equal numbers that could not have differed are no evidence: ``yolo-det val`` says "not proven" (exit 3) for them.

``yolo-det val RUN_DIR -- yolo val model=best.onnx ...`` on a short run whose every metric is 0 in both evaluations
said ``"verdict": "identical", "reproduced": true`` while the settings it listed as different (rect, batch) had no
measured effect: no prediction found an object, so nothing could tell rect from square. The same for a re-run whose
every image's prediction set is empty. The oracle: the verdict word from the numbers alone, computed here (equal
mAP50 and mAP50-95 on both sides, and not every box metric one constant); the property: the command's exit code is
the one its printed verdict word maps to, and "identical" only where the oracle says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yolo_det.cli import main as cli_main
from yolo_det.core import verdicts

KEYS = ("precision", "recall", "mAP50", "mAP50-95")
RECT = {"setting": "rect", "training": True, "yours": False, "effect": None, "alignable": False}
BATCH = {"setting": "batch_size", "training": 8, "yours": 1, "effect": None, "alignable": False}


def _explanation(training, yours, differences=(RECT, BATCH)):
    from yolo_det.evaluation.logged import Explanation

    return Explanation("best", 2, dict(training), dict(yours), [dict(d) for d in differences], [])


def _oracle(training, yours) -> str:
    """The verdict word from the numbers alone."""
    if any(side.get(k) is None for side in (training, yours) for k in ("mAP50", "mAP50-95")):
        return verdicts.NOT_PROVEN
    same = all(training[k] == yours[k] or (math.isnan(training[k]) and math.isnan(yours[k]))
               for k in ("mAP50", "mAP50-95"))
    if not same:
        return verdicts.DIFFERS
    values = [v for side in (training, yours) for k, v in side.items() if k in KEYS]
    one = {"nan" if math.isnan(v) else v for v in values}
    constant = len(one) == 1 and one <= {"nan", 0.0, 1.0}  # nothing found, nothing missed, or no number at all
    return verdicts.NOT_PROVEN if constant else verdicts.IDENTICAL


def _run_folder(tmp_path: Path) -> Path:
    run_dir = tmp_path / "exp"
    (run_dir / "weights").mkdir(parents=True, exist_ok=True)
    return run_dir


def _val(monkeypatch, capsys, tmp_path, result, *options):
    """``yolo-det val RUN_DIR [--json] -- yolo val ...`` with the evaluation replaced by ``result``."""
    from yolo_det.integrations import revalidation

    monkeypatch.setattr(revalidation, "explain", lambda *_a, **_k: result)
    code = cli_main(["val", str(_run_folder(tmp_path)), *options, "--", "yolo", "val", "model=best.onnx"])
    return code, capsys.readouterr().out


def test_all_zero_metrics_with_unmeasured_differences_are_not_proven(tmp_path, monkeypatch, capsys):
    """The issue's case: every metric 0 on both sides, rect and batch differ with no measured effect: exit 3,
    ``verdict: "not proven"``, ``reproduced`` null (the numbers are equal: ``numbers_equal``), the reason named."""
    zeros = {k: 0.0 for k in KEYS}
    code, out = _val(monkeypatch, capsys, tmp_path, _explanation(zeros, dict(zeros)), "--json")
    result = json.loads(out)
    assert code == verdicts.exit_code(verdicts.NOT_PROVEN) == 3
    assert result["verdict"] == verdicts.NOT_PROVEN and result["reproduced"] is None and result["numbers_equal"]
    assert result["not_proven"] is True and "is 0 in both" in result["not_proven_why"][0]
    code, out = _val(monkeypatch, capsys, tmp_path, _explanation(zeros, dict(zeros)))
    assert code == 3 and "not proven" in out and "reproduces" not in out, out


def test_equal_numbers_that_vary_are_still_identical(tmp_path, monkeypatch, capsys):
    numbers = {"precision": 0.6, "recall": 0.4, "mAP50": 0.5, "mAP50-95": 0.25}
    code, out = _val(monkeypatch, capsys, tmp_path, _explanation(numbers, dict(numbers)), "--json")
    assert code == 0 and json.loads(out)["verdict"] == verdicts.IDENTICAL and json.loads(out)["reproduced"] is True


metric = st.one_of(st.sampled_from([0.0, 1.0, 0.5, math.nan]), st.floats(0, 1))
metrics = st.dictionaries(st.sampled_from(KEYS), metric, min_size=0, max_size=4)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(training=metrics, yours=metrics, same=st.booleans())
def test_the_exit_code_is_the_printed_verdicts_and_identical_only_where_the_numbers_say_so(
        tmp_path_factory, monkeypatch, capsys, training, yours, same):
    """Random numbers (ties, zeros, ones, NaN, missing keys; half the time the same on both sides): the JSON's
    verdict is the oracle's, the exit code the verdict word's, and no ``reproduced: true`` beside "not proven"."""
    if same:
        yours = dict(training)
    tmp_path = tmp_path_factory.mktemp("val")
    code, out = _val(monkeypatch, capsys, tmp_path, _explanation(training, yours), "--json")
    result = json.loads(out)
    assert result["verdict"] == _oracle(training, yours), (training, yours, result)
    assert code == verdicts.exit_code(result["verdict"])
    assert result["reproduced"] is not True or result["verdict"] == verdicts.IDENTICAL


# -- a re-run whose every image's prediction set is empty -------------------------------------------------------
def _compare(tmp_path: Path, boxes, metrics):
    from yolo_det.evaluation import logged
    from yolo_det.record.log import ValRecord

    run_dir = _run_folder(tmp_path)
    settings_ = {"split": "val", "batch_size": 8, "imgsz": 64}
    names = ["a.jpg", "b.jpg"]

    def record():
        return ValRecord(epoch=1, after_step=4, names=list(names), digests="00" * 32 * len(names),
                         metrics=dict(metrics), settings=dict(settings_), boxes=list(boxes))

    run = logged.Run(path=run_dir, release="ultralytics", report={}, log=None, validations=[record()])
    selection = logged.Selection("last", 1, record(), None, run_dir / "weights" / "last.pt", None)
    return logged.compare(run, selection, record(), {"sidecar": True}, {})


@pytest.mark.parametrize("boxes, metrics, verdict", [
    ([0, 0], {"precision": 0.0, "recall": 0.0, "mAP50": 0.0, "mAP50-95": 0.0}, "not proven"),
    ([3, 0], {"precision": 0.0, "recall": 0.0, "mAP50": 0.0, "mAP50-95": 0.0}, "identical"),
    ([0, 0], {"precision": 0.0, "recall": 0.0, "mAP50": 0.0, "mAP50-95": 0.0, "fitness": 0.0}, "not proven"),
])
def test_equal_empty_prediction_sets_are_not_proven(tmp_path, boxes, metrics, verdict):
    """Every image's prediction set empty in both validations, every metric 0: the digests are equal because there
    is nothing in them; "not proven", naming why. The same metrics with boxes (found nothing, but predicted):
    equal predictions are evidence, "identical"."""
    result = _compare(tmp_path, boxes, metrics)
    assert result.verdict == verdict, (result.verdict, result.notes, [d.message for d in result.differences])
    if verdict == "not proven":
        assert any("empty" in n for n in result.notes) and "could not have failed" in result.describe()[0]
