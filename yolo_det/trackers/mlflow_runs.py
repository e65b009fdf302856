"""The MLflow backend: a run's evidence as ``yolo_det.*`` tags and params, the data manifest as an MLflow dataset
input (``log_inputs``, its content digest as the dataset digest), ``determinism.json`` and the evidence JSON as
artifacts under ``yolo_det/``; a command's verdict as ``yolo_det.verdict.<command>`` and an artifact.

Every call goes through :class:`MlflowClient` with a tracking URI and run id of its own (the user's active run
and MLflow's global state stay as they were), with MLflow's HTTP retries off and a short timeout: a server that
is down costs seconds, not MLflow's default minutes of retries. A SQLite store is opened once with ``sqlite3``
first: a path that cannot hold a database fails at once instead of in MLflow's ~100 s of engine retries.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional

from ..core import env_names
from .backend import Backend, Link
from .evidence import REPORT_NAME, tags, verdict_tags

#: Seconds one HTTP request of ours may take (``YOLO_DET_TRACKER_TIMEOUT`` overrides); retries: none.
TIMEOUT_S = 5
ARTIFACT_DIR = "yolo_det"
EVIDENCE_NAME = "evidence.json"
#: Evidence that is also a param (the run table's filter columns); params cannot change once logged.
PARAMS = ("mode", "seed", "data.digest")

_HTTP_LOCK = threading.Lock()
_HTTP_USERS = [0, {}]  # calls inside quick_http now, and the environment they replaced


def active_mlflow_run() -> Optional[object]:
    """The MLflow run active in this process, when mlflow is already imported (never imports it)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None or not hasattr(mlflow, "active_run"):
        return None
    try:
        return mlflow.active_run()
    except Exception:  # noqa: BLE001 - a tracker's state never fails the run
        return None


@contextlib.contextmanager
def quick_http() -> Iterator[None]:
    """MLflow's HTTP client without retries and with a short timeout, while a call of ours runs (calls in other
    threads share the setting; the environment is restored when the last one ends, even one the budget left)."""
    timeout = os.environ.get(env_names.TRACKER_TIMEOUT) or str(TIMEOUT_S)
    ours = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": timeout,
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0"}
    with _HTTP_LOCK:
        if _HTTP_USERS[0] == 0:
            _HTTP_USERS[1] = {key: os.environ.get(key) for key in ours}
            os.environ.update(ours)
        _HTTP_USERS[0] += 1
    try:
        yield
    finally:
        with _HTTP_LOCK:
            _HTTP_USERS[0] -= 1
            if _HTTP_USERS[0] == 0:
                for key, value in _HTTP_USERS[1].items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value


def check_store(tracking_uri: Optional[str]) -> None:
    """A ``sqlite:///PATH`` store opened once with ``sqlite3`` (as MLflow would create it): a path that cannot
    hold a database is an OSError at once, not MLflow's ~100 s of engine retries and their log lines."""
    if not tracking_uri or not tracking_uri.startswith("sqlite:///"):
        return
    path = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return
    try:
        connection = sqlite3.connect(path, timeout=2)
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise OSError(f"cannot open the SQLite tracking store {path} ({exc}): the tracking URI must name a "
                      f"path where a database can be written") from None


def _client(tracking_uri: Optional[str]) -> Any:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or mlflow.get_tracking_uri()
    check_store(uri)  # before MLflow creates the store: its SQLite engine retries for ~100 s
    return MlflowClient(tracking_uri=uri)


def _target(link: Mapping[str, Any]) -> Dict[str, Any]:
    """Where the run's evidence goes: the process's active run, else the run the folder names (noted from
    Ultralytics' callback, or a resumed run's), else a new run (``tracking_uri`` and ``run_id`` None)."""
    active = active_mlflow_run()
    if active is not None:
        import mlflow

        return {"tracking_uri": mlflow.get_tracking_uri(), "run_id": active.info.run_id,
                "experiment_id": active.info.experiment_id, "started_by": "process"}
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if link.get("run_id") and (uri is None or link.get("tracking_uri") in (None, uri)):
        return {**link, "tracking_uri": link.get("tracking_uri") or uri}
    return {"tracking_uri": uri, "run_id": None}


def _experiment_id(client: Any) -> str:
    """``MLFLOW_EXPERIMENT_ID``, else ``MLFLOW_EXPERIMENT_NAME`` (created when missing), else MLflow's default."""
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return os.environ["MLFLOW_EXPERIMENT_ID"]
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name:
        return "0"
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else client.create_experiment(name)


def _dataset_input(evidence: Mapping[str, Any]) -> Any:
    """The data manifest as an MLflow dataset: its content digest, where it lives, its files per split."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    data = evidence["data"]
    root = str(data.get("root") or "")
    profile = {"files": data.get("files"), "images": data.get("images"), "names": data.get("names"),
               "digest_algorithm": data.get("algorithm")}
    dataset = Dataset(name=Path(root).name or "data", digest=data["digest"], source_type="local",
                      source=json.dumps({"uri": root}), profile=json.dumps(profile, sort_keys=True))
    return DatasetInput(dataset=dataset, tags=[InputTag(key="mlflow.data.context", value="train")])


def _log_json(client: Any, run_id: str, name: str, content: Mapping[str, Any], artifact_path: str) -> None:
    with tempfile.TemporaryDirectory(prefix="yolo-det-mlflow-") as folder:
        path = Path(folder) / name
        path.write_text(json.dumps(content, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        client.log_artifact(run_id, str(path), artifact_path)


def log_run(run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Dict[str, Any]:
    """Log a run's evidence (see the module's docstring); return the link to remember in ``trackers.json``."""
    from mlflow.entities import Param, RunTag

    target = _target(link)
    with quick_http():
        client = _client(target["tracking_uri"])
        created = target.get("run_id") is None
        if created:
            run = client.create_run(_experiment_id(client), run_name=Path(run_dir).name)
            target.update(run_id=run.info.run_id, experiment_id=run.info.experiment_id, started_by="yolo-det")
        run_id = target["run_id"]
        values = tags(evidence)
        client.log_batch(run_id, tags=[RunTag(key, value) for key, value in values.items()])
        try:  # a param keeps its first value: a run logged again with another one keeps only the tags' new value
            client.log_batch(run_id, params=[Param(f"yolo_det.{key}", values[f"yolo_det.{key}"])
                                             for key in PARAMS if f"yolo_det.{key}" in values])
        except Exception:  # noqa: BLE001 - MlflowException: a param logged before with another value
            pass
        if evidence.get("data"):
            client.log_inputs(run_id, datasets=[_dataset_input(evidence)])
        client.log_artifact(run_id, str(Path(run_dir) / REPORT_NAME), ARTIFACT_DIR)
        _log_json(client, run_id, EVIDENCE_NAME, evidence, ARTIFACT_DIR)
        if created:  # MLflow writes "View run ..." links to stdout here: kept off a command's JSON on stdout
            with contextlib.redirect_stdout(sys.stderr):
                client.set_terminated(run_id, "FINISHED")
        target["tracking_uri"] = target["tracking_uri"] or client.tracking_uri
    return {key: target.get(key) for key in ("tracking_uri", "run_id", "experiment_id", "started_by")}


def log_verdict(link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
    """Attach a command's verdict to the run ``link`` names: tags and ``yolo_det/verdicts/<command>.json``."""
    from mlflow.entities import RunTag

    with quick_http():
        client = _client(link.get("tracking_uri"))
        run_id = link["run_id"]
        client.log_batch(run_id, tags=[RunTag(key, value) for key, value in verdict_tags(evidence).items()])
        _log_json(client, run_id, f"{evidence['command']}.json", evidence, f"{ARTIFACT_DIR}/verdicts")


def log_files(link: Mapping[str, Any], folder: Path, name: str) -> None:
    """The files of ``folder`` as artifacts of the run ``link`` names, under ``yolo_det/<name>/``."""
    with quick_http():
        _client(link.get("tracking_uri")).log_artifacts(link["run_id"], str(folder), f"{ARTIFACT_DIR}/{name}")


def note_active_run(started_by: str) -> Optional[Dict[str, Any]]:
    """The MLflow run active in this process now (``tracking_uri``, ``run_id``, ``experiment_id``), when mlflow
    is imported and one is active: e.g. what Ultralytics' callback started, noted before the callback ends it."""
    active = active_mlflow_run()
    if active is None:
        return None
    import mlflow

    return {"tracking_uri": mlflow.get_tracking_uri(), "run_id": active.info.run_id,
            "experiment_id": active.info.experiment_id, "started_by": started_by}


class MlflowBackend(Backend):
    """MLflow (see the module's docstring)."""

    name = "mlflow"
    package = "mlflow"

    def in_use(self, run_dir: Path, link: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        """A tracking URI is set, an MLflow run is active in the process, or the run folder names one."""
        return bool(environ.get("MLFLOW_TRACKING_URI") or active_mlflow_run() is not None or link.get("run_id"))

    def prepare(self) -> None:
        import mlflow.entities  # noqa: F401
        import mlflow.tracking  # noqa: F401

    def log_run(self, run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Link:
        return log_run(run_dir, evidence, link)

    def log_verdict(self, link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
        log_verdict(link, evidence)

    def log_files(self, link: Mapping[str, Any], folder: Path, name: str) -> bool:
        log_files(link, folder, name)
        return True

    def active_run(self, started_by: str) -> Optional[Link]:
        return note_active_run(started_by)

    def target(self, link: Mapping[str, Any]) -> str:
        return repr((link.get("tracking_uri"), link.get("run_id")))


BACKEND = MlflowBackend()

__all__ = ["ARTIFACT_DIR", "BACKEND", "EVIDENCE_NAME", "MlflowBackend", "active_mlflow_run", "check_store",
           "log_run", "log_verdict", "note_active_run", "quick_http"]
