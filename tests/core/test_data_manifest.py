"""The data manifest: every image and label of each split by content, compared file by file."""

import json
import os
import shutil

import pytest

from yolo_det.core import data_manifest as dm
from yolo_det.synthetic import make_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("data") / "ds", n_train=6, n_val=3, imgsz=64)


@pytest.fixture()
def copy(dataset, tmp_path, monkeypatch):
    """A private copy of the dataset (its data.yaml's path pointing at it) and a private digest cache."""
    monkeypatch.setenv("YOLO_DET_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "ds"
    shutil.copytree(dataset.parent, root)
    text = (root / "data.yaml").read_text().replace(str(dataset.parent.resolve()), str(root.resolve()))
    (root / "data.yaml").write_text(text)
    return root


def _edit_same_size(path):
    """Change a label's first class id (0 <-> 1) keeping the file's size, as a corrected label does."""
    text = path.read_text()
    new = ("1" if text[0] == "0" else "0") + text[1:]
    path.write_text(new)
    assert len(new) == len(text)


def test_manifest_lists_every_file_of_each_split_by_content(copy):
    m = dm.from_data_yaml(copy / "data.yaml")
    assert m["root"] == str(copy.resolve())
    assert m["names"] == {"0": "rect", "1": "ellipse"} or len(m["names"]) == 2
    train, val = m["splits"]["train"], m["splits"]["val"]
    assert len(train["images"]) == 6 and len(train["labels"]) == 6 and len(val["images"]) == 3
    assert "images/train/train_0000.png" in train["images"] and "labels/train/train_0000.txt" in train["labels"]
    entry = train["labels"]["labels/train/train_0000.txt"]
    assert entry["size"] == (copy / "labels/train/train_0000.txt").stat().st_size
    assert entry["digest"] == dm.file_digest(copy / "labels/train/train_0000.txt")
    assert m["files"] == 18 and train["missing_labels"] == []


def test_same_size_label_edit_is_named_and_nothing_else(copy):
    before = dm.from_data_yaml(copy / "data.yaml")
    label = copy / "labels/train/train_0003.txt"
    stamp = label.stat()
    _edit_same_size(label)
    os.utime(label, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as cp -p / rsync -t keep it
    after = dm.from_data_yaml(copy / "data.yaml")
    changes = dm.compare(before, after)
    assert changes.changed == {"train": ["labels/train/train_0003.txt"]}
    assert not changes.added and not changes.removed and not changes.empty
    assert changes.describe() == "1 label file changed (train): labels/train/train_0003.txt"
    assert dm.compare(after, dm.from_data_yaml(copy / "data.yaml")).empty


def test_image_removed_and_added_and_missing_label(copy):
    before = dm.from_data_yaml(copy / "data.yaml")
    (copy / "images/train/train_0001.png").unlink()
    shutil.copy(copy / "images/train/train_0002.png", copy / "images/train/extra.png")  # no label for it
    after = dm.from_data_yaml(copy / "data.yaml")
    changes = dm.compare(before, after)
    # the label stays on disk but no longer trains: it leaves the manifest with its image
    assert changes.removed == {"train": ["images/train/train_0001.png", "labels/train/train_0001.txt"]}
    assert changes.added == {"train": ["images/train/extra.png"]}
    assert after["splits"]["train"]["missing_labels"] == ["labels/train/extra.txt"]
    text = changes.describe()
    assert "1 image file added (train): images/train/extra.png" in text
    assert "1 image file removed (train): images/train/train_0001.png" in text


def test_describe_shows_the_first_few_and_how_many_more(copy):
    before = dm.from_data_yaml(copy / "data.yaml")
    for i in range(6):
        _edit_same_size(copy / f"labels/train/train_{i:04d}.txt")
    changes = dm.compare(before, dm.from_data_yaml(copy / "data.yaml"))
    assert changes.describe(limit=2) == ("6 label files changed (train): labels/train/train_0000.txt, "
                                         "labels/train/train_0001.txt and 4 more")
    assert len(changes.files("changed")) == 6


def test_txt_lists_and_lists_of_sources_resolve_as_the_loaders_do(copy):
    (copy / "train.txt").write_text("./images/train/train_0000.png\n./images/train/train_0001.png\n")
    data = {"path": str(copy), "train": ["train.txt", "images/val"], "val": "images/val", "names": ["a", "b"]}
    m = dm.from_data_yaml(data)
    assert sorted(m["splits"]["train"]["images"]) == ["images/train/train_0000.png", "images/train/train_0001.png",
                                                      "images/val/val_0000.png", "images/val/val_0001.png",
                                                      "images/val/val_0002.png"]
    assert m["names"] == {"0": "a", "1": "b"}
    (copy / "train.cache").write_bytes(b"cache")
    (copy / "labels/val.cache").write_bytes(b"val cache")
    m = dm.from_data_yaml(data)
    assert set(m["caches"]) == {"train.cache", "labels/val.cache"}
    with pytest.raises(FileNotFoundError, match="nope"):
        dm.from_data_yaml(dict(data, train="nope"))


def test_relative_path_resolves_against_the_yaml_folder(copy, monkeypatch, tmp_path):
    (copy / "rel.yaml").write_text("path: .\ntrain: images/train\nval: images/val\nnames: [a, b]\n")
    monkeypatch.chdir(tmp_path)
    assert dm.from_data_yaml(copy / "rel.yaml")["root"] == str(copy.resolve())


def test_repeat_reads_no_file_whose_stat_is_unchanged(copy, tmp_path):
    cache = dm.DigestCache(copy, tmp_path / "digests")
    first = dm.from_data_yaml(copy / "data.yaml", digests=cache)
    cache.save()
    assert cache.misses == 18
    again = dm.DigestCache(copy, tmp_path / "digests")
    second = dm.from_data_yaml(copy / "data.yaml", digests=again)
    assert again.hits == 18 and again.misses == 0
    assert dm.compare(first, second).empty


def test_corrupt_digest_cache_is_ignored_and_rewritten(copy):
    dm.from_data_yaml(copy / "data.yaml")
    files = list((dm.cache_dir() / "digests").glob("*.json"))
    assert len(files) == 1
    files[0].write_text('{"entries": {"x": [1, 2')
    m = dm.from_data_yaml(copy / "data.yaml")
    assert len(m["splits"]["train"]["labels"]) == 6
    assert json.loads(files[0].read_text())["entries"]


def test_write_and_read_beside_the_run(copy, tmp_path):
    m = dm.from_data_yaml(copy / "data.yaml")
    path = dm.write(tmp_path / "run", m)
    assert path.name == dm.MANIFEST_FILE and not list((tmp_path / "run").glob(".*"))
    assert dm.read(tmp_path / "run") == json.loads(json.dumps(m))
    assert dm.read(tmp_path / "elsewhere") is None
    path.write_text("{not json")
    with pytest.raises(ValueError, match="data_manifest.json"):
        dm.read(tmp_path / "run")


def test_class_names_and_splits_compared(copy):
    a = dm.from_data_yaml(copy / "data.yaml")
    b = dm.from_data_yaml(dict(dm.resolve_data(copy / "data.yaml")[1], names=["rect", "circle"]), splits=("train",))
    changes = dm.compare(a, b)
    assert changes.names is not None and changes.splits_only == {"val": "A"}
    assert "class names differ" in changes.describe() and not changes.changed
