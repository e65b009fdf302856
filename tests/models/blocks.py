"""A YOLOv5-shaped network: Conv-BN-SiLU, a C3-like block, SPPF, nearest upsampling, 1x1 heads."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn


class ConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class CSP(nn.Module):
    """Two branches, one through a residual 3x3 pair, merged by a 1x1 conv."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.a = ConvBN(c, c // 2)
        self.b = ConvBN(c, c // 2)
        self.inner = nn.Sequential(ConvBN(c // 2, c // 2, 3), ConvBN(c // 2, c // 2, 3))
        self.merge = ConvBN(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        return self.merge(torch.cat((a + self.inner(a), self.b(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.reduce = ConvBN(c, c // 2)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.out = ConvBN(c * 2, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.out(torch.cat((x, y1, y2, self.pool(y2)), 1))


class WithBlock(nn.Module):
    """Runs ``att`` on its input (the slot where YOLO variants put attention blocks)."""

    def __init__(self, c: int, att: nn.Module) -> None:
        super().__init__()
        self.cv = ConvBN(c, c)
        self.att = att

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.att(self.cv(x))


class PlainDetector(nn.Module):
    """Stride-8/16 two-level detector; ``block`` (optional) sits after the stride-16 stage."""

    def __init__(self, block: Optional[nn.Module] = None, c: int = 16, outputs: int = 7) -> None:
        super().__init__()
        layers = [
            ConvBN(3, c // 2, 3, 2),      # 0  /2
            ConvBN(c // 2, c, 3, 2),      # 1  /4
            CSP(c),                       # 2
            ConvBN(c, c, 3, 2),           # 3  /8
            CSP(c),                       # 4
            ConvBN(c, c, 3, 2),           # 5  /16
            SPPF(c),                      # 6
            WithBlock(c, block if block is not None else nn.Identity()),  # 7
            nn.Upsample(scale_factor=2),  # 8  nearest, as in YOLOv5's neck
        ]
        self.model = nn.Sequential(*layers)
        self.head_p3 = nn.Conv2d(2 * c, outputs, 1)
        self.head_p4 = nn.Conv2d(c, outputs, 1)

    def forward(self, x: torch.Tensor):
        p3 = None
        for i, layer in enumerate(self.model):
            x = layer(x)
            if i == 4:
                p3 = x
            if i == 7:
                p4 = x
        return [self.head_p3(torch.cat((p3, x), 1)), self.head_p4(p4)]


def detector(block: Optional[nn.Module] = None, c: int = 16) -> PlainDetector:
    """A PlainDetector with ``block`` at ``model.7.att``."""
    torch.manual_seed(0)
    return PlainDetector(block, c)
