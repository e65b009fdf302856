"""Tensor digests: bit-exact, every single-bit change detected, independent of layout and neighbours.

The numpy reference below re-implements algorithm ``bytes-intmm-v1`` from its description, so
a change to the device code that alters digests (and breaks comparing logs across yolo-det
versions) fails here.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yolo_det.proof import digest as D

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MASK = (1 << 64) - 1


def reference_digest(t: torch.Tensor) -> str:
    """Algorithm bytes-intmm-v1 in plain numpy/Python integers."""
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().view(np.int8) if t.numel() else \
        np.zeros(0, np.int8)
    rows = -(-len(raw) // D.ROW)
    padded = np.zeros(rows * D.ROW, dtype=np.int64)
    padded[:len(raw)] = raw
    sums = padded.reshape(rows, D.ROW) @ D.weight_matrix().astype(np.int64)
    consts = D.row_constants(max(rows, 1))[:rows]
    columns = [sum(int(sums[r, m]) * int(consts[r, m]) for r in range(rows)) & MASK for m in range(D.COLUMNS)]
    fold = D.fold_constants()
    k0, k1 = D.meta_constant(t.dtype, t.shape, len(raw))
    word0 = (columns[0] + k0) & MASK
    word1 = (sum(columns[m] * int(fold[m - 1]) for m in range(1, D.COLUMNS)) + k1) & MASK
    return f"{word0:016x}{word1:016x}"


@st.composite
def tensors(draw, max_bytes: int = 5000):
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(0, 3))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    shape = tuple(draw(st.lists(st.integers(0, 24), min_size=ndim, max_size=ndim)))
    if ndim and draw(st.booleans()):  # sometimes more than one 1024-byte row
        shape = (max_bytes // itemsize // max(int(np.prod(shape[1:])), 1) or 1,) + shape[1:]
    n = int(np.prod(shape)) if shape else 1
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw[:n] % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)  # raw bytes: NaN payloads, denormals, negative zeros


def _flip(t: torch.Tensor, byte: int, bit: int) -> torch.Tensor:
    raw = t.contiguous().reshape(-1).view(torch.uint8).clone()
    raw[byte] ^= 1 << bit
    return raw.view(t.dtype).reshape(t.shape)


@SETTINGS
@given(tensors())
def test_digest_matches_reference_algorithm(t):
    assert D.Digester().hex([t]) == [reference_digest(t)]


@SETTINGS
@given(tensors().filter(lambda t: t.numel() > 0), st.data())
def test_every_single_bit_flip_changes_the_digest(t, data):
    nbytes = t.numel() * t.element_size()
    byte = data.draw(st.integers(0, nbytes - 1))
    bit = 0 if t.dtype == torch.bool else data.draw(st.integers(0, 7))
    flipped = _flip(t, byte, bit)
    digester = D.Digester()
    before, after = digester.hex([t, flipped])
    assert before != after
    assert before == digester.hex([t.clone()])[0]


@SETTINGS
@given(tensors().filter(lambda t: t.numel() > 1), st.data())
def test_two_elements_swapping_or_opposite_changes_are_detected(t, data):
    flat = t.reshape(-1)
    i, j = data.draw(st.lists(st.integers(0, flat.numel() - 1), min_size=2, max_size=2, unique=True))
    if torch.equal(flat[i:i + 1].view(torch.uint8), flat[j:j + 1].view(torch.uint8)):
        return
    swapped = flat.clone()
    swapped[i], swapped[j] = flat[j].clone(), flat[i].clone()
    digester = D.Digester()
    assert digester.hex([t])[0] != digester.hex([swapped.reshape(t.shape)])[0]
    if t.dtype == torch.bool:
        return
    # +1 in the lowest bit of one element and -1 in another: plain sums would miss this
    ints = flat.view(torch.uint8).clone()
    a, b = i * t.element_size(), j * t.element_size()
    if ints[a] < 255 and ints[b] > 0:
        ints[a] += 1
        ints[b] -= 1
        assert digester.hex([t])[0] != digester.hex([ints.view(t.dtype).reshape(t.shape)])[0]


def test_known_digest_never_changes():
    """A pinned value: logs written by other yolo-det versions stay comparable."""
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert D.digest_hex(t) == reference_digest(t)
    assert D.digest_hex(t) == "5755ccfb82dfe528f4ff4a105a5fe9d3"


def test_digest_depends_on_values_not_layout_or_neighbours():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 5, 5, generator=g)
    small = torch.randn(7, generator=g)
    big = torch.randn(300_000, generator=g)  # fills the scratch buffer with non-zero bytes
    digester = D.Digester()
    alone = digester.hex([x, small])
    digester.hex([big, torch.randn(3, generator=g)])
    assert digester.hex([x.to(memory_format=torch.channels_last), small]) == alone
    assert digester.hex([small, x]) == alone[::-1]
    assert digester.hex([x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), small]) == alone
    assert digester.hex([x.reshape(-1)])[0] != alone[0]  # same bytes, other shape
    assert digester.hex([x.double()])[0] != alone[0]


def test_in_place_chunked_and_fallback_paths_give_the_same_digests(monkeypatch):
    g = torch.Generator().manual_seed(1)
    tensors_ = [torch.randn(5000, generator=g), torch.randint(0, 9, (3, 700), generator=g), torch.zeros(0),
                torch.tensor(3.5).half(), torch.randn(40_000, generator=g).bfloat16(),
                torch.randn(256, 256, generator=g),  # read in place (a whole number of rows, large)
                torch.randn(256, 256, generator=g).t()]  # large but not contiguous
    expected = [reference_digest(t) for t in tensors_]
    assert D.Digester().hex(tensors_) == expected
    monkeypatch.setattr(D, "CHUNK_BYTES", 16 * D.ROW)  # many chunks sharing one scratch buffer
    assert D.Digester().hex(tensors_) == expected
    monkeypatch.setattr(D, "DIRECT_BYTES", D.ROW)  # every whole-row tensor read in place
    assert D.Digester().hex(tensors_) == expected
    monkeypatch.setattr(D, "_int_mm_works", lambda device, weights: False)  # float32 GEMM instead
    assert D.Digester().hex(tensors_) == expected


def test_empty_list():
    assert D.Digester().digest([]).shape == (0, 2)


def test_bytes_digest_is_blake2b_not_python_hash():
    assert D.bytes_digest(b"abc") == D.bytes_digest(b"abc")
    assert D.bytes_digest(b"abc") != D.bytes_digest(b"abd")
    assert len(D.bytes_digest(b"")) == D.HEX_CHARS


def test_stable_hint_reuses_views_and_still_sees_in_place_updates():
    g = torch.Generator().manual_seed(2)
    state = [torch.randn(3000, generator=g), torch.randn(256, 256, generator=g), torch.tensor(5)]
    digester = D.Digester()
    hint = ("state", tuple(t.data_ptr() for t in state))
    first = digester.digest(state, hint, stable=len(state)).clone()
    digester.hex([torch.randn(9000, generator=g)])  # another layout overwrites the scratch buffer
    with torch.no_grad():
        state[0][17] += 1.0  # an in-place update, as an optimizer step makes
        state[2] += 1
    again = digester.digest(state, hint, stable=len(state))
    assert D.split_hex(D.to_hex(again)) == [reference_digest(t) for t in state]
    assert not torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
