"""The yolo-det demo: everything on a synthetic dataset, nothing downloaded (a few minutes on CPU).

1. Modes on an attention model, with CUDA's determinism alerts emulated on CPU: strict fails
   natively and names the op and module, warn reports, strict with replacements trains.
2. `yolo-det audit` of the same model.
3. The real PyPI yolov5: `yolo-det apply-patch`, then `yolo-det verify` trains yolov5n twice
   under strict and proves the runs bit-identical; determinism.json from the run.
4. `yolo-det diff` of runs with different seeds names the first step and tensor that differ.
5. Ultralytics YOLOv8n under `yolo-det ultralytics train ... deterministic=strict`.
6. `yolo-det report`: one self-contained HTML page of the runs (demo-out/report.html).

Usage: python scripts/demo.py [--out demo-out] [--skip-ultralytics]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import yolo_det  # noqa: E402
from yolo_det.strict.audit import emulate_cuda_alerts  # noqa: E402
from yolo_det.session import NondeterministicOpError  # noqa: E402
from yolo_det.synthetic import make_dataset, offline_env  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
from attention_detector import build  # noqa: E402


def banner(text: str) -> None:
    print(f"\n{'=' * 100}\n{text}\n{'=' * 100}", flush=True)


ENV: dict = {}


def sh(cmd, cwd=None, log=None, tail=None) -> subprocess.CompletedProcess:
    """Run a command, echo it and its output (the last ``tail`` lines when a full ``log`` is kept)."""
    shown = " ".join(str(c) if " " not in str(c) else repr(str(c)) for c in cmd)
    print(f"$ {shown}", flush=True)
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = result.stdout.rstrip().splitlines()
    if log is not None:
        Path(log).write_text(result.stdout)
        if tail is not None and len(lines) > tail:
            print(f"  ... ({len(lines) - tail} lines, full output in {log})")
            lines = lines[-tail:]
    print(textwrap.indent("\n".join(lines), "  "), flush=True)
    if result.returncode not in (0, 1):
        raise SystemExit(f"demo: command failed with exit code {result.returncode}")
    print(f"  (exit code {result.returncode})", flush=True)
    return result


def train_steps(session, model, steps: int = 3) -> None:
    """A few optimizer steps on random data, every alert CUDA would raise emulated on CPU."""
    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with emulate_cuda_alerts():
        for _ in range(steps):
            loss = model(torch.rand(4, 3, 64, 64)).square().mean()
            optimizer.zero_grad()
            with session.backward():
                loss.backward()
            optimizer.step()


def part_modes() -> None:
    banner("1. Modes on an attention model (CUDA alerts emulated on CPU)")
    print("strict, native ops: the run stops at the first nondeterministic backward, naming op, module and options")
    session = yolo_det.configure("strict", ops="native", seed=0)
    model = session.track(build())
    try:
        train_steps(session, model)
    except NondeterministicOpError as err:
        print(textwrap.indent(textwrap.fill(str(err).split("\n", 1)[1], 100), "  "))
    session.finish(echo=lambda _: None)

    print("\nwarn: training runs, and every nondeterministic op is counted with the step it first ran at")
    session = yolo_det.configure("warn", seed=0)
    train_steps(session, session.track(build()))
    session.finish(echo=lambda text: print(textwrap.indent(text, "  ")))

    print("\nstrict with deterministic replacements (the default in strict): training runs, bit-exact")
    session = yolo_det.configure("strict", seed=0)
    model = session.track(build())
    train_steps(session, model)
    for item in session.replacements:
        print(f"  replaced {item['module']}: {item['from']} -> {item['to']}")
    session.finish(echo=lambda text: print(textwrap.indent(text, "  ")), restore_flags=True)


def part_audit() -> None:
    banner("2. yolo-det audit: which ops would raise under strict on CUDA, found on a CPU")
    sh(["yolo-det", "audit", "--model", ROOT / "examples" / "attention_detector.py:build", "--imgsz", "128"])


def yolov5_train(data: Path, out: Path, *extra) -> list:
    return [sys.executable, "train.py", "--data", data, "--cfg", "yolov5n.yaml", "--weights", "", "--img", "128",
            "--epochs", "2", "--batch-size", "8", "--workers", "2", "--noplots", "--device", "cpu",
            "--project", out / "runs", "--exist-ok", "--deterministic", "strict", *extra]


def part_yolov5(out: Path, data: Path) -> Path:
    banner("3. The real PyPI yolov5: patch train.py, train yolov5n twice under strict, verify bit-identical")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # yolov5 7.0 imports the deprecated pkg_resources
        import yolov5

    repo = out / "yolov5"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(Path(yolov5.__file__).parent, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    sh(["yolo-det", "apply-patch", repo])
    # a copy of the PyPI package imports yolov5.* by absolute name: its parent first on the path (docs/patch.md)
    ENV["PYTHONPATH"] = os.pathsep.join(p for p in (str(out), ENV.get("PYTHONPATH", "")) if p)
    sh(["yolo-det", "verify", "--runs", "2", "--workdir", out / "verify", "--plot", out / "verify.png", "--",
        *yolov5_train(data, out, "--name", "strict{run}")], cwd=repo)
    report = json.loads((out / "runs" / "strict1" / "determinism.json").read_text())
    print(f"\nruns/strict1/determinism.json: mode={report['mode']} (from {report['mode_source']}), "
          f"seed={report['seed']}, flags={report['flags_applied']}, "
          f"nondeterministic ops={report['violations']['ops'] or 'none'}")
    return repo


def part_diff(out: Path, repo: Path, data: Path) -> None:
    banner("4. yolo-det diff: a run with another seed, compared step by step with run 1")
    log = out / "seed1.jsonl"
    sh(yolov5_train(data, out, "--name", "seed1", "--seed", "1", "--fingerprint", log), cwd=repo,
       log=out / "seed1.log", tail=4)
    first = sorted((out / "verify").rglob("*.jsonl"))[0]
    sh(["yolo-det", "diff", first, log])


def part_ultralytics(out: Path, data: Path) -> None:
    banner("5. Ultralytics YOLOv8n: the same control through yolo-det's trainer")
    sh(["yolo-det", "ultralytics", "train", "model=yolov8n.yaml", f"data={data}", "epochs=1", "imgsz=128",
        "batch=8", "workers=2", "device=cpu", "plots=False", "amp=False", f"project={out / 'ultralytics'}",
        "name=strict", "exist_ok=True", "deterministic=strict"], cwd=out, log=out / "ultralytics.log", tail=6)
    report = json.loads((out / "ultralytics" / "strict" / "determinism.json").read_text())
    print(f"ultralytics/strict/determinism.json: mode={report['mode']} (from {report['mode_source']})")


def part_report(out: Path) -> None:
    banner("6. yolo-det report: one HTML page of what the runs prove (open it in any browser, offline)")
    runs = out / "runs"
    sh(["yolo-det", "report", runs / "strict1", runs / "strict2", runs / "seed1", "--out", out / "report.html"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "demo-out", help="where everything is written")
    parser.add_argument("--skip-ultralytics", action="store_true", help="leave out part 5")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ENV.update(offline_env(out / "config"))
    ENV["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{ENV.get('PATH', '')}"
    ENV["PYTHONUNBUFFERED"] = "1"
    data = make_dataset(out / "data", n_train=16, n_val=8, imgsz=128)
    print(f"synthetic dataset: {data}")

    part_modes()
    part_audit()
    repo = part_yolov5(out, data)
    part_diff(out, repo, data)
    if not args.skip_ultralytics:
        part_ultralytics(out, data)
    part_report(out)
    banner(f"done: outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
