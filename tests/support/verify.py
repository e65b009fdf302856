"""A small CPU training script for the fingerprint/verify tests, and helpers to run it.

The script trains a tiny conv net with BatchNorm, an EMA (YOLOv5-style ``ModelEMA`` with an
``.ema`` module, updated after ``optimizer.step()``) and a 2-worker DataLoader, through
``yolo_det.configure`` / ``session.track`` / ``session.backward``. ``INJECT=<what>:<step>``
injects nondeterminism at a known step, only in the run named by ``INJECT_RUN`` (matched against
``YOLO_DET_VERIFY_RUN``, which ``yolo-det verify`` sets; default: every run):

* ``grad:K``  flips the lowest bit of one gradient element before optimizer step K;
* ``param:K`` flips the lowest bit of one parameter inside optimizer step K (a step hook of
  the optimizer, as a nondeterministic optimizer kernel would);
* ``data:K``  adds unseeded noise (``np.random.default_rng()``) to the first image of step K,
  inside a DataLoader worker.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import copy, os, sys
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import yolo_det

BATCH, STEPS = 4, 6
kind, _, at = os.environ.get("INJECT", "").partition(":")
inject_step = int(at) if at else 0
run = os.environ.get("YOLO_DET_VERIFY_RUN", "1")
if os.environ.get("INJECT_RUN") not in (None, run):
    inject_step = 0


class Shapes(Dataset):
    def __init__(self, order):
        self.order = order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, position):
        index = int(self.order[position])
        g = torch.Generator().manual_seed(index)
        img = torch.rand(3, 16, 16, generator=g)
        img = img + 0.05 * torch.rand(3, 16, 16)  # augmentation from the worker's seeded torch RNG
        if kind == "data" and position == (inject_step - 1) * BATCH:
            img = img + torch.from_numpy(np.random.default_rng().random((3, 16, 16), dtype=np.float32))
        return img, torch.tensor(index % 3)


class EMA:
    def __init__(self, model, decay=0.9):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(self.decay).add_(msd[k].detach(), alpha=1 - self.decay)


def flip_lowest_bit(t):
    t.view(-1)[0:1].view(torch.int32).bitwise_xor_(1)


def main():
    session = yolo_det.configure("warn", seed=0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 3))
    ema = EMA(model)
    session.track(model, ema)
    order = torch.randperm(BATCH * STEPS, generator=yolo_det.make_generator(0))
    loader = DataLoader(Shapes(order), batch_size=BATCH, shuffle=False, num_workers=2,
                        worker_init_fn=yolo_det.seed_worker, generator=yolo_det.make_generator(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0

    def flip_param(opt, args, kwargs):
        if kind == "param" and step == inject_step:
            with torch.no_grad():
                flip_lowest_bit(model[0].weight)

    optimizer.register_step_post_hook(flip_param)
    for imgs, labels in loader:
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = 0.05 * min(1.0, step / 3)
        out = model(imgs)
        ce = nn.functional.cross_entropy(out, labels)
        reg = 1e-3 * out.pow(2).mean()
        loss = ce + reg
        with session.backward(loss=torch.stack([ce.detach(), reg.detach()])):
            loss.backward()
        if kind == "grad" and step == inject_step:
            flip_lowest_bit(model[7].weight.grad)
        optimizer.step()
        optimizer.zero_grad()
        ema.update(model)
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    session.finish()


if __name__ == "__main__":
    main()
'''


def write_script(directory: Path) -> Path:
    """Write the training script into ``directory`` and return its path."""
    path = Path(directory) / "tiny_train.py"
    path.write_text(SCRIPT)
    return path


def yolo_det_cmd(*args: str) -> list:
    """The ``yolo-det`` command line, run with this interpreter."""
    return [sys.executable, "-m", "yolo_det", *args]


def script_env(base: dict, **extra: str) -> dict:
    """``base`` with the repository importable and ``extra`` variables set."""
    env = dict(base)
    env["PYTHONPATH"] = str(ROOT) + ((":" + env["PYTHONPATH"]) if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


class Background:
    """``fn()`` started in a thread now: ``result()`` waits for it and returns its value or raises its exception.

    For a fixture that trains independent runs side by side (docs/testing.md, "Tests that train"): each run is its
    own process, so a thread only waits on it; ``fn`` must not change the process's cwd or ``os.environ``
    (pass ``cwd``/``env`` to the commands), which ``support.cli.cli`` does.
    """

    def __init__(self, fn) -> None:
        self._value, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # re-raised by result(), in the test that reads it
            self._error = exc

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def outcome(fn):
    """``fn()``'s value, or the exception it raised (a fixture keeps it for the test that reads it)."""
    try:
        return fn()
    except Exception as exc:
        return exc


def reraise(value):
    """``value``, unless it is an exception kept by :func:`outcome`: then raise it."""
    if isinstance(value, BaseException):
        raise value
    return value

