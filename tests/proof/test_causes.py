"""Cause first: set-up differences between two runs (header, determinism.json) named before any
step, with their class; what verify filled in from {run} and output locations are no cause;
DDP rank drift is a collective cause, validation cut by NMS's time limit a clock cause."""

from __future__ import annotations

from pathlib import Path

from yolo_det.proof.causes import header_causes, report_causes, setup_causes
from yolo_det.proof.compare import Comparison, Divergence, compare_logs
from yolo_det.proof.locate import locate_runs
from support.builders import fingerprint_log

BASE = {"seed": 0, "mode": "warn", "torch": "2.14.1", "world_size": 1, "threads": 2, "cuda": None,
        "packages": {"numpy": "1.26.4", "torch": "2.14.1"}, "env": {}, "verify_run": 1,
        "command": ["train.py", "--data", "d.yaml", "--lr0", "0.01", "--name", "v1", "--project", "runs/1"],
        "files": [{"index": 0, "arg": "train.py", "digest": "a" * 32}, {"index": 2, "arg": "d.yaml", "digest": "b" * 32}]}


def other(**changes):
    header = {**BASE, "verify_run": 2,
              "command": ["train.py", "--data", "d.yaml", "--lr0", "0.01", "--name", "v2", "--project", "runs/2"]}
    header.update(changes)
    return header


def test_arguments_filled_in_from_run_and_output_options_are_no_cause():
    assert header_causes(BASE, other()) == []
    no_run = {k: v for k, v in other().items() if k != "verify_run"}
    no_run["command"] = ["train.py", "--data", "d.yaml", "--lr0", "0.01", "--name", "exp7", "--project", "elsewhere"]
    assert header_causes(BASE, no_run) == []  # --name/--project say where a run writes, not what it computes


def test_each_set_up_difference_is_named_with_its_class_seed_first():
    command = list(other()["command"])
    command[4] = "0.02"
    files = [BASE["files"][0], {"index": 2, "arg": "d.yaml", "digest": "c" * 32}]
    causes = setup_causes(BASE, other(seed=1, threads=4, command=command, files=files,
                                      packages={"numpy": "2.0.0", "torch": "2.14.1"}))
    assert [(c.cls, c.what) for c in causes] == [("config", "seed"), ("config", "command"), ("data", "data file"),
                                                 ("environment", "threads"), ("environment", "packages")]
    assert causes[0].message == "runs used different seeds: 0 vs 1"
    assert causes[1].message == "runs used different command arguments: --lr0 0.01 vs 0.02"
    assert causes[2].message == "the file given as --data differs: d.yaml vs d.yaml (their contents differ)"
    assert causes[4].message == "runs used different package versions: numpy 1.26.4 vs 2.0.0"


def test_a_same_file_under_another_name_is_no_cause_but_an_edited_script_is():
    renamed = other(command=["train.py", "--data", "copy.yaml"] + other()["command"][3:],
                    files=[BASE["files"][0], {"index": 2, "arg": "copy.yaml", "digest": "b" * 32}])
    assert header_causes(BASE, renamed) == []
    edited = other(files=[{"index": 0, "arg": "train.py", "digest": "f" * 32}, BASE["files"][1]])
    assert [(c.cls, c.message) for c in header_causes(BASE, edited)] == [
        ("config", "the training script differs: train.py vs train.py (their contents differ)")]


def test_determinism_json_differences_are_causes_too():
    a = {"flags_applied": {"cudnn_benchmark": False}, "environment": {"cudnn": 90100, "driver": "550.54"}}
    b = {"flags_applied": {"cudnn_benchmark": True}, "environment": {"cudnn": 90100, "driver": "560.35"}}
    assert [(c.cls, c.message) for c in report_causes(a, b)] == [
        ("config", "runs applied different determinism flags: cudnn_benchmark False vs True"),
        ("environment", "runs used different GPU drivers: 550.54 vs 560.35")]


def _log(path: Path, param: str, ddp=None) -> Path:
    return fingerprint_log(path, {"torch": "2.14.1", "world_size": 2, "rank": 0, "seed": 0, "command": ["t.py"]}, 1,
                           {"param": (["w"], param)}, lr={"group0.lr": 0.1}, ddp=ddp)


def test_ddp_ranks_that_drift_apart_are_a_collective_cause(tmp_path):
    bad = {"world_size": 2, "ok": False, "rank": 1, "ranks": [1], "tensor": "w", "reference_rank": 0}
    comparison = compare_logs(_log(tmp_path / "a.jsonl", "0" * 32, {"world_size": 2, "ok": True}),
                              _log(tmp_path / "b.jsonl", "1" * 32, bad))
    assert comparison.first_divergence.step == 1 and comparison.cause == "collective"
    location = locate_runs(["python", "-c", "raise SystemExit(9)"], comparison, workdir=tmp_path / "w")
    assert location.cause == "collective" and not (tmp_path / "w").exists()  # no re-run
    assert comparison.to_json()["locate"]["cause"] == "collective"


def test_validation_cut_by_the_nms_time_limit_is_a_clock_cause(tmp_path):
    output = tmp_path / "output.log"
    output.write_text("WARNING ⚠️ NMS time limit 0.900s exceeded\n")
    comparison = Comparison(identical=False, steps=2, tensors=10, first_divergence=Divergence(2, "val", "map50"),
                            lengths=(2, 2))
    location = locate_runs(["python", "-c", "raise SystemExit(9)"], comparison, workdir=tmp_path / "w",
                           outputs=[output])
    assert (location.cause, location.phase) == ("clock", "validation") and comparison.cause == "clock"
    assert not (tmp_path / "w").exists()
