"""Helpers for the apply-patch tests: fixture repositories, running patched scripts, reading results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List

import torch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SUPPORT = FIXTURES / "support"
PATCHES = Path(__file__).resolve().parents[2] / "patches"

#: fixture folder -> its training scripts (relative paths)
FIXTURE_SCRIPTS: Dict[str, List[str]] = {
    "yolov5-v5.0": ["train.py"],
    "yolov5-v6.0": ["train.py"],
    "yolov5-v6.1": ["train.py"],
    "yolov5-v6.2": ["train.py"],
    "yolov5-v7.0": ["train.py", "classify/train.py", "segment/train.py"],
    "yolov5-master": ["train.py", "classify/train.py", "segment/train.py"],
    "ffca-yolo": ["train.py"],
    "yolov7": ["train.py", "train_aux.py"],
}
#: releases whose create_dataloader does not seed workers and that have no --seed of their own
OLD_LOADERS = {"yolov5-v5.0", "yolov5-v6.0", "yolov5-v6.1", "yolov7"}


def make_repo(tmp_path: Path, name: str) -> Path:
    """A runnable copy of fixture ``name``: its scripts plus the shared toy ``utils``/``models``/``data``."""
    repo = tmp_path / name
    shutil.copytree(SUPPORT, repo)
    shutil.copytree(FIXTURES / name, repo, dirs_exist_ok=True)
    return repo


#: release fixture -> the evaluation scripts of its shape under fixtures/eval/<release> (relative paths)
EVAL_SCRIPTS: Dict[str, List[str]] = {
    "yolov5-v5.0": ["detect.py", "test.py"],
    "yolov5-v6.1": ["val.py"],
    "yolov5-master": ["segment/val.py"],
    "yolov7": ["test.py"],
}


def make_eval_repo(tmp_path: Path, name: str) -> Path:
    """:func:`make_repo` of release ``name`` plus the evaluation scripts of its shape."""
    repo = make_repo(tmp_path, name)
    shutil.copytree(FIXTURES / "eval" / name, repo, dirs_exist_ok=True)
    return repo


def snapshot(root: Path) -> Dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), to prove nothing else changed."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fixture_env(base: Dict[str, str]) -> Dict[str, str]:
    """The offline training environment for fixture scripts: no yolo-det settings, no warnings noise."""
    env = dict(base)
    env.pop("YOLO_DET_DETERMINISTIC", None)
    env.pop("YOLO_DET_FINGERPRINT", None)
    # Only this checkout's yolo_det (no tests/ folder: the fixture's own models/ and utils/ must win).
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def report(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "determinism.json").read_text())


def state_dict(path: Path, key: str = "model") -> Dict[str, torch.Tensor]:
    """The tensors saved under ``key`` in a checkpoint (a state_dict or a module)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    value = ckpt[key]
    return value.state_dict() if hasattr(value, "state_dict") else value


def same_tensors(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> bool:
    """Bit-identical: same keys, dtypes, shapes and bytes."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


def lines_with(text: str, needle: str) -> List[str]:
    return [line for line in text.splitlines() if needle in line]
