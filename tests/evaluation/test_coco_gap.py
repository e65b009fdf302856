"""The COCO API's number for YOLO-format data, and the gap to the release's number rule by rule (no training).

yolo-det's evaluator with the COCO rules gives pycocotools' AP and AP50 to the bit; with a release's rules it gives
the installed release's own number (YOLOv5 ``process_batch`` + ``ap_per_class``, Ultralytics ``match_predictions``
+ ``ap_per_class``); for each rule a case where it moves the number: its step is nonzero, the chain still ends at
the COCO API, and the COCO rules with only that rule put back give another number than the COCO API.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from support.coco import coco_api, random_case
from yolo_det.evaluation import coco, gap

pytest.importorskip("pycocotools")


@pytest.mark.parametrize("seed", range(6))
def test_the_coco_rules_give_pycocotools_number_to_the_bit(seed):
    truth, detections = random_case(seed)
    score = gap.evaluate(gap.case_from(truth, detections), gap.COCO_RULES)
    assert {"mAP50": score.map50, "mAP50-95": score.map} == coco_api(truth, detections)


def test_faster_coco_eval_and_pycocotools_agree_on_the_same_predictions():
    pytest.importorskip("faster_coco_eval")
    for seed in range(4):
        truth, detections = random_case(seed)
        result = coco.agreement(truth, coco.predictions_json(detections))
        assert set(result["evaluators"]) == {"faster-coco-eval", "pycocotools"}
        # the same matches and counts: any difference is float rounding of the means, and it is named per number
        assert result["max_abs_difference"] < 1e-12, result["differences"]
        assert result["identical"] == (not result["differences"])


def _yolov5_number(truth, detections):
    """The installed YOLOv5's own number: val.py's process_batch per image, utils.metrics.ap_per_class."""
    torch = pytest.importorskip("torch")
    val = pytest.importorskip("yolov5.val")
    from yolov5.utils.metrics import ap_per_class

    iouv = torch.linspace(0.5, 0.95, 10)
    stats = []
    for image in gap.case_from(truth, detections):
        labels = [a for a in image.annotations if not a["iscrowd"]]  # YOLO labels hold no crowds
        tcls = torch.tensor([float(a["category_id"]) for a in labels])
        tbox = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                             for a in labels], dtype=torch.float32).reshape(-1, 4)
        pred = torch.cat([torch.from_numpy(image.boxes), torch.from_numpy(image.scores)[:, None],
                          torch.from_numpy(image.classes.astype(np.float32))[:, None]], 1)
        correct = torch.zeros(len(pred), 10, dtype=torch.bool)
        if len(pred) == 0:
            if len(labels):
                stats.append((correct, torch.zeros(0), torch.zeros(0), tcls))
            continue
        if len(labels):
            correct = val.process_batch(pred, torch.cat([tcls[:, None], tbox], 1), iouv)
        stats.append((correct, pred[:, 4], pred[:, 5], tcls))
    stats = [torch.cat(x, 0).numpy() for x in zip(*stats)]
    if not stats[0].any():
        return {"mAP50": 0.0, "mAP50-95": 0.0}
    ap = ap_per_class(*stats, names={})[5]
    return {"mAP50": float(ap[:, 0].mean()), "mAP50-95": float(ap.mean(1).mean())}


def _ultralytics_number(truth, detections):
    """The installed Ultralytics' own number: the validator's match_predictions, metrics.ap_per_class, Metric.map."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("ultralytics")
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils.metrics import ap_per_class, box_iou

    validator = DetectionValidator.__new__(DetectionValidator)
    validator.iouv = torch.linspace(0.5, 0.95, 10)
    tp, conf, pcls, tcls_all = [], [], [], []
    for image in gap.case_from(truth, detections):
        labels = [a for a in image.annotations if not a["iscrowd"]]
        tcls = torch.tensor([float(a["category_id"]) for a in labels])
        tbox = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                             for a in labels], dtype=torch.float32).reshape(-1, 4)
        boxes, cls = torch.from_numpy(image.boxes), torch.from_numpy(image.classes.astype(np.float32))
        if len(labels) and len(boxes):
            correct = validator.match_predictions(cls, tcls, box_iou(tbox, boxes)).numpy()
        else:
            correct = np.zeros((len(boxes), 10), dtype=bool)
        tp.append(correct), conf.append(image.scores), pcls.append(image.classes.astype(np.float32))
        tcls_all.append(tcls.numpy())
    ap = ap_per_class(np.concatenate(tp), np.concatenate(conf), np.concatenate(pcls), np.concatenate(tcls_all))[5]
    return {"mAP50": float(ap[:, 0].mean()), "mAP50-95": float(ap.mean())}


@pytest.mark.parametrize("release, number", [("yolov5", _yolov5_number), ("ultralytics", _ultralytics_number)])
def test_the_release_rules_give_the_installed_releases_number_to_the_bit(release, number):
    for seed in range(4):
        truth, detections = random_case(seed)
        score = gap.evaluate(gap.case_from(truth, detections), gap.release_rules(release))
        assert {"mAP50": score.map50, "mAP50-95": score.map} == number(truth, detections), seed


@pytest.mark.parametrize("release", ["yolov5", "ultralytics"])
def test_the_chain_ends_exactly_at_the_coco_api_and_every_step_is_one_rule(release):
    truth, detections = random_case(3)
    images = gap.case_from(truth, detections)
    result = gap.explain(images, gap.release_rules(release), coco_api(truth, detections))
    assert result["ends_at_coco_api"] is True and result["residual"] == {"mAP50": 0.0, "mAP50-95": 0.0}
    assert [s["rule"] for s in result["steps"]] == [name for name, *_ in gap.STEPS]
    before = result["start"]
    for step in result["steps"]:  # each change is that step's number minus the one before it
        assert step["change"]["mAP50-95"] == step["mAP50-95"] - before["mAP50-95"]
        before = step
    assert result["end"] == {k: result["steps"][-1][k] for k in ("mAP50", "mAP50-95")}
    assert "empty classes" in result["same_rule"]


# -- one case per rule -----------------------------------------------------------------------------------
def _case(annotations, detections, release_boxes=None, images=1):
    truth = {"images": [{"id": i + 1, "width": 640, "height": 640, "file_name": f"{i}.jpg"} for i in range(images)],
             "annotations": [], "categories": [{"id": 0, "name": "a"}, {"id": 1, "name": "b"}]}
    for a in annotations:
        image_id, box, *rest = a
        x1, y1, x2, y2 = box
        truth["annotations"].append({"id": len(truth["annotations"]) + 1, "image_id": image_id, "category_id": 0,
                                     "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                                     "iscrowd": int(bool(rest and rest[0]))})
    dets = []
    for i in range(images):
        mine = [d for d in detections if d[0] == i + 1]
        dets.append({"image_id": i + 1, "boxes": np.array([d[1] for d in mine], np.float32).reshape(-1, 4),
                     "scores": np.array([d[2] for d in mine], np.float32), "classes": np.zeros(len(mine), int)})
        if release_boxes is not None:
            dets[-1]["release_boxes"] = np.array(release_boxes[i], np.float32).reshape(-1, 4)
    return truth, dets


def _overlap_box(iou: float):
    """A box of IoU ``iou`` with (0, 0, 100, 100): its bottom moved."""
    return [0.0, 0.0, 100.0, 100.0 * iou]


def _ranking_case():
    """Equal scores, true and false positives interleaved among higher ones: np.argsort's quicksort reorders equal
    keys (COCO sorts stably), and with precision falling through the tie the order decides the envelope."""
    annotations, detections = [], []
    for i in range(40):
        annotations.append((i + 1, (0, 0, 100, 100)))
        hit = (i + 1, [0, 0, 100, 100], 0.9 if i % 2 else 0.5)
        miss = (i + 1, [300, 300, 400, 400], 0.5)
        detections += [hit, miss] if i % 3 else [miss, hit]
    return _case(annotations, detections, images=40)


def _mixed_classes_case():
    """The release matched its label row as class 1 (and a detection of class 1 on it); the annotation of the same
    box says class 0: a class mix-up between labels and annotations, whatever the boxes."""
    truth, detections = _case([(1, (0, 0, 100, 100))], [(1, [0, 0, 100, 100], 0.9)],
                              release_boxes=[[[0, 0, 100, 100]]])
    detections[0].update(classes=np.array([1]), release_classes=np.array([1]))
    return truth, detections


CASES = {
    # 120 objects and 120 exact detections on one image: COCO keeps the 100 best of a class
    "max_dets": lambda: _case([(1, (i * 5, 0, i * 5 + 4, 4)) for i in range(120)],
                              [(1, [i * 5, 0, i * 5 + 4, 4], 0.99 - i * 0.001) for i in range(120)]),
    # two objects, the first detection fits both, the second fits the first best and the other enough
    "matching": lambda: _case([(1, (0, 0, 100, 100)), (1, (0, 0, 100, 70))],
                              [(1, [0, 0, 100, 90], 0.9), (1, [0, 0, 100, 100], 0.8)]),
    # a detection on a crowd scored above the true positive
    "crowd": lambda: _case([(1, (0, 0, 100, 100)), (1, (200, 200, 400, 400), True)],
                           [(1, [210, 210, 300, 300], 0.95), (1, [0, 0, 100, 100], 0.9)]),
    # an inverted box (negative height: negative area) scored first: outside the range 'all', ignored when unmatched
    "area": lambda: _case([(1, (0, 0, 100, 100))], [(1, [300, 300, 400, 250], 0.95), (1, [0, 0, 100, 100], 0.9)]),
    "ranking": _ranking_case,
    # one object, one exact detection: the releases' trapezoid ends at 0.995, COCO's steps at 1
    "curve": lambda: _case([(1, (0, 0, 100, 100))], [(1, [0, 0, 100, 100], 0.9)]),
    # a 1 px object, a detection of half of it: IoU 0.5 exactly in float64; the releases' 1e-7 added to the float32
    # union (1 + 1e-7 rounds to 1 + 2^-23) makes it 0.49999994, under the first threshold
    "iou": lambda: _case([(1, (10, 10, 11, 11))], [(1, [10, 10, 11, 10.5], 0.9)]),
    # IoU 0.499996 as the release holds the box; 0.5 once predictions.json rounds its height to 50.000
    "predictions": lambda: _case([(1, (0, 0, 100, 100))], [(1, _overlap_box(0.499996), 0.9)]),
    "classes": _mixed_classes_case,
    # the release's label box 0.0002 px taller (the letterbox round trip) than the annotation from the label file
    "truth": lambda: _case([(1, (0, 0, 100, 100))], [(1, _overlap_box(0.500001), 0.9)],
                           release_boxes=[[[0, 0, 100, 100.0002]]]),
}


@pytest.mark.parametrize("rule", list(CASES))
def test_each_rule_has_a_case_where_its_step_alone_moves_the_number(rule):
    truth, detections = CASES[rule]()
    images = gap.case_from(truth, detections)
    release = "ultralytics" if rule in ("ranking",) else "yolov5"
    start = gap.release_rules(release)
    number = coco_api(truth, detections)
    result = gap.explain(images, start, number)
    assert result["ends_at_coco_api"] is True, result
    (step,) = [s for s in result["steps"] if s["rule"] == rule]
    assert step["same"] is False and step["change"]["mAP50-95"] != 0, step
    # the step cannot be left out: COCO's rules with only this one as the release has it give another number
    reverted = gap.evaluate(images, dataclasses.replace(gap.COCO_RULES, **{rule: getattr(start, rule)}))
    assert (reverted.map50, reverted.map) != (number["mAP50"], number["mAP50-95"])


def test_averaging_is_float_rounding_only_and_still_needed_for_the_exact_number():
    """One mean over IoU x recall x class (COCO) and means of means (the releases) differ in the last bits."""
    moved = 0
    for seed in range(6):
        truth, detections = random_case(seed, crowded_image=False)
        images = gap.case_from(truth, detections)
        number = coco_api(truth, detections)
        reverted = gap.evaluate(images, dataclasses.replace(gap.COCO_RULES, averaging="classes"))
        assert reverted.map == pytest.approx(number["mAP50-95"], abs=1e-12)
        moved += reverted.map != number["mAP50-95"]
    assert moved, "no case where the order of averaging changed a bit"


def test_yolo_labels_become_coco_annotations_with_sizes_from_the_image_files(tmp_path):
    from PIL import Image

    images = tmp_path / "images" / "val"
    labels = tmp_path / "labels" / "val"
    images.mkdir(parents=True), labels.mkdir(parents=True)
    Image.new("RGB", (200, 100)).save(images / "a.jpg")
    Image.new("RGB", (64, 48)).save(images / "b.png")
    (labels / "a.txt").write_text("1 0.5 0.5 0.2 0.4\n0 0.25 0.25 0.1 0.1\n")  # b has no label file: no objects
    out = coco.annotations_from_yolo([images / "a.jpg", images / "b.png"], ["cat", "dog", "empty"])
    assert [(i["id"], i["width"], i["height"]) for i in out["images"]] == [(1, 200, 100), (2, 64, 48)]
    assert [c["id"] for c in out["categories"]] == [0, 1, 2]
    first, second = out["annotations"]
    assert first["category_id"] == 1 and first["bbox"] == pytest.approx([80, 30, 40, 40]) and first["iscrowd"] == 0
    assert first["area"] == pytest.approx(1600) and second["image_id"] == 1 and first["id"] == 1  # ids from 1
    (labels / "a.txt").write_text("7 0.5 0.5 0.2 0.4\n")
    with pytest.raises(coco.CocoError, match="class 7"):
        coco.annotations_from_yolo([images / "a.jpg"], ["cat", "dog"])


def test_predictions_json_rounds_as_the_releases_write_it():
    assert coco.json_box([10.0, 20.0, 30.123456, 40.0004]) == [10.0, 20.0, 20.123, 20.0]
    assert coco.json_score(0.1234567) == 0.12346
    rows = coco.predictions_json([{"image_id": 3, "boxes": np.array([[0, 0, 2, 2]], np.float32), "scores": [0.5],
                                   "classes": [1]}])
    assert rows == [{"image_id": 3, "category_id": 1, "bbox": [0.0, 0.0, 2.0, 2.0], "score": 0.5}]
    assert coco.score({"images": [{"id": 3, "width": 4, "height": 4}], "annotations": [],
                       "categories": [{"id": 1}]}, [], "pycocotools")["stats"]["AP"] == 0.0


@pytest.mark.parametrize("writer", ["yolov5", "ultralytics"])
def test_val_scores_a_predictions_json_against_a_data_yaml(tmp_path, writer):
    """``yolo-det val --predictions P.json --data D.yaml``: image ids by file stem, category ids as each release
    writes them (Ultralytics: class + 1 with a file_name), both implementations, each family's gap ending at the
    COCO API; an image id of no image of the split is a usage error naming it."""
    import json

    from support.cli import cli
    from yolo_det.synthetic import make_dataset

    data = make_dataset(tmp_path / "data", n_train=1, n_val=4, imgsz=64)
    files, names = __import__("yolo_det.evaluation.standalone", fromlist=["x"]).split_images(data)
    truth = coco.annotations_from_yolo(files, names)
    rng = np.random.default_rng(0)
    rows = []
    for a in truth["annotations"]:
        file = files[a["image_id"] - 1]
        for score in (0.9, 0.3):
            box = [v + rng.normal(0, 1.5) for v in a["bbox"]]
            row = {"image_id": file.stem, "category_id": a["category_id"] + (writer == "ultralytics"),
                   "bbox": [round(v, 3) for v in box], "score": round(score * rng.random(), 5)}
            rows.append({**row, "file_name": file.name} if writer == "ultralytics" else row)
    (tmp_path / "p.json").write_text(json.dumps(rows))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["images"] == 4 and result["predictions"] == len(rows)
    assert result["category_offset"] == (1 if writer == "ultralytics" else 0)
    assert result["coco_metrics"]["mAP50"] > 0.5  # the offset was right: boxes of the right class
    assert all(chain["ends_at_coco_api"] for chain in result["gap"].values())
    assert result["agreement"]["max_abs_difference"] < 1e-12
    text = cli("val", "--predictions", tmp_path / "p.json", "--data", data)
    assert text.returncode == 0 and "COCO API (pycocotools)" in text.stdout
    (tmp_path / "p.json").write_text(json.dumps([{**rows[0], "image_id": "nowhere"}]))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data)
    assert proc.returncode == 2 and "nowhere" in proc.stderr


def test_a_coco_json_named_by_the_data_yaml_is_the_ground_truth_crowds_included(tmp_path):
    """``coco_json:`` in the data YAML: its annotations (crowds, areas, its category ids in order as the classes)
    replace the labels; a detection on a crowd then counts neither way, as the COCO API does."""
    import json

    import yaml
    from support.cli import cli
    from yolo_det.evaluation.standalone import split_images
    from yolo_det.synthetic import make_dataset

    data = make_dataset(tmp_path / "data", n_train=1, n_val=2, imgsz=64)
    files, names = split_images(data)
    made = coco.annotations_from_yolo(files, names)
    given = {"images": [{"id": 100 + i["id"], "file_name": Path(i["file_name"]).name, "width": i["width"],
                         "height": i["height"]} for i in made["images"]],
             "categories": [{"id": 10 + c["id"], "name": c["name"]} for c in made["categories"]],
             "annotations": [{**a, "image_id": 100 + a["image_id"], "category_id": 10 + a["category_id"]}
                             for a in made["annotations"]]}
    crowd = {"id": 999, "image_id": 101, "category_id": 10, "bbox": [0, 0, 20, 20], "area": 400, "iscrowd": 1}
    given["annotations"].append(crowd)
    (tmp_path / "instances.json").write_text(json.dumps(given))
    spec = yaml.safe_load(Path(data).read_text())
    spec["coco_json"] = str(tmp_path / "instances.json")
    Path(data).write_text(yaml.safe_dump(spec))
    truth = coco.ground_truth(files, names, data)
    assert truth["info"]["source"] == str(tmp_path / "instances.json")
    assert [a["category_id"] for a in truth["annotations"]] == [a["category_id"] for a in made["annotations"]] + [0]
    rows = [{"image_id": f.stem, "category_id": a["category_id"], "bbox": a["bbox"], "score": 0.9}
            for f in files for a in made["annotations"] if made["images"][a["image_id"] - 1]["file_name"] == str(f)]
    rows.append({"image_id": files[0].stem, "category_id": 0, "bbox": [1, 1, 18, 18], "score": 0.95})  # on the crowd
    (tmp_path / "p.json").write_text(json.dumps(rows))
    proc = cli("val", "--predictions", tmp_path / "p.json", "--data", data, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ground_truth"] == str(tmp_path / "instances.json")
    assert result["coco_metrics"]["mAP50-95"] == 1.0  # the crowd's detection is ignored: every object found
    steps = {s["rule"]: s for s in result["gap"]["yolov5"]["steps"]}
    assert steps["crowd"]["change"]["mAP50-95"] > 0 and result["gap"]["yolov5"]["ends_at_coco_api"]


def test_val_usage_errors_of_the_coco_evaluator_exit_2(tmp_path, capsys):
    from yolo_det.cli import main

    assert main(["val", str(tmp_path), "--evaluator", "coco", "--", "python", "val.py"]) == 2
    assert "is not a training run" in capsys.readouterr().err
    assert main(["val", "--predictions", str(tmp_path / "p.json")]) == 2  # no --data
    assert "go together: give --data" in capsys.readouterr().err
    assert main(["val", "--data", str(tmp_path / "d.yaml")]) == 2  # no --predictions
    assert "go together: give --predictions" in capsys.readouterr().err
    assert main(["val", str(tmp_path), "--predictions", "p.json", "--data", "d.yaml"]) == 2
    assert "drop RUN_DIR" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """A 2-image YOLO dataset and a valid predictions.json of it (one exact box per object)."""
    import json

    from yolo_det.evaluation.standalone import split_images
    from yolo_det.synthetic import make_dataset

    root = tmp_path_factory.mktemp("bad-inputs")
    data = Path(make_dataset(root / "data", n_train=1, n_val=2, imgsz=64))
    files, names = split_images(data)
    made = coco.annotations_from_yolo(files, names)
    rows = [{"image_id": files[a["image_id"] - 1].stem, "category_id": a["category_id"], "bbox": a["bbox"],
             "score": 0.9} for a in made["annotations"]]
    (root / "p.json").write_text(json.dumps(rows))
    return root, data


BAD_INPUTS = {  # case -> (what to do to the inputs, the option the message must name, words it must hold)
    "data missing": (lambda root, data, p: (p, root / "nowhere.yaml"), "--data", "does not exist"),
    "data is a folder": (lambda root, data, p: (p, root), "--data", "is a folder"),
    "data not YAML": (lambda root, data, p: (p, _write(root / "bad.yaml", "names: [a\n  b: :")), "--data",
                      "is not valid YAML"),
    "data not a mapping": (lambda root, data, p: (p, _write(root / "list.yaml", "- a\n- b\n")), "--data",
                           "not a YAML mapping"),
    "data without names": (lambda root, data, p: (p, _write(root / "nonames.yaml", f"path: {data.parent}\nval: x\n")),
                           "--data", "no class names"),
    "split missing": (lambda root, data, p: (p, _write(root / "nosplit.yaml", "names: [a]\ntrain: x\n")),
                      "--split", "no 'val' split"),
    "coco_json not JSON": (lambda root, data, p: (p, _write(root / "cj.yaml", data.read_text() + "\ncoco_json: "
                                                                 + str(_write(root / "cj.json", "{oops")) + "\n")),
                           "coco_json", "is not readable"),
    "predictions missing": (lambda root, data, p: (root / "nowhere.json", data), "--predictions", "does not exist"),
    "predictions not JSON": (lambda root, data, p: (_write(root / "bad.json", "[{"), data), "--predictions",
                             "is not valid JSON"),
    "predictions not a list": (lambda root, data, p: (_write(root / "dict.json", "{}"), data), "--predictions",
                               "is not a COCO results list"),
    "a row without a box": (lambda root, data, p: (_write(root / "row.json", '[{"image_id": 1, "score": 0.5}]'),
                                                   data), "--predictions", "row 0 is not a detection"),
}


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_every_bad_input_of_a_predictions_file_names_its_option_and_exits_2(small_data, case, capsys):
    """A missing, unreadable or malformed --data / --predictions is a usage error (exit 2) that names the option and
    what to give, never a raw ``[Errno 2]`` or a traceback; nothing is written."""
    from yolo_det.cli import main

    root, data = small_data
    assert main(["val", "--predictions", str(root / "p.json"), "--data", str(data), "--json"]) == 0  # the control
    capsys.readouterr()
    make, option, words = BAD_INPUTS[case]
    predictions, data_yaml = make(root, data, root / "p.json")
    before = sorted(p.name for p in root.iterdir())
    assert main(["val", "--predictions", str(predictions), "--data", str(data_yaml)]) == 2
    out = capsys.readouterr()
    assert option in out.err and words in out.err and ": give " in out.err, out.err
    assert "Errno" not in out.err and "Traceback" not in out.err and not out.out
    assert sorted(p.name for p in root.iterdir()) == before


def _octagon(x1, y1, x2, y2):
    """An octagon inside a box, as a flat COCO polygon."""
    w, h = x2 - x1, y2 - y1
    a, b = 0.3 * w, 0.3 * h
    return [x1 + a, y1, x2 - a, y1, x2, y1 + b, x2, y2 - b, x2 - a, y2, x1 + a, y2, x1, y2 - b, x1, y1 + b]


@pytest.mark.parametrize("release", ["yolov5", "ultralytics"])
def test_the_mask_gap_ends_exactly_at_the_coco_api_segm_number(release):
    """Masks (RLE at the image's size, as the captures keep them) walked from the release's rules to the COCO API's
    on the same masks' IoU: the chain ends at pycocotools' segm AP/AP50 to the bit, and the rules that differ for
    boxes (crowds as ignore regions, the curve) move the mask number too."""
    from pycocotools import mask as mask_utils

    from yolo_det.integrations.coco_eval import _masks

    truth, detections = random_case(3)
    for annotation in truth["annotations"]:
        x, y, w, h = annotation["bbox"]
        annotation["segmentation"] = [_octagon(x, y, x + w, y + h)]
    sizes = {i["id"]: (i["height"], i["width"]) for i in truth["images"]}
    for d in detections:
        height, width = sizes[d["image_id"]]
        rles = [mask_utils.frPyObjects([_octagon(*map(float, box))], height, width)[0] for box in d["boxes"]]
        d["rles"] = [{"size": r["size"], "counts": r["counts"].decode("ascii")} for r in rles]
    result = _masks(truth, detections, coco.predictions_json(detections), gap.release_rules(release))
    chain = result["gap"]
    assert chain["ends_at_coco_api"] is True, chain["residual"]
    assert chain["end"] == {"mAP50": result["coco"]["stats"]["AP50"], "mAP50-95": result["coco"]["stats"]["AP"]}
    moved = {s["rule"] for s in chain["steps"] if s["change"]["mAP50-95"] != 0}
    assert {"crowd", "curve"} <= moved, moved
    assert result["agreement"]["max_abs_difference"] < 1e-12
