"""Kernels PyTorch's determinism switch cannot see: compiled extension ops and third-party kernels.

``torch.use_deterministic_algorithms`` only reaches kernels that call PyTorch's alert. A pybind
extension called inside a ``torch.autograd.Function`` (MSDeformAttn's ``MultiScaleDeformableAttention``,
DCN, Mamba's ``selective_scan``) or flash-attn's backward run silently. Two ways to find them:

* :func:`scan_model` reads the source of a model's custom classes, the module-level helpers they
  call and the ``autograd.Function`` classes they ``.apply``, and resolves every call against the
  code's globals and imports: known third-party APIs (:data:`KNOWN_APIS`, matched by qualified
  name, so an import that only happens on a GPU machine is still found) and functions of compiled
  extension modules (builtins from a ``.so``). Cheap; what ``session.track`` uses before training.
* :class:`OpaqueWatch`, a dispatch mode the audit runs: the dispatcher sees an extension allocate
  its output (``at::zeros``, ``at::empty``) but not the kernel that fills it. A tensor made by a
  uniform factory whose content changed with no dispatcher op writing it was written behind the
  dispatcher's back; it is named with the Python line that called into the extension, its
  autograd ``Function`` and the module path.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib.machinery
import inspect
import linecache
import os
import re
import sys
import textwrap
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core.tensors import tensors_in
from .compiled import compiling

ROOT_NAME = "(model)"


# -- known third-party APIs -------------------------------------------------------------------
@dataclass(frozen=True)
class KnownApi:
    """A third-party kernel family: qualified names it matches, why it matters, what to do."""

    key: str
    pattern: str
    what: str
    fix: str
    replacement: Optional[str] = None  # key of a deterministic replacement in opaque_replacements

    def matches(self, qualified: str) -> bool:
        return re.fullmatch(self.pattern, qualified) is not None


_TV = r"torchvision\.ops(?:\.\w+)*\."
KNOWN_APIS: Tuple[KnownApi, ...] = (
    KnownApi("flash_attn", r"flash_attn(?:\.\w+)*\.flash_attn_func",
             "flash-attn attention: its backward is nondeterministic unless deterministic=True",
             "yolo-det replacement (strict): flash-attn's own deterministic backward where flash_attn_func takes "
             "deterministic=, else a PyTorch attention path", "flash_attn"),
    KnownApi("flash_attn_other", r"flash_attn(?:\.\w+)*(?:\.\w*flash_attn\w*|\.MHA|_cuda|_2_cuda)(?:\.\w+)*",
             "flash-attn kernel: backward nondeterministic unless deterministic=True",
             "pass deterministic=True to the flash-attn call, or allow it"),
    KnownApi("xformers", r"xformers(?:\.\w+)*\.memory_efficient_attention\w*",
             "xformers memory-efficient attention: CUDA backward accumulates with atomics",
             "use F.scaled_dot_product_attention under strict, or allow it"),
    KnownApi("ms_deform_attn", r"(?:\w+\.)*(?:MultiScaleDeformableAttention|_ext)\.ms_deform_attn_\w+",
             "multi-scale deformable attention extension: CUDA backward accumulates with atomics",
             "yolo-det replacement (strict): the pure-PyTorch sampling path with the deterministic grid_sample",
             "ms_deform_attn"),
    KnownApi("mmcv_ops", r"mmcv\.(?:_ext(?:\.\w+)*|ops(?:\.\w+)*\.(?:\w*deform_conv\w*|\w*DeformConv\w*|roi_align\w*|"
                         r"RoIAlign\w*|carafe\w*|CARAFE\w*|\w*focal_loss|\w*FocalLoss|upfirdn2d|fused_bias_leakyrelu))",
             "mmcv CUDA op (deformable convolution, RoI align, CARAFE, focal loss, ...): backward accumulates with atomics",
             "allow it after `yolo-det audit --probe` on the GPU, or replace it"),
    KnownApi("roi_align", _TV + r"(?:roi_align|RoIAlign)",
             "torchvision roi_align: CUDA backward nondeterministic (atomicAdd)",
             "yolo-det replacement (strict): torchvision's own pure-PyTorch roi_align", "roi_align"),
    KnownApi("torchvision_ops", _TV + r"(?:ps_roi_align|PSRoIAlign|roi_pool|RoIPool|ps_roi_pool|PSRoIPool|"
                                      r"deform_conv2d|DeformConv2d)",
             "torchvision op whose CUDA backward accumulates with atomics",
             "allow it after `yolo-det audit --probe` on the GPU"),
    KnownApi("selective_scan", r"(?:mamba_ssm(?:\.\w+)*\.(?:selective_scan_fn|mamba_inner_fn\w*|SelectiveScanFn|MambaInnerFn)|"
                               r"selective_scan_cuda\w*(?:\.\w+)*)",
             "Mamba selective_scan CUDA kernel: backward nondeterministic",
             "mamba_ssm's selective_scan_ref (pure PyTorch) is deterministic; or allow it after a probe"),
)


def known_api(qualified: str) -> Optional[KnownApi]:
    """The first :data:`KNOWN_APIS` entry matching a qualified name, or None."""
    return next((api for api in KNOWN_APIS if api.matches(qualified)), None)


# -- findings ---------------------------------------------------------------------------------
@dataclass
class OpaqueFinding:
    """A kernel PyTorch's switch cannot see: ``op`` (qualified name), where, and what to do.

    ``kind``: ``known-api`` (a third-party API by name), ``extension`` (a compiled extension
    function found in source), ``runtime`` (a tensor written behind the dispatcher's back).
    ``bindings``: (python module, name) pairs through which the model's code reaches it.
    """

    op: str
    kind: str
    modules: List[str] = field(default_factory=list)
    what: str = ""
    fix: str = ""
    replacement: Optional[str] = None
    call: str = ""
    via: str = ""
    phase: str = ""
    bindings: List[Tuple[str, str]] = field(default_factory=list)
    importable: bool = True

    @property
    def names(self) -> Tuple[str, ...]:
        """Names the allow-list accepts for it: the qualified name and its last part."""
        short = self.op.rsplit(".", 1)[-1]
        via = (self.via, self.via.rsplit(".", 1)[-1]) if self.via else ()
        return tuple(dict.fromkeys((self.op, short) + via))

    def to_dict(self) -> Dict[str, Any]:
        out = {"op": self.op, "kind": self.kind, "modules": list(self.modules), "what": self.what, "fix": self.fix,
               "replaceable": bool(self.replacement)}
        for key in ("call", "via", "phase"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if not self.importable:
            out["importable"] = False  # named in source, not importable here: that code path cannot run here
        return out


def merge(findings: Iterable[OpaqueFinding]) -> List[OpaqueFinding]:
    """One finding per op (and kind), modules and bindings united, in first-seen order."""
    out: Dict[Tuple[str, str], OpaqueFinding] = {}
    for f in findings:
        key = (f.op, f.kind)
        if key not in out:
            out[key] = f
            continue
        have = out[key]
        have.modules += [m for m in f.modules if m not in have.modules]
        have.bindings += [b for b in f.bindings if b not in have.bindings]
        if f.phase and f.phase not in have.phase:
            have.phase = f"{have.phase}, {f.phase}" if have.phase else f.phase
        have.importable = have.importable or f.importable
    return list(out.values())


def _fix_for_extension() -> str:
    return ("no deterministic replacement known: probe it on the GPU (`yolo-det audit --probe`), then allow it "
            "(deterministic_allow / YOLO_DET_ALLOW) or replace it with PyTorch ops")


def action_for(finding: OpaqueFinding, strict: bool, allow: Iterable[str]) -> str:
    """What a run does with a finding it has not replaced: ``not run here`` (its import did not
    happen in this process), ``allowed`` (on the allow-list), ``refused`` (strict), ``warned``."""
    if not finding.importable:
        return "not run here"
    if any(name in set(allow) for name in finding.names):
        return "allowed"
    return "refused" if strict else "warned"


def refusal_message(findings: Iterable[OpaqueFinding]) -> str:
    """What strict refused, where in the model, and the ways past it."""
    findings = list(findings)
    lines = ["yolo-det strict: the model calls kernels that PyTorch's determinism switch cannot see; "
             "strict cannot vouch for them, so training does not start:"]
    for f in findings:
        where = ", ".join(f.modules[:5]) or "-"
        lines.append(f"  {f.op} ({f.kind}) in module {where}" + (f": {f.call}" if f.call else "") + f". {f.what}.")
    names = list(dict.fromkeys(f.names[0] for f in findings))
    lines.append("Options: (1) replace it (flash-attn, MSDeformAttn and roi_align have yolo-det replacements, swapped in "
                 "by strict with 'deterministic_ops: replace'); (2) check it with `yolo-det audit --probe` on the GPU, then "
                 f"allow it, reported but not refused: 'deterministic_allow: [{', '.join(names)}]' in the hyp YAML or "
                 f"YOLO_DET_ALLOW='{' '.join(names)}'; (3) run with --deterministic warn to report it instead.")
    return "\n".join(lines)


# -- static scan ------------------------------------------------------------------------------
_EXT_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_NOT_KERNELS = {"torch", "numpy", "builtins", "math", "cv2", "PIL", "_operator", "operator", "itertools",
                "functools", "time", "random", "os", "sys", "_io", "collections", "torchvision", "scipy"}


def _is_torch(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "torch"


def _qualified(obj: Any) -> Optional[str]:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(module, str) and isinstance(name, str):
        return f"{module}.{name}"
    return None


def _extension_function(obj: Any, container: Any = None) -> Optional[str]:
    """``module.function`` when ``obj`` is a function of a compiled extension module (pybind, C API).
    ``container``: the module it was reached through (``load_inline`` modules are not in sys.modules)."""
    if not inspect.isbuiltin(obj) and type(obj).__name__ != "builtin_function_or_method":
        return None
    module_name = getattr(obj, "__module__", None)
    if not isinstance(module_name, str) or module_name.split(".")[0] in _NOT_KERNELS:
        return None
    module = container if isinstance(container, types.ModuleType) else sys.modules.get(module_name)
    path = getattr(module, "__file__", None) or ""
    if not path.endswith(_EXT_SUFFIXES):
        return None
    return f"{module_name}.{getattr(obj, '__name__', '?')}"


_API_WORDS = ("flash_attn", "xformers", "mmcv", "torchvision", "selective_scan", "MultiScaleDeformableAttention",
              "ms_deform_attn")


@functools.lru_cache(maxsize=256)
def _imports(path: str) -> Dict[str, str]:
    """Local name -> qualified name for every import in a file (also those under ``if`` or in
    functions); empty when the file names no known API (most files: not parsed)."""
    try:
        text = open(path, encoding="utf-8", errors="ignore").read()
        if not any(word in text for word in _API_WORDS):
            return {}
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return {}
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _dotted(node: ast.AST) -> Optional[List[str]]:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


@dataclass
class _Code:
    """A function to scan, with the globals and closure variables its names resolve in."""

    source: str
    scope: Dict[str, Any]
    path: str
    label: str


def _code_of(obj: Any, label: str) -> Optional[_Code]:
    try:
        source = textwrap.dedent(inspect.getsource(obj))
        path = inspect.getsourcefile(obj) or ""
    except (OSError, TypeError):
        return None
    scope = dict(getattr(obj, "__globals__", {}))
    try:
        scope.update(inspect.getclosurevars(obj).nonlocals)  # classes and extensions bound in an enclosing function
    except (TypeError, ValueError):
        pass
    return _Code(source, scope, path, label)


def _resolve(parts: List[str], code: _Code) -> Tuple[Optional[Any], Optional[str]]:
    """The live object a dotted name refers to (None if unresolvable) and its qualified name."""
    scope = code.scope
    obj: Any = scope.get(parts[0], getattr(builtins, parts[0], None))
    for part in parts[1:]:
        if obj is None:
            break
        obj = getattr(obj, part, None)
    if obj is not None:
        return obj, _qualified(obj) or ".".join(parts)
    imported = _imports(code.path).get(parts[0])
    if imported is None:
        return None, None
    qualified = ".".join([imported] + parts[1:])
    return _loaded(qualified), qualified


def _loaded(qualified: str) -> Optional[Any]:
    """What ``qualified`` names if its module is already imported (a function-local import, say);
    None otherwise: nothing is imported here."""
    names = qualified.split(".")
    for cut in range(len(names) - 1, 0, -1):
        obj = sys.modules.get(".".join(names[:cut]))
        if obj is None:
            continue
        for name in names[cut:]:
            obj = getattr(obj, name, None)
        return obj
    return None


def _segment(source: str, node: ast.AST, default: str) -> str:
    """The call's first source line (at most 120 characters)."""
    text = ast.get_source_segment(source, node) or default
    return text.splitlines()[0][:120]


def _binding(target: List[str], code: _Code, module_name: str) -> Optional[Tuple[str, str]]:
    """(python module, attribute) that holds what ``target`` names, for swapping it: the caller's
    global for a bare name, the containing module for ``pkg.mod.func``; None otherwise."""
    if len(target) == 1:
        return (module_name, target[0]) if module_name else None
    container, _ = _resolve(target[:-1], code)
    if isinstance(container, types.ModuleType):
        return container.__name__, target[-1]
    return None


class _Scanner:
    """Walks one class's code (helpers two deep, applied autograd Functions) for opaque calls."""

    def __init__(self) -> None:
        self.seen: set = set()

    def scan_class(self, cls: type) -> List[OpaqueFinding]:
        found: List[OpaqueFinding] = []
        for klass in cls.__mro__:
            if klass is object or _is_torch(klass):
                continue
            for name, member in vars(klass).items():
                function = getattr(member, "__func__", member)  # staticmethod, classmethod
                if inspect.isfunction(function):
                    code = _code_of(function, f"{klass.__qualname__}.{name}")
                    if code is not None:
                        found += self.scan(code, depth=0, via="")
        return found

    def scan(self, code: _Code, depth: int, via: str) -> List[OpaqueFinding]:
        key = (code.path, code.source[:200], code.label)
        if key in self.seen:
            return []
        self.seen.add(key)
        try:
            tree = ast.parse(code.source)
        except SyntaxError:
            return []
        found: List[OpaqueFinding] = []
        module_name = str(code.scope.get("__name__", "")) if code.scope else ""
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            parts = _dotted(node.func)
            if not parts:
                continue
            apply = parts[-1] == "apply" and len(parts) > 1
            target = parts[:-1] if apply else parts
            obj, qualified = _resolve(target, code)
            if qualified is None:
                continue
            binding = _binding(target, code, module_name)
            line = ".".join(parts) + "(...)"
            api = known_api(qualified) or (known_api(".".join(target)) if obj is None else None)
            if api is not None and not (_is_torch(obj) if obj is not None else False):
                found.append(OpaqueFinding(qualified, "known-api", what=api.what, fix=api.fix,
                                           replacement=api.replacement, call=_segment(code.source, node, line), via=via,
                                           bindings=[binding] if binding else [], importable=obj is not None))
                continue
            if obj is None:
                continue
            ext = _extension_function(obj, _resolve(target[:-1], code)[0] if len(target) > 1 else None)
            if ext is not None:
                found.append(OpaqueFinding(ext, "extension", what="compiled extension function: its kernels run "
                                           "outside PyTorch's determinism switch", fix=_fix_for_extension(),
                                           call=_segment(code.source, node, line), via=via, bindings=[binding]))
            elif apply and inspect.isclass(obj) and issubclass(obj, torch.autograd.Function) and not _is_torch(obj):
                inner_via = via or qualified
                for method in ("forward", "backward"):
                    sub = _code_of(getattr(obj, method, None), f"{obj.__qualname__}.{method}")
                    if sub is not None:
                        for f in self.scan(sub, depth, inner_via):
                            f.bindings = [binding] if binding else []  # reached through the Function's name
                            found.append(f)
            elif inspect.isfunction(obj) and not _is_torch(obj) and depth < 2:
                sub = _code_of(obj, qualified)
                if sub is not None:
                    found += self.scan(sub, depth + 1, via)
        return found


@functools.lru_cache(maxsize=512)
def _class_findings(cls: type) -> Tuple[OpaqueFinding, ...]:
    try:
        return tuple(merge(_Scanner().scan_class(cls)))
    except Exception:  # noqa: BLE001 - odd code (properties that raise, exotic descriptors): not scannable
        return ()


def _module_type_finding(module: torch.nn.Module) -> Optional[OpaqueFinding]:
    qualified = _qualified(type(module)) or ""
    api = known_api(qualified)
    if api is None:
        return None
    return OpaqueFinding(qualified, "known-api", what=api.what, fix=api.fix, replacement=api.replacement,
                         bindings=[(type(module).__module__, type(module).__name__)])


def scan_model(model: torch.nn.Module) -> List[OpaqueFinding]:
    """Every opaque kernel ``model``'s code can call, with the module paths that call it.

    Classes defined by torch are skipped; known third-party module classes (``RoIAlign``,
    mmcv ops) count by type. Never runs the model. Unreadable source is skipped silently.
    """
    found: List[OpaqueFinding] = []
    for name, module in model.named_modules():
        path = name or ROOT_NAME
        cls = type(module)
        if _is_torch(cls):
            continue
        hits = [dataclasses.replace(f, modules=[], bindings=list(f.bindings)) for f in _class_findings(cls)]
        typed = None if hits else _module_type_finding(module)
        hits = hits or ([typed] if typed is not None else [])
        for f in hits:
            f.modules = [path]
            found.append(f)
    return merge(found)


# -- first use: the Functions in a training forward's autograd graph ----------------------------
def graph_functions(output: Any, limit: int = 200_000) -> List[type]:
    """The custom (non-torch) ``autograd.Function`` classes in the graph behind ``output``'s tensors:
    also those applied through attributes or arguments, which the source scan cannot resolve."""
    stack = [t.grad_fn for t in tensors_in(output) if t.grad_fn is not None]
    seen: set = set()
    classes: Dict[type, None] = {}
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        cls = getattr(node, "_forward_cls", None)
        if cls is not None and not _is_torch(cls):
            classes[cls] = None
        stack.extend(child for child, _ in getattr(node, "next_functions", ()))
    return list(classes)


def scan_functions(classes: Iterable[type], module: str = ROOT_NAME) -> List[OpaqueFinding]:
    """The opaque kernels the forward and backward of these ``autograd.Function`` classes call."""
    scanner, found = _Scanner(), []
    for cls in classes:
        for method in ("forward", "backward"):
            code = _code_of(getattr(cls, method, None), f"{cls.__qualname__}.{method}")
            if code is not None:
                found += scanner.scan(code, 0, _qualified(cls) or cls.__name__)
    for finding in found:
        finding.modules = [module]
    return merge(found)


def on_first_forward(model: torch.nn.Module, callback: Callable[[List[OpaqueFinding]], None]) -> Any:
    """Once, after ``model``'s first forward that builds a graph (training, not ``no_grad``), call
    ``callback`` with the opaque kernels of the Functions in that graph (if any). Returns the hook handle."""
    target = weakref.ref(model)

    def hook(module, args, output):
        if compiling():  # inside a graph Dynamo traces: no autograd graph to read (the post-grad scan checks it)
            return
        if module is not target() or not torch.is_grad_enabled():
            return  # other modules; validation and EMA forwards build no graph: wait for a training one
        handle.remove()
        findings = scan_functions(graph_functions(output))
        if findings:
            callback(findings)

    # a global hook: nothing is stored on the model, so deepcopy (EMA) and pickled checkpoints never see it
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    return handle


# -- run time: writes the dispatcher never saw ------------------------------------------------
#: Factory ops whose output is uniform: the value of any element is the value of all.
UNIFORM_FACTORIES = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor"})
_SKIP_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) for m in (torch, sys.modules[__name__.rsplit(".", 2)[0]]))


def _caller() -> Tuple[str, str]:
    """``file:line`` and the source line of the innermost Python frame outside torch and yolo-det."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_SKIP_DIRS) and not filename.startswith("<"):
            text = linecache.getline(filename, frame.f_lineno).strip()
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}", text
        frame = frame.f_back
    return "", ""


def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - fake, meta or sparse tensors: not watched
        return 0


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _uniform(t: torch.Tensor, value: torch.Tensor) -> bool:
    flat = t.detach().reshape(-1)
    if value.is_floating_point() and bool(torch.isnan(value)):
        return bool(torch.isnan(flat).all())
    return bool((flat == value).all())


@dataclass
class _Fresh:
    tensor: torch.Tensor
    value: torch.Tensor
    op: str
    module: str
    where: str
    line: str
    node: Optional[str]
    phase: str


def _node_name(node: Any) -> Optional[str]:
    if node is None:
        return None
    cls = getattr(node, "_forward_cls", None)
    return _qualified(cls) if cls is not None else type(node).__name__


def _filling() -> bool:
    deterministic = getattr(torch.utils, "deterministic", None)
    return bool(getattr(deterministic, "fill_uninitialized_memory", False)) and torch.are_deterministic_algorithms_enabled()


class OpaqueWatch(TorchDispatchMode):
    """Finds tensors a kernel wrote with no dispatcher op: a uniform factory's output whose content
    changed although no op wrote it. ``module_path()`` names the running module; set ``backward``
    before the backward pass. Run it with ``fill_uninitialized_memory`` on (``empty`` is then NaN).
    Enter it before other dispatch modes so their bookkeeping ops are not counted."""

    def __init__(self, module_path: Callable[[], str] = lambda: ROOT_NAME) -> None:
        super().__init__()
        self.module_path = module_path
        self.backward = False
        self.fresh: Dict[int, _Fresh] = {}
        self.node_modules: Dict[Any, str] = {}
        self.findings: List[OpaqueFinding] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = list(_tensors(list(args) + list(kwargs.values())))
        if not self.backward:  # a custom Function's node -> the module its output was made in
            for t in inputs:
                node = t.grad_fn
                if node is not None and hasattr(node, "_forward_cls") and node not in self.node_modules:
                    made = self.fresh.get(_storage_key(t))
                    self.node_modules[node] = made.module if made is not None else self.module_path()
        if self.fresh:
            for t in inputs:
                self._check(t)
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        schema = func._schema
        for argument, value in zip(schema.arguments, args):
            if argument.alias_info is not None and argument.alias_info.is_write:
                for t in _tensors([value]):
                    self.fresh.pop(_storage_key(t), None)
        for argument in schema.arguments[len(args):]:
            if argument.alias_info is not None and argument.alias_info.is_write and argument.name in kwargs:
                for t in _tensors([kwargs[argument.name]]):
                    self.fresh.pop(_storage_key(t), None)
        outputs = list(_tensors(out if isinstance(out, (list, tuple)) else [out]))
        if name in UNIFORM_FACTORIES:
            for t in outputs:
                if t.numel() and _storage_key(t):
                    self._remember(t, name)
        elif not getattr(func, "is_view", False):
            for t in outputs:
                self.fresh.pop(_storage_key(t), None)
        return out

    def _remember(self, t: torch.Tensor, op: str) -> None:
        if "empty" in op and not (t.is_floating_point() and _filling()):
            return  # uninitialised content: only NaN-filled floating empties have a known value
        where, line = _caller()
        node = torch._C._current_autograd_node() if self.backward and hasattr(torch._C, "_current_autograd_node") else None
        module = self.node_modules.get(node, "") if self.backward else self.module_path()
        self.fresh[_storage_key(t)] = _Fresh(t, t.detach().reshape(-1)[0].clone(), op, module, where, line,
                                             _node_name(node), "backward" if self.backward else "forward")

    def _check(self, t: torch.Tensor) -> None:
        key = _storage_key(t)
        entry = self.fresh.get(key)
        if entry is None or _uniform(entry.tensor, entry.value):
            return
        del self.fresh[key]
        node = entry.node or _node_name(t.grad_fn)
        self._report(entry, node)

    def _report(self, entry: _Fresh, node: Optional[str]) -> None:
        op = node if node and "." in node else (entry.line or entry.where or f"({entry.op} output)")
        self.findings.append(OpaqueFinding(
            op, "runtime", [entry.module] if entry.module else [],
            what=f"a tensor made by aten.{entry.op} was filled with no dispatcher op (a compiled kernel wrote it)",
            fix=_fix_for_extension(), call=f"{entry.line} ({entry.where})" if entry.line else entry.where,
            phase=entry.phase))

    def finish(self) -> List[OpaqueFinding]:
        """Check what is still watched (e.g. gradients left in ``.grad``); return the findings, merged."""
        for key in list(self.fresh):
            entry = self.fresh.get(key)
            if entry is not None:
                self._check(entry.tensor)
        self.fresh.clear()
        return merge(self.findings)


__all__ = ["KNOWN_APIS", "KnownApi", "OpaqueFinding", "OpaqueWatch", "UNIFORM_FACTORIES", "action_for", "known_api",
           "graph_functions", "merge", "on_first_forward", "refusal_message", "scan_functions", "scan_model"]
