"""portable's setting and pins (yolo_det/core/portable.py): how ``deterministic_portable`` resolves, the pins a
launcher gives its command (replacing any cap), the check that each pin is in force (strict refuses, warn warns),
and ``yolo-det run --portable`` / ``env --exports --portable``. The trainings that prove the bits are in
tests/proof/test_portable_runs.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

import yolo_det
from support.cli import cli
from support.verify import script_env
from yolo_det.core import env_names, machine, portable
from yolo_det.core.mode import ConfigError, resolve, validate_portable
from yolo_det.integrations import launch
from yolo_det.session import DeterminismSetupError

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _spellings(words):
    return st.tuples(st.sampled_from(words), st.sampled_from([str.lower, str.upper, str.title]),
                     st.sampled_from(["", " "])).map(lambda t: t[2] + t[1](t[0]) + t[2])


def _not_a_number(text):
    try:
        int(text)
    except ValueError:
        return text.strip().lower() not in TRUE + FALSE
    return False


@settings(max_examples=300, deadline=None)
@given(case=st.one_of(
    st.booleans().map(lambda b: (b, 1 if b else None)),
    st.none().map(lambda n: (n, None)),
    _spellings(TRUE).map(lambda t: (t, 1)),
    _spellings(FALSE).map(lambda t: (t, None)),
    st.integers(1, 1024).flatmap(lambda n: st.sampled_from([(n, n), (str(n), n), (f" {n} ", n)])),
    st.integers(-1000, -1).map(lambda n: (n, "error")),
    st.integers(1025, 10**6).map(lambda n: (str(n), "error")),
    st.text(max_size=6).filter(_not_a_number).map(lambda t: (t, "error"))))
def test_the_setting_is_off_one_thread_or_a_thread_count(case):
    """Each class of value, generated with its meaning: booleans and their words, thread counts as numbers and
    text, and everything else (negative, too many, not a number) an error naming the setting."""
    value, expected = case
    if expected == "error":
        with pytest.raises(ConfigError, match="deterministic_portable"):
            validate_portable(value)
    else:
        assert validate_portable(value) == expected


def test_the_setting_resolves_like_every_other_and_names_its_source():
    assert resolve(env={}).portable is None
    assert resolve(env={env_names.PORTABLE: "1"}).portable == 1
    assert resolve(hyp={"deterministic_portable": True}, env={env_names.PORTABLE: "0"}).portable == 1
    assert resolve(cli={"deterministic_portable": 4}, hyp={"deterministic_portable": False}, env={}).portable == 4
    settings_ = resolve(hyp={"deterministic_portable": 2}, env={})
    assert settings_.sources["deterministic_portable"] == "hyp" and settings_.to_dict()["portable"] == 2
    with pytest.raises(ConfigError, match=r"hyp.yaml: deterministic_portable: 'fast'"):
        resolve(hyp={"deterministic_portable": "fast"}, env={})
    with pytest.raises(ConfigError, match="YOLO_DET_PORTABLE"):
        resolve(env={env_names.PORTABLE: "-2"})


CAPS = st.dictionaries(st.sampled_from(machine.DISPATCH_VARS + portable.THREAD_VARS),
                       st.sampled_from(["AVX2", "AVX512_CORE", "SSE41", "avx512", "default", "7", "COMPATIBLE"]))


@settings(max_examples=200, deadline=None)
@given(caps=CAPS, request=st.sampled_from([None, "", "0", "off", "1", "true", "3"]))
def test_a_launcher_gives_the_pins_exactly_when_portable_is_asked_and_they_replace_any_cap(caps, request):
    base = dict(caps)
    if request is not None:
        base[env_names.PORTABLE] = request
    out = launch.child_env(base)
    threads = {None: None, "": None, "0": None, "off": None, "1": 1, "true": 1, "3": 3}[request]
    if threads is None:
        assert not set(out) & (set(portable.PINS) | set(portable.THREAD_VARS))
        return
    child = {**base, **out}
    assert all(child[k] == v for k, v in portable.PINS.items())
    assert all(child[k] == str(threads) for k in portable.THREAD_VARS) and child[env_names.PORTABLE] == str(threads)


PINNED = dict(portable.PINS)
GOOD_FLAGS = ["sse4_2", "avx", "avx2", "fma", "avx512f"]


@settings(max_examples=300, deadline=None)
@given(env=st.fixed_dictionaries({}, optional={k: st.sampled_from([v, v.lower(), "AVX512_CORE", ""])
                                               for k, v in PINNED.items()}),
       flags=st.sampled_from([GOOD_FLAGS, ["avx", "sse4_2"], ["avx2"], ["fma", "avx"]]),
       aten=st.sampled_from(["AVX2", "AVX512", "DEFAULT"]),
       mkl=st.sampled_from([None, portable.MKL_COMPATIBLE_STRICT, 0x10000 | 2, 1, 3]))
def test_the_check_finds_every_pin_not_in_force_and_nothing_else(env, flags, aten, mkl):
    record = portable.check(1, env=env, flags=flags, aten=aten, mkl=mkl)
    problems = " | ".join(record["problems"])
    cpu_ok = {"avx2", "fma"} <= set(flags)
    onednn_ok = env.get("ONEDNN_MAX_CPU_ISA") == "AVX2"
    mkl_ok = mkl == portable.MKL_COMPATIBLE_STRICT if mkl is not None else env.get("MKL_CBWR") == "COMPATIBLE,STRICT"
    assert (record["problems"] == []) == (cpu_ok and aten == "AVX2" and onednn_ok and mkl_ok)
    assert ("lacks" in problems) != cpu_ok
    assert ("ATen" in problems) != (aten == "AVX2")
    assert ("ONEDNN_MAX_CPU_ISA" in problems) != onednn_ok
    assert ("MKL" in problems) != mkl_ok
    assert record["threads"] == 1 and record["pins"] == PINNED


def test_mkl_reports_its_branch_in_this_process():
    """MKL's own answer where torch links it (Linux x86-64 wheels do): this process was started without MKL_CBWR."""
    branch = portable.mkl_branch()
    if branch is None:
        pytest.skip("this torch does not export MKL's mkl_cbwr_get")
    assert (branch == portable.MKL_COMPATIBLE_STRICT) == (os.environ.get("MKL_CBWR") == "COMPATIBLE,STRICT")
    assert portable.describe_mkl(portable.MKL_COMPATIBLE_STRICT) == "COMPATIBLE,STRICT"


@pytest.fixture
def unpinned(monkeypatch):
    """This process, unpinned (as pytest started it), asking for portable; its thread count put back after."""
    threads = torch.get_num_threads()
    monkeypatch.setenv(env_names.PORTABLE, "1")
    for var in portable.THREAD_VARS:
        monkeypatch.setenv(var, os.environ.get(var, str(threads)))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    yield
    torch.set_num_threads(threads)


def test_strict_refuses_where_a_pin_is_not_in_force_and_says_how_to_pin(unpinned):
    with pytest.raises(DeterminismSetupError) as info:
        yolo_det.configure("strict")
    message = str(info.value)
    assert "ONEDNN_MAX_CPU_ISA" in message and "yolo-det run --portable 1" in message
    assert "export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" in message


def test_warn_warns_records_the_pins_and_keeps_the_thread_count(unpinned, capsys):
    session = yolo_det.configure("warn")
    try:
        assert "portable cannot guarantee" in capsys.readouterr().err
        record = session.to_dict()["portable"]
        assert record["threads"] == 1 and record["problems"]
        assert any("portable cannot guarantee" in n for n in session.report.notes)
        torch.set_num_threads(2)  # what Ultralytics' select_device does on CPU
        with session.backward():
            assert torch.get_num_threads() == 1
        assert any("set it back to 1" in n for n in session.report.notes)
    finally:
        session.finish(restore_flags=True, echo=lambda _: None)


def test_run_and_env_exports_give_the_pins(tmp_path):
    exports = cli("env", "--exports", "--portable", "2").stdout
    assert "export ONEDNN_MAX_CPU_ISA=AVX2" in exports and "export OMP_NUM_THREADS=2" in exports
    assert "export MKL_CBWR=COMPATIBLE,STRICT" in exports
    assert cli("run", "--portable", "0", "--", "true").returncode == 2
    show = "import os; print(os.environ['ONEDNN_MAX_CPU_ISA'], os.environ['OMP_NUM_THREADS'], os.environ['YOLO_DET_PORTABLE'])"
    env = script_env({k: v for k, v in os.environ.items() if k != env_names.PORTABLE}, ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    done = subprocess.run([sys.executable, "-m", "yolo_det", "run", "--portable", "--", sys.executable, "-c", show],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["AVX2", "1", "1"]
