"""Deterministic stand-ins for opaque third-party kernels: flash-attn, multi-scale deformable
attention's extension and torchvision's ``roi_align``.

Each entry of :data:`REPLACEMENTS` makes, from the object the model's code calls (a function or
an ``autograd.Function`` class), one with the same call signature whose backward uses only ops
that are deterministic on CUDA under strict. :mod:`yolo_det.strict.swap` binds them in.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

from . import replacements as R
from .replacements import BenchCase, bench_input


# -- attention ----------------------------------------------------------------------------------
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
              softmax_scale: Optional[float] = None, causal: bool = False) -> torch.Tensor:
    """Softmax attention in flash-attn's layout ``(batch, seq, heads, dim)`` (k/v may have fewer
    heads: MQA/GQA), computed with matrix products and softmax in at least float32: deterministic on CUDA."""
    heads, kv_heads = q.shape[2], k.shape[2]
    if kv_heads != heads:
        k, v = k.repeat_interleave(heads // kv_heads, dim=2), v.repeat_interleave(heads // kv_heads, dim=2)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    compute = torch.promote_types(q.dtype, torch.float32)  # half/bfloat16 in float32, float64 as it is
    qt, kt, vt = (t.transpose(1, 2).to(compute) for t in (q, k, v))
    scores = (qt * scale) @ kt.transpose(-2, -1)
    if causal:  # flash-attn >= 2.1 aligns the causal mask to the bottom right
        sq, sk = scores.shape[-2:]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).tril(sk - sq)
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = scores.softmax(dim=-1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return (probs @ vt).transpose(1, 2).to(q.dtype)


_FLASH_DEFAULTS = {"window_size": (-1, -1), "softcap": 0.0, "alibi_slopes": None, "return_attn_probs": False}


def _is_default(name: str, value: Any) -> bool:
    default = _FLASH_DEFAULTS[name]
    if isinstance(default, tuple) and isinstance(value, (tuple, list)):
        return tuple(value) == default
    return value == default


def _parameters(fn: Callable) -> List[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def flash_attn_func(original: Callable) -> Callable:
    """``flash_attn_func`` with a deterministic backward: the installed function with
    ``deterministic=True`` when its signature takes it, else :func:`attention`."""
    names = _parameters(original)
    if "deterministic" in names:
        index = names.index("deterministic")

        def deterministic_flash_attn_func(*args, **kwargs):
            if len(args) > index:
                args = args[:index] + (True,) + args[index + 1:]
            else:
                kwargs["deterministic"] = True
            return original(*args, **kwargs)
        how = "flash-attn's own deterministic backward (deterministic=True)"
    else:
        def deterministic_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, *args, **kwargs):
            given = dict(zip([n for n in names if n not in ("q", "k", "v", "dropout_p", "softmax_scale", "causal")], args))
            given.update(kwargs)
            odd = {n: value for n, value in given.items() if n in _FLASH_DEFAULTS and not _is_default(n, value)}
            if odd:
                raise RuntimeError(f"yolo-det: flash_attn_func without deterministic= and with {odd}: the PyTorch "
                                   "attention path does not handle these; allow flash_attn_func or upgrade flash-attn")
            return attention(q, k, v, dropout_p, softmax_scale, causal)
        how = "PyTorch attention (this flash_attn_func has no deterministic=)"
    deterministic_flash_attn_func.__name__ = getattr(original, "__name__", "flash_attn_func")
    deterministic_flash_attn_func.__doc__ = f"yolo-det: {how}."
    deterministic_flash_attn_func._yolo_det_native = original  # type: ignore[attr-defined]
    deterministic_flash_attn_func._yolo_det_how = how  # type: ignore[attr-defined]
    return deterministic_flash_attn_func


# -- multi-scale deformable attention -------------------------------------------------------------
def ms_deform_attn(value: torch.Tensor, spatial_shapes: Any, sampling_locations: torch.Tensor,
                   attention_weights: torch.Tensor, sample: Optional[Callable[..., torch.Tensor]] = None) -> torch.Tensor:
    """Multi-scale deformable attention sampled with yolo-det's deterministic ``grid_sample``.

    ``value`` (batch, sum of H*W, heads, dim); ``spatial_shapes`` (levels, 2) as (H, W);
    ``sampling_locations`` (batch, queries, heads, levels, points, 2) in [0, 1];
    ``attention_weights`` (batch, queries, heads, levels, points). Returns (batch, queries, heads*dim).
    ``sample``: the grid sampler (default :func:`yolo_det.strict.replacements.grid_sample`).
    """
    sample = sample or R.grid_sample
    batch, _, heads, dim = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    shapes = [(int(h), int(w)) for h, w in (spatial_shapes.tolist() if torch.is_tensor(spatial_shapes) else spatial_shapes)]
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        v = per_level[level].flatten(2).transpose(1, 2).reshape(batch * heads, dim, h, w)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(sample(v, grid, "bilinear", "zeros", False))
    weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(batch, heads * dim, queries)
    return out.transpose(1, 2).contiguous()


def ms_deform_attn_function(original: Any) -> type:
    """A class with the extension Function's ``apply(value, shapes, level_start_index, locations,
    weights, im2col_step)`` that runs :func:`ms_deform_attn`."""

    def apply(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *im2col_step):
        return ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights)

    return type(getattr(original, "__name__", "MSDeformAttnFunction"), (), {
        "apply": staticmethod(apply), "_yolo_det_native": original,
        "_yolo_det_how": "pure-PyTorch sampling with yolo-det's deterministic grid_sample",
        "__doc__": "yolo-det: multi-scale deformable attention without the CUDA extension."})


# -- torchvision roi_align ------------------------------------------------------------------------
def roi_align(input: torch.Tensor, boxes: Any, output_size: Any, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> torch.Tensor:
    """``torchvision.ops.roi_align`` through torchvision's own pure-PyTorch implementation, run
    eagerly, when a gradient is needed (its backward is an indexed sum: sorted, deterministic on CUDA)."""
    module = importlib.import_module("torchvision.ops.roi_align")
    native = getattr(module.roi_align, "_yolo_det_native", module.roi_align)
    needs_grad = torch.is_grad_enabled() and input.requires_grad
    if not needs_grad or not hasattr(module, "_roi_align"):
        return native(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    rois = boxes
    if not isinstance(rois, torch.Tensor):
        rois = module.convert_boxes_to_roi_format(rois)
    height, width = torch.nn.modules.utils._pair(output_size)
    # torchvision compiles _roi_align lazily; the eager function underneath is the one whose backward
    # (index_put with accumulate, sorted under determinism) is deterministic
    eager = inspect.unwrap(module._roi_align)
    return eager(input, rois, spatial_scale, height, width, sampling_ratio, aligned)


def roi_align_function(original: Callable) -> Callable:
    def deterministic_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
        return roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    deterministic_roi_align.__name__ = "roi_align"
    deterministic_roi_align._yolo_det_native = original  # type: ignore[attr-defined]
    deterministic_roi_align._yolo_det_how = "torchvision's pure-PyTorch roi_align"  # type: ignore[attr-defined]
    return deterministic_roi_align


class Replacement(NamedTuple):
    """``make(original)`` builds the stand-in; ``homes`` are (module, attribute) pairs always
    rebound too, so that calls through the library's own namespace are reached."""

    make: Callable[[Any], Any]
    homes: Tuple[Tuple[str, str], ...]
    target: str


REPLACEMENTS: Dict[str, Replacement] = {
    "flash_attn": Replacement(flash_attn_func, (("flash_attn.flash_attn_interface", "flash_attn_func"),
                                                ("flash_attn", "flash_attn_func")),
                              "yolo_det.strict.opaque_replacements.flash_attn_func"),
    "ms_deform_attn": Replacement(ms_deform_attn_function, (), "yolo_det.strict.opaque_replacements.ms_deform_attn"),
    "roi_align": Replacement(roi_align_function, (("torchvision.ops.roi_align", "roi_align"), ("torchvision.ops", "roi_align")),
                             "yolo_det.strict.opaque_replacements.roi_align"),
}


def benchmark_cases() -> List[Any]:
    """Each stand-in timed against what would run without it, at detector-like CPU sizes:
    flash-attn's fallback vs PyTorch's fused attention, the deformable-attention path vs the
    same path with the native ``grid_sample``, ``roi_align`` vs torchvision's kernel."""
    def split(x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return tuple(x.unbind(0))

    def fused(x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.transpose(1, 2) for t in split(x))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)

    fixed: Dict[Any, Tuple[torch.Tensor, ...]] = {}

    def deformable_inputs(x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        key = (x.device, x.dtype)
        if key not in fixed:  # RT-DETR: 300 queries, 8 heads, 3 levels, 4 points, learned (need grad)
            g = torch.Generator().manual_seed(1)
            fixed[key] = (torch.tensor([[40, 40], [20, 20], [10, 10]]),
                          torch.rand(2, 300, 8, 3, 4, 2, generator=g).to(x).requires_grad_(),
                          torch.rand(2, 300, 8, 3, 4, generator=g).softmax(-1).to(x).requires_grad_())
        return fixed[key]

    def deformable(x: torch.Tensor, sample: Optional[Callable] = None) -> torch.Tensor:
        shapes, locations, weights = deformable_inputs(x)
        return ms_deform_attn(x, shapes, locations, weights, sample)

    def native_sample(v, grid, mode, padding, align):
        return F.grid_sample(v, grid, mode=mode, padding_mode=padding, align_corners=align)

    boxes: Dict[Any, torch.Tensor] = {}

    def rois(x: torch.Tensor) -> torch.Tensor:
        key = (x.device, x.dtype)
        if key not in boxes:
            g = torch.Generator().manual_seed(2)
            corner = torch.rand(100, 2, generator=g) * 30
            size = torch.rand(100, 2, generator=g) * 10 + 1
            boxes[key] = torch.cat([torch.arange(100)[:, None] % 2, corner, corner + size], 1).to(x)
        return boxes[key]

    def tv_roi_align(x: torch.Tensor) -> torch.Tensor:
        return importlib.import_module("torchvision.ops").roi_align(x, rois(x), (7, 7), 1.0, 2, True)

    cases = [BenchCase("flash_attn fallback vs PyTorch fused attention (AAttn, 4 areas)", fused,
                       lambda x: attention(*split(x)), bench_input(3, 16, 400, 4, 32)),
             BenchCase("ms_deform_attn path vs native grid_sample (RT-DETR)", lambda x: deformable(x, native_sample),
                       deformable, bench_input(2, 2100, 8, 32))]
    try:
        importlib.import_module("torchvision.ops")
    except ImportError:
        return cases
    return cases + [BenchCase("roi_align PyTorch path vs torchvision kernel (7x7, 100 boxes)", tv_roi_align,
                              lambda x: roi_align(x, rois(x), (7, 7), 1.0, 2, True), bench_input(2, 256, 40, 40))]


def is_stand_in(obj: Any) -> bool:
    """Whether ``obj`` is one of these stand-ins (already swapped in)."""
    return hasattr(obj, "_yolo_det_native")


__all__ = ["REPLACEMENTS", "Replacement", "attention", "benchmark_cases", "flash_attn_func", "is_stand_in", "ms_deform_attn",
           "ms_deform_attn_function", "roi_align", "roi_align_function"]
