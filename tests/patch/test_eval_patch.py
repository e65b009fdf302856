"""apply-patch on evaluation scripts of every release shape (v5.0 test.py/detect.py, v6.x val.py, master
segment/val.py, yolov7 test.py), and what the inserted calls do in-process (no model runs here)."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import pytest
import torch

from support.patch import EVAL_SCRIPTS, PATCHES, lines_with, make_eval_repo, snapshot
from yolo_det.integrations.yolov5 import evaluation
from yolo_det.patch import apply_patch, revert_patch
from yolo_det.record.log import read_log

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from regen_patches import eval_diff  # noqa: E402

REGEN = "patches/ is out of date: run `python scripts/regen_patches.py` and review the diff"


def _function_ending(text: str, call: str) -> str:
    """The name of the function whose last statement (or the one before its final return) is ``call``."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[:-1] if isinstance(node.body[-1], ast.Return) else node.body
            if body and ast.unparse(body[-1]) == call:
                return node.name
    return ""


@pytest.mark.parametrize("name", sorted(EVAL_SCRIPTS))
def test_evaluation_scripts_of_each_release_shape_patch_and_revert_exactly(tmp_path, name):
    repo = make_eval_repo(tmp_path, name)
    before = snapshot(repo)
    result = apply_patch(repo)
    changed = {f.relpath: f for f in result.files if f.changed}
    assert set(EVAL_SCRIPTS[name]) <= set(changed), sorted(changed)
    assert eval_diff(result, name) == (PATCHES / "fixtures" / f"eval-{name}.diff").read_text(), REGEN
    for script in EVAL_SCRIPTS[name]:
        text = (repo / script).read_text()
        ast.parse(text, feature_version=(3, 6))
        assert len(lines_with(text, "yolo_det_v5.add_eval_arguments(parser)")) == 1
        assert len(lines_with(text, "yolo_det_v5.evaluation_start(opt)")) == 1
        lines = text.splitlines()
        parse = next(i for i, line in enumerate(lines) if "opt = parser.parse_args()" in line)
        assert "add_eval_arguments" in lines[parse - 1] and "evaluation_start" in lines[parse + 1]
        expected = {"detect.py": "detect", "test.py": "test"}.get(Path(script).name, "run")
        assert _function_ending(text, "yolo_det_v5.evaluated(locals())") == expected
        assert not lines_with(text, "yolo_det_v5.start(")  # no training calls in an evaluation script
    assert all(f.status == "already patched" for f in apply_patch(repo).files)  # idempotent
    revert_patch(repo)
    assert snapshot(repo) == before  # byte for byte


def test_scripts_that_do_not_evaluate_are_left_alone(tmp_path):
    repo = make_eval_repo(tmp_path, "yolov5-v6.1")
    (repo / "export.py").write_text(  # a dry-run loop over range() calls model() too
        "import argparse\n\ndef run(model=None):\n    for _ in range(2):\n        y = model(1)\n\n\n"
        "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n    opt = parser.parse_args()\n")
    (repo / "hubconf.py").write_text("def custom(model=None):\n    return model(1)\n")
    result = apply_patch(repo)
    assert {"export.py", "hubconf.py"}.isdisjoint(f.relpath for f in result.files if f.changed)


def _session(tmp_path, monkeypatch, mode="strict", script="val.py"):
    log = tmp_path / "eval.jsonl"
    opt = argparse.Namespace(data="data.yaml", weights=["best.pt"], batch_size=4, deterministic=mode,
                             fingerprint=str(log))
    frame_globals = {"__file__": str(tmp_path / script)}
    session = eval(compile("evaluation_start(opt)", str(tmp_path / script), "eval"),  # noqa: S307 - its caller's file
                   {**frame_globals, "evaluation_start": evaluation.evaluation_start, "opt": opt})
    return session, opt, log


def test_start_takes_yolo_det_options_out_of_opt_and_evaluated_records_each_release_names(tmp_path, monkeypatch):
    session, opt, log = _session(tmp_path, monkeypatch)
    # run(**vars(opt)) must not receive yolo-det's options
    assert vars(opt) == {"data": "data.yaml", "weights": ["best.pt"], "batch_size": 4}
    assert session.settings.mode == "strict" and session.settings.source == "cli"
    model = torch.nn.Conv2d(3, 2, 1)
    dataset = argparse.Namespace(rect=True, batch_shapes=[[64, 96], [64, 96]], img_files=["a.png", "b.png"])
    from yolo_det.record import fingerprint

    fingerprint.record_predictions([torch.zeros(2, 6), torch.zeros(1, 6)])
    # v5.0 test(): no max_det, img_files, half from half_precision, metrics mp/mr/map50/map
    record = evaluation.evaluated({"training": False, "model": model, "dataloader": argparse.Namespace(
        dataset=dataset), "batch_size": 2, "imgsz": 64, "conf_thres": 0.001, "iou_thres": 0.6, "half": False,
        "mp": 0.5, "mr": 0.25, "map50": 0.125, "map": 0.0625, "save_dir": tmp_path / "runs"})
    assert record["metrics"] == {"precision": 0.5, "recall": 0.25, "mAP50": 0.125, "mAP50-95": 0.0625}
    assert record["settings"]["batch_shapes"] == [[64, 96]] and record["settings"]["max_det"] is None
    assert record["settings"]["data"] == "data.yaml" and record["settings"]["weights"] == ["best.pt"]
    # inside training (train.py calls run() with its model) nothing is recorded
    assert evaluation.evaluated({"training": True, "mp": 1.0}) is None
    report = json.loads((tmp_path / "runs" / "determinism.json").read_text())
    assert report["evaluation"]["metrics"]["mAP50"] == 0.125 and report["mode"] == "strict"
    session.finish(echo=lambda _m: None)
    (val,) = read_log(log).validations
    assert val.files == ["a.png", "b.png"] and val.boxes == [2, 1] and val.settings["imgsz"] == 64
    # labelled with the settings it ran with; no release code called it here, so its rules are the family's
    assert val.evaluator["id"] == "yolov5.ap_per_class" and val.evaluator["rules"]["conf"] == 0.001
    assert val.evaluator["rules"]["probed"] is False


def test_classify_and_segment_names(tmp_path, monkeypatch):
    session, _opt, _log = _session(tmp_path, monkeypatch, mode="warn", script="classify/val.py")
    record = evaluation.evaluated({"top1": 0.75, "top5": 1.0, "batch_size": 8, "imgsz": 224, "task": "val"})
    assert record["task"] == "classify" and record["metrics"] == {"top1": 0.75, "top5": 1.0}
    names = dict.fromkeys(("mp_bbox", "mr_bbox", "map50_bbox", "map_bbox", "mp_mask", "mr_mask", "map50_mask",
                           "map_mask"), 0.5)
    record = evaluation.evaluated(names)
    assert record["task"] == "segment" and record["metrics"]["mAP50-95(M)"] == 0.5
    session.finish(echo=lambda _m: None)


def test_a_bad_mode_exits_2_naming_its_source(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        _session(tmp_path, monkeypatch, mode="sometimes")
    assert exc.value.code == 2 and "sometimes" in capsys.readouterr().err
