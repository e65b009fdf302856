"""Evidence in the experiment trackers (docs/trackers.md): a strict run's evidence and a command's verdict read
back from a real MLflow tracking server (SQLite backend, started here) and from TensorBoard event files; a tracker
that fails or is not installed never fails the training."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from support.builders import log_lines, run_folder
from support.cli import cli
from conftest import PYTHON, run
from support.trackers import TINY, MlflowServer, free_port as _free_port, need as _need
from support.verify import Background, outcome, reraise, script_env
from yolo_det.core import data_manifest
from yolo_det.core.env_names import KEEP_RESUME
from yolo_det.record import run_folder as layout
from yolo_det.synthetic import make_dataset
from yolo_det.trackers import evidence as evidence_mod
from yolo_det.trackers import links, selection

V5_TRAIN = ["--epochs", "1", "--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0",
            "--batch-size", "4", "--noplots", "--device", "cpu", "--deterministic", "strict"]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    _need("mlflow")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tracked(mlflow_server, tmp_path_factory, patched_yolov5, train_env):
    """One strict YOLOv5 run and one strict Ultralytics run, each of one epoch of two steps, trained with
    ``MLFLOW_TRACKING_URI`` at the test server (side by side: two processes), and the server's URI."""
    root = tmp_path_factory.mktemp("tracked")
    data = make_dataset(root / "data", n_train=8, n_val=4, imgsz=64)
    uri = mlflow_server.uri()
    env = script_env(train_env, MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="yolo-det-tests")
    env.pop(KEEP_RESUME)  # as users train: a completed run keeps only the full-precision EMA of its resume state
    v5 = [PYTHON, "train.py", "--data", data, *V5_TRAIN, "--project", root, "--name", "v5"]
    args = dict(model="yolov8n.yaml", data=data, epochs=1, imgsz=32, batch=4, nbs=4, workers=0, plots=False,
                val=True, amp=False, device="cpu", project=root, name="u", exist_ok=True, seed=0,
                deterministic="strict")
    # Ultralytics' MLflow callback stays off under pytest unless the test's name says test_mlflow (its own switch)
    u_env = {**env, "PYTEST_CURRENT_TEST": "tests/trackers/test_trackers.py::test_mlflow_ultralytics (call)"}
    ultralytics = Background(lambda: outcome(lambda: run(
        [PYTHON, "-m", "yolo_det", "ultralytics", "train", *[f"{k}={v}" for k, v in args.items()]],
        cwd=root, env=u_env)))
    yolov5 = outcome(lambda: run(v5, cwd=patched_yolov5, env=env))
    return {"uri": uri, "root": root, "v5": (yolov5, root / "v5"), "u": (ultralytics.result(), root / "u")}


def _trained(pair):
    proc, folder = pair
    proc = reraise(proc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning: mlflow" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    return folder


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _check_run_evidence(client, run_id, folder):
    """The run's tags, params, dataset input and artifacts say what the folder's files say."""
    report = json.loads((folder / "determinism.json").read_text())
    manifest = data_manifest.read(folder)
    run = client.get_run(run_id)
    tags, params = run.data.tags, run.data.params
    assert tags["yolo_det.mode"] == "strict" == params["yolo_det.mode"]
    assert tags["yolo_det.seed"] == str(report["seed"]) == params["yolo_det.seed"]
    assert json.loads(tags["yolo_det.seeds"]) == report["seeds"]
    digest = data_manifest.content_digest(manifest)
    assert tags["yolo_det.data.digest"] == digest == params["yolo_det.data.digest"]
    assert tags["yolo_det.release.torch"] == report["environment"]["torch"]
    assert tags["yolo_det.resume.exact"] == "not resumed"
    final = evidence_mod.final_record(report["fingerprint_log"])
    assert tags["yolo_det.final.digest"] == hashlib.blake2b(final["digests"].encode(), digest_size=16).hexdigest()
    assert tags["yolo_det.final.steps"] == str(final["steps"]) == "2"
    inputs = run.inputs.dataset_inputs
    assert [(i.dataset.digest, i.dataset.source_type) for i in inputs] == [(digest, "local")]
    assert json.loads(inputs[0].dataset.source)["uri"] == manifest["root"]
    assert {t.key: t.value for t in inputs[0].tags} == {"mlflow.data.context": "train"}
    artifacts = {a.path for a in client.list_artifacts(run_id, "yolo_det")}
    assert {"yolo_det/determinism.json", "yolo_det/evidence.json"} <= artifacts
    local = client.download_artifacts(run_id, "yolo_det/evidence.json", str(folder.parent / f"dl-{run_id}"))
    assert json.loads(Path(local).read_text())["final"]["digest"] == tags["yolo_det.final.digest"]
    return run


@pytest.mark.slow
def test_mlflow_a_strict_yolov5_run_and_its_diff_verdict_read_back_from_the_server(tracked):
    folder = _trained(tracked["v5"])
    link = links.read(folder)["mlflow"]
    assert link["tracking_uri"] == tracked["uri"] and link["started_by"] == "yolo-det"
    client = _client(tracked["uri"])
    run = _check_run_evidence(client, link["run_id"], folder)
    assert run.info.run_name == "v5" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "yolo-det-tests"
    copy = folder.parent / "v5-copy"  # the run archived elsewhere: its trackers.json names the same MLflow run
    shutil.copytree(folder, copy)
    proc = cli("diff", folder, copy, "--json", env={**os.environ, "MLFLOW_TRACKING_URI": tracked["uri"]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    tags = client.get_run(link["run_id"]).data.tags
    assert tags["yolo_det.verdict.diff"] == "identical" and tags["yolo_det.verdict.diff.exit_code"] == "0"
    saved = client.download_artifacts(link["run_id"], "yolo_det/verdicts/diff.json", str(copy / "dl"))
    verdict = json.loads(Path(saved).read_text())
    assert verdict["command"] == "diff" and verdict["verdict"] == "identical"
    assert verdict["runs"] == [str(folder.resolve()), str(copy.resolve())]  # what was judged
    assert verdict["result"] is not None


@pytest.mark.slow
def test_mlflow_ultralytics_evidence_goes_into_the_run_its_own_callback_started(tracked):
    folder = _trained(tracked["u"])
    link = links.read(folder)["mlflow"]
    assert link["started_by"] == "ultralytics", link
    client = _client(tracked["uri"])
    run = _check_run_evidence(client, link["run_id"], folder)
    assert run.data.params["epochs"] == "1"  # Ultralytics' own params: one run holds both
    assert run.info.status == "FINISHED"  # ended by Ultralytics' callback, logged into afterwards
    assert client.get_experiment(run.info.experiment_id).name == "yolo-det-tests"


def _artifacts(client, run_id, path=None) -> list:
    """Every file an MLflow run holds, recursively."""
    out = []
    for item in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("release", ["u", "v5"])
def test_mlflow_a_completed_run_leaves_no_resume_state_and_callbacks_upload_none_of_yolo_det_files(tracked, release):
    """Issue 60, item 11: Ultralytics' own MLflow callback uploads ``weights/`` at train end: none of yolo-det's files
    go with it (they wait aside), while yolo-det's tracker logs its evidence into the same run; at rest the completed
    run's sidecar holds only the full-precision EMA, and no ``.prev`` or aside folder is left."""
    proc, folder = tracked[release]
    folder = _trained((proc, folder))
    weights = folder / "weights"
    if release == "u":
        link = links.read(folder)["mlflow"]
        uploaded = _artifacts(_client(tracked["uri"]), link["run_id"])
        assert {"weights/last.pt", "weights/best.pt"} <= set(uploaded), uploaded  # the callback did upload weights/
        ours = [p for p in uploaded if layout.SIDECAR_SUFFIX in p or layout.RESUME_MARKER in p]
        assert not ours, uploaded
        assert (weights / layout.RESUME_MARKER).is_file()  # put back after the upload
    assert not (folder / layout.ASIDE_NAME).exists()
    assert not [p.name for p in weights.iterdir() if p.name.endswith(layout.PREVIOUS_SUFFIX)]
    sidecar = torch.load(weights / "last.pt.yolo-det", weights_only=True)
    assert sidecar["completed"] is True and sidecar["ema"] and "optimizer" not in sidecar and "rng" not in sidecar
    out = reraise(proc).stdout
    assert out.count("yolo-det: the training completed: removed its resume state") == 1
    assert "set YOLO_DET_KEEP_RESUME=1 to keep it" in out


@pytest.mark.slow
def test_tensorboard_events_of_a_yolov5_run_read_back(tracked):
    """YOLOv5 writes TensorBoard events into its run folder: the evidence goes there as text summaries."""
    _need("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = _trained(tracked["v5"])
    assert links.read(folder)["tensorboard"] == {"log_dir": str(folder.resolve())}
    assert list(folder.glob("events.out.tfevents.*.yolo-det"))
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    texts = {tag: [t.tensor_proto.string_val[0].decode() for t in events.Tensors(tag)]
             for tag in events.Tags()["tensors"] if tag.startswith("yolo_det/")}
    assert "| yolo_det.mode | strict |" in texts["yolo_det/run/text_summary"][0]
    report = json.loads((folder / "determinism.json").read_text())
    assert f'"seed": {report["seed"]}' in texts["yolo_det/evidence/text_summary"][0]


# -- a tracker that fails, is not installed, or is turned off: the training goes on -------------------------------
HIDE_MLFLOW = "import runpy, sys; sys.modules['mlflow'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


@pytest.mark.parametrize("case", ["unreachable", "not installed", "off", "not in use"])
def test_a_tracker_that_fails_is_missing_or_off_never_fails_the_training(case, tmp_path, train_env):
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    run_dir = tmp_path / "run"
    env = script_env(train_env, MLFLOW_TRACKING_URI=f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    env.pop("YOLO_DET_TRACKERS", None)
    cmd = [PYTHON, script, run_dir]
    if case == "not installed":
        cmd = [PYTHON, "-c", HIDE_MLFLOW, script, run_dir]
    elif case == "off":
        env["YOLO_DET_TRACKERS"] = "off"
    elif case == "not in use":
        env.pop("MLFLOW_TRACKING_URI")
    start = time.monotonic()
    proc = run(cmd, env=env, timeout=300)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (run_dir / "determinism.json").is_file()
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("yolo-det: warning:")]
    if case == "unreachable":
        _need("mlflow")
        assert len(warnings) == 1 and "mlflow could not log the run's evidence" in warnings[0], proc.stderr
        assert "MLFLOW_TRACKING_URI" in warnings[0] and "YOLO_DET_TRACKERS=off" in warnings[0]
        assert seconds < 120, seconds  # no retries: MLflow's default retries take minutes
        assert not (run_dir / links.FILE).exists()
    else:
        assert warnings == [], proc.stderr
        assert not (run_dir / links.FILE).exists()
        assert "mlflow imported: False" in proc.stdout  # never imported where it is not used


# -- the evidence and the choice of trackers, without a training -------------------------------------------------
@pytest.mark.parametrize("value,expected", [("", None), ("auto", None), ("off", ()), ("None", ()), ("0", ()),
                                            ("mlflow", ("mlflow",)), (" tensorboard , mlflow ", ("tensorboard", "mlflow"))])
def test_yolo_det_trackers_names_the_trackers(value, expected):
    assert selection.requested({selection.ENV: value}) == expected


@pytest.mark.parametrize("value", ["clearml", "mlflow,comet", "ml flow"])
def test_an_unknown_tracker_is_a_message_naming_the_known_ones(value):
    with pytest.raises(selection.SelectionError, match=r"YOLO_DET_TRACKERS=.*mlflow, tensorboard, wandb, or off"):
        selection.requested({selection.ENV: value})


def test_a_bad_yolo_det_trackers_is_one_warning_and_no_tracker(tmp_path, monkeypatch):
    from yolo_det.trackers import log_run

    (tmp_path / "determinism.json").write_text("{}")
    monkeypatch.setenv(selection.ENV, "clearml")
    lines = []
    assert log_run(tmp_path, echo=lines.append) == []
    assert len(lines) == 1 and "unknown tracker(s) clearml" in lines[0]


def _manifest(root: Path, label: str = "0 0.5 0.5 0.2 0.2\n", names=("box",)) -> dict:
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            (root / "images" / split / f"{i}.png").write_bytes(bytes([i, 1, 2, 3]))
            (root / "labels" / split / f"{i}.txt").write_text(label if i == 0 else "0 0.1 0.1 0.1 0.1\n")
    files = {split: sorted((root / "images" / split).glob("*.png")) for split in ("train", "val")}
    return data_manifest.build(files, root, names=list(names), digests=data_manifest.DigestCache(root, root / ".c"))


def test_the_data_digest_is_the_content_not_the_place(tmp_path):
    """Same files at another root: the same digest; a changed label, image or class name: another one."""
    base = data_manifest.content_digest(_manifest(tmp_path / "a"))
    assert data_manifest.content_digest(_manifest(tmp_path / "b")) == base
    assert data_manifest.content_digest(_manifest(tmp_path / "c", label="0 0.5 0.5 0.2 0.3\n")) != base
    assert data_manifest.content_digest(_manifest(tmp_path / "d", names=("disc",))) != base
    other = _manifest(tmp_path / "e")
    (tmp_path / "e" / "images" / "val" / "1.png").write_bytes(b"changed")
    changed = data_manifest.build({s: sorted((tmp_path / "e" / "images" / s).glob("*.png")) for s in ("train", "val")},
                                  tmp_path / "e", names=["box"], digests=data_manifest.DigestCache(tmp_path / "e", tmp_path / ".c2"))
    assert data_manifest.content_digest(other) == base != data_manifest.content_digest(changed)


def _log(path: Path, steps: int, tensors: int, final: bool = True, run_dir=None) -> str:
    names = [f"model.{i}.weight" for i in range(tensors)]
    hexes = "".join(hashlib.blake2b(str(i).encode(), digest_size=16).hexdigest() for i in range(tensors))
    lines = [{"format": "yolo-det-fingerprint", "schema": 1}]
    lines += [{"r": "0" * 48} for _ in range(steps)]
    if final:
        lines.append({"final": True, "steps": steps, "names": names, "digests": hexes, "closed_by": "finish",
                      "run_dir": run_dir})
    log_lines(path, lines)
    return hexes


@pytest.mark.parametrize("tensors", [1, 700, 5000])  # a final line shorter and longer than the tail read first
@pytest.mark.parametrize("steps", [0, 3, 2000])
def test_the_final_record_is_read_from_the_end_of_the_log(tmp_path, steps, tensors):
    hexes = _log(tmp_path / "fingerprint.jsonl", steps, tensors)
    final = evidence_mod.final_record(tmp_path / "fingerprint.jsonl")
    assert final["steps"] == steps and final["digests"] == hexes and len(final["names"]) == tensors


def test_a_log_without_its_final_line_has_no_final_record(tmp_path):
    _log(tmp_path / "a.jsonl", 3, 2, final=False)
    (tmp_path / "b.jsonl").write_text('{"final": true, "steps": 1, "names": [], "dig')  # cut by a kill
    for name in ("a.jsonl", "b.jsonl", "missing.jsonl"):
        assert evidence_mod.final_record(tmp_path / name) is None


def _run_folder(root: Path, resume=None) -> Path:
    log = root / "fingerprint.jsonl"
    report = {"mode": "warn", "mode_source": "env", "seed": 7, "seeds": {"run": 7}, "steps": 4,
              "fingerprint_log": str(log), "violations": {"ops": [{"op": "aten::index_add_", "count": 2}]},
              "environment": {"torch": "2.x", "packages": {"ultralytics": "8.4"}}, "ultralytics": {}}
    if resume is not None:
        report["resume"] = resume
    run_folder(root, report=report)
    _log(log, 4, 3, run_dir=str(root))
    return root


@pytest.mark.parametrize("resume,tag", [(None, "not resumed"), ({"exact": True, "epoch": 3}, "true"),
                                        ({"exact": False, "problems": ["no sidecar"]}, "false")])
def test_run_evidence_says_what_the_folder_says(tmp_path, resume, tag):
    folder = _run_folder(tmp_path / "run", resume)
    evidence = evidence_mod.run_evidence(folder)
    tags = evidence_mod.tags(evidence)
    assert tags["yolo_det.mode"] == "warn" and tags["yolo_det.seed"] == "7" and tags["yolo_det.steps"] == "4"
    assert tags["yolo_det.resume.exact"] == tag
    assert tags["yolo_det.nondeterministic_ops"] == "aten::index_add_"
    assert tags["yolo_det.release.program"] == "ultralytics" and tags["yolo_det.release.program_version"] == "8.4"
    assert tags["yolo_det.final.steps"] == "4" and tags["yolo_det.final.tensors"] == "3"
    assert evidence["data"] is None and "yolo_det.data.digest" not in tags  # no manifest: nothing claimed
    assert all(len(value) <= evidence_mod.TAG_LIMIT for value in tags.values())
    assert evidence_mod.run_evidence(tmp_path) is None  # not a run


def test_a_command_finds_the_run_folder_of_a_folder_a_log_or_a_checkpoint(tmp_path):
    folder = _run_folder(tmp_path / "runs" / "exp")
    (folder / "weights").mkdir()
    (folder / "weights" / "best.pt").write_bytes(b"x")
    elsewhere = tmp_path / "verify" / "run1"  # verify's logs live in its workdir; their final line names the run
    elsewhere.mkdir(parents=True)
    _log(elsewhere / "fingerprint.jsonl", 2, 1, run_dir=str(folder))
    for given in (folder, folder / "fingerprint.jsonl", folder / "weights" / "best.pt", elsewhere / "fingerprint.jsonl"):
        assert links.run_folder(given) == folder.resolve(), given
    assert links.run_folder(tmp_path) is None
    assert links.linked_folders([folder, None]) == []  # no trackers.json: nothing to attach to
    links.remember(folder, "tensorboard", {"log_dir": str(folder)})
    links.remember(folder, "mlflow", {"run_id": "r1"})
    links.remember(folder, "mlflow", {"tracking_uri": "http://h"})
    assert links.read(folder) == {"tensorboard": {"log_dir": str(folder)}, "mlflow": {"run_id": "r1", "tracking_uri": "http://h"}}
    assert links.linked_folders([folder, folder / "weights" / "best.pt", None]) == [folder.resolve()]


def test_tensorboard_evidence_and_verdicts_read_back(tmp_path, monkeypatch):
    """Asked for by name (YOLO_DET_TRACKERS=tensorboard): the run's evidence, then a verdict, as text summaries."""
    _need("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from yolo_det.trackers import log_run, log_verdict

    folder = _run_folder(tmp_path / "run")
    monkeypatch.setenv(selection.ENV, "tensorboard")
    assert log_run(folder, echo=pytest.fail) == ["tensorboard"]
    copy = tmp_path / "copy"  # a copied run folder names the same log folder: the verdict is written there once
    shutil.copytree(folder, copy)
    result = {"verdict": "differs", "first_divergence": {"step": 2}}
    judged = log_verdict("verify", 1, result, [folder / "fingerprint.jsonl", copy], echo=pytest.fail)
    assert judged == [folder.resolve(), copy.resolve()]
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    assert len(events.Tensors("yolo_det/verdict/verify/text_summary")) == 1
    text = {tag: events.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert "| yolo_det.resume.exact | not resumed |" in text["yolo_det/run/text_summary"]
    assert text["yolo_det/verdict/verify/text_summary"].startswith("**differs** (exit 1)")
    assert '"step": 2' in text["yolo_det/verdict/verify/text_summary"]
    monkeypatch.setenv(selection.ENV, "off")
    assert log_verdict("diff", 0, {}, [folder], echo=pytest.fail) == []
