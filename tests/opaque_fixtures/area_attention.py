"""A YOLOv12-like area-attention block: flash-attn imported at import time only on a capable GPU."""
import os

import torch
import torch.nn as nn

USE_FLASH_ATTN = False
try:
    capable = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
    if capable or os.environ.get("YOLO_DET_TEST_FLASH") == "1":  # the variable stands for such a GPU
        from flash_attn.flash_attn_interface import flash_attn_func

        USE_FLASH_ATTN = True
except Exception:
    pass


class AreaAttention(nn.Module):
    """Attention within each of ``area`` horizontal stripes, with a positional 3x3 conv."""

    def __init__(self, dim: int, heads: int = 2, area: int = 2) -> None:
        super().__init__()
        self.heads, self.area, self.head_dim = heads, area, dim // heads
        self.qkv = nn.Conv2d(dim, dim * 3, 1)
        self.proj = nn.Conv2d(dim, dim, 1)
        self.pe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        n = h * w
        qkv = self.qkv(x).flatten(2).transpose(1, 2)
        if self.area > 1:
            qkv = qkv.reshape(b * self.area, n // self.area, c * 3)
            b, n = qkv.shape[:2]
        q, k, v = qkv.view(b, n, self.heads, self.head_dim * 3).split(self.head_dim, dim=3)
        if USE_FLASH_ATTN:
            out = flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous()).to(q.dtype)
        else:
            q, k, v = (t.permute(0, 2, 3, 1) for t in (q, k, v))
            attn = (q.transpose(-2, -1) @ k * self.head_dim ** -0.5).softmax(dim=-1)
            out = (v @ attn.transpose(-2, -1)).permute(0, 3, 1, 2)
        if self.area > 1:
            out = out.reshape(b // self.area, n * self.area, c)
            b, n = out.shape[:2]
        out = out.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return self.proj(out + self.pe(out))


def build() -> nn.Module:
    """conv -> area attention -> conv, as an audit factory."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), AreaAttention(8), nn.Conv2d(8, 4, 1))
