"""World-size invariance, the engine: V = 4 virtual micro-batches give the same weights, BatchNorm buffers,
EMA and optimizer state after every batch on 1, 2 and 4 gloo processes (DDP with static_graph on and off,
gradient_as_bucket_view, or no DDP at all), gradient accumulation and dropout included, and the same for
the real PyPI yolov5n with YOLOv5's ComputeLoss and ModelEMA on 1 and 2 processes; V = 2 is another run;
stock DDP changes with N (the control). Also the plan, the sampler, the tree and the settings."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from yolo_det.core.mode import ConfigError, resolve
from yolo_det.world import PartialStack, VirtualSampler, WorldPlan, tree_sum
from yolo_det.world.plan import plan_from_env

TESTS = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every configuration once: 4 gloo processes (subgroups of 1, 2, 4) and three runs in this process."""
    from support import world as wu

    out = tmp_path_factory.mktemp("world") / "ranks.json"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()), WORLD_SIZE="4",
               PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen([sys.executable, str(TESTS / "support" / "world.py"), str(out)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(4)]
    threads, flag = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # as the ranks run: a thread count is a cause of its own (proof/causes.py)
    torch.use_deterministic_algorithms(True)
    try:
        local = {"v4_n1": wu.train("invariant", 4), "v2_n1": wu.train("invariant", 2),
                 "stock_n1": wu.train("stock", 4), "yolov5n_v4_n1": wu.train_yolov5(4)}
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(flag)
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return {**json.loads(out.read_text()), **local}


def _digests(run):
    return [d for d, _ in run]


@pytest.mark.slow
def test_one_two_and_four_processes_give_the_same_state_after_every_batch(runs):
    reference = _digests(runs["v4_n1"])
    for name in ("v4_n2_static", "v4_n4_dynamic_bucketview", "v4_n2_no_ddp", "v4_n1_ddp_static", "v4_n2_find_unused"):
        assert _digests(runs[name]) == reference, name
        assert all(agree for _, agree in runs[name]), f"{name}: the ranks' states parted"


@pytest.mark.slow
def test_real_yolov5n_with_its_loss_and_ema_is_the_same_on_one_and_two_processes(runs):
    one, two = _digests(runs["yolov5n_v4_n1"]), _digests(runs["yolov5n_v4_n2_static"])
    assert one == two and all(agree for _, agree in runs["yolov5n_v4_n2_static"])
    assert len(set(one)) == len(one)  # every batch's optimizer step changed the state


@pytest.mark.slow
def test_another_virtual_world_size_is_another_run_and_stock_ddp_depends_on_n(runs):
    v4, v2 = _digests(runs["v4_n1"]), _digests(runs["v2_n1"])
    assert v4[-1] != v2[-1]  # the V=2 run: other BatchNorm batches, another tree
    assert _digests(runs["stock_n1"])[-1] != _digests(runs["stock_n2"])[-1]  # the problem this solves
    assert not all(agree for _, agree in runs["stock_n2"])  # stock DDP: each rank keeps its BN statistics


def test_the_tree_in_a_rank_then_across_ranks_is_the_tree_over_all_leaves():
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(1000, generator=g) * 10 ** (i % 5) for i in range(8)]
    whole = tree_sum(leaves)
    for n in (1, 2, 4, 8):
        m = 8 // n
        partials = []
        for r in range(n):
            stack = PartialStack()
            for leaf in leaves[r * m:(r + 1) * m]:
                stack.push("p", leaf)
            assert stack.peak <= m.bit_length()  # at most log2(V/N) + 1 gradients held
            partials.append(stack.pop("p"))
        assert torch.equal(tree_sum(partials), whole), n
    assert not torch.equal(leaves[0] + leaves[1] + leaves[2] + leaves[3], tree_sum(leaves[:4]))  # order matters


def test_plan_slices_and_validation_name_the_values():
    plan = WorldPlan(8, 2, 1, 32)
    assert (plan.virtual_ranks, plan.micro_batch, plan.local_batch) == ([4, 5, 6, 7], 4, 16)
    assert plan.slices(16) == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert plan.slices(8) == [(0, 2), (2, 4), (4, 6), (6, 8)]  # an epoch's shorter last batch
    with pytest.raises(ConfigError, match="must divide V"):
        WorldPlan(4, 3)
    with pytest.raises(ConfigError, match="batch size 18 does not divide into virtual_world_size 4"):
        WorldPlan(4, 2, 0, 18)
    with pytest.raises(ConfigError, match="not a power of two"):
        WorldPlan(6)
    assert plan_from_env(4, 8, env={"RANK": "1", "WORLD_SIZE": "2"}).virtual_ranks == [2, 3]


def test_each_virtual_rank_sees_the_same_samples_whatever_the_number_of_processes():
    def batches(n_procs, epoch):
        per_rank = []
        for r in range(n_procs):
            s = VirtualSampler(37, seed=5, plan=WorldPlan(4, n_procs, r, 8), start_epoch=epoch)
            order = [i for _, i in s]
            assert len(order) == len(s)
            per_rank.append(order)
        return per_rank

    for epoch in (0, 3):
        one = batches(1, epoch)[0]
        # the single process's batch k holds virtual ranks 0..3's micro-batch k; two processes split it in halves
        two = batches(2, epoch)
        four = batches(4, epoch)
        for k in range(0, len(one), 8):
            assert one[k:k + 8] == two[0][k // 2:k // 2 + 4] + two[1][k // 2:k // 2 + 4]
            assert one[k:k + 8] == [i for r in range(4) for i in four[r][k // 4:k // 4 + 2]]
        assert sorted(set(one)) == list(range(37))  # 37 padded to 40 by V, never by N
    assert batches(1, 0) != batches(1, 1)


def test_the_setting_resolves_from_every_source_and_names_a_bad_one():
    assert resolve(env={}).virtual_world_size is None
    s = resolve(cli={"virtual_world_size": 8}, hyp={"virtual_world_size": 4}, env={"YOLO_DET_VIRTUAL_WORLD_SIZE": "2"})
    assert (s.virtual_world_size, s.sources["virtual_world_size"]) == (8, "cli")
    assert resolve(hyp={"virtual_world_size": 4}, env={}).virtual_world_size == 4
    assert resolve(env={"YOLO_DET_VIRTUAL_WORLD_SIZE": "2"}).sources["virtual_world_size"] == "env"
    with pytest.raises(ConfigError, match=r"environment: YOLO_DET_VIRTUAL_WORLD_SIZE= '3' is not a power of two"):
        resolve(env={"YOLO_DET_VIRTUAL_WORLD_SIZE": "3"})
    with pytest.raises(ConfigError, match=r"--virtual-world-size 0 is not a power of two"):
        resolve(cli={"virtual_world_size": 0}, env={})
    with pytest.raises(ConfigError, match=r"my.yaml: virtual_world_size: True"):
        resolve(hyp={"virtual_world_size": True}, env={}, hyp_name="my.yaml")


def test_what_v_cannot_make_invariant_is_refused_under_strict_and_a_warning_under_warn():
    from yolo_det.world import check, split_targets

    with pytest.raises(ConfigError, match=r"cannot make sync-bn invariant: SyncBatchNorm .*\(under --deterministic"):
        check(["sync_bn"], "strict")
    seen = []
    assert len(check(["sync_bn", "multi_scale"], "warn", seen.append)) == 2 and len(seen) == 2
    assert check([], "strict") == []
    targets = torch.tensor([[0, 1, .5, .5, .1, .1], [2, 0, .5, .5, .1, .1], [3, 1, .2, .2, .1, .1]])
    assert split_targets(targets, 2, 4)[:, 0].tolist() == [0.0, 1.0]
    assert split_targets(targets, 1, 2).shape == (0, 6)


def test_running_statistics_are_virtual_micro_batch_zeros_and_a_missing_backward_is_named():
    from support import world as wu

    from yolo_det.world import WorldEngine

    torch.manual_seed(0)
    model, alone = wu.Net(), wu.Net()
    alone.load_state_dict(model.state_dict())
    x = torch.randn(16, 3, 16, 16)
    engine = WorldEngine(model, WorldPlan(4, 1, 0, 16))
    for mb in engine.micro_batches(len(x)):
        model(x[mb.slice]).sum().backward()
    alone(x[:4])  # what GPU 0 of a 4-GPU run (and DDP's broadcast from it) keeps
    for (name, a), b in zip(model.named_buffers(), alone.buffers()):
        assert torch.equal(a, b), name
    with pytest.raises(RuntimeError, match="ran no backward"):
        for mb in engine.micro_batches(len(x)):
            model(x[mb.slice])
