"""Every reader of a JSON input, fed generated malformed files (issue 59, item 8): exit 2 with a message that names
the file, never a traceback, and never a finding's code from a crash.

The readers: ``determinism.json`` in a run folder, a fingerprint log's header, ``study.json``, and the JSON that
``parity``, ``val --evaluator coco``, ``diff``, ``diff RUN_A RUN_B`` and ``compare`` print with ``--json``, as
``yolo-det report``, ``yolo-det diff`` and ``yolo-det seeds compare`` read them. Each starts from a valid document and
changes one node of it (a wrong type, a list for a dict, a missing key, NaN, infinity, a huge number) or its text
(truncated, empty, binary garbage). Every command runs in this process (``support.cli.cli``): a crash surfaces as the
exception itself (before issue 59) or as exit 70, and fails the test with the generated input shown.

Each property runs :data:`EXAMPLES` examples, derandomized (the same ones on every machine), in 1-6 s. On the code
before the fix every one of the nine failed: hypothesis reported 5 distinct failures for ``determinism.json``, 2 for
the header, 4 for ``study.json``, 4 to 8 for each saved kind (AttributeError on a list or bool for a mapping,
TypeError on None in the waterfall's sum, OverflowError on infinity as a count, ...).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from support.builders import study as _study
from support.cli import cli

from yolo_det.cli.exit_codes import EXIT_INTERNAL, EXIT_USAGE
from yolo_det.evaluation.parity import ParityReport
from yolo_det.proof.compare import Comparison, Divergence
from yolo_det.record.log import LogWriter

#: examples per property: each is one or two in-process commands (~10-60 ms); together a few seconds per test
EXAMPLES = 60
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

WRONG = [None, True, False, 0, -1, 7, 2 ** 70, 0.5, float("nan"), float("inf"), -float("inf"), "", "x", "strict",
         [], [1, 2], ["a"], [None], [{}], [[1]], {}, {"a": 1}, {"": None}]

# -- valid documents ------------------------------------------------------------------------------------------------
REPORT = {"schema": 1, "yolo_det": "0.9.0", "mode": "strict", "mode_source": "env YOLO_DET_MODE",
          "settings": {"mode": "strict", "backward_mode": "strict"}, "seed": 0,
          "seeds": {"run": 0, "init": 0, "order": 0, "augment": 0}, "rank": 0, "steps": 3,
          "flags_applied": {"deterministic_algorithms": True}, "flags_now": {"deterministic_algorithms": True},
          "violations": {"ops": [{"op": "index_put_", "count": 2, "first_step": 1, "action": "warned"}], "total": 2,
                         "notes": ["a note"]},
          "replacements": ["nn.Upsample"], "opaque_kernels": {"found": []},
          "environment": {"python": "3.12.1", "torch": "2.14.1", "gpus": [{"name": "H100"}], "cuda_available": True,
                          "platform": "Linux", "packages": {"ultralytics": "8.4.190"}, "cuda": "12.8"},
          "ultralytics": {"version": "8.4.190", "compile": False, "train_loader": {"drop_last": False}},
          "compile": {"calls": 0}}
HEADER = {"yolo_det": "0.9.0", "torch": "2.14.1", "python": "3.12.1", "host": "h", "rank": 0, "world_size": 1,
          "command": ["train.py", "--epochs", "1"], "mode": "strict", "seed": 0,
          "seeds": {"run": 0, "init": 0, "order": 0, "augment": 0}, "settings": {"mode": "strict"},
          "threads": 4, "packages": {"torch": "2.14.1"}, "env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
          "files": [{"index": 1, "arg": "data.yaml", "digest": "ab" * 16}], "gpus": []}
GAP_CHAIN = {"start": {"mAP50-95": 0.40, "mAP50": 0.6, "release_logged": {"mAP50-95": 0.401}},
             "steps": [{"rule": "area", "what": "object area", "release": "box", "coco": "segment", "same": False,
                        "change": {"mAP50-95": 0.01, "mAP50": 0.0}},
                       {"rule": "maxdets", "what": "detections", "release": 300, "coco": 100, "same": True,
                        "change": {"mAP50-95": 0.0}}],
             "end": {"mAP50-95": 0.41}, "coco_api": {"mAP50-95": 0.41}, "residual": {"mAP50-95": 0.0},
             "ends_at_coco_api": True}




def _log(path: Path, header=HEADER, steps: int = 3) -> Path:
    writer = LogWriter(path, header)
    for step in range(1, steps + 1):
        writer.write_step(step, {"grad": (["w", "b"], "0" * 64), "param": (["w", "b"], "a" * 64)},
                          lr={"group0.lr": 0.01 * step}, losses=[4.0 - step], items=[[0.1, 0.2, 0.3]])
    writer.write_final(steps, ["model.w"], "c" * 32, "finish")
    writer.close()
    return path


def _run_folder(folder: Path, report: Any = REPORT, text: str = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "determinism.json").write_text(text if text is not None else json.dumps(report))
    (folder / "results.csv").write_text("epoch,train/box_loss,metrics/mAP50-95(B)\n1,1.5,0.2\n")
    _log(folder / "fingerprint.jsonl")
    return folder


def _parity() -> dict:
    report = ParityReport("best.pt", "best.onnx", "onnx", {"name": "onnxruntime", "settings": {"version": "1.20"},
                                                           "repeatable": True}, 8, (128, 128),
                          raw=[{"output": "output0", "shape": [1, 84, 336], "max_abs": 2e-5, "where_abs": [0, 1, 2],
                                "max_rel": 1e-6, "where_rel": [0, 1, 2], "within": True, "atol": 1e-4}],
                          boxes={"matched": 40, "only_pt": 2, "only_export": 1, "max_conf_diff": 0.01},
                          metrics={"pt_matched": {"map50_95": 0.412, "map50": 0.61},
                                   "export_matched": {"map50_95": 0.398, "map50": 0.6}},
                          causes=[{"cause": "fp16", "detail": "fp16 weights", "metric_change": {"map50_95": 0.014}}],
                          verdict="differs", reasons=["output1 beyond tolerance"])
    return json.loads(json.dumps(report.to_json(), default=str))


def _diff() -> dict:
    steps = 5
    losses = [4.0 - 0.1 * i for i in range(steps)]
    data = Comparison(identical=False, steps=steps, tensors=100 * steps,
                      first_divergence=Divergence(4, "grad", "model.0.conv.weight"), lengths=(steps, steps),
                      differing=[0, 0, 0, 2, 7], losses=(losses, losses)).to_json()
    data["locate"] = {"step": 4, "phase": "backward", "op": "aten.index_put_", "module": "model.24"}
    data["causes"] = [{"class": "config", "what": "flags", "message": "flags differ"}]
    return json.loads(json.dumps(data, default=str))


def _compare(tmp: Path) -> dict:
    from yolo_det.core import verdicts
    from yolo_det.studies.compare import compare_studies
    from yolo_det.studies.study import load_study

    a = load_study(_study(tmp / "ca", [0.40, 0.42, 0.41, 0.43, 0.39, 0.44]))
    b = load_study(_study(tmp / "cb", [0.50, 0.53, 0.52, 0.51, 0.50, 0.55]))
    result = compare_studies(a, b, "fitness")
    return json.loads(json.dumps(verdicts.stamp(result.to_dict(), result.word), default=str))


def _run_comparison(tmp: Path) -> dict:
    from yolo_det.proof.run_dirs import compare_runs

    return json.loads(json.dumps(compare_runs(_run_folder(tmp / "ra"), _run_folder(tmp / "rb")).to_json(),
                                 default=str))


# -- generated damage -----------------------------------------------------------------------------------------------
def _nodes(doc: Any, path: Tuple = ()) -> List[Tuple]:
    """Every node's path in ``doc`` (keys and indices; a list's first four items), the root first."""
    out = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _nodes(value, path + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc[:4]):
            out += _nodes(value, path + (index,))
    return out


def _path(doc: Any, draw) -> Tuple:
    """A node of ``doc``: any node alike, or one found by walking down from the root (each level stops with
    probability 1/3), so the fields near the top (those the issue's cases break: the root, ``seeds``, ``mode``) are
    drawn as often as the many deep ones."""
    if draw(st.booleans()):
        return draw(st.sampled_from(_nodes(doc)))
    path: Tuple = ()
    while isinstance(doc, (dict, list)) and doc and draw(st.integers(0, 2)):
        key = draw(st.sampled_from(list(doc) if isinstance(doc, dict) else range(min(len(doc), 4))))
        path, doc = path + (key,), doc[key]
    return path


def _damage(doc: Any, draw) -> Tuple[Any, str]:
    """``doc`` with one node replaced by a wrong value or removed (the root wrapped in a list, or replaced)."""
    doc = copy.deepcopy(doc)
    path = _path(doc, draw)
    how = draw(st.sampled_from(["replace", "replace", "delete", "wrap"]))
    value = draw(st.sampled_from(WRONG))
    if not path:
        return ([doc] if how == "wrap" else value), f"root {how} {value!r}"
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if how == "delete":
        del parent[path[-1]]
    elif how == "wrap":
        parent[path[-1]] = [parent[path[-1]]]
    else:
        parent[path[-1]] = value
    return doc, f"{'.'.join(map(str, path))} {how} {value!r}"


def _text(doc: Any, draw) -> Tuple[str, str]:
    """The file's text: the damaged document as JSON, or its text truncated, empty, or binary garbage."""
    damaged, what = _damage(doc, draw)
    text = json.dumps(damaged)
    form = draw(st.sampled_from(["json", "json", "json", "truncated", "empty", "garbage", "bom"]))
    if form == "truncated":
        cut = draw(st.integers(0, max(len(text) - 1, 0)))
        return text[:cut], f"{what}; truncated at {cut}"
    if form == "empty":
        return "", "empty"
    if form == "garbage":
        return draw(st.binary(min_size=1, max_size=64)).decode("latin-1"), "garbage"
    if form == "bom":
        return "\ufeff" + text, f"{what}; BOM"
    return text, what


def _write(path: Path, text: str) -> Path:
    """``text`` as UTF-8 (JSON and a BOM), or as the bytes it was decoded from (garbage: latin-1 maps them 1:1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    garbage = not text.isascii() and not text.startswith("\ufeff")
    path.write_bytes(text.encode("latin-1") if garbage else text.encode("utf-8"))
    return path


def _check(proc, named: Path, allowed=(0, EXIT_USAGE)) -> None:
    """A reader's answer to a damaged file: an allowed code, never a crash; exit 2 names the file."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode != EXIT_INTERNAL, proc.stderr
    assert proc.returncode in allowed, (proc.returncode, proc.stderr)
    if proc.returncode == EXIT_USAGE:
        assert str(named) in proc.stderr, proc.stderr


@pytest.fixture
def case_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("case")


def _fresh(base: Path, name: str) -> Path:
    folder = base / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


# -- the properties -------------------------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_a_damaged_determinism_json_is_refused_or_shown_never_a_crash(case_dir, data):
    text, what = _text(REPORT, data.draw)
    work = _fresh(case_dir, "det")
    run = _run_folder(work / "run", text=text)
    good = _run_folder(work / "good")
    out = work / "r.html"
    for args in ((run,), (run / "determinism.json",), (good, run)):
        _check(cli("report", *args, "--out", out), run)
    _check(cli("diff", good, run), run, allowed=(0, 1, 2, 3))


@SETTINGS
@given(data=st.data())
def test_a_damaged_fingerprint_header_is_refused_or_shown_never_a_crash(case_dir, data):
    header, what = _damage(HEADER, data.draw)
    work = _fresh(case_dir, "hdr")
    log = work / "bad.jsonl"
    try:
        _log(log, header if isinstance(header, dict) else {})
        if not isinstance(header, dict):  # the header line itself is the wrong type
            lines = log.read_text().splitlines()
            lines[0] = json.dumps(header)
            log.write_text("\n".join(lines) + "\n")
    except (TypeError, ValueError):  # the writer refuses to write it (NaN): write the line by hand
        _log(log)
        lines = log.read_text().splitlines()
        lines[0] = json.dumps({**json.loads(lines[0]), **(header if isinstance(header, dict) else {})})
        log.write_text("\n".join(lines) + "\n")
    good = _log(work / "good.jsonl")
    out = work / "r.html"
    for args in ((log,), (good, log)):
        _check(cli("report", *args, "--out", out), log)
    _check(cli("diff", good, log), log, allowed=(0, 1, 2, 3))


@SETTINGS
@given(data=st.data())
def test_a_damaged_study_json_is_refused_or_shown_never_a_crash(case_dir, data):
    work = _fresh(case_dir, "study")
    good = _study(work / "good", [0.40, 0.42, 0.41, 0.43, 0.39, 0.44])
    bad = _study(work / "bad", [0.50, 0.53, 0.52, 0.51, 0.50, 0.55])
    text, what = _text(json.loads((bad / "study.json").read_text()), data.draw)
    _write(bad / "study.json", text)
    out = work / "r.html"
    for args in ((bad,), (good, bad)):
        _check(cli("report", *args, "--out", out), bad)
    _check(cli("compare", good, bad), bad, allowed=(0, 1, 2, 3))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One valid saved --json document of each kind the report reads."""
    tmp = tmp_path_factory.mktemp("saved")
    return {"parity": _parity(), "gap": {"verdict": "identical", "coco": {"release": "yolov5", "gap": GAP_CHAIN}},
            "predictions gap": {"coco_metrics": {}, "gap": {"yolov5": GAP_CHAIN, "ultralytics": GAP_CHAIN}},
            "diff": _diff(), "run diff": _run_comparison(tmp), "compare": _compare(tmp)}


@pytest.mark.parametrize("kind", ["parity", "gap", "predictions gap", "diff", "run diff", "compare"])
def test_the_saved_documents_are_valid_to_begin_with(saved, tmp_path, kind):
    path = _write(tmp_path / f"{kind}.json", json.dumps(saved[kind]))
    proc = cli("report", path, "--out", tmp_path / "r.html")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("kind", ["parity", "gap", "predictions gap", "diff", "run diff", "compare"])
@SETTINGS
@given(data=st.data())
def test_a_damaged_saved_json_is_refused_or_shown_never_a_crash(saved, case_dir, kind, data):
    text, what = _text(saved[kind], data.draw)
    path = _write(_fresh(case_dir, "saved") / "saved.json", text)
    _check(cli("report", path, "--out", path.parent / "r.html"), path)


# -- the issue's cases, each named ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["[]", '{"seeds": [1, 2]}', '{"mode": 5}', '{"mode": "strict", "violations": [1]}',
                                  '{"mode": "strict", "seeds": {"init": []}, "environment": []}', "", "{", "\x00\xff",
                                  '{"mode": NaN}', '{"violations": {"total": "many"}}'])
def test_the_issues_determinism_json_cases_exit_2_naming_the_file(tmp_path, text):
    run = _run_folder(tmp_path / "run", text=text)
    for given_path in (run, run / "determinism.json"):
        proc = cli("report", given_path, "--out", tmp_path / "r.html")
        assert proc.returncode == EXIT_USAGE and "Traceback" not in proc.stderr, proc.stderr
        assert str(run / "determinism.json") in proc.stderr and not (tmp_path / "r.html").exists(), proc.stderr


def test_an_unexpected_internal_error_is_not_a_finding(monkeypatch, tmp_path):
    """A crash exits with its own code (not 1, a finding's; not 2, a refusal's) and says it is a bug."""
    import yolo_det.reports.page as page

    def boom(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(page, "write_report", boom)
    proc = cli("report", _study(tmp_path / "a", [0.4, 0.5]), "--out", tmp_path / "r.html")
    assert proc.returncode == EXIT_INTERNAL not in (0, 1, 2, 3), proc
    assert "internal error" in proc.stderr and "ZeroDivisionError: a bug" in proc.stderr
