"""Every reported number labelled (issue 39, item 3): a validation record says which evaluator and rules computed
its metrics; the rules are probed on the installed release's own code (not read from a version string); a log
written before labels still reads, and says its metrics are unlabelled. No training here: the records of real runs
are checked in test_val_rerun.py (``--evaluator coco``)."""

from __future__ import annotations

import json

import pytest
import torch

from yolo_det.evaluation import labels
from yolo_det.integrations import metric_labels
from support.builders import fingerprint_log
from yolo_det.record.log import read_log

HEADER = {"yolo_det": "0.1.0", "torch": "2.14.1", "rank": 0, "world_size": 1, "command": ["train.py"]}
SETTINGS = {"max_det": 300, "conf_thres": 0.001, "iou_thres": 0.6}


def _log(path, evaluator):
    validation = dict(epoch=0, after_step=1, names=["batch0.image0"], hexes="b" * 32,
                      metrics={"mAP50": 0.5, "mAP50-95": 0.25}, best=True, stop=False, settings=dict(SETTINGS),
                      evaluator=evaluator)
    return read_log(fingerprint_log(path, HEADER, 1, {"param": (["w"], "a" * 32)}, lr={"group0.lr": 0.01},
                                    validations=[validation], final=(["model.w"], "c" * 32)))


def test_a_record_keeps_its_label_and_an_old_log_without_one_still_reads(tmp_path):
    label = labels.release_label("yolov5", "7.0.14", "pairs", "slope", SETTINGS)
    record = _log(tmp_path / "new.jsonl", label).validations[0]
    assert record.evaluator == label and labels.of_record(record.evaluator)["id"] == "yolov5.ap_per_class"
    old = tmp_path / "old.jsonl"  # the same log as an older yolo-det wrote it: no "evaluator" key at all
    lines = [json.loads(line) for line in (tmp_path / "new.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("evaluator", None)
    old.write_text("".join(json.dumps(line) + "\n" for line in lines))
    record = read_log(old).validations[0]
    assert record.evaluator is None and record.metrics == {"mAP50": 0.5, "mAP50-95": 0.25}
    assert labels.of_record(record.evaluator)["id"] is None
    assert "not recorded" in labels.of_record(record.evaluator)["label"]


def test_labels_have_the_same_short_keys_and_name_the_rules_that_differ():
    v5 = labels.release_label("yolov5", "7.0.14", "pairs", "slope", SETTINGS)
    api = labels.coco_label("pycocotools", "2.0.11")
    for label in (v5, api):
        assert tuple(label) == labels.KEYS and tuple(label["rules"]) == labels.RULE_KEYS
    assert v5["rules"]["max_dets"] == 300 and api["rules"]["max_dets"] == 100
    assert v5["rules"]["crowd"] != api["rules"]["crowd"] and v5["rules"]["match"] != api["rules"]["match"]
    assert v5["label"].startswith("yolov5 7.0.14 ap_per_class") and "max_det 300" in v5["label"]
    assert api["label"].startswith("pycocotools 2.0.11 COCOeval bbox") and "maxDets 100" in api["label"]
    assert labels.release_label("yolov5")["label"].startswith("yolov5-family")  # a git checkout: no version


def test_yolov5_rules_are_probed_on_its_own_code():
    val = pytest.importorskip("yolov5.val")
    label = metric_labels.yolov5(vars(val), SETTINGS)
    assert label["id"] == "yolov5.ap_per_class" and label["version"] == labels.installed_version("yolov5")
    assert label["rules"]["probed"] is True and label["rules"]["match"] == "pairs"
    assert label["rules"]["curve_end"] == "envelope to recall 1"
    assert (label["rules"]["conf"], label["rules"]["nms_iou"]) == (0.001, 0.6)

    def greedy(detections, objects, iouv):  # a fork whose matcher lets the second detection take the free object
        return torch.ones(len(detections), len(iouv), dtype=torch.bool)

    fork = {**vars(val), "__name__": "val", "process_batch": greedy}
    label = metric_labels.yolov5(fork, SETTINGS)
    assert label["rules"]["match"] == "confidence" and label["version"] is None  # behaviour, not a version string
    assert label["label"].startswith("yolov5-family")


def test_ultralytics_rules_are_probed_on_its_validator(tmp_path):
    validation = pytest.importorskip("ultralytics.models.yolo.detect.val")
    validator = validation.DetectionValidator(save_dir=tmp_path)  # else under pytest: site-packages/../tests/tmp/runs
    validator.iouv = torch.linspace(0.5, 0.95, 10)
    label = metric_labels.ultralytics(validator, {"max_det": 300, "conf_thres": 0.001, "iou_thres": 0.7}, "detect")
    assert label["id"] == "ultralytics.ap_per_class" and label["rules"]["probed"] is True
    assert label["rules"]["match"] == "confidence" and label["rules"]["average"] == "class x IoU table"
    segment = metric_labels.ultralytics(validator, None, "segment")
    assert segment["rules"]["iou_type"] == "bbox+segm"
    assert metric_labels.ultralytics(validator, None, "classify")["id"] == "ultralytics.accuracy"


def test_a_family_label_has_the_rules_the_gap_starts_from():
    from yolo_det.evaluation import gap

    for release in labels.FAMILY:
        rules, label = gap.release_rules(release), labels.release_label(release)
        assert (label["rules"]["match"], label["id"]) == (rules.matching, f"{release}.ap_per_class")
        assert label["rules"]["curve_end"] == labels._CURVE_END[rules.curve]
        assert (labels.FAMILY[release][2] == "classes") == (rules.averaging == "classes")
