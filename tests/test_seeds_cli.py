"""``yolo-det compare`` and ``yolo-det seeds`` arguments on study folders written here (no training)."""

from __future__ import annotations

import json

import pytest

from yolo_det.cli import main as cli_main
from yolo_det.studies.study import Study, StudyRun, load_study


def _write(folder, values, seeds=(11, 22, 33), name="val/box_loss"):
    runs = [StudyRun(i + 1, s, {"run": s, "init": s, "order": s, "augment": s}, str(folder / f"run{i + 1}.jsonl"),
                     None, {name: v, "fitness": 0.25 + v}, {name: v, "fitness": 0.25 + v}, 0, "strict")
            for i, (s, v) in enumerate(zip(seeds, values))]
    Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs).write(folder)
    return folder


def test_compare_prints_the_verdict_and_exits_by_it(tmp_path, capsys):
    a = _write(tmp_path / "a", [0.10, 0.12, 0.11])
    b = _write(tmp_path / "b", [0.50, 0.53, 0.52])
    c = _write(tmp_path / "c", [0.11, 0.10, 0.12])
    assert cli_main(["compare", str(a), str(b), "--metric", "val/box_loss"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("val/box_loss: A better beyond seed noise") and "paired t-test, 3 pairs" in out
    assert "fitness" in out  # the other metrics, as information
    assert cli_main(["compare", str(a), str(c), "--metric", "val/box_loss", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "within seed noise" and data["paired"] and 0.05 <= data["p_value"] <= 1
    assert cli_main(["compare", str(a), str(b)]) == 1  # fitness: higher is better, so B
    assert "fitness: B better beyond seed noise" in capsys.readouterr().out


def test_compare_refuses_what_is_not_a_study_or_a_metric(tmp_path, capsys):
    a = _write(tmp_path / "a", [0.1, 0.2, 0.3])
    assert cli_main(["compare", str(a), str(tmp_path / "nothing")]) == 2
    assert "not a seed study" in capsys.readouterr().err
    assert cli_main(["compare", str(a), str(a), "--metric", "mAP"]) == 2
    assert "not in both studies" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "study.json").write_text("{")
    assert cli_main(["compare", str(a), str(tmp_path / "bad")]) == 2


def test_compare_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = _write(tmp_path / "a", [0.1, 0.2, 0.3])
    b = _write(tmp_path / "b", [0.2, 0.3, 0.4], seeds=(1, 2, 3))
    assert cli_main(["compare", str(a), str(b), "--plot", str(tmp_path / "strip.png")]) == 0
    assert (tmp_path / "strip.png").read_bytes()[:4] == b"\x89PNG"
    assert load_study(a).values("best:fitness") == [0.35, 0.45, 0.55]


@pytest.mark.parametrize("args, message", [
    (["--n", "3", "--vary", "order", "--deterministic", "off"], "per-sample streams"),
    (["--n", "3", "--decompose", "--vary", "init"], "leave --vary out"),
    (["--n", "1"], "at least 2"),
    (["--n", "3", "--parallel", "2"], "more than one visible GPU"),
])
def test_seeds_refuses_bad_arguments_before_any_run(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    workdir = tmp_path / "w"
    code = cli_main(["seeds", *args, "--workdir", str(workdir), "--", "false"])
    assert code == 2 and message in capsys.readouterr().err
    assert not workdir.exists()
