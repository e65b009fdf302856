"""Op capture for one training step: every aten op, its module path, phase and bit-exact digests.

``yolo-det verify --locate`` re-runs two diverging runs with ``YOLO_DET_CAPTURE_STEP=k`` and
``YOLO_DET_CAPTURE=<file>``. The fingerprint recorder then switches a :class:`CaptureMode`
(a ``TorchDispatchMode``) on from the end of step k-1 (the first batch, for k = 1) to the end
of step k (or the start of step k+1 when validation is wanted), writes the capture file and
ends the process (:class:`CaptureComplete`, exit status 0): the re-runs stop right after step k.

Per op the capture keeps the overload name (``aten.convolution.default``), the phase
(forward, backward, optimizer, validation), the module path it ran in and the digests of its
input and output tensors: algorithm ``bytes-intmm-v1`` of :mod:`.digest`, computed on the
tensor's device; the digests stay there until the capture ends (one transfer). Memory is 16
bytes per tensor seen, not the tensors.

Module paths follow the chain of modules entered at call time (``model.4.cv3.act``), not an
identity lookup: YOLOv5's ``Conv.default_act`` is one ``nn.SiLU`` shared by every ``Conv``.
Backward ops get the path of the module whose forward made them (multi-grad hooks on each
module's outputs and inputs, as ``torch.utils.module_tracker`` does).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .digest import ALGORITHM, COLUMNS, MIN_ROWS, ROW, fold_constants, meta_constant, row_constants, weight_matrix

FORMAT = "yolo-det-capture"
STEP_VAR = "YOLO_DET_CAPTURE_STEP"
PATH_VAR = "YOLO_DET_CAPTURE"
THROUGH_VAR = "YOLO_DET_CAPTURE_THROUGH"  # "step" (default) or "validation"
BLOCK_ROWS = 2048  # GEMM rows per call (2 MiB of bytes)
PHASES = ("forward", "backward", "optimizer", "validation")
OUTSIDE = "(outside)"  # module path of ops that ran outside every module


#: Ops whose outputs are views of their inputs: digests derived from the inputs', not read.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute", "expand", "slice", "select",
    "narrow", "unsqueeze", "squeeze", "detach", "alias", "as_strided", "split", "split_with_sizes", "unbind", "chunk",
    "unfold", "diagonal", "view_as_real", "view_as_complex", "lift_fresh", "_alias", "numpy_T", "mT", "expand_as",
})


class CaptureComplete(SystemExit):
    """Raised once the capture file is written: ends a re-run cleanly (exit status 0)."""

    def __init__(self, path: Path) -> None:
        super().__init__(0)
        self.path = path


# -- digests of single tensors, no per-call host work -----------------------------------------
class _TensorDigests:
    """``bytes-intmm-v1`` digests of the tensors an op capture sees; constants live on each device,
    meta words are added on the host. Small tensors are gathered into a :class:`_Stage` and
    digested together; large ones one by one, in a few fixed GEMM shapes.

    The result equals :class:`~yolo_det.proof.digest.Digester`'s: per tensor, the row sums
    ``rows @ W`` weighted by ``C[row]`` summed per column (word 0: column 0; word 1: columns
    1..7 folded by ``E``), plus the dtype/shape/size words (added on the host when written).
    """

    def __init__(self) -> None:
        self._w: Dict[torch.device, Tuple[torch.Tensor, bool]] = {}
        self._c: Dict[torch.device, torch.Tensor] = {}
        self._e: Dict[torch.device, torch.Tensor] = {}
        self._stages: Dict[torch.device, "_Stage"] = {}
        self._direct: List[Tuple[int, torch.Tensor]] = []
        self.count = 0

    def add(self, t: torch.Tensor) -> Optional[int]:
        """A handle for ``t``'s words (resolved by :meth:`resolve`); None for tensors without bytes."""
        if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
            return None
        nbytes = t.numel() * t.element_size()
        handle = self.count
        stage = self._stages.get(t.device)
        if stage is None:
            stage = self._stages[t.device] = _Stage(t.device, self)
        if nbytes == 0 or not stage.add(handle, t, nbytes):
            words = self.words(t)
            if words is None:
                return None
            self._direct.append((handle, words))
        self.count += 1
        return handle

    def resolve(self) -> np.ndarray:
        """``count x 2`` int64 words of every handle (one transfer per device)."""
        out = np.zeros((self.count, 2), dtype=np.int64)
        parts: Dict[torch.device, List[Tuple[List[int], torch.Tensor]]] = {}
        for stage in self._stages.values():
            stage.flush()
            parts.setdefault(stage.device, []).extend(stage.results)
        for handle, words in self._direct:
            parts.setdefault(words.device, []).append(([handle], words.reshape(1, 2)))
        for chunks in parts.values():
            if chunks:
                joined = torch.cat([w for _, w in chunks]).cpu().numpy()
                out[[h for hs, _ in chunks for h in hs]] = joined
        return out

    def _constants(self, device: torch.device, rows: int) -> Tuple[torch.Tensor, bool, torch.Tensor, torch.Tensor]:
        entry = self._w.get(device)
        if entry is None:
            from .digest import _int_mm_works

            w = torch.from_numpy(weight_matrix()).to(device)
            works = _int_mm_works(device, w)
            entry = self._w[device] = (w if works else w.to(torch.float32), works)
            self._e[device] = torch.from_numpy(fold_constants()).to(device)
        table = self._c.get(device)
        if table is None or table.shape[0] < rows:  # grows rarely: the largest tensor so far, doubled
            size = max(rows, 2 * (table.shape[0] if table is not None else 2048))
            table = self._c[device] = torch.from_numpy(row_constants(size)).to(device)
        return entry[0], entry[1], table, self._e[device]

    def words(self, t: torch.Tensor) -> Optional[torch.Tensor]:
        """Two int64 words (without the meta words) on ``t``'s device; None for tensors without bytes."""
        if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
            return None
        nbytes = t.numel() * t.element_size()
        if nbytes == 0:
            return torch.zeros(2, dtype=torch.int64, device=t.device)
        flat = t.detach().contiguous().reshape(-1).view(torch.int8)
        rows = max(-(-nbytes // ROW), MIN_ROWS if t.device.type == "cuda" else 1)
        # A few GEMM shapes only: oneDNN builds a kernel per new shape (milliseconds on CPU), and
        # zero rows add nothing to the sums.
        rows = 1 << (rows - 1).bit_length() if rows <= BLOCK_ROWS else -(-rows // BLOCK_ROWS) * BLOCK_ROWS
        if rows * ROW != nbytes:
            flat = torch.nn.functional.pad(flat, (0, rows * ROW - nbytes))
        matrix = flat.view(rows, ROW)
        w, int_mm, table, fold = self._constants(t.device, rows)
        blocks = [matrix[i:i + BLOCK_ROWS] for i in range(0, rows, BLOCK_ROWS)]
        if int_mm:
            parts = [torch._int_mm(block, w) for block in blocks]
        else:
            parts = [torch.mm(block.to(torch.float32), w).to(torch.int32) for block in blocks]
        sums = parts[0] if len(parts) == 1 else torch.cat(parts)
        seg = (sums.to(torch.int64) * table[:rows]).sum(0)  # COLUMNS; padding rows add 0
        return torch.stack([seg[0], (seg[1:] * fold).sum()])


class _Stage:
    """Small tensors' bytes gathered in one buffer per device, digested together when it fills:
    a copy per tensor instead of a dozen small kernels; the digest is the same (rows of a tensor
    start at a row boundary, zero-padded; row constants restart at each tensor)."""

    CAPACITY_ROWS = 4096  # 4 MiB per device; one GEMM shape

    def __init__(self, device: torch.device, digests: "_TensorDigests") -> None:
        self.device = device
        self.digests = digests
        self.buffer = torch.zeros(self.CAPACITY_ROWS * ROW, dtype=torch.int8, device=device)
        self.used = 0  # rows
        self.pending: List[Tuple[int, int, int]] = []  # (handle, first row, rows)
        self.results: List[Tuple[List[int], torch.Tensor]] = []  # (handles, P x 2 words)
        self._ext: Optional[torch.Tensor] = None
        self._keep: Optional[torch.Tensor] = None  # the last pinned index buffer, until its copy is done

    def add(self, handle: int, t: torch.Tensor, nbytes: int) -> bool:
        rows = -(-nbytes // ROW)
        if rows > self.CAPACITY_ROWS // 4:
            return False
        if self.used + rows > self.CAPACITY_ROWS:
            self.flush()
        start = self.used * ROW
        self.buffer[start:start + nbytes].view(t.dtype).view(t.shape).copy_(t)
        self.pending.append((handle, self.used, rows))
        self.used += rows
        return True

    def flush(self) -> None:
        if not self.pending:
            return
        w, int_mm, table, fold = self.digests._constants(self.device, self.CAPACITY_ROWS // 4)
        if self._ext is None:  # row constants for rows 0.. of a tensor, then a zero row for unused rows
            zero = torch.zeros((1, COLUMNS), dtype=torch.int64, device=self.device)
            self._ext = torch.cat([table[:self.CAPACITY_ROWS // 4], zero])
        capacity = self.CAPACITY_ROWS
        index = np.full(capacity, self.CAPACITY_ROWS // 4, dtype=np.int64)
        starts = np.zeros(len(self.pending), dtype=np.int64)
        ends = np.zeros(len(self.pending), dtype=np.int64)
        for k, (_, first, rows) in enumerate(self.pending):
            index[first:first + rows] = np.arange(rows)
            starts[k], ends[k] = first, first + rows
        matrix = self.buffer.view(capacity, ROW)
        sums = torch._int_mm(matrix, w) if int_mm else torch.mm(matrix.to(torch.float32), w).to(torch.int32)
        host = torch.from_numpy(np.concatenate([index, starts, ends]))
        if self.device.type == "cuda":  # no wait for the device: a pinned copy, kept alive with the result
            host = host.pin_memory()
        moved = host.to(self.device, non_blocking=True)
        consts = self._ext.index_select(0, moved[:capacity])
        acc = torch.zeros((capacity + 1, COLUMNS), dtype=torch.int64, device=self.device)
        torch.cumsum(sums.to(torch.int64).mul_(consts), 0, out=acc[1:])
        picked = acc.index_select(0, moved[capacity:])
        seg = picked[len(starts):] - picked[:len(starts)]  # P x COLUMNS
        words = torch.stack([seg[:, 0], (seg[:, 1:] * fold).sum(1)], 1)
        self.results.append(([h for h, _, _ in self.pending], words))
        self._keep = host
        self.pending = []
        self.used = 0
        self.buffer.zero_()


@functools.lru_cache(maxsize=65536)
def _meta(dtype: torch.dtype, shape: Tuple[int, ...], nbytes: int) -> Tuple[int, int]:
    return meta_constant(dtype, shape, nbytes)


def _scalar_digest(value: Any) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


# -- module paths ------------------------------------------------------------------------------
class ModulePaths:
    """The module path of the code running now, forward and backward (see the module docstring).

    ``roots`` names top-level modules: the tracked model is ``""`` (its children are
    ``model.0``...), its EMA ``ema``; any other module entered outside them is named by class.
    """

    def __init__(self, roots: Sequence[Tuple[torch.nn.Module, str]] = ()) -> None:
        self.roots = {id(m): name for m, name in roots if m is not None}
        self.stack: List[Tuple[torch.nn.Module, str]] = []
        self.backward: List[str] = []
        self._children: Dict[int, Dict[int, str]] = {}
        self._handles: List[Any] = []
        self._grad_handles: List[Any] = []

    def start(self) -> "ModulePaths":
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def stop(self) -> None:
        for handle in self._handles + self._grad_handles:
            handle.remove()
        self._handles, self._grad_handles = [], []
        self.stack.clear()
        self.backward.clear()

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

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        path = self.name_of(module)
        self.stack.append((module, path))
        tensors = [a for a in _leaves(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        if tensors and torch.is_grad_enabled():
            self._grad_handles.append(_grad_hook(tensors, self._leave(path)))

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.stack:
            return
        _, path = self.stack.pop()
        tensors = [a for a in _leaves(output) if isinstance(a, torch.Tensor) and a.requires_grad]
        if tensors and torch.is_grad_enabled():
            self._grad_handles.append(_grad_hook(tensors, self._enter(path)))

    def _enter(self, path: str) -> Callable[[Any], None]:
        def enter(_grads: Any) -> None:
            i = len(self.backward)  # an enclosing module's hook fires with its last child's: keep the child on top
            while i > 0 and _inside(self.backward[i - 1], path):
                i -= 1
            self.backward.insert(i, path)
        return enter

    def _leave(self, path: str) -> Callable[[Any], None]:
        def leave(_grads: Any) -> None:
            for i in range(len(self.backward) - 1, -1, -1):
                if self.backward[i] == path:
                    del self.backward[i]
                    break
        return leave

    def current(self, in_backward: bool) -> Tuple[str, Optional[bool]]:
        """(path, whether the outermost module entered is in training mode; None outside modules)."""
        if in_backward:
            return (self.backward[-1] if self.backward else OUTSIDE), True
        if self.backward:
            self.backward.clear()  # a backward that ended without leaving every module
        if not self.stack:
            return OUTSIDE, None
        return self.stack[-1][1], bool(self.stack[0][0].training)


def _grad_hook(tensors: List[torch.Tensor], fn: Callable[[Any], None]) -> Any:
    """Call ``fn`` once the gradients of ``tensors`` are computed (a plain tensor hook for one tensor)."""
    if len(tensors) == 1:
        return tensors[0].register_hook(lambda grad: fn(grad) and None)
    return torch.autograd.graph.register_multi_grad_hook(tensors, fn)


def _inside(child: str, parent: str) -> bool:
    """Whether module path ``child`` lies strictly inside ``parent`` (``""`` is the model's root)."""
    return child != parent and (not parent or child.startswith(parent + "."))


def _leaves(obj: Any) -> List[Any]:
    """Tensors and scalars in an op's arguments or result (lists, tuples, dicts), in order."""
    out: List[Any] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        else:
            out.append(item)
    return out


def _graph_task_id() -> int:
    getter = getattr(torch._C, "_current_graph_task_id", None)
    return getter() if getter is not None else -1


# -- the dispatch mode -------------------------------------------------------------------------
try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # torch < 1.13: no dispatch modes, capture unavailable
    TorchDispatchMode = object  # type: ignore[assignment,misc]


class _Op:
    __slots__ = ("op", "phase", "module", "inputs", "outputs")

    def __init__(self, op: str, phase: str, module: str, inputs: List[Any], outputs: List[Any]) -> None:
        self.op, self.phase, self.module, self.inputs, self.outputs = op, phase, module, inputs, outputs


class CaptureMode(TorchDispatchMode):  # type: ignore[misc,valid-type]
    """Records every aten op while active (see the module docstring); :meth:`records` resolves digests."""

    def __init__(self, paths: ModulePaths) -> None:
        super().__init__()
        self.paths = paths
        self.phase_override: Optional[str] = None  # "optimizer" inside optimizer.step, "after" after it
        self.validating = False  # an eval-mode forward ran since the last training batch
        self.paused = False  # the recorder's own digests are not the run's ops
        self._names: Dict[Any, str] = {}
        self.pid = os.getpid()
        self.ops: List[_Op] = []
        self._digests = _TensorDigests()
        # id(tensor) -> (weak reference, (version, pointer, shape, stride), entry): a tensor seen
        # again unchanged (an op's output as the next op's input) is not read twice.
        self._cache: Dict[int, Tuple[Any, Any, Any]] = {}

    def _cached(self, t: torch.Tensor, key: Any) -> Any:
        hit = self._cache.get(id(t))
        if hit is not None and hit[1] == key and hit[0]() is t:
            return hit[2]
        return None

    def _remember(self, t: torch.Tensor, key: Any, entry: Any) -> None:
        try:
            self._cache[id(t)] = (weakref.ref(t), key, entry)
        except TypeError:
            pass

    def _digest(self, t: torch.Tensor, cache: bool) -> Any:
        """A handle of ``t``'s words plus its meta, or a host digest string."""
        try:
            key = (t._version, t.data_ptr(), tuple(t.shape), t.stride()) if t.layout == torch.strided else None
        except (RuntimeError, NotImplementedError):  # no storage (fake or functional tensors)
            key, cache = None, False
        if cache:
            hit = self._cached(t, key)
            if hit is not None:
                return hit
        try:
            handle = self._digests.add(t)
        except (RuntimeError, NotImplementedError, TypeError):  # no bytes to read (fake, sparse-like)
            handle = None
        if handle is None:
            entry: Any = _scalar_digest((str(t.dtype), tuple(t.shape), str(t.layout)))
        else:
            entry = (handle, t.dtype, tuple(int(s) for s in t.shape), t.numel() * t.element_size())
        if key is not None:
            self._remember(t, key, entry)
        return entry

    def _values(self, obj: Any, cache: bool) -> List[Any]:
        """Digest entries of the tensors in ``obj``, then one for all its numbers (if any)."""
        out = []
        numbers = []
        for leaf in _leaves(obj):
            if isinstance(leaf, torch.Tensor):
                out.append(self._digest(leaf, cache))
            elif isinstance(leaf, (int, float, bool, complex)):
                numbers.append(leaf)
        if numbers:
            out.append(_scalar_digest(tuple(numbers)))
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused or os.getpid() != self.pid:  # DataLoader workers forked meanwhile inherit the mode
            return func(*args, **kwargs)
        grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            inputs = self._values((args, kwargs), cache=True)  # before the op: in-place ops change them
        finally:
            torch._C._set_grad_enabled(grad)
        result = func(*args, **kwargs)
        in_backward = _graph_task_id() != -1
        module, training = self.paths.current(in_backward)
        if in_backward:
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
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = str(func)
        torch._C._set_grad_enabled(False)
        try:
            if func.overloadpacket.__name__ in VIEW_OPS:
                outputs = self._views(name, result, inputs)
            else:
                outputs = self._values(result, cache=False)  # new tensors, or in-place ones just changed
        finally:
            torch._C._set_grad_enabled(grad)
        self.ops.append(_Op(name, phase, module, inputs, outputs))
        return result

    def _views(self, op: str, result: Any, inputs: List[Any]) -> List[Any]:
        """Outputs of a view op: their bytes are a fixed function of the inputs' bytes and the
        view's geometry, so they get a digest derived from those (no device work)."""
        out = []
        for k, leaf in enumerate(_leaves(result)):
            if not isinstance(leaf, torch.Tensor):
                continue
            try:
                geometry = (tuple(leaf.shape), leaf.stride(), leaf.storage_offset(), str(leaf.dtype))
                key = (leaf._version, leaf.data_ptr(), tuple(leaf.shape), leaf.stride())
            except (RuntimeError, NotImplementedError):
                out.append(self._digest(leaf, False))
                continue
            entry = ("view", op, k, geometry, tuple(inputs))
            self._remember(leaf, key, entry)
            out.append(entry)
        return out

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
        words = self._digests.resolve()
        metas = np.zeros((len(words), 2), dtype=np.int64)
        for o in self.ops:
            for entry in o.inputs + o.outputs:
                if isinstance(entry, tuple) and entry[0] != "view":
                    metas[entry[0]] = _meta(entry[1], entry[2], entry[3])
        total = words.view(np.uint64) + metas.view(np.uint64)
        text = total.astype(">u8").tobytes().hex()
        host = [text[i * 32:(i + 1) * 32] for i in range(len(words))]

        derived: Dict[int, str] = {}

        def view_hex(entry: Tuple[Any, ...]) -> str:
            known = derived.get(id(entry))
            if known is None:
                _, op, k, geometry, inputs = entry
                text = repr((op, k, geometry, hexes(list(inputs)))).encode()
                known = derived[id(entry)] = hashlib.blake2b(text, digest_size=16).hexdigest()
            return known

        def hexes(entries: List[Any]) -> List[str]:
            out = []
            for entry in entries:
                if isinstance(entry, str):
                    out.append(entry)
                    continue
                if entry[0] == "view":
                    out.append(view_hex(entry))
                    continue
                out.append(host[entry[0]])
            return out

        return [{"op": o.op, "phase": o.phase, "module": o.module, "in": hexes(o.inputs), "out": hexes(o.outputs)}
                for o in self.ops]


# -- one step's capture, driven by the fingerprint recorder -----------------------------------
class StepCapture:
    """Captures step ``step`` of a run into ``path``; the recorder calls the ``on_*`` methods."""

    def __init__(self, step: int, path: os.PathLike, roots: Callable[[], Sequence[Tuple[Any, str]]],
                 through: str = "step", exit_when_done: bool = True) -> None:
        self.step = int(step)
        self.path = Path(path)
        self.through = through if through in ("step", "validation") else "step"
        self.exit_when_done = exit_when_done
        self._roots = roots
        self.mode: Optional[CaptureMode] = None
        self.paths: Optional[ModulePaths] = None
        self.done = False
        self._steps = 0

    @classmethod
    def from_env(cls, roots: Callable[[], Sequence[Tuple[Any, str]]]) -> Optional["StepCapture"]:
        step, path = os.environ.get(STEP_VAR, "").strip(), os.environ.get(PATH_VAR, "").strip()
        if not step.isdigit() or int(step) < 1 or not path:
            return None
        return cls(int(step), path, roots, os.environ.get(THROUGH_VAR, "step").strip())

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
        mode.paused = True
        try:
            yield
        finally:
            mode.paused = False

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
            self.on_batch()
        return on_batch

    def _begin(self) -> None:
        if self.mode is not None or self.done:
            return
        self.paths = ModulePaths([(m, name) for m, name in self._roots() if m is not None]).start()
        self.mode = CaptureMode(self.paths)
        self.mode.__enter__()

    def on_batch(self) -> None:
        """A batch left a DataLoader: step 1's capture starts here (nothing of the step ran yet)."""
        if self.step == 1 and not self.done:
            self._begin()
        elif self.mode is not None:
            self.mode.phase_override = None

    def on_step_begin(self, number: int) -> None:
        """``optimizer.step()`` of step ``number`` starts (its pre-hook)."""
        if self.mode is not None:
            if number > self.step:  # validation after step k is over
                self.finish()
                return
            self.mode.phase_override = "optimizer"
            self.mode.validating = False

    def on_step_end(self, number: int) -> None:
        """``optimizer.step()`` of step ``number`` ended (its post-hook)."""
        if number == self.step - 1:
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
        if self.paths is not None:
            self.paths.stop()
        records = mode.records()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        header = {"format": FORMAT, "schema": 1, "digest": ALGORITHM, "step": self.step, "through": self.through,
                  "torch": torch.__version__, "ops": len(records), "complete": True}
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            for record in records:
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
        os.replace(tmp, self.path)
        if self.exit_when_done if exit_process is None else exit_process:
            raise CaptureComplete(self.path)
        return self.path


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
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("digest") != ALGORITHM:
        raise CaptureError(f"{path} is not a yolo-det op capture of digest {ALGORITHM}")
    return header, records


__all__ = ["CaptureComplete", "CaptureError", "CaptureMode", "ModulePaths", "PATH_VAR", "STEP_VAR", "StepCapture",
           "THROUGH_VAR", "read_capture"]
