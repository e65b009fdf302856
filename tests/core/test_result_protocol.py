"""Issue 59 / 65: one verdict per result, by construction -- generated inputs behind every judging command.

Every judging result is a ``core.verdicts.Result``: its ``verdict`` a word of the vocabulary, its ``exit_code``
that word's, its ``to_json()`` stamped with both. The properties, on generated fake logs, studies and results:

- every command's exit code is the one its printed verdict word maps to (``diff``, ``locate``, ``verify``,
  ``compare``, ``val``, ``parity``, ``compile-check``, ``audit``; called in-process, the slow parts faked);
- ``yolo-det report`` shows the same word as the command's own JSON for the same input (the oracle: that JSON);
- the tracker payload's verdict and exit code equal the result's;
- a JSON names a better study only beside ``beyond seed noise``.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.cli import cli
from yolo_det.core import verdicts
from yolo_det.studies.study import Study, StudyRun

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
HEADER = {"yolo_det": "0.1.0", "torch": "2.14.1", "rank": 0, "world_size": 1, "command": ["train.py"]}
WINNERS = ("A better", "B better")
_counter = itertools.count()


def _fresh(tmp_path: Path) -> Path:
    """A new folder under ``tmp_path`` for one generated example."""
    folder = tmp_path / f"ex{next(_counter)}"
    folder.mkdir()
    return folder


def _log(path: Path, steps: int, flip_at: Optional[int] = None, final: bool = True) -> Path:
    """A fingerprint log of ``steps`` steps; ``flip_at``: that step's gradient digest differs; ``final``: the run
    finished (its final line written)."""
    from yolo_det.record.log import LogWriter

    writer = LogWriter(path, HEADER)
    for step in range(1, steps + 1):
        grad = ("1" if step == flip_at else "0") * 32
        writer.write_step(step, {"grad": (["w"], grad), "param": (["w"], "a" * 32)}, lr={"group0.lr": 0.01},
                          losses=[1.0 / step], ddp={"world_size": 1, "ok": True})
    if final:
        writer.write_final(steps, ["model.w"] if steps else [], "c" * 32 if steps else "", "finish")
    writer.close()
    return path


log_shapes = st.tuples(st.integers(0, 4), st.integers(0, 4), st.one_of(st.none(), st.integers(1, 4)),
                       st.booleans(), st.booleans())


def _log_pair(folder: Path, shape) -> List[Path]:
    steps_a, steps_b, flip_at, final_a, final_b = shape
    return [_log(folder / "a.jsonl", steps_a, final=final_a),
            _log(folder / "b.jsonl", steps_b, flip_at=flip_at, final=final_b)]


def _json(proc) -> Dict:
    return json.loads(proc.stdout)


def _assert_one(proc) -> Dict:
    """The command printed a JSON whose verdict is a word of the vocabulary and exited with that word's code."""
    data = _json(proc)
    assert list(data)[:2] == ["schema", "verdict"] and data["schema"] == verdicts.SCHEMA
    assert data["verdict"] in verdicts.EXIT_CODES
    assert proc.returncode == verdicts.exit_code(data["verdict"]), (data["verdict"], proc.returncode, proc.stderr)
    return data


def _sections(page: str):
    return re.findall(r'<section class="card" id="s\d+" data-kind="([^"]+)">.*?<span class="badge \w+">([^<]*)</span>'
                      r'</header><p class="summary">([^<]*)</p>(.*?)</section>', page, re.S)


# -- logs: diff, locate, the report ------------------------------------------------------------------
@SETTINGS
@given(shape=log_shapes)
def test_diff_of_generated_logs_exits_with_its_words_code_and_the_report_shows_that_word(shape, tmp_path):
    from yolo_det.proof.compare import compare_logs

    folder = _fresh(tmp_path)
    logs = _log_pair(folder, shape)
    proc = cli("diff", *logs, "--json")
    if proc.returncode == 2 and not proc.stdout:  # a log that cannot be read: an error, no verdict printed
        assert "error" in proc.stderr
        return
    data = _assert_one(proc)
    assert compare_logs(*logs).verdict == data["verdict"]  # the result itself says the same word
    assert cli("diff", *logs).returncode == proc.returncode  # the text mode exits the same
    located = cli("locate", *logs, "--json", "--", "true")
    if data["verdict"] != verdicts.DIFFERS:  # (a divergence would re-run the command)
        assert _assert_one(located)["verdict"] == data["verdict"]
    out = folder / "report.html"
    report = cli("report", *logs, "--out", out)
    if report.returncode == 0:  # the report refuses a log it cannot read (exit 2, nothing written)
        pairs = [s for s in _sections(out.read_text(encoding="utf-8")) if s[0] == "two runs"]
        assert pairs and pairs[0][1] == data["verdict"]


# -- verify: logs and run files -------------------------------------------------------------------------
@SETTINGS
@given(shape=log_shapes, rows=st.tuples(st.sampled_from(["0.5", "0.6", None]), st.sampled_from(["0.5", "0.6", None])),
       runs=st.integers(2, 3))
def test_verify_of_generated_runs_exits_with_its_words_code_and_the_tracker_gets_both(shape, rows, runs, tmp_path):
    from yolo_det import trackers
    from yolo_det.proof import verify
    from yolo_det.proof.artifacts import compare_run_dirs
    from yolo_det.proof.compare import compare_logs
    from yolo_det.proof.verify import RunResult, VerifyResult
    from yolo_det.trackers.publish import judged

    folder = _fresh(tmp_path)
    steps_a, steps_b, flip_at, final_a, final_b = shape
    made, folders = [], []
    for i in range(1, runs + 1):
        run = folder / f"run{i}"
        run.mkdir()
        row = rows[0] if i == 1 else rows[1]
        if row is not None:
            (run / "results.csv").write_text(f"epoch,mAP50\n0,{row}\n")
        log = _log(run / "fingerprint.jsonl", steps_a if i == 1 else steps_b, None if i == 1 else flip_at,
                   final_a if i == 1 else final_b)
        made.append(RunResult(i, 0, 1.0, log, run / "output.log", {0: log}, 0))
        folders.append(run)
    try:
        comparisons = [compare_logs(made[0].log, other.log) for other in made[1:]]
    except Exception:  # noqa: BLE001 - a log verify could not read: it stops before a verdict
        return
    result = VerifyResult(made, comparisons, [compare_run_dirs(folders[0], f) for f in folders[1:]])
    logged = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(verify, "verify", lambda *a, **k: result)
        m.setattr(trackers, "log_verdict", lambda command, code, res, runs_, echo=print: logged.append((code, res)))
        proc = cli("verify", "--json", "--workdir", folder / "w", "--", "python", "train.py")
        text = cli("verify", "--workdir", folder / "w", "--", "python", "train.py")
    data = _assert_one(proc)
    assert data["verdict"] == result.verdict and text.returncode == proc.returncode
    for code, res in logged:  # the tracker's word and code are the result's
        word, word_code, payload = judged(res, code)
        assert code == verdicts.exit_code(result.verdict) == word_code and word == result.verdict
        assert payload["verdict"] == result.verdict


# -- seed studies: compare, the report ----------------------------------------------------------------
def _study(folder: Path, values, tainted: Dict[int, List[str]], seeds) -> Path:
    runs = [StudyRun(i, s, {"run": s}, str(folder / f"run{i}.jsonl"), None, {"fitness": v, "val/box_loss": 1 - v},
                     {"fitness": v}, 0, "strict", tainted=tainted.get(i, []))
            for i, (s, v) in enumerate(zip(seeds, values), 1)]
    Study({"seeds": list(seeds)[:len(values)], "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]},
          runs).write(folder)
    return folder


value = st.sampled_from([0.1, 0.1, 0.2, 0.3, 0.5, 0.52, 0.9])
studies = st.tuples(st.lists(value, min_size=2, max_size=9), st.lists(value, min_size=2, max_size=9),
                    st.sampled_from([None, "A", "B"]), st.booleans(), st.sampled_from(["fitness", "val/box_loss"]))


@SETTINGS
@given(case=studies)
def test_compare_of_generated_studies_exits_with_its_words_code_and_the_report_shows_that_verdict(case, tmp_path):
    values_a, values_b, taint, same_seeds, metric = case
    folder = _fresh(tmp_path)
    seeds_a = tuple(range(11, 11 + len(values_a)))
    seeds_b = seeds_a if same_seeds else tuple(range(51, 51 + len(values_b)))
    reason = {1: ["resumed inexactly (attempt 1: no resume state)"]}
    a = _study(folder / "a", values_a, reason if taint == "A" else {}, seeds_a)
    b = _study(folder / "b", values_b, reason if taint == "B" else {}, seeds_b)
    proc = cli("compare", a, b, "--metric", metric, "--json")
    data = _assert_one(proc)
    assert cli("compare", a, b, "--metric", metric).returncode == proc.returncode
    for part in [data, data["result"], *data["others"]]:  # a winner only beside beyond seed noise
        if part["verdict"] != verdicts.BEYOND_NOISE:
            assert part["better"] is None and not any(w in str(part["statement"]) for w in WINNERS)
    if taint:
        assert data["verdict"] == verdicts.NOT_PROVEN and f"study {taint} run 1" in data["statement"]
    out = folder / "report.html"
    assert cli("report", a, b, "--metric", metric, "--out", out).returncode == 0
    (_, badge, summary, body), = [s for s in _sections(out.read_text(encoding="utf-8"))
                                  if s[0] == "seed studies compared"]
    shown = data["statement"] if data["verdict"] == verdicts.BEYOND_NOISE and data["better"] else data["verdict"]
    assert badge == shown
    assert verdicts.exit_code(data["verdict"]) == verdicts.exit_code(verdicts.normalize(badge))
    if data["verdict"] != verdicts.BEYOND_NOISE:
        assert not any(w in summary + body for w in WINNERS)


# -- val, parity, compile-check, audit: generated results behind the CLI -----------------------------------
metric = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5]))


@SETTINGS
@given(training=st.tuples(metric, metric), yours=st.tuples(metric, metric))
def test_val_with_a_command_exits_with_its_words_code(training, yours, tmp_path):
    from yolo_det.evaluation.logged import Explanation
    from yolo_det.integrations import revalidation

    def numbers(pair):
        return {k: v for k, v in zip(("mAP50", "mAP50-95"), pair) if v is not None}

    result = Explanation("last", 0, numbers(training), numbers(yours), [], [])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(revalidation, "explain", lambda *a, **k: result)
        proc = cli("val", tmp_path, "--json", "--", "yolo", "val")
        text = cli("val", tmp_path, "--", "yolo", "val")
    saturated = len(set(training + yours)) == 1 and training[0] in (0.0, 1.0)  # all 0 or all 1: no information
    expected = (verdicts.NOT_PROVEN if None in training + yours or saturated else  # the oracle: the numbers themselves
                verdicts.IDENTICAL if training == yours else verdicts.DIFFERS)
    assert _assert_one(proc)["verdict"] == expected and text.returncode == proc.returncode


@SETTINGS
@given(identical=st.sampled_from([True, False, None]), decisive=st.booleans())
def test_val_of_a_run_exits_with_its_words_code(identical, decisive, tmp_path):
    from yolo_det.evaluation.logged import Difference, Verdict
    from yolo_det.integrations import revalidation

    differences = [Difference("predictions" if decisive else "environment", "differ", None, None)]
    result = Verdict(identical, "final", 1, {"mAP50": 0.5}, {"mAP50": 0.5}, differences, [])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(revalidation, "reproduce", lambda *a, **k: result)
        proc = cli("val", tmp_path, "--json")
    assert _assert_one(proc)["verdict"] == result.verdict


@SETTINGS
@given(word=st.sampled_from(verdicts.VERDICTS))
def test_parity_exits_with_its_words_code(word, tmp_path):
    from yolo_det.evaluation import parity

    report = parity.ParityReport("m.pt", "m.onnx", "onnx", {"name": "onnxruntime", "settings": {}}, 1, (64, 64),
                                 verdict=word)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(parity, "check", lambda *a, **k: report)
        proc = cli("parity", "m.pt", "m.onnx", "--data", "d", "--json")
    assert _assert_one(proc)["verdict"] == word and proc.returncode == report.exit_code


@SETTINGS
@given(word=st.sampled_from([verdicts.IDENTICAL, verdicts.DIFFERS, verdicts.NOT_PROVEN]))
def test_compile_check_exits_with_its_words_code(word, tmp_path, monkeypatch):
    from yolo_det.proof import compiled_eager

    (tmp_path / "tiny_proto_model.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(2, 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(compiled_eager, "compare", lambda model, x: {"identical": word == verdicts.IDENTICAL,
                                                               "verdict": word, "graphs": 1})
        proc = cli("compile-check", "tiny_proto_model:build", "--input", "1,2", "--json", cwd=tmp_path)
    assert _assert_one(proc)["verdict"] == word


@SETTINGS
@given(ops=st.booleans(), probes=st.lists(st.booleans(), max_size=2))
def test_audit_exits_with_its_words_code(ops, probes, tmp_path, monkeypatch):
    from yolo_det.strict import audit
    from yolo_det.strict.audit import AuditResult, Finding

    (tmp_path / "tiny_audit_model.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(2, 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = AuditResult("2.5", ops=[Finding("aten::index_put_", "k", ["m"], "fix")] if ops else [],
                         probes=[{"op": "f", "device": "cpu", "identical": same, "statement": "s"} for same in probes])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(audit, "audit_model", lambda *a, **k: result)
        proc = cli("audit", "--model", "tiny_audit_model.py:build", "--imgsz", "16", "--json", cwd=tmp_path)
    data = _assert_one(proc)
    assert data["verdict"] == (verdicts.FINDING if ops or not all(probes) else verdicts.CLEAN)


# -- every result class: the protocol itself ---------------------------------------------------------------
def _results(tmp_path: Path):
    """One instance of each judging result class, built from small generated-like inputs."""
    from yolo_det.evaluation.logged import Explanation, Verdict
    from yolo_det.evaluation.parity import ParityReport
    from yolo_det.proof.artifacts import ArtifactComparison, TableComparison
    from yolo_det.proof.checkpoint import CheckpointComparison
    from yolo_det.proof.compare import compare_logs
    from yolo_det.proof.run_dirs import RunComparison
    from yolo_det.proof.search import SearchComparison
    from yolo_det.strict.audit import AuditResult
    from yolo_det.strict.probe import ProbeResult
    from yolo_det.studies.compare import compare_studies
    from yolo_det.studies.study import load_study

    logs = _log_pair(tmp_path, (2, 2, None, True, True))
    a = load_study(_study(tmp_path / "sa", [0.1, 0.2, 0.3], {}, (1, 2, 3)))
    b = load_study(_study(tmp_path / "sb", [0.5, 0.6, 0.7], {2: ["ran under warn"]}, (1, 2, 3)))
    comparison = compare_studies(a, b)
    return [compare_logs(*logs), TableComparison(("a", "b"), rows=1), ArtifactComparison(("a", "b")),
            SearchComparison(("a", "b"), (1, 1), values=2), RunComparison(("a", "b"), (None, None)),
            CheckpointComparison(("a", "b"), {"model": 1}), comparison, comparison.metric,
            ParityReport("m", "e", "onnx", {}, 1, None, verdict="agree"),
            Verdict(True, "final", 1, {}, {}, [], []), Explanation("last", 0, {}, {}, [], []),
            AuditResult("2.5"), ProbeResult("f", "cpu", 2, True, True, 0.0)]


def test_every_judging_result_implements_the_protocol(tmp_path):
    from yolo_det.proof.resume_at import ResumeResult
    from yolo_det.proof.verify import VerifyResult

    for cls in (VerifyResult, ResumeResult):
        assert issubclass(cls, verdicts.Judged)
    for result in _results(tmp_path):
        assert isinstance(result, verdicts.Result), type(result)
        assert result.verdict in verdicts.EXIT_CODES, (type(result), result.verdict)
        assert result.exit_code == verdicts.exit_code(result.verdict)
        document = result.to_json()
        assert list(document)[:2] == ["schema", "verdict"] and document["verdict"] == result.verdict


def test_by_code_names_each_codes_most_general_word_whatever_the_order_of_the_vocabulary():
    assert [verdicts.by_code(c) for c in (0, 1, 2, 3)] == [verdicts.NO_VERDICT, verdicts.DIFFERS,
                                                         verdicts.INCONCLUSIVE, verdicts.NOT_PROVEN]
    assert verdicts.by_code(7) == verdicts.INCONCLUSIVE
    assert all(verdicts.exit_code(verdicts.by_code(c)) == c for c in set(verdicts.EXIT_CODES.values()))
    assert not math.isnan(verdicts.SCHEMA)
