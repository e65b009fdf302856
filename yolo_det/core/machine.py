"""The machine a run computed on, as far as its bits depend on it: the CPU, the instruction set each library
dispatches to, the caps in force, and on CUDA the GPU model and its math settings.

Two strict runs of one command on one machine are bit-identical; on a CPU with another instruction set (AVX-512
vs AVX2), under a dispatch cap (``ONEDNN_MAX_CPU_ISA=AVX2``) or on another GPU model they are not: oneDNN, MKL and
ATen pick other kernels, which sum in another order. :func:`machine_facts` records what decides that choice;
:func:`machine_differences` names what differs between two records, most specific first, so a verdict can say
"different CPU instruction sets (AVX-512 vs AVX2)" instead of "unknown".
"""

from __future__ import annotations

import os
import platform
import re
from functools import lru_cache
from typing import Any, Dict, List, Mapping, Optional, Tuple

#: Environment variables that cap or fix a CPU library's dispatch (oneDNN, MKL, OpenBLAS, ATen).
DISPATCH_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE",
                 "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY")
#: Instruction-set tiers, lowest first: the coarse level the CPU libraries dispatch on.
TIERS = ("baseline", "SSE4", "AVX", "AVX2", "AVX-512", "AMX")
#: The CPU feature flags (``/proc/cpuinfo`` names) the libraries dispatch on, recorded as the CPU's features.
FEATURES = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512cd", "avx512bw",
            "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512vbmi", "amx_tile",
            "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2")


def _cpuinfo() -> Dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return {}
    out: Dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def cpu_tier(features: Any) -> str:
    """The highest instruction-set tier a CPU with these feature flags offers."""
    have = set(features or ())
    if "amx_tile" in have:
        return "AMX"
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= have:
        return "AVX-512"
    if "avx2" in have:
        return "AVX2"
    if "avx" in have:
        return "AVX"
    if have & {"sse4_1", "sse4_2"}:
        return "SSE4"
    return "baseline"


def cap_tier(value: Optional[str]) -> Optional[str]:
    """The tier a dispatch cap's value allows at most (``AVX2_VNNI`` -> AVX2; ``ALL``/unset -> None, no cap)."""
    if not value:
        return None
    v = value.strip().upper().replace("-", "_")
    if v in ("ALL", "DEFAULT", ""):
        return None
    if "AMX" in v:
        return "AMX"
    if v.startswith(("AVX512", "AVX10")) or v == "AVX512":
        return "AVX-512"
    if v.startswith("AVX2"):
        return "AVX2"
    if v.startswith("AVX"):
        return "AVX"
    if v.startswith("SSE4"):
        return "SSE4"
    if v.startswith(("SSE", "COMPATIBLE")):
        return "baseline"
    return None


def _lower(a: str, b: Optional[str]) -> str:
    return a if b is None or TIERS.index(a) <= TIERS.index(b) else b


def _aten_tier(capability: Optional[str]) -> Optional[str]:
    """ATen's own vectorised kernels: ``torch.backends.cpu.get_cpu_capability()`` as a tier."""
    if not capability:
        return None
    c = capability.upper()
    if c.startswith("AVX512"):
        return "AVX-512"
    if c.startswith("AVX2"):
        return "AVX2"
    if c in ("DEFAULT", "NO AVX"):
        return "baseline"
    return None


def dispatch(features: Any, caps: Mapping[str, str], aten_capability: Optional[str] = None) -> Dict[str, str]:
    """The tier each CPU library runs at: the CPU's best, lowered by the caps in force."""
    best = cpu_tier(features)
    onednn = _lower(best, cap_tier(caps.get("ONEDNN_MAX_CPU_ISA") or caps.get("DNNL_MAX_CPU_ISA")))
    mkl = _lower(best, cap_tier(caps.get("MKL_ENABLE_INSTRUCTIONS")))
    mkl = _lower(mkl, cap_tier((caps.get("MKL_CBWR") or "").split(",")[0]))  # CNR's code branch (COMPATIBLE: SSE2)
    out = {"onednn": onednn, "mkl": mkl}
    aten = _aten_tier(aten_capability)
    out["aten"] = _lower(best, cap_tier(caps.get("ATEN_CPU_CAPABILITY"))) if aten is None else aten
    return out


@lru_cache(maxsize=1)
def _library_versions() -> Dict[str, str]:
    """oneDNN and MKL versions as the torch build reports them (empty without torch)."""
    try:
        import torch

        text = torch.__config__.show()
    except Exception:  # noqa: BLE001 - a record never fails for want of a version
        return {}
    out = {}
    m = re.search(r"MKL-DNN v([\w.]+)", text)
    if m:
        out["onednn"] = m.group(1)
    m = re.search(r"Math Kernel Library Version ([\w.]+)", text)
    if m:
        out["mkl"] = m.group(1)
    return out


def cpu_facts() -> Dict[str, Any]:
    """The CPU: vendor, model, the features the libraries dispatch on, the caps in force, the tier each library
    runs at, the versions of the libraries torch computes with (oneDNN, MKL) and the intra-op thread count.
    numpy's OpenBLAS is not recorded: which copy is loaded when the log opens depends on import order."""
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    features = [f for f in FEATURES if f in flags]
    caps = {k: os.environ[k] for k in DISPATCH_VARS if os.environ.get(k)}
    capability = threads = None
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
        threads = torch.get_num_threads()
    except Exception:  # noqa: BLE001 - torch missing or too old for get_cpu_capability
        pass
    facts: Dict[str, Any] = {
        "vendor": info.get("vendor_id") or platform.machine(),
        "model": info.get("model name") or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "features": features,
        "caps": caps,
        "aten_capability": capability,
        "dispatch": dispatch(features, caps, capability),
        "libraries": _library_versions(),
        "threads": threads,
    }
    return facts


def gpu_facts() -> List[Dict[str, Any]]:
    """Each visible GPU's model and compute capability, with the math settings that choose its kernels."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    settings = {"matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"name": p.name, "capability": f"{p.major}.{p.minor}", **settings})
    return out


def machine_facts() -> Dict[str, Any]:
    """What the fingerprint header records of the machine: ``{"cpu": ..., "gpus": [...]}``."""
    return {"cpu": cpu_facts(), "gpus": gpu_facts()}


def _caps_change(a: Mapping[str, str], b: Mapping[str, str]) -> str:
    """``ONEDNN_MAX_CPU_ISA unset vs AVX2, ...``: the dispatch variables whose value differs."""
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return ", ".join(f"{k} {a.get(k, 'unset')} vs {b.get(k, 'unset')}" for k in keys)


def machine_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """``(what, sentence)`` for each way two machine records differ in what decides a kernel's result, most
    specific first: the instruction set a library ran at, the CPU model, the GPU model, its TF32 settings."""
    out: List[Tuple[str, str]] = []
    ca, cb = a.get("cpu"), b.get("cpu")
    if isinstance(ca, Mapping) and isinstance(cb, Mapping):
        da, db = ca.get("dispatch"), cb.get("dispatch")
        if isinstance(da, Mapping) and isinstance(db, Mapping) and da != db:
            libs = [lib for lib in sorted(set(da) | set(db)) if da.get(lib) != db.get(lib)]
            first = libs[0]
            per_lib = ", ".join(f"{lib} {da.get(lib)} vs {db.get(lib)}" for lib in libs)
            caps_a, caps_b = ca.get("caps") or {}, cb.get("caps") or {}
            how = f"; {_caps_change(caps_a, caps_b)}" if caps_a != caps_b else ""
            out.append(("cpu_isa", f"different CPU instruction sets ({da.get(first)} vs {db.get(first)}: "
                                   f"{per_lib}{how})"))
        elif (ca.get("caps") or {}) != (cb.get("caps") or {}):
            out.append(("cpu_caps", f"different CPU dispatch settings ({_caps_change(ca.get('caps') or {}, cb.get('caps') or {})})"))
        if (ca.get("vendor"), ca.get("model")) != (cb.get("vendor"), cb.get("model")):
            out.append(("cpu_model", f"different CPU models ({ca.get('model')} vs {cb.get('model')})"))
        if ca.get("libraries") != cb.get("libraries") and ca.get("libraries") and cb.get("libraries"):
            la, lb = ca["libraries"], cb["libraries"]
            changed = [k for k in sorted(set(la) | set(lb)) if la.get(k) != lb.get(k)]
            out.append(("cpu_libraries", "different CPU math libraries (" + ", ".join(
                f"{k} {la.get(k)} vs {lb.get(k)}" for k in changed) + ")"))
    ga, gb = a.get("gpus"), b.get("gpus")
    if isinstance(ga, list) and isinstance(gb, list) and ga != gb:
        models_a = [(g.get("name"), g.get("capability")) for g in ga if isinstance(g, Mapping)]
        models_b = [(g.get("name"), g.get("capability")) for g in gb if isinstance(g, Mapping)]
        if models_a != models_b:
            def names(ms: List[Tuple[Any, Any]]) -> str:
                return ", ".join(f"{n} (sm {c})" for n, c in ms) or "none"

            out.append(("gpu_model", f"different GPU models ({names(models_a)} vs {names(models_b)})"))
        else:
            keys = ("matmul_tf32", "cudnn_tf32", "float32_matmul_precision")
            sa = {k: ga[0].get(k) for k in keys} if ga else {}
            sb = {k: gb[0].get(k) for k in keys} if gb else {}
            if sa != sb:
                out.append(("gpu_math", "different GPU math settings (" + ", ".join(
                    f"{k} {sa.get(k)} vs {sb.get(k)}" for k in keys if sa.get(k) != sb.get(k)) + ")"))
    return out


__all__ = ["DISPATCH_VARS", "FEATURES", "TIERS", "cap_tier", "cpu_facts", "cpu_tier", "dispatch", "gpu_facts",
           "machine_differences", "machine_facts"]
