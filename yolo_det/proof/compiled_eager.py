"""Compiled vs eager, named: one training step of a model run eagerly and through ``torch.compile``, compared.

:func:`compare` runs one forward, loss and backward of two copies of a model from the same weights and inputs,
one eager and one compiled with Inductor under the settings torch offers for eager-equal numerics (each
feature-detected on ``torch._inductor.config``: ``deterministic``, ``fallback_random``, ``numerics="strict"``,
``batch_invariant``, ``emulate_precision_casts``), and says whether the two are bit-identical: the loss, every
module's output (forward hooks on both copies; Dynamo traces the hooks of the compiled copy into its graph, so
the compiled values are those of the generated kernels) and every parameter's gradient. Where they differ it
names the modules whose output differs although their input and the modules inside them do not (the *origin*
of a difference; the modules after it and around it inherit it) with the ops Dynamo traced for each (from the graph's ``nn_module_stack`` and
``stack_trace``), and the parameters whose gradients differ.

The hooked intermediates become outputs of the compiled graph, which can keep Inductor from fusing across
them; the loss and gradients are those of that graph, so a bit-identical verdict is evidence about the hooked
program. Where Dynamo compiled no graph (a ``@torch.compiler.disable`` forward) or broke the forward into
several graphs, equal values prove nothing about compiled training: the verdict is ``not proven``, with the
graph count and Dynamo's reasons for each break.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from ..core.stack_trace import module_path, source_line
from ..core.tensors import tensors_in
from ..core.verdicts import DIFFERS, IDENTICAL, NOT_PROVEN

#: Inductor settings for eager-equal numerics, the value each is set to, and what it does
EAGER_EQUAL = {
    "deterministic": (True, "no on-device benchmarking that changes numerics"),
    "fallback_random": (True, "eager's RNG for random ops"),
    "numerics": ("strict", "eager's summation order for eligible CUDA sums"),
    "batch_invariant": (True, "per-sample kernels that do not change with the batch size"),
    "emulate_precision_casts": (True, "eager's fp16/bf16 rounding between fused ops"),
}


def eager_equal_settings(config: Any = None) -> Tuple[Dict[str, Any], List[str]]:
    """(the eager-equal settings this torch's Inductor has, with their values; the names it lacks)."""
    if config is None:
        import torch._inductor.config as config
    found = {name: value for name, (value, _) in EAGER_EQUAL.items() if hasattr(config, name)}
    return found, [name for name in EAGER_EQUAL if name not in found]


def _hook(model: torch.nn.Module, calls: List[Tuple[str, str, List[torch.Tensor], List[torch.Tensor]]]) -> list:
    """Forward hooks appending (module, class, inputs, outputs) of each module call to ``calls``."""
    handles = []
    for name, module in model.named_modules():
        def record(module: torch.nn.Module, args: Any, output: Any, name: str = name or "(model)") -> None:
            calls.append((name, type(module).__name__, tensors_in(args), tensors_in(output)))
        handles.append(module.register_forward_hook(record))
    return handles


def _equal(a: List[torch.Tensor], b: List[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x.detach(), y.detach()) for x, y in zip(a, b))


def _max_diff(a: List[torch.Tensor], b: List[torch.Tensor]) -> Optional[float]:
    diffs = [(x.detach().double() - y.detach().double()).abs().max().item() for x, y in zip(a, b)
             if x.shape == y.shape and x.numel() and (x.is_floating_point() or y.is_floating_point())]
    return max(diffs) if diffs else None


def graph_ops(graphs: Iterable[Any]) -> Dict[str, List[Dict[str, str]]]:
    """module path -> the ops Dynamo traced for it (op name, source line), from the graphs' node meta."""
    out: Dict[str, List[Dict[str, str]]] = {}
    for graph_index, gm in enumerate(graphs):
        for node in gm.graph.nodes:
            if node.op not in ("call_function", "call_method", "call_module"):
                continue
            if node.op == "call_method":
                op = f"Tensor.{node.target}"
            else:
                op = getattr(node.target, "__name__", None) or str(node.target)
            stack = node.meta.get("nn_module_stack") or {}
            path = module_path(str(list(stack.values())[-1][0])) if stack else "(model)"
            entry = {"op": op, "source": source_line(node.meta.get("stack_trace", "")), "graph": f"graph {graph_index}"}
            if entry not in out.setdefault(path, []):
                out[path].append(entry)
    return out


def _inside(module: str, parent: str) -> bool:
    """Whether ``module`` is a descendant of ``parent`` (``(model)`` holds every module)."""
    return module != parent and (parent == "(model)" or module.startswith(parent + "."))


def _default_loss(output: Any) -> torch.Tensor:
    """Sum over the output's floating tensors of the mean of their squares (a scalar is taken as it is)."""
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    parts = [t.float().square().mean() for t in tensors_in(output) if t.is_floating_point()]
    if not parts:
        raise ValueError("compare: the model's output holds no floating-point tensor; pass loss=callable(output)")
    return torch.stack(parts).sum()


#: what every verdict prints: the check's own hooks are part of the compiled program
HOOKS_NOTE = ("The check's forward hooks make every module's output an output of the compiled graph, which changes "
              "what Inductor fuses: the verdict is about the hooked program; a compiled model without hooks can fuse "
              "further.")


def _graph_break_counts() -> Counter:
    """Dynamo's graph breaks so far in this process, by reason (``torch._dynamo.utils.counters``)."""
    from torch._dynamo.utils import counters

    return Counter(counters.get("graph_break", {}))


def _graph_breaks(before: Counter) -> List[Dict[str, Any]]:
    """The graph breaks since ``before``: each reason's first line (Dynamo's summary) and how often it broke."""
    found: Counter = Counter()
    for reason, count in (_graph_break_counts() - before).items():
        found[str(reason).strip().splitlines()[0]] += count
    return [{"reason": reason, "count": count} for reason, count in found.most_common()]


def not_proven_reasons(graphs: int, breaks: List[Dict[str, Any]]) -> List[str]:
    """Why equal values would not show that compiled training equals eager: no graph, or a broken forward."""
    reasons = []
    if graphs == 0:
        reasons.append("Dynamo compiled no graph: the compiled copy ran every op eagerly, so no compiled kernel "
                       "was compared" + (" (the breaks above say why)" if breaks else ""))
    elif breaks:
        total = sum(b["count"] for b in breaks)
        reasons.append(f"Dynamo broke the step at {total} graph break{'s' * (total != 1)} into {graphs} "
                       f"graph{'s' * (graphs != 1)}: the code between graphs ran eagerly in both copies, and where "
                       "a compiled model is split (and so what is fused) can change with the check's hooks")
    return reasons


def _verdict(identical: bool, reasons: List[str]) -> str:
    """``differs`` when any compared value differs (a difference is proven whatever was compiled), else
    ``identical``, or ``not proven`` where the reasons say the comparison did not cover compiled training."""
    if not identical:
        return DIFFERS
    return NOT_PROVEN if reasons else IDENTICAL


def _step(model: torch.nn.Module, inputs: Any, loss: Callable[[Any], torch.Tensor], seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    value = loss(model(*args))
    value.backward()
    return value.detach()


def compare(model: torch.nn.Module, inputs: Any, loss: Optional[Callable[[Any], torch.Tensor]] = None,
            seed: int = 0, settings: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One training step (forward, loss, backward) of ``model`` eager vs compiled under eager-equal settings.

    ``inputs``: a tensor or a tuple of positional arguments; ``loss(output)`` a scalar (default: the mean
    square of the output's tensors); ``settings``: Inductor settings to use instead of every eager-equal one
    this torch has. The model is not changed (both runs use copies). Returns the comparison (see
    :func:`format_comparison`)."""
    import torch._inductor.config as config
    from torch._inductor.compile_fx import compile_fx

    available, lacking = eager_equal_settings(config)
    chosen = dict(available if settings is None else settings)
    loss = loss or _default_loss
    eager, compiled = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    eager_calls: list = []
    compiled_calls: list = []
    handles = _hook(eager, eager_calls) + _hook(compiled, compiled_calls)
    graphs: list = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    # the function under a session's guard: compile_fx is Inductor, with the guard's settings and op scan
    compile_fn = getattr(torch.compile, "__wrapped__", torch.compile)
    torch._dynamo.reset()
    try:
        eager_loss = _step(eager, inputs, loss, seed)
        breaks_before = _graph_break_counts()
        with config.patch(chosen):
            compiled_loss = _step(compile_fn(compiled, backend=backend), inputs, loss, seed)
        breaks = _graph_breaks(breaks_before)
    finally:
        for handle in handles:
            handle.remove()
        torch._dynamo.reset()
    ops = graph_ops(graphs)

    modules = []
    seen: Dict[str, int] = {}
    compiled_by_key = {}
    for name, klass, args, outs in compiled_calls:
        index = sum(1 for key in compiled_by_key if key[0] == name)
        compiled_by_key[(name, index)] = (args, outs)
    for name, klass, args, outs in eager_calls:
        index = seen[name] = seen.get(name, -1) + 1
        other = compiled_by_key.get((name, index))
        if other is None:
            modules.append({"module": name, "class": klass, "call": index, "identical": False,
                            "input_identical": None, "max_abs_diff": None, "origin": False,
                            "note": "not called in the compiled run"})
            continue
        same_out = _equal(outs, other[1])
        same_in = _equal([a for a in args if a.is_floating_point()], [a for a in other[0] if a.is_floating_point()])
        # hooks run after forward: a module's children are recorded before it, so an origin inside is known
        inner = any(m["origin"] and _inside(m["module"], name) for m in modules)
        origin = not same_out and same_in and not inner
        modules.append({"module": name, "class": klass, "call": index, "identical": same_out,
                        "input_identical": same_in, "max_abs_diff": None if same_out else _max_diff(outs, other[1]),
                        "origin": origin, "ops": ops.get(name, []) if origin else []})
    gradients = []
    compiled_params = dict(compiled.named_parameters())
    for name, param in eager.named_parameters():
        a, b = param.grad, compiled_params[name].grad
        if a is None and b is None:
            continue
        same = a is not None and b is not None and torch.equal(a, b)
        gradients.append({"parameter": name, "identical": same,
                          "max_abs_diff": None if same or a is None or b is None else _max_diff([a], [b])})
    loss_same = torch.equal(eager_loss, compiled_loss)
    identical = loss_same and all(m["identical"] for m in modules) and all(g["identical"] for g in gradients)
    reasons = not_proven_reasons(len(graphs), breaks)
    return {
        "verdict": _verdict(identical, reasons),
        "identical": identical,
        "not_proven": reasons if identical else [],
        "settings": chosen,
        "lacking": lacking,
        "torch": torch.__version__,
        "loss": {"identical": loss_same, "eager": eager_loss.item(), "compiled": compiled_loss.item()},
        "graphs": len(graphs),
        "graph_breaks": breaks,
        "modules": modules,
        "origins": [m for m in modules if m["origin"]],
        "gradients": gradients,
    }


def format_comparison(result: Dict[str, Any], title: str = "model") -> str:
    """The comparison as text: the verdict, the settings, the modules where a difference starts with their
    ops, and the parameters whose gradients differ."""
    settings = ", ".join(f"{k}={v!r}" for k, v in result["settings"].items()) or "none"
    lines = [f"compiled vs eager, one training step of {title} (torch {result['torch']}, Inductor: {settings})"]
    if result["lacking"]:
        lines.append(f"  this torch's Inductor lacks: {', '.join(result['lacking'])}")
    lines.append(f"  graphs compiled: {result['graphs']}; graph breaks: "
                 f"{sum(b['count'] for b in result['graph_breaks']) or 'none'}")
    for found in result["graph_breaks"]:
        lines.append(f"    break x{found['count']}: {found['reason']}")
    compared = (f"the loss, all {len(result['modules'])} module outputs and {len(result['gradients'])} gradients")
    if result["verdict"] == NOT_PROVEN:
        lines.append(f"  NOT PROVEN: {compared} are equal, but")
        lines.extend(f"    {reason}." for reason in result["not_proven"])
        lines.append("  Compile the whole forward (list the breaks: torch._dynamo.explain(model)(x); "
                     "torch.compile(model, fullgraph=True) fails at the first) and check again.")
        lines.append("  " + HOOKS_NOTE)
        return "\n".join(lines)
    if result["identical"]:
        lines.append(f"  bit-identical: {compared}. Debugging in eager shows what compiled training does.")
        lines.append("  " + HOOKS_NOTE)
        return "\n".join(lines)
    differing = [m for m in result["modules"] if not m["identical"]]
    grads = [g for g in result["gradients"] if not g["identical"]]
    loss = result["loss"]
    lines.append(f"  NOT bit-identical: loss {'identical' if loss['identical'] else 'differs'} "
                 f"(eager {loss['eager']!r}, compiled {loss['compiled']!r}); {len(differing)} of "
                 f"{len(result['modules'])} module outputs and {len(grads)} of {len(result['gradients'])} "
                 "gradients differ.")
    if result["origins"]:
        lines.append("  where the forward starts to differ (same input, other output):")
        for module in result["origins"]:
            lines.append(f"    {module['module']} ({module['class']}), call {module['call']}: "
                         f"max |diff| {module['max_abs_diff']:.3g}")
            for op in module["ops"]:
                lines.append(f"      op {op['op']}" + (f"  ({op['source']})" if op["source"] else ""))
            if not module["ops"]:
                lines.append("      (no op of its own in the traced graph: a child's fused kernel)")
    elif not differing:
        lines.append("  the forward is bit-identical: the difference starts in the backward (compiled gradients)")
    for grad in grads[:10]:
        diff = f"max |diff| {grad['max_abs_diff']:.3g}" if grad["max_abs_diff"] is not None else "missing in one"
        lines.append(f"    gradient of {grad['parameter']}: {diff}")
    if len(grads) > 10:
        lines.append(f"    ... and {len(grads) - 10} more gradients")
    lines.append("  Compiled and eager training are different programs here: compare compiled runs with compiled "
                 "runs, and expect an eager debug run to differ from the ops named above on.")
    lines.append("  " + HOOKS_NOTE)
    return "\n".join(lines)


__all__ = ["EAGER_EQUAL", "HOOKS_NOTE", "compare", "eager_equal_settings", "format_comparison", "graph_ops",
           "not_proven_reasons"]
