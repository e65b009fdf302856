"""Seed studies end to end: real PyPI YOLOv5 (patched) and real Ultralytics, 1 epoch at 64 px on 8 images.

Runs are shared: one YOLOv5 study of 3 seeds serves the summary, the resume, the SLURM, the role-split,
the decompose and the compare tests; a study with the obj loss gain x10 is the large effect; three Ultralytics
runs show the role split there. A study's run 1 (seed s0) is the plain run of s0 under every ``--vary``, so a
role study starts from a copy of another study's run 1 and trains only its second seed, and the decompose
test's studies are copies of study A's and the role studies' runs but for ``augment``'s run 2. The YOLOv5 is
the session's ``patched_yolov5`` (only read: the runs write under this module's folder). ``yolo-det seeds``
and ``compare`` run in this process (``support.cli.cli``): the trainings they start are child processes as ever.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from support.cli import cli
from conftest import PYTHON
from support.cluster import CLUSTER, needs_slurm
from yolo_det.core.seeding import trial_seeds
from yolo_det.proof.compare import compare_logs
from yolo_det.record.log import read_log
from yolo_det.synthetic import make_dataset

pytestmark = [pytest.mark.slow, CLUSTER]  # trains real models; drives SLURM and Ray

SEEDS = trial_seeds(0, 3)
V5_ARGS = ["--epochs", "1", "--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0",
           "--batch-size", "4", "--noplots", "--device", "cpu"]


def seeds_cli(*args, cwd, env):
    """``yolo-det ARGS`` in this process, with ``env`` as its environment (the runs' environment too)."""
    return cli(*args, cwd=cwd, env=env)


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def v5(tmp_path_factory, patched_yolov5, train_env):
    root = tmp_path_factory.mktemp("seeds-v5")
    data = make_dataset(root / "data", n_train=8, n_val=4, imgsz=64)
    repo = patched_yolov5  # read only: every run writes under --project root/runs
    cmd = [PYTHON, "train.py", "--data", str(data), *V5_ARGS, "--project", str(root / "runs")]
    return SimpleNamespace(root=root, repo=repo, cmd=cmd, env=train_env)


def _study(v5, name, *options, extra=(), run_name=None):
    workdir = v5.root / name
    proc = seeds_cli("seeds", "--json", "--workdir", str(workdir), *options, "--", *v5.cmd, "--name",
                     f"{run_name or name}{{run}}", *extra, cwd=v5.repo, env=v5.env)
    return workdir, proc


@pytest.fixture(scope="module")
def study_a(v5):
    workdir, proc = _study(v5, "a", "--n", "3")
    _ok(proc)
    return workdir, json.loads(proc.stdout), proc


def _first_batch(log_path):
    return read_log(log_path).steps[0].entries("data")


def _header(log_path):
    return read_log(log_path).header


def test_three_seeds_give_three_runs_and_a_summary(study_a):
    workdir, data, proc = study_a
    runs = data["runs"]
    assert [r["seed"] for r in runs] == SEEDS
    for r in runs:
        report = json.loads((Path(r["run_dir"]) / "determinism.json").read_text())
        assert report["mode"] == "strict"
        assert {k: report["seeds"][k] for k in ("run", "init", "order", "augment")} == dict.fromkeys(
            ("run", "init", "order", "augment"), r["seed"])
        assert _header(r["log"])["seeds"]["run"] == r["seed"]
        assert r["placement"]["hardware"] == "CPU" and r["placement"]["executor"] == "local"  # where it trained
    assert len({_header(r["log"])["initial_weights"] for r in runs}) == 3
    assert len({json.dumps(_first_batch(r["log"]), sort_keys=True) for r in runs}) == 3
    losses = [r["metrics"]["train/box_loss"] for r in runs]
    assert len(set(losses)) == 3
    assert {"metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/obj_loss", "fitness"} <= set(runs[0]["metrics"])
    box = data["summary"]["train/box_loss"]
    assert box["mean"] == pytest.approx(np.mean(losses)) and box["std"] == pytest.approx(np.std(losses, ddof=1))
    assert box["ci"][0] < box["mean"] < box["ci"][1] and box["min"] == min(losses)
    with open(workdir / "study.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["seed"]) for r in rows] == SEEDS and float(rows[1]["train/box_loss"]) == losses[1]
    assert "seed " + str(SEEDS[1]) in proc.stderr and "step" in proc.stderr  # progress names the seed


@needs_slurm
def test_yolov5n_study_on_slurm_gives_the_local_studys_runs_bit_for_bit(v5, study_a):
    """Issue 40: the same 3-seed yolov5n study as one SLURM job array (scripts/slurm_local.sh's one-node cluster)
    gives the sequential local study's per-run metrics and fingerprints."""
    workdir, local, _ = study_a
    cluster_dir, proc = _study(v5, "slurm", "--n", "3", "--executor", "slurm", "--parallel", "2", run_name="s")
    _ok(proc)
    cluster = json.loads(proc.stdout)
    assert "SLURM jobs" in proc.stderr
    assert [r["seed"] for r in cluster["runs"]] == [r["seed"] for r in local["runs"]] == SEEDS
    assert [r["metrics"] for r in cluster["runs"]] == [r["metrics"] for r in local["runs"]]
    for ours, theirs in zip(cluster["runs"], local["runs"]):
        assert ours["placement"]["executor"] == "slurm" and ours["placement"]["job"]
        assert ours["log"] != theirs["log"]
        same = compare_logs(cluster_dir / ours["log"], workdir / theirs["log"])
        assert same.identical, same.problem or same.first_divergence
    assert cluster["summary"] == local["summary"]


def test_a_stopped_study_continues_with_the_missing_seed_and_gives_the_same_table(v5, study_a):
    workdir, data, _ = study_a
    copy = v5.root / "a-stopped"
    shutil.copytree(workdir, copy)
    saved = json.loads((copy / "study.json").read_text())
    saved["runs"] = saved["runs"][:2]  # stopped while seed 3 trained: its log has no final line
    (copy / "study.json").write_text(json.dumps(saved))
    log = copy / "run3" / "fingerprint.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))
    proc = _ok(seeds_cli("seeds", "--json", "--n", "3", "--workdir", str(copy), "--", *v5.cmd, "--name", "a{run}",
                         cwd=v5.repo, env=v5.env))
    assert "run 1/3): finished earlier, kept" in proc.stderr and "run 3/3: done" in proc.stderr
    assert "run 1/3: step" not in proc.stderr
    again = json.loads(proc.stdout)
    assert again["summary"] == data["summary"]  # strict: the same seeds give the same table
    assert [r["metrics"] for r in again["runs"]] == [r["metrics"] for r in data["runs"]]

    same = seeds_cli("compare", str(workdir), str(copy), "--metric", "train/box_loss", "--json", cwd=v5.root, env=v5.env)
    assert same.returncode == 0, same.stdout + same.stderr
    result = json.loads(same.stdout)
    # the same seeds, bit for bit: no effect, not "within seed noise" (issue 59)
    assert result["verdict"] == "identical" and result["paired"] and result["difference"] == 0.0
    assert "bit-identical seed by seed" in result["statement"]

    other = seeds_cli("seeds", "--n", "3", "--vary", "init", "--workdir", str(copy), "--", *v5.cmd, "--name", "a{run}",
                      cwd=v5.repo, env=v5.env)
    assert other.returncode == 2 and "holds another study" in other.stderr


def _role_study(v5, study_a, vary):
    """A --vary study of 2 seeds whose run 1 (the plain run of seed s0) is study A's: (its folder, its runs,
    the CompletedProcess)."""
    workdir = v5.root / vary
    (workdir / "run1").mkdir(parents=True)
    shutil.copy(study_a[0] / "run1" / "fingerprint.jsonl", workdir / "run1" / "fingerprint.jsonl")
    _, proc = _study(v5, vary, "--n", "2", "--vary", vary, run_name="a")  # A's command: its run 1 is kept
    _ok(proc)
    return workdir, json.loads(proc.stdout)["runs"], proc


@pytest.fixture(scope="module")
def role_studies(v5, study_a):
    """``--vary init`` and ``--vary order`` studies of 2 seeds (run 1 study A's): {vary: (folder, runs, proc)}.
    The role test reads them; the decompose test copies their runs 2."""
    return {vary: _role_study(v5, study_a, vary) for vary in ("init", "order")}


def test_vary_init_keeps_the_batches_and_changes_the_weights_vary_order_the_reverse(role_studies):
    for _, _, proc in role_studies.values():
        assert "run 1/2): its log was complete, kept" in proc.stderr
    init, order = role_studies["init"][1], role_studies["order"][1]
    for runs, role in ((init, "init"), (order, "order")):
        report = json.loads((Path(runs[1]["run_dir"]) / "determinism.json").read_text())["seeds"]
        assert report["overridden"] == [role] and report[role] == SEEDS[1]
        assert {r: report[r] for r in ("init", "order", "augment") if r != role} == \
            dict.fromkeys([r for r in ("init", "order", "augment") if r != role], SEEDS[0])
    weights = [[_header(r["log"])["initial_weights"] for r in runs] for runs in (init, order)]
    batches = [[_first_batch(r["log"]) for r in runs] for runs in (init, order)]
    assert weights[0][0] != weights[0][1] and batches[0][0] == batches[0][1]  # --vary init
    assert weights[1][0] == weights[1][1] and batches[1][0] != batches[1][1]  # --vary order
    assert batches[1][0]["batch0[2]"] != batches[1][1]["batch0[2]"]  # other images (their paths) in the batch


def test_compare_of_a_tenfold_loss_gain_on_3_seeds_is_too_few_seeds_and_names_the_change(v5, study_a):
    """3 pairs: the t-test sees the tenfold loss gain (information), but the exact sign-flip test that decides
    at this size cannot go below p = 0.25, so the verdict is "too few seeds" (exit 3), not a difference."""
    hyp = yaml.safe_load((v5.repo / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    hyp["obj"] = hyp["obj"] * 10
    hyp_file = v5.root / "hyp.obj10.yaml"
    hyp_file.write_text(yaml.safe_dump(hyp))
    workdir, proc = _study(v5, "b", "--n", "3", extra=("--hyp", str(hyp_file)))
    _ok(proc)
    result = seeds_cli("compare", str(study_a[0]), str(workdir), "--metric", "train/obj_loss", "--json",
                       cwd=v5.root, env=v5.env)
    assert result.returncode == 3, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "too few seeds" and data["statement"] == "too few seeds for a verdict"
    assert data["test"] == "exact sign-flip test" and data["paired"] and data["p_value"] == pytest.approx(0.25)
    assert data["result"]["t_test"]["p_value"] < 0.05 and "smallest attainable p is 0.25" in data["why"]
    assert data["ci"][1] < 0  # the t interval: A's loss is lower, A - B negative, the whole interval too
    assert any(c["what"] == "hyp" and "obj" in c["message"] for c in data["setup_differences"])
    text = seeds_cli("compare", str(study_a[0]), str(workdir), "--metric", "train/obj_loss", cwd=v5.root, env=v5.env)
    assert text.returncode == 3 and "train/obj_loss: too few seeds for a verdict" in text.stdout
    assert "set-ups also differ" in text.stdout


def test_decompose_end_to_end_reports_each_source_with_intervals_and_refuses_an_unknown_metric(v5, study_a,
                                                                                              role_studies):
    """``--decompose --n 2``: the ``all`` study's runs are study A's first two and the ``init`` and ``order``
    studies' runs 2 the role studies' (the same command and seeds, copied); run 1 is shared, so only run 2 of
    augment trains (1 run)."""
    workdir = v5.root / "decompose"
    copies = [(study_a[0] / f"run{i}", workdir / "all" / f"run{i}") for i in (1, 2)]
    copies += [(role_studies[vary][0] / "run2", workdir / vary / "run2") for vary in ("init", "order")]
    for source, target in copies:
        target.mkdir(parents=True)
        shutil.copy(source / "fingerprint.jsonl", target / "fingerprint.jsonl")
    args = ("seeds", "--n", "2", "--decompose", "--metric", "train/box_loss", "--workdir", str(workdir), "--",
            *v5.cmd, "--name", "a{run}")
    proc = _ok(seeds_cli(args[0], "--json", *args[1:], cwd=v5.repo, env=v5.env))
    assert proc.stderr.count("its log was complete, kept") == 7  # all, init, order: runs 1 and 2; augment: run 1
    parts = json.loads(proc.stdout)["decomposition"]
    assert parts["metric"] == "train/box_loss" and parts["missing"] == []
    sources = parts["sources"]
    assert set(sources) == {"all", "init", "order", "augment"} and all(r["n"] == 2 for r in sources.values())
    shares = [sources[r]["share"] for r in ("init", "order", "augment")]
    assert sum(shares) == pytest.approx(1.0)
    for role in ("init", "order", "augment"):
        row = sources[role]
        assert row["variance"] == pytest.approx(row["std"] ** 2)
        assert row["variance_ci"][0] <= row["variance"] <= row["variance_ci"][1]
        assert 0.0 <= row["share_ci"][0] <= row["share"] <= row["share_ci"][1] <= 1.0
    text = _ok(seeds_cli(*args, cwd=v5.repo, env=v5.env))  # every run kept: nothing trains again
    assert ": step" not in text.stderr
    assert "by source of randomness" in text.stdout and "share 95% CI" in text.stdout
    unknown = seeds_cli(*[a if a != "train/box_loss" else "metrics/nothing" for a in args], cwd=v5.repo, env=v5.env)
    assert unknown.returncode == 2 and "not in the studies" in unknown.stderr


# -- Ultralytics ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ultra(tmp_path_factory, train_env):
    pytest.importorskip("ultralytics")
    root = tmp_path_factory.mktemp("seeds-ultra")
    data = make_dataset(root / "data", n_train=8, n_val=4, imgsz=64)
    yolo = Path(PYTHON).parent / "yolo"
    entry = [str(yolo)] if yolo.exists() else [PYTHON, "-m", "ultralytics"]
    cmd = [*entry, "train", "model=yolov8n.yaml", f"data={data}", "epochs=1", "imgsz=64", "batch=4", "workers=0",
           "plots=False", "amp=False", "device=cpu", f"project={root / 'runs'}", "exist_ok=True"]
    return SimpleNamespace(root=root, cmd=cmd, env=train_env)


def test_ultralytics_roles_vary_init_keeps_the_batches_vary_order_the_weights(ultra):
    init = ultra.root / "init"
    proc = _ok(seeds_cli("seeds", "--json", "--n", "2", "--vary", "init", "--workdir", str(init), "--", *ultra.cmd,
                         "name=init{run}", cwd=ultra.root, env=ultra.env))
    init_runs = json.loads(proc.stdout)["runs"]
    report = json.loads((Path(init_runs[1]["run_dir"]) / "determinism.json").read_text())
    order = ultra.root / "order"
    (order / "run1").mkdir(parents=True)
    shutil.copy(init / "run1" / "fingerprint.jsonl", order / "run1" / "fingerprint.jsonl")
    proc = _ok(seeds_cli("seeds", "--json", "--n", "2", "--vary", "order", "--workdir", str(order), "--", *ultra.cmd,
                         "name=init{run}", cwd=ultra.root, env=ultra.env))
    assert "run 1/2): its log was complete, kept" in proc.stderr
    order_runs = json.loads(proc.stdout)["runs"]
    assert report["seeds"]["init"] == SEEDS[1] and report["seeds"]["order"] == SEEDS[0]
    assert report["seeds"]["run"] == SEEDS[0]
    weights = [[_header(r["log"])["initial_weights"] for r in runs] for runs in (init_runs, order_runs)]
    batches = [[_first_batch(r["log"]) for r in runs] for runs in (init_runs, order_runs)]
    assert weights[0][0] != weights[0][1] and batches[0][0] == batches[0][1]
    assert weights[1][0] == weights[1][1] and batches[1][0] != batches[1][1]
    assert batches[1][0]["batch0.im_file"] != batches[1][1]["batch0.im_file"]


# -- --parallel: the schedule, without a GPU --------------------------------------------------------
PARALLEL_SCRIPT = r'''
import os, sys, time
from pathlib import Path
import torch
import yolo_det
from yolo_det.proof import fingerprint

markers, run = Path(sys.argv[1]), os.environ["YOLO_DET_VERIFY_RUN"]
(markers / f"{run}.start").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "none"))
if os.environ.get("BARRIER") and run in ("1", "2"):  # one batch: each waits for the other to have started
    other = markers / ("2.start" if run == "1" else "1.start")
    deadline = time.monotonic() + 60
    while not other.exists():
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.05)
seed = int(os.environ.get("FIXED_SEED") or os.environ["YOLO_DET_TRAIN_SEED"])
session = yolo_det.configure("strict", seed=seed)
model = torch.nn.Linear(2, 1)
session.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with session.backward():
    model(torch.ones(1, 2)).sum().backward()
optimizer.step()
fingerprint.record_validation(0, {"fitness": seed % 1000 / 1000}, best=True)
session.finish(markers / f"run{run}")
'''


def test_parallel_runs_each_seed_on_its_own_visible_gpu_at_the_same_time(tmp_path, train_env):
    from yolo_det.studies.study import run_study

    script = tmp_path / "tiny.py"
    script.write_text(PARALLEL_SCRIPT)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**train_env, "CUDA_VISIBLE_DEVICES": "4,6", "BARRIER": "1", "YOLO_DET_GPU_LOCKS": str(tmp_path / "locks")}
    study = run_study([PYTHON, str(script), str(markers)], n=3, workdir=tmp_path / "study", env=env, parallel=2,
                      cwd=tmp_path)
    started = [(markers / f"{i}.start").read_text() for i in (1, 2, 3)]
    assert started[:2] == ["4", "6"]  # one slot per visible GPU, both busy at once (the barrier)
    assert started[2] in ("4", "6")  # the work queue: the third seed takes whichever slot freed first
    assert [r.seed for r in study.runs] == SEEDS
    assert [r.metrics["fitness"] for r in study.runs] == [s % 1000 / 1000 for s in SEEDS]


def test_a_command_that_fixes_its_own_seed_is_refused(tmp_path, train_env):
    from yolo_det.studies.study import StudyError, run_study

    script = tmp_path / "tiny.py"
    script.write_text(PARALLEL_SCRIPT)
    (tmp_path / "markers").mkdir()
    env = {**train_env, "FIXED_SEED": "0"}
    with pytest.raises(StudyError, match="the command sets its own seed"):
        run_study([PYTHON, str(script), str(tmp_path / "markers")], n=2, workdir=tmp_path / "study", env=env,
                  cwd=tmp_path)
    assert json.loads((tmp_path / "study" / "study.json").read_text())["runs"] == []


def test_runs_that_write_one_output_folder_stop_the_study(tmp_path, train_env):
    """Every run's metrics must come from its own folder: a command whose runs all finish into one folder
    (a fixed name with exist_ok) is stopped at the second run, naming both."""
    from yolo_det.studies.study import StudyError, run_study

    script = tmp_path / "tiny.py"
    script.write_text(PARALLEL_SCRIPT.replace('markers / f"run{run}"', 'markers / "shared"'))
    (tmp_path / "markers").mkdir()
    with pytest.raises(StudyError, match="runs 1 and 2 wrote the same output folder"):
        run_study([PYTHON, str(script), str(tmp_path / "markers")], n=2, workdir=tmp_path / "study", env=train_env,
                  cwd=tmp_path)
    assert len(json.loads((tmp_path / "study" / "study.json").read_text())["runs"]) == 1  # run 1 kept, not run 2
