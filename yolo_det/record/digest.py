"""Bit-exact 128-bit digests of tensors, computed on the tensor's device with integer arithmetic.

Algorithm ``bytes-lin64-v2`` (the contract every log records; change it only with a new name):

* A tensor's bytes are taken in row-major order (any memory format gives the same bytes) and
  zero-padded to rows of ``ROW = 1024`` bytes, read as 128 little-endian signed 64-bit words
  ``x[r, k]``; ``h[r, k] = x[r, k] >> 32`` is each word's high half (arithmetic shift, signed).
* Row sum ``S[r] = sum_k (W[k] * x[r, k] + V[k] * h[r, k])``; word ``j`` (``j = 0, 1``) is
  ``sum_r C_j[r] * S[r]`` (``r`` counted inside the tensor) plus a constant from the tensor's
  dtype, shape and byte count. All arithmetic is modulo 2**64; every weight and constant is odd.

Why: a word is ``2**32 * h + l`` (``l`` its unsigned low half), so its terms are
``(2**32 * W + V) * h + W * l``: both halves enter with an odd weight, in a ring 32 bits wider
than either half. Flipping bit ``b`` of a word changes ``l`` (b < 32) or ``h`` by ``2**(b mod 32)``,
which odd weights keep non-zero modulo 2**64: every single-bit change changes both words, with
certainty. Without ``h`` a top-bit change would add ``2**63 * W`` and two of them (two flipped
signs) would always cancel. Any other change (swapped words, permuted rows, sign flips) is missed
only where a fixed pseudo-random linear form vanishes on it: inside one row about 2**-64 for most
changes and 2**-33 at worst (all changed halves differ by multiples of 2**31; the tests check every
sign flip of up to three halves of a row exhaustively); changes in several rows must escape both
words' independent row constants too.

Kernels, chosen by what the device and the installation offer (never by a version string): on CPU, one
loop compiled by Numba (each word read once; LLVM vectorizes the 64-bit products for the CPU it runs on,
with or without AVX-512: near memory speed on one thread), else NumPy's int64 ``einsum``/``dot``
(plain multiply-accumulate loops, 4-5x slower, reading every block three times, so its blocks of rows
are shared out to torch's intra-op thread count of Python threads), which also digests a process's first GiB
(``COMPILED_AFTER``: loading the compiled loop costs 0.5 s a short process is spared); the previous ``bytes-intmm-v1``
was an int8 GEMM, 0.2 GB/s on AVX2-only CPUs. The per-row weighting runs in NumPy too: nothing on
torch's OpenMP threads, whose small parallel calls stall on a loaded machine. On other devices (CUDA)
the same sums come from elementwise products.
Integer sums do not depend on their order, so a tensor digests the same on CPU and CUDA, in any
thread count and block split. The same kernel serves fingerprints (:class:`Digester`) and op
captures (:class:`StreamDigests`).
``torch.hash_tensor`` (xor of elements) is not used: it cannot see two elements that swap places.

All constants come from SplitMix64, so they are the same on every machine and NumPy version.

Over 800 lines on purpose: one digest pipeline (plan, copy, kernel, reduction) whose pieces share the plan's
layout; its torch-free format and its Numba loops are already apart (``digest_format``, ``digest_kernel``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Callable, Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .digest_format import ALGORITHM, HEX_CHARS, split_hex  # noqa: F401  (the log format; torch-free)

ROW = 1024
WORDS = ROW // 8  # 64-bit words per row
COLUMNS = 2  # row constants per row: one per digest word
CHUNK_BYTES = 64 << 20  # scratch memory per device for copied tensors
DIRECT_BYTES = 128 << 10  # tensors this large (whole rows) are read in place, not copied
BLOCK_ROWS = 1024  # rows per kernel call on CPU (1 MiB: the words and their high halves stay in cache)
DEVICE_BLOCK_ROWS = 16384  # rows per kernel call where the products are elementwise (a GPU): 16 MiB

_SEED_W, _SEED_C = 0x6C69_6E36_342D_7632, 0x726F_7773_2D6C_3634
_MASK = (1 << 64) - 1


def splitmix64(seed: int, count: int, start: int = 0) -> np.ndarray:
    """``count`` SplitMix64 outputs (uint64) for indices ``start .. start+count-1`` of stream ``seed``."""
    with np.errstate(over="ignore"):
        x = (np.arange(start + 1, start + count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(seed & _MASK))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def weights() -> np.ndarray:
    """``W`` and ``V``: a ``2 x WORDS`` array of odd 64-bit weights (as int64)."""
    return (splitmix64(_SEED_W, 2 * WORDS) | np.uint64(1)).view(np.int64).reshape(2, WORDS)


def row_constants(rows: int) -> np.ndarray:
    """``C``: ``rows x COLUMNS`` odd 64-bit constants (as int64) for row indices 0..rows-1."""
    return (splitmix64(_SEED_C, rows * COLUMNS) | np.uint64(1)).view(np.int64).reshape(rows, COLUMNS)


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


Meta = Tuple[torch.dtype, torch.Size, int]  # dtype, shape, byte count
Copy = Optional[Tuple[List[torch.Tensor], List[torch.Tensor]]]  # (views, sources) for one _copy call


def _rows(nbytes: int) -> int:
    return -(-nbytes // ROW)


class _Chunk:
    """Copied tensors laid out in a scratch buffer, each from a row boundary, zero-padded to whole rows.

    ``views``: each tensor's region of the scratch, with the tensor's dtype and shape, so one
    ``_foreach_copy_`` writes them all (row-major, whatever their strides). ``matrix``: the
    rows as int8; ``out``: their entries of the plan's ``sums``. ``zero``: the scratch
    is shared with other chunks, so the rows are zeroed before each copy (else the pads, which
    no copy writes, stay zero from the allocation).
    """

    def __init__(self, indices: List[int], views: List[torch.Tensor], matrix: torch.Tensor, out: torch.Tensor,
                 zero: bool) -> None:
        self.indices, self.views, self.matrix, self.out, self.zero = indices, views, matrix, out, zero


class _Plan:
    """How one list of tensor layouts is digested on one device; buffers are allocated once.

    Large tensors whose size is a whole number of rows are read in place (no copy); the rest
    are copied into scratch rows: where they take at most CHUNK_BYTES, into the plan's own scratch in
    chunks of a block each (copied and summed on any thread); else in chunks of CHUNK_BYTES that share
    ``shared`` one after another. Every tensor's rows are consecutive rows of
    ``sums`` (one row sum each; chunks first, then the in-place tensors) and columns of
    ``row_consts``; ``acc`` holds the running sums of their products, per column.
    """

    def __init__(self, metas: Sequence[Meta], device: torch.device, shared: Callable[[int], torch.Tensor]) -> None:
        self.device = device
        direct = [n >= DIRECT_BYTES and n % ROW == 0 for _, _, n in metas]
        copied = sum(_rows(n) * ROW for d, (_, _, n) in zip(direct, metas) if not d)
        # chunks of a block each (copied and summed on any thread) in one scratch, unless that would be too large
        own = copied <= CHUNK_BYTES
        limit = BLOCK_ROWS * ROW if own else CHUNK_BYTES
        groups: List[List[int]] = []  # copied tensors per chunk
        used = 0
        for i, (_, _, nbytes) in enumerate(metas):
            if direct[i] or nbytes == 0:
                continue
            if not groups or used + _rows(nbytes) * ROW > limit:
                groups.append([])
                used = 0
            groups[-1].append(i)
            used += _rows(nbytes) * ROW
        first_row: Dict[int, int] = {}
        layouts: List[Tuple[List[int], List[int], int, int]] = []  # indices, byte offsets, first row, rows
        row = 0
        for indices in groups:
            offsets, offset = [], 0
            for i in indices:
                first_row[i] = row + offset // ROW
                offsets.append(offset)
                offset += _rows(metas[i][2]) * ROW
            rows = offset // ROW
            layouts.append((indices, offsets, row, rows))
            row += rows
        direct_rows: List[Tuple[int, int, int]] = []
        for i, (_, _, nbytes) in enumerate(metas):
            if direct[i]:
                first_row[i] = row
                direct_rows.append((i, row, row + _rows(nbytes)))
                row += _rows(nbytes)
        self.sums = _zeros(row, torch.int64, device)
        own_scratch = _zeros(copied, torch.int8, device) if own and copied else None
        self.chunks: List[_Chunk] = []
        for indices, offsets, r0, rows in layouts:
            scratch = own_scratch[r0 * ROW:(r0 + rows) * ROW] if own_scratch is not None else shared(rows * ROW)
            views = [scratch[o:o + metas[i][2]].view(metas[i][0]).view(metas[i][1]) for i, o in zip(indices, offsets)]
            matrix = scratch[:rows * ROW].view(rows, ROW)
            self.chunks.append(_Chunk(indices, views, matrix, self.sums[r0:r0 + rows], zero=not own))
        self.direct = [(i, self.sums[r0:r1]) for i, r0, r1 in direct_rows]
        consts = np.zeros((COLUMNS, row), dtype=np.int64)
        starts = np.zeros(len(metas), dtype=np.int64)
        counts = np.array([_rows(n) for _, _, n in metas], dtype=np.int64)
        table = row_constants(int(counts.max(initial=1)) or 1).T
        for i, first in first_row.items():
            consts[:, first:first + counts[i]] = table[:, :counts[i]]
            starts[i] = first
        meta = np.array([meta_constant(*m) for m in metas], dtype=np.int64).reshape(-1, 2)
        self.host = device.type == "cpu"  # the row stage in NumPy (see _segment_sums), else on the device
        if self.host:
            self.row_consts_host, self.starts_host, self.ends_host = consts.T.copy(), starts, starts + counts
            self.meta_host = meta
            self.sizes_host = np.array([n for _, _, n in metas], dtype=np.int64)
            self.max_rows = int(counts.max(initial=0))
        else:
            self.row_consts = torch.from_numpy(consts).to(device)
            self.starts = torch.from_numpy(starts).to(device)
            self.ends = torch.from_numpy(starts + counts).to(device)
            self.meta = torch.from_numpy(meta).to(device)


class Digester:
    """Computes digests of tensor lists; caches layouts and scratch memory per device.

    :meth:`digest` returns a ``T x 2`` int64 tensor on the tensors' device without waiting for
    the device; transfer many results at once with :func:`to_hex`. Not thread-safe.
    """

    def __init__(self, max_plans: int = 16) -> None:
        self._plans: "OrderedDict[Hashable, _Plan]" = OrderedDict()
        self._hints: Dict[Hashable, _Plan] = {}
        self._matrices: Dict[Hashable, List[Optional[torch.Tensor]]] = {}  # per hint: in-place tensors' rows
        self._scratch: Dict[torch.device, torch.Tensor] = {}
        self._stable_addresses: Dict[Hashable, np.ndarray] = {}  # per hint: the stable tensors' addresses
        self.max_plans = max_plans

    # -- public ------------------------------------------------------------------------------
    def digest(self, tensors: Sequence[torch.Tensor], hint: Optional[Hashable] = None,
               stable: int = 0) -> torch.Tensor:
        """Digests of ``tensors`` (one device) as ``T x 2`` int64.

        ``hint``: a cheap key that identifies the same layouts as an earlier call, e.g. the
        tensors' data pointers. ``stable``: for how many leading tensors the hint also
        guarantees the same storages (their data pointers are in it), so their in-place row
        views can be reused across calls (they alias the storages, so they see updates).
        """
        if not tensors:
            return torch.zeros((0, 2), dtype=torch.int64)
        plan = self._hints.get(hint) if hint is not None else None
        if plan is None:
            device = tensors[0].device
            if any(t.device != device for t in tensors):
                return self._digest_mixed(list(tensors))
            plan = self._plan([(t.dtype, t.shape, t.numel() * t.element_size()) for t in tensors], device)
            if hint is not None:
                if len(self._hints) > 4 * self.max_plans:
                    self._hints.clear()
                    self._matrices.clear()
                    self._stable_addresses.clear()
                self._hints[hint] = plan
        with torch.no_grad():
            return self._run(plan, tensors, hint if stable else None, int(stable))

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

    def _plan(self, metas: List[Meta], device: torch.device) -> _Plan:
        key = (device, tuple(metas))
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = _Plan(metas, device, lambda nbytes: self._shared(device, nbytes))
        self._plans[key] = plan
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)
        return plan

    def _shared(self, device: torch.device, nbytes: int) -> torch.Tensor:
        """The scratch that plans with several chunks share on ``device`` (at least ``nbytes``)."""
        scratch = self._scratch.get(device)
        if scratch is None or scratch.numel() < nbytes:
            scratch = self._scratch[device] = _zeros(nbytes, torch.int8, device)
        return scratch

    def _direct_matrices(self, plan: _Plan, tensors: Sequence[torch.Tensor], stable_key: Optional[Hashable],
                         stable: int) -> List[Optional[torch.Tensor]]:
        """The rows (int8 ``rows x ROW`` views) of the tensors read in place; those of stable,
        contiguous tensors are kept for the next call with the same hint."""
        cached = self._matrices.get(stable_key) if stable_key is not None else None
        if cached is not None:
            return cached
        matrices: List[Optional[torch.Tensor]] = []
        keep = stable_key is not None
        for i, out in plan.direct:
            t = tensors[i]
            if i < stable and t.is_contiguous():
                matrices.append(t.view(torch.int8).view(out.shape[0], ROW))
            else:
                matrices.append(None)
                keep = keep and i >= stable
        if keep:
            self._matrices[stable_key] = matrices
        return matrices

    def _addresses(self, tensors: Sequence[torch.Tensor], stable_key: Optional[Hashable], stable: int
                   ) -> Tuple[np.ndarray, List[torch.Tensor]]:
        """Where each tensor's bytes lie, row-major and 8-byte aligned, for :func:`.digest_kernel.tensor_words`;
        and the copies made for the tensors whose own memory is not like that (kept alive by the caller).
        The addresses of the stable leading tensors are kept for the next call with the same hint."""
        cached = self._stable_addresses.get(stable_key) if stable_key is not None else None
        first = 0 if cached is None else stable
        addresses = np.empty(len(tensors), dtype=np.int64)
        if cached is not None:
            addresses[:stable] = cached
        copies: List[torch.Tensor] = []
        keep = stable_key is not None and cached is None
        for i in range(first, len(tensors)):
            t = tensors[i]
            if not t.is_contiguous() or t.is_conj() or t.is_neg() or t.data_ptr() % 8:
                t = t.resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
                copies.append(t)
                keep = keep and i >= stable
            addresses[i] = t.data_ptr()
        if keep:
            self._stable_addresses[stable_key] = addresses[:stable].copy()
        return addresses, copies

    def _run(self, plan: _Plan, tensors: Sequence[torch.Tensor], stable_key: Optional[Hashable],
             stable: int) -> torch.Tensor:
        compiled = _compiled() if plan.host else None  # NumPy's kernel counts the bytes it digests
        if compiled is not None:  # one call reads every tensor where it lies: no copies, no blocks
            addresses, copies = self._addresses(tensors, stable_key, stable)
            out = np.empty((len(tensors), COLUMNS), dtype=np.int64)
            kernel = _kernel(plan.device)
            compiled.tensor_words(addresses, plan.sizes_host, kernel.w_host, kernel.v_host,
                                  _row_table(plan.device, plan.max_rows).numpy(), out)
            del copies  # alive until here: the kernel read them
            return torch.from_numpy(out + plan.meta_host)
        kernel = _kernel(plan.device)
        jobs: List[Tuple[torch.Tensor, torch.Tensor]] = []
        copies: List[Copy] = []
        for chunk in plan.chunks:
            sources = [tensors[i] for i in chunk.indices]
            if chunk.zero:  # a shared scratch: zeroed, copied and summed before the next chunk overwrites it
                chunk.matrix.zero_()
                _copy(chunk.views, sources)
                kernel.row_sums(chunk.matrix, chunk.out)
            else:
                jobs.append((chunk.matrix, chunk.out))
                copies.append((chunk.views, sources))
        matrices = self._direct_matrices(plan, tensors, stable_key, stable)
        for (i, out), matrix in zip(plan.direct, matrices):
            if matrix is None:
                t = tensors[i] if tensors[i].is_contiguous() else tensors[i].contiguous()
                matrix = t.view(torch.int8).view(out.shape[0], ROW)
            jobs.append((matrix, out))
            copies.append(None)
        kernel.row_sums_many(jobs, copies)
        if plan.host:
            seg = _segment_sums(plan.sums.numpy(), plan.row_consts_host, plan.starts_host, plan.ends_host)
            return torch.from_numpy(seg + plan.meta_host)
        acc = torch.zeros((COLUMNS, plan.sums.shape[0] + 1), dtype=torch.int64, device=plan.device)
        torch.mul(plan.sums, plan.row_consts, out=acc[:, 1:])
        acc.cumsum_(1)  # acc[:, r]: the rows before r
        seg = acc.index_select(1, plan.ends).sub_(acc.index_select(1, plan.starts))  # COLUMNS x T
        return seg.t().contiguous().add_(plan.meta)


def _copy(views: List[torch.Tensor], sources: List[torch.Tensor]) -> None:
    """``views[k].copy_(sources[k])`` for all ``k``, in one call where torch has ``_foreach_copy_``."""
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(views, sources)
        return
    for view, source in zip(views, sources):
        view.copy_(source)


def _zeros(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed buffer; on CPU from NumPy (calloc'd pages: no fill on torch's threads)."""
    if device.type == "cpu":
        return torch.from_numpy(np.zeros(size, dtype=torch.empty(0, dtype=dtype).numpy().dtype))
    return torch.zeros(size, dtype=dtype, device=device)


def _segment_sums(sums: np.ndarray, consts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``sum(sums[r] * consts[r, j] for r in range(start, end))`` for each segment and column ``j``,
    modulo 2**64 (NumPy's integer arrays wrap): a ``segments x COLUMNS`` int64 array."""
    acc = np.zeros((sums.shape[0] + 1, COLUMNS), dtype=np.int64)
    np.multiply(sums[:, None], consts, out=acc[1:])
    np.cumsum(acc, axis=0, out=acc)
    return acc[ends] - acc[starts]


class _Kernel:
    """The row sums on one device, taken the way the device does them fast.

    CPU (``host``): the compiled loop (:func:`_compiled`) on the calling thread, else NumPy's int64
    ``einsum`` over blocks of rows that stay in cache, shared out to up to ``torch.get_num_threads()``
    threads (NumPy releases the GIL and runs one thread per call, so the threads never contend the way
    nested OpenMP regions do on a loaded machine). Elsewhere
    (``elementwise``, CUDA): the same sums from elementwise products. Both give the same integers.
    """

    def __init__(self, device: torch.device) -> None:
        w = weights()
        self.w_host, self.v_host = w[0].copy(), w[1].copy()
        wt = torch.from_numpy(w).to(device)
        self.w, self.v = wt[0], wt[1]
        self.path = "host" if device.type == "cpu" else "elementwise"

    def row_sums(self, matrix: torch.Tensor, out: torch.Tensor) -> None:
        """``out[r] = S[r]`` of the int8 ``rows x ROW`` ``matrix`` (``out``: int64, ``rows``)."""
        self.row_sums_many([(matrix, out)])

    def row_sums_many(self, jobs: Sequence[Tuple[torch.Tensor, torch.Tensor]],
                      copies: Optional[Sequence[Copy]] = None) -> None:
        """:meth:`row_sums` of every ``(matrix, out)`` pair (the host path shares them out to threads).
        ``copies[k]``: ``(views, sources)`` to copy before job ``k``'s rows are read (or None)."""
        copies = copies or [None] * len(jobs)
        if self.path == "host":
            tasks = [(c, _words(m).numpy(), o.numpy()) for (m, o), c in zip(jobs, copies)]
            _host_row_sums(tasks, self.w_host, self.v_host)
            return
        for (matrix, out), copy in zip(jobs, copies):
            if copy is not None:
                _copy(*copy)
            words = _words(matrix)
            step = DEVICE_BLOCK_ROWS
            buffer = torch.empty((min(words.shape[0], step), WORDS), dtype=torch.int64, device=words.device)
            for r in range(0, words.shape[0], step):
                block = words[r:r + step]
                high = torch.bitwise_right_shift(block, 32, out=buffer[:block.shape[0]])
                torch.sum(block * self.w + high * self.v, 1, out=out[r:r + step])


def _words(matrix: torch.Tensor) -> torch.Tensor:
    """The int8 ``rows x ROW`` ``matrix`` as ``rows x WORDS`` int64 (copied where its rows are not 8-byte aligned)."""
    try:
        return matrix.detach().view(torch.int64)
    except RuntimeError:
        return matrix.detach().clone().view(torch.int64)


PARALLEL_ROWS = 2 * BLOCK_ROWS  # below this many rows in one call the threads cost more than they save


def _host_row_sums(tasks: Sequence[Tuple[Copy, np.ndarray, np.ndarray]], w: np.ndarray, v: np.ndarray) -> None:
    """Row sums of int64 ``rows x WORDS`` arrays into their int64 ``out`` arrays, each after its copy (if
    any), in blocks of BLOCK_ROWS: on the calling thread with the compiled loop, on up to
    ``torch.get_num_threads()`` threads with NumPy's kernel. Integer sums: any split gives the same values."""
    pieces: List[Tuple[Copy, List[Tuple[np.ndarray, np.ndarray]]]] = []  # each piece runs on one thread
    for copy, words, out in tasks:
        blocks = [(words[r:r + BLOCK_ROWS], out[r:r + BLOCK_ROWS]) for r in range(0, words.shape[0], BLOCK_ROWS)]
        if copy is None:
            pieces.extend((None, [block]) for block in blocks)
        else:
            pieces.append((copy, blocks))
    rows = [sum(b.shape[0] for b, _ in blocks) for _, blocks in pieces]
    compiled = _compiled(sum(rows) * ROW)
    # the compiled loop reads at one core's memory speed, and right after a torch op torch's OpenMP workers
    # still spin on the other cores: a second thread was slower below 64 MB, never faster above (2-core EPYC)
    threads = min(_threads(), len(pieces)) if sum(rows) >= PARALLEL_ROWS and compiled is None else 1
    if threads <= 1:
        _host_pieces(pieces, w, v, compiled)
        return
    # every thread takes the next piece, largest first, until none is left (next() on a list iterator holds
    # the GIL): a thread slowed down (torch's OpenMP threads still spinning after its last op) takes fewer
    queue = iter([pieces[k] for k in sorted(range(len(pieces)), key=lambda k: -rows[k])])
    futures = []
    try:
        futures = [_pool(threads).submit(_host_pieces, queue, w, v, None) for _ in range(threads - 1)]
    except RuntimeError:  # the interpreter is shutting down (an exit hook digests): the caller takes every piece
        pass
    _host_pieces(queue, w, v, None)
    for future in futures:
        future.result()


def _host_pieces(pieces: Iterable[Tuple[Copy, List[Tuple[np.ndarray, np.ndarray]]]], w: np.ndarray,
                 v: np.ndarray, compiled: Optional[ModuleType]) -> None:
    for copy, blocks in pieces:
        if copy is not None:
            with torch.no_grad():  # grad mode is per thread: a pool thread would record the copies of parameters
                _copy(*copy)  # small copies: torch runs them on this thread, without its OpenMP pool
        _host_blocks(blocks, w, v, compiled)


def _host_blocks(blocks: Sequence[Tuple[np.ndarray, np.ndarray]], w: np.ndarray, v: np.ndarray,
                 compiled: Optional[ModuleType]) -> None:
    """``out = words @ w + (words >> 32) @ v`` per block, modulo 2**64: the ``compiled`` loop where given,
    else NumPy (its integer arrays wrap the same way)."""
    if not blocks:
        return
    if compiled is not None:
        for words, out in blocks:
            compiled.row_sums(words, w, v, out)
        return
    high, part = _scratch(max(b.shape[0] for b, _ in blocks))
    for words, out in blocks:
        n = words.shape[0]
        mac = _mac if n >= EINSUM_ROWS else np.dot
        mac(words, w, out=out)
        np.right_shift(words, 32, out=high[:n])
        mac(high[:n], v, out=part[:n])
        out += part[:n]


#: Host bytes a process digests with NumPy's kernel before it loads the compiled loop. Loading costs about 0.5 s
#: of CPU (importing Numba, reading the cached machine code), what NumPy's kernel spends in excess of the compiled
#: loop's on about 2.5 GB: a short process (a verify of a few steps, a re-run to one step, a CLI command) never pays
#: it, and a long run pays it once, after at most 0.2 s of slower digests (yolov5n: about 45 steps).
COMPILED_AFTER = 1 << 30

_COMPILED: Dict[str, Optional[ModuleType]] = {}
_HOST = {"bytes": 0}  # host bytes digested before the compiled loop was loaded


def _compiled(nbytes: int = 0) -> Optional[ModuleType]:
    """The compiled loop for a host digest, or None where NumPy's kernel (the same integers) serves: until this
    process has digested COMPILED_AFTER bytes, ``nbytes`` of them now, and where Numba cannot load."""
    if "kernel" not in _COMPILED:
        _HOST["bytes"] += nbytes
        if _HOST["bytes"] <= COMPILED_AFTER:
            return None
        load_compiled()
    return _COMPILED["kernel"]


def load_compiled() -> bool:
    """Load :mod:`.digest_kernel` (Numba's compiled loops, machine code cached on disk) now, once per process,
    whatever was digested so far (benchmarks measure a long run's steady state); False where Numba is missing or
    cannot compile: NumPy's kernel serves instead."""
    if "kernel" not in _COMPILED:
        try:
            from . import digest_kernel as kernel
        except Exception:  # noqa: BLE001  (an import or compile failure of an optional accelerator)
            kernel = None
        _COMPILED["kernel"] = kernel
    return _COMPILED["kernel"] is not None


EINSUM_ROWS = 64  # from here einsum's unrolled loop beats dot's (1.6x at 1 MiB); below, dot's lower call cost wins


def _mac(matrix: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """``out = matrix @ vector`` (int64, wrapping) through einsum's unrolled sum-of-products loop."""
    np.einsum("ij,j->i", matrix, vector, out=out)


_LOCAL = threading.local()


def _scratch(rows: int) -> Tuple[np.ndarray, np.ndarray]:
    """This thread's buffers for the high halves and partial sums of ``rows`` rows (kept between calls)."""
    high = getattr(_LOCAL, "high", None)
    if high is None or high.shape[0] < rows:
        high = _LOCAL.high = np.empty((max(rows, BLOCK_ROWS), WORDS), dtype=np.int64)
        _LOCAL.part = np.empty(high.shape[0], dtype=np.int64)
    return high, _LOCAL.part


def _threads() -> int:
    """How many threads the host kernel may use: torch's intra-op thread count (1 in DataLoader workers)."""
    return torch.get_num_threads()


_POOL: Dict[str, object] = {}


def _pool(threads: int) -> ThreadPoolExecutor:
    """A thread pool of ``threads - 1`` workers (the caller is the last), made again after a fork."""
    pool = _POOL.get("pool")
    if pool is None or _POOL.get("pid") != os.getpid() or _POOL.get("size") != threads:
        pool = ThreadPoolExecutor(max(threads - 1, 1), thread_name_prefix="yolo-det-digest")
        _POOL.update(pool=pool, pid=os.getpid(), size=threads)
    return pool  # type: ignore[return-value]


_KERNELS: Dict[torch.device, _Kernel] = {}


def _kernel(device: torch.device) -> _Kernel:
    """The row-sum kernel of ``device``, made once for every digester and stream."""
    kernel = _KERNELS.get(device)
    if kernel is None:
        kernel = _KERNELS[device] = _Kernel(device)
    return kernel


# -- a stream of single tensors, no per-call host work ------------------------------------------
class StreamDigests:
    """``bytes-lin64-v2`` digests of a stream of tensors of any layouts (an op capture's); constants live
    on each device, meta words are added on the host (:meth:`hexes`). Tensors up to 31 MiB go into a
    :class:`_StreamBatch` per device and are finished together; larger ones are digested one by one (:meth:`words`).

    The result equals :class:`~yolo_det.record.digest.Digester`'s: per tensor, the row sums
    ``S_j[r]`` weighted by ``C_j[r]`` and summed (word ``j``), plus the dtype/shape/size words
    (added on the host when written).
    """

    def __init__(self) -> None:
        self._batches: Dict[torch.device, "_StreamBatch"] = {}
        self._direct: List[Tuple[int, torch.Tensor]] = []  # (handle, words) of tensors digested alone
        self.metas: List[Tuple[torch.dtype, Tuple[int, ...], int]] = []  # per handle: what its meta words come from
        self.count = 0

    def add(self, t: torch.Tensor) -> Optional[int]:
        """A handle for ``t``'s words (resolved by :meth:`resolve`); None for tensors without bytes."""
        if t.layout != torch.strided or t.is_quantized:
            return None
        device = t.device
        if device.type == "meta":
            return None
        nbytes = t.numel() * t.element_size()
        handle = self.count
        batch = self._batches.get(device)
        if batch is None:
            batch = self._batches[device] = _StreamBatch(device)
        if nbytes == 0 or not batch.add(handle, t, nbytes):
            words = self.words(t)
            if words is None:
                return None
            self._direct.append((handle, words))
        self.metas.append((t.dtype, t.shape, nbytes))
        self.count += 1
        return handle

    def resolve(self) -> np.ndarray:
        """``count x 2`` int64 words of every handle (one transfer per device)."""
        out = np.zeros((self.count, 2), dtype=np.int64)
        parts: Dict[torch.device, List[Tuple[List[int], torch.Tensor]]] = {}
        for batch in self._batches.values():
            batch.flush()
            parts.setdefault(batch.device, []).extend(batch.results)
        for handle, words in self._direct:
            parts.setdefault(words.device, []).append(([handle], words.reshape(1, 2)))
        for chunks in parts.values():
            if chunks:
                joined = torch.cat([w for _, w in chunks]).cpu().numpy()
                out[[h for hs, _ in chunks for h in hs]] = joined
        return out

    def hexes(self) -> List[str]:
        """The 32-character hex digest of every handle, meta words included (one transfer per device)."""
        words = self.resolve()
        metas = np.array([_meta(*m) for m in self.metas], dtype=np.int64).reshape(-1, 2)
        text = (words.view(np.uint64) + metas.view(np.uint64)).astype(">u8").tobytes().hex()
        return [text[i * HEX_CHARS:(i + 1) * HEX_CHARS] for i in range(len(words))]

    def words(self, t: torch.Tensor) -> Optional[torch.Tensor]:
        """Two int64 words (without the meta words) on ``t``'s device; None for tensors without bytes."""
        if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
            return None
        nbytes = t.numel() * t.element_size()
        if nbytes == 0:
            return torch.zeros(2, dtype=torch.int64, device=t.device)
        flat = t.detach().contiguous().reshape(-1).view(torch.int8)
        rows = _rows(nbytes)
        if rows * ROW != nbytes:
            flat = torch.nn.functional.pad(flat, (0, rows * ROW - nbytes))
        sums = torch.empty(rows, dtype=torch.int64, device=t.device)
        _kernel(t.device).row_sums(flat.view(rows, ROW), sums)
        table = _row_table(t.device, rows)
        if t.device.type == "cpu":
            return torch.from_numpy(_segment_sums(sums.numpy(), table.numpy()[:rows], np.array([0]), np.array([rows]))[0])
        return (sums[:, None] * table[:rows]).sum(0)


class _StreamBatch:
    """Row sums of many tensors on one device, weighted by their row constants and summed per
    tensor together, when the buffers fill (a handful of kernels per few hundred tensors).

    Contiguous tensors of at least 16 whole rows are read in place: one kernel call each writes
    their row sums into ``sums``. The rest of the bytes (small or strided tensors, and the last,
    partial row of the others) are copied into ``buffer`` first, each from a row boundary and
    zero-padded. A tensor's words are the sum over its parts (a segment of rows each), so they
    equal :class:`Digester`'s.
    """

    STAGE_ROWS = 1024  # copied bytes: 1 MiB per device
    SUM_ROWS = 32768  # row sums held (staged rows first, then rows read in place): 32 MiB read

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.direct_rows = 16  # below this a copy is cheaper than its own kernel calls
        self.kernel = _kernel(device)
        self.buffer = _zeros(self.STAGE_ROWS * ROW, torch.int8, device)
        self.sums = _zeros(self.SUM_ROWS, torch.int64, device)
        self.host = device.type == "cpu"
        self._typed: Dict[torch.dtype, torch.Tensor] = {}  # the buffer viewed as each dtype seen
        self.staged = 0  # rows of buffer in use
        self.read = self.STAGE_ROWS  # next row of sums for tensors read in place
        self.handles: List[int] = []
        self.segments: List[Tuple[int, int, int, int]] = []  # (tensor k of this batch, first sums row, rows, first row number)
        self.results: List[Tuple[List[int], torch.Tensor]] = []  # (handles, P x 2 words)
        self._keep: Optional[torch.Tensor] = None  # the last pinned index buffer, until its copy is done

    def add(self, handle: int, t: torch.Tensor, nbytes: int) -> bool:
        """Take ``t`` into the batch; False when it is too large for the buffers."""
        full = nbytes // ROW
        flat = None
        if full >= self.direct_rows and t.is_contiguous():
            try:
                flat = t.view(-1).view(torch.int8)
            except RuntimeError:  # no byte view (a lazily conjugated tensor, say): copied below
                pass
        if flat is not None:
            if full > self.SUM_ROWS - self.STAGE_ROWS:
                return False
            tail = nbytes - full * ROW
            if self.read + full > self.SUM_ROWS or (tail and self.staged == self.STAGE_ROWS):
                self.flush()
            k = len(self.handles)
            self.handles.append(handle)
            matrix = (flat[:full * ROW] if tail else flat).view(full, ROW)
            self.kernel.row_sums(matrix, self.sums[self.read:self.read + full])
            self.segments.append((k, self.read, full, 0))
            self.read += full
            if tail:
                start = self.staged * ROW
                self.buffer[start:start + tail].copy_(flat[full * ROW:])
                self.segments.append((k, self.staged, 1, full))
                self.staged += 1
            return True
        rows = -(-nbytes // ROW)
        if rows > self.STAGE_ROWS:
            return False
        if self.staged + rows > self.STAGE_ROWS:
            self.flush()
        dtype = t.dtype
        typed = self._typed.get(dtype)
        if typed is None:
            typed = self._typed[dtype] = self.buffer.view(dtype)
        # rows start at multiples of ROW bytes, so the offset is whole elements of any dtype
        typed.as_strided(t.shape, _contiguous_strides(t.shape), self.staged * ROW // t.element_size()).copy_(t)
        self.segments.append((len(self.handles), self.staged, rows, 0))
        self.handles.append(handle)
        self.staged += rows
        return True

    def flush(self) -> None:
        """Words of every tensor in the batch (left on the device, in ``results``); empties the batch."""
        if not self.handles:
            return
        staged = self.staged
        if staged:  # sums rows staged..STAGE_ROWS are stale; they count for no tensor (the zero row)
            self.kernel.row_sums(self.buffer[:staged * ROW].view(staged, ROW), self.sums[:staged])
        seg = np.array(self.segments, dtype=np.int64).reshape(-1, 4)  # tensor, first sums row, rows, first row number
        total, n = self.read, len(self.handles)
        table = _row_table(self.device, int((seg[:, 3] + seg[:, 2]).max()))
        counts = seg[:, 2]
        inside = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)  # 0.. within each segment
        rows_at = np.repeat(seg[:, 1], counts) + inside
        number = np.full(total, table.shape[0] - 1, dtype=np.int64)  # the zero row: rows of no tensor
        number[rows_at] = np.repeat(seg[:, 3], counts) + inside  # row number inside its tensor
        if self.host:
            parts = _segment_sums(self.sums.numpy()[:total], table.numpy()[number], seg[:, 1], seg[:, 1] + counts)
            per_host = np.zeros((n, COLUMNS), dtype=np.int64)
            np.add.at(per_host, seg[:, 0], parts)  # a tensor read in place has a second part: its staged tail
            self.results.append((self.handles, torch.from_numpy(per_host)))
        else:
            owner = np.full(total, n, dtype=np.int64)  # a spare slot for rows of no tensor
            owner[rows_at] = np.repeat(seg[:, 0], counts)
            host = torch.from_numpy(np.concatenate([number, owner]))
            if self.device.type == "cuda":  # no wait for the device: a pinned copy, kept alive with the result
                host = host.pin_memory()
            moved = host.to(self.device, non_blocking=True)
            weighted = self.sums[:total, None] * table.index_select(0, moved[:total])
            per_tensor = torch.zeros((n + 1, COLUMNS), dtype=torch.int64, device=self.device)
            per_tensor.index_add_(0, moved[total:], weighted)  # sums modulo 2**64, in any order
            self.results.append((self.handles, per_tensor[:n]))
            self._keep = host
        self.handles, self.segments = [], []
        if staged:  # the pads of the next tensors must read as zeros
            if self.host:
                self.buffer.numpy()[:staged * ROW].fill(0)
            else:
                self.buffer[:staged * ROW].zero_()
        self.staged, self.read = 0, self.STAGE_ROWS


_ROW_TABLES: Dict[torch.device, torch.Tensor] = {}


def _row_table(device: torch.device, rows: int) -> torch.Tensor:
    """``C`` for row numbers 0..rows-1 (at least) on ``device``, then one zero row (shared, grown by doubling)."""
    table = _ROW_TABLES.get(device)
    if table is None or table.shape[0] - 1 < rows:
        size = max(rows, 2 * (table.shape[0] - 1 if table is not None else 2048))
        consts = np.concatenate([row_constants(size), np.zeros((1, COLUMNS), dtype=np.int64)])
        table = _ROW_TABLES[device] = torch.from_numpy(consts).to(device)
    return table


@functools.lru_cache(maxsize=4096)
def _contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=65536)
def _meta(dtype: torch.dtype, shape: Tuple[int, ...], nbytes: int) -> Tuple[int, int]:
    return meta_constant(dtype, shape, nbytes)


def digest_hex(tensor: torch.Tensor) -> str:
    """The 32-character hex digest of one tensor (convenience; waits for the device)."""
    return Digester(max_plans=1).hex([tensor])[0]


__all__ = ["ALGORITHM", "Digester", "StreamDigests", "bytes_digest", "digest_hex", "split_hex", "to_hex", "HEX_CHARS"]
