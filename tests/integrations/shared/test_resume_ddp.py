"""DDP resume is exact per rank: every rank draws its own augmentation and dropout streams, so each
rank's RNG states are saved at the end of an epoch (rank 0's in the sidecar, the others' in
``last.pt.yolo-det.rank<r>``) and restored on resume. Two gloo processes under torchrun drive the
calls a patched YOLOv5 train.py makes; without rank 1's file the resumed run trains differently."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch

from conftest import run
from support.verify import script_env

pytestmark = pytest.mark.slow

SCRIPT = r'''
import argparse, os, sys
from pathlib import Path
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from yolo_det.integrations import yolov5 as v5

EPOCHS, BATCHES = 3, 2
dist.init_process_group("gloo")
rank = dist.get_rank()
save_dir = Path(sys.argv[1])
last = save_dir / "weights" / "last.pt"
resume = sys.argv[2] == "resume"
last.parent.mkdir(parents=True, exist_ok=True)
torch.manual_seed(1 + rank)  # as YOLOv5's init_seeds(seed + 1 + RANK): each rank its own streams
opt = argparse.Namespace(resume=resume, weights=str(last) if resume else "", deterministic="strict",
                         save_dir=str(save_dir), epochs=EPOCHS)
v5.start(opt, {})
net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
start_epoch = 0
if resume:
    ckpt = torch.load(last, weights_only=True)
    net.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    start_epoch = ckpt["epoch"] + 1
v5.track(net)
model = DDP(net)  # broadcasts rank 0's parameters
v5.resume_point(start_epoch, optimizer)
code = 0
try:
    for epoch in range(start_epoch, EPOCHS):
        for _ in range(BATCHES):
            x = torch.rand(4, 6) + 0.1 * torch.randn(4, 6)  # this rank's augmentation stream
            loss = nn.functional.mse_loss(model(x), x[:, :2])  # and its dropout stream
            with v5.backward():
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if rank == 0:
            torch.save({"epoch": epoch, "model": net.state_dict(), "optimizer": optimizer.state_dict()}, last)
            v5.save_state(last, epoch)
        v5.epoch_end(epoch)
    if rank == 0:
        torch.save(net.state_dict(), save_dir / "final.pt")
    v5.finish(opt)
except SystemExit as stop:  # epoch_end: $YOLO_DET_STOP_AFTER_EPOCH
    code = stop.code or 0
del model
dist.destroy_process_group()
sys.stdout.flush(); sys.stderr.flush()
os._exit(code)  # torch 2.14's gloo may abort in interpreter finalization (see test_ddp_ranks.py)
'''


def _torchrun(script, save_dir, what, env, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, save_dir, what]
    proc = run(cmd, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _final(save_dir):
    return torch.load(save_dir / "final.pt", weights_only=True)


def test_each_rank_resumes_with_its_own_rng_states(tmp_path, train_env):
    script = tmp_path / "ddp_resume.py"
    script.write_text(SCRIPT)
    env = script_env(train_env, OMP_NUM_THREADS="1")
    _torchrun(script, tmp_path / "whole", "fresh", env, tmp_path)
    _torchrun(script, tmp_path / "part", "fresh", {**env, "YOLO_DET_STOP_AFTER_EPOCH": "1"}, tmp_path)
    weights = tmp_path / "part" / "weights"
    assert not (tmp_path / "part" / "final.pt").exists()
    assert (weights / "last.pt.yolo-det").is_file() and (weights / "last.pt.yolo-det.rank1").is_file()
    shutil.copytree(tmp_path / "part", tmp_path / "control")

    out = _torchrun(script, tmp_path / "part", "resume", env, tmp_path)
    assert out.count("yolo-det: resumed exactly after epoch 1") == 1  # printed by rank 0
    whole, resumed = _final(tmp_path / "whole"), _final(tmp_path / "part")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)

    # the control: rank 1 without its own RNG states (strict refuses; YOLO_DET_RESUME=inexact goes on)
    (tmp_path / "control" / "weights" / "last.pt.yolo-det.rank1").unlink()
    out = _torchrun(script, tmp_path / "control", "resume", {**env, "YOLO_DET_RESUME": "inexact"}, tmp_path)
    assert "rank 1's RNG states" in out and "last.pt.yolo-det.rank1 does not exist" in out
    control = _final(tmp_path / "control")
    assert not all(torch.equal(whole[k], control[k]) for k in whole)
