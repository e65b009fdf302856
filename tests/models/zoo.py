"""Attention and context blocks with the shapes that fail (or not) under strict on CUDA.

Written for these tests from the published block structures; only the shapes matter.
"""

from __future__ import annotations

import warnings
from typing import Callable, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F


class SCAMLike(nn.Module):
    """FFCA-YOLO-style spatial context: global avg and max descriptors (1x1 adaptive pools)
    weight a value map through matrix products."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.max = nn.AdaptiveMaxPool2d(1)
        self.key = nn.Conv2d(c, 1, 1)
        self.value = nn.Conv2d(c, c, 1)
        self.mix = nn.Conv2d(2, 1, 1)
        self.out = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        value = self.value(x).reshape(n, c, h * w)                      # N C HW
        key = self.key(x).reshape(n, h * w, 1).softmax(1)               # N HW 1
        context = torch.matmul(value, key).reshape(n, c, 1, 1)          # N C 1 1
        avg = self.avg(x).reshape(n, 1, c).softmax(-1)
        mx = self.max(x).reshape(n, 1, c).softmax(-1)
        spatial = torch.cat((torch.matmul(avg, value), torch.matmul(mx, value)), 1).reshape(n, 2, h, w)
        return x + self.out(context) * self.mix(spatial).sigmoid()


class CBAM(nn.Module):
    """Channel attention (shared MLP on avg- and max-pooled descriptors), then spatial attention."""

    def __init__(self, c: int, reduction: int = 4) -> None:
        super().__init__()
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.max = nn.AdaptiveMaxPool2d(1)
        self.mlp = nn.Sequential(nn.Conv2d(c, c // reduction, 1), nn.ReLU(), nn.Conv2d(c // reduction, c, 1))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * (self.mlp(self.avg(x)) + self.mlp(self.max(x))).sigmoid()
        pooled = torch.cat((x.mean(1, keepdim=True), x.max(1, keepdim=True)[0]), 1)
        return x * self.spatial(pooled).sigmoid()


class SE(nn.Module):
    """Squeeze-and-excitation: a 1x1 average pool, which PyTorch computes as a mean."""

    def __init__(self, c: int, reduction: int = 4) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(nn.Linear(c, c // reduction), nn.ReLU(), nn.Linear(c // reduction, c), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        return x * self.fc(self.pool(x).reshape(n, c)).reshape(n, c, 1, 1)


class CoordAtt(nn.Module):
    """Coordinate attention: pools along one axis at a time ((None, 1) and (1, None))."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.pool_h = nn.AdaptiveAvgPool2d((None, 1))
        self.pool_w = nn.AdaptiveAvgPool2d((1, None))
        self.conv = nn.Conv2d(c, c, 1)
        self.conv_h = nn.Conv2d(c, c, 1)
        self.conv_w = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2:]
        y = torch.cat((self.pool_h(x), self.pool_w(x).transpose(2, 3)), 2)
        a_h, a_w = F.silu(self.conv(y)).split((h, w), 2)
        return x * self.conv_h(a_h).sigmoid() * self.conv_w(a_w.transpose(2, 3)).sigmoid()


class PyramidContext(nn.Module):
    """PSP-style context: average pools at 1, 2, 3, 6 cells, upsampled back bilinearly."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList(nn.Sequential(nn.AdaptiveAvgPool2d(k), nn.Conv2d(c, c // 4, 1)) for k in (1, 2, 3, 6))
        self.fuse = nn.Conv2d(c * 2, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[2:]
        parts = [F.interpolate(stage(x), size=size, mode="bilinear", align_corners=False) for stage in self.stages]
        return self.fuse(torch.cat([x] + parts, 1))


class SamplingHead(nn.Module):
    """Deformable-style sampling: learned offsets move a regular grid; F.grid_sample reads it."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.offsets = nn.Conv2d(c, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        base = torch.stack((xs, ys), -1).to(x).expand(n, h, w, 2)
        grid = base + 0.1 * self.offsets(x).permute(0, 2, 3, 1).tanh()
        return x + F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class ReflectBlock(nn.Module):
    """nn.ReflectionPad2d before a 3x3 conv, and a 1-D reflect pad along rows (F.pad)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.conv = nn.Conv2d(c, c, 3)
        self.row = nn.Conv1d(c, c, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        y = self.conv(self.pad(x))
        rows = x.permute(0, 2, 1, 3).reshape(n * h, c, w)
        rows = self.row(F.pad(rows, (1, 1), mode="reflect")).reshape(n, h, c, w).permute(0, 2, 1, 3)
        return y + rows


class BicubicUp(nn.Module):
    """Bicubic upsampling then stride-2 conv back (keeps the shape)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bicubic", align_corners=False)
        self.down = nn.Conv2d(c, c, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


class ScriptedBilinear(nn.Module):
    """Bilinear upsampling inside TorchScript: no Python route, the native kernel runs."""

    def __init__(self, c: int) -> None:
        super().__init__()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, still used
            self.up = torch.jit.script(nn.Upsample(scale_factor=2.0, mode="bilinear", align_corners=False))
        self.down = nn.Conv2d(c, c, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


BLOCKS: Dict[str, Callable[[int], nn.Module]] = {
    "scam": SCAMLike, "cbam": CBAM, "se": SE, "coordatt": CoordAtt, "psp": PyramidContext,
    "sampling": SamplingHead, "reflect": ReflectBlock, "bicubic": BicubicUp, "scripted": ScriptedBilinear,
}

#: What the audit must report on the installed torch (>= 2.14): op -> module paths.
EXPECTED: Dict[str, Dict[str, List[str]]] = {
    "scam": {"adaptive_max_pool2d_backward": ["model.7.att.max"]},
    "cbam": {"adaptive_max_pool2d_backward": ["model.7.att.max"]},
    "se": {},
    "coordatt": {"_adaptive_avg_pool2d_backward": ["model.7.att.pool_h", "model.7.att.pool_w"]},
    "psp": {"_adaptive_avg_pool2d_backward": ["model.7.att.stages.1.0", "model.7.att.stages.2.0",
                                              "model.7.att.stages.3.0"]},
    "sampling": {"grid_sampler_2d_backward": ["model.7.att"]},
    "reflect": {"reflection_pad1d_backward": ["model.7.att"]},
    "bicubic": {"upsample_bicubic2d_backward": ["model.7.att.up"]},
    "scripted": {"upsample_bilinear2d_backward": ["model.7.att"]},  # no hooks inside TorchScript
}
