"""Old loaders without a generator (v5.0- and v6.1-style fixtures) keep working with per-sample
streams: the patched scripts train, and --workers no longer changes the weights."""

from __future__ import annotations

import pytest

from conftest import PYTHON, run
from support.patch import fixture_env, make_repo, report, same_tensors, state_dict
from yolo_det.patch import apply_patch

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes


@pytest.mark.parametrize("name", ["yolov5-v5.0", "yolov5-v6.1"])
def test_old_loaders_train_the_same_with_0_and_2_workers(tmp_path, name, train_env):
    repo = make_repo(tmp_path, name)
    apply_patch(repo)
    env = fixture_env(train_env)
    for workers in ("0", "2"):
        cmd = [PYTHON, "train.py", "--project", tmp_path / "runs", "--name", f"w{workers}", "--epochs", "2",
               "--workers", workers, "--deterministic", "warn"]
        proc = run(cmd, cwd=repo, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (state_dict(tmp_path / "runs" / n / "weights" / "last.pt") for n in ("w0", "w2"))
    assert same_tensors(a, b)
    loader = report(tmp_path / "runs" / "w2")["yolov5"]["train_loader"]
    assert loader["seeded_by"] == "yolo-det" and loader["streams"]["on"] is True
