"""Tracker stores for the tracker tests: a real ``mlflow server`` (SQLite backend) on a free local port, and a
silent one (accepts connections, never answers) that stops by itself; ``need`` skips without an optional extra."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest


#: A warn-mode training of two steps that ends through ``Session.finish(argv[1])``: a run folder, trackers called.
TINY = r'''
import sys
import torch
from torch import nn
import yolo_det

session = yolo_det.configure("warn", seed=0)
model = session.track(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    with session.backward():
        model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
session.finish(sys.argv[1])
print("mlflow imported:", sys.modules.get("mlflow") is not None)
'''


def need(module: str) -> None:
    """Skip without ``module`` (an optional extra), except under CI, where it must be installed."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed: CI installs the test extra (pip install -e .[test])")
        pytest.skip(f"{module} is not installed (pip install -e .[test])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a free local port with a SQLite backend; :meth:`uri` waits until ``/health`` answers."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.log = root / "server.log"
        mlflow = Path(sys.executable).with_name("mlflow")
        cmd = [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
               "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._up = False

    def uri(self, timeout: float = 240) -> str:
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout
        while not self._up:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    self._up = response.status == 200
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"mlflow server not up after {timeout} s:\n{self.log.read_text()[-3000:]}")
                time.sleep(0.5)
        return url

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers (a hung tracking server).

    Its thread polls ``accept`` with a short timeout until :meth:`stop` or ``lifetime`` seconds, whichever comes
    first, then closes every connection it held: it stops by itself even when a test never calls :meth:`stop`."""

    def __init__(self, lifetime: float = 120) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(128)
        self._socket.settimeout(0.2)
        self.port = self._socket.getsockname()[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self._stop = threading.Event()
        self._end = time.monotonic() + lifetime
        self._thread = threading.Thread(target=self._serve, name="silent-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        held = []
        try:
            while not self._stop.is_set() and time.monotonic() < self._end:
                try:
                    conn, _ = self._socket.accept()
                except OSError:  # the poll's timeout
                    continue
                held.append(conn)
                self.accepted += 1
        finally:
            for conn in held:
                conn.close()
            self._socket.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def wandb_env(root: Path) -> dict:
    """W&B offline with every folder it writes under ``root`` (runs, artifacts' staging, cache, settings)."""
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(root), "WANDB_DATA_DIR": str(root / "wandb-data"),
            "WANDB_CACHE_DIR": str(root / "wandb-cache"), "WANDB_CONFIG_DIR": str(root / "wandb-config"),
            "WANDB_ARTIFACT_DIR": str(root / "wandb-artifacts"), "WANDB_SILENT": "true", "WANDB_PROJECT": "yolo-det-tests"}


def wandb_records(path: Path) -> list:
    """The records of an offline run's ``run-<id>.wandb`` file, read here without wandb's reader: its LevelDB-style
    log (a 7-byte ``:W&B`` header, 32 KiB blocks of chunks with a 7-byte header: CRC32, length, type full / first
    / middle / last), each record a ``wandb_internal_pb2.Record``."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, chunks, parts = 7, 32768, [], []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            parts = [chunk]
        elif kind == 3:
            parts.append(chunk)
        elif kind == 4:
            chunks.append(b"".join(parts + [chunk]))
    records = []
    for raw in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def wandb_offline_run(root: Path, run_id: str) -> dict:
    """Everything the offline segments of W&B run ``run_id`` under ``root`` hold, merged in order as ``wandb sync``
    merges them: ``summary`` and ``config`` (JSON-decoded), ``artifacts`` (type, name, metadata, files' content),
    ``files`` (path under the run's files folder -> text), ``segments``."""
    import json

    out = {"summary": {}, "config": {}, "artifacts": [], "files": {}, "segments": 0, "project": None}
    for folder in sorted(Path(root).glob(f"wandb/offline-run-*-{run_id}*")):
        out["segments"] += 1
        deadline = time.monotonic() + 60  # wandb's service may still be writing a finished run's last records
        records = wandb_records(folder / f"run-{run_id}.wandb")
        while not any(r.WhichOneof("record_type") == "exit" for r in records) and time.monotonic() < deadline:
            time.sleep(0.2)
            records = wandb_records(folder / f"run-{run_id}.wandb")
        for record in records:
            kind = record.WhichOneof("record_type")
            if kind == "run":
                out["project"] = record.run.project
                out["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                out["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "summary":
                out["summary"].update({item.key: json.loads(item.value_json) for item in record.summary.update
                                       if item.key and not item.key.startswith("_")})
            elif kind == "artifact":
                out["artifacts"].append({
                    "type": record.artifact.type, "name": record.artifact.name,
                    "metadata": json.loads(record.artifact.metadata or "{}"),
                    "files": {entry.path: Path(entry.local_path).read_text(errors="replace")
                              for entry in record.artifact.manifest.contents
                              if entry.local_path and Path(entry.local_path).is_file()}})
        for file in sorted((folder / "files").rglob("*")):
            if file.is_file():
                out["files"][file.relative_to(folder / "files").as_posix()] = file.read_text(errors="replace")
    return out
