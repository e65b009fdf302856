"""Which class a predictions.json's ``category_id`` is, and which class a ``coco_json`` annotation is (no training).

The releases write three id schemes: the YOLO class index (YOLOv5 ``--save-json`` on custom data), the index + 1
(Ultralytics ``save_json`` on custom data) and COCO's own 91-id category ids (both, on COCO: 80 classes in ids 1..90
with gaps). ``yolo-det val --predictions`` finds the scheme from the ids, the data's names and the data YAML, maps
it, and refuses (exit 2, naming the ids and what to do) ids no scheme explains. A ``coco_json``'s categories are
the classes by name, never by order; and the gap names a class mix-up between the labels and the annotations as
such, not as box precision. Every case is a tiny dataset written here, scored by the COCO API.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from support.cli import cli

pytest.importorskip("pycocotools")
converter = pytest.importorskip("ultralytics.data.converter")

#: What the releases write on COCO: class index -> COCO category id (Ultralytics' own function, the writer's map).
COCO91 = converter.coco80_to_coco91_class()


def _coco_names():
    """The 80 names of COCO's data YAML, as Ultralytics ships it (an 80-name COCO list)."""
    import ultralytics

    spec = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg/datasets/coco.yaml").read_text())
    return [spec["names"][i] for i in sorted(spec["names"])]


COCO_NAMES = _coco_names()
W, H = 64, 48


def _dataset(root: Path, names, images, coco_split: bool = False, coco_json=None) -> Path:
    """A YOLO dataset: ``images`` lists each image's objects (class, (x1, y1, x2, y2) px) on a 64x48 image.
    ``coco_split``: the split is ``ROOT/val2017.txt`` with ROOT named coco (COCO's own layout, where the releases
    write COCO's category ids); ``coco_json``: a COCO annotation file the data YAML names. Returns the YAML."""
    from PIL import Image

    (root / "images" / "val").mkdir(parents=True)
    (root / "labels" / "val").mkdir(parents=True)
    stems = []
    for i, objects in enumerate(images):
        stem = f"{i + 1:012d}"
        Image.new("RGB", (W, H)).save(root / "images" / "val" / f"{stem}.png")
        (root / "labels" / "val" / f"{stem}.txt").write_text("".join(
            f"{c} {(x1 + x2) / 2 / W} {(y1 + y2) / 2 / H} {(x2 - x1) / W} {(y2 - y1) / H}\n"
            for c, (x1, y1, x2, y2) in objects))
        stems.append(stem)
    spec = {"path": str(root), "val": "images/val", "names": list(names)}
    if coco_split:
        (root / "val2017.txt").write_text("".join(f"./images/val/{s}.png\n" for s in stems))
        spec["val"] = "val2017.txt"
    if coco_json is not None:
        (root / "instances.json").write_text(json.dumps(coco_json))
        spec["coco_json"] = "instances.json"
    (root / "data.yaml").write_text(yaml.safe_dump(spec))
    return root / "data.yaml"


def _rows(images, category, file_name: bool):
    """One exact detection per object, its ``category_id`` as ``category(class)``; Ultralytics rows carry file_name."""
    rows = []
    for i, objects in enumerate(images):
        stem = f"{i + 1:012d}"
        for c, (x1, y1, x2, y2) in objects:
            row = {"image_id": int(stem), "category_id": category(c), "bbox": [x1, y1, x2 - x1, y2 - y1],
                   "score": 0.9}
            rows.append({**row, "file_name": f"{stem}.png"} if file_name else row)
    return rows


def _all_found(result) -> bool:
    """Every object found by a box of its class: the COCO API's mAP50 and mAP50-95 are 1 (to the last bits of its
    mean); a wrong class map loses whole classes (at most 1 - 1/classes)."""
    return all(result["coco_metrics"][k] == pytest.approx(1.0, abs=1e-9) for k in ("mAP50", "mAP50-95"))


def _score(tmp_path: Path, data: Path, rows, *options):
    (tmp_path / "p.json").write_text(json.dumps(rows))
    return cli("val", "--predictions", tmp_path / "p.json", "--data", data, *options)


# COCO classes across the table: person (id 1), around the gaps at ids 12 and 26-30 (classes 11, 12, 24, 26), dining
# table, tv, toaster (class 70, id 80) and toothbrush (class 79, id 90)
COCO_IMAGES = [[(0, (2, 2, 20, 20)), (11, (30, 4, 60, 30))], [(12, (4, 10, 30, 40)), (24, (34, 2, 62, 22))],
               [(26, (1, 1, 31, 47)), (60, (33, 5, 63, 44))], [(62, (10, 10, 50, 40))],
               [(70, (3, 3, 23, 23)), (79, (30, 20, 60, 46))]]

SCHEMES = {  # writer -> (names, category id of class c, rows carry file_name, split as COCO's, scheme found)
    "yolov5 custom: class index": (COCO_NAMES, lambda c: c, False, False, "class"),
    "ultralytics custom: class + 1": (COCO_NAMES, lambda c: c + 1, True, False, "class+1"),
    "yolov5 on COCO: 91-id": (COCO_NAMES, lambda c: COCO91[c], False, True, "coco"),
    "ultralytics on COCO: 91-id": (COCO_NAMES, lambda c: COCO91[c], True, True, "coco"),
    "91-id, the split elsewhere": (COCO_NAMES, lambda c: COCO91[c], False, False, "coco"),
}


@pytest.mark.parametrize("case", SCHEMES)
def test_each_id_scheme_the_releases_write_is_found_and_scored_right(tmp_path, case):
    """Exact boxes of the right class: mAP 1 whatever scheme wrote the ids, and the JSON and text name the scheme."""
    names, category, file_name, coco_split, scheme = SCHEMES[case]
    data = _dataset(tmp_path / "coco", names, COCO_IMAGES, coco_split)
    proc = _score(tmp_path, data, _rows(COCO_IMAGES, category, file_name), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["scheme"] == scheme, result["category_ids"]
    assert _all_found(result)
    assert all(chain["start"]["mAP50"] > 0.99 for chain in result["gap"].values())
    assert result["category_ids"]["mapped"] == {str(category(c)): c for image in COCO_IMAGES for c, _ in image}
    text = _score(tmp_path, data, _rows(COCO_IMAGES, category, file_name))
    assert text.returncode == 0 and "category ids: " + scheme in text.stdout


#: stop sign and cat: ids 13 and 17 are class indices 13, 17 and COCO ids of classes 11, 15 alike
TIE = [[(11, (2, 2, 20, 20))], [(15, (30, 4, 60, 30))]]


@pytest.mark.parametrize("coco_split", [True, False])
def test_ids_two_schemes_explain_follow_what_the_release_writes_for_this_split(tmp_path, coco_split):
    """Ids 13 and 17 fit the class index, class + 1 and COCO's ids (stop sign 11 and cat 15): on COCO's split
    (``coco/val2017.txt``) every release writes COCO's ids, so that decides; elsewhere, without ``file_name`` or a
    writer recorded beside the file, YOLOv5 (class index) and Ultralytics 8.3.49 on (class + 1, e.g. 8.3.63) are
    both possible: refused, naming --category-ids (it used to read the class index: 8.3.63's ids one class off)."""
    truth = TIE if coco_split else [[(13, (2, 2, 20, 20))], [(17, (30, 4, 60, 30))]]
    data = _dataset(tmp_path / "coco", COCO_NAMES, truth, coco_split)
    proc = _score(tmp_path, data, _rows(TIE, lambda c: COCO91[c], False), "--json")
    if not coco_split:
        assert proc.returncode == 2 and "--category-ids" in proc.stderr and "file_name" in proc.stderr, proc.stderr
        proc = _score(tmp_path, data, _rows(TIE, lambda c: COCO91[c], False), "--json", "--category-ids", "class")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["scheme"] == ("coco" if coco_split else "class")
    assert "val2017.txt" in result["category_ids"]["why"] or not coco_split
    assert _all_found(result)


REFUSED = {  # case -> (names, the rows' category ids, words the message must hold)
    "an id in no scheme": (COCO_NAMES, [1, 90, 91], ["91"]),
    "a mix of schemes (0 and 90)": (COCO_NAMES, [0, 5, 90], ["0", "90"]),
    "COCO ids on a dataset not COCO's": (["a", "b", "c"], [1, 17, 90], ["17", "90", "COCO", "names"]),
    "a negative id": (["a", "b", "c"], [0, -1], ["-1"]),
    "a fractional id": (["a", "b", "c"], [0, 1.5], ["1.5"]),
    "ids two schemes map apart, nothing decides": (COCO_NAMES, [13, 80], ["13", "80", "--category-ids"]),
}


@pytest.mark.parametrize("case", REFUSED)
def test_ids_no_scheme_maps_are_refused_with_exit_2_naming_them(tmp_path, case):
    """Ids no scheme explains, or that two schemes explain as different classes with nothing to decide between them,
    are a refusal (exit 2, nothing on stdout) naming the ids and what to do; never a silent mAP 0."""
    names, ids, words = REFUSED[case]
    images = [[(0, (2 + 10 * i, 2, 10 + 10 * i, 12)) for i in range(len(ids))]]
    data = _dataset(tmp_path / "d", names, images)
    rows = [{"image_id": 1, "category_id": c, "bbox": [2 + 10 * i, 2, 8, 10], "score": 0.9}
            for i, c in enumerate(ids)]
    proc = _score(tmp_path, data, rows)
    assert proc.returncode == 2 and not proc.stdout, (proc.stdout, proc.stderr)
    assert "category" in proc.stderr and str(tmp_path / "p.json") in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_category_ids_chooses_the_scheme_and_refuses_ids_outside_it(tmp_path):
    """Ids 13 and 80 are classes 12 and 79 (class + 1) or stop sign and toaster (COCO's ids), the split not COCO's:
    refused without a choice; ``--category-ids coco`` settles it; a scheme the ids do not fit is refused."""
    images = [[(11, (2, 2, 20, 20)), (70, (30, 4, 60, 30))]]
    data = _dataset(tmp_path / "coco", COCO_NAMES, images)
    rows = _rows(images, lambda c: COCO91[c], False)
    assert sorted(r["category_id"] for r in rows) == [13, 80]
    proc = _score(tmp_path, data, rows)
    assert proc.returncode == 2 and "--category-ids" in proc.stderr
    proc = _score(tmp_path, data, rows, "--category-ids", "coco", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["scheme"] == "coco" and _all_found(result)
    assert "--category-ids" in result["category_ids"]["why"]
    proc = _score(tmp_path, data, rows, "--category-ids", "class")
    assert proc.returncode == 2 and "80" in proc.stderr and "class" in proc.stderr and not proc.stdout


# -- coco_json: categories by name ---------------------------------------------------------------------------------
NAMES = ["apple", "banana", "cherry"]
JSON_IMAGES = [[(0, (2, 2, 20, 20)), (1, (30, 4, 60, 30))], [(2, (4, 10, 30, 40)), (0, (34, 2, 62, 22))]]


def _instances(images, categories, category_of):
    """A COCO instances file of ``images``: ``categories`` [(id, name)], each object's category id
    ``category_of(class)``."""
    out = {"images": [{"id": 500 + i, "file_name": f"{i + 1:012d}.png", "width": W, "height": H}
                      for i in range(len(images))],
           "categories": [{"id": i, "name": n} for i, n in categories], "annotations": []}
    for i, objects in enumerate(images):
        for c, (x1, y1, x2, y2) in objects:
            out["annotations"].append({"id": len(out["annotations"]) + 1, "image_id": 500 + i,
                                       "category_id": category_of(c), "bbox": [x1, y1, x2 - x1, y2 - y1],
                                       "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    return out


JSON_ORDERS = {  # the file's categories: (id, name) in its id order, unlike the data's names
    "reversed": [(11, "cherry"), (12, "banana"), (13, "apple")],
    "rotated, ids with gaps": [(7, "banana"), (9, "cherry"), (40, "apple")],
    "case and spacing differ": [(5, "Banana"), (6, "APPLE"), (8, " cherry ")],
}


@pytest.mark.parametrize("order", JSON_ORDERS)
@pytest.mark.parametrize("written", ["class index", "the file's category ids"])
def test_coco_json_categories_are_the_classes_by_name_not_by_order(tmp_path, order, written):
    """A ``coco_json`` whose categories are in another order than the data's names: each annotation's class is its
    category's name in ``names``; predictions written as class indices, or as the file's own category ids, score 1."""
    categories = JSON_ORDERS[order]
    key = {n.strip().lower(): i for i, n in categories}
    category_of = (lambda c: key[NAMES[c]])
    data = _dataset(tmp_path / "d", NAMES, JSON_IMAGES, coco_json=_instances(JSON_IMAGES, categories, category_of))
    rows = _rows(JSON_IMAGES, (lambda c: c) if written == "class index" else category_of, False)
    proc = _score(tmp_path, data, rows, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ground_truth"].endswith("instances.json")
    assert _all_found(result)
    assert result["category_ids"]["scheme"] == ("class" if written == "class index" else "coco")


@pytest.mark.parametrize("categories, words", [
    ([(1, "apple"), (2, "banana"), (3, "durian")], ["durian", "cherry"]),
    ([(1, "apple"), (2, "banana"), (3, "cherry"), (4, "durian")], ["durian"]),
    ([(1, "apple"), (2, "apple"), (3, "cherry")], ["apple", "banana"]),
])
def test_a_coco_json_whose_names_are_not_the_datas_is_refused(tmp_path, categories, words):
    """Categories that are not the data's names (a name missing, one extra, one twice) are a refusal naming them and
    the file, never classes by order."""
    ids = [i for i, _ in categories]
    data = _dataset(tmp_path / "d", NAMES, JSON_IMAGES,
                    coco_json=_instances(JSON_IMAGES, categories, lambda c: ids[c]))
    proc = _score(tmp_path, data, _rows(JSON_IMAGES, lambda c: c, False))
    assert proc.returncode == 2 and not proc.stdout, proc.stdout
    assert "instances.json" in proc.stderr and "names" in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


# -- the gap: a class mix-up is named as one ------------------------------------------------------------------------
@pytest.mark.parametrize("mixed", [False, True])
def test_the_gap_names_a_class_mix_up_between_labels_and_annotations_not_box_precision(tmp_path, mixed):
    """The release matched its labels' classes; the coco_json says other classes for the same boxes (``mixed``) or
    the same ones in another category order. The truth step (box precision) moves nothing either way; a mix-up
    shows as the classes step, and a note names the objects and both classes."""
    from yolo_det.evaluation import gap
    from yolo_det.integrations import coco_eval

    categories = [(1, "cherry"), (2, "banana"), (3, "apple")]
    key = {n: i for i, n in categories}
    swap = {0: 1, 1: 0, 2: 2} if mixed else {0: 0, 1: 1, 2: 2}
    data = _dataset(tmp_path / "d", NAMES, JSON_IMAGES,
                    coco_json=_instances(JSON_IMAGES, categories, lambda c: key[NAMES[swap[c]]]))
    files = sorted((tmp_path / "d" / "images" / "val").glob("*.png"))
    capture = coco_eval.Capture()
    for file, objects in zip(files, JSON_IMAGES):
        boxes = np.array([b for _, b in objects], np.float32)
        classes = np.array([c for c, _ in objects])
        capture.add(str(file), boxes, np.full(len(objects), 0.9, np.float32), classes, labels=boxes,
                    label_classes=classes)
    rules = gap.release_rules("yolov5")
    result = coco_eval.report(capture, [str(f) for f in files], NAMES, "yolov5", rules,
                              {"mAP50": 0.995, "mAP50-95": 0.995}, data_yaml=str(data))
    steps = {s["rule"]: s for s in result["gap"]["steps"]}
    assert steps["truth"]["change"] == {"mAP50": 0.0, "mAP50-95": 0.0}, steps["truth"]
    assert result["gap"]["ends_at_coco_api"] is True
    mix_notes = [n for n in result["notes"] if "class" in n and "mix-up" in n]
    if mixed:
        assert steps["classes"]["change"]["mAP50-95"] < 0 and not _all_found(result)
        assert mix_notes and "apple" in mix_notes[0] and "banana" in mix_notes[0], result["notes"]
        assert any("mix-up" in line for line in coco_eval.describe(result))
    else:
        assert steps["classes"]["change"] == {"mAP50": 0.0, "mAP50-95": 0.0}
        assert _all_found(result) and not mix_notes


def test_coco_table_is_the_writers_map():
    """yolo-det's own table of COCO's categories gives the releases' class -> id map and COCO's names."""
    from yolo_det.evaluation import coco

    assert [i for i, _ in coco.COCO_CATEGORIES] == COCO91
    assert [n for _, n in coco.COCO_CATEGORIES] == COCO_NAMES


def test_a_file_without_rows_reads_no_ids_and_says_so(tmp_path):
    """An empty predictions.json scores 0 (nothing found) and claims no scheme evidence it does not have."""
    data = _dataset(tmp_path / "d", NAMES, JSON_IMAGES)
    proc = _score(tmp_path, data, [], "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["mapped"] == {} and "no rows" in result["category_ids"]["why"]
    assert result["coco_metrics"]["mAP50-95"] == 0.0
