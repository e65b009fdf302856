"""A small detector with a CBAM-style attention block: the shape that crashes strict determinism on CUDA.

Channel attention built on ``nn.AdaptiveMaxPool2d(1)`` raises
``adaptive_max_pool2d_backward_cuda does not have a deterministic implementation`` under
strict on any CUDA torch. Try:

    yolo-det audit --model examples/attention_detector.py:build --imgsz 128
"""

import torch
import torch.nn as nn


def conv(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.SiLU())


class ChannelSpatialAttention(nn.Module):
    """Reweights channels from average- and max-pooled descriptors, then locations."""

    def __init__(self, c: int, reduction: int = 4) -> None:
        super().__init__()
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.max = nn.AdaptiveMaxPool2d(1)
        self.mlp = nn.Sequential(nn.Conv2d(c, c // reduction, 1), nn.SiLU(), nn.Conv2d(c // reduction, c, 1))
        self.spatial = nn.Conv2d(2, 1, 5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.sigmoid(self.mlp(self.avg(x)) + self.mlp(self.max(x)))
        descriptors = torch.cat((x.mean(1, keepdim=True), x.amax(1, keepdim=True)), 1)
        return x * torch.sigmoid(self.spatial(descriptors))


class AttentionDetector(nn.Module):
    """Backbone, attention, and a dense head predicting (objectness, box) per cell."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.backbone = nn.Sequential(conv(3, c, 2), conv(c, 2 * c, 2), conv(2 * c, 2 * c, 2))
        self.att = ChannelSpatialAttention(2 * c)
        self.head = nn.Conv2d(2 * c, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.att(self.backbone(x)))


def build() -> nn.Module:
    """Factory for `yolo-det audit --model examples/attention_detector.py:build`."""
    return AttentionDetector()
