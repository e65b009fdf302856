"""Label caches that would train old labels: the real loaders of PyPI YOLOv5 and Ultralytics, in-process.

The control (no yolo-det session) shows each release reusing its cache after a label was corrected
keeping its size (and, for Ultralytics 8.4, which also keys on mtimes, its modification time);
under strict and warn the same edit makes the release rebuild its cache and the labels that
changed are named; under off the release keeps its behaviour and a warning names them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import yolo_det
from yolo_det.core import active, data_manifest as dm
from yolo_det.integrations import label_caches
from yolo_det.synthetic import make_dataset

EDITED = "labels/train/train_0003.txt"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("src") / "ds", n_train=6, n_val=2, imgsz=64).parent


@pytest.fixture()
def ds(source, tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_DET_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "ds"
    shutil.copytree(source, root)
    data = root / "data.yaml"
    data.write_text(data.read_text().replace(str(source.resolve()), str(root.resolve())))
    yield root
    session = active.current()
    if session is not None:
        session.finish(restore_flags=True, echo=lambda _: None)


def edit_label(root: Path) -> int:
    """Correct image 3's first class id (0 <-> 1) keeping the size and the mtime (cp -p, rsync -t); the new id."""
    path = root / EDITED
    stamp = path.stat()
    text = path.read_text()
    new_class = 1 if text[0] == "0" else 0
    path.write_text(str(new_class) + text[1:])
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size
    return new_class


def yolov5_first_class(root: Path) -> int:
    """Build the PyPI yolov5 train dataset as train.py does; the class its labels give image 3's first box."""
    dataloaders = pytest.importorskip("yolov5.utils.dataloaders")
    label_caches.install_yolov5()
    dataset = dataloaders.LoadImagesAndLabels(str(root / "images/train"), 64, 4, prefix="train: ")
    index = [Path(f).name for f in dataset.im_files].index("train_0003.png")
    return int(dataset.labels[index][0][0])


def ultralytics_first_class(root: Path) -> int:
    """Build an Ultralytics YOLODataset (installed release) as its trainer does; image 3's first class."""
    dataset_module = pytest.importorskip("ultralytics.data.dataset")
    label_caches.install_ultralytics()
    data = {"names": {0: "box", 1: "disc"}, "nc": 2, "channels": 3}
    dataset = dataset_module.YOLODataset(img_path=str(root / "images/train"), imgsz=64, augment=False, data=data,
                                         task="detect", prefix="train: ")
    index = [Path(f).name for f in dataset.im_files].index("train_0003.png")
    return int(dataset.labels[index]["cls"][0][0])


FAMILIES = {"yolov5": yolov5_first_class, "ultralytics": ultralytics_first_class}


@pytest.mark.parametrize("family", FAMILIES)
def test_control_without_yolo_det_the_release_trains_the_old_label(ds, family):
    load = FAMILIES[family]
    old = load(ds)
    assert (ds / "labels/train.cache").is_file()
    new = edit_label(ds)
    assert load(ds) == old != new  # the release's cache wins over the corrected file


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_strict_and_warn_rebuild_a_stale_cache_and_name_the_label(ds, family, mode, capsys):
    load = FAMILIES[family]
    session = yolo_det.configure(mode)
    load(ds)  # builds the cache and records what it was built from
    assert "not used" not in capsys.readouterr().out
    new = edit_label(ds)
    assert load(ds) == new
    out = capsys.readouterr().out
    assert f"label cache {ds / 'labels/train.cache'} not used (1 label file changed (train): {EDITED})" in out
    entry = session.extra["label_caches"][-1]
    assert entry["action"] == "rebuilt" and entry["changed"] == [EDITED] and entry["stale"]
    load(ds)  # the rebuilt cache is recorded: trusted again
    assert "not used" not in capsys.readouterr().out and len(session.extra["label_caches"]) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_off_keeps_the_releases_cache_and_warns_naming_the_label(ds, family, capsys):
    load = FAMILIES[family]
    session = yolo_det.configure("off")
    old = load(ds)
    new = edit_label(ds)
    assert load(ds) == old != new
    out = capsys.readouterr().out
    assert f"label cache {ds / 'labels/train.cache'} is stale (1 label file changed (train): {EDITED})" in out
    assert session.extra["label_caches"][-1]["action"] == "warned"
    assert any(EDITED in note for note in session.report.notes)


def test_a_cache_made_without_yolo_det_is_rebuilt_once_under_strict(ds, capsys):
    old = yolov5_first_class(ds)  # no session: the release's own cache, no record of its labels
    new = edit_label(ds)
    session = yolo_det.configure("strict")
    assert yolov5_first_class(ds) == new != old
    assert "no record of the label contents it was built from" in capsys.readouterr().out
    assert session.extra["label_caches"][-1]["stale"] is False
    yolov5_first_class(ds)
    assert len(session.extra["label_caches"]) == 1


def test_the_manifest_of_the_datasets_built(ds, tmp_path):
    yolo_det.configure("strict")
    label_caches.reset()
    yolov5_first_class(ds)
    path = label_caches.write_manifest(tmp_path / "run", ds / "data.yaml")
    manifest = dm.read(path.parent)
    assert manifest["root"] == str(ds.resolve()) and list(manifest["splits"]) == ["train"]
    assert len(manifest["splits"]["train"]["images"]) == 6 and EDITED in manifest["splits"]["train"]["labels"]
    assert "labels/train.cache" in manifest["caches"]


# -- whole training runs: the edit trains, and diff names it ----------------------------------------

TRAIN_ARGS = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0", "--batch-size", "4",
              "--noplots", "--device", "cpu", "--epochs", "1", "--deterministic", "strict"]


@pytest.mark.slow
def test_yolov5_label_edit_between_two_strict_runs_trains_and_is_named(source, tmp_path, patched_yolov5, train_env,
                                                                        capsys):
    from conftest import PYTHON, run

    repo = patched_yolov5
    root = tmp_path / "ds"
    shutil.copytree(source, root)
    data = root / "data.yaml"
    data.write_text(data.read_text().replace(str(source.resolve()), str(root.resolve())))
    env = dict(train_env, YOLO_DET_CACHE_DIR=str(tmp_path / "cache"))
    runs = tmp_path / "runs"

    def train(name):
        proc = run([PYTHON, "train.py", "--data", data, *TRAIN_ARGS, "--project", runs, "--name", name,
                    "--fingerprint", runs / f"{name}.jsonl"], cwd=repo, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    train("a")
    edit_label(root)
    out = train("b")
    assert f"not used (1 label file changed (train): {EDITED})" in out
    from yolo_det.cli import main as cli_main

    for a, b in ((runs / "a.jsonl", runs / "b.jsonl"), (runs / "a", runs / "b")):
        assert cli_main(["diff", str(a), str(b)]) == 1
        assert f"likely cause (data): the runs read different data: 1 label file changed (train): {EDITED}" \
            in capsys.readouterr().out
    manifest = dm.read(runs / "b")
    assert manifest["label_caches"][0]["action"] == "rebuilt" and set(manifest["splits"]) == {"train", "val"}


@pytest.mark.slow
def test_ultralytics_trainer_rebuilds_a_cache_it_cannot_vouch_for_and_records_the_run(ds, tmp_path, restore_environ,
                                                                                    capsys):
    pytest.importorskip("ultralytics")
    from ultralytics import YOLO
    from yolo_det.ultralytics import DeterministicTrainer

    ultralytics_first_class(ds)  # the release's own cache, made without yolo-det
    new = edit_label(ds)
    log = tmp_path / "fp.jsonl"
    os.environ["YOLO_DET_FINGERPRINT"] = str(log)  # restore_environ puts it back
    args = dict(data=str(ds / "data.yaml"), epochs=1, imgsz=64, batch=4, workers=0, plots=False, val=False, amp=False,
                device="cpu", project=str(tmp_path / "runs"), name="a", exist_ok=True, seed=0, deterministic="strict")
    YOLO("yolov8n.yaml").train(trainer=DeterministicTrainer, **args)
    assert f"label cache {ds / 'labels/train.cache'} not used (no record" in capsys.readouterr().out
    assert ultralytics_first_class(ds) == new  # the rebuilt cache holds the corrected label
    run = tmp_path / "runs/a"
    manifest = dm.read(run)
    assert manifest["root"] == str(ds.resolve()) and set(manifest["splits"]) == {"train", "val"}
    assert manifest["splits"]["train"]["labels"][EDITED]["digest"] == dm.file_digest(ds / EDITED)
    facts = json.loads((run / "determinism.json").read_text())["run_facts"]
    assert facts["amp"] is False and facts["train_workers"] == 0
    from yolo_det.proof.causes import read_manifest
    from yolo_det.record.log import read_log

    assert read_manifest(read_log(log).header, log) == manifest  # diff finds it from a log kept elsewhere


def test_identical_steps_still_say_a_run_trained_from_a_stale_cache(tmp_path, capsys):
    from yolo_det.cli import main as cli_main
    from support.builders import fingerprint_log

    manifest = {"root": "/d", "names": {"0": "a"}, "splits": {"train": {"labels": {EDITED: {"digest": "1"}}}}}
    stale = {"cache": "/d/labels/train.cache", "action": "warned", "changed": [EDITED], "added": [], "removed": []}
    for name, caches in (("a", []), ("b", [stale])):
        (tmp_path / name).mkdir()
        dm.write(tmp_path / name, dict(manifest, label_caches=caches))
        fingerprint_log(tmp_path / name / "fp.jsonl", {"torch": "2.14.1", "world_size": 1, "rank": 0, "seed": 0,
                                                       "command": ["t.py"]}, 1, {"param": (["w"], "0" * 32)},
                        lr={"group0.lr": 0.1})
    assert cli_main(["diff", str(tmp_path / "a/fp.jsonl"), str(tmp_path / "b/fp.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "note: training was identical but run B trained from a stale label cache /d/labels/train.cache " \
           f"(determinism off): the labels it holds are not the files' contents ({EDITED})" in out


RELEASE_SCRIPT = """\
import inspect, json, os, shutil, sys
from pathlib import Path
import yolo_det
from yolo_det.integrations import label_caches
from ultralytics.data import dataset as module
def first_class(root):
    label_caches.install_ultralytics()
    kwargs = dict(img_path=str(root / "images/train"), imgsz=64, augment=False, prefix="train: ",
                  data={"names": {0: "box", 1: "disc"}, "nc": 2, "channels": 3})
    if "task" in inspect.signature(module.YOLODataset.__init__).parameters:
        kwargs["task"] = "detect"
    ds = module.YOLODataset(**kwargs)
    i = [Path(f).name for f in ds.im_files].index("train_0003.png")
    return int(ds.labels[i]["cls"][0][0])
def edit(root):
    path = root / "labels/train/train_0003.txt"
    stamp, text = path.stat(), path.read_text()
    path.write_text(("1" if text[0] == "0" else "0") + text[1:])
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
out = {}
for mode in ("none", "strict"):  # the control without a session first
    root = Path(sys.argv[1]) / mode
    shutil.copytree(sys.argv[2], root)
    if mode != "none":
        yolo_det.configure(mode)
    before = first_class(root)
    edit(root)
    out[mode] = {"before": before, "after": first_class(root)}
import ultralytics
out["version"] = ultralytics.__version__
print("RESULT", json.dumps(out))
"""


@pytest.mark.slow
def test_ultralytics_8_3_side_by_side_keeps_a_stale_cache_and_strict_rebuilds_it(ds, tmp_path, train_env):
    """8.0-8.3 key the cache on the total size only (8.4, in-process above, adds mtimes)."""
    from conftest import PYTHON, ROOT, run

    from support.compat import compat, release

    folder = release("8.3.240")
    script = tmp_path / "release.py"
    script.write_text(RELEASE_SCRIPT)
    env = dict(train_env, PYTHONPATH=compat.pythonpath(folder) + os.pathsep + str(ROOT),
               YOLO_DET_CACHE_DIR=str(tmp_path / "cache"))
    proc = run([PYTHON, script, tmp_path, ds], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert results["version"] == "8.3.240"
    assert results["none"]["after"] == results["none"]["before"]  # the control: the release keeps the old label
    assert results["strict"]["after"] != results["strict"]["before"]
    assert f"not used (1 label file changed (train): {EDITED})" in proc.stdout


def test_an_image_removed_and_one_added_are_named_from_what_the_loader_read(ds, tmp_path):
    yolo_det.configure("strict")
    label_caches.reset()
    yolov5_first_class(ds)
    before = dm.read(label_caches.write_manifest(tmp_path / "a", ds / "data.yaml").parent)
    (ds / "images/train/train_0001.png").unlink()
    (ds / "labels/train/train_0001.txt").unlink()
    shutil.copy(ds / "images/train/train_0002.png", ds / "images/train/new.png")
    shutil.copy(ds / "labels/train/train_0002.txt", ds / "labels/train/new.txt")
    label_caches.reset()
    yolov5_first_class(ds)  # the release sees other sizes and rebuilds by itself
    after = dm.read(label_caches.write_manifest(tmp_path / "b", ds / "data.yaml").parent)
    changes = dm.compare(before, after)
    assert changes.added == {"train": ["images/train/new.png", "labels/train/new.txt"]}
    assert changes.removed == {"train": ["images/train/train_0001.png", "labels/train/train_0001.txt"]}
    assert "1 image file added (train): images/train/new.png" in changes.describe()
