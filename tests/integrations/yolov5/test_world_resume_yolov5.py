"""YOLOv5's own ``--resume`` of a run under a virtual world size V: stopped after epoch 1 and resumed, it is the
uninterrupted run bit for bit (fingerprints at every step, validations, the final full-precision model and EMA,
results.csv). Real PyPI yolov5 7.0.14 (a patched copy), yolov5n from scratch, one process, V=4, strict.

How 1 process and N processes give the same V-run is in ``test_world_yolov5.py``; by hand (docs/world_size.md) a run
of two gloo processes stopped after epoch 1 and resumed on one process matched too."""

from __future__ import annotations

import pytest

from conftest import PYTHON
from support.trees import with_package_copy
from support.verify import script_env

from yolo_det.record.log import read_log
from yolo_det.proof.resume_at import verify_resume
from yolo_det.synthetic import make_dataset

ARGS = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "128", "--batch-size", "4", "--workers", "0", "--noplots",
        "--device", "cpu", "--exist-ok", "--deterministic", "strict", "--multi-scale"]  # as test_world_yolov5.py


@pytest.mark.slow
def test_a_v_run_stopped_after_epoch_1_and_resumed_is_the_uninterrupted_run(tmp_path, patched_yolov5, train_env):
    """YOLOv5's own --resume of a V=4 run (one process): 12 images, 3 batches an epoch, 2 epochs; the warm-up's
    ``accumulate`` reaches 2 at batch 5, so the resumed epoch's first batch must not step."""
    repo = patched_yolov5  # read only: the runs write under --project
    data = make_dataset(tmp_path / "data", n_train=12, n_val=4, imgsz=128)
    cmd = [PYTHON, "train.py", "--data", data, *ARGS, "--epochs", "2", "--virtual-world-size", "4",
           "--project", tmp_path / "runs", "--name", "r{run}"]
    env = with_package_copy(script_env(train_env, OMP_NUM_THREADS="1"), repo)  # the patched copy is imported
    result = verify_resume(cmd, 1, runs=2, workdir=tmp_path / "verify", cwd=repo, env=env)
    (resumed,) = result.resumed
    assert resumed.comparison.identical, "\n".join(resumed.comparison.describe())
    assert resumed.checkpoints is None and resumed.results is None  # final fp32 model, EMA; results.csv
    assert result.identical and resumed.comparison.validations == 2
    assert resumed.first.steps == 3 and resumed.comparison.steps == 5  # the resumed epoch gathers two batches
    assert "yolo-det: resumed exactly after epoch 1" in resumed.second.output.read_text()
    header = read_log(resumed.second.log).header
    assert header["virtual_world_size"] == 4  # the resumed run kept V (opt.yaml)
