"""``yolo-det report``: one self-contained HTML page of what the inputs prove, checked in a real headless Chromium;
and the axes of ``verify --plot`` (integer steps, no +-0.05 axis when no tensor differs)."""

from __future__ import annotations

import pytest

from yolo_det.proof.compare import Comparison, Divergence


def _comparison(steps: int, differing) -> Comparison:
    first = next((Divergence(i + 1, "grad", "model.0.conv.weight") for i, n in enumerate(differing) if n), None)
    losses = [4.0 - 0.1 * i for i in range(steps)]
    return Comparison(identical=first is None, steps=steps, tensors=100 * steps, first_divergence=first,
                      lengths=(steps, steps), differing=list(differing),
                      losses=(losses, [v + (0.01 if first and i + 1 >= first.step else 0) for i, v in enumerate(losses)]))


def _saved_figure(monkeypatch, comparison, tmp_path):
    """The matplotlib Figure ``plot_comparison`` saves (drawn, so its ticks are final)."""
    from matplotlib.figure import Figure

    from yolo_det.proof.plot import plot_comparison

    saved = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    assert plot_comparison(comparison, tmp_path / "plot.png").is_file()
    return saved[0]


@pytest.mark.parametrize("differing", [[0], [0, 0], [0, 0, 0], [0] * 7, [0, 0, 3], [0, 1, 5, 2], [0] * 40 + [9]])
def test_verify_plot_steps_are_integers_and_the_count_axis_is_not_around_zero(monkeypatch, tmp_path, differing):
    fig = _saved_figure(monkeypatch, _comparison(len(differing), differing), tmp_path)
    top, bottom = fig.axes
    for axis in (top, bottom):
        low, high = axis.get_xlim()
        ticks = [t for t in axis.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    low, high = bottom.get_ylim()
    assert low == 0 and high >= 1, (low, high)  # never the -0.05..0.05 axis of an all-zero bar chart
    counts = [t for t in bottom.get_yticks() if low <= t <= high]
    assert all(float(t).is_integer() for t in counts), counts
    texts = " ".join(t.get_text() for t in bottom.texts)
    assert ("no differing tensors" in texts) == (not any(differing))


# -- the report ---------------------------------------------------------------------------------------------------
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from support.builders import study as _study
from support.cli import cli

from yolo_det.evaluation import gap
from yolo_det.evaluation.parity import ParityReport
from yolo_det.reports.timeline import read_timeline

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: an attribute or CSS that would fetch something when the page is shown
FETCH = re.compile(r"""(?:\b(?:src|href|action|poster|data|srcset)\s*=\s*["']?|url\(\s*["']?|@import\s+["']?)\s*"""
                   r"""(?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def strict_runs(yolov5_strict_verify):
    proc, root = yolov5_strict_verify
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "runs" / "strict1", root / "runs" / "strict2", root / "w"


def _diverged(strict_runs, tmp_path: Path, step: int = 3, kind: str = "grad") -> Path:
    """A copy of run 2 whose own fingerprint log differs from run 1's in one ``kind`` digest at ``step``."""
    _, run2, work = strict_runs
    copy = tmp_path / "diverged"
    shutil.copytree(run2, copy)
    lines = (work / "run2" / "fingerprint.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("step") == step:
            hexes = obj["digests"][kind]
            obj["digests"][kind] = ("0" if hexes[0] != "0" else "1") + hexes[1:]
            lines[i] = json.dumps(obj)
    (copy / "fingerprint.jsonl").write_text("\n".join(lines) + "\n")
    return copy




def _parity_json(path: Path, verdict: str = "differs") -> Path:
    report = ParityReport("best.pt", "best.onnx", "onnx", {"name": "onnxruntime", "settings": {"version": "1.20"},
                                                           "repeatable": True}, 8, (128, 128),
                          raw=[{"output": "output0", "shape": [1, 84, 336], "max_abs": 2e-5, "where_abs": [0, 1, 2],
                                "max_rel": 1e-6, "where_rel": [0, 1, 2], "within": True, "atol": 1e-4},
                               {"output": "output1", "shape": [1, 32, 8, 8], "max_abs": 0.3, "where_abs": [0, 0, 0],
                                "max_rel": 0.2, "where_rel": [0, 0, 0], "within": False, "atol": 1e-4}],
                          boxes={"matched": 40, "only_pt": 2, "only_export": 1, "max_conf_diff": 0.01},
                          metrics={"pt_matched": {"map50_95": 0.412, "map50": 0.61},
                                   "export_matched": {"map50_95": 0.398, "map50": 0.6}},
                          causes=[{"cause": "fp16", "detail": "the export's weights are fp16",
                                   "metric_change": {"map50_95": 0.014, "map50": 0.01}}],
                          verdict=verdict, reasons=["output1 beyond tolerance"])
    path.write_text(json.dumps(report.to_json(), default=str))
    return path


def _gap_json(path: Path, wrapped: bool = True) -> Path:
    from support.coco import coco_api, random_case

    truth, detections = random_case(3)
    chain = gap.explain(gap.case_from(truth, detections), gap.release_rules("yolov5"), coco_api(truth, detections))
    data = {"verdict": "identical", "coco": {"release": "yolov5", "gap": chain, "notes": []}} if wrapped else \
        {"coco_metrics": chain["coco_api"], "gap": {"yolov5": chain, "ultralytics": chain}}
    path.write_text(json.dumps(data))
    return path


def _report(tmp_path, *inputs, out=None, expect=0):
    out = out or tmp_path / "report.html"
    proc = cli("report", *inputs, "--out", out)
    assert proc.returncode == expect, proc.stderr
    return out.read_text(encoding="utf-8") if expect == 0 else proc


def _sections(page: str):
    return re.findall(r'<section class="card" id="s\d+" data-kind="([^"]+)">.*?<span class="badge \w+">([^<]*)</span>'
                      r'</header><p class="summary">([^<]*)</p>', page, re.S)


def test_two_identical_runs_show_their_timelines_and_identical(strict_runs, tmp_path):
    run1, run2, _ = strict_runs
    page = _report(tmp_path, run1, run2)
    kinds = _sections(page)
    assert [k for k, _, _ in kinds] == ["training run", "training run", "two runs"]
    for _, badge, summary in kinds[:2]:
        assert summary.startswith("strict: 4 optimizer steps, 2 epochs validated (2 validations), 0 resume points")
        assert badge == "strict, no alert"
    assert kinds[2][1] == "identical" and kinds[2][2].startswith("identical: 4 steps,")
    assert "no differing tensors" in page and "seed" in page and "torch" in page
    assert not FETCH.search(page) and "<link" not in page and "<iframe" not in page


@pytest.mark.parametrize("step, kind", [(1, "grad"), (3, "grad"), (4, "param")])
def test_a_divergence_names_its_step_kind_and_tensor(strict_runs, tmp_path, step, kind):
    run1, _, _ = strict_runs
    page = _report(tmp_path, run1, _diverged(strict_runs, tmp_path, step, kind))
    (_, badge, summary), = [s for s in _sections(page) if s[0] == "two runs"]
    assert badge == "differs"
    assert re.match(rf"first divergence at step {step}: {kind} \S+", summary), summary


def test_a_saved_comparison_shows_the_located_op_and_module(tmp_path):
    data = _comparison(5, [0, 0, 0, 2, 7]).to_json()
    data["locate"] = {"step": 4, "phase": "backward", "op": "aten.index_put_", "module": "model.24.m.0",
                      "kernel": "index_put_deterministic", "known_nondeterministic": True, "cause": "kernel"}
    saved = tmp_path / "diff.json"
    saved.write_text(json.dumps(data))
    (kind, badge, summary), = _sections(_report(tmp_path, saved))
    assert (kind, badge) == ("two runs", "differs")
    assert summary == "first divergence at step 4: grad model.0.conv.weight; op aten.index_put_ in model.24.m.0 (backward)"


def test_resume_points_are_counted_across_the_resumed_logs(strict_runs, tmp_path):
    _, _, work = strict_runs
    folder = tmp_path / "resumed"
    folder.mkdir()
    for name in ("fingerprint.jsonl", "fingerprint.resume1.jsonl", "fingerprint.resume2.jsonl"):
        shutil.copy(work / "run1" / "fingerprint.jsonl", folder / name)
    timeline = read_timeline(folder / "fingerprint.jsonl")
    assert (timeline.steps, timeline.resumes, len(timeline.validations)) == (12, [4, 8], 6)
    assert [v["step"] for v in timeline.validations] == [2, 4, 6, 8, 10, 12]
    (kind, _, summary), = _sections(_report(tmp_path, folder))
    assert kind == "training run" and "12 optimizer steps" in summary and "2 resume points" in summary


def test_studies_parity_and_the_coco_gap(tmp_path):
    a = _study(tmp_path / "a", [0.40, 0.42, 0.41, 0.43, 0.39, 0.44])
    b = _study(tmp_path / "b", [0.50, 0.53, 0.52, 0.51, 0.50, 0.55])
    page = _report(tmp_path, a, b, _parity_json(tmp_path / "parity.json"), _gap_json(tmp_path / "gap.json"),
                   _gap_json(tmp_path / "pred.json", wrapped=False))
    found = _sections(page)
    assert [k for k, _, _ in found] == ["seed study", "seed study", "seed studies compared", "export parity",
                                        "COCO gap", "COCO gap"]
    assert found[0][2].startswith("fitness over 6 seed(s): mean 0.415, 95% interval of the mean ")
    assert found[2][1] == "B better beyond seed noise" and found[2][2].startswith("fitness: B better beyond seed noise")
    assert found[3][1] in ("differs", "differ") and "BEYOND" in page
    assert found[4][1] == "ends at the COCO API" and found[4][2].startswith("mAP50-95: yolov5 ")
    assert "yolov5" in found[5][2] and "ultralytics" in found[5][2]
    assert page.count("seed 22:") == 4  # each seed a point named by its seed: in A's and B's charts, and both in the comparison
    assert not FETCH.search(page)


def test_the_study_metric_can_be_chosen_and_a_wrong_one_is_refused(tmp_path):
    a = _study(tmp_path / "a", [0.40, 0.42, 0.41])
    out = tmp_path / "r.html"
    assert cli("report", a, "--metric", "metrics/mAP50-95(B)", "--out", out).returncode == 0
    assert _sections(out.read_text())[0][2].startswith("metrics/mAP50-95(B) over 3 seed(s)")
    proc = cli("report", a, "--metric", "mAP", "--out", tmp_path / "no.html")
    assert proc.returncode == 2 and "--metric 'mAP'" in proc.stderr and not (tmp_path / "no.html").exists()


@pytest.mark.parametrize("bad", ["missing", "empty folder", "unknown json", "not json", "empty log"])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, bad):
    good = _study(tmp_path / "a", [0.4, 0.5])
    path = tmp_path / "input"
    if bad == "empty folder":
        path.mkdir()
    elif bad == "unknown json":
        path = tmp_path / "x.json"
        path.write_text(json.dumps({"hello": 1}))
    elif bad == "not json":
        path = tmp_path / "x.json"
        path.write_text("{")
    elif bad == "empty log":
        path = tmp_path / "x.jsonl"
        path.write_text("")
    out = tmp_path / "report.html"
    out.write_text("before")
    proc = cli("report", good, path, "--out", out)
    assert proc.returncode == 2 and str(path) in proc.stderr and "nothing written" in proc.stderr, proc.stderr
    assert out.read_text() == "before" and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a", "report.html"] + ([path.name] if bad != "missing" else []))


def test_the_default_out_is_report_html_in_the_current_folder(tmp_path):
    a = _study(tmp_path / "a", [0.4, 0.5])
    work = tmp_path / "cwd"
    work.mkdir()
    proc = cli("report", a, cwd=work)
    assert proc.returncode == 0 and (work / "report.html").is_file()
    assert proc.stdout.strip() == f"yolo-det report: wrote {(work / 'report.html').resolve()}"
    assert cli("report", a, "--out", tmp_path / "nowhere" / "r.html").returncode == 2


def _chromium(*args, timeout=120):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_the_page_renders_in_headless_chromium_without_a_console_error(strict_runs, tmp_path):
    """A real browser: the screenshot is a picture (not blank), the console has no error, the page's script ran."""
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed (scripts/browser.sh installs it); CI must run the browser test")
        pytest.skip("chromium is not installed (scripts/browser.sh installs it)")
    import cv2
    import numpy as np

    run1, _, _ = strict_runs
    page = _report(tmp_path, run1, _diverged(strict_runs, tmp_path), _study(tmp_path / "a", [0.40, 0.42, 0.41]),
                   _study(tmp_path / "b", [0.50, 0.53, 0.52]), _parity_json(tmp_path / "p.json"),
                   _gap_json(tmp_path / "g.json"))
    report = tmp_path / "report.html"
    shot = tmp_path / "shot.png"
    proc = _chromium(f"--screenshot={shot}", "--window-size=1280,2400", report.as_uri())
    errors = [line for line in proc.stderr.splitlines()
              if "Uncaught" in line or re.search(r"CONSOLE\(\d+\)|console", line, re.I) and "error" in line.lower()
              or "Content Security Policy" in line]
    assert not errors, "\n".join(errors)
    image = cv2.imread(str(shot))
    assert image is not None and image.shape[:2] == (2400, 1280), proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000 and len(np.unique(image.reshape(-1, 3), axis=0)) > 50
    dom = _chromium("--dump-dom", report.as_uri()).stdout
    sections = len(_sections(page))
    assert f'data-report-ready="{sections}"' in dom and f"rendered {sections} section(s)" in dom
    for kind in ("training run", "two runs", "seed study", "seed studies compared", "export parity", "COCO gap"):
        assert f'data-kind="{kind}"' in dom, kind
