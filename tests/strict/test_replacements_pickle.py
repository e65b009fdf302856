"""Replaced models save and load like native ones: pickles name only the original classes,
state_dict keys and buffers are unchanged, checkpoints load both ways and without yolo-det."""

from __future__ import annotations

import copy
import io
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn as nn

from models import BLOCKS, detector
from yolo_det.strict.swap import is_replaced, make_deterministic

TESTS = Path(__file__).resolve().parents[1]


def _replaced(name: str = "scam") -> nn.Module:
    model = detector(BLOCKS[name](8), c=8)
    make_deterministic(model)
    return model


def _globals(data: bytes) -> set:
    """Module names of every class/function a pickle references."""
    names, strings = set(), []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            names.add(strings[-2])
        elif opcode.name == "GLOBAL":
            names.add(arg.split(" ")[0])
    return names


def test_pickle_names_only_the_original_classes():
    model = _replaced("scam")
    assert is_replaced(model.model[7].att.max)
    data = pickle.dumps(model)
    assert not any(name.startswith("yolo_det") for name in _globals(data))
    assert b"yolo_det" not in data
    loaded = pickle.loads(data)
    assert type(loaded.model[7].att.max) is nn.AdaptiveMaxPool2d
    assert not any(is_replaced(m) for m in loaded.modules())


def test_state_dict_and_buffers_are_unchanged():
    native = detector(BLOCKS["coordatt"](8), c=8)
    model = copy.deepcopy(native)
    make_deterministic(model)
    assert list(model.state_dict()) == list(native.state_dict())
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in native.named_buffers()]
    assert {k: type(v) for k, v in vars(model.model[7].att.pool_h).items()} == \
        {k: type(v) for k, v in vars(native.model[7].att.pool_h).items()}


def test_checkpoints_load_both_ways(tmp_path):
    replaced, native = _replaced("psp"), detector(BLOCKS["psp"](8), c=8)
    with torch.no_grad():
        for p in replaced.parameters():
            p.add_(1.0)
    native.load_state_dict(torch.load(_save(replaced.state_dict(), tmp_path / "a.pt")))
    fresh = _replaced("psp")
    fresh.load_state_dict(torch.load(_save(native.state_dict(), tmp_path / "b.pt")))
    for a, b in zip(fresh.parameters(), replaced.parameters()):
        assert torch.equal(a, b)
    # YOLOv5 pickles whole models: {'model': deepcopy(model).half()}
    checkpoint = torch.load(_save({"model": copy.deepcopy(replaced).half()}, tmp_path / "c.pt"), weights_only=False)
    assert not any(is_replaced(m) for m in checkpoint["model"].modules())
    assert type(checkpoint["model"].model[7].att.stages[2][0]) is nn.AdaptiveAvgPool2d


def _save(obj, path: Path) -> Path:
    torch.save(obj, path)
    return path


def test_deepcopy_keeps_the_replacement():
    model = _replaced("cbam")
    twin = copy.deepcopy(model)
    assert is_replaced(twin.model[7].att.max)
    assert twin.model[7].att.max is not model.model[7].att.max
    buffer = io.BytesIO()
    torch.save(twin, buffer)
    assert b"yolo_det" not in buffer.getvalue()


BLOCKER = """
import sys
class NoYoloDet:
    def find_spec(self, name, path=None, target=None):
        if name == "yolo_det" or name.startswith("yolo_det."):
            raise ImportError("yolo_det is not installed here")
sys.meta_path.insert(0, NoYoloDet())
sys.path.insert(0, sys.argv[2])
import torch
ckpt = torch.load(sys.argv[1], weights_only=False)
model = ckpt["model"].float()
y = model(torch.rand(1, 3, 32, 32))
print(type(model.model[7].att.max).__module__, type(model.model[7].att.max).__name__, len(y))
"""


def test_a_yolov5_style_checkpoint_loads_where_yolo_det_is_not_installed(tmp_path):
    model = _replaced("scam")
    path = _save({"epoch": 0, "model": copy.deepcopy(model).half()}, tmp_path / "last.pt")
    run = subprocess.run([sys.executable, "-c", BLOCKER, str(path), str(TESTS)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["torch.nn.modules.pooling", "AdaptiveMaxPool2d", "2"]
