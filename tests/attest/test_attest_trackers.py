"""The evidence where users look, continued: `yolo-det attest` attaches its signed bundle to the tracker runs that
hold the run's evidence (MLflow artifacts under ``yolo_det/attestation/``, a W&B artifact of type ``attestation``),
read back from MLflow's store and W&B's offline files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.attest import keypair, synthetic_run
from support.cli import cli
from support.trackers import need, wandb_env, wandb_offline_run
from yolo_det.trackers import links, log_run


def test_the_bundle_goes_to_the_mlflow_and_wandb_runs_of_the_attested_run(tmp_path, monkeypatch):
    need("mlflow")
    need("wandb")
    pytest.importorskip("model_signing")
    from mlflow.tracking import MlflowClient

    for name in ("YOLO_DET_TRACKERS", "MLFLOW_EXPERIMENT_NAME", "WANDB_RUN_ID", "WANDB_ENTITY", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "wb"
    root.mkdir()
    for key, value in wandb_env(root).items():
        monkeypatch.setenv(key, value)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = MlflowClient(tracking_uri=uri).create_experiment("t", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    monkeypatch.setenv("YOLO_DET_TRACKER_BUDGET", "120")  # a loaded 2-core machine: the store, not the budget, is tested
    monkeypatch.chdir(tmp_path)
    run = synthetic_run(tmp_path / "r")
    assert sorted(log_run(run, echo=print)) == ["mlflow", "wandb"]  # the training's evidence went to both
    key, _ = keypair(tmp_path, "owner")
    proc = cli("attest", run, "--key", key, "--out", tmp_path / "bundle", "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)["trackers"]) == ["mlflow", "wandb"] and "warning" not in proc.stderr
    held = links.read(run)
    client = MlflowClient(tracking_uri=uri)
    artifacts = {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(held["mlflow"]["run_id"], "yolo_det/attestation")}
    assert {"provenance.intoto.json", "model.sig", "bom.cdx.json", "fingerprint.jsonl"} <= artifacts
    deadline = time.monotonic() + 60  # wandb's service writes a finished segment's records after finish() returns
    while True:
        # where the run went: wandb keeps the first WANDB_DIR of the process (an earlier test's), the link says
        wb = wandb_offline_run(Path(held["wandb"].get("dir") or root), held["wandb"]["run_id"])
        found = [a for a in wb["artifacts"] if a["type"] == "attestation"]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    bundle, = found
    signed = json.loads((tmp_path / "bundle" / "provenance.intoto.json").read_text())
    assert json.loads(bundle["files"]["provenance.intoto.json"]) == signed
