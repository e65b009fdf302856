"""Commands that do not train start without torch (issue 16, item 15); the public API stays whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.patch import make_repo

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import sys
from yolo_det.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --version
    code = exc.code
heavy = sorted(m for m in ("torch", "numpy", "yolo_det.session") if m in sys.modules)
print("heavy:", ",".join(heavy))
sys.exit(code)
"""


def _probe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_commands_that_do_not_train_never_import_torch(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    from support.builders import every_field_log as write_log

    a, b = write_log(tmp_path / "a.jsonl"), write_log(tmp_path / "b.jsonl")
    for args in (["--version"], ["apply-patch", str(repo)], ["revert-patch", str(repo)], ["diff", str(a), str(b)],
                 ["diff", "--json", str(a), str(tmp_path / "missing.jsonl")], ["env", "--exports", "--seed", "1"],
                 ["run", "--", sys.executable, "-c", "pass"]):
        proc = _probe(*args, cwd=tmp_path)
        assert proc.returncode in (0, 2), (args, proc.stderr)
        assert "heavy: \n" in proc.stdout, (args, proc.stdout)


def test_every_public_name_still_resolves_and_old_paths_work():
    code = ("import sys, yolo_det; assert 'torch' not in sys.modules; "
            "missing = [n for n in yolo_det.__all__ if getattr(yolo_det, n, None) is None]; "
            "assert not missing, missing; "
            "from yolo_det import configure, seed_worker, ConfigError; "
            "import yolo_det.fingerprint, yolo_det.patcher; from yolo_det.mode import resolve; "
            "assert yolo_det.patcher.apply_patch is yolo_det.patch.apply_patch; "
            "assert set(yolo_det.__all__) <= set(dir(yolo_det)); "
            "import yolo_det as y2; assert callable(y2.core.environment.manifest); "
            "import pytest\n"
            "try:\n    yolo_det.nope\nexcept AttributeError as e:\n    assert 'nope' in str(e)\n"
            "else:\n    raise SystemExit('no AttributeError')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
