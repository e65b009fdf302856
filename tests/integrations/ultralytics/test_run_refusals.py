"""`yolo-det run -- yolo train ...` with a setting the trainer refuses: one line and exit 2, as under `yolo-det
ultralytics train`, no traceback through yolo-det, and a run folder made before the failure holds its report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run
from yolo_det.synthetic import make_dataset

pytestmark = pytest.mark.slow  # starts Ultralytics under yolo-det run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("tiny"), n_train=8, n_val=4, imgsz=64)


@pytest.mark.parametrize("setting,expected", [("deterministic=strcit", "'strcit' is not one of strict, warn, off"),
                                              ("data={missing}", "does not exist")])
def test_a_bad_setting_under_yolo_det_run_is_one_line_and_exit_2(setting, expected, tiny, train_env, tmp_path):
    """As under `yolo-det ultralytics train`: no traceback through yolo-det, not a finding's exit code."""
    pytest.importorskip("ultralytics")
    from support.verify import script_env

    yolo = Path(sys.executable).with_name("yolo")
    data = f"data={tiny}" if not setting.startswith("data=") else setting.format(missing=tmp_path / "none.yaml")
    args = [a for a in ("model=yolov8n.yaml", data, "epochs=1", "imgsz=64", "device=cpu", f"project={tmp_path / 'runs'}",
                        "name=a", setting if not setting.startswith("data=") else None) if a]
    proc = run([sys.executable, "-m", "yolo_det", "run", "--", yolo, "train", *args], cwd=tmp_path,
               env=script_env(train_env))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("yolo-det: error:")]
    assert len(errors) == 1 and expected in errors[0] and "Traceback" not in proc.stderr
    folder = tmp_path / "runs" / "a"
    if folder.exists():  # made before the failure (Ultralytics makes it first): it holds the failure's report
        report = json.loads((folder / "determinism.json").read_text())
        assert report["ultralytics"]["status"].startswith("failed: ")
