"""Generated predictions files against their oracles: perfect predictions score 1.0 or are refused, never else.

Each case is a tiny YOLO dataset (random classes, some never predicted, images without objects, optionally one stem in
two folders, a list-valued split) and a predictions.json of exact boxes written by a release's REAL JSON writer:
YOLOv5's ``save_one_json`` (imported from the installed ``yolov5`` package), the installed Ultralytics validator's
``pred_to_json`` (its ``class_map`` made by its own ``init_metrics``), and the shape of Ultralytics 8.3.49-8.3.x's
writer (class + 1, no ``file_name``: 8.3.63 and the forks built on it), whose real output is checked against that
shape in a child process where the release is installed (``scripts/compat.py``). The oracle: pycocotools, scoring
the same exact boxes with the true classes. The property: ``yolo-det val --predictions`` gives exit 0 with the
oracle's 1.0, or exit 2 with a message -- never another number. A malformed file (wrong types, lists, missing keys,
NaN, negative sizes) is exit 2 with a message naming the row, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from support.cli import cli

pytest.importorskip("pycocotools")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

W, H = 64, 48
SLOTS = [(2, 2, 18, 14), (22, 4, 40, 20), (44, 6, 62, 30), (4, 24, 20, 44), (26, 26, 50, 46)]


# -- the writers ---------------------------------------------------------------------------------------------------
def _yolov5_rows(detections, coco_split: bool):
    """YOLOv5 ``val.py``'s own ``save_one_json`` on each image's exact boxes (its class_map off COCO: range(1000))."""
    import torch
    from yolov5.utils.general import coco80_to_coco91_class
    from yolov5.val import save_one_json

    class_map = coco80_to_coco91_class() if coco_split else list(range(1000))
    jdict = []
    for path, boxes in detections:
        predn = torch.tensor([[*b, 0.9, float(c)] for c, b in boxes], dtype=torch.float32).reshape(-1, 6)
        save_one_json(predn, jdict, Path(path), class_map)
    return jdict


def _ultralytics_validator(data, nc, save_dir: Path):
    """The installed Ultralytics validator with the class_map its own ``init_metrics`` makes for ``data``."""
    from ultralytics.models.yolo.detect import DetectionValidator

    v = DetectionValidator(save_dir=save_dir, args=dict(save_json=True, split="val", plots=False))
    v.data = data
    v.dataloader = types.SimpleNamespace(dataset=types.SimpleNamespace(im_files=["x.png"]), sampler=[0])
    v.training = False
    v.init_metrics(types.SimpleNamespace(names={i: f"c{i}" for i in range(nc)}, end2end=False))
    return v


def _ultralytics_rows(detections, data, nc, save_dir: Path):
    """The installed Ultralytics validator's ``pred_to_json`` on each image's exact boxes."""
    import torch

    v = _ultralytics_validator(data, nc, save_dir)
    v.jdict = []
    for path, boxes in detections:
        predn = {"bboxes": torch.tensor([b for _, b in boxes], dtype=torch.float32).reshape(-1, 4),
                 "conf": torch.full((len(boxes),), 0.9), "cls": torch.tensor([float(c) for c, _ in boxes])}
        v.pred_to_json(predn, {"im_file": str(path)})
    return v.jdict


def _class_plus_one_rows(detections):
    """The shape of Ultralytics 8.3.49-8.3.x's writer (8.3.63 and the forks on it): ``image_id`` int(stem) or stem,
    ``category_id`` class + 1, no ``file_name`` (checked against the release's own code below)."""
    rows = []
    for path, boxes in detections:
        stem = Path(path).stem
        for c, (x1, y1, x2, y2) in boxes:
            rows.append({"image_id": int(stem) if stem.isnumeric() else stem, "category_id": c + 1,
                         "bbox": [round(float(v), 3) for v in (x1, y1, x2 - x1, y2 - y1)], "score": 0.9})
    return rows


WRITERS = ("yolov5", "ultralytics-installed", "ultralytics-8.3.63-shape")


# -- the dataset ---------------------------------------------------------------------------------------------------
def _dataset(root: Path, images, names, folders, list_split: bool):
    """Images (one list of (class, slot) per image) in ``folders`` (one stem in two folders when they repeat),
    labels beside them; the data YAML's val a folder, or a one-element list of it (``list_split``)."""
    from PIL import Image

    files = []
    for i, (objects, folder) in enumerate(zip(images, folders)):
        stem = str(i + 1) if folder == "a" else str(i)  # folder b repeats folder a's stems
        image = root / "images" / "val" / folder / f"{stem}.png"
        label = root / "labels" / "val" / folder / f"{stem}.txt"
        image.parent.mkdir(parents=True, exist_ok=True)
        label.parent.mkdir(parents=True, exist_ok=True)
        if image.exists():
            image = image.with_name(f"{stem}x.png")  # never overwrite: a stem used twice in one folder
            label = label.with_name(f"{stem}x.txt")
        Image.new("RGB", (W, H)).save(image)
        label.write_text("".join(f"{c} {(x1 + x2) / 2 / W} {(y1 + y2) / 2 / H} {(x2 - x1) / W} {(y2 - y1) / H}\n"
                                 for c, (x1, y1, x2, y2) in objects))
        files.append((image, objects))
    spec = {"path": str(root), "val": ["images/val"] if list_split else "images/val", "names": list(names)}
    (root / "data.yaml").write_text(yaml.safe_dump(spec))
    return root / "data.yaml", files, spec


@st.composite
def cases(draw):
    nc = draw(st.integers(1, 5))
    n_images = draw(st.integers(1, 4))
    predicted = draw(st.sets(st.integers(0, nc - 1), min_size=1))  # classes that occur (others never predicted)
    images = [[(draw(st.sampled_from(sorted(predicted))), SLOTS[k]) for k in range(draw(st.integers(0, 3)))]
              for _ in range(n_images)]
    if not any(images):
        images[0] = [(min(predicted), SLOTS[0])]
    folders = draw(st.lists(st.sampled_from("ab"), min_size=n_images, max_size=n_images))
    folders[0] = "a"
    return {"nc": nc, "images": images, "folders": folders, "list_split": draw(st.booleans()),
            "writer": draw(st.sampled_from(WRITERS))}


def _oracle(data: Path, files):
    """pycocotools on the same exact boxes with their true classes: the oracle's mAP50-95 (1.0 with any object)."""
    from yolo_det.evaluation import coco

    paths = sorted(p for p, _ in files)
    truth = coco.annotations_from_yolo(paths, [f"c{i}" for i in range(10)])
    rows = []
    for image_id, p in enumerate(paths, 1):
        objects = dict(files)[p]
        rows += [{"image_id": image_id, "category_id": c, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": 0.9}
                 for c, (x1, y1, x2, y2) in objects]
    return coco.score(truth, rows, "pycocotools")["stats"]["AP"]


def _write(case, root: Path):
    names = [f"c{i}" for i in range(case["nc"])]
    data, files, spec = _dataset(root, case["images"], names, case["folders"], case["list_split"])
    detections = [(str(p), objects) for p, objects in files]
    writer = case["writer"]
    if writer == "yolov5":
        rows = _yolov5_rows(detections, False)
    elif writer == "ultralytics-installed":
        resolved = {**spec, "val": [str(root / "images/val")] if case["list_split"] else str(root / "images/val"),
                    "names": dict(enumerate(names)), "nc": len(names)}
        rows = _ultralytics_rows(detections, resolved, case["nc"], root / "val")
    else:
        rows = _class_plus_one_rows(detections)
    (root / "p.json").write_text(json.dumps(rows))
    return data, files


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_perfect_predictions_of_every_writer_score_one_or_are_refused(tmp_path_factory, case):
    """Exact boxes written by each release's writer: exit 0 with the oracle's 1.0, or exit 2 naming what to give
    (``--category-ids``, the stems) -- never another number, never a traceback."""
    root = tmp_path_factory.mktemp("case")
    data, files = _write(case, root)
    proc = cli("val", "--predictions", root / "p.json", "--data", data, "--json")
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    if proc.returncode == 2:
        assert not proc.stdout and proc.stderr.strip(), proc.stdout
        assert "--category-ids" in proc.stderr or "image_id" in proc.stderr, proc.stderr
        return
    result = json.loads(proc.stdout)
    oracle = _oracle(data, files)
    assert oracle == pytest.approx(1.0, abs=1e-9)
    for key in ("mAP50", "mAP50-95"):
        assert result["coco_metrics"][key] == pytest.approx(oracle, abs=1e-9), (case, result["category_ids"])


# -- the issue's cases, one each ----------------------------------------------------------------------------------
def test_class_plus_one_without_file_name_on_ids_that_fit_both_is_refused_not_scored_zero(tmp_path):
    """8.3.63's shape on 3 classes whose class 2 is never predicted: ids {1, 2} fit the class index and class + 1;
    read as the class index, perfect boxes scored mAP50 0.0 with exit 0. Now: refused, naming --category-ids; with
    ``--category-ids class+1`` 1.0."""
    case = {"nc": 3, "images": [[(0, SLOTS[0]), (1, SLOTS[1])], [(1, SLOTS[2])]], "folders": ["a", "a"],
            "list_split": False, "writer": "ultralytics-8.3.63-shape"}
    data, _files = _write(case, tmp_path)
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json")
    assert proc.returncode == 2 and "--category-ids" in proc.stderr and not proc.stdout, (proc.stdout, proc.stderr)
    assert "8.3.63" in proc.stderr
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json", "--category-ids", "class+1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["coco_metrics"]["mAP50"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("version, scheme", [("8.3.63", "class+1"), ("8.3.48", "class"), ("8.1.34", "class"),
                                             (None, "class")])
def test_the_writer_recorded_with_the_run_decides_ids_that_fit_both(tmp_path, version, scheme):
    """The same ids, the predictions.json in a run folder whose determinism.json records the writer: Ultralytics
    8.3.49 on writes class + 1, before it (and YOLOv5: ``version`` None) the class index; scored 1.0."""
    first = 0 if scheme == "class+1" else 1  # ids 1 and 2 either way: both schemes fit them
    case = {"nc": 3, "images": [[(first, SLOTS[0]), (first + 1, SLOTS[1])]], "folders": ["a"], "list_split": False,
            "writer": "ultralytics-8.3.63-shape" if scheme == "class+1" else "yolov5"}
    data, _files = _write(case, tmp_path)
    report = {"ultralytics": {"version": version}} if version else {"yolov5": {"script": "train.py"}}
    (tmp_path / "determinism.json").write_text(json.dumps(report))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["scheme"] == scheme and "determinism.json" in result["category_ids"]["why"]
    assert result["coco_metrics"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("report", [{"ultralytics": {"version": "0.1.0"}}, {"ultralytics": {"version": "11.2"}},
                                    {"ultralytics": "8.3.63"}, [], {"mode": 5}])
def test_a_run_report_that_names_no_8x_writer_decides_nothing(tmp_path, report):
    """A fork's own number (not Ultralytics' 8.x), or a damaged determinism.json, is no evidence: the ids both
    schemes fit stay refused."""
    case = {"nc": 3, "images": [[(0, SLOTS[0]), (1, SLOTS[1])]], "folders": ["a"], "list_split": False,
            "writer": "ultralytics-8.3.63-shape"}
    data, _files = _write(case, tmp_path)
    (tmp_path / "determinism.json").write_text(json.dumps(report))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data)
    assert proc.returncode == 2 and "--category-ids" in proc.stderr and "Traceback" not in proc.stderr


def test_a_list_valued_val_is_no_coco_split(tmp_path):
    """``val: [.../coco/val2017.txt]`` (a list): the releases test ``isinstance(val, str)``, so they write the
    class index / class + 1 there, not COCO's ids; yolo-det read it as COCO's and mapped ids 13, 17 as COCO's."""
    from PIL import Image

    from yolo_det.evaluation import coco

    names = [n for _, n in coco.COCO_CATEGORIES]
    root = tmp_path / "coco"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    lines = []
    for i, c in enumerate((13, 17)):
        Image.new("RGB", (W, H)).save(root / "images" / f"{i + 1}.png")
        (root / "labels" / f"{i + 1}.txt").write_text(f"{c} 0.5 0.5 0.25 0.25\n")
        lines.append(f"./images/{i + 1}.png\n")
    (root / "val2017.txt").write_text("".join(lines))
    (root / "data.yaml").write_text(yaml.safe_dump({"path": str(root), "val": ["val2017.txt"], "names": names}))
    rows = [{"image_id": i + 1, "category_id": c, "bbox": [24.0, 18.0, 16.0, 12.0], "score": 0.9}
            for i, c in enumerate((13, 17))]  # YOLOv5 on this list: the class index
    (tmp_path / "p.json").write_text(json.dumps(rows))
    (tmp_path / "determinism.json").write_text(json.dumps({"yolov5": {}}))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", root / "data.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["category_ids"]["scheme"] == "class", result["category_ids"]
    assert result["coco_metrics"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)


def test_one_stem_in_two_folders_is_refused_not_merged(tmp_path):
    """``a/1.png`` and ``b/1.png``: both written as image_id 1; merged into one image, perfect boxes scored 0.252.
    Now refused (exit 2) naming both files; the installed Ultralytics' ``file_name`` is the same ``1.png``, so it
    cannot tell them apart either."""
    case = {"nc": 2, "images": [[(0, SLOTS[0])], [(1, SLOTS[1])], [(0, SLOTS[2])]], "folders": ["a", "b", "b"],
            "list_split": False, "writer": "yolov5"}
    data, _files = _write(case, tmp_path)
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json")
    assert proc.returncode == 2 and not proc.stdout, proc.stdout
    assert "image_id 1" in proc.stderr and str(Path("a") / "1.png") in proc.stderr, proc.stderr
    assert str(Path("b") / "1.png") in proc.stderr


def test_one_stem_two_suffixes_is_told_apart_by_file_name(tmp_path):
    """``a/1.png`` and ``b/1.jpg`` share image_id 1; Ultralytics' ``file_name`` tells them apart: scored 1.0."""
    from PIL import Image

    root = tmp_path / "d"
    rows = []
    for folder, suffix, c in (("a", ".png", 0), ("b", ".jpg", 1)):
        (root / "images" / folder).mkdir(parents=True)
        (root / "labels" / folder).mkdir(parents=True)
        Image.new("RGB", (W, H)).save(root / "images" / folder / f"1{suffix}")
        (root / "labels" / folder / "1.txt").write_text(f"{c} 0.5 0.5 0.25 0.25\n")
        rows.append({"image_id": 1, "file_name": f"1{suffix}", "category_id": c + 1, "bbox": [24.0, 18.0, 16.0, 12.0],
                     "score": 0.9})
    (root / "data.yaml").write_text(yaml.safe_dump({"path": str(root), "val": "images", "names": ["x", "y"]}))
    (tmp_path / "p.json").write_text(json.dumps(rows))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", root / "data.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["coco_metrics"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)


# -- malformed files ----------------------------------------------------------------------------------------------
GOOD = {"image_id": 1, "category_id": 0, "bbox": [2.0, 2.0, 16.0, 12.0], "score": 0.9}
ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                   lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                   max_leaves=6)


@st.composite
def bad_rows(draw):
    """A row with one field broken: a wrong type or a list, missing, NaN/inf, a negative size, a bad bbox."""
    row = dict(GOOD)
    key = draw(st.sampled_from(["image_id", "category_id", "bbox", "score", "file_name", "row"]))
    if key == "row":
        return draw(st.one_of(st.lists(ANY, max_size=3), st.integers(), st.text(max_size=3), st.none()))
    kind = draw(st.sampled_from(["missing", "list", "nan", "inf", "any", "negative", "short"]))
    if kind == "missing" and key != "file_name":
        del row[key]
    elif kind == "list":
        row[key] = [row.get(key, 1)]
    elif kind == "nan":
        row[key] = math.nan if key != "bbox" else [2.0, math.nan, 16.0, 12.0]
    elif kind == "inf":
        row[key] = -math.inf if key != "bbox" else [2.0, 2.0, math.inf, 12.0]
    elif kind == "negative" and key == "bbox":
        row[key] = [2.0, 2.0, -draw(st.floats(0.001, 100)), 12.0]
    elif kind == "short" and key == "bbox":
        row[key] = [2.0, 2.0, 16.0]
    else:
        value = draw(ANY)
        row[key] = value
    return row


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _malformed_ok(row) -> bool:
    """Whether ``row`` is after all a valid detection of the small data (the generator can draw one): skipped."""
    return (isinstance(row, dict) and set(row) <= {*GOOD, "file_name"} and set(GOOD) <= set(row)
            and row["image_id"] in (1, "1") and not isinstance(row["image_id"], bool)
            and row["category_id"] in (0, 1) and not isinstance(row["category_id"], bool)
            and isinstance(row["bbox"], list) and len(row["bbox"]) == 4 and all(_number(v) for v in row["bbox"])
            and row["bbox"][2] >= 0 and row["bbox"][3] >= 0 and _number(row["score"])
            and isinstance(row.get("file_name", ""), str))


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    data, _files, _spec = _dataset(root, [[(0, SLOTS[0])]], ["x", "y"], ["a"], False)
    return root, data


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(row=bad_rows(), where=st.integers(0, 2))
def test_a_malformed_predictions_file_is_exit_2_naming_the_row_never_a_traceback(small_data, row, where):
    """Wrong types, lists (``"image_id": [1]``), missing keys, NaN/inf, negative sizes: exit 2 and a message that
    names the file and the row; never exit 1 (a finding's code) and never a traceback."""
    root, data = small_data
    hypothesis.assume(not _malformed_ok(row))
    rows = [dict(GOOD) for _ in range(2)]
    rows.insert(where, row)
    path = root / "p.json"
    path.write_text(json.dumps(rows))
    proc = cli("val", "--predictions", path, "--data", data)
    assert proc.returncode in (0, 2), (row, proc.returncode, proc.stderr[-1500:])
    if proc.returncode == 2:
        assert str(path) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("row", [{**GOOD, "image_id": [1]}, {**GOOD, "image_id": {"a": 1}},
                                 {**GOOD, "bbox": [2, 2, float("nan"), 12]}, {**GOOD, "bbox": [2, 2, -16, 12]},
                                 {**GOOD, "score": float("nan")}, {**GOOD, "file_name": 7}])
def test_the_issues_malformed_rows_are_refused_naming_the_row(small_data, row):
    """``"image_id": [1]`` gave a traceback and exit 1; NaN and negative sizes were scored."""
    root, data = small_data
    path = root / "bad.json"
    path.write_text(json.dumps([GOOD, row]))
    proc = cli("val", "--predictions", path, "--data", data)
    assert proc.returncode == 2 and "row 1" in proc.stderr and str(path) in proc.stderr, proc.stderr


# -- the 8.3.63 shape is the release's own output ----------------------------------------------------------------
PROBE = r'''
import json, sys, types
from pathlib import Path
import torch
from ultralytics.models.yolo.detect import DetectionValidator
import ultralytics
cases = json.loads(sys.argv[1])
out = []
for case in cases:
    nc = case["nc"]
    v = DetectionValidator(save_dir=Path(sys.argv[2]), args=dict(save_json=True, split="val", plots=False))
    v.data = {"val": case["val"], "names": {i: f"c{i}" for i in range(nc)}, "nc": nc}
    v.dataloader = types.SimpleNamespace(dataset=types.SimpleNamespace(im_files=["x.png"]), sampler=[0])
    v.training = False
    v.init_metrics(types.SimpleNamespace(names={i: f"c{i}" for i in range(nc)}, end2end=False))
    v.jdict = []
    for path, boxes in case["detections"]:
        predn = torch.tensor([[*b, 0.9, float(c)] for c, b in boxes], dtype=torch.float32).reshape(-1, 6)
        v.pred_to_json(predn, path)
    out.append(v.jdict)
print(json.dumps({"version": ultralytics.__version__, "rows": out}))
'''


@pytest.mark.parametrize("version", ["8.3.63", "8.0.238"])
def test_the_older_writers_shapes_are_the_releases_own_output(tmp_path, version):
    """The release's own ``init_metrics`` + ``pred_to_json`` (installed per test by ``scripts/compat.py``, cached)
    on random class subsets and stems: 8.3.63 writes exactly the class + 1 shape used above, 8.0.238 the class
    index as YOLOv5 does (the same rows as :func:`_yolov5_rows`); both without ``file_name``."""
    import random

    from support.compat import release

    folder = release(version)
    rng = random.Random(7)
    cases_ = []
    for _ in range(20):
        nc = rng.randint(1, 6)
        detections = [(f"/d/images/{'a' if rng.random() < .5 else 'b'}/{rng.choice(['1', '0007', 'img_3'])}.png",
                       [[rng.randrange(nc), list(SLOTS[k])] for k in range(rng.randint(0, 3))]) for _ in range(3)]
        cases_.append({"nc": nc, "val": "/d/images", "detections": detections})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
           "YOLO_CONFIG_DIR": str(tmp_path / "cfg")}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cases_), str(tmp_path / "val")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["version"] == version
    for case, rows in zip(cases_, got["rows"]):
        detections = [(p, [(c, tuple(b)) for c, b in boxes]) for p, boxes in case["detections"]]
        expected = _class_plus_one_rows(detections) if version == "8.3.63" else _yolov5_rows(detections, False)
        assert [{k: r[k] for k in ("image_id", "category_id")} for r in rows] == \
            [{k: r[k] for k in ("image_id", "category_id")} for r in expected]
        assert all(set(r) == {"image_id", "category_id", "bbox", "score"} for r in rows)
        boxes = [v for r in expected for v in r["bbox"]]
        assert [v for r in rows for v in r["bbox"]] == pytest.approx(boxes, abs=1e-3)


# -- COCO's names: the split decides whether the writers write COCO's 91 ids ---------------------------------------
@st.composite
def coco_cases(draw):
    classes = draw(st.lists(st.integers(0, 79), min_size=1, max_size=4, unique=True))
    images = [[(draw(st.sampled_from(classes)), SLOTS[k]) for k in range(draw(st.integers(1, 3)))]
              for _ in range(draw(st.integers(1, 3)))]
    return {"images": images, "split": draw(st.sampled_from(["val2017.txt", "[val2017.txt]", "folder"])),
            "writer": draw(st.sampled_from(WRITERS))}


def _coco_write(case, root: Path):
    """COCO's 80 names, images under ``ROOT/coco``; val ``val2017.txt``, a one-element list of it, or the folder;
    rows by the case's writer, each deciding COCO on the split as its release does."""
    from PIL import Image

    from yolo_det.evaluation.coco import COCO_CATEGORIES

    names = [n for _, n in COCO_CATEGORIES]
    base = root / "coco"
    (base / "images").mkdir(parents=True)
    (base / "labels").mkdir()
    files = []
    for i, objects in enumerate(case["images"]):
        image = base / "images" / f"{i + 1:012d}.png"
        Image.new("RGB", (W, H)).save(image)
        (base / "labels" / f"{i + 1:012d}.txt").write_text("".join(
            f"{c} {(x1 + x2) / 2 / W} {(y1 + y2) / 2 / H} {(x2 - x1) / W} {(y2 - y1) / H}\n"
            for c, (x1, y1, x2, y2) in objects))
        files.append((image, objects))
    (base / "val2017.txt").write_text("".join(f"./images/{p.name}\n" for p, _ in files))
    val = {"val2017.txt": "val2017.txt", "[val2017.txt]": ["val2017.txt"], "folder": "images"}[case["split"]]
    (base / "data.yaml").write_text(yaml.safe_dump({"path": str(base), "val": val, "names": names}))
    resolved = [str((base / v).resolve()) for v in val] if isinstance(val, list) else str((base / val).resolve())
    detections = [(str(p), objects) for p, objects in files]
    if case["writer"] == "yolov5":  # val.py's own test: isinstance(val, str) and val.endswith('coco/val2017.txt')
        rows = _yolov5_rows(detections, isinstance(resolved, str) and resolved.endswith(f"coco{os.sep}val2017.txt"))
    elif case["writer"] == "ultralytics-installed":
        rows = _ultralytics_rows(detections, {"val": resolved, "names": dict(enumerate(names)), "nc": 80}, 80,
                                 root / "val")
    else:  # 8.3.63's init_metrics decides COCO as the installed release does; the shape off COCO is class + 1
        rows = _class_plus_one_rows(detections)
        if case["split"] == "val2017.txt":
            from ultralytics.data.converter import coco80_to_coco91_class

            table = coco80_to_coco91_class()
            rows = [{**r, "category_id": table[r["category_id"] - 1]} for r in rows]
    (root / "p.json").write_text(json.dumps(rows))
    return base / "data.yaml", files


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=coco_cases())
def test_perfect_predictions_on_coco_names_score_one_or_are_refused_whatever_the_split(tmp_path_factory, case):
    """COCO's names on ``coco/val2017.txt`` (the writers write COCO's ids), a one-element list of it (they do not:
    ``isinstance(val, str)``) or the image folder: exit 0 with 1.0, or exit 2 naming --category-ids."""
    root = tmp_path_factory.mktemp("coco")
    data, files = _coco_write(case, root)
    proc = cli("val", "--predictions", root / "p.json", "--data", data, "--json")
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr[-2000:])
    if proc.returncode == 2:
        assert "--category-ids" in proc.stderr and not proc.stdout, proc.stderr
        return
    result = json.loads(proc.stdout)
    for key in ("mAP50", "mAP50-95"):
        assert result["coco_metrics"][key] == pytest.approx(1.0, abs=1e-9), (case, result["category_ids"])
