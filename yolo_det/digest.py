"""Bit-exact 128-bit digests of tensors, computed on the tensor's device with integer arithmetic.

Algorithm ``bytes-intmm-v1`` (the contract every log records; change it only with a new name):

* A tensor's bytes are taken in row-major order (any memory format gives the same bytes) and
  zero-padded to rows of ``ROW = 1024`` bytes, read as signed int8.
* Each row is multiplied by a fixed matrix ``W`` (``ROW x 8`` odd int8 values) -- one integer
  matrix product, exact in int32 -- giving 8 row sums.
* Row sum ``(r, m)`` is multiplied by an odd 64-bit constant ``C[r, m]`` (``r`` counted inside
  the tensor) and summed over rows modulo 2**64: 8 column words ``S_m``.
* Word 0 is ``S_0``; word 1 is ``sum(E_m * S_m, m = 1..7)``; each word gets a constant from the
  tensor's dtype, shape and byte count added, all modulo 2**64.

Flipping any single bit changes word 0 with certainty (every weight and constant is odd and the
change is far below 2**64); other changes are missed with probability around 2**-64. Integer
sums do not depend on summation order, so the same tensor digests the same on CPU and CUDA, in
any thread count. ``torch.hash_tensor`` (xor of elements) is not used: it cannot see two
elements that swap places or two equal bit flips.

All constants come from SplitMix64, so they are the same on every machine and NumPy version.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np
import torch

ALGORITHM = "bytes-intmm-v1"
ROW = 1024
COLUMNS = 8
HEX_CHARS = 32  # one digest: two 64-bit words, hex
MIN_ROWS = 32  # torch._int_mm on CUDA needs more than 16 rows
CHUNK_BYTES = 64 << 20  # scratch memory per device for copied tensors
DIRECT_BYTES = 128 << 10  # tensors this large (whole rows) are read in place, not copied
assert ROW * 128 * 127 < 2**24  # row sums stay exact in the float32 fallback

_SEED_W, _SEED_C, _SEED_E = 0x59_4F_4C_4F_2D_44_45_54, 0x6669_6E67_6572_7072, 0x696E_746D_6D2D_7631
_MASK = (1 << 64) - 1


def splitmix64(seed: int, count: int, start: int = 0) -> np.ndarray:
    """``count`` SplitMix64 outputs (uint64) for indices ``start .. start+count-1`` of stream ``seed``."""
    with np.errstate(over="ignore"):
        x = (np.arange(start + 1, start + count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(seed & _MASK))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def weight_matrix() -> np.ndarray:
    """``W``: ``ROW x COLUMNS`` odd int8 weights in -127..127."""
    raw = splitmix64(_SEED_W, ROW * COLUMNS)
    magnitude = ((raw & np.uint64(127)) | np.uint64(1)).astype(np.int64)
    sign = np.where((raw >> np.uint64(7)) & np.uint64(1), -1, 1)
    return (magnitude * sign).astype(np.int8).reshape(ROW, COLUMNS)


def row_constants(rows: int) -> np.ndarray:
    """``C``: ``rows x COLUMNS`` odd 64-bit constants (as int64) for row indices 0..rows-1."""
    return (splitmix64(_SEED_C, rows * COLUMNS) | np.uint64(1)).view(np.int64).reshape(rows, COLUMNS)


def fold_constants() -> np.ndarray:
    """``E``: the odd 64-bit constants (as int64) that fold columns 1..7 into word 1."""
    return (splitmix64(_SEED_E, COLUMNS - 1) | np.uint64(1)).view(np.int64)


def meta_constant(dtype: torch.dtype, shape: Sequence[int], nbytes: int) -> Tuple[int, int]:
    """The two words added for a tensor's dtype, shape and size (as signed int64 values)."""
    text = f"{str(dtype).replace('torch.', '')}|{tuple(int(s) for s in shape)}|{nbytes}".encode()
    words = np.frombuffer(hashlib.blake2b(text, digest_size=16).digest(), dtype="<u8").view(np.int64)
    return int(words[0]), int(words[1])


def bytes_digest(data: bytes) -> str:
    """A 128-bit hex digest of host bytes (RNG states, strings): BLAKE2b, never Python ``hash()``."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def to_hex(words: torch.Tensor) -> str:
    """``T x 2`` int64 digests (any device) as one string of ``T`` 32-character hex digests."""
    array = words.detach().cpu().numpy().astype(np.int64, copy=False).view(np.uint64)
    return array.astype(">u8").tobytes().hex()


def split_hex(text: str) -> List[str]:
    """A string of concatenated digests split into the 32-character digests."""
    return [text[i:i + HEX_CHARS] for i in range(0, len(text), HEX_CHARS)]


Meta = Tuple[torch.dtype, torch.Size, int]  # dtype, shape, byte count


def _rows(nbytes: int) -> int:
    return -(-nbytes // ROW)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a 1-D tensor of its elements in row-major order (a view when contiguous)."""
    return t.view(-1) if t.is_contiguous() else t.reshape(-1)


class _Group:
    """Copied tensors of one dtype: concatenated, each padded to whole rows, into ``region``.

    ``stable``: the tensors are among the call's stable ones, so the list of views can be reused.
    """

    def __init__(self, region: torch.Tensor, indices: List[int], pads: List[Optional[torch.Tensor]],
                 stable: bool) -> None:
        self.region, self.indices, self.pads, self.stable = region, indices, pads, stable

    def parts(self, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """What to concatenate: each tensor flattened, then its pad."""
        out: List[torch.Tensor] = []
        for i, pad in zip(self.indices, self.pads):
            out.append(_flat(tensors[i]))
            if pad is not None:
                out.append(pad)
        return out


class _Plan:
    """How one list of tensor layouts is digested on one device; buffers are allocated once.

    Large tensors whose size is a whole number of rows are read in place (no copy); the rest
    are concatenated into a shared scratch buffer, per dtype, each padded to whole rows, in
    chunks of at most CHUNK_BYTES. Every row gets a row in ``sums`` (the GEMM outputs) and a
    column in ``row_consts``; ``acc`` holds their products' running sums per column.
    """

    def __init__(self, metas: Sequence[Meta], device: torch.device, scratch: torch.Tensor, stable: int = 0) -> None:
        self.device = device
        self.scratch = scratch
        self.stable = stable
        self.min_rows = MIN_ROWS if device.type == "cuda" else 1
        direct = [n >= DIRECT_BYTES and n % ROW == 0 and _rows(n) >= self.min_rows for _, _, n in metas]
        self.first_row: Dict[int, int] = {}
        self.chunks: List[Tuple[List[_Group], Optional[torch.Tensor], torch.Tensor, int, int]] = []
        row, pending, used = 0, [], 0
        for i, (_, _, nbytes) in enumerate(metas):
            if direct[i]:
                continue
            if pending and used + _rows(nbytes) * ROW > CHUNK_BYTES:
                row = self._add_chunk(metas, pending, row)
                pending, used = [], 0
            pending.append(i)
            used += _rows(nbytes) * ROW
        if pending:
            row = self._add_chunk(metas, pending, row)
        self.direct: List[Tuple[int, int, int]] = []
        for i, (_, _, nbytes) in enumerate(metas):
            if direct[i]:
                self.first_row[i] = row
                self.direct.append((i, row, row + _rows(nbytes)))
                row += _rows(nbytes)
        self.sums = torch.zeros((row, COLUMNS), dtype=torch.int32, device=device)
        self.acc = torch.zeros((COLUMNS, row + 1), dtype=torch.int64, device=device)  # acc[:, r]: rows < r
        consts = np.zeros((COLUMNS, row), dtype=np.int64)
        starts = np.zeros(len(metas), dtype=np.int64)
        counts = np.array([_rows(n) for _, _, n in metas], dtype=np.int64)
        table = row_constants(int(counts.max(initial=1)) or 1).T
        for i, first in self.first_row.items():
            consts[:, first:first + counts[i]] = table[:, :counts[i]]
            starts[i] = first
        self.row_consts = torch.from_numpy(consts).to(device)
        self.starts = torch.from_numpy(starts).to(device)
        self.ends = torch.from_numpy(starts + counts).to(device)
        meta = np.array([meta_constant(*m) for m in metas], dtype=np.int64).reshape(-1, 2)
        self.meta = torch.from_numpy(meta).to(device)

    def _add_chunk(self, metas: Sequence[Meta], indices: List[int], row: int) -> int:
        """Lay out tensors ``indices`` (grouped by dtype) in the scratch; their rows start at ``row``."""
        groups: List[_Group] = []
        offset = 0
        by_dtype: Dict[Tuple[torch.dtype, bool], List[int]] = {}
        for i in indices:
            by_dtype.setdefault((metas[i][0], i < self.stable), []).append(i)
        for (dtype, stable), members in by_dtype.items():
            zeros = torch.zeros(ROW, dtype=dtype, device=self.device)
            itemsize = zeros.element_size()
            start = offset
            pads: List[Optional[torch.Tensor]] = []
            for i in members:
                nbytes = metas[i][2]
                self.first_row[i] = row + offset // ROW
                padded = _rows(nbytes) * ROW
                pads.append(zeros[:(padded - nbytes) // itemsize] if padded > nbytes else None)
                offset += padded
            groups.append(_Group(self.scratch[start:offset].view(dtype), members, pads, stable))
        used = offset // ROW
        total = max(self.min_rows, -(-used // 8) * 8)
        tail = self.scratch[offset:total * ROW] if total > used else None
        matrix = self.scratch[:total * ROW].view(total, ROW)
        self.chunks.append((groups, tail, matrix, row, row + total))
        return row + total


def _scratch_bytes(metas: Sequence[Meta]) -> int:
    """Scratch needed for the copied tensors of ``metas``: the largest chunk, rounded up."""
    copied = [_rows(n) * ROW for _, _, n in metas if not (n >= DIRECT_BYTES and n % ROW == 0)]
    return max(min(sum(copied), CHUNK_BYTES), max(copied + [0])) + (MIN_ROWS + 8) * ROW


class Digester:
    """Computes digests of tensor lists; caches layouts and scratch memory per device.

    :meth:`digest` returns a ``T x 2`` int64 tensor on the tensors' device without waiting for
    the device; transfer many results at once with :func:`to_hex`. Not thread-safe.
    """

    def __init__(self, max_plans: int = 16) -> None:
        self._plans: "OrderedDict[Hashable, _Plan]" = OrderedDict()
        self._hints: Dict[Hashable, _Plan] = {}
        self._parts: Dict[Hashable, Dict[int, List[torch.Tensor]]] = {}  # per hint: stable groups' views
        self._scratch: Dict[torch.device, torch.Tensor] = {}
        self._weights: Dict[torch.device, Tuple[torch.Tensor, bool]] = {}
        self._fold: Dict[torch.device, torch.Tensor] = {}
        self.max_plans = max_plans

    # -- public ------------------------------------------------------------------------------
    def digest(self, tensors: Sequence[torch.Tensor], hint: Optional[Hashable] = None,
               stable: int = 0) -> torch.Tensor:
        """Digests of ``tensors`` (one device) as ``T x 2`` int64.

        ``hint``: a cheap key that identifies the same layouts as an earlier call, e.g. the
        tensors' data pointers. ``stable``: for how many leading tensors the hint also
        guarantees the same storages (their data pointers are in it), so their flattened
        views can be reused across calls.
        """
        if not tensors:
            return torch.zeros((0, 2), dtype=torch.int64)
        plan = self._hints.get(hint) if hint is not None else None
        if plan is None:
            device = tensors[0].device
            if any(t.device != device for t in tensors):
                return self._digest_mixed(list(tensors))
            plan = self._plan([(t.dtype, t.shape, t.numel() * t.element_size()) for t in tensors], device,
                              int(stable))
            if hint is not None:
                if len(self._hints) > 4 * self.max_plans:
                    self._hints.clear()
                    self._parts.clear()
                self._hints[hint] = plan
        with torch.no_grad():
            return self._run(plan, tensors, hint if stable else None)

    def hex(self, tensors: Sequence[torch.Tensor]) -> List[str]:
        """Digests of ``tensors`` as hex strings (waits for the device)."""
        return split_hex(to_hex(self.digest(tensors)))

    # -- internals ---------------------------------------------------------------------------
    def _digest_mixed(self, tensors: List[torch.Tensor]) -> torch.Tensor:
        device = tensors[0].device
        out = torch.zeros((len(tensors), 2), dtype=torch.int64, device=device)
        for dev in {t.device for t in tensors}:
            index = [i for i, t in enumerate(tensors) if t.device == dev]
            part = self.digest([tensors[i] for i in index])
            out[torch.tensor(index, device=device)] = part.to(device)
        return out

    def _plan(self, metas: List[Meta], device: torch.device, stable: int = 0) -> _Plan:
        key = (device, tuple(metas), stable)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        need = _scratch_bytes(metas)
        scratch = self._scratch.get(device)
        if scratch is None or scratch.numel() < need:
            scratch = torch.zeros(max(need, 1 << 20), dtype=torch.int8, device=device)
            self._scratch[device] = scratch
            self._plans = OrderedDict((k, p) for k, p in self._plans.items() if p.device != device)
            self._hints = {k: p for k, p in self._hints.items() if p.device != device}
            self._parts = {k: v for k, v in self._parts.items() if k in self._hints}
        plan = _Plan(metas, device, scratch, stable)
        self._plans[key] = plan
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)
        return plan

    def _weights_for(self, device: torch.device) -> Tuple[torch.Tensor, bool]:
        entry = self._weights.get(device)
        if entry is None:
            w = torch.from_numpy(weight_matrix()).to(device)
            entry = (w, _int_mm_works(device, w))
            if not entry[1]:
                entry = (w.to(torch.float32), False)
            self._weights[device] = entry
            self._fold[device] = torch.from_numpy(fold_constants()).to(device)[:, None]
        return entry

    def _run(self, plan: _Plan, tensors: Sequence[torch.Tensor], stable_key: Optional[Hashable]) -> torch.Tensor:
        weights, use_int_mm = self._weights_for(plan.device)
        cache = self._parts.setdefault(stable_key, {}) if stable_key is not None and plan.stable else None
        k = 0
        for groups, tail, matrix, r0, r1 in plan.chunks:
            for group in groups:
                parts = cache.get(k) if cache is not None and group.stable else None
                if parts is None:
                    parts = group.parts(tensors)
                    if cache is not None and group.stable and all(tensors[i].is_contiguous() for i in group.indices):
                        cache[k] = parts  # views alias the storages, so they stay current
                torch.cat(parts, out=group.region)
                k += 1
            if tail is not None:
                tail.zero_()
            _row_sums(matrix, weights, use_int_mm, plan.sums[r0:r1])
        for i, r0, r1 in plan.direct:
            t = tensors[i] if tensors[i].is_contiguous() else tensors[i].contiguous()
            _row_sums(t.view(torch.int8).view(r1 - r0, ROW), weights, use_int_mm, plan.sums[r0:r1])
        acc = plan.acc
        torch.mul(plan.sums.t(), plan.row_consts, out=acc[:, 1:])
        acc.cumsum_(1)
        seg = acc.index_select(1, plan.ends).sub_(acc.index_select(1, plan.starts))  # COLUMNS x T
        word1 = seg[1:].mul_(self._fold[plan.device]).sum(0)
        return torch.stack([seg[0], word1], 1).add_(plan.meta)


def _row_sums(matrix: torch.Tensor, weights: torch.Tensor, use_int_mm: bool, out: torch.Tensor) -> None:
    """``out = matrix @ W`` exactly: int8 GEMM where torch has one, else float32.

    float32 is exact here: every product and partial sum is an integer below
    128 * 127 * 1024 < 2**24, and int8 values survive TF32/bf16 input rounding.
    """
    if use_int_mm:
        torch._int_mm(matrix, weights, out=out)
        return
    with _no_autocast(matrix.device):
        out.copy_(torch.mm(matrix.to(torch.float32), weights))


def _int_mm_works(device: torch.device, weights: torch.Tensor) -> bool:
    if not hasattr(torch, "_int_mm"):
        return False
    try:
        probe = torch.ones((MIN_ROWS, ROW), dtype=torch.int8, device=device)
        got = torch._int_mm(probe, weights)[0].to(torch.int64).cpu()
    except (RuntimeError, NotImplementedError):
        return False
    return bool(torch.equal(got, weights.to(torch.int64).sum(0).cpu()))


class _no_autocast:
    """Autocast off for the float32 fallback (autocast would compute the product in float16)."""

    def __init__(self, device: torch.device) -> None:
        self._ctx = None
        try:
            self._ctx = torch.autocast(device_type=device.type, enabled=False)
        except (RuntimeError, AttributeError, TypeError):
            self._ctx = None

    def __enter__(self):
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc):
        if self._ctx is not None:
            return self._ctx.__exit__(*exc)
        return False


def digest_hex(tensor: torch.Tensor) -> str:
    """The 32-character hex digest of one tensor (convenience; waits for the device)."""
    return Digester(max_plans=1).hex([tensor])[0]


__all__ = ["ALGORITHM", "Digester", "bytes_digest", "digest_hex", "split_hex", "to_hex", "HEX_CHARS"]
