"""Deterministic replacements: same numbers as the native ops, no CUDA-alerting op in their
backward, and make_deterministic swaps exactly what the op table says for the torch in use."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn as nn
import torch.nn.functional as F

import yolo_det
from models import BLOCKS, detector
from yolo_det.strict import replacements as R
from yolo_det.strict.audit import audit_model
from yolo_det.strict.swap import benchmark_cases, is_replaced, make_deterministic, restore_native

GRID = torch.rand(2, 5, 7, 2, generator=torch.Generator().manual_seed(3)) * 2.4 - 1.2

# (id, native, replacement, input shapes): divisible and uneven windows, 1-D to 3-D, all modes.
CASES = [
    ("avg 1x1", lambda x: F.adaptive_avg_pool2d(x, 1), lambda x: R.adaptive_avg_pool(x, 1), [(2, 3, 10, 13)]),
    ("avg 5x13", lambda x: F.adaptive_avg_pool2d(x, (5, 13)), lambda x: R.adaptive_avg_pool(x, (5, 13)), [(2, 3, 10, 13)]),
    ("avg 3 uneven", lambda x: F.adaptive_avg_pool2d(x, 3), lambda x: R.adaptive_avg_pool(x, 3), [(2, 3, 10, 13)]),
    ("avg None,4", lambda x: F.adaptive_avg_pool2d(x, (None, 4)), lambda x: R.adaptive_avg_pool(x, (None, 4)), [(2, 3, 10, 13)]),
    ("avg up 20", lambda x: F.adaptive_avg_pool2d(x, 20), lambda x: R.adaptive_avg_pool(x, 20), [(2, 3, 10, 13)]),
    ("avg 1d", lambda x: F.adaptive_avg_pool1d(x, 4), lambda x: R.adaptive_avg_pool(x, 4, 1), [(2, 3, 11)]),
    ("avg 3d", lambda x: F.adaptive_avg_pool3d(x, (2, 4, 3)), lambda x: R.adaptive_avg_pool(x, (2, 4, 3), 3), [(2, 3, 5, 6, 7)]),
    ("max 1x1", lambda x: F.adaptive_max_pool2d(x, 1, True), lambda x: R.adaptive_max_pool(x, 1, True), [(2, 3, 10, 13)]),
    ("max 3 uneven", lambda x: F.adaptive_max_pool2d(x, 3, True), lambda x: R.adaptive_max_pool(x, 3, True), [(2, 3, 10, 13)]),
    ("max 7x9", lambda x: F.adaptive_max_pool2d(x, (7, 9)), lambda x: R.adaptive_max_pool(x, (7, 9)), [(2, 3, 10, 13)]),
    ("max 1d", lambda x: F.adaptive_max_pool1d(x, 4, True), lambda x: R.adaptive_max_pool(x, 4, True, 1), [(2, 3, 11)]),
    ("max 3d", lambda x: F.adaptive_max_pool3d(x, (2, 4, 3)), lambda x: R.adaptive_max_pool(x, (2, 4, 3), spatial_dims=3), [(2, 3, 5, 6, 7)]),
    ("bilinear x2", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
     lambda x: R.interpolate(x, scale_factor=2, mode="bilinear"), [(2, 3, 10, 13)]),
    ("bilinear size align", lambda x: F.interpolate(x, size=(7, 31), mode="bilinear", align_corners=True),
     lambda x: R.interpolate(x, size=(7, 31), mode="bilinear", align_corners=True), [(2, 3, 10, 13)]),
    ("bicubic 1.7", lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic"),
     lambda x: R.interpolate(x, scale_factor=1.7, mode="bicubic"), [(2, 3, 10, 13)]),
    ("bicubic recompute", lambda x: F.interpolate(x, scale_factor=2.3, mode="bicubic", align_corners=True, recompute_scale_factor=True),
     lambda x: R.interpolate(x, scale_factor=2.3, mode="bicubic", align_corners=True, recompute_scale_factor=True), [(2, 3, 10, 13)]),
    ("bilinear antialias", lambda x: F.interpolate(x, scale_factor=(0.5, 0.4), mode="bilinear", antialias=True),
     lambda x: R.interpolate(x, scale_factor=(0.5, 0.4), mode="bilinear", antialias=True), [(2, 3, 10, 13)]),
    ("bicubic antialias", lambda x: F.interpolate(x, size=(4, 5), mode="bicubic", antialias=True),
     lambda x: R.interpolate(x, size=(4, 5), mode="bicubic", antialias=True), [(2, 3, 10, 13)]),
    ("linear", lambda x: F.interpolate(x, scale_factor=3, mode="linear"), lambda x: R.interpolate(x, scale_factor=3, mode="linear"), [(2, 3, 11)]),
    ("trilinear", lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear"),
     lambda x: R.interpolate(x, scale_factor=1.5, mode="trilinear"), [(2, 3, 5, 6, 7)]),
    ("reflect 2d", lambda x: F.pad(x, (2, 3, 1, 4), mode="reflect"), lambda x: R.pad(x, (2, 3, 1, 4), "reflect"), [(2, 3, 10, 13)]),
    ("reflect 1d", lambda x: F.pad(x, (2, 3), mode="reflect"), lambda x: R.pad(x, (2, 3), "reflect"), [(2, 3, 11)]),
    ("reflect 3d", lambda x: F.pad(x, (1, 2, 1, 1, 2, 1), mode="reflect"), lambda x: R.pad(x, (1, 2, 1, 1, 2, 1), "reflect"), [(2, 3, 5, 6, 7)]),
    ("replicate 2d", lambda x: F.pad(x, (2, 3, 1, 4), mode="replicate"), lambda x: R.pad(x, (2, 3, 1, 4), "replicate"), [(2, 3, 10, 13)]),
    ("replicate 3d", lambda x: F.pad(x, (1, 2, 1, 1, 2, 1), mode="replicate"), lambda x: R.pad(x, (1, 2, 1, 1, 2, 1), "replicate"), [(2, 3, 5, 6, 7)]),
] + [
    (f"grid {mode} {padding} {align}",
     lambda x, g, m=mode, p=padding, a=align: F.grid_sample(x, g, mode=m, padding_mode=p, align_corners=a),
     lambda x, g, m=mode, p=padding, a=align: R.grid_sample(x, g, m, p, a), [(2, 3, 10, 13), "grid"])
    for mode in ("bilinear", "nearest") for padding in ("zeros", "border", "reflection") for align in (False, True)
]


def _inputs(shapes, dtype):
    generator = torch.Generator().manual_seed(0)
    out = []
    for shape in shapes:
        tensor = GRID.clone() if shape == "grid" else torch.randn(*shape, generator=generator)
        out.append(tensor.to(dtype).requires_grad_())
    return out


def _values(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("name,native,replacement,shapes", CASES, ids=[c[0] for c in CASES])
def test_same_values_and_gradients_as_the_native_op(name, native, replacement, shapes):
    # float32: the replacement runs PyTorch's own forward kernel, so values are bit-equal
    x32 = _inputs(shapes, torch.float32)
    for a, b in zip(_values(native(*x32)), _values(replacement(*x32))):
        assert torch.equal(a, b)
    # float64 gradients for every input (inputs are continuous: no ties)
    x64 = _inputs(shapes, torch.float64)
    out_native, out_repl = _values(native(*x64))[0], _values(replacement(*x64))[0]
    grad_out = torch.randn(out_native.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    kept = grad_out.clone()
    expected = torch.autograd.grad(out_native, x64, grad_out, allow_unused=True)
    got = torch.autograd.grad(out_repl, x64, grad_out, allow_unused=True)
    assert torch.equal(grad_out, kept)  # the incoming gradient is not modified
    for e, g in zip(expected, got):
        e = torch.zeros_like(g) if e is None else e
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,native,replacement,shapes", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_float32_gradients_within_a_millionth(name, native, replacement, shapes):
    x = _inputs(shapes, torch.float32)
    (_values(native(*x))[0].square().sum()).backward()
    expected = [t.grad.clone() for t in x]
    for t in x:
        t.grad = None
    (_values(replacement(*x))[0].square().sum()).backward()  # an expanded/odd-shaped incoming gradient
    for e, t in zip(expected, x):
        assert (t.grad - e).abs().max() <= 1e-6 * e.abs().max().clamp_min(1e-30)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 11), w=st.integers(1, 11), oh=st.integers(1, 7), ow=st.integers(1, 14),
       mode=st.sampled_from(["bilinear", "bicubic"]), align=st.booleans())
def test_any_window_and_resize_shape(h, w, oh, ow, mode, align):
    x = torch.randn(2, 3, h, w, dtype=torch.float64, requires_grad=True)
    calls = [(lambda t: F.adaptive_avg_pool2d(t, (oh, ow)), lambda t: R.adaptive_avg_pool(t, (oh, ow))),
             (lambda t: F.adaptive_max_pool2d(t, (oh, ow)), lambda t: R.adaptive_max_pool(t, (oh, ow))),
             (lambda t: F.interpolate(t, size=(oh, ow), mode=mode, align_corners=align),
              lambda t: R.interpolate(t, size=(oh, ow), mode=mode, align_corners=align))]
    for native, replacement in calls:
        expected, got = native(x), replacement(x)
        assert torch.equal(expected, got)
        grad = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(got, x, grad)[0], torch.autograd.grad(expected, x, grad)[0],
                                   rtol=1e-10, atol=1e-12)


class _Wrap(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return _values(self.fn(*inputs))[0]


@pytest.mark.parametrize("name,native,replacement,shapes", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_replacement_backward_runs_no_op_that_alerts_on_cuda(name, native, replacement, shapes):
    """The audit's own capture over every supported release: nothing raises, nothing silent."""
    inputs = _inputs(shapes, torch.float32)
    versions = ("1.12", "2.0", "2.9", None)  # before/after the scatter_add, bilinear and trilinear fixes
    if name != "avg 1x1":  # a mean: never nondeterministic; every other native op is, in some release
        assert any(not (r := audit_model(_Wrap(native), inputs, torch_version=v)).clean or r.silent for v in versions)
    for version in versions:
        result = audit_model(_Wrap(replacement), inputs, torch_version=version)
        assert result.clean and not result.silent, (name, version, result.to_dict())


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_make_deterministic_cleans_the_audit_and_keeps_the_numbers(name):
    native = detector(BLOCKS[name](8), c=8).double()
    model = copy.deepcopy(native)
    record = []
    assert make_deterministic(model, record=record) is model
    if name == "scripted":  # a limit: TorchScript runs no Python, so nothing can be swapped in
        assert not record and not audit_model(model, imgsz=32).clean
    else:
        assert audit_model(model, imgsz=32).clean
        assert bool(record) == (not audit_model(native, imgsz=32).clean)
    x = torch.rand(2, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    outputs = [sum(o.square().sum() for o in m.train()(x)) for m in (native, model)]
    assert torch.equal(outputs[0], outputs[1])
    for m, out in zip((native, model), outputs):
        out.backward()
    for (n, a), (_, b) in zip(native.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-10, atol=1e-12, msg=n)
    for (n, a), (_, b) in zip(native.named_buffers(), model.named_buffers()):
        assert torch.equal(a, b), n


def test_only_what_the_table_says_raises_for_the_torch_in_use():
    model = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear"), nn.AdaptiveAvgPool2d(1), nn.ReflectionPad2d(1),
                          nn.AdaptiveMaxPool2d(3), nn.AdaptiveMaxPool3d(2), nn.Upsample(scale_factor=2, mode="bicubic"),
                          nn.ReplicationPad2d(1), nn.Upsample(scale_factor=2))
    record = []
    make_deterministic(model, record=record)
    assert [r["module"] for r in record] == ["3", "4", "5"]  # 2.14: bilinear, pad2d, replicate have routes/kernels
    assert record[0] == {"module": "3", "from": "AdaptiveMaxPool2d", "to": "yolo_det.replacements.adaptive_max_pool",
                         "ops": ["adaptive_max_pool2d_backward"]}
    make_deterministic(model, record=record)
    assert len(record) == 3  # idempotent
    older = []
    make_deterministic(copy.deepcopy(restore_native(model)), record=older, torch_version="2.0")
    assert [r["module"] for r in older] == ["0", "2", "3", "4", "5", "6"]
    assert not any(is_replaced(m) for m in model.modules())


def test_functional_calls_inside_custom_modules_are_reached():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            y = F.adaptive_max_pool2d(self.conv(x), 2) + F.adaptive_avg_pool2d(x, (2, 2))
            y = F.interpolate(y, size=x.shape[2:], mode="bicubic", align_corners=False)
            return F.grid_sample(x + y, GRID[:1, :, :, :].expand(x.shape[0], -1, -1, -1), align_corners=False)

    model = nn.Sequential(nn.Conv2d(3, 4, 3), Head())
    assert not audit_model(model, imgsz=16).clean
    record = []
    make_deterministic(model, record=record)
    assert [(r["module"], r["from"]) for r in record] == [("1", "Head")]
    assert "functional calls" in record[0]["to"]
    assert audit_model(model, imgsz=16).clean
    y = model(torch.rand(2, 3, 16, 16))
    assert y.grad_fn is not None
    with torch.no_grad():  # no gradient needed: the native ops run
        assert torch.equal(model(torch.ones(1, 3, 16, 16)), restore_native(copy.deepcopy(model))(torch.ones(1, 3, 16, 16)))


def _called(source: str, monkeypatch) -> set:
    """What ``functions_called`` finds in ``source`` (the source of a class made from it)."""
    from yolo_det.strict import swap

    namespace: dict = {}
    exec(compile(f"class Probe:\n    def forward(self, x):\n        {source}\n", "<probe>", "exec"), namespace)
    cls, real = namespace["Probe"], swap._read
    with monkeypatch.context() as patch:
        patch.setattr(swap, "_read", lambda obj: source if obj is cls else real(obj))  # exec'd code has no file
        return set(swap.functions_called(cls))  # a new class each time: never a cached answer


def test_a_call_is_a_table_function_called_bare_or_through_f_functional_or_torch_only(monkeypatch):
    def called(source):
        return _called(source, monkeypatch)

    assert called("return F.interpolate(x) + functional.pad(x, 1) + torch.index_add(x)") == \
        {"interpolate", "pad", "index_add"}
    assert called("return interpolate (x)") == {"interpolate"}  # space before the parenthesis
    assert called("return self.interpolate(x) + nn.pad(x) + my_pad(x) + padding(x)") == set()
    assert called("def interpolate(y): return y") == set() and called("return F.interpolate") == set()
    assert called("return F.pad(F.interpolate(x), 1)") == {"pad", "interpolate"}  # nested: both


@given(st.lists(st.sampled_from(["F.", "torch.", "functional.", "self.", "def ", " ", "(", "x", "_", ".", "pad",
                                 "interpolate", "grid_sample", "index_add", "scatter_add", "cumsum"]), max_size=14))
@settings(max_examples=300, deadline=None)
def test_the_one_pass_call_pattern_finds_what_a_search_per_name_finds(tokens):
    """``functions_called`` reads a source in one pass over all the table's names; each name's own search
    (``(?:(?<![\\w.])|(?<=F\\.)|(?<=functional\\.)|(?<=torch\\.))(?<!def )NAME\\s*\\(``) finds the same."""
    import re

    from yolo_det.strict.swap import _call_pattern, load_table

    names = frozenset(n for row in load_table() for n in row.functions)
    source = "".join(tokens)
    prefix = r"(?:(?<![\w.])|(?<=F\.)|(?<=functional\.)|(?<=torch\.))"
    each = {n for n in names if re.search(rf"{prefix}(?<!def ){re.escape(n)}\s*\(", source)}
    assert set(_call_pattern(names).findall(source)) == each


def _deformable_sample(value, grid):  # a module-level helper, as Ultralytics' MSDeformAttn uses
    return F.grid_sample(value, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class DeformableAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.offsets = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        grid = self.offsets(x).permute(0, 2, 3, 1).tanh()
        return _deformable_sample(x, grid)


def test_functional_calls_in_helper_functions_are_reached():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), DeformableAttention())
    assert [f.modules for f in audit_model(model, imgsz=16).ops] == [["1"]]
    record = []
    make_deterministic(model, record=record)
    assert [(r["module"], r["from"]) for r in record] == [("1", "DeformableAttention")]
    assert audit_model(model, imgsz=16).clean


@pytest.mark.slow  # builds and audits RT-DETR-l twice (25-30 s)
def test_rtdetr_from_ultralytics_runs_deterministically():
    pytest.importorskip("ultralytics")
    from yolo_det.strict.models import build_ultralytics

    model = build_ultralytics("rtdetr-l.yaml").model
    before = audit_model(model, imgsz=64, batch=1)
    assert [f.op for f in before.ops] == ["grid_sampler_2d_backward"]
    assert all(m.endswith(".cross_attn") for m in before.ops[0].modules)
    make_deterministic(model)
    assert audit_model(model, imgsz=64, batch=1).clean


def test_a_forward_assigned_on_the_instance_runs_in_the_scope_too():
    class Gate(nn.Module):  # FFCA-YOLO's blocks pick their forward in __init__
        def __init__(self):
            super().__init__()
            self.forward = self.forward_pooled

        def forward_pooled(self, x):
            return x * F.adaptive_max_pool2d(x, 1).sigmoid()

    model = nn.Sequential(nn.Conv2d(3, 4, 3), Gate())
    make_deterministic(model)
    assert is_replaced(model[1]) and audit_model(model, imgsz=16).clean


def test_yolo_det_make_deterministic_forwards_here():
    model = nn.Sequential(nn.AdaptiveMaxPool2d(1))
    record = []
    assert yolo_det.make_deterministic(model, record=record) is model and is_replaced(model[0]) and record


def test_session_track_applies_replacements_in_strict_only(tmp_path):
    for mode, ops, swapped in (("strict", None, True), ("strict", "native", False), ("warn", None, False)):
        model = detector(BLOCKS["cbam"](8), c=8)
        session = yolo_det.configure(mode, ops=ops)
        session.track(model)
        assert is_replaced(model.model[7].att.max) == swapped, (mode, ops)
        assert bool(session.replacements) == swapped
        if swapped:
            saved = session.save(tmp_path)
            import json

            assert json.loads(saved.read_text())["replacements"][0]["module"] == "model.7.att.max"
        session.finish(echo=lambda _: None, restore_flags=True)


def test_benchmark_cases_time_matching_functions():
    names = []
    for name, native, replacement, make_input in benchmark_cases():
        names.append(name)
        x = make_input()
        assert x.requires_grad and x.device.type == "cpu"
        with torch.no_grad():
            assert torch.allclose(native(x), replacement(x), rtol=1e-5, atol=1e-6), name
    assert len(names) == len(set(names)) >= 8
    assert any("CUDA route" in n for n in names)


def test_tensors_in_finds_every_tensor_of_a_nested_value_in_order():
    """Module outputs, hook arguments and probe results nest tensors in tuples, lists and dicts; nothing else counts."""
    from yolo_det.core.tensors import tensors_in

    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    found = tensors_in({"x": [a, (b, 3, None)], "y": "text", "z": {"w": c}})
    assert [id(t) for t in found] == [id(a), id(b), id(c)]
    assert [id(t) for t in tensors_in(a)] == [id(a)] and tensors_in(7) == [] and tensors_in(("s", [])) == []
