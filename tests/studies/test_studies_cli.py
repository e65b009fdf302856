"""``yolo-det compare`` and ``yolo-det seeds`` arguments on study folders written here (no training)."""

from __future__ import annotations

import json

import pytest

from yolo_det.cli import main as cli_main
from yolo_det.studies.study import Study, StudyRun, load_study


def _write(folder, values, seeds=(11, 22, 33, 44, 55, 66), name="val/box_loss"):
    seeds = tuple(seeds)[:len(values)]
    runs = [StudyRun(i + 1, s, {"run": s, "init": s, "order": s, "augment": s}, str(folder / f"run{i + 1}.jsonl"),
                     None, {name: v, "fitness": 0.25 + v}, {name: v, "fitness": 0.25 + v}, 0, "strict")
            for i, (s, v) in enumerate(zip(seeds, values))]
    Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs).write(folder)
    return folder


def test_compare_prints_the_verdict_and_exits_by_it(tmp_path, capsys):
    a = _write(tmp_path / "a", [0.10, 0.12, 0.11, 0.13, 0.10, 0.12])  # 6 pairs: the fewest that can reject
    b = _write(tmp_path / "b", [0.50, 0.53, 0.52, 0.51, 0.55, 0.50])
    c = _write(tmp_path / "c", [0.11, 0.10, 0.12, 0.10, 0.13, 0.11])
    assert cli_main(["compare", str(a), str(b), "--metric", "val/box_loss"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("val/box_loss: A better beyond seed noise") and "exact sign-flip test, 6 pairs" in out
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
    a = _write(tmp_path / "a", [0.1, 0.2, 0.3, 0.4])
    b = _write(tmp_path / "b", [0.2, 0.3, 0.4, 0.1], seeds=(1, 2, 3, 4))
    assert cli_main(["compare", str(a), str(b), "--plot", str(tmp_path / "strip.png")]) == 0
    assert (tmp_path / "strip.png").read_bytes()[:4] == b"\x89PNG"
    assert load_study(a).values("best:fitness") == [0.35, 0.45, 0.55, 0.65]


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


def test_compare_says_too_few_seeds_and_exits_3_where_no_test_could_reject(tmp_path, capsys):
    a = _write(tmp_path / "a", [0.10, 0.20], seeds=(11, 22))  # two pairs, each 0.3 apart: no spread to test
    b = _write(tmp_path / "b", [0.40, 0.50], seeds=(11, 22))
    assert cli_main(["compare", str(a), str(b), "--metric", "val/box_loss"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("val/box_loss: too few seeds for a verdict") and "2 pairs" in out
    assert "beyond seed noise" not in out.splitlines()[0] and "within seed noise" not in out.splitlines()[0]
    assert cli_main(["compare", str(a), str(b), "--metric", "val/box_loss", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "too few seeds" and data["p_value"] == 0.5 and data["n_a"] == 2
    assert data["statement"] == "too few seeds for a verdict" and data["better"] is None


def test_study_paths_are_relative_so_a_moved_study_still_finds_its_logs(tmp_path, capsys):
    import shutil

    folder = tmp_path / "a"
    folder.mkdir()
    for i in (1, 2, 3):
        (folder / f"run{i}.jsonl").write_text("{}\n")
    _write(folder, [0.10, 0.12, 0.11])
    stored = json.loads((folder / "study.json").read_text())["runs"]
    assert [r["log"] for r in stored] == ["run1.jsonl", "run2.jsonl", "run3.jsonl"]
    moved = tmp_path / "elsewhere" / "a"
    shutil.copytree(folder, moved)
    shutil.rmtree(folder)
    study = load_study(moved)
    assert [study.log_path(r) for r in study.runs] == [moved.resolve() / f"run{i}.jsonl" for i in (1, 2, 3)]
    assert study.missing_logs() == []


def test_an_old_study_with_absolute_paths_is_read_and_a_missing_log_is_said(tmp_path, capsys):
    from yolo_det.cli.seeds import summary_lines

    folder = _write(tmp_path / "old", [0.10, 0.12, 0.11])
    data = json.loads((folder / "study.json").read_text())
    for r in data["runs"]:
        r["log"] = f"/somewhere/else/run{r['run']}/fingerprint.jsonl"  # as older yolo-det wrote them
    (folder / "study.json").write_text(json.dumps(data))
    (folder / "run2").mkdir()
    (folder / "run2" / "fingerprint.jsonl").write_text("{}\n")  # the moved study's own copy of run 2's log
    study = load_study(folder)
    assert study.log_path(study.runs[1]) == (folder / "run2" / "fingerprint.jsonl").resolve()
    assert [r.index for r in study.missing_logs()] == [1, 3]
    assert any("logs of run(s) 1, 3 are missing" in line for line in summary_lines(study))
    b = _write(tmp_path / "b", [0.50, 0.53, 0.52])
    assert cli_main(["compare", str(folder), str(b), "--metric", "val/box_loss", "--json"]) == 3  # 3 pairs: too few
    result = json.loads(capsys.readouterr().out)
    assert result["setup_checked"] is False and any("set-ups not compared" in n and "is missing" in n for n in result["notes"])


@pytest.mark.parametrize("mode, code", [("strict", 2), ("warn", None)])
def test_seeds_without_run_in_the_command_is_refused_under_strict_and_warned_under_warn(tmp_path, monkeypatch,
                                                                                          capsys, mode, code):
    import yolo_det.studies.study as study_module

    calls = []
    monkeypatch.setattr(study_module, "run_study", lambda *a, **k: calls.append(a) or (_ for _ in ()).throw(
        study_module.StudyError("stopped here by the test")))
    result = cli_main(["seeds", "--n", "2", "--deterministic", mode, "--workdir", str(tmp_path / "w"), "--",
                       "python", "train.py", "--name", "exp", "--exist-ok"])
    err = capsys.readouterr().err
    assert "has no {run}" in err
    if code == 2:
        assert result == 2 and not calls and "refused under strict" in err
    else:
        assert calls and "warning" in err  # went on to run the study
    calls.clear()
    cli_main(["seeds", "--n", "2", "--deterministic", mode, "--workdir", str(tmp_path / "w"), "--",
              "python", "train.py", "--name", "exp{run}"])
    assert calls and "has no {run}" not in capsys.readouterr().err


def test_runs_that_wrote_one_output_folder_are_refused():
    from yolo_det.studies.study import StudyError, _own_folders

    runs = [StudyRun(i, i, {}, f"/s/run{i}/fingerprint.jsonl", d, {}, {}, None, "strict")
            for i, d in ((1, "/out/exp"), (2, "/out/exp2"))]
    _own_folders(runs)
    runs.append(StudyRun(3, 3, {}, "/s/run3/fingerprint.jsonl", "/out/exp", {}, {}, None, "strict"))
    with pytest.raises(StudyError, match="runs 1 and 3 wrote the same output folder"):
        _own_folders(runs)
