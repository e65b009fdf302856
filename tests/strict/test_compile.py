"""torch.compile under strict and warn (yolo_det/strict/compiled.py, the session's guard, causes).

Real Inductor compiles (CPU, its C++ back end) of a tiny convolutional model: two strict compiled runs are
bit-identical; a nondeterministic-on-CUDA op inside a compiled backward graph is named with its module under
warn and refused under strict; modes that tune by timing are refused under strict with their reason; the
report's ``compile`` section; compiled-vs-eager named first by the causes. One module fixture compiles each
configuration once (each cold compile costs a few seconds on two cores).
"""

from __future__ import annotations

import copy
import shutil
import types

import pytest
import torch
from torch import nn

import yolo_det
from yolo_det import session as runtime
from yolo_det.proof import causes, compiled_eager
from yolo_det.strict import compiled

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU back end needs a C++ compiler")


class Tiny(nn.Module):
    """Conv and SiLU, and optionally an adaptive max pool (no deterministic CUDA backward): few generated
    kernels, since each costs seconds of C++ compilation on two cores."""

    def __init__(self, pool: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU())
        self.pool = nn.AdaptiveMaxPool2d(2) if pool else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        return (self.pool(y) if self.pool is not None else y).square().mean()


def train(mode: str, pool: bool = False, compile_model: bool = True, steps: int = 3, **configure):
    """A few SGD steps of :class:`Tiny` under ``mode`` (compiled unless told); (weights, report, error)."""
    torch._dynamo.reset()  # each run compiles afresh, as a new process would
    torch.manual_seed(0)
    model = Tiny(pool)
    data = torch.randn(steps, 4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    session = yolo_det.configure(mode, seed=0, **configure)
    session.track(model)
    run = torch.compile(model) if compile_model else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    error = None
    try:
        for batch in data:
            loss = run(batch)
            with session.backward():
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    except Exception as exc:  # noqa: BLE001  (the test reads what strict raised)
        error = runtime.explained_error(exc)
    session.finish(echo=lambda _: None, restore_flags=True)
    report = session.to_dict()  # as determinism.json is written: after the session put Inductor's settings back
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return weights, report, error


@pytest.fixture(scope="module")
def runs():
    """Each configuration trained once: strict compiled twice, eager strict, warn and strict with the pool.
    Inductor's default cache folder is kept (a fresh one costs half a minute of C++ builds that probe the
    CPU): a strict run may read its graphs from the FX graph cache, which strict keeps (a cached graph passed
    the same scan); warn bypasses it and a refused graph is never cached, so those two always scan."""
    out = {
        "strict_a": train("strict"),
        "strict_b": train("strict"),
        "eager": train("strict", compile_model=False),
        "warn_pool": train("warn", pool=True),
        "strict_pool": train("strict", pool=True, ops="native"),  # not replaced: refused
    }
    torch._dynamo.reset()
    return out


def identical(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- real compiled runs ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_strict_compiled_runs_are_bit_identical_and_report_the_settings(runs):
    (wa, ra, ea), (wb, rb, eb) = runs["strict_a"], runs["strict_b"]
    assert ea is None and eb is None
    assert identical(wa, wb)
    section = ra["compile"]
    assert section["settings"]["deterministic"] is True and section["settings"]["fallback_random"] is True
    assert section["mode"] == "default" and section["op_scan"].startswith("cached graphs kept")
    assert section["graphs"] in (0, 2) and rb["compile"]["graphs"] in (0, 2)  # forward and backward, or cached
    assert section["ops"] == [] and section["unchecked"] == []
    assert ra["violations"]["ops"] == []


@pytest.mark.slow
def test_strict_settings_are_undone_when_the_session_ends(runs):
    config = compiled.inductor_config()
    assert config.deterministic is False and config.fallback_random is False
    assert config.post_grad_custom_post_pass is None
    assert not hasattr(torch.compile, "_yolo_det_guard")


@pytest.mark.slow
def test_a_nondeterministic_op_in_a_compiled_graph_is_named_under_warn(runs):
    _, report, error = runs["warn_pool"]
    assert error is None
    ops = {r["op"]: r for r in report["violations"]["ops"]}
    assert ops["adaptive_max_pool2d_backward_cuda"]["action"] == "warned"
    found = [o for o in report["compile"]["ops"] if o["op"] == "adaptive_max_pool2d_backward"]
    assert found and found[0]["modules"] == ["pool (AdaptiveMaxPool2d)"]
    assert "backward" in found[0]["graph"] and report["compile"]["graphs"] == 2  # warn scans every graph


@pytest.mark.slow
def test_a_nondeterministic_op_in_a_compiled_graph_is_refused_under_strict(runs):
    weights, report, error = runs["strict_pool"]
    assert isinstance(error, runtime.NondeterministicOpError)
    message = str(error)
    assert "adaptive_max_pool2d_backward_cuda does not have a deterministic implementation" in message
    assert "pool (AdaptiveMaxPool2d)" in message and "compiled graph" in message
    assert "deterministic_allow: [adaptive_max_pool2d_backward_cuda]" in message
    ops = {r["op"]: r for r in report["violations"]["ops"]}
    assert ops["adaptive_max_pool2d_backward_cuda"]["action"] == "raised"
    assert ops["adaptive_max_pool2d_backward_cuda"]["count"] == 1


@pytest.mark.slow
def test_compiled_and_eager_runs_are_named_compile_first(runs):
    (_, compiled_report, _), (_, eager_report, _) = runs["strict_a"], runs["eager"]
    assert "compile" not in eager_report
    found = causes.report_causes(compiled_report, eager_report)
    assert found[0].what == "compile" and "run A was compiled" in found[0].message
    assert "'default'" in found[0].message


# -- what strict refuses, what warn notes (no compile runs) -------------------------------------------------

@pytest.mark.parametrize("kwargs, reason", [
    (dict(mode="max-autotune"), "mode='max-autotune' picks kernels by timing"),
    (dict(mode="max-autotune-no-cudagraphs"), "picks kernels by timing"),
    (dict(mode="reduce-overhead"), "records CUDA graphs"),
    (dict(backend="aot_eager"), "backend='aot_eager'"),
    (dict(options={"max_autotune": True}), "options['max_autotune']=True"),
    (dict(options={"deterministic": False}), "turns Inductor's deterministic mode off"),
])
def test_strict_refuses_compiles_that_cannot_be_deterministic(kwargs, reason):
    session = yolo_det.configure("strict", seed=0)
    with pytest.raises(compiled.CompileRefused, match="training does not start") as caught:
        torch.compile(Tiny(), **kwargs)
    assert reason in str(caught.value) and "mode='default'" in str(caught.value)
    assert reason in session.to_dict()["compile"]["refused"][0]


def test_warn_compiles_and_names_what_it_could_not_check():
    session = yolo_det.configure("warn", seed=0)
    torch.compile(Tiny(), mode="max-autotune")  # lazy: nothing compiles before the first call
    section = session.to_dict()["compile"]
    assert section["mode"] == "max-autotune"
    assert any("picks kernels by timing" in text for text in section["unchecked"])


def test_strict_accepts_default_compile_and_off_does_not_guard():
    session = yolo_det.configure("strict", seed=0)
    torch.compile(Tiny())
    assert session.to_dict()["compile"]["calls"][0] == {"backend": "inductor", "mode": "default", "options": {}}
    session.finish(echo=lambda _: None)
    session = yolo_det.configure("off", seed=0)
    assert not hasattr(torch.compile, "_yolo_det_guard")
    assert "compile" not in session.to_dict()


def test_a_torch_without_inductors_deterministic_mode_is_refused_naming_the_feature():
    older = types.SimpleNamespace(fallback_random=False, post_grad_custom_post_pass=None)
    message = compiled.refusal("inductor", "default", config=older, torch_version="2.4.1")
    assert "torch 2.4.1 lacks deterministic (Inductor's deterministic mode" in message
    assert "fallback_random" not in message.split("lacks", 1)[1].split(".", 1)[0]
    assert compiled.warn_note("inductor", "default", config=older).startswith("torch.compile under deterministic=warn")
    assert compiled.refusal("inductor", "default") is None  # this torch has every feature


def test_strict_keeps_inductors_cache_and_warn_bypasses_it():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    keyed = compiled.make_pass(lambda graph: None, cacheable=True, key="strict")
    assert isinstance(keyed, CustomGraphPass) and keyed.uuid().startswith("yolo-det-op-scan:strict:")
    assert copy.deepcopy(keyed) is keyed  # config patches copy it; the session's pass stays one
    plain = compiled.make_pass(lambda graph: None, cacheable=False)
    assert not isinstance(plain, CustomGraphPass)  # Inductor bypasses its FX graph cache: every run is scanned


@pytest.mark.parametrize("raw, path", [
    ("L['self'].pool", "pool"),
    ("L['self'].model[0]._modules['conv']", "model.0.conv"),
    ("L['self'].stem._modules['1']", "stem.1"),
    ("L['self']", "(model)"),
])
def test_dynamos_module_paths_read_as_module_names(raw, path):
    assert compiled.module_path(raw) == path


def test_an_allowed_op_in_a_compiled_graph_is_reported_not_raised():
    session = yolo_det.configure("strict", seed=0, allow=["adaptive_max_pool2d_backward_cuda"])
    entry = {"op": "adaptive_max_pool2d_backward", "cuda_kernel": "adaptive_max_pool2d_backward_cuda",
             "graph": "compiled graph 0/0 (backward)", "modules": ["pool (AdaptiveMaxPool2d)"]}
    session._compiled_op(entry)
    assert entry["action"] == "allowed"
    assert session.report.records["adaptive_max_pool2d_backward_cuda"].action == "allowed"


def test_compile_causes_name_mode_and_drop_last():
    eager = {"ultralytics": {"compile": False, "train_loader": {"drop_last": False}}}
    compiled_run = {"ultralytics": {"compile": True, "train_loader": {"drop_last": True}},
                    "compile": {"calls": [{"mode": "default"}], "mode": "default"}}
    found = causes.compile_causes(eager, compiled_run)
    assert len(found) == 1 and found[0].what == "compile"
    assert "run B was compiled" in found[0].message and "drop_last=False in A, True in B" in found[0].message
    other = copy.deepcopy(compiled_run)
    other["compile"]["mode"] = "max-autotune"
    assert "'default' vs 'max-autotune'" in causes.compile_causes(compiled_run, other)[0].message
    assert causes.compile_causes(compiled_run, copy.deepcopy(compiled_run)) == []


# -- compiled vs eager, named (yolo_det/proof/compiled_eager.py) --------------------------------------------

class Shifted(nn.Module):
    """Adds ``amount`` only when compiled: a difference injected into compiled kernels at a known module and line."""

    def __init__(self, amount: float = 1e-3) -> None:
        super().__init__()
        self.amount = amount

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.amount if compiled.compiling() else x


@pytest.mark.slow
def test_compiled_vs_eager_names_where_a_difference_starts():
    model = Tiny()
    model.stem.append(Shifted())
    data = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = compiled_eager.compare(model, data)
    assert identical(before, model.state_dict()) and all(p.grad is None for p in model.parameters())
    settings, lacking = compiled_eager.eager_equal_settings()
    assert result["settings"] == settings and settings["deterministic"] is True and result["graphs"] >= 1
    assert not result["identical"] and not result["loss"]["identical"]
    modules = {m["module"]: m for m in result["modules"]}
    assert modules["stem.2"]["origin"] and modules["stem.2"]["input_identical"]
    assert modules["stem.2"]["max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert modules["stem.1"]["identical"] or modules["stem.1"]["origin"]  # before the shift: its own kernels
    assert not modules["stem"]["origin"] and not modules["(model)"]["origin"]  # they inherit it
    ops = modules["stem.2"]["ops"]
    assert ops and ops[0]["op"] == "add" and "test_compile.py" in ops[0]["source"] and "self.amount" in ops[0]["source"]
    assert {g["parameter"] for g in result["gradients"]} == {"stem.0.weight", "stem.0.bias"}
    text = compiled_eager.format_comparison(result, "Tiny")
    assert "NOT bit-identical" in text and "stem.2 (Shifted)" in text and "op add" in text


# -- locate on a compiled run (record/capture.py, proof/locate.py) ---------------------------------------------

def captured_step(path, amount: float):
    """Step 1 of a strict compiled run of Tiny with a compile-only shift of ``amount``, op-captured as ``locate``'s
    re-runs capture it (Inductor's caches off, as in those re-runs); the capture's records."""
    import torch._functorch.config as functorch_config

    from yolo_det.record.capture import StepCapture, read_capture

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Tiny()
    model.stem.append(Shifted(amount))
    data = torch.randn(1, 2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    session = yolo_det.configure("strict", seed=0)
    session.track(model)
    capture = StepCapture(1, path, lambda: [(model, "")], exit_when_done=False, graphs=session.compiled_graphs)
    run = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with compiled.inductor_config().patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            for number, batch in enumerate(data, 1):
                capture.on_batch()
                run(batch).backward()
                capture.on_step_begin(number)
                optimizer.step()
                optimizer.zero_grad()
                capture.on_step_end(number)
    finally:
        session.finish(echo=lambda _: None, restore_flags=True)
        torch._dynamo.reset()
    return read_capture(path)[1]


@pytest.mark.slow
def test_locate_names_the_compiled_graph_with_its_source_ops_and_modules(tmp_path):
    from yolo_det.proof.locate import compare_captures

    a = captured_step(tmp_path / "a.jsonl", 1e-3)
    b = captured_step(tmp_path / "b.jsonl", 2e-3)
    ops = [(r["op"], r["phase"]) for r in a if not r.get("pre")]
    assert ("compiled forward", "forward") in ops and ("compiled backward", "backward") in ops
    assert any(op == "aten.convolution_backward.default" for op, _ in ops)  # an ATen kernel the backward calls
    location = compare_captures(a, b, 1)
    assert location.op == "compiled forward" and location.phase == "forward" and location.module == "(model)"
    assert location.cause == "kernel" and "Inductor generated" in location.detail
    forward = [g for g in location.graphs if g["direction"] == "forward"]
    assert forward and forward[0]["graph"].startswith("compiled graph") and "(forward)" in forward[0]["graph"]
    described = "\n".join(forward[-1]["ops"])
    assert "stem.0 (Conv2d): convolution" in described
    assert "stem.2 (Shifted): add" in described and "test_compile.py" in described and "self.amount" in described
    text = "\n".join(location.describe())
    assert "located: step 1, forward, op compiled forward in module (model)" in text
    assert "stem.2 (Shifted): add" in text


# -- a script's own torch.compile, however it is reached ------------------------------------------------------

@pytest.mark.slow
def test_strict_refuses_max_autotune_from_a_compile_bound_before_the_session():
    early_compile = torch.compile.__wrapped__ if hasattr(torch.compile, "__wrapped__") else torch.compile
    torch._dynamo.reset()
    session = yolo_det.configure("strict", seed=0)  # after the script bound torch.compile (from torch import compile)
    try:
        run = early_compile(Tiny(), mode="max-autotune-no-cudagraphs")
        with pytest.raises(Exception) as caught:
            run(torch.randn(2, 3, 16, 16))
        error = runtime.explained_error(caught.value)
        assert isinstance(error, compiled.CompileRefused)
        assert "max_autotune=True picks kernels by timing" in str(error) and "mode='default'" in str(error)
        assert session.to_dict()["compile"]["refused"]
    finally:
        session.finish(echo=lambda _: None, restore_flags=True)
        torch._dynamo.reset()


def shifted_tiny() -> nn.Module:
    """Tiny with a compile-only shift after its SiLU (``yolo-det compile-check test_compile:shifted_tiny``)."""
    model = Tiny()
    model.stem.append(Shifted())
    return model


@pytest.mark.slow
def test_compile_check_command_names_where_compiled_and_eager_part(tmp_path):
    import json

    from support.cli import cli

    out = cli("compile-check", "test_compile:shifted_tiny", "--input", "2,3,16,16", "--json", str(tmp_path / "c.json"))
    assert out.returncode == 1, out.stdout + out.stderr  # a finding: they differ
    assert "NOT bit-identical" in out.stdout and "stem.2 (Shifted), call 0" in out.stdout
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["identical"] is False and "stem.2" in [m["module"] for m in saved["origins"]]
    assert cli("compile-check", "test_compile:shifted_tiny", "--input", "2x3").returncode == 2


# -- compile-check when nothing (or not all) was compiled: not proven ------------------------------------------

class NoGraph(nn.Module):
    """A forward Dynamo skips (``@torch.compiler.disable``): the "compiled" copy runs eagerly, no graph."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @torch.compiler.disable
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


class OneBreak(nn.Module):
    """Two linear layers with a graph break between them: two graphs, the code between them eager."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(y)


class WholeGraph(nn.Module):
    """Linear and ReLU in one graph: ATen's matmul in both copies, an exact ReLU, so bit-identical."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


@pytest.mark.parametrize("factory, verdict, code, graphs, said", [
    ("NoGraph", "not proven", 3, 0, "no graph"),
    ("OneBreak", "not proven", 3, 2, "graph break"),
    ("WholeGraph", "identical", 0, 1, "bit-identical"),
])
def test_compile_check_is_not_proven_where_dynamo_compiled_no_graph_or_broke_it(factory, verdict, code, graphs, said,
                                                                               tmp_path):
    import json

    from support.cli import cli

    out = cli("compile-check", f"test_compile:{factory}", "--input", "2,4", "--json", str(tmp_path / "c.json"))
    assert out.returncode == code, out.stdout + out.stderr
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["verdict"] == verdict and saved["graphs"] == graphs
    assert said in out.stdout
    assert "hooks" in out.stdout and "fus" in out.stdout  # the check's own hooks change what Inductor fuses
    if verdict == "not proven":
        assert "NOT PROVEN" in out.stdout and "bit-identical:" not in out.stdout
        assert saved["not_proven"], saved  # the reasons, in the JSON too
    if factory == "OneBreak":
        assert saved["graph_breaks"] and saved["graph_breaks"][0]["count"] >= 1
        assert "graph_break()" in out.stdout  # Dynamo's own reason for the break
    else:
        assert all(b["count"] >= 1 for b in saved["graph_breaks"])
