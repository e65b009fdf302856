"""Label caches that would train old labels: the real loaders of PyPI YOLOv5 and Ultralytics, in-process.

The control (no yolo-det session) shows each release reusing its cache after a label was corrected
keeping its size (and, for Ultralytics 8.4, which also keys on mtimes, its modification time);
under strict and warn the same edit makes the release rebuild its cache and the labels that
changed are named; under off the release keeps its behaviour and a warning names them.
"""

from __future__ import annotations

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
