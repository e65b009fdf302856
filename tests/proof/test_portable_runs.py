"""portable, proved on trainings: examples/portable_tiny.py (conv, BatchNorm, SiLU, nearest upsampling, concat, BCE
and box losses, SGD with momentum) trained under strict.

- On this machine: under ``yolo-det run --portable`` (its launch environment) the runs started with no cap, with the
  CPU libraries capped at AVX2 and at AVX-512, each with 1 and 2 intra-op threads, are bit-identical: portable
  replaces the caps and the thread count the process would have had. Without portable the instruction set (on a CPU
  with AVX-512) and the thread count each change the bits (measured on an AMD EPYC with AVX-512: at step 1, the
  gradient of the first convolution).
- Across machines: the portable run's record equals the golden committed in tests/fixtures/portable/ (made on one
  machine by scripts/portable_golden.py). With other torch/numpy versions than the golden's the test skips, naming
  them; with the same versions and other bits it fails.

One set of 9 trainings (3 s each) shared by the slow tests, run two at a time; the verdict against the golden is
also checked on doctored copies of the golden itself, without training.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from support.portable import golden_tool, gpu_check
from support.verify import Background
from yolo_det.core import machine
from yolo_det.proof.compare import compare_logs

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
AVX512 = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}
CAPS = {"default": {}, "AVX2": AVX2, "AVX-512": AVX512}
#: (portable thread pin or None, caps, OMP_NUM_THREADS): the portable matrix, then the contrast without portable
RUNS = [(1, cap, t) for cap in CAPS for t in (1, 2)] + [(None, "default", 1), (None, "AVX2", 1), (None, "default", 2)]


def _has_avx2() -> bool:
    return {"avx2", "fma"} <= set(machine.cpu_facts()["features"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, train_env):
    """Every run of :data:`RUNS`: ``{(portable, cap, threads): log path}``; a failed run fails the fixture."""
    if not _has_avx2():
        pytest.skip("this CPU has no AVX2 and FMA: portable refuses on it")
    tool = golden_tool()
    root = tmp_path_factory.mktemp("portable")

    def one(key):
        pin, cap, threads = key
        log = root / f"{'portable' if pin else 'strict'}-{cap}-{threads}.jsonl"
        done = tool.run_tiny(log, train_env, pin, {**CAPS[cap], "OMP_NUM_THREADS": str(threads)})
        assert done.returncode == 0, (key, done.stdout[-2000:] + done.stderr[-3000:])
        return log

    logs = {}
    for first, second in zip(RUNS[::2], RUNS[1::2] + [None]):
        pending = Background(lambda key=second: one(key)) if second is not None else None
        logs[first] = one(first)
        if pending is not None:
            logs[second] = pending.result()
    return logs


def _header(log):
    return json.loads(log.read_text().splitlines()[0])


@pytest.mark.slow
def test_portable_runs_are_identical_under_every_cap_and_thread_count(runs):
    reference = runs[(1, "default", 1)]
    for key, log in runs.items():
        if key[0] is None:
            continue
        comparison = compare_logs(reference, log)
        assert comparison.identical, (key, comparison.first_divergence)
        head = _header(log)
        assert head["portable"]["problems"] == [] and head["portable"]["threads"] == 1
        assert head["threads"] == 1 and head["settings"]["portable"] == 1
        cpu = head["machine"]["cpu"]
        assert cpu["aten_capability"] == "AVX2" and cpu["dispatch"]["onednn"] == "AVX2"
        assert cpu["caps"]["MKL_CBWR"] == "COMPATIBLE,STRICT" and head["portable"]["in_force"]["mkl_cbwr"] in (
            "COMPATIBLE,STRICT", None)


@pytest.mark.slow
def test_without_portable_the_thread_count_and_the_instruction_set_change_the_bits(runs):
    """The contrast that makes the test above mean something: the same strict run, not portable, on 1 and 2 threads
    (torch computes a 1x1 convolution of a small batch with MKL's GEMM on one thread, with oneDNN on more), and
    with oneDNN/ATen at this CPU's best vs capped at AVX2 (only where the best is above AVX2)."""
    threads = compare_logs(runs[(None, "default", 1)], runs[(None, "default", 2)])
    assert not threads.identical and threads.first_divergence is not None
    assert "threads" in {c.what for c in threads.causes}
    best = machine.cpu_facts()["dispatch"]["onednn"]
    if machine.TIERS.index(best) <= machine.TIERS.index("AVX2"):
        pytest.skip(f"this CPU's best tier is {best}: a cap at AVX2 changes nothing here")
    isa = compare_logs(runs[(None, "default", 1)], runs[(None, "AVX2", 1)])
    assert not isa.identical and isa.first_divergence is not None
    assert isa.causes[0].what == "cpu_isa"


@pytest.mark.slow
def test_the_portable_run_matches_the_golden_record(runs):
    """The record made on another machine (tests/fixtures/portable/golden.jsonl's header says which) is this run's,
    bit for bit: every step's data, loss, gradient, parameter and RNG digests."""
    tool = golden_tool()
    verdict, why = tool.judge(runs[(1, "default", 1)])
    if verdict == "skip":
        pytest.skip(why)
    assert verdict == "identical", why


@pytest.mark.slow
def test_the_golden_verdict_skips_on_other_versions_and_fails_on_other_bits(runs, tmp_path):
    """judge() on doctored copies of the golden: another torch in the header is a skip naming both versions; the
    same versions and one changed gradient digest is ``differs`` naming the step, kind and tensor."""
    tool = golden_tool()
    log = runs[(1, "default", 1)]
    lines = log.read_text().splitlines()
    head = json.loads(lines[0])
    other = dict(head, torch="9.9.9")
    older = tmp_path / "older.jsonl"
    older.write_text("\n".join([json.dumps(other)] + lines[1:]) + "\n")
    verdict, why = tool.judge(log, older)
    assert verdict == "skip" and "9.9.9" in why and head["torch"] in why
    step = json.loads(lines[1])
    grads = step["digests"]["grad"]  # step 1 is written in full: one digest per gradient, concatenated
    flipped = dict(step, digests=dict(step["digests"], grad=("1" if grads[0] != "1" else "2") + grads[1:]))
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join([lines[0], json.dumps(flipped)] + lines[2:]) + "\n")
    verdict, why = tool.judge(log, tampered)
    assert verdict == "differs" and "step 1, grad b1.conv.weight" in why, why
    missing = tmp_path / "none.jsonl"
    assert tool.judge(log, missing)[0] == "differs"
    shutil.copyfile(log, tmp_path / "same.jsonl")
    assert tool.judge(log, tmp_path / "same.jsonl")[0] == "identical"


@pytest.mark.slow
def test_gpu_checks_comparison_names_where_a_device_run_parts_from_the_cpu_portable_run(runs):
    """scripts/gpu_check.py's check 12 without a GPU: the comparison of two records (the portable run with itself:
    identical; with the strict run on 2 threads: the step, kind and tensor) and the first op a capture names, here
    from two op records that differ in one convolution's output (the captures' own logic is tested with locate)."""
    check = gpu_check()
    portable_log, other = runs[(1, "default", 1)], runs[(None, "default", 2)]
    same = check.compare_runs(portable_log, portable_log)
    assert same["verdict"] == "identical" and "first_divergence" not in same
    asked = []

    def capture_for(step):
        asked.append(step)

        def capture(run, read):
            conv = {"phase": "forward", "module": "b2.conv", "op": "aten.convolution.default", "in": ["x", "w"],
                    "out": ["y1" if run == 1 else "y2"], "t": 2, "read": True}
            silu = {"phase": "forward", "module": "b2", "op": "aten.silu.default", "in": conv["out"],
                    "out": ["z1" if run == 1 else "z2"], "t": 1, "read": True}
            return [conv, silu]
        return capture

    found = check.compare_runs(portable_log, other, capture_for)
    assert found["verdict"] == "differs" and found["first_divergence"]["step"] == 1 == asked[0]
    assert found["first_divergence"]["kind"] == "grad"
    assert found["first_op"]["op"] == "aten.convolution.default" and found["first_op"]["module"] == "b2.conv"
    assert any("thread counts" in c for c in found["causes"]) and "not nondeterminism" in found["note"]


HEX = "0123456789abcdef"


@settings(max_examples=60, deadline=None)
@given(torch_changed=st.booleans(), numpy_changed=st.booleans(),
       flip=st.one_of(st.none(), st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from(
           ["data", "loss", "grad", "param", "rng"]), st.floats(0, 1, exclude_max=True))))
def test_the_golden_verdict_is_a_skip_exactly_on_other_versions_and_a_failure_exactly_on_other_bits(
        tmp_path_factory, torch_changed, numpy_changed, flip):
    """The golden compared with a copy of itself changed in its versions and/or one hex digit of one digest (of any
    kind, in a full step line or the compact line of step 2): a skip exactly when a version differs, else
    ``differs`` exactly when a digit was changed, naming its step; else identical."""
    tool = golden_tool()
    lines = tool.GOLDEN.read_text().splitlines()
    head = json.loads(lines[0])
    if torch_changed:
        head["torch"] = head["torch"] + ".post1"
    if numpy_changed:
        head["packages"] = dict(head["packages"], numpy="0.0.1")
    lines[0] = json.dumps(head)
    where = None
    if flip is not None:
        step, kind, at = flip
        line = json.loads(lines[step])
        if "r" in line:  # step 2 is written compact: one root digest for the step
            text, key = line["r"], "r"
        else:
            text, key = line["digests"][kind], kind
        positions = [i for i, ch in enumerate(text) if ch in HEX]
        i = positions[int(at * len(positions))]
        changed = text[:i] + HEX[(HEX.index(text[i]) + 1) % 16] + text[i + 1:]
        if key == "r":
            line["r"] = changed
        else:
            line["digests"] = dict(line["digests"], **{kind: changed})
        lines[step] = json.dumps(line)
        where = step
    copy = tmp_path_factory.mktemp("golden") / "copy.jsonl"
    copy.write_text("\n".join(lines) + "\n")
    verdict, why = tool.judge(copy)
    if torch_changed or numpy_changed:
        assert verdict == "skip" and "regenerate" in why
    elif where is not None:
        assert verdict == "differs" and f"step {where}" in why, why
    else:
        assert verdict == "identical", why
