"""Regenerate the portable golden record: python scripts/portable_golden.py [--out PATH]

The golden (tests/fixtures/portable/golden.jsonl, a few KB) is the compact fingerprint log of
examples/portable_tiny.py trained under ``--deterministic strict`` with ``yolo-det run --portable`` (one intra-op
thread): every step's data, loss, gradient, parameter and RNG digests. tests/proof/test_portable_runs.py trains the
same run on whatever machine runs the suite and compares: identical on every x86-64 CPU with AVX2 is portable's
promise. Regenerate it when torch or numpy is upgraded (the test skips, naming both versions, until then), when
examples/portable_tiny.py or the digest format changes, and say in the commit which machine made it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from yolo_det.core import env_names, machine, portable  # noqa: E402
from yolo_det.integrations import launch  # noqa: E402

GOLDEN = ROOT / "tests" / "fixtures" / "portable" / "golden.jsonl"
SCRIPT = "examples/portable_tiny.py"
#: The packages whose upgrade may change the bits: a golden made with others is not compared (the test skips).
VERSIONED = ("torch", "numpy")


def tiny_env(base: Mapping[str, str], portable_threads: Optional[int], log: os.PathLike,
             extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of one tiny run: ``base`` without any dispatch cap, thread count or yolo-det setting of its
    own, then ``extra`` (the caps or threads a test imitates another machine with), then, under portable, what
    ``yolo-det run --portable`` gives its command."""
    drop = set(machine.DISPATCH_VARS) | set(portable.THREAD_VARS)
    env = {k: v for k, v in base.items() if k not in drop and not k.startswith("YOLO_DET_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [base.get("PYTHONPATH", "")] if p])
    env.update(extra or {})
    env[env_names.FINGERPRINT] = str(log)
    env[env_names.FINGERPRINT_MODE] = "compact"
    if portable_threads is not None:
        env[env_names.PORTABLE] = str(portable_threads)
        env.update(launch.child_env(env))
    return env


def command(device: str = "cpu") -> list:
    """The tiny run's command line (run from the repository's root); ``--device`` only off the CPU, so that the
    golden's header names the command every CPU run gives."""
    return [sys.executable, SCRIPT, "--deterministic", "strict"] + (["--device", device] if device != "cpu" else [])


def run_tiny(log: os.PathLike, base: Mapping[str, str], portable_threads: Optional[int] = 1,
             extra: Optional[Mapping[str, str]] = None, timeout: float = 300,
             device: str = "cpu") -> subprocess.CompletedProcess:
    """Train examples/portable_tiny.py under strict once, its compact record written to ``log``."""
    env = tiny_env(base, portable_threads, log, extra)
    return subprocess.run(command(device), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def header(log: os.PathLike) -> dict:
    """The first line of a fingerprint log."""
    with open(log, encoding="utf-8") as handle:
        return json.loads(handle.readline())


def versions(head: Mapping) -> Dict[str, Optional[str]]:
    """The versions of :data:`VERSIONED` a record's header names (torch as the build says it: ``2.14.1+cu130``)."""
    packages = head.get("packages") or {}
    return {name: head.get("torch") if name == "torch" else packages.get(name) for name in VERSIONED}


def _machine(head: Mapping) -> str:
    cpu = (head.get("machine") or {}).get("cpu") or {}
    tiers = ", ".join(f"{k} {v}" for k, v in (cpu.get("dispatch") or {}).items())
    return f"{cpu.get('model')} ({cpu.get('vendor')}; {tiers}; {head.get('threads')} threads)"


def judge(log: os.PathLike, golden: os.PathLike = GOLDEN) -> Tuple[str, str]:
    """``(verdict, sentence)`` of a portable run's record against the golden: ``skip`` where the golden was made
    with other torch/numpy versions (their kernels may sum otherwise: regenerate it), ``identical``, or ``differs``
    naming the first step, kind and tensor where they part and both machines (also for records that cannot be
    compared: another digest format, a changed script)."""
    from yolo_det.proof.compare import compare_logs
    from yolo_det.record.log import FingerprintError

    if not Path(golden).is_file():
        return "differs", f"no golden record at {golden}: make it with scripts/portable_golden.py"
    made, here = header(golden), header(log)
    if versions(made) != versions(here):
        old = ", ".join(f"{k} {v}" for k, v in versions(made).items())
        new = ", ".join(f"{k} {v}" for k, v in versions(here).items())
        return "skip", (f"the golden record was made with {old}, this run used {new}: another release may sum in "
                        "another order; regenerate it with scripts/portable_golden.py")
    try:
        comparison = compare_logs(golden, log)
    except (FingerprintError, ValueError) as exc:
        return "differs", f"the run's record cannot be compared with the golden ({exc}): regenerate the golden"
    if comparison.identical:
        return "identical", (f"identical to the golden: {comparison.steps} steps, {comparison.tensors} tensors "
                             f"(golden made on {_machine(made)}, this run on {_machine(here)})")
    first = comparison.first_divergence
    where = (f"step {first.step}, {first.kind} {first.tensor}" if first is not None
             else comparison.problem or comparison.verdict)
    script = [f for f in made.get("files") or [] if f.get("arg") == SCRIPT]
    now = [f for f in here.get("files") or [] if f.get("arg") == SCRIPT]
    changed = "; examples/portable_tiny.py changed since the golden was made: regenerate it" \
        if script and now and script[0].get("digest") != now[0].get("digest") else ""
    return "differs", (f"portable bits differ from the golden at {where} (golden made on {_machine(made)}, this run "
                       f"on {_machine(here)}){changed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GOLDEN, help=f"where to write it (default {GOLDEN})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "golden.jsonl"
        done = run_tiny(log, os.environ)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-3000:], file=sys.stderr)
            print("portable_golden: the tiny portable run failed", file=sys.stderr)
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, args.out)
    head = header(args.out)
    cpu = (head.get("machine") or {}).get("cpu") or {}
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes): {versions(head)}, made on {cpu.get('model')} "
          f"({', '.join(f'{k} {v}' for k, v in (cpu.get('dispatch') or {}).items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
