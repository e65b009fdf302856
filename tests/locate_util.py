"""A tiny YOLOv5-shaped training script for the `verify --locate` tests, and a kernel injector.

The script's ``Conv`` blocks share ONE ``nn.SiLU`` (as YOLOv5's ``Conv.default_act``) and the
model calls its layers from a loop (as ``DetectionModel._forward_once``), so module paths
must come from the call chain. ``--seed`` seeds it; ``--data FILE`` mixes the file's bytes
into every image.

The injector (``sitecustomize.py`` in a folder put first on ``PYTHONPATH``) emulates a
nondeterministic kernel: in the run whose ``YOLO_DET_VERIFY_RUN`` equals ``INJECT_RUN``, at
optimizer step ``K`` of ``INJECT=forward:MODULE:K`` (or ``backward:MODULE:K``) it changes every
element of the output of the convolution that uses ``MODULE``'s weight (``aten.convolution``
in forward, the weight gradient of ``aten.convolution_backward`` in backward) by one ULP. It
works as a ``TorchDispatchMode`` pushed at interpreter start, underneath any capture: the
op's inputs are untouched, only its output differs -- what a nondeterministic kernel does.
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

INJECTOR = r'''
import os

_spec = os.environ.get("INJECT", "")
if _spec and os.environ.get("YOLO_DET_VERIFY_RUN") == os.environ.get("INJECT_RUN", "2"):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    _phase, _module, _step = _spec.split(":")
    _step = int(_step)
    _state = {"steps": 0, "done": False, "weight": None}

    def _count(optimizer, args, kwargs):
        _state["steps"] += 1

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(_count)

    def _weight():
        if _state["weight"] is None:
            from yolo_det import session as _session
            current = _session.current()
            model = current.extra.get("model") if current is not None else None
            if model is None:
                return None
            _state["weight"] = model.get_submodule(_module).weight
        return _state["weight"]

    def _one_ulp(t):  # every element one ULP up: a single element's ULP may round away in BatchNorm
        t.copy_(torch.nextafter(t, torch.full_like(t, float("inf"))))

    class _Injector(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if _state["done"] or _state["steps"] != _step - 1:
                return out
            packet = func.overloadpacket.__name__
            if _phase == "forward" and packet == "convolution" and torch._C._current_graph_task_id() == -1:
                w = _weight()
                if w is not None and args[1].data_ptr() == w.data_ptr():
                    _one_ulp(out)
                    _state["done"] = True
            elif _phase == "backward" and packet == "convolution_backward":
                w = _weight()
                if w is not None and args[2].data_ptr() == w.data_ptr() and out[1] is not None:
                    _one_ulp(out[1])
                    _state["done"] = True
            return out

    _Injector().__enter__()
'''


def write_script(directory: Path) -> Path:
    """Write the training script into ``directory``; return its path."""
    path = Path(directory) / "tiny_yolo.py"
    path.write_text(SCRIPT)
    return path


def write_injector(directory: Path) -> Path:
    """Write ``sitecustomize.py`` (the injector) into ``directory``; put it first on PYTHONPATH."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(INJECTOR)
    return directory
