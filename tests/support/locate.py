"""A tiny YOLOv5-shaped training script for the `verify --locate` tests (injectors: tests/support/injectors.py).

The script's ``Conv`` blocks share ONE ``nn.SiLU`` (as YOLOv5's ``Conv.default_act``) and the
model calls its layers from a loop (as ``DetectionModel._forward_once``), so module paths
must come from the call chain. ``--seed`` seeds it; ``--data FILE`` mixes the file's bytes
into every image.
"""

from __future__ import annotations

from pathlib import Path

SCRIPT = r'''
import argparse, copy, hashlib, os
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import yolo_det

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--data", default=None)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--name", default="run")
opt = parser.parse_args()
BATCH = 4
salt = 0
if opt.data:
    salt = int.from_bytes(hashlib.blake2b(open(opt.data, "rb").read(), digest_size=4).digest(), "little")


class Images(Dataset):
    def __len__(self):
        return BATCH * opt.steps

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index * 7919 + salt)
        return torch.rand(3, 16, 16, generator=g), torch.tensor(index % 3)


class Conv(nn.Module):
    default_act = nn.SiLU()  # one module object shared by every Conv, as in YOLOv5

    def __init__(self, c1, c2, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, 3, s, 1, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = self.default_act

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(Conv(3, 8), Conv(8, 8, 2), Conv(8, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                   nn.Linear(8, 3))

    def forward(self, x):
        for m in self.model:  # layers called from a loop, not through the Sequential
            x = m(x)
        return x


def main():
    session = yolo_det.configure("warn", seed=opt.seed)
    model = Net()
    ema = copy.deepcopy(model).eval()
    session.track(model, ema)
    loader = DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=0,
                        generator=yolo_det.make_generator(opt.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step, (imgs, labels) in enumerate(loader, 1):
        loss = nn.functional.cross_entropy(model(imgs), labels)
        with session.backward():
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                if e.dtype.is_floating_point:
                    e.mul_(0.9).add_(m, alpha=0.1)
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    session.finish()


if __name__ == "__main__":
    main()
'''

def write_script(directory: Path) -> Path:
    """Write the training script into ``directory``; return its path."""
    path = Path(directory) / "tiny_yolo.py"
    path.write_text(SCRIPT)
    return path
