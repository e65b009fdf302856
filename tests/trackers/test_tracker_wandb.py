"""Weights & Biases (docs/trackers.md; issue 61 item 4): the real ``wandb`` package in offline mode holds the same
evidence and verdicts as MLflow, read back from the run's offline files (its ``run-<id>.wandb`` records and files)
with a reader of their own here; the oracle is MLflow's run for the same folder, logged beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import PYTHON, run
from support.trackers import TINY, need, wandb_env, wandb_offline_run
from support.verify import script_env
from yolo_det.core import data_manifest
from yolo_det.trackers import evidence as evidence_mod
from yolo_det.trackers import links, log_run, log_verdict, selection


@pytest.fixture
def offline(tmp_path, monkeypatch):
    need("wandb")
    for name in ("YOLO_DET_TRACKERS", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID",
                 "WANDB_RUN_ID", "WANDB_ENTITY", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "wb"
    root.mkdir()
    for key, value in wandb_env(root).items():
        monkeypatch.setenv(key, value)
    return root


def _run_folder(root: Path) -> Path:
    """A strict run's folder: report, a closed fingerprint log and a data manifest of two splits."""
    data = root.parent / f"{root.name}-data"
    for split in ("train", "val"):
        (data / "images" / split).mkdir(parents=True)
        (data / "labels" / split).mkdir(parents=True)
        for i in range(2):
            (data / "images" / split / f"{i}.png").write_bytes(bytes([i, 7, len(split)]))
            (data / "labels" / split / f"{i}.txt").write_text(f"0 0.5 0.5 0.{i + 1} 0.2\n")
    root.mkdir(parents=True)
    files = {split: sorted((data / "images" / split).glob("*.png")) for split in ("train", "val")}
    manifest = data_manifest.build(files, data, names=["box"], digests=data_manifest.DigestCache(data, data / ".c"))
    (root / data_manifest.MANIFEST_FILE).write_text(json.dumps(manifest))
    log = root / "fingerprint.jsonl"
    log.write_text(json.dumps({"format": "yolo-det-fingerprint", "schema": 1}) + "\n" + json.dumps(
        {"final": True, "steps": 2, "names": ["w"], "digests": "ab" * 16, "closed_by": "finish", "run_dir": str(root)})
        + "\n")
    report = {"mode": "strict", "mode_source": "flag", "seed": 5, "seeds": {"run": 5}, "steps": 2,
              "fingerprint_log": str(log), "environment": {"torch": "2.x", "packages": {"yolov5": "7.0"}}, "yolov5": {}}
    (root / "determinism.json").write_text(json.dumps(report))
    return root


def test_wandb_offline_holds_the_evidence_and_verdicts_mlflow_holds(tmp_path, offline, monkeypatch):
    need("mlflow")
    from mlflow.tracking import MlflowClient

    folder = _run_folder(tmp_path / "exp")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # MLflow creates its tables (seconds) before the budget runs; the artifacts stay under tmp_path
    experiment = MlflowClient(tracking_uri=uri).create_experiment("t", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    monkeypatch.chdir(tmp_path)
    lines = []
    assert log_run(folder, echo=lines.append) == ["mlflow", "wandb"]  # both in use, no flag
    result = {"verdict": "differs", "first_divergence": {"step": 2}}
    assert log_verdict("verify", 1, result, [folder / "fingerprint.jsonl"], echo=lines.append) == [folder.resolve()]
    assert lines == []

    link = links.read(folder)
    assert link["wandb"]["started_by"] == "yolo-det" and link["wandb"]["mode"] == "offline"
    wb = wandb_offline_run(offline, link["wandb"]["run_id"])
    assert wb["segments"] == 2 and wb["project"] == "yolo-det-tests"  # the run, then the verdict's resumed segment
    ml = MlflowClient(tracking_uri=uri).get_run(link["mlflow"]["run_id"])
    ours = {k: v for k, v in ml.data.tags.items() if k.startswith("yolo_det.")}
    assert ours and {k: wb["summary"].get(k) for k in ours} == ours  # every MLflow tag, the same value
    assert {k: v for k, v in wb["config"].items() if k.startswith("yolo_det.")} == ml.data.params
    assert wb["summary"]["yolo_det.verdict.verify"] == "differs" and wb["summary"]["yolo_det.verdict.verify.exit_code"] == "1"
    # the files MLflow has as artifacts
    assert json.loads(wb["files"]["yolo_det/evidence.json"]) == json.loads(json.dumps(evidence_mod.run_evidence(folder)))
    assert json.loads(wb["files"]["yolo_det/determinism.json"]) == json.loads((folder / "determinism.json").read_text())
    verdict = json.loads(wb["files"]["yolo_det/verdicts/verify.json"])
    assert verdict["verdict"] == "differs" and verdict["exit_code"] == 1 and verdict["result"] == result
    assert verdict["runs"] == [str(folder.resolve())]
    # the data: MLflow's dataset input and W&B's dataset artifact carry the same content digest
    digest = data_manifest.content_digest(data_manifest.read(folder))
    assert [i.dataset.digest for i in ml.inputs.dataset_inputs] == [digest]
    dataset, = [a for a in wb["artifacts"] if a["type"] == "dataset"]
    assert dataset["metadata"]["digest"] == digest
    assert json.loads(dataset["files"]["data_manifest.json"]) == data_manifest.read(folder)


def test_a_users_active_wandb_run_is_logged_into_and_left_running(tmp_path, offline):
    import wandb

    folder = _run_folder(tmp_path / "exp")
    mine = wandb.init(project="mine", settings=wandb.Settings(silent=True, console="off"))
    try:
        assert log_run(folder, echo=pytest.fail) == ["wandb"]
        assert wandb.run is mine  # still active: the user's run is the user's to finish
        assert links.read(folder)["wandb"]["run_id"] == mine.id and links.read(folder)["wandb"]["started_by"] == "process"
    finally:
        mine.finish()
    wb = wandb_offline_run(Path(mine.settings.root_dir), mine.id)  # wandb's settings live as long as the process
    assert wb["segments"] == 1 and wb["summary"]["yolo_det.mode"] == "strict"


def test_wandb_offline_evidence_of_a_training_and_no_stdout(tmp_path, train_env):
    """A training's finish logs to W&B offline because ``WANDB_MODE`` says W&B is used; wandb prints nothing."""
    need("wandb")
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    root = tmp_path / "wb"
    root.mkdir()
    env = script_env(train_env, **wandb_env(root))
    for name in ("YOLO_DET_TRACKERS", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    proc = run([PYTHON, script, tmp_path / "run"], env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr and "wandb" not in proc.stdout, proc.stdout + proc.stderr
    link = links.read(tmp_path / "run")["wandb"]
    wb = wandb_offline_run(root, link["run_id"])
    assert wb["summary"]["yolo_det.mode"] == "warn" and wb["summary"]["yolo_det.steps"] == "2"


@pytest.mark.parametrize("environ,expected", [({}, False), ({"WANDB_MODE": "offline"}, True),
                                              ({"WANDB_MODE": "disabled", "WANDB_PROJECT": "p"}, False),
                                              ({"WANDB_PROJECT": "p"}, True)])
def test_wandb_is_in_use_from_its_environment_without_importing_it(tmp_path, environ, expected):
    from yolo_det.trackers import registry

    assert registry.get("wandb").in_use(tmp_path, {}, environ) is expected
    assert registry.get("wandb").in_use(tmp_path, {"run_id": "abc"}, {}) is True
    assert "wandb" in selection.requested({selection.ENV: "wandb,mlflow"})


@pytest.mark.slow
def test_ultralytics_own_wandb_callback_run_gets_the_evidence(tmp_path):
    """Ultralytics' W&B callback (``yolo settings wandb=True``) starts the run and finishes it at the end of
    training; yolo-det notes it first and logs into it (still active, or resumed by its id once finished)."""
    need("wandb")
    pytest.importorskip("ultralytics")
    import subprocess
    import sys

    from yolo_det.synthetic import make_dataset, offline_env

    env = script_env(offline_env(tmp_path / "config"), PYTHONUNBUFFERED="1", **wandb_env(tmp_path / "wb"))
    env.pop("PYTEST_CURRENT_TEST", None)  # Ultralytics' W&B callback stays off while a test runs (its own switch)
    for name in ("YOLO_DET_TRACKERS", "MLFLOW_TRACKING_URI", "YOLO_DET_DETERMINISTIC", "YOLO_DET_FINGERPRINT"):
        env.pop(name, None)
    (tmp_path / "wb").mkdir()
    subprocess.run([sys.executable, "-c", "from ultralytics.utils import SETTINGS; "
                    "SETTINGS.update(wandb=True, mlflow=False, raytune=False)"], env=env, check=True)
    data = make_dataset(tmp_path / "data", n_train=8, n_val=4, imgsz=64)
    args = dict(model="yolov8n.yaml", data=data, epochs=1, imgsz=32, batch=4, nbs=4, workers=0, plots=False,
                val=True, amp=False, device="cpu", project=tmp_path, name="u", exist_ok=True, seed=0,
                deterministic="strict")
    proc = run([PYTHON, "-m", "yolo_det", "ultralytics", "train", *[f"{k}={v}" for k, v in args.items()]],
               cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "yolo-det: warning" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    link = links.read(tmp_path / "u")["wandb"]
    assert link["started_by"] == "ultralytics", link
    assert Path(link["dir"]) == tmp_path / "u"  # where Ultralytics' callback put the run (its dir=save_dir)
    wb = wandb_offline_run(Path(link["dir"]), link["run_id"])
    assert wb["segments"] in (1, 2)  # logged while the run is active, or into a resumed segment of the same id
    assert wb["config"].get("epochs") == 1  # Ultralytics' own config: one run holds both
    assert wb["summary"]["yolo_det.mode"] == "strict" and wb["summary"]["yolo_det.resume.exact"] == "not resumed"
    report = json.loads((tmp_path / "u" / "determinism.json").read_text())
    assert wb["summary"]["yolo_det.seed"] == str(report["seed"])
