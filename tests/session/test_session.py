"""configure(): sources, seeding, determinism.json, CUBLAS_WORKSPACE_CONFIG; launcher and env commands."""

import json
import os
import subprocess
import sys

import pytest
import torch

import yolo_det
from yolo_det.core import determinism, environment
from yolo_det import session as runtime
from yolo_det.cli import main as cli_main

from support.alerts import backward_once


def test_configure_applies_mode_and_records_source(monkeypatch):
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "strict")
    session = yolo_det.configure()
    assert (session.settings.mode, session.settings.source) == ("strict", "env")
    assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    session = yolo_det.configure(hyp={"deterministic": "off"})
    assert (session.settings.mode, session.settings.source) == ("off", "hyp")
    assert not torch.are_deterministic_algorithms_enabled()
    session = yolo_det.configure("warn", hyp={"deterministic": "off"})
    assert (session.settings.mode, session.settings.source) == ("warn", "cli")


def test_configure_bad_value_fails_before_touching_flags():
    before = determinism.snapshot()
    with pytest.raises(yolo_det.ConfigError, match="hyp.yaml: deterministic: 'stric' is not one of"):
        yolo_det.configure(hyp={"deterministic": "stric"})
    assert determinism.snapshot() == before and yolo_det.current() is None


def test_configure_seeds_when_given():
    yolo_det.configure("off", seed=11)
    a = torch.rand(3)
    yolo_det.configure("off", seed=11)
    assert torch.equal(a, torch.rand(3))


def test_determinism_json_has_mode_source_seed_flags_manifest_and_violations(tmp_path):
    session = yolo_det.configure("warn", seed=3, hyp={"deterministic_fill_memory": False})
    with session.backward():
        backward_once()
    lines = []
    path = session.finish(tmp_path / "run", echo=lines.append)
    data = json.loads(path.read_text())
    assert path.name == "determinism.json"
    assert data["mode"] == "warn" and data["mode_source"] == "cli" and data["seed"] == 3
    assert data["flags_applied"]["warn_only"] is True
    assert data["flags_applied"]["fill_uninitialized_memory"] is False
    assert data["settings"]["sources"]["deterministic_fill_memory"] == "hyp"
    assert data["violations"]["ops"][0]["op"] == "fake_op_backward_cuda"
    env = data["environment"]
    assert env["torch"] == torch.__version__ and "packages" in env and "hash_seed" in env
    assert "world_size" in env and "gpus" in env and "driver" in env
    assert "fake_op_backward_cuda" in lines[0]
    assert not list(tmp_path.rglob("*.tmp"))


def test_finish_on_other_ranks_prints_and_writes_nothing(tmp_path):
    session = yolo_det.configure("warn", rank=1)
    lines = []
    assert session.finish(tmp_path, echo=lines.append) is None
    assert lines == [] and not (tmp_path / "determinism.json").exists()


def test_finish_can_restore_the_callers_flags():
    yolo_det.set_determinism("off")
    before = determinism.snapshot()
    session = yolo_det.configure("strict")
    session.finish(restore_flags=True, echo=lambda _: None)
    assert determinism.snapshot() == before


@pytest.fixture
def fake_cuda(monkeypatch):
    """A process on an old torch with CUDA, launched without CUBLAS_WORKSPACE_CONFIG."""
    monkeypatch.setattr(environment, "cublas_config_required", lambda version=None: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(environment, "launch_environment", lambda: {})
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    return monkeypatch


def test_cublas_set_in_time_before_cuda_initialises(fake_cuda):
    fake_cuda.setattr(torch.cuda, "is_initialized", lambda: False)
    session = yolo_det.configure("strict")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert session.cublas["state"] == "set"


def test_cublas_set_in_time_when_cuda_is_initialised_but_unused(fake_cuda):
    fake_cuda.setattr(torch.cuda, "is_initialized", lambda: True)
    fake_cuda.setattr(torch.cuda, "device_count", lambda: 1)
    fake_cuda.setattr(torch.cuda, "memory_stats", lambda i: {"allocation.all.allocated": 0})
    assert yolo_det.configure("strict").cublas["state"] == "set"


@pytest.fixture
def gpu_in_use(fake_cuda):
    fake_cuda.setattr(torch.cuda, "is_initialized", lambda: True)
    fake_cuda.setattr(torch.cuda, "device_count", lambda: 1)
    fake_cuda.setattr(torch.cuda, "memory_stats", lambda i: {"allocation.all.allocated": 3})
    return fake_cuda


def test_cublas_too_late_fails_strict_with_instructions(gpu_in_use):
    with pytest.raises(runtime.DeterminismSetupError, match="export CUBLAS_WORKSPACE_CONFIG=:4096:8"):
        yolo_det.configure("strict")


def test_cublas_too_late_is_reported_in_warn(gpu_in_use):
    session = yolo_det.configure("warn")
    assert session.cublas["state"] == "late"
    assert any("CUBLAS_WORKSPACE_CONFIG" in note for note in session.report.notes)


def test_cublas_from_launch_environment_is_trusted(fake_cuda):
    fake_cuda.setattr(torch.cuda, "is_initialized", lambda: True)
    fake_cuda.setattr(environment, "launch_environment", lambda: {"CUBLAS_WORKSPACE_CONFIG": ":16:8"})
    fake_cuda.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert yolo_det.configure("strict").cublas["state"] == "launch"


def test_cublas_not_required_on_new_torch():
    assert not environment.cublas_config_required("2.10.0")
    assert environment.cublas_config_required("2.9.1") and environment.cublas_config_required("1.7.0")
    assert not environment.cublas_config_required("1.6.0")


CHILD = (
    "import json, os, sys, yolo_det; from yolo_det.core import environment; s = yolo_det.configure(); "
    "print(json.dumps({'mode': s.settings.mode, 'source': s.settings.source, "
    "'hash': environment.hash_seed_status(), "
    "'env': {k: os.environ.get(k) for k in ('CUBLAS_WORKSPACE_CONFIG', 'PYTHONHASHSEED', 'YOLO_DET_SEED')}}))"
)


@pytest.mark.slow  # starts several interpreters that import torch (10 s or more)
def test_run_launcher_sets_environment_before_the_interpreter_starts():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YOLO_DET_", "PYTHONHASHSEED", "CUBLAS"))}
    out = subprocess.run(
        [sys.executable, "-m", "yolo_det", "run", "--deterministic", "strict", "--seed", "5", "--",
         sys.executable, "-c", CHILD],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert (data["mode"], data["source"]) == ("strict", "run")  # from yolo-det run --deterministic, not "env"
    assert data["env"] == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONHASHSEED": "5", "YOLO_DET_SEED": "5"}
    assert data["hash"] == {"randomized": False, "PYTHONHASHSEED_at_launch": "5"}


def test_run_without_command_is_a_usage_error(capsys):
    assert cli_main(["run", "--deterministic", "warn"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_run_unknown_program_is_a_clear_error(capsys):
    assert cli_main(["run", "--", "no-such-program-xyz"]) == 2
    assert "cannot run 'no-such-program-xyz'" in capsys.readouterr().err


def test_env_exports_and_json(capsys):
    assert cli_main(["env", "--exports", "--deterministic", "strict", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in lines and "export PYTHONHASHSEED=1" in lines
    assert "export YOLO_DET_DETERMINISTIC=strict" in lines
    assert cli_main(["env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == torch.__version__ and "hash_seed" in data


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["--version"])
    assert exit_.value.code == 0 and yolo_det.__version__ in capsys.readouterr().out
