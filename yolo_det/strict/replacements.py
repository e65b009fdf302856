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
- ``grid_sample`` (4-D, bilinear/nearest) is a weighted sum of corner pixels: the input
  gradient adds the weighted output gradient onto the corners with ``index_add_`` (sort-based
  on CUDA under determinism, since 1.9), the grid gradient comes from a ``gather`` of the
  corners and the weights' derivatives in closed form.

Gradients equal the native ones up to the order of float additions (exactly for max pooling
without ties). Matrices are cached per shape, dtype and device; nothing is stored on models.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

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


# The grid_sample backward works through the batch in chunks whose scratch buffer holds
# about this many bytes. On CPU small chunks stay in cache (4-8 MiB measured fastest at the
# MSDeformAttn sizes of ``benchmark_cases``), and blocks under glibc's 32 MiB mmap ceiling
# are reused instead of being mapped and page-faulted afresh on every call. Elsewhere the
# chunk only bounds the scratch memory.
_GRID_CHUNK_BYTES = 8 << 20
_GRID_CHUNK_BYTES_DEVICE = 256 << 20


def _pixel_coords(grid: torch.Tensor, height: int, width: int, padding_mode: str, align: bool) -> torch.Tensor:
    """Source coordinates in pixels as (2 [x, y], N, 1, P), differentiable in ``grid`` (a
    view: the memory stays in the grid's (N, P, 2) order).

    Both axes go through one pass of ops (the op count, not their size, is what a busy CPU
    makes costly); the sizes are built on the device, as a host tensor would mean a copy and
    a stream sync on CUDA.
    """
    n, points = grid.shape[0], grid.shape[1] * grid.shape[2]
    if padding_mode == "zeros":
        size = torch.arange(2, dtype=grid.dtype, device=grid.device) * (height - width) + width
        coords = _unnormalize(grid.reshape(n, points, 2), size, align)
    else:
        coords = torch.stack([_source_coord(grid[..., 0], width, padding_mode, align),
                              _source_coord(grid[..., 1], height, padding_mode, align)], -1)
    return coords.reshape(n, points, 2).permute(2, 0, 1).reshape(2, n, 1, points)


def _grid_corners(coords: torch.Tensor, height: int, width: int, mode: str):
    """The pixels a sample reads and their weights, separably per axis.

    ``coords`` are (2, N, 1, P) pixel coordinates. Returns ``loc`` (N, corners, P), the flat
    pixel index ``y * W + x`` clamped into the image, corners in PyTorch's nw, ne, sw, se
    order; ``weight`` (2, N, k, P), each axis' corner weights with out-of-image corners
    zeroed (a corner's weight is the product of its y and x weights); and ``inside``
    (2, N, k, P), the per-axis masks. ``k`` is 2 for bilinear, 1 for nearest.
    """
    n, points = coords.shape[1], coords.shape[3]
    step = torch.arange(2 if mode == "bilinear" else 1, device=coords.device)
    size = (torch.arange(2, device=coords.device) * (height - width) + width).view(2, 1, 1, 1)
    low = coords.floor() if mode == "bilinear" else coords.round()
    corner = low.long() + step.view(1, 1, -1, 1)
    clamped = torch.minimum(corner.clamp(min=0), size - 1)
    inside = clamped == corner
    if mode == "bilinear":  # (1 - t, t) for t the fractional part, as x1 - x and x - x0
        sign, const = (step * 2 - 1).to(coords.dtype), (1 - step).to(coords.dtype)
        weight = torch.addcmul(const.view(1, 1, 2, 1), coords - low, sign.view(1, 1, 2, 1))
        weight = torch.where(inside, weight, weight.new_zeros(()))  # (a product would let NaN in)
    else:
        weight = inside.to(coords.dtype)
    k = step.numel()
    loc = torch.add(clamped[0].view(n, 1, k, points), clamped[1].view(n, k, 1, points), alpha=width)
    return loc.reshape(n, k * k, points), weight, inside


class _GridSampleBackward(torch.autograd.Function):
    """Native grid_sample; gradients from the corner indices and weights, without atomics.

    A sample is ``sum_k w_k * input[:, :, corner_k]`` over its (up to 4) corner pixels, so

    - the input gradient adds ``w_k * grad`` onto the corners: ``index_add_`` into a
      (C, N*H*W) accumulator, channels as the dense dimension, so the index work is shared
      by all channels. On CUDA ``index_add_`` is deterministic under
      ``use_deterministic_algorithms`` since torch 1.9 (it becomes a sorted
      ``index_put_(accumulate=True)``); on CPU it adds in index order.
    - the grid gradient needs ``dots_k = sum_c grad * input[corner_k]`` per sample and
      corner (a ``gather`` and a channel sum: nothing accumulates across samples), then
      ``dw_k/dx``, ``dw_k/dy`` in closed form, and autograd only through the per-sample
      pixel-coordinate maps of the padding modes.

    The batch goes through in chunks that share one scratch buffer (see
    ``_GRID_CHUNK_BYTES``). The incoming gradient is only read. The input gradient is a
    transposed view of the (C, N, H, W) accumulator.
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
        need_input = ctx.needs_input_grad[0]
        need_grid = ctx.needs_input_grad[1] and mode == "bilinear"  # nearest: zero grid gradient
        n, c, h, w = input.shape
        p = grid.shape[1] * grid.shape[2]
        dtype = torch.promote_types(input.dtype, grad.dtype)  # autocast runs the forward in float32
        leaf = grid.detach().requires_grad_(need_grid)
        with torch.enable_grad():
            coords = _pixel_coords(leaf, h, w, padding_mode, align)
        loc, weight, inside = _grid_corners(coords.detach().to(dtype).contiguous(), h, w, mode)
        corners, k = loc.shape[1], weight.shape[2]
        grad3 = grad.to(dtype).reshape(n, c, p)
        budget = _GRID_CHUNK_BYTES if input.device.type == "cpu" else _GRID_CHUNK_BYTES_DEVICE
        chunk = max(1, min(n, budget // max(1, c * corners * p * grad3.element_size())))
        scratch = torch.empty(chunk * c * corners * p, dtype=dtype, device=input.device)
        if need_input:
            corner_weight = (weight[1].view(n, k, 1, p) * weight[0].view(n, 1, k, p)).reshape(n, corners, p)
            index = (loc + (torch.arange(n, device=loc.device) * (h * w)).view(n, 1, 1)).reshape(n, corners * p)
            acc = torch.zeros(c, n * h * w, dtype=dtype, device=input.device)
        if need_grid:
            pixels = input.detach().to(dtype).reshape(n, c, h * w)
            dots = torch.empty(n, corners, p, dtype=dtype, device=input.device)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            m, g = e - s, grad3[s:e, :, None]  # g: (m, C, 1, P)
            if need_input:  # acc[c, pixel] += w * grad[c] for every sample and corner
                part = scratch[:m * c * corners * p].view(c, m, corners, p)
                torch.mul(g.transpose(0, 1), corner_weight[s:e], out=part)
                acc.index_add_(1, index[s:e].reshape(-1), part.view(c, m * corners * p))
            if need_grid:  # dots[k] = sum_c grad[c] * input[c, corner_k]
                values = scratch[:m * c * corners * p].view(m, c, corners * p)
                torch.gather(pixels[s:e], 2, loc[s:e].reshape(m, 1, corners * p).expand(m, c, corners * p), out=values)
                torch.sum(values.view(m, c, corners, p).mul_(g), 1, out=dots[s:e])
        grad_input = acc.view(c, n, h, w).transpose(0, 1) if need_input else None
        grad_grid = None
        if need_grid and coords.requires_grad:  # (a 1-pixel axis under reflection is constant)
            # Corner (j, i) weighs wy_j * wx_i, so d/dx = wy_j * sx_i and d/dy = sy_j * wx_i with
            # s = (-1, +1) for corners inside the image and 0 outside.
            slope = inside * (torch.arange(2, device=loc.device).to(dtype) * 2 - 1).view(1, 1, 2, 1)
            rows = torch.stack([weight[1], slope[1]]).view(2, n, 2, 1, p)   # y factors of d/dx, d/dy
            cols = torch.stack([slope[0], weight[0]]).view(2, n, 1, 2, p)   # x factors
            grad_coords = (dots.view(1, n, 2, 2, p) * (rows * cols)).sum((2, 3)).reshape(coords.shape)
            grad_grid, = torch.autograd.grad(coords, leaf, grad_coords.to(coords.dtype))
        if ctx.needs_input_grad[1] and grad_grid is None:
            grad_grid = torch.zeros_like(grid)
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


# -- benchmark cases: each replacement timed against the op it replaces (scripts/bench.py) --------
class BenchCase(NamedTuple):
    """One replacement timed against the op it replaces, on a detector-like input.

    ``native(x)`` and ``replacement(x)`` return a tensor; ``make_input()`` a CPU float32 tensor
    that requires grad (``make_input(device)`` for another device).
    """

    name: str
    native: Callable[[torch.Tensor], torch.Tensor]
    replacement: Callable[[torch.Tensor], torch.Tensor]
    make_input: Callable[..., torch.Tensor]


def bench_input(*shape: int) -> Callable[..., torch.Tensor]:
    """A maker of a seeded ``randn(*shape)`` input that requires grad, for a :class:`BenchCase`."""
    def make(device: str = "cpu") -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        return torch.randn(*shape, generator=generator).to(device).requires_grad_()
    return make
