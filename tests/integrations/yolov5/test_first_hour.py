"""The README's YOLOv5 path on the torch the project installs: a patched copy of the PyPI yolov5 trains to its end
(its checkpoints load in full on torch >= 2.6, said once), a setting that would make it fail after the last epoch is
refused at start-up, and a training that fails at any point still leaves determinism.json and a closed record
saying how it ended."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run
from yolo_det.synthetic import make_dataset

pytestmark = pytest.mark.slow  # trains the real PyPI yolov5

ARGS = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--epochs", "1", "--batch-size", "4",
        "--workers", "0", "--noplots", "--device", "cpu"]
#: strip_optimizer fails as a full disk or a checkpoint torch cannot load would, after the last epoch
FAILING_SAVE = """import runpy, sys
import yolov5.utils.general as general
def strip_optimizer(*args, **kwargs):
    raise OSError(28, "No space left on device")
general.strip_optimizer = strip_optimizer
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("tiny"), n_train=8, n_val=4, imgsz=64)


def _env(train_env, tree: Path, **extra):
    """The offline environment as a user has it: no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD; the patched copy imported
    (its parent first on PYTHONPATH, as docs/patch.md says), then this checkout's yolo_det."""
    env = {k: v for k, v in train_env.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    env["PYTHONPATH"] = f"{tree.parent}:{Path(__file__).resolve().parents[3]}"
    env.update(extra)
    return env


def _offline_exports(folder: Path) -> dict:
    """What `eval "$(yolo-det env --exports --offline DIR)"` sets."""
    import shlex

    from support.cli import cli

    proc = cli("env", "--exports", "--offline", folder)
    assert proc.returncode == 0, proc.stderr
    pairs = [shlex.split(line[len("export "):])[0].split("=", 1) for line in proc.stdout.splitlines()]
    return dict(pairs)


def test_a_patched_pypi_yolov5_trains_to_its_end_on_this_torch(patched_yolov5, tiny, tmp_path):
    """As a user's shell has it: the exports of `yolo-det env --exports --offline` and nothing of the tests' own
    offline environment (no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, no font set up by the tests)."""
    import os

    exports = _offline_exports(tmp_path / "offline")
    assert (tmp_path / "offline" / "Arial.ttf").is_file() and exports["YOLO_OFFLINE"] == "1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YOLO", "TORCH_FORCE", "PYTEST"))}
    env.update(exports, PYTHONPATH=f"{patched_yolov5.parent}:{Path(__file__).resolve().parents[3]}",
               MPLBACKEND="Agg")
    proc = run([sys.executable, "train.py", "--data", tiny, *ARGS, "--project", tmp_path, "--name", "w",
                "--deterministic", "warn"], cwd=patched_yolov5, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("load in full in this process") == 1
    import torch

    best = torch.load(tmp_path / "w" / "weights" / "best.pt", weights_only=False)  # stripped: no optimizer
    assert best["optimizer"] is None and (tmp_path / "w" / "determinism.json").is_file()


def test_a_setting_that_would_fail_after_the_last_epoch_is_refused_at_start(patched_yolov5, tiny, train_env,
                                                                            tmp_path):
    proc = run([sys.executable, "train.py", "--data", tiny, *ARGS, "--project", tmp_path, "--name", "w",
                "--deterministic", "warn"], cwd=patched_yolov5,
               env=_env(train_env, patched_yolov5, TORCH_FORCE_WEIGHTS_ONLY_LOAD="1"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD=1 refuses" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("w/weights/*.pt"))  # refused before anything trained


def test_a_training_that_fails_in_its_final_save_leaves_its_record_closed(patched_yolov5, tiny, train_env, tmp_path):
    script = tmp_path / "failing_save.py"
    script.write_text(FAILING_SAVE)
    proc = run([sys.executable, script, "--data", tiny, *ARGS, "--project", tmp_path, "--name", "w",
                "--deterministic", "strict"], cwd=patched_yolov5, env=_env(train_env, patched_yolov5))
    assert proc.returncode == 1 and "No space left on device" in proc.stderr
    assert "cannot schedule new futures" not in proc.stderr  # yolo-det's own exit handler finished its work
    report = json.loads((tmp_path / "w" / "determinism.json").read_text())
    assert report["ended"] == {"closed_by": "error", "error": "OSError: [Errno 28] No space left on device"}
    final = json.loads((tmp_path / "w" / "fingerprint.jsonl").read_text().splitlines()[-1])
    assert final["final"] is True and final["closed_by"] == "error" and final["steps"] == report["steps"] > 0
    assert "training did not reach its end (OSError" in proc.stdout

