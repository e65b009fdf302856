"""Seeds by role and the hand-off of a training seed to a command that gives none (no training here)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from yolo_det.core import roles
from yolo_det.core.mode import ConfigError
from yolo_det.core.seeding import trial_seeds


def test_role_seeds_come_from_the_run_seed_unless_overridden():
    assert roles.role_seeds(5, {}) == {"init": 5, "order": 5, "augment": 5}
    env = {"YOLO_DET_SEED_ORDER": "9"}
    assert roles.role_seeds(5, env) == {"init": 5, "order": 9, "augment": 5}
    assert roles.record(5, env)["overridden"] == ["order"]
    with pytest.raises(ConfigError, match="YOLO_DET_SEED_ORDER"):
        roles.check_mode("off", env)
    roles.check_mode("strict", env)
    roles.check_mode("off", {"YOLO_DET_SEED_INIT": "3"})  # the main process is seeded under off too
    with pytest.raises(ValueError, match="not a whole number"):
        roles.train_seed({roles.TRAIN_SEED_ENV: "abc"})
    with pytest.raises(ValueError, match="outside"):
        roles.overrides({"YOLO_DET_SEED_INIT": str(2**32)})


def test_each_vary_changes_one_role_and_run_one_is_the_plain_run():
    s = trial_seeds(0, 3)
    assert roles.study_env("all", s[1], s[0]) == {roles.TRAIN_SEED_ENV: str(s[1])}
    for role in roles.ROLES:
        env = roles.study_env(role, s[1], s[0])
        assert env == {roles.TRAIN_SEED_ENV: str(s[0]), roles.ROLE_ENV[role]: str(s[1])}
        assert roles.study_env(role, s[0], s[0]) == roles.study_env("all", s[0], s[0])
        seeds = roles.role_seeds(int(env[roles.TRAIN_SEED_ENV]), env)
        assert [r for r in roles.ROLES if seeds[r] != s[0]] == [role]


def test_the_init_reseed_keeps_the_release_offset():
    import torch

    applied = roles.reseed_init(init_seed=7, applied=5 + 1 - 1, run_seed=5)  # RANK -1: seed + 1 + RANK = seed
    assert applied == 7
    first = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(first, torch.rand(3))  # what init_seeds(7 + 1 + RANK) would have given


def test_a_patched_script_takes_the_handed_seed_as_its_default(monkeypatch):
    from yolo_det.integrations.yolov5 import script as yolov5

    monkeypatch.setenv(roles.TRAIN_SEED_ENV, "9")
    own = argparse.ArgumentParser()
    own.add_argument("--seed", type=int, default=0)  # v6.2+: the release's own --seed
    yolov5.add_arguments(own)
    assert own.parse_args([]).seed == 9 and own.parse_args(["--seed", "3"]).seed == 3
    bare = yolov5.add_arguments(argparse.ArgumentParser())  # v5.0-style: yolo-det adds --seed
    assert bare.parse_args([]).seed == 9
    monkeypatch.delenv(roles.TRAIN_SEED_ENV)
    assert yolov5.add_arguments(argparse.ArgumentParser()).parse_args([]).seed is None


def test_yolo_det_run_seed_hands_the_training_seed_on():
    proc = subprocess.run([sys.executable, "-m", "yolo_det", "run", "--seed", "7", "--", sys.executable, "-c",
                           f"import os; print(os.environ['{roles.TRAIN_SEED_ENV}'])"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "7", proc.stderr


def test_diff_names_a_role_seed_difference_as_a_config_cause():
    from yolo_det.proof.causes import header_causes

    a = {"seed": 5, "seeds": roles.record(5, {})}
    b = {"seed": 5, "seeds": roles.record(5, {"YOLO_DET_SEED_AUGMENT": "8"})}
    causes = [c for c in header_causes(a, b) if c.what == "seeds"]
    assert len(causes) == 1 and causes[0].cls == "config" and "augment 5 vs 8" in causes[0].message
    assert not [c for c in header_causes(a, dict(a)) if c.what == "seeds"]


class _Items(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        return torch.tensor(float(index))


def test_both_integrations_give_the_order_seed_to_the_sampler_and_the_augment_seed_to_the_samples():
    from yolo_det.integrations.ultralytics import streams as ultralytics_streams
    from yolo_det.integrations.yolov5 import script as yolov5

    arguments = {"dataset": _Items(), "shuffle": True}
    info = yolov5._with_streams(arguments, 3, 0, 9)
    assert info["sampler"].seed == 3 and arguments["dataset"].seed == 9
    loader = ultralytics_streams.stream_loader(torch.utils.data.DataLoader(_Items(), batch_size=2, shuffle=True), 3, 9)
    assert loader.yolo_det_sampler.seed == 3 and loader.dataset.seed == 9
    assert ultralytics_streams.stream_loader(torch.utils.data.DataLoader(_Items(), batch_size=2), 4).dataset.seed == 4


def test_a_finished_log_counts_only_for_the_command_that_wrote_it():
    from yolo_det.record.log import Log
    from yolo_det.studies.study import _same_command

    def log(argv):
        return Log(path=None, header={"command": argv}, steps=[], final=None)

    cmd = ["/venv/bin/python", "train.py", "--data", "d.yaml", "--name", "a1"]
    assert _same_command(log(["train.py", "--data", "d.yaml", "--name", "a1"]), cmd)
    assert not _same_command(log(["train.py", "--data", "other.yaml", "--name", "a1"]), cmd)
    assert not _same_command(log(["train.py", "--data", "d.yaml"]), cmd)
    assert _same_command(log(["/venv/bin/yolo", "train", "model=m.yaml"]), ["yolo", "train", "model=m.yaml"])
    assert not _same_command(log([]), cmd)
