"""Regenerate patches/*.diff: the unified diffs `yolo-det apply-patch` produces for the reference targets.

    python scripts/regen_patches.py

patches/yolov5-pypi-<version>.diff is the installed PyPI yolov5 package (train.py, classify/train.py,
segment/train.py, the evaluation scripts); patches/fixtures/<release>.diff are the release-shape fixtures
under tests/fixtures, eval-<release>.diff those under tests/fixtures/eval.
tests/patch/test_codemod.py regenerates them in memory and fails when a committed diff is out of date.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support.patch import EVAL_SCRIPTS, FIXTURE_SCRIPTS, PATCHES, make_eval_repo, make_repo  # noqa: E402
from yolo_det.patch import apply_patch  # noqa: E402


def eval_diff(result, name: str) -> str:
    """The part of ``result``'s diff that patches the evaluation scripts of fixture ``name``."""
    return "".join(f.diff() for f in result.files if f.relpath in EVAL_SCRIPTS[name])


def main() -> int:
    import yolov5

    with tempfile.TemporaryDirectory(prefix="yolo-det-patches-") as tmp:
        tmp = Path(tmp)
        copy = tmp / "yolov5"
        shutil.copytree(Path(yolov5.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        target = PATCHES / f"yolov5-pypi-{yolov5.__version__}.diff"
        target.write_text(apply_patch(copy, dry_run=True).diff)
        print(f"wrote {target.relative_to(ROOT)}")
        (PATCHES / "fixtures").mkdir(parents=True, exist_ok=True)
        for name in sorted(FIXTURE_SCRIPTS):
            target = PATCHES / "fixtures" / f"{name}.diff"
            target.write_text(apply_patch(make_repo(tmp, name), dry_run=True).diff)
            print(f"wrote {target.relative_to(ROOT)}")
        for name in sorted(EVAL_SCRIPTS):  # evaluation scripts: only their part of the diff
            target = PATCHES / "fixtures" / f"eval-{name}.diff"
            target.write_text(eval_diff(apply_patch(make_eval_repo(tmp / "eval", name), dry_run=True), name))
            print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
