"""``yolo-det run`` (launcher) and ``yolo-det env`` (manifest and exports)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from ..core import env_names, environment, processes, roles, verdicts
from ..core.mode import MODES, mode_arg, validate_mode
from ..integrations import launch
from .output import print_json

#: where `env --exports --offline` puts the font YOLOv5 and Ultralytics look for
OFFLINE_DIR = Path("~/.config/yolo-det/offline")


def register(sub) -> None:
    run = sub.add_parser(
        "run",
        help="launch a training command with the environment determinism needs before start-up",
        description=(
            "Set CUBLAS_WORKSPACE_CONFIG, PYTHONHASHSEED and YOLO_DET_DETERMINISTIC, then run the "
            "command in its own process group, so every process and DDP rank starts right and a signal to "
            "yolo-det (Ctrl-C, kill, SIGHUP) reaches all of them. Works in front of torchrun. Python "
            "processes it starts train Ultralytics models (`yolo train ...`, model.train()) with yolo-det's "
            "trainer for their task (a sitecustomize bootstrap on PYTHONPATH)."
        ),
        epilog="example: yolo-det run --deterministic strict --seed 0 -- python train.py --data data.yaml "
               "(or -- yolo train model=yolov8n.yaml data=data.yaml)",
    )
    run.add_argument("--deterministic", type=mode_arg, choices=MODES,
                     help="mode for the launched training (default: leave unset)")
    run.add_argument("--seed", type=_seed, help="the training seed when the command gives none (patched train.py, "
                     "Ultralytics; YOLO_DET_TRAIN_SEED), PYTHONHASHSEED and YOLO_DET_SEED for the launched processes")
    run.add_argument("--portable", nargs="?", const="1", type=_portable, metavar="THREADS",
                     help="strict bits independent of the x86-64 CPU: pin the CPU libraries to AVX2 and the intra-op "
                          "threads to THREADS (default 1) before the command starts (docs/portable.md)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- followed by the command to run")
    run.set_defaults(func=_run)

    env = sub.add_parser("env", help="print this machine's determinism manifest, or the exports for a job script")
    group = env.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print the manifest as JSON")
    group.add_argument("--exports", action="store_true", help="print `export` lines for a Dockerfile or job script")
    env.add_argument("--deterministic", type=mode_arg, choices=MODES,
                     help="with --exports: also export YOLO_DET_DETERMINISTIC")
    env.add_argument("--seed", type=_seed, help="with --exports: the seed, as yolo-det run --seed gives it "
                     "(PYTHONHASHSEED, YOLO_DET_SEED and the training seed YOLO_DET_TRAIN_SEED)")
    env.add_argument("--portable", nargs="?", const="1", type=_portable, metavar="THREADS",
                     help="with --exports: also portable's pins (docs/portable.md)")
    env.add_argument("--offline", nargs="?", const=str(OFFLINE_DIR), metavar="DIR",
                     help="with --exports: also what training needs with no network: a settings folder holding a "
                          f"font YOLOv5 and Ultralytics would download (default {OFFLINE_DIR}), auto-install and "
                          "online checks off. Use: eval \"$(yolo-det env --exports --offline)\"")
    env.set_defaults(func=_env)


def _seed(text: str) -> int:
    """``--seed``: a whole number in PYTHONHASHSEED's range, else a usage error (exit 2)."""
    try:
        return environment.check_seed(int(text))
    except ValueError as exc:  # ConfigError is a ValueError
        message = str(exc) if str(exc).startswith("--seed") else f"{text!r} is not a whole number"
        raise argparse.ArgumentTypeError(message.replace("--seed ", "", 1)) from None


def _portable(text: str) -> int:
    """``--portable [THREADS]``: a thread count >= 1, else a usage error (exit 2)."""
    from ..core.mode import ConfigError, validate_portable

    try:
        threads = validate_portable(text, "--portable")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--portable ", "", 1)) from None
    if threads is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count (1, 2, ...)")
    return threads


def _command(args) -> list:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd


def _run(args) -> int:
    cmd = _command(args)
    if not cmd:
        print("yolo-det run: no command given; usage: yolo-det run [--deterministic MODE] -- CMD ...", file=sys.stderr)
        return 2
    mode = validate_mode(args.deterministic, "--deterministic") if args.deterministic else None
    env = dict(os.environ)
    env.update(_launch_vars(mode, args.seed, env))
    if args.portable is not None:
        env[env_names.PORTABLE] = str(args.portable)
    env.pop(env_names.MODE_FROM_RUN, None)
    if mode is not None:  # the child reports the mode as from `yolo-det run --deterministic`, not the environment
        env[env_names.MODE_FROM_RUN] = mode
    env.update(launch.child_env(env))  # Ultralytics training in the child runs under yolo-det
    sys.stdout.flush()
    try:
        return processes.run(cmd, env=env)  # its own process group: signals reach every descendant
    except OSError as exc:
        print(f"yolo-det run: cannot run {cmd[0]!r}: {exc.strerror}", file=sys.stderr)
        return 2


def _launch_vars(mode, seed, env=None) -> dict:
    """What ``yolo-det run`` sets and ``yolo-det env --exports`` prints: the launcher's variables and, with a seed,
    the training seed of a command that gives none (``roles.TRAIN_SEED_ENV``)."""
    out = environment.launcher_env(mode, seed, env)
    if seed is not None:
        out[roles.TRAIN_SEED_ENV] = str(seed)
    return out


def _env(args) -> int:
    if args.offline and not args.exports:
        print("yolo-det env: --offline goes with --exports: eval \"$(yolo-det env --exports --offline)\"",
              file=sys.stderr)
        return 2
    if args.exports:
        exports = _launch_vars(args.deterministic, args.seed)
        if args.portable is not None:
            from ..core import portable

            exports.update(portable.launch_env(args.portable))
        if args.offline:
            from ..synthetic import OFFLINE_EXPORTS, offline_env

            try:
                offline = offline_env(Path(args.offline).expanduser(), base={})
            except OSError as exc:
                print(f"yolo-det env: cannot use {args.offline} as the settings folder: {exc.strerror}",
                      file=sys.stderr)
                return 2
            exports.update({k: offline[k] for k in OFFLINE_EXPORTS})
        for key, value in exports.items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    data = environment.manifest()
    if args.json:
        return print_json(data, verdicts.NO_VERDICT)
    width = max(len(k) for k in data)
    for key, value in data.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = "; ".join(json.dumps(v) for v in value) or "-"
        print(f"{key.ljust(width)}  {value}")
    return 0
