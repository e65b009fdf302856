#!/usr/bin/env python3
"""Ultralytics release matrix: each release (and fork-shaped vendored copies) trained strict twice under
``yolo-det verify``, through ``enable()`` and through ``yolo-det run -- yolo train``; prints a table.

    .venv/bin/python scripts/compat.py                         # every release in RELEASES, plus the fork shapes
    .venv/bin/python scripts/compat.py --releases 8.0.238 --paths run
    .venv/bin/python scripts/compat.py install 8.2.103         # install only; prints the folder to put on PYTHONPATH

Releases are installed with ``pip install --no-deps --target CACHE/<version>`` (CACHE defaults to
``~/.cache/yolo-det-compat``, or ``$YOLO_DET_COMPAT_CACHE``) and put first on ``PYTHONPATH``; the venv is
never changed. Fork shapes are copies of a release without its dist-info, another version number and
modules written in tests/fixtures/ultralytics_forks (no fork code). Exit 0 when every row is identical.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "ultralytics_forks"
#: The last 8.0, one of each minor, an early and a late 8.3 (the forks' and the 'session' releases).
RELEASES = ("8.0.238", "8.1.47", "8.2.103", "8.3.63", "8.3.240", "installed")
#: fork shape -> (release it vendors, the version number it carries, its model front end, model yaml)
FORKS = {
    "yolov10-shape": ("8.1.47", "8.1.34", "YOLOv10", "yolov8n.yaml"),
    "yolov12-shape": ("8.3.63", "8.3.63", "YOLO", str(FIXTURES / "yolov12-shape.yaml")),
}
#: What 8.0 and 8.1 import beyond the venv's packages.
EXTRA_DEPS = ("py-cpuinfo",)


def cache_dir() -> Path:
    return Path(os.environ.get("YOLO_DET_COMPAT_CACHE", Path.home() / ".cache" / "yolo-det-compat"))


def install(version: str, cache: Optional[Path] = None) -> Path:
    """The folder holding ``ultralytics==version`` (installed there once, with pip, without dependencies)."""
    cache = cache or cache_dir()
    target = cache / version
    if not (target / "ultralytics" / "__init__.py").is_file():
        _pip(target, f"ultralytics=={version}")
    deps = cache / "_deps"
    if not (deps / "cpuinfo").is_dir():
        _pip(deps, *EXTRA_DEPS)
    return target


def _pip(target: Path, *packages: str) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial), *packages]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(packages)} failed: {done.stderr.strip()[-500:]}")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def pythonpath(folder: Optional[Path], cache: Optional[Path] = None) -> str:
    """PYTHONPATH putting a release (or fork) folder and the extra dependencies first."""
    cache = cache or cache_dir()
    parts = ([str(folder)] if folder else []) + [str(cache / "_deps")]
    return os.pathsep.join(parts + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def make_fork(shape: str, dest: Path, cache: Optional[Path] = None) -> Path:
    """A vendored ``ultralytics`` package of the fork's shape under ``dest`` (returns ``dest``)."""
    release, number, _front, _yaml = FORKS[shape]
    source = install(release, cache) / "ultralytics"
    package = dest / "ultralytics"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(source, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    init = package / "__init__.py"
    lines = [f'\n__version__ = "{number}"  # the vendored copy\'s own number (yolo-det test fixture)\n']
    if shape == "yolov10-shape":
        (package / "models" / "yolov10").mkdir()
        shutil.copyfile(FIXTURES / "yolov10_shape.py", package / "models" / "yolov10" / "__init__.py")
        lines.append("from ultralytics.models.yolov10 import YOLOv10  # noqa: E402 (fork fixture)\n")
    else:
        shutil.copyfile(FIXTURES / "area_attention.py", package / "nn" / "modules" / "area_attention.py")
        with open(package / "nn" / "tasks.py", "a", encoding="utf-8") as tasks:  # parse_model resolves names here
            tasks.write("\nfrom ultralytics.nn.modules.area_attention import AreaAttention"
                        "  # noqa: E402 (fork fixture)\n")
    with open(init, "a", encoding="utf-8") as handle:
        handle.writelines(lines)
    return dest


TRAIN_SCRIPT = """\
import sys
import ultralytics
if sys.argv[1] == "enable":
    import yolo_det.ultralytics
    yolo_det.ultralytics.enable()
front = getattr(ultralytics, sys.argv[3])
front(sys.argv[4]).train(data=sys.argv[5], epochs=1, imgsz=64, batch=4, workers=0, plots=False, device="cpu",
                         amp=False, project=sys.argv[6], name=sys.argv[2], exist_ok=True, seed=0)
"""


def command(path: str, front: str, model: str, data: Path, project: Path) -> List[str]:
    """The training command verify runs twice (``{run}`` becomes the run number)."""
    if path == "enable" or front != "YOLO":  # a fork's own front end is reached from Python
        script = project / "train.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(TRAIN_SCRIPT)
        how = "enable" if path == "enable" else "plain"
        cmd = [sys.executable, str(script), how, f"{path}{{run}}", front, model, str(data), str(project)]
    else:
        yolo = str(Path(sys.executable).with_name("yolo"))
        cmd = [yolo, "train", f"model={model}", f"data={data}", "epochs=1", "imgsz=64", "batch=4", "workers=0",
               "plots=False", "device=cpu", "amp=False", f"project={project}", f"name={path}{{run}}", "exist_ok=True",
               "seed=0", "deterministic=strict"]
    if path == "run":
        cmd = [sys.executable, "-m", "yolo_det", "run", "--deterministic", "strict", "--"] + cmd
    return cmd


#: Release integrations turned off in a release's own settings, both failing with or without yolo-det: the Ray
#: Tune callback of 8.0-8.3 calls Ray APIs that current Ray (2.60) no longer has (``ray.tune.is_session_enabled``,
#: ``ray.train._internal.session._get_session``) at every epoch end, and before 8.4 the MLflow callback's default
#: file store is refused by MLflow 3 at the start of training, and 8.0's W&B callback passes `project=` (a path) to
#: `wandb.init`, which current wandb refuses ("Invalid project name", docs/ultralytics.md, "Releases and forks").
RELEASE_SETTINGS_OFF = ("raytune", "mlflow", "wandb")


def release_env(folder: Optional[Path], config: Path, env: Dict[str, str],
                off: Sequence[str] = RELEASE_SETTINGS_OFF) -> Dict[str, str]:
    """``env`` for a release child: the release first on PYTHONPATH, a settings folder of its own (releases of
    another settings schema reset each other's file) in which the integrations ``off`` names are off."""
    sys.path.insert(0, str(ROOT))
    from yolo_det.synthetic import offline_env

    run_env = offline_env(config, base=dict(env, PYTHONPATH=pythonpath(folder)))
    values = ", ".join(f"{name!r}: False" for name in off)
    code = f"from ultralytics.utils import SETTINGS; SETTINGS.update({{{values}}})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env)
    if done.returncode != 0:
        raise RuntimeError(f"could not write the release's settings in {config}: {done.stderr.strip()[-500:]}")
    return run_env


def check(name: str, folder: Optional[Path], path: str, front: str, model: str, data: Path, work: Path,
          env: Dict[str, str]) -> Dict[str, object]:
    """One row: verify --runs 2 of the training command under strict; the runs' determinism.json read back."""
    project = work / name / path
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    run_env = dict(release_env(folder, project / "config", env), YOLO_DET_DETERMINISTIC="strict")
    cmd = [sys.executable, "-m", "yolo_det", "verify", "--runs", "2", "--json", "--workdir", str(project / "verify"),
           "--"] + command(path, front, model, data, project)
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=str(project.parent))
    row: Dict[str, object] = {"name": name, "path": path, "exit": done.returncode,
                              "seconds": round(time.time() - start, 1)}
    try:
        result = json.loads(done.stdout)
        row.update(steps=result.get("steps"), identical=result.get("steps_identical"))
    except ValueError:
        row.update(steps=None, identical=False, error=(done.stderr.strip().splitlines() or ["?"])[-1][:200])
    report = project / f"{path}1" / "determinism.json"
    if report.is_file():
        data_ = json.loads(report.read_text())
        facts = data_.get("ultralytics", {})
        row.update(version=facts.get("version"), mode=data_.get("settings", {}).get("mode"),
                   vendored=facts.get("package", {}).get("vendored"), not_covered=facts.get("not_covered", []))
    return row


def table(rows: List[Dict[str, object]]) -> str:
    """The Markdown table the README and docs/ultralytics.md show."""
    out = ["| release | path | version seen | mode | steps | strict twice | not covered |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        same = "bit-identical" if row.get("identical") and row.get("exit") == 0 else f"NO (exit {row.get('exit')})"
        vendored = " (vendored)" if row.get("vendored") else ""
        out.append(f"| {row['name']} | {row['path']} | {row.get('version', '-')}{vendored}"
                   f" | {row.get('mode', '-')} | {row.get('steps', '-')} | {same} | "
                   f"{'; '.join(row.get('not_covered') or []) or '-'} |")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", default="matrix", choices=("matrix", "install", "fork"))
    parser.add_argument("args", nargs="*", help="install: versions; fork: SHAPE DEST")
    parser.add_argument("--releases", nargs="*", default=list(RELEASES))
    parser.add_argument("--forks", nargs="*", default=list(FORKS))
    parser.add_argument("--paths", nargs="*", default=["enable", "run"], choices=("enable", "run"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/yolo-det-compat"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.action == "install":
        for version in args.args:
            print(install(version))
        return 0
    if args.action == "fork":
        print(make_fork(args.args[0], Path(args.args[1])))
        return 0
    sys.path.insert(0, str(ROOT))
    from yolo_det.synthetic import make_dataset, offline_env

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    data = make_dataset(work / "data", n_train=8, n_val=4, imgsz=64)
    env = offline_env(work / "config")
    env.pop("YOLO_DET_FINGERPRINT", None)
    rows = []
    for release in args.releases:
        folder = None if release == "installed" else install(release)
        for path in args.paths:
            rows.append(check(release, folder, path, "YOLO", "yolov8n.yaml", data, work, env))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    for shape in args.forks:
        folder = make_fork(shape, work / "forks" / shape)
        _release, _number, front, model = FORKS[shape]
        for path in args.paths:
            rows.append(check(shape, folder, path, front, model, data, work, env))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0 if all(row.get("identical") and row.get("exit") == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
