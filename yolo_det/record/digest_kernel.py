"""The CPU kernels of ``bytes-lin64-v2`` compiled by Numba (imported only where Numba is installed).

:func:`row_sums` is the row stage of :mod:`.digest` over rows already laid out in memory (blocks of a
matrix). :func:`tensor_words` is a whole digest but the meta words: for each tensor, given the address
and size of its bytes, the row sums of its rows (the last one zero-padded, without a copy) weighted by
the row constants, in one call for any number of tensors. Each word is read once, and LLVM vectorizes
the 64-bit products for the CPU it runs on (with or without AVX-512). Both give exactly the integers of
NumPy's kernel (the tests run every property on both).

Only the Numba versions the test suite compiles and checks (``NUMBA_FLOOR`` up, as setup.cfg asks) are used:
an older one raises ImportError here, and :func:`.digest._compiled` falls back to NumPy's kernel.

The machine code is cached on disk (``cache=True``: next to this file, else in the user's cache): the
compile (about 1.4 s) happens once per installation, and each process pays about 0.5 s to load it, once
it has digested more than :data:`.digest.COMPILED_AFTER` bytes (NumPy's kernel digests the first).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

WORDS = 128  # 64-bit words per 1024-byte row (digest.ROW)
NUMBA_FLOOR = (0, 68)  # the oldest Numba whose compiled kernel the tests have run (setup.cfg's floor)


def _version(text: str) -> tuple:
    """``"0.68.1"`` as ``(0, 68)``; a development suffix counts as that release."""
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


if _version(numba.__version__) < NUMBA_FLOOR:
    raise ImportError(f"numba {numba.__version__} is older than the {NUMBA_FLOOR[0]}.{NUMBA_FLOOR[1]} the digest "
                      "kernel is tested with: NumPy's kernel (the same digests) is used instead")


@intrinsic
def _uint64_at(typingctx, address):  # noqa: ARG001
    """``address`` (an int64) as a pointer to uint64 words."""
    def codegen(context, builder, signature, args):  # noqa: ARG001
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.uint64)))
    return types.CPointer(types.uint64)(types.int64), codegen


@intrinsic
def _uint8_at(typingctx, address):  # noqa: ARG001
    """``address`` (an int64) as a pointer to bytes."""
    def codegen(context, builder, signature, args):  # noqa: ARG001
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.uint8)))
    return types.CPointer(types.uint8)(types.int64), codegen


def _compile(signatures, function):
    """``function`` compiled for ``signatures`` now, its machine code cached on disk where a cache directory
    can be written (else compiled again in each process)."""
    try:
        return numba.njit(signatures, nogil=True, cache=True)(function)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(signatures, nogil=True)(function)


# The hash is computed in uint64 (products and sums wrap modulo 2**64 by definition), never in int64: Numba
# marks signed arithmetic ``nsw`` (no signed wrap), and in LLVM an ``nsw`` operation that overflows -- as
# nearly every step of this hash does -- is poison, which a compiler may turn into any value. The high half
# is the only signed step: an arithmetic shift of the word read as int64 (``ashr``: defined for every value),
# and int64 <-> uint64 casts of the same width are no-ops, so the integers are those of the int64 formula.


def _row_sums(words, w, v, out):  # pragma: no cover  (compiled; the tests compare it with the reference)
    """``out[r] = sum_k w[k] * x + v[k] * (x >> 32)`` over the words ``x = words[r, k]``, modulo 2**64."""
    for r in range(words.shape[0]):
        acc = np.uint64(0)
        for k in range(words.shape[1]):
            x = words[r, k]
            acc += np.uint64(w[k]) * np.uint64(x) + np.uint64(v[k]) * np.uint64(x >> 32)
        out[r] = np.int64(acc)


def _tensor_words(addresses, sizes, w, v, consts, out):  # pragma: no cover  (compiled)
    """``out[i, j] = sum_r consts[r, j] * S[r]`` over the rows ``r`` of the ``sizes[i]`` bytes at
    ``addresses[i]`` (8-byte aligned, alive for the call), the last row zero-padded: a tensor's digest
    words before its meta words. ``consts`` holds at least as many rows as the largest tensor."""
    for i in range(addresses.shape[0]):
        n = sizes[i]
        full = n // 8  # whole words; the bytes of a last, partial word are read one by one
        words = numba.carray(_uint64_at(addresses[i]), (full,))
        acc0 = np.uint64(0)
        acc1 = np.uint64(0)
        rows = (n + 8 * WORDS - 1) // (8 * WORDS)
        for r in range(rows):
            start = r * WORDS
            stop = min(start + WORDS, full)
            s = np.uint64(0)
            for k in range(stop - start):
                x = words[start + k]
                s += np.uint64(w[k]) * x + np.uint64(v[k]) * np.uint64(np.int64(x) >> 32)
            if r == rows - 1 and n % 8:
                raw = numba.carray(_uint8_at(addresses[i]), (n,))
                x = np.uint64(0)
                for b in range(n % 8):
                    x |= np.uint64(raw[full * 8 + b]) << np.uint64(8 * b)
                k = full - start
                s += np.uint64(w[k]) * x + np.uint64(v[k]) * np.uint64(np.int64(x) >> 32)
            acc0 += np.uint64(consts[r, 0]) * s
            acc1 += np.uint64(consts[r, 1]) * s
        out[i, 0] = np.int64(acc0)
        out[i, 1] = np.int64(acc1)


ROW_SUMS_SIGNATURES = ["void(int64[:, ::1], int64[::1], int64[::1], int64[::1])",
                       "void(int64[:, :], int64[:], int64[:], int64[:])"]
TENSOR_WORDS_SIGNATURES = ["void(int64[::1], int64[::1], int64[::1], int64[::1], int64[:, ::1], int64[:, ::1])"]
row_sums = _compile(ROW_SUMS_SIGNATURES, _row_sums)
tensor_words = _compile(TENSOR_WORDS_SIGNATURES, _tensor_words)
