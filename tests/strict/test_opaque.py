"""Kernels PyTorch's determinism switch cannot see: found (source and run time), reported under
warn, refused under strict unless allowed or replaced; replacements' numerics; the probe."""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import yolo_det
from yolo_det.session import OpaqueKernelError
from yolo_det.strict import opaque_replacements as OR
from yolo_det.strict.audit import audit_model
from yolo_det.strict.opaque import scan_model
from yolo_det.strict.probe import probe, probe_model
from yolo_det.strict.swap import restore_opaque, swap_opaque

FIXTURES = Path(__file__).parents[1] / "opaque_fixtures"
FLASH = "flash_attn.flash_attn_interface.flash_attn_func"
OWNED = ("area_attention", "flash_attn", "deformable", "MultiScaleDeformableAttention")


@pytest.fixture
def imports(monkeypatch):
    """Import fixture modules fresh; afterwards sys.path, those modules and every swap are undone."""
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in OWNED}
    path = list(sys.path)

    def load(name: str, *dirs: Path, flash: bool = False):
        monkeypatch.setenv("YOLO_DET_TEST_FLASH", "1" if flash else "0")
        for key in [k for k in sys.modules if k.split(".")[0] in OWNED]:
            del sys.modules[key]
        sys.path[:0] = [str(d) for d in dirs]
        return importlib.import_module(name)

    yield load
    restore_opaque()
    sys.path[:] = path
    for key in [k for k in sys.modules if k.split(".")[0] in OWNED]:
        del sys.modules[key]
    sys.modules.update(saved)


def _area_model(imports, flash: bool, variant: str = "v27"):
    module = imports("area_attention", FIXTURES, FIXTURES / f"flash_attn_{variant}", flash=flash)
    return module, module.build()


def _step(model, session) -> torch.Tensor:
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    loss = model(x).square().mean()
    with session.backward():
        loss.backward()
    return loss.detach()


# -- flash-attn in a YOLOv12-like block -----------------------------------------------------------
def test_scan_names_flash_attn_even_where_the_import_did_not_happen(imports):
    module, model = _area_model(imports, flash=False)
    assert not module.USE_FLASH_ATTN and "flash_attn" not in sys.modules
    [finding] = scan_model(model)
    assert (finding.op, finding.kind, finding.modules, finding.importable) == (FLASH, "known-api", ["1"], False)
    session = yolo_det.configure("strict", seed=0)
    session.track(model)  # cannot run in this process: reported, not refused
    assert session.opaque.to_dict()["ops"][0]["action"] == "not run here"
    _step(model, session)


def test_warn_reports_flash_attn_and_strict_native_refuses_naming_it(imports, tmp_path):
    _, model = _area_model(imports, flash=True)
    session = yolo_det.configure("warn", seed=0)
    session.track(model)
    _step(model, session)
    session.finish(tmp_path, echo=lambda _: None)
    section = json.loads((tmp_path / "determinism.json").read_text())["opaque_kernels"]
    [record] = section["ops"]
    assert (record["op"], record["action"], record["modules"]) == (FLASH, "warned", ["1"])
    assert "flash_attn_func(" in record["call"]

    session = yolo_det.configure("strict", seed=0, ops="native")
    with pytest.raises(OpaqueKernelError) as error:
        session.track(model)
    text = str(error.value)
    assert FLASH in text and " in module 1:" in text and "deterministic_allow" in text and "YOLO_DET_ALLOW" in text


def test_strict_runs_when_flash_attn_is_allowed(imports, monkeypatch):
    module, model = _area_model(imports, flash=True)
    monkeypatch.setenv("YOLO_DET_ALLOW", "flash_attn_func")
    session = yolo_det.configure("strict", seed=0, ops="native")
    session.track(model)
    _step(model, session)
    assert session.opaque.to_dict()["ops"][0]["action"] == "allowed"
    assert sys.modules["flash_attn.flash_attn_interface"].CALLS[-1]["deterministic"] is False


class _Attend(torch.autograd.Function):
    """Calls flash-attn inside its forward; the model reaches it through an attribute."""

    @staticmethod
    def forward(ctx, q):
        from flash_attn import flash_attn_func

        return flash_attn_func(q, q, q)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _Indirect(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)
        self.kernel = _Attend  # self.kernel.apply: nothing the source scan can resolve

    def forward(self, x):
        return self.kernel.apply(self.conv(x).flatten(2).transpose(1, 2).reshape(x.shape[0], -1, 2, 4))


def test_strict_refuses_at_first_use_a_function_only_the_graph_shows(imports):
    imports("flash_attn", FIXTURES / "flash_attn_v27")
    model = _Indirect()
    assert scan_model(model) == []
    x = torch.rand(2, 3, 4, 4)
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    pickle.loads(pickle.dumps(copy.deepcopy(model)))  # an EMA copy and a checkpoint carry no hook
    with torch.no_grad():
        model(x)  # no graph (validation, EMA): nothing to see yet
    with pytest.raises(OpaqueKernelError, match=r"flash_attn_func \(known-api\) in module \(model\)"):
        model(x)
    assert session.opaque.to_dict()["ops"][0]["action"] == "refused"
    session = yolo_det.configure("warn", seed=0)
    session.track(model)
    model(x).sum().backward()
    [record] = session.opaque.to_dict()["ops"]
    assert record["action"] == "warned" and record["via"].endswith("_Attend")
    model(x)  # once only: the hook is gone
    session.finish(echo=lambda _: None)


def test_strict_swaps_in_flash_attns_own_deterministic_backward(imports):
    module, model = _area_model(imports, flash=True)
    interface = sys.modules["flash_attn.flash_attn_interface"]
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    [swap] = [r for r in session.replacements if r["from"] == FLASH]
    assert "area_attention.flash_attn_func" in swap["bound"] and "deterministic=True" in swap["how"]
    _step(model, session)
    assert interface.CALLS and all(call["deterministic"] is True for call in interface.CALLS)
    assert session.opaque.to_dict()["ops"][0]["action"] == "replaced"
    restore_opaque()
    assert module.flash_attn_func is interface.flash_attn_func and not OR.is_stand_in(module.flash_attn_func)


def test_strict_without_a_deterministic_argument_takes_the_pytorch_path(imports):
    module, model = _area_model(imports, flash=True, variant="v20")
    native = module.flash_attn_func
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 10, 2, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    expected = native(q, k, v)
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    assert "PyTorch attention" in session.replacements[-1]["how"]
    calls = len(sys.modules["flash_attn.flash_attn_interface"].CALLS)
    got = module.flash_attn_func(q, k, v)
    close = {"atol": 1e-5, "rtol": 1e-5}  # the stand-in, like flash-attn, computes in float32 or less
    torch.testing.assert_close(got, expected, **close)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (q, k, v)), **close)
    _step(model, session)
    assert len(sys.modules["flash_attn.flash_attn_interface"].CALLS) == calls  # the native kernel never ran
    with pytest.raises(RuntimeError, match="return_attn_probs"):  # positional, by the installed signature
        module.flash_attn_func(q, k, v, 0.0, None, False, True)


def test_pytorch_attention_matches_softmax_attention_with_gqa_and_causal():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 4, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 7, 2, 8, generator=g, dtype=torch.float64) for _ in range(2))
    kk, vv = (t.repeat_interleave(2, dim=2).transpose(1, 2) for t in (k, v))
    mask = torch.ones(5, 7, dtype=torch.bool).tril(2)
    expected = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask)
    torch.testing.assert_close(OR.attention(q, k, v, causal=True), expected.transpose(1, 2))


# -- multi-scale deformable attention ------------------------------------------------------------
def _deformable_inputs(dtype=torch.float64):
    g = torch.Generator().manual_seed(3)
    shapes = torch.tensor([[6, 5], [3, 3]])
    start = torch.tensor([0, 30])
    value = torch.randn(2, 39, 16, generator=g, dtype=dtype)
    query = torch.randn(2, 7, 16, generator=g, dtype=dtype)
    reference = torch.rand(2, 7, 2, 2, generator=g, dtype=dtype)
    return query, reference, value, shapes, start


def _folded_layout() -> bool:
    from ultralytics.nn.modules import utils

    return "num_total_points" in inspect.getsource(utils.multi_scale_deformable_attn_pytorch)


def test_msdeformattn_extension_is_found_and_replaced_by_the_pytorch_path(imports):
    from ultralytics.nn.modules.utils import multi_scale_deformable_attn_pytorch

    module = imports("deformable", FIXTURES, FIXTURES / "msda_ext")
    model = nn.Sequential(module.MSDeformAttn()).double()
    found = {f.op: f for f in scan_model(model)}
    assert set(found) == {"MultiScaleDeformableAttention.ms_deform_attn_forward",
                          "MultiScaleDeformableAttention.ms_deform_attn_backward"}
    assert all(f.modules == ["0"] and f.via.endswith("MSDeformAttnFunction") for f in found.values())
    inputs = _deformable_inputs()
    with pytest.raises(RuntimeError, match="Not implemented"):
        model[0](*inputs)
    record = []
    assert swap_opaque(model, record=record) == []
    assert record[0]["bound"] == ["deformable.MSDeformAttnFunction"]

    g = torch.Generator().manual_seed(4)
    value = torch.randn(2, 39, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    locations = torch.rand(2, 7, 2, 2, 2, 2, generator=g, dtype=torch.float64, requires_grad=True)
    weights = torch.rand(2, 7, 2, 2, 2, generator=g, dtype=torch.float64, requires_grad=True)
    shapes = inputs[3]
    got = module.MSDeformAttnFunction.apply(value, shapes, inputs[4], locations, weights, 64)
    # Ultralytics 8.4 folds (levels, points) into one axis; older releases take them apart
    folded = len(inspect.signature(multi_scale_deformable_attn_pytorch).parameters) and _folded_layout()
    expected = multi_scale_deformable_attn_pytorch(value, shapes.tolist(), locations.flatten(3, 4) if folded else locations,
                                                   weights.flatten(3, 4) if folded else weights)
    torch.testing.assert_close(got, expected)
    grad = torch.randn(got.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad(got, (value, locations, weights), grad),
                               torch.autograd.grad(expected, (value, locations, weights), grad))
    model[0](*inputs).sum().backward()  # the module trains through the replacement


# -- torchvision roi_align -------------------------------------------------------------------------
def test_roi_align_replacement_matches_torchvision_and_is_swapped_into_roialign_modules():
    torchvision = pytest.importorskip("torchvision")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 12, 12, generator=g, dtype=torch.float64, requires_grad=True)
    boxes = torch.tensor([[0, 1.0, 1.5, 8.0, 9.0], [1, 0.5, 2.0, 11.0, 6.5], [0, 3.0, 3.0, 5.0, 10.0]], dtype=torch.float64)
    for ratio, aligned in ((2, True), (-1, False)):
        expected = torchvision.ops.roi_align(x, boxes, (3, 4), 0.5, ratio, aligned)
        got = OR.roi_align(x, boxes, (3, 4), 0.5, ratio, aligned)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), x), torch.autograd.grad(expected.sum(), x))
    model = nn.Sequential(torchvision.ops.RoIAlign((3, 4), 0.5, 2))
    [finding] = scan_model(model)
    assert finding.op == "torchvision.ops.roi_align.roi_align" and finding.modules == ["0"]
    before = model[0](x, boxes)
    grad_before = torch.autograd.grad(before.sum(), x)
    try:
        assert swap_opaque(model, record=[]) == []
        assert OR.is_stand_in(sys.modules["torchvision.ops.roi_align"].roi_align)
        after = model[0](x, boxes)
        assert after.grad_fn is not None and "RoiAlign" not in type(after.grad_fn).__name__  # the PyTorch path ran
        torch.testing.assert_close(after, before)
        torch.testing.assert_close(torch.autograd.grad(after.sum(), x), grad_before)
    finally:
        restore_opaque()
    assert not OR.is_stand_in(sys.modules["torchvision.ops.roi_align"].roi_align)


# -- no false positives -----------------------------------------------------------------------------
class _PurePython(torch.autograd.Function):
    """A custom Function made only of dispatcher ops: zeros written in place, views, a factory output returned."""

    @staticmethod
    def forward(ctx, x):
        out = torch.zeros_like(x)
        out[:, :1].copy_(x[:, :1] * 2)
        out[:, 1:] = x[:, 1:].exp()
        ctx.save_for_backward(x)
        return out.view_as(out), torch.ones(3)

    @staticmethod
    def backward(ctx, grad, _):
        (x,) = ctx.saved_tensors
        scale = torch.empty_like(x)
        scale.fill_(2.0)
        scale[:, 1:] = x[:, 1:].exp()
        return grad * scale


class _Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y, ones = _PurePython.apply(self.conv(x))
        return y.sum(1) + ones.sum()


@pytest.mark.slow
def test_no_false_positives_on_plain_models_and_pure_python_functions():
    from yolo_det.strict.models import build_ultralytics, build_yolov5

    for built in (build_yolov5("yolov5n.yaml"), build_ultralytics("yolov8n.yaml")):
        assert scan_model(built.model) == [], built.name
        session = yolo_det.configure("strict", seed=0)
        session.track(built.model)  # strict trains it: nothing refused, nothing swapped for opaque kernels
        assert not session.opaque and session.to_dict()["opaque_kernels"]["ops"] == []
        assert all(r.get("bound") is None for r in session.replacements)
    result = audit_model(build_yolov5("yolov5n.yaml").model, imgsz=64)
    assert result.opaque == [] and result.clean
    result = audit_model(_Plain(), imgsz=16)
    assert result.opaque == [] and result.clean


# -- the probe ----------------------------------------------------------------------------------------
class _Atomics(torch.autograd.Function):
    """Emulates a CUDA extension with atomics: the backward sums contributions in a new order each call."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.size = x.shape[0]
        return x[index] * 3

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        order = torch.randperm(index.numel(), generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little")))
        out = torch.zeros(ctx.size, *grad.shape[1:], dtype=grad.dtype)
        return out.index_add_(0, index[order], grad[order] * 3), None


class _Gather(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        index = torch.arange(4096) % 7
        return _Atomics.apply(x.flatten()[:7, None] * self.scale, index)


def test_probe_tells_a_nondeterministic_backward_from_a_deterministic_one():
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(6))
    index = torch.arange(4096) % 7
    result = probe(_Atomics.apply, (x, index), "atomics")
    assert result.outputs_identical and not result.grads_identical and not result.identical
    assert "NONDETERMINISTIC" in result.statement and result.max_abs_diff > 0
    calm = probe(lambda t: torch.nn.functional.softmax(t, dim=0), (x,), "softmax")
    assert calm.identical and calm.proves_nothing and "proves nothing" in calm.statement
    [found] = probe_model(_Gather(), (torch.randn(2, 7),), opaque_names=[f"{__name__}._Atomics"])
    assert found.op.endswith("_Atomics") and found.opaque and not found.identical


@pytest.mark.slow  # starts yolo-det audit in a child that imports torch and the model (10 s or more)
def test_audit_cli_probe_reports_the_emulated_extension(tmp_path):
    factory = tmp_path / "probe_model.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                       "import torch\nfrom test_opaque import _Gather\n"
                       "def build():\n    return _Gather(), (torch.randn(2, 7),)\n")
    out = subprocess.run([sys.executable, "-m", "yolo_det", "audit", "--model", f"{factory}:build", "--probe", "--json"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    [result] = json.loads(out.stdout)["probes"]
    assert result["op"].endswith("_Atomics") and not result["identical"] and result["device"] == "cpu"


# -- a compiled extension inside an autograd.Function ------------------------------------------------
#: A C extension module (Python's C API only: it compiles in well under a second, where a
#: ``load_inline`` torch extension takes a minute or more on two cores). Like a CUDA extension it
#: writes a tensor's memory through raw addresses: no dispatcher op sees the arithmetic.
EXTENSION = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *scale(PyObject *self, PyObject *args) {
  unsigned long long dst, src;
  Py_ssize_t n;
  double a;
  if (!PyArg_ParseTuple(args, "KKnd", &dst, &src, &n, &a)) return NULL;
  float *out = (float *)(uintptr_t)dst;
  const float *in = (const float *)(uintptr_t)src;
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = in[i] * (float)a;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"scale", scale, METH_VARARGS, "out = in * a over n float32 values"},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "yolo_det_test_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_yolo_det_test_ext(void) { return PyModule_Create(&module); }
"""


@pytest.fixture(scope="session")
def extension(tmp_path_factory):
    """The extension compiled and loaded as ``load_inline`` loads its modules: from its file, not put in sys.modules."""
    import importlib.machinery
    import importlib.util
    import shutil
    import subprocess
    import sysconfig

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    build = tmp_path_factory.mktemp("yolo_det_ext")
    source = build / "yolo_det_test_ext.c"
    source.write_text(EXTENSION)
    target = build / ("yolo_det_test_ext" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", str(source),
                    "-o", str(target)], check=True, capture_output=True)
    loader = importlib.machinery.ExtensionFileLoader("yolo_det_test_ext", str(target))
    spec = importlib.util.spec_from_file_location("yolo_det_test_ext", target, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules.pop("yolo_det_test_ext", None)  # single-phase init registers it; the scan must find it without
    return module


def _extension_model(ext):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x, y = x.contiguous(), torch.zeros_like(x, memory_format=torch.contiguous_format)
            ext.scale(y.data_ptr(), x.data_ptr(), x.numel(), 2.0)
            return y

        @staticmethod
        def backward(ctx, grad):
            grad, out = grad.contiguous(), torch.zeros_like(grad, memory_format=torch.contiguous_format)
            ext.scale(out.data_ptr(), grad.data_ptr(), grad.numel(), 2.0)
            return out

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return Scale.apply(self.conv(x))

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 3, 1), nn.Sequential(nn.ReLU(), Head())), Scale


@pytest.mark.slow
def test_compiled_extension_is_named_warned_refused_and_allowed(extension, tmp_path, monkeypatch):
    model, scale = _extension_model(extension)
    result = audit_model(model, imgsz=16)
    by_kind = {f.kind: f for f in result.opaque}
    assert by_kind["extension"].op == "yolo_det_test_ext.scale" and by_kind["extension"].modules == ["1.1"]
    assert "ext.scale(y.data_ptr(), x.data_ptr(), x.numel(), 2.0)" in by_kind["extension"].call
    runtime = by_kind["runtime"]  # found by running it: zeros_like's output filled behind the dispatcher
    assert runtime.op.endswith("Scale") and runtime.modules == ["1.1"] and runtime.phase == "forward, backward"
    assert not result.clean and "outside PyTorch's determinism switch" in "\n".join(result.lines())

    session = yolo_det.configure("warn", seed=0)
    session.track(model)
    _step(model, session)
    session.finish(tmp_path, echo=lambda _: None)
    [record] = json.loads((tmp_path / "determinism.json").read_text())["opaque_kernels"]["ops"]
    assert (record["op"], record["action"], record["modules"]) == ("yolo_det_test_ext.scale", "warned", ["1.1"])

    session = yolo_det.configure("strict", seed=0)
    with pytest.raises(OpaqueKernelError, match=r"yolo_det_test_ext\.scale \(extension\) in module 1\.1"):
        session.track(model)
    monkeypatch.setenv("YOLO_DET_ALLOW", "yolo_det_test_ext.scale")
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    assert torch.isfinite(_step(model, session))
    assert session.opaque.to_dict()["ops"][0]["action"] == "allowed"
    [probed] = probe_model(model, (torch.rand(1, 3, 8, 8),), [runtime.op])
    assert probed.opaque and probed.identical and probed.proves_nothing  # a CPU loop: same bits, proves nothing


def test_audit_cli_names_flash_attn_in_the_area_attention_block(capsys, monkeypatch):
    from yolo_det.cli import main

    monkeypatch.setenv("YOLO_DET_TEST_FLASH", "0")
    code = main(["audit", "--model", f"{FIXTURES / 'area_attention.py'}:build", "--imgsz", "16", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["ops"] == []
    [finding] = result["opaque"]
    assert (finding["op"], finding["modules"], finding["importable"], finding["replaceable"]) == (FLASH, ["1"], False, True)


@pytest.mark.parametrize("name,key", [
    ("flash_attn.flash_attn_interface.flash_attn_func", "flash_attn"),
    ("flash_attn.flash_attn_func", "flash_attn"),
    ("flash_attn.flash_attn_interface.FlashAttnFunc", "flash_attn_other"),
    ("flash_attn_2_cuda.bwd", "flash_attn_other"),
    ("xformers.ops.fmha.memory_efficient_attention", "xformers"),
    ("MultiScaleDeformableAttention.ms_deform_attn_backward", "ms_deform_attn"),
    ("mmcv._ext.ms_deform_attn_forward", "ms_deform_attn"),
    ("mmcv.ops.deform_conv.DeformConv2dPack", "mmcv_ops"),
    ("mmcv.ops.modulated_deform_conv.ModulatedDeformConv2dPack", "mmcv_ops"),
    ("torchvision.ops.roi_align.RoIAlign", "roi_align"),
    ("torchvision.ops.deform_conv.deform_conv2d", "torchvision_ops"),
    ("mamba_ssm.ops.selective_scan_interface.selective_scan_fn", "selective_scan"),
    ("selective_scan_cuda_core.fwd", "selective_scan"),
    # pure-PyTorch code in the same packages is not a finding
    ("mamba_ssm.ops.selective_scan_interface.selective_scan_ref", None),
    ("mmcv.ops.multi_scale_deform_attn.multi_scale_deformable_attn_pytorch", None),
    ("mmcv.ops.point_sample.point_sample", None),
    ("torchvision.ops.boxes.nms", None),
    ("flash_attn.bert_padding.pad_input", None),
])
def test_known_apis_by_qualified_name(name, key):
    from yolo_det.strict.opaque import known_api

    found = known_api(name)
    assert (found.key if found else None) == key
