"""A Deformable-DETR-like MSDeformAttn whose autograd.Function calls the extension by its names."""
import torch
import torch.nn as nn

import MultiScaleDeformableAttention as MSDA


class MSDeformAttnFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations, attention_weights, im2col_step):
        ctx.save_for_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
        return MSDA.ms_deform_attn_forward(value, spatial_shapes, level_start_index, sampling_locations,
                                           attention_weights, im2col_step)

    @staticmethod
    def backward(ctx, grad_output):
        return MSDA.ms_deform_attn_backward(*ctx.saved_tensors, grad_output) + (None,)


class MSDeformAttn(nn.Module):
    def __init__(self, d_model: int = 16, levels: int = 2, heads: int = 2, points: int = 2) -> None:
        super().__init__()
        self.levels, self.heads, self.points = levels, heads, points
        self.offsets = nn.Linear(d_model, heads * levels * points * 2)
        self.weights = nn.Linear(d_model, heads * levels * points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)

    def forward(self, query, reference, value, shapes, level_start):
        b, q, _ = query.shape
        v = self.value_proj(value).view(b, value.shape[1], self.heads, -1)
        offsets = self.offsets(query).view(b, q, self.heads, self.levels, self.points, 2)
        weights = self.weights(query).view(b, q, self.heads, self.levels * self.points).softmax(-1)
        weights = weights.view(b, q, self.heads, self.levels, self.points)
        normaliser = torch.stack([shapes[..., 1], shapes[..., 0]], -1)
        locations = reference[:, :, None, :, None, :] + offsets / normaliser[None, None, None, :, None, :]
        out = MSDeformAttnFunction.apply(v, shapes, level_start, locations, weights, 64)
        return self.output_proj(out)
