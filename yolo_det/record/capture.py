"""Op capture for one training step: every aten op, its module path, phase and bit-exact digests.

``yolo-det verify --locate`` re-runs two diverging runs with ``YOLO_DET_CAPTURE_STEP=k`` and
``YOLO_DET_CAPTURE=<file>``. The fingerprint recorder then switches a :class:`CaptureMode`
(a ``TorchDispatchMode``) on from the end of step k-1 (the first batch, for k = 1) to the end
of step k (or the start of step k+1 when validation is wanted), writes the capture file and
ends the process (:class:`CaptureComplete`, exit status 0): the re-runs stop right after step k.

Per op the capture keeps the overload name (``aten.convolution.default``), the phase
(forward, backward, optimizer, validation), the module path it ran in and the digests of its
input tensors and of its outputs -- its results and the arguments it writes without returning
them (``_foreach_add_``'s list, BatchNorm's running statistics). Outputs of most ops are *read*:
algorithm ``bytes-lin64-v2`` of :mod:`.digest` (the fingerprint's kernel), computed on the tensor's device in batches
(:class:`~.digest.StreamDigests`); the digests stay there until the capture ends (one
transfer). In the first pass, outputs of views, pointwise ops (PyTorch's ``pointwise`` tag),
copies and fills are *derived*: a hash of the op, the output's geometry and the inputs'
digests, no device work (:func:`_kind`). A derived digest cannot show a difference made inside
the op itself, so :mod:`.locate` re-runs with ``YOLO_DET_CAPTURE_READ=FIRST:LAST``: the ops at
those positions read every input and output (the confirming pass). Ops before the step's first
batch (the previous step's EMA update, the previous epoch's validation) are marked ``pre``.
Memory is 16 bytes per tensor read, not the tensors.

Batches leaving a DataLoader are not captured in a step's capture (they are in its ``data``
digests). When a step's batch itself differs, ``YOLO_DET_CAPTURE_THROUGH=data`` captures only
the loader's fetches of step k instead (:meth:`StepCapture.fetch`), phase ``data``, module
``(data) DataLoader`` (sampler, pinning), ``(data) dataset <class>`` or ``(data) collate_fn
<function>``, and ends the process when step k's optimizer step begins. A loader with worker
processes fetches there, out of reach: the capture header counts its ``workers``.

Compiled models (``torch.compile``): Dynamo runs a compiled frame only where no dispatch mode is active, so
while a capture runs each call of a compiled module (``OptimizedModule``) runs with the mode set aside and is
recorded as one op, ``compiled forward``, reading every input, parameter, buffer and output; the compiled
backward's node is recorded the same way as ``compiled backward`` (the ATen kernels it calls, such as
``convolution_backward``, are captured as ops of their own). Each carries ``graphs``: the graphs Inductor
lowered in the process with their ops, modules and source lines (``graphs`` of :class:`StepCapture`, from the
session's compile guard), since ops fused into one generated kernel cannot be told apart.

Module paths follow the chain of modules entered at call time (``model.4.cv3.act``), not an
identity lookup: YOLOv5's ``Conv.default_act`` is one ``nn.SiLU`` shared by every ``Conv``.
Backward ops get the path of the module whose forward made their autograd node (its sequence
number, see :class:`ModulePaths`).

Over 800 lines on purpose: one dispatch mode, its module-path tracking and its compiled-graph view share the
capture's record; ``locate`` reads it.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import hashlib
import json
import os
import sys
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..core import atomic, env_names
from ..core.tensors import tensors_in as nested_tensors
from .digest import ALGORITHM, StreamDigests, bytes_digest

FORMAT = "yolo-det-capture"
STEP_VAR = env_names.CAPTURE_STEP
PATH_VAR = env_names.CAPTURE
THROUGH_VAR = env_names.CAPTURE_THROUGH  # "step" (default), "validation" or "data" (the loader's fetches)
READ_VAR = env_names.CAPTURE_READ  # "FIRST:LAST": ops (by position) whose inputs and outputs are all read
PHASES = ("data", "forward", "backward", "optimizer", "validation")
OUTSIDE = "(outside)"  # module path of ops that ran outside every module
DATA = "(data)"  # module paths of a DataLoader's fetch start so: "(data) collate_fn LoadImagesAndLabels.collate_fn"


#: Ops whose outputs are views of their inputs: digests derived from the inputs', not read.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute", "expand", "slice", "select",
    "narrow", "unsqueeze", "squeeze", "detach", "alias", "as_strided", "split", "split_with_sizes", "unbind", "chunk",
    "unfold", "diagonal", "view_as_real", "view_as_complex", "lift_fresh", "_alias", "numpy_T", "mT", "expand_as",
})
#: Ops that compute each output element from the same elements of their inputs alone (besides
#: those tagged ``pointwise``): copies, conversions and fills. Like every pointwise op they give
#: the same bytes for the same inputs on any device, so their outputs' digests are derived too.
COPY_OPS = frozenset({
    "copy", "copy_", "_to_copy", "clone", "contiguous", "fill", "fill_", "zero_", "zeros", "ones", "full",
    "zeros_like", "ones_like", "full_like", "scalar_tensor", "lift_fresh_copy", "new_zeros", "new_ones", "new_full",
})
#: Views that are the whole input, byte for byte: the output's entry is the input's.
IDENTITY_OPS = frozenset({"detach", "alias", "_alias", "lift_fresh"})
#: Ops whose outputs are uninitialised memory: their bytes are whatever was there, not a result.
UNINITIALIZED_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

#: Ops that only alias or reshape memory, or make it without a result (views, ``set_`` from a
#: storage, storage resizes, uninitialised memory): their outputs are no computation from their
#: inputs, so they are never "same inputs, different output".
ALIAS_OPS = VIEW_OPS | IDENTITY_OPS | UNINITIALIZED_OPS | frozenset({
    "set_", "set", "resize_", "resize_as_", "_resize_output_", "as_strided_", "_unsafe_view", "_reshape_alias",
    "_local_scalar_dense", "_to_copy_", "record_stream", "_record_function_enter", "_record_function_enter_new",
    "_record_function_exit",
})
#: In-place ops that overwrite ``self`` without reading it: its old bytes are no input (only its
#: shape and dtype are), so a buffer fresh from ``empty`` does not make their inputs differ.
OVERWRITE_OPS = frozenset({
    "copy_", "fill_", "zero_", "_foreach_copy_", "_foreach_zero_", "normal_", "uniform_", "bernoulli_", "random_",
    "exponential_", "geometric_", "log_normal_", "cauchy_", "_copy_from", "_copy_from_and_resize",
})
#: Ops that write arguments their schema does not mark as written: (op, argument names).
HIDDEN_WRITES = {"native_batch_norm": ("running_mean", "running_var"),
                 "cudnn_batch_norm": ("running_mean", "running_var"),
                 "miopen_batch_norm": ("running_mean", "running_var"),
                 "_batch_norm_impl_index": ("running_mean", "running_var")}

READ, VIEW, DERIVED, IDENTITY = 0, 1, 2, 3  # how an op's outputs get their digests


def _packet(func: Any) -> str:
    packet = getattr(func, "overloadpacket", None)
    return getattr(packet, "__name__", str(func))


def _op_info(func: Any) -> Tuple[str, int, Tuple[Tuple[int, str], ...], frozenset, bool, bool, bool]:
    """(overload name, READ/VIEW/DERIVED/IDENTITY, written arguments as (position, name), names of
    ``out=`` arguments (no input: their old bytes are overwritten), whether the op draws random
    numbers, whether it only aliases memory, whether it overwrites ``self`` unread)."""
    name = _packet(func)
    schema = getattr(func, "_schema", None)
    arguments = list(getattr(schema, "arguments", ()))
    hidden = HIDDEN_WRITES.get(name, ())
    writes = tuple((i, a.name) for i, a in enumerate(arguments)
                   if (a.alias_info is not None and a.alias_info.is_write) or a.name in hidden)
    out_names = frozenset(a.name for a in arguments if a.kwarg_only and a.alias_info is not None
                          and a.alias_info.is_write)
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None) if hasattr(torch, "Tag") else None
    random = seeded is not None and seeded in getattr(func, "tags", ())
    return str(func), _kind(func), writes, out_names, random, name in ALIAS_OPS, name in OVERWRITE_OPS


def _kind(func: Any) -> int:
    """READ for ops whose outputs are read; VIEW or DERIVED for ops whose outputs' digests follow
    from their inputs' (views, pointwise ops, copies) or from nothing (uninitialised memory)."""
    name = func.overloadpacket.__name__
    if name in IDENTITY_OPS:
        return IDENTITY
    if name in VIEW_OPS:
        return VIEW
    if "out" in func._overloadname or name.endswith("_out"):  # an out= argument's old bytes are no input
        return READ
    base = name[len("_foreach_"):] if name.startswith("_foreach_") else name
    if base in COPY_OPS or base in UNINITIALIZED_OPS:
        return DERIVED
    tags = getattr(func, "tags", ())
    if base != name:  # _foreach_add_ -> aten.add_: pointwise per list element when the single op is
        packet = getattr(torch.ops.aten, base, None)
        overload = None
        if packet is not None:
            overload = getattr(packet, "default", None) or getattr(packet, "Tensor", None)
        tags = getattr(overload, "tags", ())
    pointwise = getattr(torch.Tag, "pointwise", None) if hasattr(torch, "Tag") else None
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None) if hasattr(torch, "Tag") else None
    if pointwise is not None and pointwise in tags and seeded not in tags:
        return DERIVED
    return READ


class _Derived:
    """The digest of a tensor that is not read: a hash of how it was made from its inputs'
    digests (``key``), resolved by :meth:`CaptureMode.records` in creation order."""

    __slots__ = ("key", "hex")

    def __init__(self, key: Tuple[Any, ...]) -> None:
        self.key = key
        self.hex: Optional[str] = None


class CaptureComplete(SystemExit):
    """Raised once the capture file is written: ends a re-run cleanly (exit status 0)."""

    def __init__(self, path: Path) -> None:
        super().__init__(0)
        self.path = path


def _flat(obj: Any) -> List[Any]:
    """The leaves of an op's result (a tensor, a number, or nested lists and tuples of them)."""
    if not isinstance(obj, (list, tuple)):
        return [obj]
    out: List[Any] = []
    for item in obj:
        out.extend(_flat(item) if isinstance(item, (list, tuple)) else (item,))
    return out


def _compiled_calls(mode: "CaptureMode") -> Optional[Callable[[], None]]:
    """Route calls of compiled modules (``OptimizedModule``) through ``mode.compiled_call`` while ``mode`` is
    active; returns the function that undoes it (None where Dynamo is not loaded: nothing was compiled)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None)
    if cls is None:
        return None
    own = "__call__" in vars(cls)
    original = cls.__call__

    def call(module: Any, *args: Any, **kwargs: Any) -> Any:
        if mode.closed or mode.paused or mode.generation != _fork_generation:
            return original(module, *args, **kwargs)
        return mode.compiled_call(module, original, args, kwargs)

    cls.__call__ = call

    def undo() -> None:
        if own:
            cls.__call__ = original
        else:
            del cls.__call__
    return undo


def _scalar_digest(value: Any) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


def _shapes(value: Any) -> Any:
    """What is left of an argument an op overwrites unread: the shapes and dtypes of its tensors."""
    if isinstance(value, torch.Tensor):
        return ("overwritten", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_shapes(v) for v in value)
    return value


def _written(writes: Sequence[Tuple[int, str]], args: Sequence[Any], kwargs: Dict[str, Any]) -> List[torch.Tensor]:
    """The tensors an op writes (its written arguments, lists included)."""
    out: List[torch.Tensor] = []
    for position, name in writes:
        value = kwargs[name] if name in kwargs else args[position] if position < len(args) else None
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, torch.Tensor))
    return out


def _generator_digest(args: Sequence[Any], kwargs: Dict[str, Any]) -> str:
    """A digest of the state of the generator a random op draws from (before it draws)."""
    generator = kwargs.get("generator")
    if generator is None:
        generator = next((a for a in args if isinstance(a, torch.Generator)), None)
    try:
        if generator is None:
            device = kwargs.get("device")
            if device is None:
                tensor = next((a for a in _flat(list(args)) if isinstance(a, torch.Tensor)), None)
                device = tensor.device if tensor is not None else torch.device("cpu")
            device = torch.device(device)
            if device.type == "cuda":
                generator = torch.cuda.default_generators[device.index if device.index is not None
                                                          else torch.cuda.current_device()]
            elif device.type == "cpu":
                generator = torch.default_generator
        if generator is None:
            return "unknown"
        return bytes_digest(generator.get_state().numpy().tobytes())
    except (RuntimeError, TypeError, AttributeError, IndexError):
        return "unknown"


# -- module paths ------------------------------------------------------------------------------
_next_sequence_nr: Optional[Callable[[], int]] = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None)
_current_node: Optional[Callable[[], Any]] = getattr(torch._C, "_current_autograd_node", None)
_is_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
#: the ops a compiled module's call and its backward are recorded as
COMPILED_OPS = ("compiled forward", "compiled backward")
_NO_SEQUENCE = 2**64 - 1  # AccumulateGrad nodes have no sequence number


class ModulePaths:
    """The module path of the code running now, forward and backward (see the module docstring).

    ``roots`` names top-level modules: the tracked model is ``""`` (its children are
    ``model.0``...), its EMA ``ema``; any other module entered outside them is named by class.

    Backward: every autograd node has a sequence number, counted up as forward creates nodes.
    Each module entry and exit notes the next number, so the node running a backward op maps to
    the module path current when forward made it (a gradient accumulation: the module holding
    the parameter). On a torch without these numbers, backward ops are named ``(outside)``.
    """

    def __init__(self, roots: Sequence[Tuple[torch.nn.Module, str]] = ()) -> None:
        self.roots = {id(m): name for m, name in roots if m is not None}
        self._root_modules = [(m, name) for m, name in roots if m is not None]
        self.stack: List[Tuple[torch.nn.Module, str]] = []
        self._children: Dict[int, Dict[int, str]] = {}
        self._handles: List[Any] = []
        self._event_nrs: List[int] = []  # the next sequence number at each module entry and exit, ascending
        self._event_paths: List[str] = []  # the path current from that event on
        self._by_nr: Dict[int, str] = {}
        self._params: Optional[Dict[int, str]] = None

    def start(self) -> "ModulePaths":
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.stack.clear()

    def _names_under(self, parent: torch.nn.Module) -> Dict[int, str]:
        names = self._children.get(id(parent))
        if names is None:
            names = {}
            for name, child in parent.named_children():  # direct children first: Conv.act -> "act"
                names.setdefault(id(child), name)
            for name, module in parent.named_modules(remove_duplicate=False):
                if name:
                    names.setdefault(id(module), name)
            self._children[id(parent)] = names
        return names

    def name_of(self, module: torch.nn.Module) -> str:
        """The path ``module`` gets when it is entered now."""
        root = self.roots.get(id(module))
        if root is not None and not self.stack:
            return root
        for parent, parent_path in reversed(self.stack):
            name = self._names_under(parent).get(id(module))
            if name is not None:
                return f"{parent_path}.{name}" if parent_path else name
        if root is not None:
            return root
        return type(module).__name__

    def _event(self) -> None:
        if _next_sequence_nr is not None:
            self._event_nrs.append(_next_sequence_nr())
            self._event_paths.append(self.stack[-1][1] if self.stack else OUTSIDE)

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        if _is_compiling():  # traced into a compiled graph: its call is recorded whole (CaptureMode.compiled_call)
            return
        self.stack.append((module, self.name_of(module)))
        self._event()

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _is_compiling():
            return
        if self.stack:
            self.stack.pop()
            self._event()

    def backward_path(self) -> str:
        """The module path of the autograd node running now (OUTSIDE when it cannot be told)."""
        node = _current_node() if _current_node is not None else None
        if node is None:
            return OUTSIDE
        nr = node._sequence_nr()
        path = self._by_nr.get(nr)
        if path is None:
            if nr == _NO_SEQUENCE:
                return self._param_path(getattr(node, "variable", None))
            k = bisect.bisect_right(self._event_nrs, nr) - 1
            path = self._by_nr[nr] = self._event_paths[k] if k >= 0 else OUTSIDE
        return path

    def _param_path(self, param: Any) -> str:
        if self._params is None:
            self._params = {}
            for root, root_path in self._root_modules:
                for name, module in root.named_modules(remove_duplicate=False):
                    path = f"{root_path}.{name}" if root_path and name else (name or root_path)
                    for p in module.parameters(recurse=False):
                        self._params.setdefault(id(p), path)
        return self._params.get(id(param), OUTSIDE)

    def current(self, in_backward: bool) -> Tuple[str, Optional[bool]]:
        """(path, whether the outermost module entered is in training mode; None outside modules)."""
        if in_backward:
            return self.backward_path(), True
        if not self.stack:
            return OUTSIDE, None
        return self.stack[-1][1], bool(self.stack[0][0].training)


_graph_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)
# Arguments that are not tensors but shape an op's result (numbers, rounding modes, dtypes): one
# digest of them all joins the op's input digests.
_NUMBERS = (int, float, bool, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format)

# Bumped in every forked child: a DataLoader worker forked while a capture runs inherits the
# mode, and must not record (cheaper per op than comparing process ids).
_fork_generation = 0
_gc_held = False  # a capture turned the garbage collector off (a forked child turns it back on)


def _forked() -> None:
    global _fork_generation, _gc_held
    _fork_generation += 1
    if _gc_held:
        gc.enable()
        _gc_held = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


# -- the dispatch mode -------------------------------------------------------------------------
try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # torch < 1.13: no dispatch modes, capture unavailable
    TorchDispatchMode = object  # type: ignore[assignment,misc]


class CaptureMode(TorchDispatchMode):  # type: ignore[misc,valid-type]
    """Records every aten op while active (see the module docstring); :meth:`records` resolves digests.

    Each op is kept as a tuple ``(name, phase, module, inputs, outputs, extra)``; an entry of
    ``inputs``/``outputs`` is a digest handle (int), a host digest (str) or a derivation
    (:class:`_Derived`), resolved to hex by :meth:`records`. Outputs are the op's results and
    the arguments it writes (``_foreach_add_``'s list, BatchNorm's running statistics).

    ``read``: the positions (first, last) of the ops whose inputs and outputs are all read, none
    derived -- the confirming pass of :mod:`.locate`, around the op the first pass suspects.
    """

    def __init__(self, paths: ModulePaths, read: Optional[Tuple[int, int]] = None,
                 graphs: Optional[Callable[[], List[Dict[str, Any]]]] = None) -> None:
        super().__init__()
        self.paths = paths
        self.graphs = graphs or (lambda: [])
        self.closed = False
        self.extras: Dict[int, Dict[str, Any]] = {}  # op position -> more fields of its record (compiled graphs)
        self.phase_override: Optional[str] = None  # "optimizer" inside optimizer.step, "after" after it
        self.validating = False  # an eval-mode forward ran since the last training batch
        self.paused = False  # the recorder's own digests are not the run's ops
        self.data_module: Optional[str] = None  # inside a DataLoader's fetch: phase "data", this module path
        self._funcs: Dict[Any, Tuple[Any, ...]] = {}  # op -> _op_info(op)
        self._derived: List[_Derived] = []  # in creation order: each one's inputs come before it
        self.generation = _fork_generation
        self.ops: List[Tuple[str, str, str, List[Any], List[Any], Tuple[int, Optional[str], int, bool]]] = []
        self.read_window = read
        self.step_start = 0  # ops before this position ran before the captured step's first batch
        self._digests = StreamDigests()
        # id(tensor) -> (weak reference, (version, pointer, shape, stride), entry): a tensor seen
        # again unchanged (an op's output as the next op's input) is not read twice.
        self._cache: Dict[int, Tuple[Any, Any, Any]] = {}

    def __enter__(self) -> "CaptureMode":
        # The capture makes a few objects per op: no collection passes over the whole process
        # meanwhile (the step's own garbage is collected once the capture ends).
        global _gc_held
        mode = super().__enter__()
        self._collecting = gc.isenabled()
        gc.disable()
        _gc_held = self._collecting
        return mode

    def __exit__(self, *exc: Any) -> Any:
        global _gc_held
        self.closed = True
        try:
            return super().__exit__(*exc)
        finally:
            if self._collecting:
                gc.enable()
            _gc_held = False

    def _read(self, t: torch.Tensor) -> Any:
        """A handle of ``t``'s words, or a host digest string for tensors without readable bytes."""
        try:
            entry: Any = self._digests.add(t)
        except (RuntimeError, NotImplementedError, TypeError):  # no bytes to read (fake, sparse-like)
            entry = None
        if entry is None:
            entry = _scalar_digest((str(t.dtype), tuple(t.shape), str(t.layout)))
        return entry

    @staticmethod
    def _key(t: torch.Tensor, written: bool = False) -> Any:
        """What must be unchanged for ``t``'s cached entry to hold; None for tensors without storage.
        ``written``: the op changed ``t`` in place, and its version counter moves on once the op
        returns (above this dispatch level)."""
        try:
            return (t._version + written, t.data_ptr(), t.shape, t.stride())
        except (RuntimeError, NotImplementedError):  # no storage (fake, functional or sparse tensors)
            return None

    def _remember(self, t: torch.Tensor, key: Any, entry: Any) -> None:
        if key is not None:
            try:
                self._cache[id(t)] = (weakref.ref(t), key, entry)
            except TypeError:
                pass

    def _input(self, t: torch.Tensor, full: bool = False) -> Any:
        """``t``'s entry: the one it got when made or last seen, if unchanged since; else read.
        ``full``: a derived entry is not enough, the bytes are read."""
        key = self._key(t)
        if key is None:
            return self._read(t)
        hit = self._cache.get(id(t))
        if hit is not None and hit[1] == key and hit[0]() is t:
            entry = hit[2]
            if not full or not isinstance(entry, _Derived):
                return entry
        entry = self._read(t)
        self._remember(t, key, entry)
        return entry

    def _inputs(self, items: Sequence[Any], out: List[Any], numbers: List[Any], full: bool = False) -> None:
        """Entries of the tensors in ``items`` (nested lists and tuples too) into ``out``, their
        other arguments (numbers, strings, dtypes, devices) into ``numbers``, in order."""
        for item in items:
            if isinstance(item, torch.Tensor):
                out.append(self._input(item, full))
            elif isinstance(item, (list, tuple)):
                self._inputs(item, out, numbers, full)
            elif isinstance(item, _NUMBERS):
                numbers.append(item)
            elif isinstance(item, dict):
                self._inputs(list(item.values()), out, numbers, full)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if self.paused or self.generation != _fork_generation:
            return func(*args, **kwargs)
        info = self._funcs.get(func)
        if info is None:
            info = self._funcs[func] = _op_info(func)
        name, kind, writes, out_names, random, alias, overwrites = info
        index = len(self.ops)
        window = self.read_window
        full = window is not None and window[0] <= index <= window[1]
        # Below autograd here: the digests' own ops build no graph, whatever the grad mode says.
        grad = torch.is_grad_enabled()
        inputs: List[Any] = []
        numbers: List[Any] = []
        given = {k: v for k, v in kwargs.items() if k not in out_names} if out_names and kwargs else kwargs
        read_args = (_shapes(args[0]),) + tuple(args[1:]) if overwrites and args else args
        # before the op: in-place ops change them
        self._inputs((read_args, given) if given else read_args, inputs, numbers, full)
        tensors_in = len(inputs)
        if numbers:
            inputs.append(_scalar_digest(tuple(numbers)))
        # (tensor inputs, generator state or None, read in full / derived, alias): a dict in records()
        extra = (tensors_in, _generator_digest(args, kwargs) if random else None,
                 2 if full else kind != READ, alias)
        result = func(*args, **kwargs)
        in_backward = _graph_task_id() != -1
        module, training = self.paths.current(in_backward) if self.data_module is None else (self.data_module, None)
        if self.data_module is not None:
            phase = "data"
        elif in_backward:
            phase = "backward"
        elif self.phase_override == "optimizer":
            phase = "optimizer"
        elif grad:
            phase = "forward"
        elif training is False:  # an eval-mode model under no_grad/inference_mode: validation
            phase = "validation"
            self.validating = True
        elif training is None and self.phase_override == "after":
            phase = "optimizer"  # EMA update and bookkeeping after optimizer.step()
        else:
            phase = "validation" if self.validating else "forward"
        written = _written(writes, args, kwargs) if writes else []
        if full:
            kind = READ
        self.ops.append((name, phase, module, inputs, self._outputs(name, kind, result, inputs, written), extra))
        return result

    def compiled_call(self, module: torch.nn.Module, call: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Run a compiled module's call with the mode set aside (Dynamo would run it eagerly under a mode) and
        record it as one op, ``compiled forward``; its autograd node is recorded as ``compiled backward``."""
        from torch.utils._python_dispatch import _disable_current_modes

        inner = getattr(module, "_orig_mod", module)
        path = self.paths.name_of(inner)
        training = bool(inner.training)
        grad = torch.is_grad_enabled()
        with _disable_current_modes():
            inputs: List[Any] = []
            numbers: List[Any] = []
            state = list(inner.parameters()) + list(inner.buffers())
            self._inputs((args, kwargs, state), inputs, numbers, full=True)
            tensors_in = len(inputs)
            if numbers:
                inputs.append(_scalar_digest(tuple(numbers)))
            result = call(module, *args, **kwargs)
            leaves = nested_tensors(result)
            outputs = [self._read(t) for t in leaves]
        phase = "forward" if grad or training else "validation"
        self._add_compiled("compiled forward", phase, path, inputs, outputs, tensors_in)
        nodes = {}
        for t in leaves:
            node = t.grad_fn
            if node is not None and "Compiled" in type(node).__name__ and id(node) not in nodes:
                nodes[id(node)] = node
                node.register_hook(self._backward_hook(path))
        return result

    def _backward_hook(self, path: str) -> Callable[[Any, Any], None]:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if self.closed or self.paused or self.generation != _fork_generation:
                return
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                inputs = [self._read(g) for g in nested_tensors(grad_outputs)]
                outputs = [self._read(g) for g in nested_tensors(grad_inputs)]
            self._add_compiled("compiled backward", "backward", path, inputs, outputs, len(inputs))
        return hook

    def _add_compiled(self, op: str, phase: str, path: str, inputs: List[Any], outputs: List[Any],
                      tensors_in: int) -> None:
        direction = "backward" if op == "compiled backward" else "forward"
        graphs = [g for g in self.graphs() if g.get("direction") == direction]
        self.extras[len(self.ops)] = {"graphs": graphs}
        self.ops.append((op, phase, path, inputs, outputs, (tensors_in, None, 2, False)))

    def _outputs(self, op: str, kind: int, result: Any, inputs: List[Any],
                 written: Sequence[torch.Tensor]) -> List[Any]:
        """Entries of an op's outputs -- its results, then the arguments it wrote that it does not
        return -- read (READ) or derived from the inputs' entries (see :func:`_kind`); then one
        for the numbers it returned, if any."""
        out: List[Any] = []
        numbers: List[Any] = []
        derived_from = tuple(inputs)
        k = 0
        leaves = _flat(result)
        if written:
            leaves = leaves + [w for w in written if not any(w is leaf for leaf in leaves)]
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                if isinstance(leaf, _NUMBERS):
                    numbers.append(leaf)
                continue
            entry: Any = None
            if kind == IDENTITY and len(inputs) == 1:
                entry = inputs[0]
            elif kind != READ:
                try:
                    geometry = ((leaf.shape, leaf.stride(), leaf.storage_offset(), leaf.dtype) if kind == VIEW
                                else (leaf.shape, leaf.dtype))
                except (RuntimeError, NotImplementedError):
                    geometry = None
                if geometry is not None:
                    entry = _Derived((op, k, geometry, derived_from))
                    self._derived.append(entry)
            if entry is None:
                entry = self._read(leaf)  # new tensors, or in-place ones just changed
            k += 1
            self._remember(leaf, self._key(leaf, bool(written) and any(leaf is w for w in written)), entry)
            out.append(entry)
        if numbers:
            out.append(_scalar_digest(tuple(numbers)))
        return out

    @property
    def tensors_read(self) -> int:
        """How many tensors' bytes were digested (the rest were derived or seen before)."""
        return self._digests.count

    def records(self) -> List[Dict[str, Any]]:
        """Every op as ``{"op", "phase", "module", "in": [hex], "out": [hex]}`` (one device transfer)."""
        collecting = gc.isenabled()
        gc.disable()  # many small objects at once: no collection passes over the whole process meanwhile
        try:
            return self._records()
        finally:
            if collecting:
                gc.enable()

    def _records(self) -> List[Dict[str, Any]]:
        host = self._digests.hexes()

        def hexes(entries: Sequence[Any]) -> List[str]:
            return [host[e] if type(e) is int else e if isinstance(e, str) else e.hex for e in entries]

        shapes: Dict[Any, str] = {}
        for d in self._derived:  # creation order: the entries it comes from are resolved already
            op, k, geometry, inputs = d.key
            how = shapes.get(geometry)
            if how is None:
                how = shapes[geometry] = repr(geometry)
            text = "|".join([op, str(k), how, *hexes(inputs)])
            d.hex = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

        start = self.step_start
        records = []
        for i, (name, phase, module, inputs, outputs, (tensors_in, rng, how, alias)) in enumerate(self.ops):
            record = {"op": name, "phase": phase, "module": module, "in": hexes(inputs), "out": hexes(outputs),
                      "t": tensors_in}
            if rng is not None:
                record["rng"] = rng
            if how:
                record["read" if how == 2 else "d"] = 1
            if alias:
                record["alias"] = 1
            if i < start:
                record["pre"] = 1
            if i in self.extras:
                record.update(self.extras[i])
            records.append(record)
        return records


# -- one step's capture, driven by the fingerprint recorder -----------------------------------
class StepCapture:
    """Captures step ``step`` of a run into ``path``; the recorder calls the ``on_*`` methods."""

    def __init__(self, step: int, path: os.PathLike, roots: Callable[[], Sequence[Tuple[Any, str]]],
                 through: str = "step", exit_when_done: bool = True, read: Optional[Tuple[int, int]] = None,
                 graphs: Optional[Callable[[], List[Dict[str, Any]]]] = None) -> None:
        self.step = int(step)
        self.graphs = graphs  # the compiled graphs lowered in this process, described (the session's guard)
        self._undo_compiled: Optional[Callable[[], None]] = None
        self.read = read
        self._batches: List[Tuple[int, Any]] = []  # (op position, loader) of each batch seen while capturing
        self.path = Path(path)
        self.through = through if through in ("step", "validation", "data") else "step"
        self.workers = 0  # worker processes of the loader of the step's batches (a data capture)
        self._loader_workers: Dict[Any, int] = {}  # loader -> its worker processes (a data capture)
        self.exit_when_done = exit_when_done
        self._roots = roots
        self.mode: Optional[CaptureMode] = None
        self.paths: Optional[ModulePaths] = None
        self.done = False
        self._steps = 0

    @classmethod
    def from_env(cls, roots: Callable[[], Sequence[Tuple[Any, str]]],
                 graphs: Optional[Callable[[], List[Dict[str, Any]]]] = None) -> Optional["StepCapture"]:
        step, path = os.environ.get(STEP_VAR, "").strip(), os.environ.get(PATH_VAR, "").strip()
        if not step.isdigit() or int(step) < 1 or not path:
            return None
        return cls(int(step), path, roots, os.environ.get(THROUGH_VAR, "step").strip(),
                   read=parse_window(os.environ.get(READ_VAR, "")), graphs=graphs)

    @property
    def active(self) -> bool:
        return self.mode is not None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Ops run in the block (the recorder's own digests) are not captured."""
        mode = self.mode
        if mode is None:
            yield
            return
        was, mode.paused = mode.paused, True
        try:
            yield
        finally:
            mode.paused = was

    def around_pre(self, hook: Callable[..., None]) -> Callable[..., None]:
        """The recorder's optimizer pre-step hook, with the capture told first and paused inside."""
        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            self.on_step_begin(self._steps + 1)
            with self.paused():
                hook(optimizer, args, kwargs)
        return pre

    def around_post(self, hook: Callable[..., None]) -> Callable[..., None]:
        """The recorder's post-step hook, paused; then the capture may start or end (and exit)."""
        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            with self.paused():
                hook(optimizer, args, kwargs)
            self._steps += 1
            self.on_step_end(self._steps)
        return post

    def around_batch(self, hook: Callable[..., None]) -> Callable[..., None]:
        """The recorder's batch hook, paused; then the capture hears of the batch."""
        def on_batch(source: Any, batch: Any) -> None:
            with self.paused():
                hook(source, batch)
            self.on_batch(id(getattr(source, "_dataset", source)))
        return on_batch

    def _begin(self) -> None:
        if self.mode is not None or self.done:
            return
        self.paths = ModulePaths([(m, name) for m, name in self._roots() if m is not None])
        if self.through != "data":  # a data capture names no model module
            self.paths.start()
        self.mode = CaptureMode(self.paths, self.read, self.graphs)
        self.mode.paused = self.through == "data"  # only the fetches are captured (see fetch)
        self._undo_compiled = _compiled_calls(self.mode)
        self.mode.__enter__()

    def fetch(self, iterator: Any, next_batch: Callable[[Any], Any]) -> Any:
        """``next_batch(iterator)``: a DataLoader iterator's next batch. Its ops are no op of a step
        (the batch is digested) -- except in a data capture of the step's batches, which records
        them with phase ``data`` and a module path naming the loader, dataset or collate function."""
        if self.through != "data" or self.done or self._steps != self.step - 1:
            if self.mode is None:
                return next_batch(iterator)
            with self.paused():
                return next_batch(iterator)
        self._begin()
        mode = self.mode
        assert mode is not None
        loader = id(getattr(iterator, "_dataset", iterator))
        self._loader_workers[loader] = int(getattr(iterator, "_num_workers", 0) or 0)
        self.workers = self._loader_workers[loader]  # until step k begins: the loader fetched from last
        self._batches.append((len(mode.ops), loader))
        fetcher = getattr(iterator, "_dataset_fetcher", None)  # the loader fetches here (no worker processes)
        fetch = getattr(fetcher, "fetch", None)
        collate = getattr(fetcher, "collate_fn", None)
        dataset = f"{DATA} dataset {_qualname(type(getattr(fetcher, 'dataset', None)))}"

        def in_module(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                outer, mode.data_module = mode.data_module, name
                try:
                    return fn(*args, **kwargs)
                finally:
                    mode.data_module = outer
            return run

        own_fetch = fetcher is not None and "fetch" in vars(fetcher)
        was, mode.paused = mode.paused, False
        try:
            if fetch is not None:
                fetcher.fetch = in_module(dataset, fetch)
            if callable(collate):
                fetcher.collate_fn = in_module(f"{DATA} collate_fn {_qualname(collate)}", collate)
            return in_module(f"{DATA} DataLoader", next_batch)(iterator)
        finally:
            mode.paused = was
            if fetch is not None:
                if own_fetch:
                    fetcher.fetch = fetch
                else:
                    del fetcher.fetch  # the class's own method again
            if callable(collate):
                fetcher.collate_fn = collate

    def on_batch(self, loader: Any = None) -> None:
        """A batch left a DataLoader (``loader``: which one): step 1's capture starts here (nothing
        of the step ran yet)."""
        if self.through == "data":  # its batches are noted as they are fetched
            return
        if self.step == 1 and not self.done:
            self._begin()
        elif self.mode is not None:
            self.mode.phase_override = None
        if self.mode is not None:
            self._batches.append((len(self.mode.ops), loader))

    def on_step_begin(self, number: int) -> None:
        """``optimizer.step()`` of step ``number`` starts (its pre-hook)."""
        if self.mode is not None:
            if number > self.step or (self.through == "data" and number == self.step):
                # validation after step k is over; or step k's batches are all fetched (a data capture)
                if number == self.step and self._batches:
                    loader = self._batches[-1][1]
                    self.mode.step_start = next(i for i, source in self._batches if source == loader)
                    self.workers = self._loader_workers.get(loader, self.workers)
                self.finish()
                return
            if number == self.step and self._batches:
                # The step began with the first batch of its own loader (the loader of its last
                # batch): ops before it (the previous step's EMA update, validation) are no part of it.
                loader = self._batches[-1][1]
                self.mode.step_start = next(i for i, source in self._batches if source == loader)
            self.mode.phase_override = "optimizer"
            self.mode.validating = False

    def on_step_end(self, number: int) -> None:
        """``optimizer.step()`` of step ``number`` ended (its post-hook)."""
        if number == self.step - 1 and self.through != "data":  # a data capture begins at the fetch
            self._begin()
            if self.mode is not None:
                self.mode.phase_override = "after"
        elif number == self.step and self.mode is not None:
            if self.through == "step":
                self.finish()
            else:
                self.mode.phase_override = "after"

    def finish(self, exit_process: Optional[bool] = None) -> Optional[Path]:
        """Stop capturing, write the file; end the process (:class:`CaptureComplete`) unless told not to."""
        if self.mode is None or self.done:
            return None
        mode, self.mode = self.mode, None
        self.done = True
        mode.__exit__(None, None, None)
        if self._undo_compiled is not None:
            self._undo_compiled()
            self._undo_compiled = None
        if self.paths is not None:
            self.paths.stop()
        records = mode.records()
        header = {"format": FORMAT, "schema": 2, "digest": ALGORITHM, "step": self.step, "through": self.through,
                  "torch": torch.__version__, "ops": len(records), "step_start": mode.step_start,
                  "read": list(self.read) if self.read else None, "workers": self.workers, "complete": True}
        with atomic.atomic_file(self.path, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            for record in records:
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
        if self.exit_when_done if exit_process is None else exit_process:
            raise CaptureComplete(self.path)
        return self.path


def _qualname(obj: Any) -> str:
    """``LoadImagesAndLabels.collate_fn``: how a function or class is named where it is defined."""
    return str(getattr(obj, "__qualname__", None) or getattr(type(obj), "__qualname__", "?"))


def parse_window(text: str) -> Optional[Tuple[int, int]]:
    """``"FIRST:LAST"`` (op positions) as a pair; None when empty or malformed."""
    first, _, last = text.strip().partition(":")
    if not (first.isdigit() and last.isdigit()) or int(first) > int(last):
        return None
    return int(first), int(last)


class CaptureError(ValueError):
    """A capture file cannot be used."""


def read_capture(path: os.PathLike) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The header and op records of a capture file; :class:`CaptureError` when unusable."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read the op capture: {exc.strerror}") from None
    try:
        header = json.loads(lines[0]) if lines else None
        records = [json.loads(line) for line in lines[1:]]
    except ValueError:
        raise CaptureError(f"{path} is not a complete yolo-det op capture (a line is not JSON)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CaptureError(f"{path} is not a yolo-det op capture")
    if header.get("digest") != ALGORITHM:
        raise CaptureError(f"{path} is an op capture of digest algorithm {header.get('digest')!r}; this yolo-det "
                           f"computes {ALGORITHM!r}: capture again with this yolo-det")
    return header, records


__all__ = ["ALIAS_OPS", "DATA", "CaptureComplete", "CaptureError", "CaptureMode", "ModulePaths", "PATH_VAR", "READ_VAR",
           "STEP_VAR", "StepCapture", "THROUGH_VAR", "parse_window", "read_capture"]
