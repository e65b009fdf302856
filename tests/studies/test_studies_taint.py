"""Issue 55, item 5: what a seed's process gets from the study's driver, and seeds that did not run as the study says.

The driver's per-run controls (``YOLO_DET_RESUME``, ``YOLO_DET_KILL_AT``, a capture, a stop epoch, a rank) are not
handed to the seeds unless the study names them (``--pass-env``); a seed that resumed inexactly or ran under another
mode than the study's is named in study.json, by ``seeds --status`` and by ``compare``, whose verdict is then not
proven. The seeds are a tiny script under yolo-det (no training); the comparisons are study.json files written here.
"""

from __future__ import annotations

import json
import sys

import pytest

from support.cli import cli
from yolo_det.cli import main as cli_main
from yolo_det.studies.study import RUN_CONTROLS, Study, StudyRun, load_study, run_study, seed_environment

PYTHON = sys.executable

#: One seed: records the yolo-det variables it was given; with ``markers/kill<run>`` it saves a checkpoint and is
#: lost (a preemption), and its resume (argument ``resume``) resumes inexactly as the integrations report it;
#: ``MODE_RUN<run>`` makes that run configure another mode than the study's.
SEED_SCRIPT = r'''
import json, os, sys
from pathlib import Path

markers, run = Path(sys.argv[1]), os.environ["YOLO_DET_VERIFY_RUN"]
resumed = sys.argv[2:] == ["resume"]
given = {k: v for k, v in os.environ.items() if k.startswith("YOLO_DET_")}
(markers / f"{run}{'.resume' if resumed else ''}.env.json").write_text(json.dumps(given))
kill = markers / f"kill{run}"
if kill.exists():
    kill.unlink()
    checkpoint = markers / f"last{run}.pt"
    checkpoint.write_text("weights")
    Path(os.environ["YOLO_DET_RUN_INFO"]).write_text(json.dumps({
        "checkpoint": str(checkpoint), "epochs_done": 1, "epochs": 2,
        "resume_command": [sys.executable, __file__, str(markers), "resume"]}))
    sys.exit(1)
import torch
import yolo_det
from yolo_det.proof import fingerprint

seed = int(os.environ["YOLO_DET_TRAIN_SEED"])
session = yolo_det.configure(os.environ.get(f"MODE_RUN{run}") or os.environ["YOLO_DET_DETERMINISTIC"], seed=seed)
if resumed:
    print("yolo-det: resume not exact: no resume state beside the checkpoint; it resumes as the release does")
    session.extra["resume"] = {"checkpoint": "last.pt", "exact": False, "problems": ["no resume state"]}
model = torch.nn.Linear(2, 1)
session.track(model)
with session.backward():
    model(torch.ones(1, 2)).sum().backward()
fingerprint.record_validation(0, {"fitness": seed % 1000 / 1000}, best=True)
session.finish(markers / f"out{run}")
'''

#: the driver's per-run controls in the tests, each with a value that would change a seed
CONTROLS = {"YOLO_DET_RESUME": "inexact", "YOLO_DET_KILL_AT": "after_sidecar:1", "YOLO_DET_STOP_AFTER_EPOCH": "1",
            "YOLO_DET_CAPTURE": "/tmp/capture.jsonl", "YOLO_DET_CAPTURE_STEP": "3", "YOLO_DET_RANK": "3",
            "YOLO_DET_VERIFY_RUN": "9"}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_drivers_per_run_controls_are_withheld_from_seeds_unless_passed(name):
    driver = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "YOLO_DET_CACHE_DIR": "/c", name: CONTROLS[name]}
    env, withheld = seed_environment(driver)
    assert name in RUN_CONTROLS and name not in env and withheld == [name]
    assert {k: env[k] for k in ("PATH", "CUDA_VISIBLE_DEVICES", "YOLO_DET_CACHE_DIR")} == \
        {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "YOLO_DET_CACHE_DIR": "/c"}  # the rest goes on
    env, withheld = seed_environment(driver, passed=[name])
    assert env[name] == CONTROLS[name] and withheld == []


@pytest.mark.slow  # runs a study's processes
def test_seeds_get_no_per_run_control_and_a_tainted_seed_is_named(tmp_path, train_env):
    script = tmp_path / "seed.py"
    script.write_text(SEED_SCRIPT)
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "kill1").write_text("")
    env = {**train_env, **CONTROLS, "MODE_RUN2": "warn"}
    cmd = [PYTHON, str(script), str(markers)]
    study_dir = tmp_path / "study"
    with pytest.raises(Exception):  # run 1 is lost after its checkpoint; 2 and 3 finish
        run_study(cmd, n=3, workdir=study_dir, env=env, cwd=tmp_path, pass_env=["YOLO_DET_RESUME"])
    study = run_study(cmd, n=3, workdir=study_dir, env=env, cwd=tmp_path, pass_env=["YOLO_DET_RESUME"])
    assert study.complete

    for given in [json.loads(p.read_text()) for p in markers.glob("*.env.json")]:
        assert given["YOLO_DET_RESUME"] == "inexact"  # passed, as the study asked
        for name in set(CONTROLS) - {"YOLO_DET_RESUME", "YOLO_DET_VERIFY_RUN"}:
            assert name not in given, name
        assert given["YOLO_DET_VERIFY_RUN"] != "9"  # the study's own run number
    saved = json.loads((study_dir / "study.json").read_text())
    assert saved["settings"]["env"]["passed"] == ["YOLO_DET_RESUME"]
    assert set(saved["settings"]["env"]["withheld"]) == set(CONTROLS) - {"YOLO_DET_RESUME"}

    tainted = {t["run"]: t["why"] for t in saved["tainted"]}
    assert set(tainted) == {1, 2}
    assert "resumed inexactly" in " ".join(tainted[1]) and "no resume state" in " ".join(tainted[1])
    assert "warn" in " ".join(tainted[2]) and "strict" in " ".join(tainted[2])
    assert [bool(r["tainted"]) for r in saved["runs"]] == [True, True, False]
    from yolo_det.cli.seeds import summary_lines

    warned = [line for line in summary_lines(study) if "did not run as the study says" in line]
    assert [line.split()[2] for line in warned] == ["1", "2"]  # "warning: run N ..." under the seeds table

    status = cli("seeds", "--status", "--workdir", study_dir)
    assert status.returncode == 0, status.stderr
    lines = {int(line.split()[1]): line for line in status.stdout.splitlines() if line.startswith("  run ")}
    assert "resumed inexactly" in lines[1] and "warn" in lines[2] and "NOT AS THE STUDY" not in lines[3]
    assert "NOT AS THE STUDY" in lines[1] and "2 of 3 seeds did not run as the study says" in status.stdout
    data = json.loads(cli("seeds", "--status", "--workdir", study_dir, "--json").stdout)
    assert [t["run"] for t in data["tainted"]] == [1, 2]


def _write(folder, values, mode="strict", tainted=None, modes=None, seeds=(11, 22, 33, 44, 55, 66)):
    """A study of ``values`` (fitness); ``tainted``: run -> reasons; ``modes``: run -> the mode it recorded."""
    runs = []
    for i, (seed, value) in enumerate(zip(seeds, values), 1):
        run = StudyRun(i, seed, {"run": seed}, str(folder / f"run{i}.jsonl"), None, {"fitness": value},
                       {"fitness": value}, 0, (modes or {}).get(i, mode), tainted=(tainted or {}).get(i, []))
        runs.append(run)
    Study({"seeds": list(seeds)[:len(values)], "vary": "all", "base_seed": 0, "mode": mode, "command": ["x"]},
          runs).write(folder)
    return folder


CLOSE = [0.10, 0.12, 0.11, 0.13, 0.10, 0.12]
SAME = [0.11, 0.10, 0.12, 0.10, 0.13, 0.11]
FAR = [0.50, 0.53, 0.52, 0.51, 0.55, 0.50]


@pytest.mark.parametrize("a, b, clean_code", [
    ({"tainted": {3: ["resumed inexactly (attempt 1: no resume state)"]}}, {}, 0),
    ({}, {"tainted": {6: ["ran under warn, not the study's strict"]}}, 0),
    ({}, {"modes": {2: "off"}}, 0),  # a study written before the field: the seed's recorded mode
    ({"tainted": {1: ["resumed inexactly"]}}, {"values": FAR}, 1),  # beyond seed noise, with a tainted seed
])
def test_compare_with_a_tainted_seed_is_not_proven_and_names_it(a, b, clean_code, tmp_path, capsys):
    folder_a = _write(tmp_path / "a", a.get("values", CLOSE), tainted=a.get("tainted"), modes=a.get("modes"))
    folder_b = _write(tmp_path / "b", b.get("values", SAME), tainted=b.get("tainted"), modes=b.get("modes"))
    assert cli_main(["compare", str(folder_a), str(folder_b)]) == 3
    out = capsys.readouterr().out
    assert "NOT PROVEN" in out and "did not run as its study says" in out
    assert cli_main(["compare", str(folder_a), str(folder_b), "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "not proven" and data["tainted"]
    which = a if a.get("tainted") or a.get("modes") else b
    run = next(iter(which.get("tainted") or which.get("modes")))
    assert [(t["study"], t["run"]) for t in data["tainted"]] == [("A" if which is a else "B", run)]
    assert data["statement"]  # what the statistics alone said stays in the JSON
    clean_a = _write(tmp_path / "ca", a.get("values", CLOSE))
    clean_b = _write(tmp_path / "cb", b.get("values", SAME))
    assert cli_main(["compare", str(clean_a), str(clean_b), "--json"]) == clean_code
    assert json.loads(capsys.readouterr().out)["tainted"] == []
    assert load_study(clean_a).tainted() == []


@pytest.mark.parametrize("record, outputs, found", [
    ({"mode": "strict", "resume": {"exact": False, "problems": ["sidecar does not match"]}}, {},
     ["resumed inexactly (attempt 2 (resume2/): sidecar does not match)"]),  # the final attempt's record alone
    ({"mode": "strict", "resume": {"exact": True, "problems": []}},  # lost after an inexact resume, then exact
     {"resume1": "epoch 3\nyolo-det: resume not exact: no resume state; it resumes as the release does\n"},
     ["resumed inexactly (attempt 1 (resume1/): no resume state)"]),
    ({"mode": "warn"}, {}, ["ran under warn, not the study's strict"]),
    ({"mode": "strict", "settings": {"backward_mode": "off"}}, {},
     ["ran its backward passes under off, not the study's strict"]),
    ({"mode": "strict", "settings": {"backward_mode": "strict"}, "resume": {"exact": True}},
     {"": "yolo-det: determinism strict\n"}, []),
])
def test_a_seeds_taints_are_read_from_every_attempts_output_and_the_final_run_record(record, outputs, found, tmp_path):
    from types import SimpleNamespace

    from yolo_det.studies.study import taints

    run_dir = tmp_path / "run1"
    for attempt in ("", "resume1", "resume2"):
        (run_dir / attempt).mkdir(parents=True, exist_ok=True)
        (run_dir / attempt / "output.log").write_text(outputs.get(attempt, "yolo-det: determinism strict\n"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "determinism.json").write_text(json.dumps(record))
    log = SimpleNamespace(header={"report": str(tmp_path / "out" / "determinism.json")},
                          path=str(run_dir / "resume2" / "fingerprint.jsonl"), final=None)
    assert taints(log, run_dir, "strict") == found
