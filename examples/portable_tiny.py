"""A tiny detector-shaped training through yolo-det's API: the run whose record the portable golden holds.

    YOLO_DET_FINGERPRINT=run.jsonl yolo-det run --portable -- python examples/portable_tiny.py --deterministic strict

Three optimizer steps of a batch of 8 images of 32 px through the ops a YOLO trains with: convolutions (3x3 and
1x1, strided), BatchNorm, SiLU, nearest upsampling, concatenation, a 1x1 head, a BCE objectness loss and a box
regression loss; an SGD optimizer with momentum and weight decay; the batches leave a DataLoader (so the record holds
them). Its data and initial weights are made from fixed seeds by generators that give the same bits on every
machine. ``--device cuda`` runs the same training on a GPU (scripts/gpu_check.py compares that record with the
CPU golden).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import yolo_det

BATCH, STEPS, SIZE = 8, 3, 32


class Block(nn.Module):
    """Conv, BatchNorm, SiLU: YOLO's ``Conv``."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.bn(self.conv(x)))


class Tiny(nn.Module):
    """A backbone of two strided blocks, a top-down path (upsample, concat, 1x1 block) and a 1x1 head of
    4 box + 1 objectness + 2 class channels."""

    def __init__(self) -> None:
        super().__init__()
        self.b1, self.b2 = Block(3, 16, 3, 2), Block(16, 32, 3, 2)
        self.b3 = Block(48, 16, 1)
        self.head = nn.Conv2d(16, 7, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.b1(x)
        b = self.b2(a)
        up = F.interpolate(b, scale_factor=2.0, mode="nearest")
        return self.head(self.b3(torch.cat([up, a], 1)))


def _init(model: nn.Module) -> None:
    """Initial weights from one seeded generator, drawn in a fixed order (not from the run's seed)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.rand(p.shape, generator=g) - 0.5) * (0.5 if p.dim() > 1 else 0.1))


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(4321)
    images = torch.rand(BATCH * STEPS, 3, SIZE, SIZE, generator=g)
    targets = torch.rand(BATCH * STEPS, 7, SIZE // 2, SIZE // 2, generator=g)
    return TensorDataset(images, targets)


def loss_of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Box regression (smooth L1 on sigmoids), objectness and classes (BCE with logits), as components."""
    box = F.smooth_l1_loss(out[:, :4].sigmoid(), target[:, :4])
    obj = F.binary_cross_entropy_with_logits(out[:, 4], (target[:, 4] > 0.5).float())
    cls = F.binary_cross_entropy_with_logits(out[:, 5:], target[:, 5:])
    return torch.stack([box, obj, cls])


def train(mode: str = "strict", device: str = "cpu") -> None:
    session = yolo_det.configure(mode, seed=0)
    model = Tiny()
    _init(model)
    model.to(device)
    session.track(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loader = DataLoader(_data(), batch_size=BATCH, shuffle=False)
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        parts = loss_of(model(images), targets)
        with session.backward(loss=parts.detach()):
            parts.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    session.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deterministic", default="strict", choices=("strict", "warn", "off"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    train(args.deterministic, args.device)


if __name__ == "__main__":
    main()
