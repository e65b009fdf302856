"""The CPU kernels of ``bytes-lin64-v2`` compiled by Numba (imported only where Numba is installed).

:func:`row_sums` is the row stage of :mod:`.digest` over rows already laid out in memory (blocks of a
matrix). :func:`tensor_words` is a whole digest but the meta words: for each tensor, given the address
and size of its bytes, the row sums of its rows (the last one zero-padded, without a copy) weighted by
the row constants, in one call for any number of tensors. Each word is read once, and LLVM vectorizes
the 64-bit products for the CPU it runs on (with or without AVX-512). Both give exactly the integers of
NumPy's kernel (the tests run every property on both).

The machine code is cached on disk (``cache=True``: next to this file, else in the user's cache): the
compile (about 1.4 s) happens once per installation, and each process pays about 0.5 s to load it.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

WORDS = 128  # 64-bit words per 1024-byte row (digest.ROW)


@intrinsic
def _int64_at(typingctx, address):  # noqa: ARG001
    """``address`` (an int64) as a pointer to int64 words."""
    def codegen(context, builder, signature, args):  # noqa: ARG001
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.int64)))
    return types.CPointer(types.int64)(types.int64), codegen


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


def _row_sums(words, w, v, out):  # pragma: no cover  (compiled; the tests compare it with the reference)
    """``out[r] = sum_k w[k] * x + v[k] * (x >> 32)`` over the words ``x = words[r, k]``, wrapping modulo 2**64."""
    for r in range(words.shape[0]):
        acc = 0
        for k in range(words.shape[1]):
            x = words[r, k]
            acc += w[k] * x + v[k] * (x >> 32)
        out[r] = acc


def _tensor_words(addresses, sizes, w, v, consts, out):  # pragma: no cover  (compiled)
    """``out[i, j] = sum_r consts[r, j] * S[r]`` over the rows ``r`` of the ``sizes[i]`` bytes at
    ``addresses[i]`` (8-byte aligned, alive for the call), the last row zero-padded: a tensor's digest
    words before its meta words. ``consts`` holds at least as many rows as the largest tensor."""
    for i in range(addresses.shape[0]):
        n = sizes[i]
        full = n // 8  # whole words; the bytes of a last, partial word are read one by one
        words = numba.carray(_int64_at(addresses[i]), (full,))
        acc0 = 0
        acc1 = 0
        rows = (n + 8 * WORDS - 1) // (8 * WORDS)
        for r in range(rows):
            start = r * WORDS
            stop = min(start + WORDS, full)
            s = 0
            for k in range(stop - start):
                x = words[start + k]
                s += w[k] * x + v[k] * (x >> 32)
            if r == rows - 1 and n % 8:
                raw = numba.carray(_uint8_at(addresses[i]), (n,))
                x = 0
                for b in range(n % 8):
                    x |= np.int64(raw[full * 8 + b]) << (8 * b)
                k = full - start
                s += w[k] * x + v[k] * (x >> 32)
            acc0 += consts[r, 0] * s
            acc1 += consts[r, 1] * s
        out[i, 0] = acc0
        out[i, 1] = acc1


row_sums = _compile(["void(int64[:, ::1], int64[::1], int64[::1], int64[::1])",
                     "void(int64[:, :], int64[:], int64[:], int64[:])"], _row_sums)
tensor_words = _compile(["void(int64[::1], int64[::1], int64[::1], int64[::1], int64[:, ::1], int64[:, ::1])"],
                        _tensor_words)
