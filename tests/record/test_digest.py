"""Tensor digests: bit-exact, every single-bit change detected, independent of layout and neighbours.

The numpy reference below re-implements algorithm ``bytes-lin64-v2`` from its description, so
a change to the device code that alters digests (and breaks comparing logs across yolo-det
versions) fails here. Every test runs on both CPU kernels (compiled and NumPy).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from yolo_det.record import digest as D

# every dtype the fingerprint meets (parameters, gradients, buffers, batches, loss items)
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.complex64]
# the kernel fixture below is set once per test, for all of its examples
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MASK = (1 << 64) - 1


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def cpu_kernel(request, monkeypatch) -> str:
    """Every test runs on both CPU kernels: the loop Numba compiles and NumPy's (used where Numba is missing)."""
    if request.param == "numpy":
        monkeypatch.setitem(D._COMPILED, "kernel", None)
    else:
        assert D.load_compiled(), "numba is a dependency: the compiled kernel must load"
    return request.param


def reference_digest(t: torch.Tensor) -> str:
    """Algorithm bytes-lin64-v2 in plain numpy/Python integers."""
    t = t.resolve_conj().resolve_neg()  # the bytes of the values
    # a fresh dense copy: contiguous() keeps a one-element view's stride (the imaginary part of a complex: 2)
    flat = t.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
    raw = flat.view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)
    rows = -(-len(raw) // D.ROW)
    padded = np.zeros(rows * D.ROW, dtype=np.uint8)
    padded[:len(raw)] = raw
    x = padded.view("<i8").reshape(rows, D.ROW // 8)
    w, v = D.weights()
    consts = D.row_constants(max(rows, 1))[:rows]
    sums = [(sum(int(a) * int(b) for a, b in zip(x[r], w)) + sum((int(a) >> 32) * int(b) for a, b in zip(x[r], v)))
            & MASK for r in range(rows)]
    k = D.meta_constant(t.dtype, t.shape, len(raw))
    words = [(sum(sums[r] * int(consts[r, j]) for r in range(rows)) + k[j]) & MASK for j in range(2)]
    return f"{words[0]:016x}{words[1]:016x}"


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


@st.composite
def views(draw):
    """Tensors and non-contiguous views of them (transposed, strided, sliced at an odd offset, lazily conjugated
    or negated: their memory holds other bytes than their values)."""
    t = draw(tensors())
    kind = draw(st.sampled_from(["plain", "transpose", "step", "offset", "conj"]))
    if kind == "conj" and t.is_complex():
        return t.conj() if draw(st.booleans()) else t.conj().imag  # the conjugate bit; the negative bit
    if kind == "transpose" and t.dim() >= 2:
        return t.transpose(0, t.dim() - 1)
    if kind == "step" and t.dim() >= 1 and t.shape[0] > 2:
        return t[::2]
    if kind == "offset" and t.dim() >= 1 and t.shape[0] > 1:
        return t[1:]
    return t


def _flip(t: torch.Tensor, byte: int, bit: int) -> torch.Tensor:
    raw = t.contiguous().reshape(-1).view(torch.uint8).clone()
    raw[byte] ^= 1 << bit
    return raw.view(t.dtype).reshape(t.shape)


@SETTINGS
@given(views())
@example(torch.tensor([1.5 - 2.5j]).conj().imag)  # one element of stride 2 (found by Hypothesis in the reference)
@example(torch.arange(12.0).reshape(3, 4)[:1, ::2])  # one row, stride 2
def test_digest_matches_reference_algorithm(t):
    assert D.Digester().hex([t]) == [reference_digest(t)]
    stream = D.StreamDigests()
    stream.add(t)
    assert stream.hexes() == [reference_digest(t)]  # the op capture's batched reads: the same kernel


def test_every_bit_position_of_a_word_changes_both_words():
    g = torch.Generator().manual_seed(3)
    words = torch.randint(-2**62, 2**62, (300,), dtype=torch.int64, generator=g)  # 2 full rows and a partial one
    flipped = []
    for index in (0, 1, 127, 128, 200, 299):  # first, last of a row, first of the next, the partial row
        for bit in range(64):
            t = words.clone()
            t[index] ^= torch.tensor(1, dtype=torch.int64) << bit
            flipped.append(t)
    base, *others = D.Digester().hex([words] + flipped)
    for digest in others:
        assert digest[:16] != base[:16] and digest[16:] != base[16:]


def test_equal_bit_changes_in_up_to_three_halves_of_a_row_never_cancel():
    """Flipping the same bit (a sign, say) of up to three 32-bit halves of a row is seen, exhaustively.

    Such a change adds ``2**b * (+-c_a +-c_b +-c_c)`` to the row sum (``c``: a half's weight, ``b < 32``),
    so it is seen exactly when that sum is non-zero modulo ``2**(64 - b)``: checked here modulo 2**33.
    """
    w, v = (a.view(np.uint64).astype(object) for a in D.weights())
    modulus = 1 << 33
    coeff = np.array([int(x) % modulus for x in w] + [((int(x) << 32) + int(y)) % modulus for x, y in zip(w, v)],
                     dtype=np.int64)
    signed = np.concatenate([coeff, (-coeff) % modulus])
    assert len(np.unique(signed)) == len(signed)  # no c_a = +-c_b (and no c = 0: all are odd)
    a, b = np.triu_indices(len(coeff), 1)
    pairs = np.concatenate([(coeff[a] + coeff[b]) % modulus, (coeff[a] - coeff[b]) % modulus])
    assert not np.isin(pairs, signed).any()  # no +-c_a +-c_b +-c_c = 0


@SETTINGS
@given(st.integers(2, 12), st.integers(0, 2**31), st.sampled_from([torch.float32, torch.float64, torch.float16]))
def test_sign_flips_row_permutations_and_swapped_words_are_seen(rows, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(rows, D.ROW // torch.empty(0, dtype=dtype).element_size(), generator=g).to(dtype)
    signs = torch.where(torch.rand(t.shape, generator=g) < 0.5, -1.0, 1.0).to(dtype)
    signs.view(-1)[int(torch.randint(0, t.numel(), (1,), generator=g))] = -1  # at least one sign flips
    perm = torch.randperm(rows, generator=g)
    if torch.equal(perm, torch.arange(rows)):
        perm = perm.roll(1)
    words = t.reshape(-1).view(torch.int8).view(torch.int64)
    i, j = (int(x) for x in torch.randint(0, words.numel(), (2,), generator=g))
    swapped = words.clone()
    swapped[i], swapped[j] = words[j], words[i]
    variants = [t * signs, t[perm], swapped.view(torch.int8).view(dtype).reshape(t.shape), -t]
    digests = D.Digester().hex([t] + variants)
    assert all(d != digests[0] for d, changed in zip(digests[1:], [True, True, i != j, True]) if changed)
    assert digests[0] == reference_digest(t)


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
    assert D.digest_hex(t) == "8284281676264eafa83660efa40d5cfc"


def _pinned_tensors() -> list:
    """Tensors of every path's edge sizes (empty, partial words, one row, a row and a word, in-place rows) whose
    bytes come from SHAKE-256: the same on every machine and library version."""
    specs = [(torch.uint8, (0,)), (torch.uint8, (1,)), (torch.uint8, (7,)), (torch.int64, (1,)), (torch.uint8, (9,)),
             (torch.float16, (511,)), (torch.float32, (256,)), (torch.float32, (257,)), (torch.float64, (3, 1000)),
             (torch.bfloat16, (40_000,)), (torch.float32, (256, 256)), (torch.int8, (5, 7, 3)), (torch.bool, (33,))]
    out = []
    for i, (dtype, shape) in enumerate(specs):
        n = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        raw = hashlib.shake_256(f"yolo-det pinned digest {i}".encode()).digest(n) if n else b""
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if n else torch.zeros(0, dtype=torch.uint8)
        out.append(((t % 2).bool() if dtype == torch.bool else t.view(dtype)).reshape(shape))
    return out


# computed by the int64 kernel of yolo-det before the compiled hash moved to uint64 (issue 36): logs written
# by earlier versions must still compare with new ones
PINNED = ["7a7d61668fa187475e13848064d33d38", "7ce27fd72a083a09539a4a29e759b5c5", "cbb86b70715c9f899ce189fc0674ecb5",
          "252935d4e3e796ca8ab7b805cb25f95e", "c9ac460110664133be158b1f00055a19", "95aeeb0e3cd00b44573fea862bb77c16",
          "e7618d6806709c35f283d9caeced1941", "4dc71dbcf435c9d9bdd94763d12e72e3", "4946c1c9d49e2b2ee07439c97f628744",
          "752e0c6fc2bd59bdaa871779c794112e", "725bcef92753d828efec130be519a980", "18cb362c76208c304bde54749e3e1647",
          "1803bf0446b4d86051dcf4d8829dc024"]


def test_digests_of_earlier_versions_are_unchanged_on_every_kernel_and_path():
    """Both CPU kernels (the fixture), the fingerprint's and the op capture's paths give the pinned digests."""
    tensors_ = _pinned_tensors()
    assert D.Digester().hex(tensors_) == PINNED
    stream = D.StreamDigests()
    for t in tensors_:
        stream.add(t)
    assert stream.hexes() == PINNED
    assert [reference_digest(t) for t in tensors_ if t.numel() * t.element_size() <= 8 * D.ROW] == \
        [h for t, h in zip(tensors_, PINNED) if t.numel() * t.element_size() <= 8 * D.ROW]


_ARITHMETIC = {"add", "sub", "mul", "shl"}


def _hash_arithmetic_with_wrap_flags(ir: str) -> tuple:
    """The integer ``add``/``sub``/``mul``/``shl`` instructions of ``ir`` that compute the hash (every ``mul``
    of loaded data and whatever is computed from one), and those of them flagged ``nsw``/``nuw`` (poison on overflow)."""
    defs = {}
    for line in ir.splitlines():
        parts = line.strip().split(" = ", 1)
        if len(parts) == 2 and parts[0].startswith("%"):
            words = parts[1].replace(",", " ").split()
            defs[parts[0]] = (words[0], set(words[1:]), [w for w in words[1:] if w.startswith("%")], line.strip())
    carry = _ARITHMETIC | {"phi", "shufflevector", "select", "extractelement", "insertelement"}

    def derived(seed: set, through: set) -> set:
        grown = True
        while grown:
            grown = False
            for name, (op, _, operands, _) in defs.items():
                if name not in seed and op in through and any(o.rstrip("]") in seed for o in operands):
                    seed.add(name)
                    grown = True
        return seed

    # a product of loaded data (not of shapes or trip counts: the vectoriser's `mul nsw n, -8` is loop control)
    data = derived({name for name, (op, _, _, _) in defs.items() if op == "load"},
                   carry | {"zext", "sext", "trunc", "bitcast", "xor", "or", "and", "lshr", "ashr"})
    hashed = {name for name, (op, _, _, _) in defs.items() if op == "mul" and name in data}
    grown = True
    while grown:  # what is computed from a hashed value is hashed too (sums, reductions, loop-carried phis)
        grown = False
        for name, (op, _, operands, _) in defs.items():
            if name not in hashed and op in carry and any(o.rstrip("]") in hashed for o in operands):
                hashed.add(name)
                grown = True
    arithmetic = [defs[n][3] for n in hashed if defs[n][0] in _ARITHMETIC]
    flagged = [defs[n][3] for n in hashed if defs[n][0] in _ARITHMETIC and defs[n][1] & {"nsw", "nuw"}]
    return arithmetic, flagged


def test_compiled_hash_arithmetic_wraps_by_definition_not_by_luck(cpu_kernel):
    """In LLVM an ``nsw``/``nuw`` operation that overflows is poison (any value the optimiser likes); the hash
    overflows on nearly every step, so its products and sums must be plain (unsigned) wrapping arithmetic."""
    if cpu_kernel == "numpy":
        pytest.skip("reads the compiled kernel's IR (once)")
    import numba

    from yolo_det.record import digest_kernel as K

    for function, signatures in ((K._row_sums, K.ROW_SUMS_SIGNATURES), (K._tensor_words, K.TENSOR_WORDS_SIGNATURES)):
        compiled = numba.njit(signatures, nogil=True)(function)  # not the disk cache: its IR cannot be read
        for signature, ir in compiled.inspect_llvm().items():
            arithmetic, flagged = _hash_arithmetic_with_wrap_flags(ir)
            assert len(arithmetic) >= 4, f"no hash arithmetic found in the IR of {function.__name__}{signature}"
            assert not flagged, f"{function.__name__}: hash arithmetic that is poison on overflow: {flagged[:5]}"


def test_the_ir_check_finds_signed_hash_arithmetic(cpu_kernel):
    """The check above on an int64 version of the row loop (the kernel before issue 36): it must object."""
    if cpu_kernel == "numpy":
        pytest.skip("reads compiled IR (once)")
    import numba

    def signed(words, w, v, out):  # pragma: no cover  (compiled)
        for r in range(words.shape[0]):
            acc = 0
            for k in range(words.shape[1]):
                x = words[r, k]
                acc += w[k] * x + v[k] * (x >> 32)
            out[r] = acc

    compiled = numba.njit("void(int64[:, ::1], int64[::1], int64[::1], int64[::1])")(signed)
    _, flagged = _hash_arithmetic_with_wrap_flags(next(iter(compiled.inspect_llvm().values())))
    assert flagged


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
    monkeypatch.setattr(D, "BLOCK_ROWS", 3)  # rows in many blocks
    assert D.Digester().hex(tensors_) == expected
    elementwise = D._Kernel(torch.device("cpu"))
    elementwise.path = "elementwise"  # the path of devices other than the CPU (CUDA)
    monkeypatch.setitem(D._KERNELS, torch.device("cpu"), elementwise)
    assert D.Digester().hex(tensors_) == expected
    monkeypatch.setattr(D, "DEVICE_BLOCK_ROWS", 5)
    assert D.Digester().hex(tensors_) == expected


def test_host_kernel_gives_the_same_digests_on_any_number_of_threads(monkeypatch):
    g = torch.Generator().manual_seed(5)
    tensors_ = [torch.randn(n, generator=g) for n in (70_000, 300_000, 5, 1 << 20)]
    tensors_ += [torch.randn(30, 40, generator=g).t(), torch.randn(3000, generator=g).half()] * 4  # copied, chunks
    expected = D.Digester().hex(tensors_)
    assert expected == [reference_digest(t) if t.numel() < (1 << 20) else expected[i] for i, t in enumerate(tensors_)]
    monkeypatch.setattr(D, "PARALLEL_ROWS", 1)  # every call shared out, blocks of 7 rows
    monkeypatch.setattr(D, "BLOCK_ROWS", 7)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3, 5):
            torch.set_num_threads(n)
            assert D.Digester().hex(tensors_) == expected
            stream = D.StreamDigests()
            for t in tensors_:
                stream.add(t)
            assert stream.hexes() == expected
    finally:
        torch.set_num_threads(threads)


def test_pool_threads_copy_parameters_without_recording_autograd(monkeypatch):
    """Grad mode is per thread: the copies of small parameters made on pool threads must not join the graph
    (they did, ten times slower than the same copies on the calling thread, inside every training step)."""
    monkeypatch.setattr(D, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(D, "BLOCK_ROWS", 2)
    monkeypatch.setattr(D, "_threads", lambda: 3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Conv2d(8, 4, 1))
    params = list(model.parameters())
    expected = [reference_digest(p.detach()) for p in params]
    digester = D.Digester()
    assert digester.hex(params) == expected
    plan = next(iter(digester._plans.values()))
    assert len(plan.chunks) > 2  # copied chunks, shared out to the pool threads
    assert not any(view.requires_grad or view.grad_fn is not None for chunk in plan.chunks for view in chunk.views)


def _digest_in_child(queue) -> None:
    torch.set_num_threads(1)  # what a DataLoader worker does: torch's own threads are not fork-safe
    queue.put(D.Digester().hex([torch.from_numpy(np.arange(1 << 20, dtype=np.float32))]))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_process_digests_with_its_own_thread_pool(monkeypatch):
    """A forked child (a DataLoader worker) cannot use the parent's pool threads: it would wait forever."""
    import multiprocessing

    monkeypatch.setattr(D, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(D, "_threads", lambda: 3)
    expected = D.Digester().hex([torch.from_numpy(np.arange(1 << 20, dtype=np.float32))])  # the parent's pool
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_digest_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=60) == expected
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_a_process_digests_its_first_bytes_with_numpy_and_then_loads_the_compiled_loop(monkeypatch):
    """Loading the compiled loop costs a process 0.5 s: it is loaded only once the process has digested
    COMPILED_AFTER host bytes (fingerprints and op captures alike), and the digests are the same either side."""
    monkeypatch.setattr(D, "_COMPILED", {})  # a process that has not loaded it
    monkeypatch.setattr(D, "_HOST", {"bytes": 0})
    monkeypatch.setattr(D, "COMPILED_AFTER", 3 << 20)
    g = torch.Generator().manual_seed(6)
    tensors_ = [torch.randn(1 << 18, generator=g), torch.randn(7, 9, generator=g).t()]  # 1 MiB read in place, a copy
    expected = [reference_digest(t) for t in tensors_]
    digester = D.Digester()
    for _ in range(2):  # 2 MiB
        assert digester.hex(tensors_) == expected
    assert "kernel" not in D._COMPILED  # NumPy's kernel so far
    stream = D.StreamDigests()
    for t in tensors_:
        stream.add(t)
    assert stream.hexes() == expected  # the capture's reads count too: past 3 MiB, the compiled loop is loaded
    assert D._COMPILED["kernel"] is not None
    assert digester.hex(tensors_) == expected
    assert D.load_compiled() and D._HOST["bytes"] <= (3 << 20) + (1 << 21)  # counted until loaded, not after


def test_rows_that_are_not_8_byte_aligned_in_their_storage_digest_the_same():
    g = torch.Generator().manual_seed(4)
    base = torch.randn(D.DIRECT_BYTES // 2 + 1, generator=g).half()
    shifted = base[1:]  # whole rows, large, contiguous, but 2 bytes into its storage: read in place after a copy
    assert shifted.numel() * 2 % D.ROW == 0 and shifted.numel() * 2 >= D.DIRECT_BYTES
    assert D.Digester().hex([shifted]) == [reference_digest(shifted)]
    stream = D.StreamDigests()
    stream.add(shifted)
    assert stream.hexes() == [reference_digest(shifted)]


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


def test_lazily_conjugated_and_negated_views_digest_their_values():
    """A conjugate or negative bit leaves the memory as it was: the digest must read the values, on every path."""
    g = torch.Generator().manual_seed(6)
    base = torch.randn(300, 7, dtype=torch.complex64, generator=g)
    views_ = [base.conj(), base.conj().imag, base.conj()[::2], base.conj().t()]
    assert all(v.is_conj() or v.is_neg() for v in views_)
    expected = [reference_digest(v.resolve_conj().resolve_neg().clone()) for v in views_]
    assert expected[0] != reference_digest(base) and expected[1] != reference_digest(base.imag)
    assert D.Digester().hex(views_) == expected


def test_numba_older_than_the_tested_floor_is_not_used(cpu_kernel, monkeypatch):
    """setup.cfg's floor is the version the kernel is tested with; an older Numba falls back to NumPy's kernel."""
    if cpu_kernel == "numpy":
        pytest.skip("about the compiled kernel (once)")
    import configparser
    import importlib.util
    import pathlib
    import re

    import numba

    from yolo_det.record import digest_kernel as K

    config = configparser.ConfigParser()
    config.read(pathlib.Path(__file__).parents[2] / "setup.cfg")
    floor = re.search(r"numba>=(\d+)\.(\d+)", config["options"]["install_requires"])
    assert floor and (int(floor[1]), int(floor[2])) == K.NUMBA_FLOOR
    assert K._version(numba.__version__) >= K.NUMBA_FLOOR  # the suite runs the kernel it accepts
    monkeypatch.setattr(numba, "__version__", f"{K.NUMBA_FLOOR[0]}.{K.NUMBA_FLOOR[1] - 1}.9")
    spec = importlib.util.spec_from_file_location("yolo_det_old_numba_kernel", K.__file__)
    with pytest.raises(ImportError, match="tested with"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
