"""scripts/bench.py, the benchmark CI runs as a smoke test before the suite: it starts in a fresh
interpreter and writes its JSON (the machine manifest every part's figures are read against)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_bench_writes_machine_and_a_part(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--only", "digest",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["machine"]["torch"] == torch.__version__
    assert results["quick"] is True and set(results) == {"machine", "quick", "digest"}
    assert results["digest"]["digest"]["gb_per_s"] > 0
