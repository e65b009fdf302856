"""End to end on the real PyPI yolov5 package: patch, train yolov5n on synthetic data, compare, revert.

The runs are shared between tests (each is ~9 s on CPU): two strict (the session's ``yolov5_strict_verify``,
also read by test_verify_yolov5), two warn, one with
``deterministic: off`` in the hyp YAML, a one-generation --evolve, a --resume of a run made to look
as if it was started before the patch.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict

import pytest
import torch
import yaml

from conftest import PYTHON, YOLOV5_TRAIN, run
from support.patch import report, same_tensors, snapshot, state_dict
from yolo_det.patch import apply_patch, revert_patch

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes

TRAIN_ARGS = YOLOV5_TRAIN  # the configuration of conftest's yolov5_strict_verify, whose two strict runs these read


class Trainer:
    """Runs the patched train.py once per run name; tests share the finished runs."""

    def __init__(self, repo: Path, project: Path, data: Path, env: Dict[str, str]) -> None:
        self.repo, self.project, self.data, self.env = repo, project, data, env
        self.procs: Dict[str, object] = {}

    def __call__(self, name: str, *args: str, epochs: str = "2", env: Dict[str, str] = None):
        """The finished process of run ``name`` (started now unless it ran already, with the same args)."""
        cmd = [PYTHON, "train.py", "--data", self.data, "--epochs", epochs, *TRAIN_ARGS,
               "--project", self.project, "--name", name, *args]
        if name not in self.procs:
            self.procs[name] = (cmd, run(cmd, cwd=self.repo, env=env or self.env))
        assert self.procs[name][0] == cmd, f"run {name!r} is shared: ask for it with the same arguments"
        return self.procs[name][1]

    def ok(self, name: str, *args: str, **kwargs) -> Path:
        proc = self(name, *args, **kwargs)
        assert proc.returncode == 0, f"{name}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
        return self.project / name


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, patched_yolov5, dataset, train_env) -> Trainer:
    return Trainer(patched_yolov5, tmp_path_factory.mktemp("runs"), dataset, train_env)


def _weights(run_dir: Path) -> Dict[str, torch.Tensor]:
    return state_dict(run_dir / "weights" / "last.pt")


def _strict(verify, run: int = 1) -> Path:
    """Run ``run`` of the session's strict verify (the same configuration as the trainer's runs)."""
    proc, root = verify
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return root / "runs" / f"strict{run}"


def _pair(trainer, verify, mode: str) -> tuple:
    """Two runs of ``mode`` and what the first printed."""
    if mode == "strict":
        return _strict(verify, 1), _strict(verify, 2), (verify[1] / "w" / "run1" / "output.log").read_text()
    a = trainer.ok(f"{mode}-a", "--deterministic", mode)
    return a, trainer.ok(f"{mode}-b", "--deterministic", mode), trainer(f"{mode}-a", "--deterministic", mode).stdout


@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_two_runs_are_bit_identical(trainer, yolov5_strict_verify, mode):
    a, b, output = _pair(trainer, yolov5_strict_verify, mode)
    assert same_tensors(_weights(a), _weights(b))
    assert (a / "results.csv").read_text() == (b / "results.csv").read_text()

    data = report(a)
    assert (data["mode"], data["mode_source"]) == (mode, "cli")
    assert data["steps"] == 4 and data["seed"] == 0  # init_seeds(opt.seed + 1 + RANK)
    assert data["flags_applied"]["deterministic"] is True
    assert data["flags_applied"]["warn_only"] is (mode == "warn")
    assert data["yolov5"]["finished"] is True
    assert data["yolov5"]["train_loader"]["seeded_by"] == "release"  # 7.0 seeds its loader
    assert data["violations"] == report(b)["violations"]
    assert "yolo-det: wrote" in output


def test_strict_and_warn_differ_only_in_flags(trainer, yolov5_strict_verify):
    """Both resolve to the same deterministic kernels on CPU: same weights, different recorded mode (the strict
    run fingerprinted by verify, the warn run not: fingerprinting changes no weight either)."""
    strict = _strict(yolov5_strict_verify)
    warn = trainer.ok("warn-a", "--deterministic", "warn")
    assert same_tensors(_weights(strict), _weights(warn))
    assert (report(strict)["mode"], report(warn)["mode"]) == ("strict", "warn")


def test_bogus_mode_fails_with_the_choices(trainer):
    proc = trainer("bogus", "--deterministic", "bogus")
    assert proc.returncode == 2
    assert "argument --deterministic: invalid choice: 'bogus' (choose from 'strict', 'warn', 'off')" in proc.stderr
    assert not (trainer.project / "bogus").exists()


def test_hyp_yaml_mode_is_honoured_and_recorded(trainer, tmp_path_factory):
    hyp = tmp_path_factory.mktemp("hyp") / "hyp.off.yaml"
    base = yaml.safe_load((trainer.repo / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    hyp.write_text(yaml.safe_dump(base, sort_keys=False) + "deterministic: off\n")  # YAML 1.1: off is false
    run_dir = trainer.ok("hyp-off", "--hyp", str(hyp), epochs="1")  # what the run records, not how long it trains
    data = report(run_dir)
    assert (data["mode"], data["mode_source"]) == ("off", "hyp")
    assert data["flags_applied"]["deterministic"] is False  # v7.0's hard-coded strict is undone
    assert data["flags_now"]["deterministic"] is False
    assert "yolo-det: determinism off (from hyp YAML)" in trainer("hyp-off", "--hyp", str(hyp), epochs="1").stdout
    # the run's own hyp.yaml keeps the setting, so it reproduces the run and --resume keeps the mode
    assert yaml.safe_load((run_dir / "hyp.yaml").read_text())["deterministic"] is False


def test_evolve_with_deterministic_key_in_hyp(trainer, tmp_path_factory):
    hyp = tmp_path_factory.mktemp("hyp") / "hyp.warn.yaml"
    base = yaml.safe_load((trainer.repo / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    hyp.write_text(yaml.safe_dump({**base, "deterministic": "warn"}, sort_keys=False))
    run_dir = trainer.ok("evolve", "--evolve", "1", "--hyp", str(hyp), epochs="1")
    assert (run_dir / "evolve.csv").is_file()
    data = report(run_dir)
    assert (data["mode"], data["mode_source"]) == ("warn", "hyp")
    assert "deterministic" not in (run_dir / "evolve.csv").read_text()


def test_resume_of_a_run_started_before_the_patch(trainer, yolov5_strict_verify, tmp_path_factory):
    """A pre-patch run's opt.yaml has no deterministic/fingerprint: resume must still work."""
    source = _strict(yolov5_strict_verify)
    old = trainer.project / "pre-patch"
    shutil.copytree(source, old)
    (old / "determinism.json").unlink()
    opt = yaml.safe_load((old / "opt.yaml").read_text())
    for key in ("deterministic", "fingerprint"):
        opt.pop(key)
    opt["save_dir"] = str(old)
    (old / "opt.yaml").write_text(yaml.safe_dump(opt, sort_keys=False))
    ckpt = torch.load(old / "weights" / "last.pt", map_location="cpu", weights_only=False)
    ckpt["epoch"] = 0  # as if stopped after the first of two epochs
    torch.save(ckpt, old / "weights" / "last.pt")

    env = {**trainer.env, "YOLO_DET_DETERMINISTIC": "off"}
    proc = run([PYTHON, "train.py", "--resume", old / "weights" / "last.pt"], cwd=trainer.repo, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Resuming training from" in proc.stderr + proc.stdout
    data = report(old)
    assert (data["mode"], data["mode_source"]) == ("off", "env")
    assert data["steps"] == 2 and data["yolov5"]["finished"] is True  # the second epoch only


def test_revert_is_byte_identical(yolov5_copy):
    before = snapshot(yolov5_copy)
    result = apply_patch(yolov5_copy)
    assert [f.relpath for f in result.files if f.changed] == [
        "train.py", "classify/train.py", "segment/train.py", "utils/general.py",  # training and its NMS
        "detect.py", "val.py", "classify/predict.py", "classify/val.py", "segment/predict.py", "segment/val.py",
        "export.py"]
    assert apply_patch(yolov5_copy).already_patched
    revert_patch(yolov5_copy)
    assert snapshot(yolov5_copy) == before


@pytest.mark.parametrize("key, value, message", [
    ("deterministic", "stric", "deterministic: 'stric' is not one of strict, warn, off"),
    ("deterministic_foo", "strict", "unknown yolo-det key 'deterministic_foo'; the known keys are deterministic,"),
])
def test_a_bad_hyp_key_names_the_hyp_file(trainer, tmp_path_factory, key, value, message):
    """PyPI 7.0's train() replaces opt.hyp with a dict before start(): the message still names the file (issue 16)."""
    hyp = tmp_path_factory.mktemp("hyp") / f"hyp.{key}.yaml"
    base = yaml.safe_load((trainer.repo / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    hyp.write_text(yaml.safe_dump({**base, key: value}, sort_keys=False))
    proc = trainer(f"bad-{key}", "--hyp", str(hyp))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"yolo-det: error: {hyp}: {message}" in proc.stderr and "Traceback" not in proc.stderr
