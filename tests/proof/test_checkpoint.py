"""`yolo-det diff A.pt B.pt`: checkpoints compared tensor by tensor without importing the training code."""

from __future__ import annotations

import copy
import datetime
import json
import sys
import zipfile

import numpy as np
import pytest
import torch

from yolo_det.cli import main as cli_main
from yolo_det.proof.checkpoint import CheckpointError, Placeholder, compare_checkpoints, load_checkpoint

MODEL_SOURCE = '''
import torch
from torch import nn


class Conv(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DetectionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(Conv(3, 8), Conv(8, 8))
        self.stride = torch.tensor([8.0, 16.0, 32.0])
        self.names = ["box", "disc"]

    def forward(self, x):
        return self.model(x)
'''


@pytest.fixture
def save_pair(tmp_path, monkeypatch):
    """Write two YOLOv5-shaped checkpoints of a model class from a package that is gone when they are read."""
    package = tmp_path / "pkg" / "fake_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "yolo.py").write_text(MODEL_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    from fake_models.yolo import DetectionModel

    def save(edit=lambda ckpt: None, name="a"):
        torch.manual_seed(0)
        model = DetectionModel()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        model(torch.rand(2, 3, 8, 8)).sum().backward()
        optimizer.step()
        ckpt = {"epoch": 3, "best_fitness": np.array([0.25]), "model": copy.deepcopy(model).half(),
                "ema": copy.deepcopy(model).half(), "updates": 12, "optimizer": optimizer.state_dict(),
                "opt": {"name": name, "save_dir": f"runs/{name}"}, "git": {"commit": name},
                "date": datetime.datetime.now().isoformat()}
        edit(ckpt)
        path = tmp_path / f"{name}.pt"
        torch.save(ckpt, path)
        return path

    yield save
    for module in [m for m in sys.modules if m.startswith("fake_models")]:
        del sys.modules[module]


def _forget_models():
    for module in [m for m in sys.modules if m.startswith("fake_models")]:
        del sys.modules[module]
    sys.path[:] = [p for p in sys.path if not p.endswith("/pkg")]


def test_identical_training_state_with_different_metadata(save_pair, capsys):
    a, b = save_pair(name="a"), save_pair(name="b")
    _forget_models()
    data = load_checkpoint(a)
    assert isinstance(data["model"], Placeholder) and "fake_models.yolo.DetectionModel" in repr(data["model"])
    result = compare_checkpoints(a, b)
    assert result.identical
    assert result.tensors["model"] == result.tensors["ema"] == 13  # 2 x (conv weight + 5 bn tensors) + stride
    assert result.tensors["optimizer"] == 6  # one momentum buffer per parameter
    assert set(result.metadata) == {"opt", "git", "date"}
    assert cli_main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("identical: ") and "metadata that differs (expected, not judged): opt, git, date" in out


def test_differing_tensors_and_values_are_named(save_pair, capsys):
    def edit(ckpt):
        state = ckpt["optimizer"]["state"][0]["momentum_buffer"]
        state.view(-1)[0:1].view(torch.int32).bitwise_xor_(1)  # one bit
        ckpt["ema"].model[1].bn.running_mean += 1
        ckpt["epoch"] = 4

    a, b = save_pair(name="a"), save_pair(edit, name="b")
    _forget_models()
    result = compare_checkpoints(a, b)
    names = [d.name for d in result.differing]
    assert names == ["epoch", "ema.model.1.bn.running_mean", "optimizer.state.0.momentum_buffer"]
    assert result.differing[2].reason.startswith("values differ (1 of 216 elements")
    assert cli_main(["diff", "--json", str(a), str(b)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["identical"] is False and [d["name"] for d in out["differing"]] == names


@pytest.mark.parametrize("kind", ["random", "empty", "directory", "json", "truncated", "list", "zip"])
def test_corrupt_or_non_checkpoint_files_exit_2_without_a_traceback(tmp_path, capsys, kind):
    good = tmp_path / "good.pt"
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 1}, good)
    bad = tmp_path / "bad.pt"
    if kind == "random":
        bad.write_bytes(b"\x00\x01not a checkpoint at all")
    elif kind == "empty":
        bad.write_bytes(b"")
    elif kind == "directory":
        bad.mkdir()
    elif kind == "json":
        bad.write_text('{"step": 1}')
    elif kind == "truncated":
        bad.write_bytes(good.read_bytes()[:200])
    elif kind == "list":
        torch.save([torch.ones(1)], bad)
    else:
        with zipfile.ZipFile(bad, "w") as archive:
            archive.writestr("hello.txt", "a zip, not a checkpoint")
    with pytest.raises(CheckpointError):
        compare_checkpoints(good, bad)
    assert cli_main(["diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "yolo-det diff: error:" in err and str(bad) in err and "Traceback" not in err


def test_run_files_results_table_and_verify_exit(tmp_path, capsys):
    from types import SimpleNamespace

    from yolo_det.cli.verify import _report_artifacts
    from yolo_det.proof.artifacts import compare_run_dirs
    from yolo_det.proof.verify import VerifyResult

    header = "epoch,time,metrics/mAP50(B),val/box_loss\n"
    for name, rows in (("a", "1,0.5,0.25,1.5\n2,1.1,0.5,1.25\n"), ("b", "1,0.7,0.25,1.5\n2,1.6,0.375,1.25\n")):
        run = tmp_path / name
        (run / "weights").mkdir(parents=True)
        (run / "results.csv").write_text(header + rows)
        torch.save({"model": {"w": torch.ones(3)}, "epoch": 1, "date": name}, run / "weights" / "last.pt")
    result = compare_run_dirs(tmp_path / "a", tmp_path / "b")
    assert not result.identical and result.results.not_judged == ["time"]  # the time column differs, unjudged
    assert result.results.differing == 1 and result.results.first == "row 2 (epoch 2), metrics/mAP50(B): 0.5 vs 0.375"
    assert result.checkpoints["weights/last.pt"].identical and result.missing == ["weights/best.pt"]

    verified = VerifyResult(runs=[], comparisons=[], artifacts=[result])
    _report_artifacts(verified, SimpleNamespace(json=False))
    assert verified.verdict == "differs" and verified.exit_code == 1
    out = capsys.readouterr().out
    assert "results.csv: differs in 1 cells" in out and "the files the runs wrote differ" in out


def test_a_pickle_that_calls_eval_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (eval, ("1 + 1",))

    path = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, path)
    with pytest.raises(CheckpointError, match="builtins.eval"):
        load_checkpoint(path)
