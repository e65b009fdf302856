"""Patched fixture scripts of every release shape train end to end (toy model, CPU, a few seconds each)."""

from __future__ import annotations

import pytest

from conftest import PYTHON, run
from support.patch import OLD_LOADERS, fixture_env, make_repo, report, same_tensors, state_dict
from yolo_det.patch import apply_patch

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes

#: the seed each release's own init_seeds(...) uses on a single process (RANK -1)
INIT_SEED = {"yolov5-v5.0": 1, "yolov7": 1, "yolov5-v6.0": 0, "yolov5-v6.1": 0}


def _train(repo, script, project, name, *args, env):
    cmd = [PYTHON, script, "--project", project, "--name", name, "--epochs", "2", "--workers", "2", *args]
    return run(cmd, cwd=repo, env=env)


#: one script per distinct shape (v6.0 = v6.1 less an early return, v6.2 = v7.0 train.py); v5.0 and
#: yolov7's train.py run in the seed and evolve tests below
SHAPES = [("yolov5-v6.1", "train.py"), ("yolov5-v7.0", "train.py"), ("yolov5-v7.0", "classify/train.py"),
          ("yolov5-v7.0", "segment/train.py"), ("yolov5-master", "train.py"), ("ffca-yolo", "train.py"),
          ("yolov7", "train_aux.py")]


@pytest.mark.parametrize("name,script", SHAPES, ids=[f"{n}:{s}" for n, s in SHAPES])
def test_patched_script_trains_in_strict_and_reports(tmp_path, name, script, train_env):
    repo = make_repo(tmp_path, name)
    apply_patch(repo)
    proc = _train(repo, script, tmp_path / "runs", "run", "--deterministic", "strict", env=fixture_env(train_env))
    assert proc.returncode == 0, f"{script}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "yolo-det: determinism strict (from --deterministic)" in proc.stdout

    data = report(tmp_path / "runs" / "run")
    assert (data["mode"], data["mode_source"]) == ("strict", "cli")
    assert data["steps"] == 4  # 16 images, batch 8, 2 epochs: every optimizer step was seen
    assert data["seed"] == INIT_SEED.get(name, 0)
    assert data["yolov5"]["finished"] is True and data["yolov5"]["script"] == str((repo / script).resolve())
    assert data["flags_now"]["deterministic"] is True  # FFCA-YOLO's switch-off line no longer runs
    assert data["flags_now"]["warn_only"] is False
    loader = data["yolov5"]["train_loader"]
    if "classify" in script:  # no train-loader anchor: the release's loader as it is
        assert loader is None
    elif name in OLD_LOADERS:  # seeded by yolo-det: the train loader only, not the val loader
        assert loader["loaders"] == ["InfiniteDataLoader"] and loader["worker_init_fn"] == "yolo_det.seed_worker"
    else:
        assert loader["seeded_by"] == "release"
    if loader is not None:  # per-sample streams (strict)
        assert loader["streams"]["on"] is True and loader["streams"]["samples"] == 16


def test_added_seed_flag_controls_weights_and_loader_order(tmp_path, train_env):
    """v5.0 has no --seed and unseeded workers: the patch adds both, so the seed decides the run."""
    repo = make_repo(tmp_path, "yolov5-v5.0")
    apply_patch(repo)
    env = fixture_env(train_env)
    runs = tmp_path / "runs"
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        proc = _train(repo, "train.py", runs, name, "--deterministic", "warn", "--seed", seed, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b, c = (state_dict(runs / n / "weights" / "last.pt") for n in "abc")
    assert report(runs / "a")["steps"] == 4
    assert same_tensors(a, b)
    assert not same_tensors(a, c)
    assert (runs / "a" / "results.txt").read_text() == (runs / "b" / "results.txt").read_text()
    data = report(runs / "a")
    assert data["seed"] == 3 and data["yolov5"]["seed_from"] == "--seed"
    assert data["yolov5"]["train_loader"]["seed"] == 3


def test_evolve_with_deterministic_key_in_hyp(tmp_path, train_env):
    """yolov7 loads the hyp YAML at module level and again for --evolve; both loads must drop the key."""
    repo = make_repo(tmp_path, "yolov7")
    hyp = repo / "data" / "hyp.det.yaml"
    hyp.write_text((repo / "data" / "hyp.scratch.yaml").read_text() + "deterministic: warn\n")
    env = fixture_env(train_env)
    args = ("--evolve", "--hyp", str(hyp), "--epochs", "1")

    unpatched = _train(repo, "train.py", tmp_path / "runs", "plain", *args, env=env)
    assert unpatched.returncode != 0 and "TypeError" in unpatched.stderr  # '%g' % 'warn' in print_mutation

    apply_patch(repo)
    proc = _train(repo, "train.py", tmp_path / "runs", "evolve", *args, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = report(tmp_path / "runs" / "evolve")
    assert (data["mode"], data["mode_source"]) == ("warn", "hyp")


def test_bad_hyp_value_stops_before_training(tmp_path, train_env):
    repo = make_repo(tmp_path, "yolov5-v5.0")
    apply_patch(repo)
    hyp = repo / "data" / "hyp.bad.yaml"
    hyp.write_text("lr0: 0.05\nmomentum: 0.9\nweight_decay: 0.0005\ndeterministic: sometimes\n")
    proc = _train(repo, "train.py", tmp_path / "runs", "bad", "--hyp", str(hyp), env=fixture_env(train_env))
    assert proc.returncode == 2
    assert "hyp.bad.yaml: deterministic: 'sometimes' is not one of strict, warn, off" in proc.stderr
    assert not (tmp_path / "runs" / "bad" / "weights" / "last.pt").exists()


def test_portable_without_its_pins_stops_before_training(tmp_path, train_env):
    """``deterministic_portable: true`` in the hyp YAML of a plain ``python train.py`` under strict: the CPU
    libraries were not pinned before torch loaded, so the run refuses (exit 2) saying how to pin them."""
    repo = make_repo(tmp_path, "yolov5-v5.0")
    apply_patch(repo)
    hyp = repo / "data" / "hyp.portable.yaml"
    hyp.write_text("lr0: 0.05\nmomentum: 0.9\nweight_decay: 0.0005\ndeterministic_portable: true\n")
    env = {k: v for k, v in fixture_env(train_env).items()
           if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")}
    proc = _train(repo, "train.py", tmp_path / "runs", "portable", "--hyp", str(hyp), "--deterministic", "strict",
                  env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "portable cannot guarantee" in proc.stderr and "yolo-det run --portable 1" in proc.stderr
    assert "Traceback" not in proc.stderr
