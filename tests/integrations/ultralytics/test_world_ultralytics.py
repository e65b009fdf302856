"""Ultralytics under a virtual world size V, and DDP on CPU (gloo) through torchrun.

Real Ultralytics training of yolov8n.yaml from random init on the synthetic dataset (CPU, 64 px, 1 epoch,
8 images, batch 4: two loader batches accumulated into one optimizer step, ``nbs`` 64). One shared
fixture: ``yolo-det verify`` of two strict 2-process torchrun runs with V=2, one single-process V=2 run
(the same bits at every step and in the checkpoints) and one single-process V=1 run (another reference).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("ultralytics")

from ultralytics.data.dataset import YOLODataset  # noqa: E402

from yolo_det.core.mode import ConfigError  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from yolo_det.integrations.ultralytics import ddp  # noqa: E402
from yolo_det.integrations.ultralytics import world  # noqa: E402
from yolo_det.integrations.resume import sidecar_path  # noqa: E402
from yolo_det.proof import compare  # noqa: E402
from yolo_det.proof.compare import compare_logs  # noqa: E402
from yolo_det.record.log import read_log  # noqa: E402
from yolo_det.synthetic import make_dataset  # noqa: E402
from yolo_det.ultralytics import DeterministicTrainer  # noqa: E402

from conftest import PYTHON, run  # noqa: E402
from support.verify import script_env  # noqa: E402
from support.cli import cli  # noqa: E402


def sample(i: int, instances: int) -> dict:
    """One item as Ultralytics' YOLODataset hands it to ``collate_fn`` (``instances`` labelled boxes)."""
    g = torch.Generator().manual_seed(i)
    return {"img": torch.randint(0, 255, (3, 8, 8), dtype=torch.uint8, generator=g),
            "cls": torch.randint(0, 3, (instances, 1), generator=g).float(),
            "bboxes": torch.rand(instances, 4, generator=g), "batch_idx": torch.zeros(instances),
            "im_file": f"im{i}.jpg", "ori_shape": (8, 8), "resized_shape": (8, 8), "ratio_pad": ((1.0, 1.0), (0, 0))}


@pytest.mark.parametrize("counts, parts", [([2, 0, 3, 1], 2), ([1, 1, 0, 0, 2, 5, 0, 1], 4), ([0, 0], 2)])
def test_a_batch_splits_into_what_each_micro_batch_would_have_collated(counts, parts):
    whole = YOLODataset.collate_fn([sample(i, n) for i, n in enumerate(counts)])  # it edits batch_idx in place
    size = len(counts) // parts
    got = world.split_batch(whole, [(j * size, (j + 1) * size) for j in range(parts)])
    for j, part in enumerate(got):
        alone = YOLODataset.collate_fn([sample(i, counts[i]) for i in range(j * size, (j + 1) * size)])
        assert part.keys() == alone.keys()
        for key, value in alone.items():
            if isinstance(value, torch.Tensor):
                assert part[key].dtype == value.dtype and torch.equal(part[key], value), key
            else:
                assert list(part[key]) == list(value), key


def args(**values) -> SimpleNamespace:
    base = dict(batch=8, device="cpu", multi_scale=0.0, rect=False, compile=False, task="detect")
    return SimpleNamespace(**{**base, **values})


@pytest.mark.parametrize("values, needle", [
    (dict(multi_scale=0.5), "multi-scale invariant: the multi-scale image size is drawn per process"),
    (dict(multi_scale=True), "multi-scale invariant"),  # 8.0-8.3: a bool
    (dict(rect=True), "rect invariant: rect=True orders and shapes batches"),
    (dict(compile=True), "compile invariant"),
    (dict(task="segment"), "batches of task='segment'"),
])
def test_settings_that_follow_the_process_count_are_refused_under_strict_and_warned_under_warn(values, needle):
    with pytest.raises(ConfigError, match="virtual_world_size cannot make") as info:
        world.check(2, args(**values), "strict", warn=pytest.fail)
    assert needle in str(info.value)
    said = []
    world.check(2, args(**values), "warn", warn=said.append)
    assert len(said) == 1 and needle in said[0]
    world.check(2, args(), "strict", warn=pytest.fail)  # nothing to refuse


@pytest.mark.parametrize("values, env, needle", [
    (dict(batch=6), {}, "batch size 6 does not divide into virtual_world_size 4"),
    (dict(batch=-1), {}, "needs an explicit batch size"),
    (dict(device="0,1,2"), {}, "cannot run on 3 processes"),
    ({}, {"LOCAL_RANK": "0", "WORLD_SIZE": "8"}, "cannot run on 8 processes"),
])
def test_the_batch_and_the_number_of_processes_must_divide(values, env, needle, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=needle):
        world.check(4, args(**values), "warn", warn=pytest.fail)


def test_a_refused_setting_stops_the_trainer_before_it_creates_a_run(dataset, tmp_path, restore_environ):
    overrides = dict(model="yolov8n.yaml", data=str(dataset), epochs=1, imgsz=64, batch=4, device="cpu",
                     project=str(tmp_path), name="refused", deterministic="strict", virtual_world_size=2,
                     multi_scale=0.5)
    with pytest.raises(ConfigError, match="cannot make multi-scale invariant"):
        DeterministicTrainer(overrides=overrides)
    assert not (tmp_path / "refused").exists()


# -- training: one process against two gloo processes ----------------------------------------------------

TRAIN = dict(epochs=1, imgsz=64, batch=4, workers=0, plots=False, val=False, amp=False, device="cpu",
             seed=0, exist_ok=True, model="yolov8n.yaml", deterministic="strict")


def pairs(dataset: Path, project: Path, name: str, **extra) -> list:
    return [f"{k}={v}" for k, v in {**TRAIN, "data": dataset, "project": project, "name": name, **extra}.items()]


@pytest.fixture(scope="module")
def runs(train_env, tmp_path_factory):
    """verify of two 2-process V=2 runs; one 1-process V=2 run; one 1-process V=1 run (8 images, 64 px)."""
    root = tmp_path_factory.mktemp("world")
    dataset = make_dataset(root / "data", n_train=8, n_val=4, imgsz=64)
    env = script_env(train_env, OMP_NUM_THREADS="1")
    torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "yolo_det",
                "ultralytics", "train", *pairs(dataset, root, "n2_{run}", virtual_world_size=2)]
    verify = cli("verify", "--json", "--workdir", root / "w", "--", *torchrun, cwd=root, env=env)

    def one(v: int):
        name = f"n1_v{v}"
        command = [PYTHON, "-m", "yolo_det", "ultralytics", "train", *pairs(dataset, root, name, virtual_world_size=v)]
        return run(command, cwd=root, env={**env, "YOLO_DET_FINGERPRINT": str(root / f"{name}.jsonl")})

    # single-threaded (OMP_NUM_THREADS=1) and reading the label caches the verify runs built: two at a time
    with ThreadPoolExecutor(max_workers=2) as pool:
        single = dict(zip((2, 1), pool.map(one, (2, 1))))
    return SimpleNamespace(root=root, verify=verify, single=single)


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=False, map_location="cpu")["model"].float().state_dict()


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_two_gloo_processes_train_under_strict_with_rank_logs_and_verify_them_identical(runs):
    proc = runs.verify
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["steps"] >= 1
    logs = result["runs"][0]["rank_logs"]
    assert sorted(logs) == ["0", "1"]
    for rank, path in logs.items():
        log = read_log(path)
        assert log.rank == int(rank) and log.world_size == 2 and log.complete
        assert all(step.ddp == {"world_size": 2, "ok": True} for step in log.steps)  # the ranks' cross-check
    report = json.loads((runs.root / "n2_1" / "determinism.json").read_text())
    assert report["mode"] == "strict" and report["ultralytics"]["status"] == "completed"
    assert report["ultralytics"]["ddp"]["backend"] == "gloo" and report["ultralytics"]["ddp"]["world_size"] == 2
    facts = report["ultralytics"]["world"]
    assert (facts["virtual_world_size"], facts["world_size"], facts["per_rank"], facts["micro_batch"]) == (2, 2, 1, 2)


@pytest.mark.slow
def test_one_process_with_v2_is_the_two_process_run_bit_for_bit(runs, monkeypatch):
    proc = runs.single[2]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one = runs.root / "n1_v2.jsonl"
    two = runs.root / "w" / "run1" / "fingerprint.jsonl"
    assert [(log.header["virtual_world_size"], log.world_size) for log in map(read_log, (one, two))] == [(2, 1), (2, 2)]
    result = compare_logs(one, two)  # as diff and verify compare one V on different process counts
    assert result.identical, result.first_divergence
    monkeypatch.setattr(compare, "PER_PROCESS_KINDS", ())  # and the data, loss and RNG records: also the same
    result = compare_logs(one, two)
    assert result.identical, result.first_divergence
    steps = read_log(one).steps
    assert result.steps == len(steps) >= 1
    assert any(name.startswith("batch1") for name in steps[0].names["data"])  # 2 batches accumulated into a step
    for name in ("last.pt", "best.pt"):  # the EMA (Ultralytics saves it as the model)
        assert same_tensors(weights(runs.root / "n1_v2" / "weights" / name),
                            weights(runs.root / "n2_1" / "weights" / name)), name
    sidecars = [torch.load(sidecar_path(runs.root / run / "weights" / "last.pt"), weights_only=False)
                for run in ("n1_v2", "n2_1")]
    for key in ("model", "ema"):  # full precision, beside last.pt
        assert same_tensors(sidecars[0][key], sidecars[1][key]), key
    assert sidecars[0]["optimizer"]["state"].keys() == sidecars[1]["optimizer"]["state"].keys()
    for index, state in sidecars[0]["optimizer"]["state"].items():
        other = sidecars[1]["optimizer"]["state"][index]
        assert all(torch.equal(torch.as_tensor(state[k]), torch.as_tensor(other[k])) for k in state)


@pytest.mark.slow
def test_v1_is_another_run_than_v2(runs):
    proc = runs.single[1]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = compare_logs(runs.root / "n1_v1.jsonl", runs.root / "n1_v2.jsonl")
    assert not result.identical and result.first_divergence.step == 1
    assert not same_tensors(weights(runs.root / "n1_v1" / "weights" / "last.pt"),
                            weights(runs.root / "n1_v2" / "weights" / "last.pt"))


# -- DDP on CPU: the pieces ---------------------------------------------------------------------------------

@pytest.mark.parametrize("env, expected", [
    ({}, 1), ({"WORLD_SIZE": "4"}, 1), ({"LOCAL_RANK": "0", "WORLD_SIZE": "4"}, 4),
    ({"LOCAL_RANK": "-1", "WORLD_SIZE": "4"}, 1), ({"LOCAL_RANK": "1", "WORLD_SIZE": "x"}, 1),
])
def test_a_torchrun_rank_knows_its_world_size(env, expected):
    assert ddp.launched_world_size(env) == expected
    cpu, gpu = SimpleNamespace(device=torch.device("cpu")), SimpleNamespace(device=torch.device("cuda", 0))
    assert ddp.cpu_world_size(cpu, env) == (expected if expected > 1 else 0)
    assert ddp.cpu_world_size(gpu, env) == 0  # GPU ranks keep Ultralytics' own DDP path


def test_ultralytics_ddp_call_builds_a_cpu_ddp_that_ultralytics_unwraps(tmp_path):
    import torch.distributed as dist
    from ultralytics.utils import torch_utils

    unwrap = getattr(torch_utils, "unwrap_model", None) or torch_utils.de_parallel  # 8.4 / earlier releases

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        trainer = SimpleNamespace(_yolo_det_cpu_world=2)
        built = []
        model = torch.nn.Linear(3, 2)
        with ddp.cpu_ddp(trainer, built.append):
            wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], find_unused_parameters=True)
        assert torch.nn.parallel.DistributedDataParallel is DistributedDataParallel  # put back
        assert isinstance(wrapped, DistributedDataParallel) and wrapped.device_ids is None and built == [wrapped]
        assert unwrap(wrapped) is model
        wrapped(torch.ones(4, 3)).sum().backward()
        assert model.weight.grad is not None
        with ddp.cpu_ddp(SimpleNamespace()):  # not a CPU rank: Ultralytics' call is left alone
            assert torch.nn.parallel.DistributedDataParallel is DistributedDataParallel
    finally:
        dist.destroy_process_group()


def test_a_changed_batch_is_refused_not_trained_with_another_micro_batch(monkeypatch):
    trainer = SimpleNamespace(args=SimpleNamespace(batch=8, seed=0), world_size=2)
    monkeypatch.setenv("RANK", "1")
    plan = world.VirtualWorld(4, trainer).plan
    assert (plan.world_size, plan.rank, plan.virtual_ranks, plan.local_batch) == (2, 1, [2, 3], 4)
    world.VirtualWorld(4, trainer).check_batch(4)
    with pytest.raises(ConfigError, match="batch of 2 per process is not batch/N = 4"):
        world.VirtualWorld(4, trainer).check_batch(2)  # Ultralytics' out-of-memory retry halves the batch


def test_v_is_an_argument_or_the_environment_and_reaches_ddp_ranks(monkeypatch):
    from yolo_det.integrations.ultralytics.trainer import ENV_INPUTS, ModeInputs

    monkeypatch.delenv(ENV_INPUTS, raising=False)
    monkeypatch.delenv("YOLO_DET_VIRTUAL_WORLD_SIZE", raising=False)
    overrides = {"virtual_world_size": 4, "deterministic": "strict", "batch": 16}
    inputs = ModeInputs.from_overrides(overrides)
    assert "virtual_world_size" not in overrides  # Ultralytics never sees the key
    settings = inputs.resolve(env={})
    assert settings.virtual_world_size == 4 and settings.sources["virtual_world_size"] == "cli"
    rank = ModeInputs.from_json(inputs.to_json())  # what a DDP rank started by Ultralytics inherits
    assert rank.resolve(env={}).virtual_world_size == 4
    from_env = ModeInputs.from_overrides({}).resolve(env={"YOLO_DET_VIRTUAL_WORLD_SIZE": "2"})
    assert from_env.virtual_world_size == 2 and from_env.sources["virtual_world_size"] == "env"
    with pytest.raises(ConfigError, match="not a power of two"):
        ModeInputs.from_overrides({"virtual_world_size": 3}).resolve(env={})
