"""scripts/gpu_check.py on a CPU (``--device cpu --smoke``): the plumbing of the checks a GPU
machine runs once, so that run is not spent on a bug the CPU could have shown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
# 5_yolov5s_strict_twice needs the patched copy from scripts/gpu_bundle.sh; verify on the
# patched PyPI yolov5 is tested in test_verify_yolov5.py.
CHECKS = ("1_manifest", "2_native_strict_failure", "3_strict_replacements_identical",
          "4_off_mode_atomics_detected", "6_throughput", "7_op_capture", "8_opaque_probe")


@pytest.mark.skipif(torch.cuda.is_available(), reason="refuses only where there is no GPU")
def test_refuses_to_run_without_a_gpu(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert "--device cpu --smoke" in out.stderr
    assert not (tmp_path / "gpu_check.json").exists()


@pytest.mark.slow
def test_smoke_run_writes_every_check(tmp_path):
    only = [arg for name in CHECKS for arg in ("--only", name)]
    out = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--out", str(tmp_path), *only],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.log").read_text().count("==") >= len(CHECKS)
    for name in CHECKS[:4]:
        assert results[name]["ok"], (name, results[name])
    assert results["1_manifest"]["torch"] == torch.__version__
    failure = results["2_native_strict_failure"]
    assert failure["raised"] and failure["names_op"] and failure["names_module"]
    assert results["3_strict_replacements_identical"]["identical"]
    assert all(r["identical"] for r in results["3_strict_replacements_identical"]["replacement_backward_repeat"].values())
    throughput = results["6_throughput"]
    # The <= 1.5 ratios are a GPU target; on a loaded CPU only the numbers' presence is checked.
    assert throughput["replacement_ratios"] and all(r["ratio"] > 0 for r in throughput["replacement_ratios"].values())
    assert "error" not in throughput["yolov5s"], throughput["yolov5s"]
    assert throughput["yolov5s"]["throughput_ratio_strict_vs_off"] > 0
    assert "5_yolov5s_strict_twice" not in results
    capture = results["7_op_capture"]
    assert capture["ok"] and capture["digests_equal_cpu"], capture
    digest = capture["digest"]
    assert digest["algorithm"] == "bytes-lin64-v2" and digest["equal_cpu"] and digest["stream_equal_cpu"], digest
    assert capture["strict"]["identical"] and capture["strict"]["ops"] > 1000
    assert capture["capture_ratio"] > 1
    probe = results["8_opaque_probe"]
    assert probe["ok"] and probe["atomics"]["proves_nothing"], probe  # CPU: sums in order, proves nothing
    assert probe["stand_ins"] and all(r["identical"] for r in probe["stand_ins"].values())
