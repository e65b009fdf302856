"""DDP: each rank writes its own fingerprint log, the ranks compare parameter digests after
every step (gloo, 2 CPU processes under torchrun), a rank whose parameters drift is reported in
the log and as a warning, and `yolo-det verify` compares the runs rank by rank."""

from __future__ import annotations

import json
import sys

import pytest

from support.cli import cli
from support.verify import script_env

from yolo_det.record.log import read_log

pytestmark = pytest.mark.slow  # starts DDP processes

DDP_SCRIPT = r'''
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import yolo_det

dist.init_process_group("gloo")
rank = dist.get_rank()
session = yolo_det.configure("warn", seed=0)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)))
session.track(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def drift(opt, args, kwargs):  # inside optimizer step 3, rank 1's replica stops matching the others
    if rank == 1 and step == 3:  # by 1.0: both ranks then apply the same averaged update (|lr * grad| << 1),
        with torch.no_grad():    # which cannot round a difference that large away (one ULP could vanish)
            model.module[2].bias[0] += 1.0


optimizer.register_step_post_hook(drift)
g = torch.Generator().manual_seed(100 + rank)
for step in range(1, 5):
    x, y = torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g)
    loss = nn.functional.mse_loss(model(x), y)
    with session.backward():
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
session.finish()
# torch 2.14's gloo aborts at interpreter exit now and then ("terminate called without an active
# exception"; pytorch#179291), even with every object that may hold gloo work dropped first. The
# run's files are written by now (session.finish), so the process skips interpreter finalization.
del model, optimizer, loss, session
import gc, sys; gc.collect()
dist.destroy_process_group()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def test_ddp_ranks_are_checked_against_each_other_and_compared_rank_by_rank(tmp_path, train_env):
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script]
    env = script_env(train_env, OMP_NUM_THREADS="1")
    proc = cli("verify", "--json", "--workdir", tmp_path / "w", "--", *torchrun, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    assert result["identical"] is True and result["steps"] == 4
    differing = [s.step for s in read_log(tmp_path / "w" / "run1" / "fingerprint.jsonl").steps if not s.ddp["ok"]]
    assert differing[0] == 3  # the note counts the steps that differ, not "from step 3 on": ranks may agree again
    assert any(f"DDP ranks held different parameters at {len(differing)} of 4 steps, first at step 3 "
               "(rank 1, first at 2.bias)" in note for note in result["notes"])
    run1 = tmp_path / "w" / "run1"
    assert result["runs"][0]["rank_logs"] == {"0": str(run1 / "fingerprint.jsonl"),
                                              "1": str(run1 / "fingerprint.rank1.jsonl")}
    for rank in (0, 1):
        log = read_log(result["runs"][0]["rank_logs"][str(rank)])
        assert log.rank == rank and log.world_size == 2 and log.complete
        assert [s.ddp["ok"] for s in log.steps] == [True, True, False, False]  # a difference of 1.0 persists
        drift = log.steps[2].ddp
        assert drift["rank"] == 1 and drift["tensor"] == "2.bias" and drift["ranks"] == [1]
        assert log.steps[2].names["param"][:4] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    output = (run1 / "output.log").read_text()
    assert output.count("DDP ranks diverged at step 3: rank 1's parameters differ") == 1  # warned once, by rank 0
