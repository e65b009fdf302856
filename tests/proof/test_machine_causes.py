"""The machine as a cause: a run's header records the CPU, the instruction set each library dispatches to and the
caps in force, and ``diff`` names "different CPU instruction sets" where two runs differ in it, never "unknown"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from support.cli import cli
from support.verify import script_env, write_script
from yolo_det.core import machine
from yolo_det.proof.causes import header_causes

CAP_VALUES = ("SSE41", "SSE4_2", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512",
              "AVX10_1_512_AMX", "ALL", "DEFAULT", "", None)


def _oracle_tier(features):
    """The tier from a table of each tier's required flags, checked from the top (independent of cpu_tier)."""
    required = [("AMX", {"amx_tile"}), ("AVX-512", {"avx512f", "avx512bw", "avx512dq", "avx512vl"}),
                ("AVX2", {"avx2"}), ("AVX", {"avx"})]
    for tier, flags in required:
        if flags <= set(features):
            return tier
    return "SSE4" if set(features) & {"sse4_1", "sse4_2"} else "baseline"


@settings(max_examples=300, deadline=None)
@given(features=st.sets(st.sampled_from(machine.FEATURES)),
       onednn=st.sampled_from(CAP_VALUES), mkl=st.sampled_from(CAP_VALUES))
def test_each_library_runs_at_the_cpus_tier_lowered_by_its_cap(features, onednn, mkl):
    caps = {k: v for k, v in (("ONEDNN_MAX_CPU_ISA", onednn), ("MKL_ENABLE_INSTRUCTIONS", mkl)) if v}
    tiers = machine.dispatch(sorted(features), caps)
    best = _oracle_tier(features)
    assert machine.cpu_tier(sorted(features)) == best
    for lib, cap in (("onednn", onednn), ("mkl", mkl)):
        limit = machine.cap_tier(cap)
        expected = best if limit is None else min(best, limit, key=machine.TIERS.index)
        assert tiers[lib] == expected
        assert machine.TIERS.index(tiers[lib]) <= machine.TIERS.index(best)  # a cap never raises a tier


def _header(caps=None, model="AMD EPYC 9R14", features=("avx", "avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl"),
            aten="AVX512"):
    caps = dict(caps or {})
    cpu = {"vendor": "AuthenticAMD", "model": model, "features": list(features), "caps": caps,
           "aten_capability": aten, "dispatch": machine.dispatch(features, caps, aten), "libraries": {}}
    return {"seed": 0, "mode": "strict", "torch": "2.14.1", "threads": 2, "command": ["t.py"],
            "machine": {"cpu": cpu, "gpus": []}}


@settings(max_examples=200, deadline=None)
@given(cap_a=st.sampled_from(CAP_VALUES), cap_b=st.sampled_from(CAP_VALUES), aten_b=st.sampled_from(["AVX512", "AVX2"]))
def test_a_cause_names_the_instruction_sets_exactly_when_a_library_ran_at_another(cap_a, cap_b, aten_b):
    a = _header({"ONEDNN_MAX_CPU_ISA": cap_a} if cap_a else {})
    b = _header({"ONEDNN_MAX_CPU_ISA": cap_b} if cap_b else {}, aten=aten_b)
    causes = {c.what: c.message for c in header_causes(a, b)}
    da, db = a["machine"]["cpu"]["dispatch"], b["machine"]["cpu"]["dispatch"]
    assert ("cpu_isa" in causes) == (da != db)
    if da != db:
        changed = [lib for lib in sorted(da) if da[lib] != db[lib]]
        assert f"({da[changed[0]]} vs {db[changed[0]]}:" in causes["cpu_isa"]
    elif a["machine"]["cpu"]["caps"] != b["machine"]["cpu"]["caps"]:
        assert "cpu_caps" in causes  # a cap that changed nothing here is still said, as a setting


def test_another_cpu_model_and_another_gpu_model_are_named():
    a, b = _header(), _header(model="Intel(R) Xeon(R) Platinum 8488C")
    assert [c.message for c in header_causes(a, b)] == [
        "runs used different CPU models (AMD EPYC 9R14 vs Intel(R) Xeon(R) Platinum 8488C)"]
    ga = {**_header(), "machine": {**_header()["machine"], "gpus": [{"name": "NVIDIA H100", "capability": "9.0"}]}}
    gb = {**_header(), "machine": {**_header()["machine"], "gpus": [{"name": "NVIDIA A100", "capability": "8.0"}]}}
    assert [c.what for c in header_causes(ga, gb)] == ["gpu_model"]
    tf32 = {**_header(), "machine": {**_header()["machine"], "gpus": [
        {"name": "NVIDIA H100", "capability": "9.0", "matmul_tf32": True}]}}
    assert "matmul_tf32 False vs True" in header_causes(
        {**ga, "machine": {**ga["machine"], "gpus": [{**ga["machine"]["gpus"][0], "matmul_tf32": False}]}},
        tf32)[0].message


def test_the_header_records_this_machine():
    facts = machine.machine_facts()
    cpu = facts["cpu"]
    assert cpu["dispatch"]["onednn"] in machine.TIERS and cpu["model"]
    assert machine.TIERS.index(cpu["dispatch"]["mkl"]) <= machine.TIERS.index(machine.cpu_tier(cpu["features"]))


@pytest.mark.slow
def test_diff_of_a_default_and_a_capped_run_names_the_instruction_set(tmp_path, train_env):
    """Two strict runs of one script, the second with the CPU libraries capped one tier below this CPU's best:
    the headers say so, and where the runs part, ``diff`` names the instruction sets as the likely cause."""
    best = machine.cpu_facts()["dispatch"]["onednn"]
    if machine.TIERS.index(best) < machine.TIERS.index("AVX2"):
        pytest.skip(f"this CPU's best tier is {best}: no lower tier to cap to")
    cap = ({"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
           if machine.TIERS.index(best) >= machine.TIERS.index("AVX-512") else
           {"ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ATEN_CPU_CAPABILITY": "default"})
    script = write_script(tmp_path)
    logs = []
    for name, extra in (("a", {}), ("b", cap)):
        log = tmp_path / f"{name}.jsonl"
        base = {k: v for k, v in train_env.items() if k == "OPENBLAS_CORETYPE" or k not in machine.DISPATCH_VARS}
        env = script_env(base, YOLO_DET_FINGERPRINT=str(log), YOLO_DET_DETERMINISTIC="strict", **extra)
        subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, check=True, capture_output=True)
        logs.append(log)
    result = cli("diff", str(logs[0]), str(logs[1]), "--json", cwd=tmp_path)
    verdict = json.loads(result.stdout)
    headers = [json.loads(p.read_text().splitlines()[0]) for p in logs]
    dispatch = [h["machine"]["cpu"]["dispatch"] for h in headers]
    assert dispatch[0] != dispatch[1]
    whats = [c["what"] for c in verdict["causes"]]
    assert "cpu_isa" in whats and "unknown" not in whats
    if verdict["verdict"] == "differs":
        assert verdict["causes"][0]["what"] == "cpu_isa"
        assert result.returncode == 1
        assert "different CPU instruction sets" in cli("diff", str(logs[0]), str(logs[1]), cwd=tmp_path).stdout
