"""The evaluation-settings contract: one dict of the same keys for every release, kept in the log's val records."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from yolo_det.evaluation import settings as eval_settings
from yolo_det.record import fingerprint
from yolo_det.record.log import read_log


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(dtype)


def test_every_key_is_present_and_plain_json():
    settings = eval_settings.build(batch_size=16, imgsz=128, rect=True)
    assert list(settings) == list(eval_settings.KEYS)
    assert settings["max_det"] is None and settings["batch_size"] == 16
    json.dumps(settings, allow_nan=False)
    with pytest.raises(TypeError, match="batchsize"):
        eval_settings.build(batchsize=16)


def test_weights_digest_is_of_the_state_evaluated():
    a, b = _model(), _model()
    assert eval_settings.state_digest(a) == eval_settings.state_digest(b)
    assert eval_settings.weights_dtype(a) == "float32"
    assert eval_settings.state_digest(a.half()) != eval_settings.state_digest(b)
    assert eval_settings.weights_dtype(a) == "float16"
    with torch.no_grad():
        b[0].weight[0, 0, 0, 0] += 1e-7  # one value, below fp16 resolution: still another digest
    assert eval_settings.state_digest(b) != eval_settings.state_digest(_model())
    b[1].running_mean.add_(1)  # buffers are part of what is evaluated
    assert eval_settings.state_digest(b) != eval_settings.state_digest(_model())
    assert eval_settings.state_digest(None) is None


def test_yolov5_values_of_a_standalone_run_and_of_training_validation():
    standalone = eval_settings.from_yolov5(
        {"task": "val", "data": {"yaml_file": "data.yaml", "nc": 1}, "batch_size": 32, "imgsz": 128, "rect": True,
         "pad": 0.5, "half": False, "conf_thres": 0.001, "iou_thres": 0.6, "max_det": 300, "single_cls": False,
         "augment": False, "weights": ["best.pt"], "model": _model()},
        batch_shapes=[[96, 128], [128, 128]], nms_cut_batches=[1])
    assert standalone["data"] == "data.yaml" and standalone["weights"] == ["best.pt"]
    assert standalone["batch_shapes"] == [[96, 128], [128, 128]] and standalone["nms_cut_batches"] == [1]
    assert standalone["weights_dtype"] == "float32" and standalone["task"] == "detect"
    # train.py hands run() its loader: rect and the batch shapes come from the dataset; v5.0 has no max_det
    dataset = SimpleNamespace(rect=True, batch_shapes=[[64, 128], [64, 128], [128, 96]])
    training = eval_settings.from_yolov5({"task": "val", "batch_size": 16, "imgsz": 128, "half": False,
                                          "dataloader": SimpleNamespace(dataset=dataset), "model": _model()})
    assert training["rect"] is True and training["pad"] is None and training["max_det"] is None
    assert training["batch_shapes"] == [[64, 128], [128, 96]]
    assert eval_settings.from_yolov5({"task": "study", "imgsz": 64})["split"] is None


def test_ultralytics_validator_args():
    from ultralytics.cfg import get_cfg

    args = get_cfg(overrides={"mode": "val", "data": "d.yaml", "batch": 8, "imgsz": 64, "model": "best.pt"})
    settings = eval_settings.from_ultralytics(args, model=_model(torch.float16))
    assert (settings["data"], settings["batch_size"], settings["imgsz"], settings["weights"]) == \
        ("d.yaml", 8, 64, "best.pt")
    assert settings["split"] == "val" and settings["weights_dtype"] == "float16"
    assert settings["iou_thres"] == args.iou and settings["max_det"] == args.max_det
    assert eval_settings.from_ultralytics(args, half=True)["half"] is True


def test_val_records_carry_settings_boxes_and_files_and_old_records_still_read(tmp_path):
    path = tmp_path / "eval.jsonl"
    settings = eval_settings.build(batch_size=2, imgsz=64)
    with fingerprint.fingerprinting(path):
        fingerprint.record_predictions([torch.zeros(3, 6), torch.zeros(0, 6)])
        fingerprint.record_validation(None, {"mAP50": 0.5}, settings=settings, files=["a.jpg", "b.jpg"])
    log = read_log(path)
    assert log.count == 0  # a standalone evaluation: no steps, one validation
    (val,) = log.validations
    assert val.settings == settings and val.boxes == [3, 0] and val.files == ["a.jpg", "b.jpg"]
    lines = path.read_text().splitlines()
    old = json.loads(lines[1])
    for key in ("settings", "boxes", "files"):
        old.pop(key)
    path.write_text("\n".join([lines[0], json.dumps(old), lines[2]]) + "\n")
    (val,) = read_log(path).validations
    assert (val.settings, val.boxes, val.files) == (None, None, None) and val.metrics == {"mAP50": 0.5}
