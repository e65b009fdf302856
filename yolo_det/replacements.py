"""Deterministic versions of the ops whose CUDA backward has no deterministic kernel.

Every replacement runs PyTorch's own forward kernel (forward kernels of these ops are
deterministic, so values are bit-equal to the native op) and computes the gradient with ops
whose CUDA backward is deterministic under ``torch.use_deterministic_algorithms(True)``:

- adaptive average pooling and linear/bilinear/bicubic/trilinear interpolation (antialias
  too) are separable linear maps ``y = A_h @ x @ A_w^T``; the gradient is
  ``A_h^T @ g @ A_w``, two matrix products. The matrices are PyTorch's own weights, read
  off its kernel applied to an identity basis.
- adaptive max pooling puts each output gradient at PyTorch's argmax with
  ``index_put_(accumulate=True)``, which is sort-based (deterministic) on CUDA.
- reflection/replication padding folds the padded borders back with slices and ``add_``.
- ``grid_sample`` (4-D, bilinear/nearest) is a weighted sum of corner pixels: the gradient
  comes from ``embedding_bag(mode='sum', per_sample_weights=...)`` over the pixels, whose
  backward is deterministic on CUDA (since 1.9), and from autograd through the weights.

Gradients equal the native ones up to the order of float additions (exactly for max pooling
without ties). Matrices are cached per shape, dtype and device; nothing is stored on models.
"""

from __future__ import annotations

import functools
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch

Size = Union[int, None, Sequence[Optional[int]]]

_KERNELS = {  # (mode, antialias) -> name of the native kernel in torch._C._nn
    ("linear", False): "upsample_linear1d",
    ("bilinear", False): "upsample_bilinear2d",
    ("bilinear", True): "_upsample_bilinear2d_aa",
    ("bicubic", False): "upsample_bicubic2d",
    ("bicubic", True): "_upsample_bicubic2d_aa",
    ("trilinear", False): "upsample_trilinear3d",
}
_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_GRID_MODES = {"bilinear": 0, "nearest": 1}
_GRID_PADDING = {"zeros": 0, "border": 1, "reflection": 2}


# -- shared pieces -------------------------------------------------------------------------
def _output_size(output_size: Size, spatial: Sequence[int]) -> Tuple[int, ...]:
    """Normalise an adaptive-pool ``output_size`` (int, tuple, ``None`` entries) to ints."""
    if output_size is None or isinstance(output_size, (int, torch.SymInt)):
        sizes: Sequence[Optional[int]] = [output_size] * len(spatial)
    else:
        sizes = list(output_size)
        if len(sizes) != len(spatial):
            raise ValueError(f"output_size {output_size!r} does not match {len(spatial)} spatial dims")
    return tuple(int(i) if s is None else int(s) for s, i in zip(sizes, spatial))


def _windows(in_size: int, out_size: int) -> List[Tuple[int, int]]:
    """PyTorch's adaptive-pooling windows: [floor(i*in/out), ceil((i+1)*in/out))."""
    return [((i * in_size) // out_size, -((-(i + 1) * in_size) // out_size)) for i in range(out_size)]


def _apply_along(x: torch.Tensor, matrix: torch.Tensor, dim: int) -> torch.Tensor:
    """Apply ``matrix`` (out x in) to dimension ``dim`` of ``x`` as one matrix product."""
    dim = dim % x.dim()
    matrix = matrix.to(x.dtype)
    if dim == x.dim() - 1:
        return x @ matrix.t()
    # One large GEMM on the moved dimension beats a batched (broadcast) matrix @ x.
    return (x.movedim(dim, -1) @ matrix.t()).movedim(-1, dim)


class _LinearMapBackward(torch.autograd.Function):
    """Native forward; gradient through the transposed per-dimension matrices."""

    @staticmethod
    def forward(ctx, input, forward, maps):
        ctx.maps = maps
        with torch.no_grad():
            return forward(input)

    @staticmethod
    def backward(ctx, grad):
        for dim, matrix in ctx.maps:
            grad = _apply_along(grad, matrix.t(), dim)
        return grad, None, None


def _linear_map(input: torch.Tensor, forward, maps) -> torch.Tensor:
    if not (torch.is_grad_enabled() and input.requires_grad):
        return forward(input)
    return _LinearMapBackward.apply(input, forward, maps)


# -- adaptive average pooling ----------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _average_matrix(in_size: int, out_size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    matrix = torch.zeros(out_size, in_size, dtype=torch.float64)
    for i, (start, end) in enumerate(_windows(in_size, out_size)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix.to(dtype=dtype, device=device)


_AVG_POOLS = {1: torch.adaptive_avg_pool1d, 2: torch._C._nn.adaptive_avg_pool2d, 3: torch._C._nn.adaptive_avg_pool3d}


def adaptive_avg_pool(input: torch.Tensor, output_size: Size, spatial_dims: int = 2) -> torch.Tensor:
    """``F.adaptive_avg_pool{1,2,3}d``: native values, gradient by matrix products.

    Output 1 in every dim is a mean, as PyTorch itself computes it (already deterministic).
    """
    spatial = tuple(input.shape[-spatial_dims:])
    out = _output_size(output_size, spatial)
    if all(o == 1 for o in out):
        return input.mean(dim=tuple(range(-spatial_dims, 0)), keepdim=True)
    native = _AVG_POOLS[spatial_dims]
    maps = [(input.dim() - spatial_dims + d, _average_matrix(i, o, input.dtype, input.device))
            for d, (i, o) in enumerate(zip(spatial, out)) if i != o]
    return _linear_map(input, lambda x: native(x, out), maps)


# -- adaptive max pooling --------------------------------------------------------------------
_MAX_POOLS = {1: torch.adaptive_max_pool1d, 2: torch._C._nn.adaptive_max_pool2d, 3: torch._C._nn.adaptive_max_pool3d}


class _ArgmaxBackward(torch.autograd.Function):
    """Native max pooling with indices; gradient put at the argmax by a sort-based index_put."""

    @staticmethod
    def forward(ctx, input, output_size, spatial_dims):
        with torch.no_grad():
            values, indices = _MAX_POOLS[spatial_dims](input, output_size)
        ctx.save_for_backward(indices)
        ctx.input_shape = input.shape
        ctx.spatial_dims = spatial_dims
        ctx.mark_non_differentiable(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad, _grad_indices):
        (indices,) = ctx.saved_tensors
        shape, k = ctx.input_shape, ctx.spatial_dims
        plane = math.prod(shape[-k:])
        planes = math.prod(shape[:-k])
        offsets = torch.arange(planes, device=indices.device).mul_(plane).view(*shape[:-k], *([1] * k))
        flat = (indices + offsets).reshape(-1)
        grad_input = grad.new_zeros(planes * plane).index_put_((flat,), grad.reshape(-1), accumulate=True)
        return grad_input.view(shape), None, None


def adaptive_max_pool(input: torch.Tensor, output_size: Size, return_indices: bool = False,
                      spatial_dims: int = 2):
    """``F.adaptive_max_pool{1,2,3}d``: native values and indices, deterministic gradient."""
    out = _output_size(output_size, tuple(input.shape[-spatial_dims:]))
    if torch.is_grad_enabled() and input.requires_grad:
        values, indices = _ArgmaxBackward.apply(input, out, spatial_dims)
    else:
        values, indices = _MAX_POOLS[spatial_dims](input, out)
    return (values, indices) if return_indices else values


# -- interpolation ---------------------------------------------------------------------------
def _interp_sizes(input: torch.Tensor, size, scale_factor, recompute_scale_factor):
    """(output sizes, scale factors for the kernel) as ``F.interpolate`` computes them."""
    k = input.dim() - 2
    if size is not None:
        sizes = [int(size)] * k if isinstance(size, (int, torch.SymInt)) else [int(s) for s in size]
        return sizes, None
    scales = [float(scale_factor)] * k if isinstance(scale_factor, (int, float)) else [float(s) for s in scale_factor]
    sizes = [int(math.floor(float(i) * s)) for i, s in zip(input.shape[2:], scales)]
    return sizes, (None if recompute_scale_factor else scales)


@functools.lru_cache(maxsize=256)
def _interp_matrix(kernel: str, k: int, d: int, in_size: int, out_size: int, scale: Optional[float],
                   align_corners: bool, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(out, in) weights of ``kernel`` along spatial dim ``d``: the kernel applied to an identity."""
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    # The other dims get size 2 at scale 1 (an identity): some kernels special-case size 1.
    basis = torch.eye(in_size, dtype=work).reshape([1, in_size] + [in_size if j == d else 1 for j in range(k)])
    basis = basis.expand([1, in_size] + [in_size if j == d else 2 for j in range(k)]).contiguous()
    out_sizes = [out_size if j == d else 2 for j in range(k)]
    scales = None if scale is None else [scale if j == d else 1.0 for j in range(k)]
    with torch.no_grad():
        weights = getattr(torch._C._nn, kernel)(basis, None if scales else out_sizes, align_corners, scales)
    index = (slice(None), slice(None)) + tuple(slice(None) if j == d else 0 for j in range(k))
    matrix = weights[index].reshape(in_size, out_size).t().contiguous()
    return matrix.to(dtype=dtype, device=device)


def interpolate(input: torch.Tensor, size=None, scale_factor=None, mode: str = "bilinear",
                align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None,
                antialias: bool = False) -> torch.Tensor:
    """``F.interpolate`` for linear/bilinear/bicubic/trilinear (antialias too): native values,
    gradient as one matrix product per spatial dim."""
    kernel = _KERNELS.get((mode, bool(antialias)))
    if kernel is None or input.dim() - 2 != _MODE_DIMS[mode]:
        raise ValueError(f"interpolate: mode {mode!r} (antialias={antialias}) on a {input.dim()}-D input is not handled")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    k = input.dim() - 2
    sizes, scales = _interp_sizes(input, size, scale_factor, recompute_scale_factor)
    align = bool(align_corners)
    native = getattr(torch._C._nn, kernel)
    maps = []
    for d in reversed(range(k)):
        scale = None if scales is None else scales[d]
        matrix = _interp_matrix(kernel, k, d, int(input.shape[2 + d]), sizes[d], scale, align, input.dtype, input.device)
        maps.append((2 + d, matrix))
    return _linear_map(input, lambda x: native(x, None if scales else sizes, align, scales), maps)


# -- padding ---------------------------------------------------------------------------------
class _FoldPadBackward(torch.autograd.Function):
    """Native reflect/replicate padding; the gradient folds the borders back with slices."""

    @staticmethod
    def forward(ctx, input, pad, mode):
        ctx.pad, ctx.mode = pad, mode
        with torch.no_grad():
            return torch._C._nn.pad(input, pad, mode, None)

    @staticmethod
    def backward(ctx, grad):
        dims = [(grad.dim() - 1 - i, ctx.pad[2 * i], ctx.pad[2 * i + 1]) for i in range(len(ctx.pad) // 2)]
        return _fold(grad, dims, ctx.mode, fresh=True), None, None


def _fold(grad: torch.Tensor, dims, mode: str, fresh: bool = False) -> torch.Tensor:
    """Sum the padded gradient back onto the input positions it was copied from.

    Recursive over the padded dims: the centre block is copied once, the border strips
    (small) are folded along the remaining dims and added onto the rows they mirror.
    ``fresh``: return a new tensor (it will be written to), never a view of ``grad``.
    """
    if not dims:
        return grad.clone() if fresh else grad
    (dim, left, right), rest = dims[0], dims[1:]
    n = grad.shape[dim] - left - right
    out = _fold(grad.narrow(dim, left, n), rest, mode, fresh)
    for start, count, edge in ((0, left, 0), (left + n, right, n - 1)):
        if not count:
            continue
        strip = _fold(grad.narrow(dim, start, count), rest, mode, fresh=bool(rest))  # folded in place if rest
        if mode == "reflect":
            target = 1 if edge == 0 else n - 1 - count
            out.narrow(dim, target, count).add_(strip.flip(dim))
        else:
            out.narrow(dim, edge, 1).add_(strip.sum(dim, keepdim=True))
    return out


def pad(input: torch.Tensor, pad: Sequence[int], mode: str = "reflect") -> torch.Tensor:
    """``F.pad`` for ``reflect``/``replicate`` with non-negative padding: native values,
    gradient folded back with slices."""
    if mode not in ("reflect", "replicate"):
        raise ValueError(f"pad: mode {mode!r} is not handled")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.dim() or min(pad, default=0) < 0:
        raise ValueError(f"pad: padding {pad} is not handled for a {input.dim()}-D input")
    if not (torch.is_grad_enabled() and input.requires_grad):
        return torch._C._nn.pad(input, pad, mode, None)
    return _FoldPadBackward.apply(input, pad, mode)


# -- grid_sample ------------------------------------------------------------------------------
def _unnormalize(coord: torch.Tensor, size: int, align_corners: bool) -> torch.Tensor:
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord: torch.Tensor, twice_low: int, twice_high: int) -> torch.Tensor:
    """Reflect ``coord`` into [twice_low/2, twice_high/2] as PyTorch's grid sampler does."""
    if twice_low == twice_high:
        return torch.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = (coord - low).abs()
    extra = torch.fmod(coord, span)
    flips = torch.floor(coord / span)
    return torch.where(torch.remainder(flips, 2) == 0, extra + low, span - extra + low)


def _source_coord(coord: torch.Tensor, size: int, padding_mode: str, align_corners: bool) -> torch.Tensor:
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        coord = coord.clamp(0, size - 1)
    elif padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        coord = coord.clamp(0, size - 1)
    return coord


def _corners(grid: torch.Tensor, height: int, width: int, mode: str, padding_mode: str, align: bool):
    """(flat row index, weight, inside mask), each (corners, points); weights differentiable in ``grid``."""
    n = grid.shape[0]
    ix = _source_coord(grid[..., 0], width, padding_mode, align).reshape(-1)
    iy = _source_coord(grid[..., 1], height, padding_mode, align).reshape(-1)
    if mode == "nearest":
        cx, cy = torch.round(ix), torch.round(iy)
        # round() has a zero derivative: this weight is exactly 1 and gives grid the zero
        # gradient PyTorch gives it.
        xs, ys, weight = cx[None], cy[None], (1 + (cx - cx.detach()) + (cy - cy.detach()))[None]
    else:
        x0, y0 = torch.floor(ix), torch.floor(iy)
        x1, y1 = x0 + 1, y0 + 1
        xs, ys = torch.stack([x0, x1, x0, x1]), torch.stack([y0, y0, y1, y1])
        weight = torch.stack([(x1 - ix) * (y1 - iy), (ix - x0) * (y1 - iy), (x1 - ix) * (iy - y0), (ix - x0) * (iy - y0)])
    xs, ys = xs.detach(), ys.detach()
    inside = ((xs >= 0) & (xs <= width - 1) & (ys >= 0) & (ys <= height - 1)).to(weight.dtype)
    base = torch.arange(n, device=grid.device).repeat_interleave(ix.numel() // max(n, 1)) * (height * width)
    index = base + ys.clamp(0, height - 1).long() * width + xs.clamp(0, width - 1).long()
    return index, weight, inside


class _GridSampleBackward(torch.autograd.Function):
    """Native grid_sample; gradients through ``embedding_bag`` over the input's pixels.

    Sampling is a weighted sum of corner pixels: ``embedding_bag(mode='sum')`` with the corner
    indices as bags and the bilinear weights as ``per_sample_weights`` computes it, and its
    backward (a sorted, segmented sum on CUDA: deterministic since 1.9) gives the input
    gradient; the weights' gradient flows on to the grid through autograd.
    """

    @staticmethod
    def forward(ctx, input, grid, mode, padding_mode, align_corners):
        ctx.save_for_backward(input, grid)
        ctx.args = (mode, padding_mode, align_corners)
        with torch.no_grad():
            return torch.grid_sampler(input, grid, _GRID_MODES[mode], _GRID_PADDING[padding_mode], align_corners)

    @staticmethod
    def backward(ctx, grad):
        input, grid = ctx.saved_tensors
        mode, padding_mode, align = ctx.args
        need_input, need_grid = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n, c, h, w = input.shape
        with torch.enable_grad():
            pixels = input.detach().permute(0, 2, 3, 1).reshape(n * h * w, c).requires_grad_(need_input)
            leaf = grid.detach().requires_grad_(need_grid)
            index, weight, inside = _corners(leaf, h, w, mode, padding_mode, align)
            sampled = torch.nn.functional.embedding_bag(index.t(), pixels, mode="sum",
                                                        per_sample_weights=(weight * inside).t())
        targets = [t for t, need in ((pixels, need_input), (leaf, need_grid)) if need]
        grads = list(torch.autograd.grad(sampled, targets, grad.permute(0, 2, 3, 1).reshape(-1, c), allow_unused=True))
        grad_input = grads.pop(0).view(n, h, w, c).permute(0, 3, 1, 2) if need_input else None
        grad_grid = None
        if need_grid:
            grad_grid = grads.pop(0)
            grad_grid = torch.zeros_like(grid) if grad_grid is None else grad_grid
        return grad_input, grad_grid, None, None, None


def grid_sample(input: torch.Tensor, grid: torch.Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: Optional[bool] = None) -> torch.Tensor:
    """``F.grid_sample`` for 4-D input, ``bilinear``/``nearest``, any padding mode: native
    values, deterministic gradients for input and grid."""
    if input.dim() != 4 or mode not in _GRID_MODES or padding_mode not in _GRID_PADDING:
        raise ValueError(f"grid_sample: mode {mode!r}, padding {padding_mode!r} on a {input.dim()}-D input is not handled")
    align = bool(align_corners)
    if not (torch.is_grad_enabled() and (input.requires_grad or grid.requires_grad)):
        return torch.grid_sampler(input, grid, _GRID_MODES[mode], _GRID_PADDING[padding_mode], align)
    return _GridSampleBackward.apply(input, grid, mode, padding_mode, align)
