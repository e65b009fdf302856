"""The op table against the installed torch: names, schemas, CPU alerts, Python routes, the
forward->backward op pairs, and the CUDA kernel names in the installed CUDA binary."""

from __future__ import annotations

import configparser
import contextlib
import mmap
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from yolo_det.strict import replacements
from yolo_det.strict.cuda_emulation import CudaRoutes
from yolo_det.core.determinism import temporary_determinism
from yolo_det.strict.optable import (COLUMNS, TABLE_PATH, Condition, ModuleMatcher, TableError, installed_version,
                              load_table, parse_version)
from yolo_det.core.report import parse_alert

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_table()
V = installed_version()


class _Ops(TorchDispatchMode):
    """Aten op names run inside the block, split into forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.forward, self.backward, self.in_backward = [], [], False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        (self.backward if self.in_backward else self.forward).append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _run(fn, *shape, emulate=False):
    """Forward+backward of ``fn`` on a random tensor (determinism on, warn-only); the ops run.
    ``emulate``: take CUDA's Python-level routes, as on a CUDA device."""
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    ops = _Ops()
    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_determinism("warn"))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        if emulate:
            stack.enter_context(CudaRoutes(emulate=True))
        stack.enter_context(ops)
        out = fn(x)
        out = out[0] if isinstance(out, tuple) else out
        ops.in_backward = True
        if out.requires_grad:
            out.sum().backward()
    return ops


# One CPU call per replaceable/backward row: (function, input shape).
SAMPLES = {
    "upsample_bilinear2d_backward": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (1, 2, 4, 4)),
    "_upsample_bilinear2d_aa_backward": (lambda x: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True), (1, 2, 8, 8)),
    "upsample_bicubic2d_backward": (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), (1, 2, 4, 4)),
    "_upsample_bicubic2d_aa_backward": (lambda x: F.interpolate(x, size=(3, 3), mode="bicubic", antialias=True), (1, 2, 8, 8)),
    "upsample_linear1d_backward": (lambda x: F.interpolate(x, scale_factor=2, mode="linear"), (1, 2, 4)),
    "upsample_trilinear3d_backward": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (1, 2, 3, 3, 3)),
    "upsample_nearest2d_backward": (lambda x: F.interpolate(x, scale_factor=2), (1, 2, 4, 4)),
    "_adaptive_avg_pool2d_backward": (lambda x: F.adaptive_avg_pool2d(x, 3), (1, 2, 8, 8)),
    "_adaptive_avg_pool3d_backward": (lambda x: F.adaptive_avg_pool3d(x, 2), (1, 2, 5, 5, 5)),
    "adaptive_max_pool2d_backward": (lambda x: F.adaptive_max_pool2d(x, 1), (1, 2, 8, 8)),
    "adaptive_max_pool3d_backward": (lambda x: F.adaptive_max_pool3d(x, 2), (1, 2, 5, 5, 5)),
    "max_pool3d_with_indices_backward": (lambda x: torch.nn.MaxPool3d(2)(x), (1, 2, 4, 4, 4)),
    "max_pool2d_with_indices_backward": (lambda x: torch.nn.MaxPool2d(2)(x), (1, 2, 4, 4)),
    "avg_pool3d_backward": (lambda x: torch.nn.AvgPool3d(2)(x), (1, 2, 4, 4, 4)),
    "fractional_max_pool2d_backward": (lambda x: torch.nn.FractionalMaxPool2d(2, output_size=3)(x), (1, 2, 8, 8)),
    "fractional_max_pool3d_backward": (lambda x: torch.nn.FractionalMaxPool3d(2, output_size=3)(x), (1, 2, 8, 8, 8)),
    "reflection_pad1d_backward": (lambda x: F.pad(x, (1, 1), mode="reflect"), (1, 2, 5)),
    "reflection_pad2d_backward": (lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), (1, 2, 5, 5)),
    "reflection_pad3d_backward": (lambda x: F.pad(x, (1,) * 6, mode="reflect"), (1, 2, 4, 4, 4)),
    "replication_pad1d_backward": (lambda x: F.pad(x, (1, 1), mode="replicate"), (1, 2, 5)),
    "replication_pad2d_backward": (lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"), (1, 2, 5, 5)),
    "replication_pad3d_backward": (lambda x: F.pad(x, (1,) * 6, mode="replicate"), (1, 2, 4, 4, 4)),
    "grid_sampler_2d_backward": (lambda x: F.grid_sample(x, torch.zeros(1, 3, 3, 2, dtype=x.dtype), align_corners=False), (1, 2, 4, 4)),
    "grid_sampler_3d_backward": (lambda x: F.grid_sample(x, torch.zeros(1, 2, 2, 2, 3, dtype=x.dtype), align_corners=False), (1, 2, 3, 3, 3)),
    "nll_loss2d_forward": (lambda x: F.cross_entropy(x, torch.zeros(1, 3, 3, dtype=torch.long)), (1, 4, 3, 3)),
    "scatter_add": (lambda x: torch.gather(x, 1, torch.zeros(2, 2, dtype=torch.long)), (2, 3)),
    "index_add": (lambda x: x.index_select(1, torch.tensor([0, 0, 1])), (2, 3)),
}


def test_packaged_table_is_the_configs_table():
    configs = ROOT / "configs" / "op_table.csv"
    assert configs.read_bytes() == TABLE_PATH.read_bytes()
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert "data/*.csv" in setup["options.package_data"]["yolo_det.strict"]
    assert TABLE_PATH.parent.name == "data" and TABLE_PATH.parent.parent.name == "strict"


def test_every_row_is_consistent():
    assert len(TABLE) >= 46
    for row in TABLE:
        where = f"row {row.op} (line {row.line})"
        if row.raises_since and row.deterministic_since:
            assert row.raises_since < row.deterministic_since, where
        assert bool(row.route_since) == bool(row.route_api), where
        if row.raises_since or row.silent:
            assert row.cuda_kernel and row.cuda_kernel != "-", where
        if row.replacement:
            assert callable(getattr(replacements, row.replacement)), where
        assert row.fix or not (row.raises_since or row.silent), where


def test_op_and_argument_names_exist_in_installed_aten():
    for row in TABLE:
        for name in (row.op,) + row.forward_ops:
            assert hasattr(torch.ops.aten, name), f"aten has no op {name} (row {row.op}, line {row.line})"
        packet = getattr(torch.ops.aten, row.op)
        schemas = [getattr(packet, o)._schema for o in packet.overloads()]
        for clause in row.conditions:
            if clause.key == "overload":
                assert set(clause.values) <= {o if o else "default" for o in packet.overloads()}, row.op
            elif clause.key not in ("cublas", "self:floating", "self:quantized"):
                assert any(clause.key in [a.name for a in s.arguments] for s in schemas), (row.op, clause.key)


def _cpu_alert(call) -> str:
    with temporary_determinism("strict"):
        with pytest.raises(RuntimeError) as caught:
            call()
    return parse_alert(str(caught.value))


def test_rows_that_alert_on_cpu_do_with_their_kernel_name():
    pooled, indices = F.max_pool2d(torch.randn(1, 1, 4, 4), 2, return_indices=True)
    pooled3, indices3 = F.max_pool3d(torch.randn(1, 1, 4, 4, 4), 2, return_indices=True)
    calls = {
        "max_unpool2d": lambda: F.max_unpool2d(pooled, indices, 2),
        "max_unpool3d": lambda: F.max_unpool3d(pooled3, indices3, 2),
        "put_": lambda: torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0])),
        "put": lambda: torch.zeros(4).put(torch.tensor([0, 0]), torch.tensor([1.0, 2.0])),
    }
    cpu_rows = [r for r in TABLE if r.cpu_alerts and r.raises(V)]
    assert {r.op for r in cpu_rows} >= set(calls) - {"resize_"}
    for row in cpu_rows:
        if row.op in calls:
            assert _cpu_alert(calls[row.op]) == row.cuda_kernel
    with temporary_determinism("strict"):  # the CUDA-only half of put_ stays quiet on CPU
        torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]), accumulate=True)


@pytest.mark.parametrize("op", ["upsample_bilinear2d_backward", "upsample_bicubic2d_backward",
                                "upsample_trilinear3d_backward", "upsample_linear1d_backward",
                                "replication_pad1d_backward", "replication_pad2d_backward",
                                "replication_pad3d_backward", "max_pool3d_with_indices_backward",
                                "reflection_pad2d_backward"])
def test_route_columns_match_the_installed_torch(op):
    """Run the Python API as CUDA would (emulated): the native forward op disappears exactly
    when the table says the route exists in the installed torch."""
    (row,) = TABLE.rows_for(op)
    fn, shape = SAMPLES[op]
    if op == "max_pool3d_with_indices_backward":
        fn = lambda x: F.max_pool3d(x, 2, return_indices=True)[0]  # noqa: E731  the routed spelling
    native_forward = row.forward_ops[0]
    assert native_forward in _run(fn, *shape).forward  # CPU: always the native kernel
    routed = row.route_since is not None and V >= row.route_since
    assert (native_forward not in _run(fn, *shape, emulate=True).forward) == routed


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_backward_ops_follow_their_forward_ops(op):
    rows = TABLE.rows_for(op)
    assert rows, f"{op} is not in the table"
    fn, shape = SAMPLES[op]
    ops = _run(fn, *shape)
    if rows[0].forward_ops:
        assert op in ops.backward
        assert set(rows[0].forward_ops) & set(ops.forward)
    else:
        assert op in ops.forward


def _binary_strings(path: Path, names) -> set:
    """The ``names`` stored in ``path`` as whole C strings (not as parts of longer strings)."""
    found = set()
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for name in names:
            needle = name.encode() + b"\x00"
            at = data.find(needle)
            while at > 0 and 0x20 <= data[at - 1] <= 0x7E:
                at = data.find(needle, at + 1)
            if at >= 0:
                found.add(name)
    return found


def test_cuda_kernel_names_against_the_installed_cuda_binary():
    """Every kernel the table says alerts in this torch has its name in libtorch_cuda; the
    names of kernels that became deterministic are gone."""
    binary = Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"
    if not binary.is_file():
        pytest.skip("this torch build has no CUDA binary to read")
    # put_'s alert lives in device-generic code (libtorch_cpu); its text is checked on CPU above.
    alerting = {r.cuda_kernel for r in TABLE if r.raises(V) and not r.cpu_alerts and not r.is_env} - {"put_"}
    # kernels whose alert call was removed when they became deterministic (others, such as
    # index_add, keep an unreachable alert in the binary)
    removed = ("reflection_pad2d_backward_cuda", "reflection_pad2d_backward_out_cuda", "cumsum_cuda_kernel",
               "scatter_add_cuda_kernel", "kthvalue CUDA")
    gone = {name for name in removed if all(r.deterministic(V) for r in TABLE.rows_for(name))}
    found = _binary_strings(binary, alerting | gone)
    assert alerting - found == set()
    assert found & gone == set()


def test_versions_and_routes():
    assert parse_version("2.1.0+cu121") == (2, 1)
    assert parse_version("never") is None and parse_version("always") == (0, 0)
    with pytest.raises(ValueError):
        parse_version("latest")
    (bilinear,) = TABLE.rows_for("upsample_bilinear2d_backward_out_cuda")
    assert bilinear.raises((2, 0), routed=True) and bilinear.raises((2, 1))
    assert not bilinear.raises((2, 1), routed=True) and not bilinear.raises((1, 6))
    (pad2d,) = TABLE.rows_for("reflection_pad2d_backward")
    assert pad2d.raises((2, 13)) and not pad2d.raises((2, 14))
    (max3d,) = TABLE.rows_for("adaptive_max_pool3d_backward")
    assert max3d.silent and not max3d.raises((2, 14)) and max3d.nondeterministic((2, 14))
    (kth,) = TABLE.rows_for("kthvalue")
    assert kth.raises((2, 9)) and not kth.raises((2, 10))


def test_lookup_by_kernel_alias_and_aten_spellings():
    for name in ("adaptive_avg_pool2d_backward_cuda", "adaptive_avg_pool2d_backward_out_cuda",
                 "aten::_adaptive_avg_pool2d_backward", "aten._adaptive_avg_pool2d_backward.default",
                 "_adaptive_avg_pool2d_backward"):
        assert [r.op for r in TABLE.rows_for(name)] == ["_adaptive_avg_pool2d_backward"], name
    assert TABLE.rows_for("no_such_op") == []


def test_conditions_select_the_row_for_the_call():
    x, w = torch.tensor([0, 1]), torch.tensor([1.0, 2.0])
    weighted = TABLE.match(torch.ops.aten.bincount.default, (x, w))
    assert [r.deterministic_since for r in weighted] == [None]
    assert [r.deterministic_since for r in TABLE.match(torch.ops.aten.bincount.default, (x,))] == [(2, 1)]
    scores, target = torch.randn(1, 3, 2, 2), torch.zeros(1, 2, 2, dtype=torch.long)
    assert TABLE.match(torch.ops.aten.nll_loss2d_forward.default, (scores, target, None, 1, -100))
    assert not TABLE.match(torch.ops.aten.nll_loss2d_forward.default, (scores, target, None, 0, -100))
    assert TABLE.match(torch.ops.aten.median.dim, (torch.randn(3), 0))
    assert not TABLE.match(torch.ops.aten.median.default, (torch.randn(3),))
    assert Condition.parse("reduce=sum|mean").holds("two", {"reduce": "mean"})
    assert ModuleMatcher.parse("AdaptiveAvgPool2d[output_size!=1]").matches(torch.nn.AdaptiveAvgPool2d((None, 1)))
    assert not ModuleMatcher.parse("AdaptiveAvgPool2d[output_size!=1]").matches(torch.nn.AdaptiveAvgPool2d((1, 1)))


def test_malformed_tables_are_named(tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("op,condition\nx,\n")
    with pytest.raises(TableError, match="missing columns"):
        load_table(missing)
    bad = tmp_path / "bad.csv"
    good_line = TABLE_PATH.read_text().splitlines()[1]
    bad.write_text(",".join(COLUMNS) + "\n" + good_line.replace(",1.7,never,2.1,", ",1.x,never,2.1,", 1) + "\n")
    with pytest.raises(TableError, match=r"line 2.*raises_since"):
        load_table(bad)
    with pytest.raises(TableError, match="cannot read"):
        load_table(tmp_path / "absent.csv")
