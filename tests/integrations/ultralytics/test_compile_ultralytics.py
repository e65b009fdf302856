"""Ultralytics ``compile=True`` under strict, end to end (CPU, Inductor's C++ back end).

A tiny detection model (five strided convolutions and a Detect head, 64 px, 10 images in batches of 4, so
Ultralytics' ``drop_last`` for compiled runs takes effect) trained for 2 epochs: uninterrupted, and stopped after
epoch 1 and resumed (bit-identical: compiled training under strict is deterministic, and the recompilation
after resume gives the same kernels); an eager strict run of the same settings is named by ``diff`` with compile
as the first cause, the compile mode and the loader's ``drop_last``.

Cold compilation of even this model took 2-4 minutes on the 2-core CI machines (each generated kernel is a g++
build), so the file runs only with ``YOLO_DET_COMPILE_E2E=1`` (docs/testing.md); ``tests/strict/test_compile.py``
covers the logic on a smaller model in the default suite.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("ultralytics")

from yolo_det.proof.resume_at import verify_resume  # noqa: E402
from yolo_det.synthetic import make_dataset  # noqa: E402
from yolo_det.ultralytics import DeterministicTrainer  # noqa: E402

from support.cli import cli  # noqa: E402
from support.verify import script_env  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("YOLO_DET_COMPILE_E2E"),
                       reason="compiles an Ultralytics model (minutes on 2 cores): set YOLO_DET_COMPILE_E2E=1"),
]

TINY = """nc: 2
backbone:
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
head:
  - [[2, 3, 4], 1, Detect, [nc]]
"""


def _args(data: Path, model: Path, project: Path, name: str, compile_value) -> dict:
    # nbs=4 with batch=4: an optimizer step every batch, so every epoch ends on a step
    return dict(model=str(model), data=str(data), epochs=2, imgsz=64, batch=4, nbs=4, workers=0, plots=False,
                val=False, amp=False, device="cpu", project=str(project), name=name, exist_ok=True, seed=0,
                deterministic="strict", compile=compile_value)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, train_env):
    """A compiled strict run with a resumed copy (verify_resume), and an eager strict run."""
    root = tmp_path_factory.mktemp("compile_e2e")
    data = make_dataset(root / "data", n_train=10, n_val=4, imgsz=64)
    model = root / "tiny.yaml"
    model.write_text(TINY)
    pairs = [f"{k}={v}" for k, v in _args(data, model, root / "runs", "c{run}", True).items()]
    cmd = [sys.executable, "-m", "yolo_det", "ultralytics", "train", *pairs]
    resumed = verify_resume(cmd, 1, runs=2, workdir=root / "w", cwd=root, env=script_env(train_env))
    eager = _args(data, model, root / "runs", "eager", False)
    previous = dict(os.environ)
    os.environ.update(train_env)
    try:
        DeterministicTrainer(overrides=eager).train()
    finally:
        os.environ.clear()
        os.environ.update(previous)
    return {"root": root, "resumed": resumed, "compiled": root / "runs" / "c1", "eager": root / "runs" / "eager"}


def test_a_resumed_compiled_strict_run_is_bit_identical(runs):
    exact = runs["resumed"].resumed[0]
    assert exact.comparison.identical, "\n".join(exact.comparison.describe())
    assert exact.checkpoints is None
    report = json.loads((runs["compiled"] / "determinism.json").read_text())
    section = report["compile"]
    assert section["mode"] == "default" and section["settings"]["deterministic"] is True
    assert section["settings"]["fallback_random"] is True and section["ops"] == []
    assert report["ultralytics"]["train_loader"]["drop_last"] is True
    assert report["violations"]["ops"] == []


def test_compiled_vs_eager_is_named_compile_first(runs):
    result = cli("diff", str(runs["compiled"]), str(runs["eager"]))
    causes = [line for line in result.stdout.splitlines() if "compiled" in line or "cause" in line.lower()]
    text = result.stdout
    assert "run A was compiled (torch.compile, mode 'default')" in text, text
    assert "drop_last=True in A, False in B" in text
    assert text.index("run A was compiled") < min((text.index(w) for w in ("settings", "argument") if w in text),
                                                  default=len(text)), causes
