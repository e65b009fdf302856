"""Issue 59, item 5: a study with a tainted seed is "not proven" in the compare JSON, its text and the report alike.

``compare`` exited 3 while its JSON carried ``better: "A"`` and ``statement: "A better beyond seed noise"`` beside
``verdict: "not proven"``, and ``yolo-det report`` showed the winner and never the taint. A JSON never carries a
winner beside not proven, and the report renders the command's own JSON verdict (the oracle: ``compare --json``).
"""

from __future__ import annotations

import json
import re

import pytest

from support.cli import cli
from yolo_det.studies.study import Study, StudyRun

CLOSE = [0.10, 0.12, 0.11, 0.13, 0.10, 0.12]
FAR = [0.50, 0.53, 0.52, 0.51, 0.55, 0.50]
WINNERS = ("A better", "B better")


def _study(folder, values, tainted=None, seeds=(11, 22, 33, 44, 55, 66)):
    runs = [StudyRun(i, seed, {"run": seed}, str(folder / f"run{i}.jsonl"), None, {"fitness": v, "loss": 1 - v},
                     {"fitness": v}, 0, "strict", tainted=(tainted or {}).get(i, []))
            for i, (seed, v) in enumerate(zip(seeds, values), 1)]
    Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs).write(folder)
    return folder


def _sections(page: str):
    return re.findall(r'<section class="card" id="s\d+" data-kind="([^"]+)">.*?<span class="badge \w+">([^<]*)</span>'
                      r'</header><p class="summary">([^<]*)</p>(.*?)</section>', page, re.S)


@pytest.fixture
def tainted(tmp_path):
    """A beyond-noise pair of studies (A far above B) whose A has a seed that resumed inexactly."""
    a = _study(tmp_path / "a", FAR, tainted={3: ["resumed inexactly (attempt 1: no resume state)"]})
    b = _study(tmp_path / "b", CLOSE)
    return a, b


def test_the_compare_json_carries_no_winner_beside_not_proven(tainted):
    proc = cli("compare", *tainted, "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 3 and data["verdict"] == "not proven"
    assert data["better"] is None
    assert data["statement"].startswith("not proven") and "resumed inexactly" in data["statement"]
    assert "seed 33" in data["statement"]  # the taint names the seed
    for metric in [data["result"], *data["others"]]:  # nor does any metric inside it
        assert metric["better"] is None and metric["verdict"] == "not proven"
    assert not any(w in proc.stdout for w in WINNERS)


def test_the_compare_text_says_not_proven_and_no_winner(tainted):
    proc = cli("compare", *tainted)
    assert proc.returncode == 3 and "NOT PROVEN" in proc.stdout
    assert not any(w in proc.stdout for w in WINNERS)


def test_the_report_shows_the_compare_commands_own_verdict_and_the_taint(tainted, tmp_path):
    oracle = json.loads(cli("compare", *tainted, "--json").stdout)
    saved = tmp_path / "compare.json"
    saved.write_text(json.dumps(oracle))
    out = tmp_path / "report.html"
    assert cli("report", *tainted, saved, "--out", out).returncode == 0
    page = out.read_text(encoding="utf-8")
    compared = [s for s in _sections(page) if s[0] == "seed studies compared"]
    assert len(compared) == 2  # the studies compared by the report, and the saved JSON
    for _, badge, summary, body in compared:
        assert badge == oracle["verdict"] == "not proven"
        assert summary.startswith("fitness: not proven") and "resumed inexactly" in summary
        assert "seed 33" in body
        assert not any(w in summary + body for w in WINNERS)


def test_an_earlier_releases_saved_json_with_a_winner_beside_not_proven_shows_no_winner(tainted, tmp_path):
    data = json.loads(cli("compare", *tainted, "--json").stdout)
    data.update(better="A", statement="A better beyond seed noise")  # what an earlier release wrote
    data["result"].update(better="A", statement="A better beyond seed noise", verdict="beyond seed noise")
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(data))
    out = tmp_path / "report.html"
    assert cli("report", saved, "--out", out).returncode == 0
    (_, badge, summary, body), = _sections(out.read_text(encoding="utf-8"))
    assert badge == "not proven" and not any(w in summary + body for w in WINNERS)
    assert "seed 33" in body
