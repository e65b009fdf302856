"""The cluster engines the study tests drive: one SLURM node (scripts/slurm_local.sh), one machine for Ray."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _sinfo_idle() -> str:
    """Why SLURM cannot run the tests here ('' where it can)."""
    if shutil.which("sinfo") is None:
        return "no SLURM here (sinfo not found): start a one-node cluster with scripts/slurm_local.sh (root)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo does not answer ({exc}): start SLURM with scripts/slurm_local.sh"
    if out.returncode != 0 or not any(s.strip().rstrip("*") in ("idle", "mix", "alloc") for s in out.stdout.split()):
        return f"SLURM has no usable node (sinfo: {(out.stdout + out.stderr).strip()!r}): run scripts/slurm_local.sh"
    return ""


_WHY_NOT = _sinfo_idle()  # once: sinfo waits ~10 s for a controller that is configured but down
needs_slurm = pytest.mark.skipif(bool(_WHY_NOT), reason=_WHY_NOT or "SLURM")
#: under pytest-xdist the files that drive SLURM or Ray share one worker: one SLURM node, one machine for Ray
CLUSTER = pytest.mark.xdist_group("cluster")
