"""apply-patch lifts the NMS wall-clock limit of the release's utils/general.py under strict/warn (off keeps it)."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
import torch

from support.patch import make_repo, snapshot
import yolo_det
from yolo_det.core import nms_limit
from yolo_det.patch import apply_patch, revert_patch

V50_NMS = '''import time

import torch


def non_max_suppression(prediction, conf_thres=0.25, iou_thres=0.45, classes=None, agnostic=False, labels=()):
    """v5.0 shape: a fixed limit, a print before the break."""
    nc = prediction.shape[2] - 5
    time_limit = 10.0  # seconds to quit after
    t = time.time()
    output = [torch.zeros((0, 6), device=prediction.device)] * prediction.shape[0]
    for xi, x in enumerate(prediction):
        x = x[x[..., 4] > conf_thres]
        if not x.shape[0]:
            continue
        output[xi] = x[:, :6]
        if (time.time() - t) > time_limit:
            print(f'WARNING: NMS time limit {time_limit}s exceeded')
            break  # time limit exceeded

    return output
'''

NO_LIMIT = '''import torch


def non_max_suppression(prediction, conf_thres=0.25):
    return [x[x[:, 4] > conf_thres] for x in prediction]
'''


def _repo_with_general(tmp_path, source: str):
    repo = make_repo(tmp_path, "yolov5-v6.2")
    (repo / "utils" / "general.py").write_text(source)
    return repo


def test_v50_shape_is_patched_and_reverts_byte_identical(tmp_path):
    repo = _repo_with_general(tmp_path, V50_NMS)
    before = snapshot(repo)
    result = apply_patch(repo)
    change = next(f for f in result.files if f.relpath == "utils/general.py")
    assert change.status == "patched" and "non_max_suppression()" in change.notes[0]
    lines = (repo / "utils" / "general.py").read_text().splitlines()
    at = lines.index("    time_limit = 10.0  # seconds to quit after")
    assert lines[at + 1].strip() == "from yolo_det.integrations import yolov5 as yolo_det_v5  # yolo-det"
    assert lines[at + 2].strip() == "time_limit = yolo_det_v5.nms_time_limit(time_limit)  # yolo-det"
    assert [line.strip() for line in lines[-3:] if line.strip()] == [
        "yolo_det_v5.nms_output(output)  # yolo-det", "return output"]
    assert apply_patch(repo).already_patched
    revert_patch(repo)
    assert snapshot(repo) == before


def test_a_tree_without_the_limit_has_nothing_to_do(tmp_path):
    repo = _repo_with_general(tmp_path, NO_LIMIT)
    result = apply_patch(repo)
    change = next(f for f in result.files if f.relpath == "utils/general.py")
    assert change.status == "skipped" and not change.changed and "nothing to do" in change.notes[0]
    assert (repo / "utils" / "general.py").read_text() == NO_LIMIT


def _load(path):
    spec = importlib.util.spec_from_file_location(f"nms_under_test_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jumping_clock(monkeypatch):
    """time.time() jumps 100 s at every call made from non_max_suppression (a very slow machine)."""
    real = time.time
    calls = [0]

    def clock():
        import sys
        if sys._getframe(1).f_code.co_name == "non_max_suppression":
            calls[0] += 1
            return real() + 100.0 * calls[0]
        return real()

    monkeypatch.setattr(time, "time", clock)


@pytest.mark.parametrize("mode", ["strict", "warn", "off"])
def test_patched_fixture_nms_ignores_the_clock_except_in_off(tmp_path, monkeypatch, capsys, mode):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    apply_patch(repo)
    module = _load(repo / "utils" / "general.py")
    prediction = torch.rand(4, 50, 6)
    prediction[..., 4] = 0.9  # every box passes, every image has predictions
    session = yolo_det.configure(mode)
    _jumping_clock(monkeypatch)
    first = module.non_max_suppression(prediction)
    module.non_max_suppression(prediction)
    kept = [len(x) for x in first]
    entry = session.extra[nms_limit.KEY]
    assert entry["calls"] == 2  # the patched code ran
    if mode == "off":
        assert kept == [50, 0, 0, 0] and entry["lifted"] is False  # the release's behaviour: cut after image 0
    else:
        assert kept == [50, 50, 50, 50] and entry["lifted"] is True
        assert entry["exceeded"] == 2  # both batches would have been cut...
        out = capsys.readouterr().out
        assert out.count("more than the release's time limit") == 1  # ...reported once
    session.finish(tmp_path / "run", echo=lambda _: None)
    saved = json.loads((tmp_path / "run" / "determinism.json").read_text())[nms_limit.KEY]
    assert saved["lifted"] is (mode != "off") and saved["calls"] == 2


def test_without_a_session_the_release_limit_stays(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    apply_patch(repo)
    module = _load(repo / "utils" / "general.py")
    from yolo_det.integrations.yolov5 import script as v5

    assert v5.nms_time_limit(0.7) == 0.7  # detect.py / val.py outside training: release behaviour
    assert [len(x) for x in module.non_max_suppression(torch.ones(2, 3, 6))] == [3, 3]


def test_lifted_limit_notes_the_first_excess_only():
    notes = []
    limit = nms_limit.LiftedTimeLimit(0.5, notes.append)
    assert not (0.4 > limit) and not (0.6 > limit) and not (9.0 >= limit) and limit > 1e9
    assert notes == [0.6] and f"{limit:.3f}" == "inf"
