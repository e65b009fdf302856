"""Genuine PyTorch nondeterminism alerts on CPU, for tests (DESIGN.md §4)."""

from __future__ import annotations

import torch
from torch._prims_common import alert_not_deterministic


class AlertingBackward(torch.autograd.Function):
    """Identity whose backward raises PyTorch's real alert for a CUDA-only kernel name."""

    kernel = "fake_op_backward_cuda"

    @staticmethod
    def forward(ctx, x, name):
        ctx.name = name
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        alert_not_deterministic(ctx.name)
        return grad, None


def alerting(x: torch.Tensor, name: str = AlertingBackward.kernel) -> torch.Tensor:
    return AlertingBackward.apply(x, name)


def backward_once(name: str = AlertingBackward.kernel) -> torch.Tensor:
    x = torch.ones(4, requires_grad=True)
    alerting(x, name).sum().backward()
    return x.grad


def put_alert() -> None:
    """``Tensor.put_(accumulate=False)`` alerts on CPU too (from C++, not Python)."""
    torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
