"""``portable``: a strict run's bits independent of the x86-64 CPU it runs on (its model, vendor, instruction set
and core count), by pinning what the CPU libraries dispatch on to one choice every AVX2 machine makes the same way.

Measured on torch 2.14.1 (AMD EPYC, AVX-512; docs/portable.md): the bits of a strict step change with

- ``ONEDNN_MAX_CPU_ISA``: oneDNN's convolutions run other JIT kernels at AVX-512 than at AVX2;
- ``ATEN_CPU_CAPABILITY``: ATen's vectorised kernels (reductions of the loss, BatchNorm) sum 16 lanes, not 8;
- MKL's code branch: ``MKL_CBWR=AVX2`` is honoured on Intel CPUs only (on AMD MKL reads it as ``AUTO``,
  ``MKL_VERBOSE`` says ``CNR:AUTO,STRICT``); ``COMPATIBLE`` is the one branch MKL runs alike on every x86-64 CPU;
- the intra-op thread count: torch computes a 1x1 convolution of a batch under 16 with MKL's GEMM on one thread and
  with oneDNN on more, and oneDNN splits its backward sums by thread.

So portable pins :data:`PINS` in the environment *before* torch loads (``yolo-det run`` and ``verify`` put them in
the launched command's environment, :func:`launch_env`), sets the intra-op thread count to a fixed number recorded
in the run (1 unless the setting names another), and :func:`check` checks at ``configure()`` what each library
actually runs with. A pin that is not in force is a problem: strict refuses, warn warns.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any, Dict, List, Mapping, Optional

from . import env_names
from .mode import validate_portable

#: The dispatch pins, each read once by its library when it first computes: they must be in the environment
#: before the process imports torch (ATen's is also checked after, by ``torch.backends.cpu.get_cpu_capability()``).
PINS: Dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "COMPATIBLE,STRICT",
}
#: The variables that carry the thread count to the process and its children (OpenMP and MKL read them at start).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: The CPU features the pinned kernels need (ATen's AVX2 kernels use FMA too).
REQUIRED_FEATURES = ("avx2", "fma")
#: MKL's ``mkl_cbwr_get(MKL_CBWR_ALL)`` for ``COMPATIBLE,STRICT`` (MKL_CBWR_COMPATIBLE 3 | MKL_CBWR_STRICT 0x10000).
MKL_COMPATIBLE_STRICT = 0x10000 | 3
_MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}


def launch_env(threads: int) -> Dict[str, str]:
    """The variables a launcher exports for a portable run with ``threads`` intra-op threads: the pins, the thread
    count and ``YOLO_DET_PORTABLE`` itself. They replace any cap the user's environment had."""
    out = dict(PINS)
    out.update({var: str(threads) for var in THREAD_VARS})
    out[env_names.PORTABLE] = str(threads)
    return out


def requested(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The thread count ``YOLO_DET_PORTABLE`` asks for, or None (unset or off); a bad value raises ConfigError."""
    env = os.environ if env is None else env
    raw = env.get(env_names.PORTABLE)
    if raw is None or raw == "":
        return None
    return validate_portable(raw, f"environment: {env_names.PORTABLE}=")


def exports_hint(threads: int) -> str:
    """How to pin before start-up, for a message."""
    exports = " ".join(f"{k}={v}" for k, v in launch_env(threads).items() if k != env_names.PORTABLE)
    return (f"start training with `yolo-det run --portable {threads} -- python train.py ...`, or export "
            f"{exports} before Python starts")


def mkl_branch() -> Optional[int]:
    """MKL's conditional-numerical-reproducibility setting as MKL itself reports it (``mkl_cbwr_get``), or None
    where this torch does not export it (MKL not linked, another platform). Reading it fixes MKL's branch."""
    try:
        import torch

        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError, ImportError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    return int(get(-1))  # MKL_CBWR_ALL


def describe_mkl(value: Optional[int]) -> Optional[str]:
    """``COMPATIBLE,STRICT`` for MKL's numeric setting (None stays None)."""
    if value is None:
        return None
    name = _MKL_BRANCHES.get(value & 0xFFFF, str(value & 0xFFFF))
    return name + (",STRICT" if value & 0x10000 else "")


def _cpu_flags() -> List[str]:
    """The CPU features the libraries dispatch on (``machine.FEATURES`` this CPU has)."""
    from .machine import cpu_facts

    return list(cpu_facts()["features"])


def check(threads: int, env: Optional[Mapping[str, str]] = None, flags: Optional[List[str]] = None,
          aten: Optional[str] = None, mkl: Any = "read") -> Dict[str, Any]:
    """Check every pin (the thread count set first by :func:`pin_threads`) and return the record ``determinism.json``
    and the fingerprint header keep: ``{"threads", "pins", "in_force", "problems"}``.

    ``problems`` is empty when every pin is in force; each entry says which pin is not and why. ``env``, ``flags``,
    ``aten`` and ``mkl`` stand in for this process's environment, CPU flags, ATen capability and MKL setting (tests).
    """
    env = os.environ if env is None else env
    problems: List[str] = []
    arch = platform.machine().lower() if flags is None else "x86_64"
    flags = _cpu_flags() if flags is None else flags
    missing = [f for f in REQUIRED_FEATURES if f not in flags]
    if arch not in ("x86_64", "amd64"):
        problems.append(f"this CPU is {arch}, not x86-64: portable pins x86-64 CPUs with AVX2")
    elif missing:
        problems.append(f"this CPU lacks {', '.join(m.upper() for m in missing)}: portable pins every CPU to the "
                        "AVX2 kernels, which it cannot run")
    if aten is None:
        import torch

        aten = torch.backends.cpu.get_cpu_capability()
    in_force: Dict[str, Any] = {"aten_capability": aten}
    if str(aten).upper() != "AVX2":
        problems.append(f"ATen's kernels run at {aten}, not AVX2: ATEN_CPU_CAPABILITY=avx2 was not in the environment "
                        "before torch first dispatched a kernel")
    onednn = env.get("ONEDNN_MAX_CPU_ISA")
    in_force["onednn_max_cpu_isa"] = onednn
    if onednn != PINS["ONEDNN_MAX_CPU_ISA"]:
        problems.append(f"ONEDNN_MAX_CPU_ISA is {onednn or 'unset'}, not AVX2, in this process's environment: oneDNN "
                        "reads it once, before its first convolution, so it must be set before start-up")
    branch = mkl_branch() if mkl == "read" else mkl
    in_force["mkl_cbwr"] = describe_mkl(branch) if branch is not None else env.get("MKL_CBWR")
    if branch is not None and branch != MKL_COMPATIBLE_STRICT:
        problems.append(f"MKL runs with CNR {describe_mkl(branch)}, not COMPATIBLE,STRICT: MKL_CBWR was not in the "
                        "environment before MKL's first call")
    elif branch is None and env.get("MKL_CBWR") != PINS["MKL_CBWR"]:
        problems.append(f"MKL_CBWR is {env.get('MKL_CBWR') or 'unset'}, not {PINS['MKL_CBWR']}, in this process's "
                        "environment")
    return {"threads": threads, "pins": dict(PINS), "in_force": in_force, "problems": problems}


def pin_threads(threads: int) -> Optional[int]:
    """Set the intra-op thread count to ``threads`` (and the variables children read); the count it was, where it
    differed (a release's set-up sets its own: Ultralytics' ``select_device`` on CPU), else None."""
    import torch

    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    before = torch.get_num_threads()
    if before == threads:
        return None
    torch.set_num_threads(threads)
    return before


def message(problems: List[str], threads: int) -> str:
    """One sentence for a refusal or warning: every pin not in force, and what to do."""
    return (f"portable cannot guarantee CPU-independent bits: {'; '.join(problems)}. To pin before the libraries "
            f"load, {exports_hint(threads)}")


__all__ = ["MKL_COMPATIBLE_STRICT", "PINS", "REQUIRED_FEATURES", "THREAD_VARS", "check", "describe_mkl",
           "exports_hint", "launch_env", "message", "mkl_branch", "pin_threads", "requested"]
