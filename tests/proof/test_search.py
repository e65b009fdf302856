"""Hyperparameter searches as a function of their seed: YOLOv5 ``--evolve`` and the Ultralytics tuner.

Fast tests: the seed streams, the evolve patch on every fixture release and the PyPI package, the
YOLOv5 evolve calls and the real Ultralytics ``Tuner`` (its mutation and base model, no training)
under strict and off, and the search comparison. Slow tests (marked): real searches on synthetic
data, one short epoch per trial: same seed identical, another seed differs, interrupted and resumed
equals uninterrupted, for the PyPI yolov5 package and Ultralytics.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import pytest

from yolo_det.record.log import read_log

from conftest import PYTHON, run
from support.patch import FIXTURE_SCRIPTS, make_repo, snapshot
from support.cli import cli
from yolo_det.core import search
from yolo_det.patch import apply_patch, revert_patch
from yolo_det.proof.search import compare_searches, read_rows

#: fixture scripts that have an --evolve loop
EVOLVE_SCRIPTS = [(name, script) for name, scripts in FIXTURE_SCRIPTS.items() for script in scripts
                  if script != "classify/train.py"]
YOLO_DET = [PYTHON, "-m", "yolo_det"]


# -- seed streams ----------------------------------------------------------------------------

def test_generation_streams_are_a_function_of_seed_and_generation():
    draw = lambda s, g: search.generation_rng(s, g).random(4).tolist()  # noqa: E731
    assert draw(0, 3) == draw(0, 3)
    assert len({tuple(draw(s, g)) for s in (0, 1) for g in (0, 1, 2)}) == 6
    legacy = lambda s, g: search.generation_random_state(s, g).randn(4).tolist()  # noqa: E731
    assert legacy(5, 1) == legacy(5, 1) != legacy(5, 2)
    assert search.generation_python_random(0, 1).random() != search.generation_python_random(0, 2).random()
    assert search.trial_seed(7, 4) == 7 and search.TRIAL_POLICY == "run"
    with pytest.raises(ValueError):
        search.generation_sequence(0, -1)


def test_records_replace_their_generation(tmp_path):
    search.append_record(tmp_path, search.generation_record(0, 1, "strict"))
    search.append_record(tmp_path, search.generation_record(0, 0, "off"))
    search.append_record(tmp_path, search.generation_record(3, 1, "warn"))
    records = search.read_records(tmp_path)
    assert [(r["generation"], r["mode"], r["seeded"], r["trial_seed"]) for r in records] == \
        [(0, "off", False, 0), (1, "warn", True, 3)]


# -- the patch ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,script", EVOLVE_SCRIPTS)
def test_patch_reaches_every_evolve_loop(tmp_path, name, script):
    repo = make_repo(tmp_path, name)
    before = snapshot(repo)
    dry = apply_patch(repo, dry_run=True)
    assert snapshot(repo) == before  # --dry-run shows, writes nothing
    change = next(c for c in dry.files if c.relpath == script)
    text = change.after.decode()
    lines = text.splitlines()
    if ".seed(int(time.time()))" in (repo / script).read_text():  # the clock reseed shape
        reseed = next(i for i, line in enumerate(lines) if ".seed(int(time.time()))" in line)
        assert lines[reseed + 1].strip() == "npr = yolo_det_v5.evolve_rng(npr)  # yolo-det"
        generation = next(i for i, line in enumerate(lines) if "yolo_det_v5.evolve_generation(opt, " in line)
        assert ".exists():" in lines[generation - 1] and generation < reseed
    else:  # master's genetic algorithm
        start = next(i for i, line in enumerate(lines) if "yolo_det_v5.evolve_start(opt)" in line)
        assert lines[start - 1].strip() == "else:" and start < text.splitlines().index(
            next(line for line in lines if "for generation in range(opt.evolve)" in line))
    apply_patch(repo)
    assert (repo / script).read_bytes() == change.after
    revert_patch(repo)
    assert snapshot(repo) == before  # byte for byte


@pytest.mark.slow  # copies, patches and reverts the whole package (about 8 s)
def test_patch_reaches_the_pypi_evolve_loop(yolov5_copy):
    original = (yolov5_copy / "train.py").read_bytes()
    apply_patch(yolov5_copy)
    lines = (yolov5_copy / "train.py").read_text().splitlines()
    reseed = next(i for i, line in enumerate(lines) if "npr.seed(int(time.time()))" in line)
    assert lines[reseed + 1].strip() == "npr = yolo_det_v5.evolve_rng(npr)  # yolo-det"
    selection = next(i for i, line in enumerate(lines) if "random.choices(range(n), weights=w)" in line)
    generation = next(i for i, line in enumerate(lines) if "evolve_generation(opt, evolve_csv)" in line)
    assert generation < selection < reseed  # the parent selection's `random` is seeded too
    revert_patch(yolov5_copy)
    assert (yolov5_copy / "train.py").read_bytes() == original


# -- the YOLOv5 evolve calls ----------------------------------------------------------------

def _evolve_csv(folder: Path, rows: int) -> Path:
    path = folder / "evolve.csv"
    path.write_text("  metrics/precision,  lr0\n" + "".join(f"  0.{i}1,  0.01\n" for i in range(rows)))
    return path


@pytest.fixture
def v5(monkeypatch):
    from yolo_det.integrations.yolov5 import script as yolov5

    monkeypatch.setattr(yolov5, "_generation", None)
    monkeypatch.delenv("YOLO_DET_DETERMINISTIC", raising=False)
    monkeypatch.delenv("YOLO_DET_SEED", raising=False)
    return yolov5


def test_evolve_strict_draws_from_seed_and_generation(tmp_path, v5):
    csv = _evolve_csv(tmp_path, 2)
    opt = argparse.Namespace(deterministic="strict", seed=4)
    random.seed(123)  # whatever the release left in the global generators
    np.random.seed(int(np.random.default_rng().integers(2**31)))
    v5.evolve_generation(opt, csv)
    selection = random.random()
    rng = v5.evolve_rng(np.random)
    assert rng is not np.random
    assert rng.randn(5).tolist() == search.generation_random_state(4, 2).randn(5).tolist()  # generation 2 = rows
    assert selection == search.generation_python_random(4, 2).random()


def test_evolve_off_keeps_the_release_generators(tmp_path, v5):
    """Under off the mutation draws from numpy's global generator the release reseeded itself."""
    csv = _evolve_csv(tmp_path, 1)
    opt = argparse.Namespace(deterministic="off", seed=0)
    random.seed(99)
    expected = random.random()
    random.seed(99)
    v5.evolve_generation(opt, csv)
    assert random.random() == expected  # the parent selection's generator was not touched
    np.random.seed(1234)  # stands for the release's npr.seed(int(time.time()))
    assert v5.evolve_rng(np.random) is np.random


def test_evolve_start_seeds_the_initial_population(v5):
    opt = argparse.Namespace(deterministic="warn", seed=2)
    v5.evolve_start(opt)
    first = (random.uniform(0, 1), np.random.random())
    v5.evolve_start(opt)
    assert (random.uniform(0, 1), np.random.random()) == first


# -- the Ultralytics tuner (no training) ----------------------------------------------------

@pytest.fixture
def tuner_factory(tmp_path, monkeypatch, restore_environ):
    pytest.importorskip("ultralytics")
    from ultralytics import YOLO
    from yolo_det.integrations.ultralytics import tune as ultralytics_tune

    assert ultralytics_tune.enable()
    monkeypatch.delenv("YOLO_DET_DETERMINISTIC", raising=False)

    def make(name: str, seed: int = 0, mode: str = "strict", history: int = 2):
        import torch
        from ultralytics.engine.tuner import Tuner

        monkeypatch.setenv("YOLO_DET_DETERMINISTIC", mode)
        torch.seed()  # the caller's generator as torch leaves it: seeded from the operating system
        model = YOLO("yolov8n.yaml")
        tuner = Tuner(args={"model": "yolov8n.yaml", "data": "coco8.yaml", "seed": seed, "project": str(tmp_path),
                            "name": name, "mode": "train", "device": "cpu"}, model=model.model)
        base = {k: v.detach().clone() for k, v in tuner.model.state_dict().items()}
        tuner.tune_dir.mkdir(parents=True, exist_ok=True)
        with open(tuner.tune_file, "w", encoding="utf-8") as f:
            for i in range(history):
                hyp = {k: getattr(tuner.args, k) for k in tuner.space}
                hyp["lr0"] = 0.001 * (i + 1)
                f.write(json.dumps({"iteration": i + 1, "fitness": 0.1 * (i + 1), "hyperparameters": hyp}) + "\n")
        return tuner, base

    yield make
    ultralytics_tune.disable()


def _same_weights(a, b) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # builds three Ultralytics tuners and their base models (about 10 s)
def test_tuner_is_a_function_of_its_seed(tuner_factory):
    a, base_a = tuner_factory("a")
    b, base_b = tuner_factory("b")
    c, base_c = tuner_factory("c", seed=1)
    assert a._mutate() == b._mutate() != c._mutate()
    # issue item 4: the base model every trial fine-tunes from no longer follows torch's start-up seed
    assert _same_weights(base_a, base_b) and not _same_weights(base_a, base_c)
    assert a.yolo_det_search["base_weights"].startswith("drawn from seed 0")
    records = search.read_records(a.tune_dir)
    assert [(r["generation"], r["mode"], r["seeded"]) for r in records] == [(2, "strict", True)]


def test_tuner_off_keeps_the_release_generator(tuner_factory, monkeypatch):
    a, base_a = tuner_factory("a", mode="off")
    b, base_b = tuner_factory("b", mode="off")
    assert not _same_weights(base_a, base_b)  # the release's: whatever torch's generator held
    calls = []
    original = np.random.default_rng

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(np.random, "default_rng", spy)
    a._mutate()
    assert calls == [()]  # the release's own OS-entropy generator
    assert search.read_records(a.tune_dir)[-1]["seeded"] is False


# -- comparing searches ---------------------------------------------------------------------

def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


def test_compare_evolve_csv(tmp_path):
    head = "metrics/precision,val/box_loss,lr0,momentum\n"
    a = _write(tmp_path / "a", "evolve.csv", head + "0.1,0.5,0.01,0.9\n0.2,0.4,0.011,0.9\n")
    b = _write(tmp_path / "b", "evolve.csv", head + "0.1,0.5,0.01,0.9\n0.2,0.4,0.012,0.9\n")
    c = _write(tmp_path / "c", "evolve.csv", head + "0.1,0.6,0.01,0.9\n")
    assert compare_searches(a, a).identical
    diff = compare_searches(a, b)
    assert (diff.generation, diff.identical) == (1, False) and "hyperparameters differ" in diff.reason
    assert "lr0: 0.011 vs 0.012" in diff.details
    assert "no seeding record" in diff.reason  # not run under yolo-det
    search.append_record(a, search.generation_record(0, 1, "strict"))
    search.append_record(b, search.generation_record(1, 1, "strict"))
    assert "different seeds (0 vs 1)" in compare_searches(a, b).reason
    metrics = compare_searches(a, c)
    assert metrics.generation == 0 and "same hyperparameters, different metrics" in metrics.reason
    assert compare_searches(c, _write(tmp_path / "d", "evolve.csv", head + "0.1,0.6,0.01,0.9\n0.3,0.4,0.01,0.9\n")) \
        .reason.startswith("1 vs 2 generations")


def test_compare_tune_results_ignores_paths_and_times(tmp_path):
    row = {"iteration": 1, "fitness": 0.3, "hyperparameters": {"lr0": 0.01}, "datasets": {"d": {"val/box_loss": 1.0}}}
    a = _write(tmp_path / "a", "tune_results.ndjson", json.dumps({**row, "save_dirs": {"d": "/x/multitrain"}}) + "\n")
    b = _write(tmp_path / "b", "tune_results.ndjson", json.dumps({**row, "save_dirs": {"d": "/x/multitrain-2"}}) + "\n")
    assert compare_searches(a, b).identical
    old = "fitness,lr0,time\n0.3,0.01,12.5\n"
    assert compare_searches(_write(tmp_path / "c", "tune_results.csv", old),
                            _write(tmp_path / "d", "tune_results.csv", old.replace("12.5", "99"))).identical
    txt = read_rows(_write(tmp_path / "e", "evolve.txt", "0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.01 0.9\n"))
    assert len(txt) == 1 and len(txt[0].metrics) == 7 and len(txt[0].hyperparameters) == 2


# -- real searches (slow) -------------------------------------------------------------------

def _diff(a: Path, b: Path) -> int:
    return cli("diff", a, b).returncode


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    from yolo_det.synthetic import make_dataset

    return make_dataset(tmp_path_factory.mktemp("search-data"), n_train=8, n_val=8, imgsz=64)


@pytest.mark.slow
def test_yolov5_evolve_is_a_function_of_its_seed(tmp_path, patched_yolov5, small_data, train_env):
    repo = patched_yolov5  # the session's patched copy: the searches write under tmp_path only
    project = tmp_path / "runs"

    def evolve(name: str, generations: int, *extra: str) -> Path:
        cmd = [PYTHON, "train.py", "--data", small_data, "--epochs", "1", "--cfg", "yolov5n.yaml", "--weights", "",
               "--img", "64", "--workers", "0", "--batch-size", "8", "--noplots", "--device", "cpu",
               "--project", project, "--name", name, "--evolve", str(generations), "--deterministic", "strict",
               *extra]
        proc = run(cmd, cwd=repo, env=train_env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return project / name

    # two generations: the base hyperparameters, then one mutation of them (the release mutates until a value
    # changes); the parent selection among several rows: test_evolve_strict_draws_from_seed_and_generation
    a = evolve("a", 2)
    assert len(read_rows(a)) == 2
    assert [(r["generation"], r["trial_seed"], r["mode"], r["seeded"]) for r in search.read_records(a)] == \
        [(g, 0, "strict", True) for g in range(2)]
    assert len({tuple(r.hyperparameters.values()) for r in read_rows(a)}) == 2  # it did mutate
    # with no fingerprint option each generation's trial keeps its own compact log in the search's folder
    logs = [read_log(a / f"fingerprint.gen{g}.jsonl") for g in range(2)]
    assert all(log.header["record"] == "compact" and log.steps for log in logs)
    assert not (a / "fingerprint.jsonl").exists()
    # a second search with the same seed, interrupted after 1 generation and continued in its folder
    # (the release's way: --evolve N --resume), the mutated generation in the new process: identical to the
    # first, generation by generation
    evolve("r", 1)
    r = evolve("r", 1, "--resume")
    assert len(read_rows(r)) == 2 and _diff(a, r) == 0
    c = evolve("c", 1, "--seed", "1")
    result = compare_searches(a, c)
    assert result.generation == 0 and "different seeds (0 vs 1)" in result.reason


TUNE = """
import sys
from ultralytics import YOLO
data, project = sys.argv[1:3]
for search in sys.argv[3:]:  # name:iterations:seed[:resume], the searches one after the other in this process
    name, iterations, seed, *resume = search.split(":")
    YOLO("yolov8n.yaml").tune(data=data, epochs=1, iterations=int(iterations), imgsz=64, batch=8, workers=0,
                              device="cpu", seed=int(seed), plots=False, project=project, name=name,
                              optimizer="SGD", resume=bool(resume))
"""


@pytest.mark.slow
def test_ultralytics_tune_is_a_function_of_its_seed(tmp_path, small_data, train_env):
    pytest.importorskip("ultralytics")
    script = tmp_path / "tune.py"
    script.write_text(TUNE)
    project = tmp_path / "runs"

    def tune(*searches: str) -> list:
        cmd = YOLO_DET + ["run", "--deterministic", "strict", "--seed", "0", "--", PYTHON, script, small_data, project,
                          *searches]
        proc = run(cmd, cwd=tmp_path, env=train_env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return [project / search.split(":")[0] for search in searches]

    # two iterations: the base hyperparameters, then one mutation of them; then, in the same process, a search
    # with another seed
    a, c = tune("a:2:0", "c:1:1")
    assert len({tuple(r.hyperparameters.values()) for r in read_rows(a)}) == 2  # it did mutate
    # a second search with the same seed (a process of its own: torch's start-up seed differs), interrupted
    # after 1 iteration and resumed in another process: identical to the first, iteration 1 included (issue item 4)
    tune("r:1:0")
    (r,) = tune("r:2:0:resume")
    assert len(read_rows(r)) == 2 and _diff(a, r) == 0
    assert compare_searches(a, c).generation == 0
    assert json.loads((a / search.RECORDS).read_text().splitlines()[-1])["generation"] == 1


SEARCH = """
import os, sys
from pathlib import Path
from yolo_det.core.search import append_record, generation_record
from yolo_det.proof.search import announce
run, folder = sys.argv[1], Path(sys.argv[2]) / ("s" + sys.argv[1])
folder.mkdir(parents=True, exist_ok=True)
lr = "0.02" if run == "2" and len(sys.argv) > 3 else "0.01"
(folder / "evolve.csv").write_text("metrics/mAP_0.5,lr0\\n0.1,0.01\\n0.2," + lr + "\\n")
for g in (0, 1):
    append_record(folder, generation_record(0, g, "strict"))
announce(folder, os.environ["YOLO_DET_FINGERPRINT"])
"""


@pytest.mark.parametrize("differ", [False, True])
def test_verify_compares_the_searches_its_runs_announce(tmp_path, differ):
    """verify's plumbing: a command whose runs write search folders (and no fingerprint log of their own)."""
    script = tmp_path / "search.py"
    script.write_text(SEARCH)
    cmd = YOLO_DET + ["verify", "--workdir", tmp_path / "w", "--", PYTHON, script, "{run}", tmp_path / "out"]
    proc = run(cmd + (["differ"] if differ else []), cwd=tmp_path)
    if differ:
        assert proc.returncode == 1, proc.stderr
        assert "diverged at generation 1: hyperparameters differ (1)" in proc.stdout
        assert "the same seed and generation gave other parents" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("identical: 2 generations")


# -- the earlier tuner shape (read in ultralytics 8.2.103, checked by hand there too) -----------

OLD_SHAPE = '''
import random
import time

import numpy as np


def mutate(self):
    """The shape of an earlier Ultralytics Tuner._mutate (8.2.103): CSV history, random.choices parent, clock-reseeded np.random."""
    x = np.loadtxt(self.tune_csv, ndmin=2, delimiter=",", skiprows=1)
    w = x[:, 0] - x[:, 0].min() + 1e-6
    parent = x[random.choices(range(len(x)), weights=w)[0]]
    r = np.random
    r.seed(int(time.time()))
    v = (r.random(3) < 0.8) * r.randn(3) * r.random() * 0.2 + 1
    return (parent[1:] * v).round(6).tolist()
'''


def test_old_tuner_shape_is_seeded_through_its_module_globals(tmp_path, monkeypatch):
    from yolo_det.integrations.ultralytics import tune as ultralytics_tune

    (tmp_path / "old_tuner_shape.py").write_text(OLD_SHAPE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import old_tuner_shape

    csv = tmp_path / "tune_results.csv"
    csv.write_text("fitness,lr0,momentum,box\n0.1,0.01,0.9,7.5\n0.2,0.02,0.8,5.0\n")
    mutate = ultralytics_tune._wrap_mutate(old_tuner_shape.mutate)

    def tuner(seed: int, mode: str) -> argparse.Namespace:
        return argparse.Namespace(tune_csv=csv, tune_dir=tmp_path / f"t{seed}{mode}",
                                  yolo_det_search={"mode": mode, "seed": seed})

    assert mutate(tuner(0, "strict")) == mutate(tuner(0, "strict")) != mutate(tuner(1, "strict"))
    assert old_tuner_shape.np is np and old_tuner_shape.random is random  # put back after each call
    monkeypatch.setattr(old_tuner_shape.time, "time", lambda: 1234.0)  # under off: the release's clock seed
    random.seed(5)
    off = mutate(tuner(0, "off"))
    random.seed(5)
    assert off == old_tuner_shape.mutate(tuner(0, "off"))
    assert search.read_records(tmp_path / "t0strict")[0]["generation"] == 2
