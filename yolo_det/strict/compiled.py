"""``torch.compile`` under strict and warn: Inductor made deterministic, what cannot be refused, ops checked.

A :class:`Guard` is installed by the session (strict and warn) for the length of a run. It

* switches on Inductor's deterministic settings, feature-detected on ``torch._inductor.config``:
  ``deterministic`` (no on-device benchmarking that changes numerics) and ``fallback_random`` (eager's
  RNG for random ops); ``batch_invariant`` and ``numerics`` are recorded, not changed;
* wraps ``torch.compile`` (and so ``nn.Module.compile`` and Ultralytics' ``attempt_compile``, which call
  it) to see the backend, mode and options of each compile: under strict it refuses what cannot be
  deterministic (:func:`refusal`), under warn it notes what could not be checked (:func:`warn_note`);
* adds a post-grad pass (``torch._inductor.config.post_grad_custom_post_pass``) that reads each graph
  Inductor lowers, forward and backward, and hands every aten op of the nondeterministic-op table
  (:mod:`.optable`, judged for CUDA in the installed torch) with the module that ran it (from the
  nodes' ``nn_module_stack`` / ``fwd_nn_module_stack``) to the session, which refuses it under strict
  and reports it under warn, as for eager ops. Ops fused into generated kernels raise no alert of their
  own; this scan is how they are still checked.

FX graph cache: under strict without an allow-list the pass is a ``CustomGraphPass`` whose ``uuid`` names
the table, the torch release and the mode, so a cached graph is one that passed the same scan (a refused
graph is never cached). Under warn (and strict with an allow-list) the pass is a plain function, which
makes Inductor bypass its cache so that every run reports its ops.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import torch

from ..core.stack_trace import module_path, source_line
from .optable import installed_version, load_table

#: settings yolo-det switches on; strict refuses to compile without them
REQUIRED = {
    "deterministic": "Inductor's deterministic mode (torch._inductor.config.deterministic: no on-device benchmarking "
                     "that changes numerics)",
    "fallback_random": "eager RNG semantics in compiled graphs (torch._inductor.config.fallback_random)",
    "post_grad_custom_post_pass": "a post-grad custom pass (torch._inductor.config.post_grad_custom_post_pass), "
                                  "through which yolo-det checks the ops of lowered graphs",
}
#: settings recorded in the report, not changed
RECORDED = ("batch_invariant", "numerics")
#: torch.compile modes and what strict says about them
REFUSED_MODES = {
    "max-autotune": "picks kernels by timing candidates on this device",
    "max-autotune-no-cudagraphs": "picks kernels by timing candidates on this device",
    "reduce-overhead": "records CUDA graphs, whose replay yolo-det has not verified under strict "
                       "(captured kernels and a reused memory pool)",
}
#: Inductor options (torch.compile(options=...)) that choose kernels by timing or capture CUDA graphs
REFUSED_OPTIONS = {
    "max_autotune": "picks kernels by timing candidates on this device",
    "max_autotune_gemm": "picks GEMM kernels by timing candidates on this device",
    "max_autotune_pointwise": "picks pointwise kernels by timing candidates on this device",
    "coordinate_descent_tuning": "tunes kernel launch configurations by timing them on this device",
    "triton.cudagraphs": "records CUDA graphs, whose replay yolo-det has not verified under strict",
    "deterministic": "turns Inductor's deterministic mode off",
    "fallback_random": "turns eager RNG semantics in compiled graphs off",
}


class CompileRefused(RuntimeError):
    """Strict refused a ``torch.compile`` call; the message says why and what to do."""


def compiling() -> bool:
    """Whether Dynamo is tracing now (inside ``torch.compile``); False on a torch without it. Global module hooks
    return early then: they fire again, eagerly, for the compiled wrapper (``OptimizedModule``)."""
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    return bool(check()) if check is not None else False


def inductor_config() -> Optional[Any]:
    """``torch._inductor.config``, or None where Inductor cannot be imported."""
    try:
        import torch._inductor.config as config
    except Exception:  # noqa: BLE001  (no Inductor in this torch build)
        return None
    return config


def features(config: Any = None) -> Dict[str, bool]:
    """Which of the settings yolo-det uses this torch's Inductor has (by attribute, not version)."""
    config = inductor_config() if config is None else config
    names = tuple(REQUIRED) + RECORDED
    return {name: config is not None and hasattr(config, name) for name in names}


def missing(config: Any = None) -> List[str]:
    """The required Inductor settings this torch lacks, each described."""
    found = features(config)
    return [f"{name} ({REQUIRED[name]})" for name in REQUIRED if not found[name]]


def _backend_name(backend: Any) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None) or type(backend).__name__


def _reasons(backend: Any, mode: Optional[str], options: Optional[Mapping[str, Any]]) -> List[str]:
    """Why a compile with these arguments cannot be vouched for (empty: it can)."""
    reasons = []
    name = _backend_name(backend)
    if name != "inductor":
        reasons.append(f"backend={name!r}: yolo-det checks the graphs Inductor lowers, and makes only Inductor "
                       "deterministic")
    if mode in REFUSED_MODES:
        reasons.append(f"mode={mode!r} {REFUSED_MODES[mode]}")
    for key, value in (options or {}).items():
        if key in REFUSED_OPTIONS and (bool(value) if key not in ("deterministic", "fallback_random") else not value):
            reasons.append(f"options[{key!r}]={value!r} {REFUSED_OPTIONS[key]}")
    return reasons


def refusal(backend: Any = "inductor", mode: Optional[str] = None, options: Optional[Mapping[str, Any]] = None,
            config: Any = None, torch_version: Optional[str] = None) -> Optional[str]:
    """The strict-mode refusal of a ``torch.compile`` with these arguments, or None when strict accepts it."""
    lacking = missing(config)
    reasons = _reasons(backend, mode, options)
    if not lacking and not reasons:
        return None
    version = torch_version or torch.__version__
    lines = ["yolo-det strict: torch.compile cannot be made deterministic here, so training does not start:"]
    if lacking:
        lines.append(f"  torch {version} lacks " + "; ".join(lacking) + ". Upgrade torch (Inductor has these "
                     "settings from 2.9 on, feature-detected), or train without compile.")
    lines.extend(f"  {reason}." for reason in reasons)
    lines.append("Options: compile with backend='inductor' and mode='default' (Ultralytics: compile=True); "
                 "or train without compile; or run with --deterministic warn to compile and get a report "
                 "that names what could not be checked.")
    return "\n".join(lines)


def warn_note(backend: Any = "inductor", mode: Optional[str] = None, options: Optional[Mapping[str, Any]] = None,
              config: Any = None) -> Optional[str]:
    """What a warn-mode run cannot check about a compile with these arguments (None: everything is checked)."""
    parts = [f"torch {torch.__version__} lacks {item}" for item in missing(config)]
    parts.extend(_reasons(backend, mode, options))
    if not parts:
        return None
    return ("torch.compile under deterministic=warn: " + "; ".join(parts)
            + ". Compiled graphs may differ between runs there; use mode='default' with the inductor backend "
              "(and --deterministic strict) for a checked run.")


# -- the op scan -------------------------------------------------------------------------------------------

def _node_module(node: Any) -> Tuple[Optional[str], Optional[str]]:
    """(module path, class name) of the module that ran a node, from its forward or backward stack."""
    for key in ("fwd_nn_module_stack", "nn_module_stack"):
        stack = node.meta.get(key) if hasattr(node, "meta") else None
        if stack:
            raw, klass = list(stack.values())[-1]
            name = klass if isinstance(klass, str) else getattr(klass, "__name__", str(klass))
            return module_path(str(raw)), name.rsplit(".", 1)[-1]
    return None, None


def _compile_id() -> str:
    try:
        from torch._guards import CompileContext

        found = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001  (older torch: no compile ids)
        found = None
    return str(found) if found is not None else "?"


def scan_graph(graph: Any, table: Any = None) -> List[Dict[str, Any]]:
    """The table's nondeterministic-on-CUDA ops in one lowered FX graph: op, modules, node count, graph name."""
    table = table or load_table()
    version = installed_version()
    backward = any("fwd_nn_module_stack" in getattr(n, "meta", {}) for n in graph.nodes)
    name = f"compiled graph {_compile_id()} ({'backward' if backward else 'forward'})"
    found: Dict[str, Dict[str, Any]] = {}
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        rows = table.by_op.get(node.target.overloadpacket.__name__)
        if not rows:
            continue
        overload = node.target._overloadname or "default"
        if not any(r.applies(overload, None) and r.nondeterministic(version) for r in rows):
            continue
        op = node.target.overloadpacket.__name__
        kernel = next((r.cuda_kernel for r in rows if r.cuda_kernel and r.cuda_kernel != "-"), op)
        entry = found.setdefault(op, {"op": op, "cuda_kernel": kernel, "graph": name, "nodes": 0, "modules": []})
        entry["nodes"] += 1
        path, klass = _node_module(node)
        if path is not None:
            label = f"{path} ({klass})"
            if label not in entry["modules"]:
                entry["modules"].append(label)
    return list(found.values())


#: the most ops one graph's description keeps (a detection model's graph has hundreds)
DESCRIBED_OPS = 400


def describe_graph(graph: Any) -> Dict[str, Any]:
    """One lowered graph as ``{"graph": name, "ops": ["module (Class): aten_op  <- file:N in fn: code"]}``:
    each op with the module that ran it and its source line, where Inductor kept them in the nodes' meta
    (``nn_module_stack`` / ``fwd_nn_module_stack``, ``stack_trace``), in graph order, without repeats."""
    backward = any("fwd_nn_module_stack" in getattr(n, "meta", {}) for n in graph.nodes)
    name = f"compiled graph {_compile_id()} ({'backward' if backward else 'forward'})"
    ops: List[str] = []
    seen = set()
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        path, klass = _node_module(node)
        where = f"{path} ({klass})" if path is not None else "(model)"
        text = f"{where}: {node.target.overloadpacket.__name__}"
        source = source_line(node.meta.get("stack_trace", ""))
        if source:
            text += f"  <- {source}"
        if text not in seen and len(ops) < DESCRIBED_OPS:
            seen.add(text)
            ops.append(text)
    return {"graph": name, "direction": "backward" if backward else "forward", "ops": ops}


def _table_digest() -> str:
    table = load_table()
    with open(table.source, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def make_pass(on_graph: Callable[[Any], None], cacheable: bool, key: str = "") -> Any:
    """The post-grad pass calling ``on_graph(graph)``: a ``CustomGraphPass`` (FX cache kept, keyed by
    ``key``) when ``cacheable``, else a plain function (Inductor bypasses its cache)."""
    if not cacheable:
        def yolo_det_op_scan(graph: Any) -> None:
            on_graph(graph)
        return yolo_det_op_scan
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class OpScan(CustomGraphPass):
        """yolo-det's scan of lowered graphs for nondeterministic ops."""

        def __call__(self, graph: Any) -> None:
            on_graph(graph)

        def uuid(self) -> str:
            return f"yolo-det-op-scan:{key}:{_table_digest()}:{torch.__version__}"

        def __deepcopy__(self, memo: Any) -> "OpScan":  # config patches copy values; the session stays one
            return self

    return OpScan()


class Guard:
    """Inductor's deterministic settings, the ``torch.compile`` wrapper and the op scan, for one session.

    ``on_op(entry)`` is called for each table op found in a lowered graph (it may raise to refuse);
    ``record`` is the report's ``compile`` section, filled in as the run compiles.
    """

    def __init__(self, mode: str, allow: Iterable[str], on_op: Callable[[Dict[str, Any]], None]) -> None:
        self.mode = mode
        self.allow = tuple(allow)
        self.on_op = on_op
        self.record: Dict[str, Any] = {}
        self.config: Any = None
        self._active = False
        self._saved: Dict[str, Any] = {}
        self._original_compile: Optional[Callable] = None
        self._pass: Any = None
        #: each graph lowered in this process, described (:func:`describe_graph`): what ``locate``'s capture names
        self.graphs: List[Dict[str, Any]] = []

    @property
    def strict(self) -> bool:
        return self.mode == "strict"

    # -- life cycle ------------------------------------------------------------------------------------
    def install(self) -> "Guard":
        """Wrap ``torch.compile``; switch the settings on and add the pass now if Inductor's config is loaded
        (``torch.use_deterministic_algorithms`` loads it, so after the session's flags it is), else at the first
        ``torch.compile`` (importing it costs about 2 s)."""
        if getattr(torch, "compile", None) is not None and self._original_compile is None:
            self._original_compile = torch.compile
            torch.compile = self._wrap(torch.compile)
        if "torch._inductor.config" in sys.modules:
            self.activate()
        return self

    def activate(self) -> None:
        """Switch Inductor's deterministic settings on and add the op scan (once)."""
        if self._active:
            return
        self._active = True
        self.config = config = inductor_config()
        if config is None:
            return
        found = features(config)
        for name in ("deterministic", "fallback_random"):
            if found[name]:
                self._saved[name] = getattr(config, name)
                setattr(config, name, True)
        self.record["settings"] = self._settings()
        if found["post_grad_custom_post_pass"]:
            previous = config.post_grad_custom_post_pass
            self._saved["post_grad_custom_post_pass"] = previous
            cacheable = self.strict and not self.allow
            self._pass = make_pass(self._on_graph, cacheable, key=f"{self.mode}")
            config.post_grad_custom_post_pass = self._pass if previous is None else _chain(previous, self._pass)

    def remove(self) -> None:
        """Restore the settings, the pass and ``torch.compile`` as they were before :meth:`install`."""
        if self._active and (self.record.get("calls") or self.record.get("graphs")):
            self.describe()  # the settings as this run compiled with them, before they are put back
        self._active = False
        if self.config is not None:
            for name, value in self._saved.items():
                setattr(self.config, name, value)
        self._saved = {}
        if self._original_compile is not None:
            torch.compile = self._original_compile
            self._original_compile = None

    # -- torch.compile -----------------------------------------------------------------------------------
    def _wrap(self, original: Callable) -> Callable:
        guard = self

        def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001  (torch.compile's own name)
            if kwargs.get("disable"):
                return original(model, **kwargs)
            guard.check(kwargs.get("backend", "inductor"), kwargs.get("mode"), kwargs.get("options"))
            return original(model, **kwargs)

        compile.__doc__ = original.__doc__
        compile.__wrapped__ = original  # type: ignore[attr-defined]
        compile._yolo_det_guard = self  # type: ignore[attr-defined]
        return compile

    def check(self, backend: Any = "inductor", mode: Optional[str] = None,
              options: Optional[Mapping[str, Any]] = None) -> None:
        """Refuse (strict, :class:`CompileRefused`) or note (warn) one compile; record its settings."""
        self.activate()
        if self.strict:
            message = refusal(backend, mode, options, self.config)
            if message:
                self.record.setdefault("refused", []).append(message)
                raise CompileRefused(message)
        note = None if self.strict else warn_note(backend, mode, options, self.config)
        calls = self.record.setdefault("calls", [])
        calls.append({"backend": _backend_name(backend), "mode": mode or "default",
                      "options": {k: repr(v) for k, v in (options or {}).items()}})
        self.record.setdefault("unchecked", [])
        if note and note not in self.record["unchecked"]:
            self.record["unchecked"].append(note)
        self.describe()

    def describe(self) -> Dict[str, Any]:
        """The report's ``compile`` section: settings as set, features, modes, graphs scanned, what is unchecked."""
        config = self.config
        found = features(config)
        self.record["mode"] = ", ".join(sorted({c["mode"] for c in self.record.get("calls", [])})) or "unknown"
        if "settings" not in self.record:  # else: as at activation or the last graph lowered (not as now)
            self.record["settings"] = self._settings()
        self.record["features"] = found
        self.record["op_scan"] = "cached graphs kept (pass keyed)" if self.strict and not self.allow else (
            "every graph scanned (FX graph cache bypassed)")
        self.record.setdefault("graphs", 0)
        self.record.setdefault("ops", [])
        unchecked = self.record.setdefault("unchecked", [])
        if not found["post_grad_custom_post_pass"]:
            text = "ops inside compiled graphs (this torch has no post-grad custom pass)"
            if text not in unchecked:
                unchecked.append(text)
        return self.record

    def _settings(self) -> Dict[str, Any]:
        config = self.config
        found = features(config)
        return {name: getattr(config, name) for name in ("deterministic", "fallback_random") + RECORDED
                if config is not None and found[name]}

    def _check_lowering(self, config: Any) -> None:
        """Refuse (strict) or note (warn) a graph lowered with kernel timing or CUDA graphs switched on: a
        compile the wrapper did not see (``torch.compile`` bound before the session, ``torch._dynamo.optimize``,
        a model compiled before ``configure()``) is still held to the same rules."""
        reasons = lowering_reasons(config) if config is not None else []
        if not reasons:
            return
        if self.strict:
            message = ("yolo-det strict: a graph was being compiled with settings that cannot be deterministic, so "
                       "training does not continue:\n" + "\n".join(f"  torch._inductor.config.{r}." for r in reasons)
                       + "\nOptions: compile with mode='default' and no such options (Ultralytics: compile=True), "
                       "after yolo_det.configure(); or run with --deterministic warn to compile and get a report.")
            if message not in self.record.setdefault("refused", []):
                self.record["refused"].append(message)
            raise CompileRefused(message)
        note = "a graph was lowered with " + "; ".join(reasons)
        unchecked = self.record.setdefault("unchecked", [])
        if note not in unchecked:
            unchecked.append(note)

    # -- the pass ------------------------------------------------------------------------------------------
    def _on_graph(self, graph: Any) -> None:
        """Scan one lowered graph. ``torch.use_deterministic_algorithms(mode)`` also sets Inductor's
        ``deterministic`` (torch >= 2.10): a call with False since activation (a script's own) would lower this
        graph without it, so the settings are put back here, before code generation, and recorded as lowered."""
        if "settings" not in self.record:
            self.describe()
        config = self.config
        if config is not None:
            for name in ("deterministic", "fallback_random"):
                if name in self._saved and not getattr(config, name):
                    setattr(config, name, True)
                    note = (f"torch._inductor.config.{name} was off when a graph was lowered (a call of "
                            "torch.use_deterministic_algorithms(False) turns it off): yolo-det switched it on again")
                    if note not in self.record.setdefault("notes", []):
                        self.record["notes"].append(note)
        self.record["settings"] = self._settings()
        self._check_lowering(config)
        self.record["graphs"] = self.record.get("graphs", 0) + 1
        self.graphs.append(describe_graph(graph))
        for entry in scan_graph(graph):
            self.record["ops"].append(entry)
            self.on_op(entry)


def lowering_reasons(config: Any) -> List[str]:
    """The refused options (:data:`REFUSED_OPTIONS`) switched on in Inductor's config as a graph is lowered:
    ``torch.compile``'s mode and options are config patches then, whichever way the compile was called."""
    reasons = []
    for key, why in REFUSED_OPTIONS.items():
        if key in ("deterministic", "fallback_random"):
            continue  # put back by the guard before the graph is lowered
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part, None)
        if value is True:
            reasons.append(f"{key}=True {why}")
    return reasons


def _chain(first: Any, second: Any) -> Any:
    """Two post-grad passes as one value of the config (a list where Inductor takes lists)."""
    try:
        from torch._inductor.custom_graph_pass import get_custom_graph_passes  # noqa: F401  (lists accepted)
    except ImportError:
        def both(graph: Any) -> None:
            first(graph)
            second(graph)
        return both
    return [first, second]


def explained(exc: BaseException) -> BaseException:
    """The exception under Inductor's and Dynamo's wrappers (``BackendCompilerFailed``, ``InductorError``)
    that a compile-time pass or lowering raised; ``exc`` itself when it wraps none."""
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ not in ("BackendCompilerFailed", "InductorError", "TorchRuntimeError"):
            return current
        inner = getattr(current, "inner_exception", None) or current.__cause__ or current.__context__
        if inner is None:
            return current
        current = inner
    return exc


__all__ = ["CompileRefused", "Guard", "REFUSED_MODES", "REQUIRED", "compiling", "describe_graph", "explained", "lowering_reasons", "features", "inductor_config",
           "make_pass", "missing", "module_path", "refusal", "scan_graph", "warn_note"]
