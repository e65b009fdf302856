"""``yolo-det ultralytics train key=value ...``: Ultralytics training under a determinism mode.

Arguments are ``yolo train``'s: ``key=value`` pairs, a task (``segment``, ...), bare boolean
flags (``resume``), plus ``deterministic=strict|warn|off`` and the other ``deterministic_*`` keys.
Any task and RT-DETR; the trainer is the model's own with yolo-det's mixin in front.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Tuple

from ..core.extras import install_hint
from ..core.mode import HYP_KEYS, ConfigError

EXAMPLE = "yolo-det ultralytics train model=yolov8n.yaml data=data.yaml epochs=10 deterministic=strict"


def register(sub) -> None:
    """Add ``yolo-det ultralytics train`` to the ``yolo-det`` parser."""
    group = sub.add_parser(
        "ultralytics",
        help="train Ultralytics YOLOv8/11 models under a determinism mode",
        description=f"Ultralytics YOLOv8/11 integration (needs the ultralytics package: {install_hint('ultralytics')}).",
        epilog=f"example: {EXAMPLE}",
    )
    group.set_defaults(func=lambda args: _usage(group))
    commands = group.add_subparsers(dest="ultralytics_command", metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train any Ultralytics model (every task, RT-DETR) under yolo-det",
        description=(
            "Train like `yolo train` (same syntax: key=value, a task such as `segment`, bare `resume`), with "
            "yolo-det's strict|warn|off modes, a seeded train loader, backward passes inside the determinism "
            "context and determinism.json in the run directory. The task comes from task= or the model, as "
            "for `yolo`. The mode comes from deterministic=MODE, else YOLO_DET_DETERMINISTIC, else Ultralytics' "
            "deterministic=True/False (True -> warn, False -> off), else the settings saved with a run being "
            "resumed, else warn."
        ),
        epilog=f"example: {EXAMPLE}\n         yolo-det ultralytics train resume model=runs/detect/train/weights/last.pt\n"
               "exit codes: 0 trained, 1 strict stopped on a nondeterministic op, 2 usage error or a failure",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("pairs", nargs="*", metavar="ARG",
                       help="Ultralytics training arguments (KEY=VALUE, a task, bare flags such as resume); model= required")
    train.set_defaults(func=_train)
    export = commands.add_parser(
        "export",
        help="export like `yolo export`, with the source checkpoint's digest and every argument recorded in the artifact",
        description=("Export like `yolo export model=best.pt format=onnx ...`, then write the provenance (source "
                     "checkpoint weight digest, run, yolo-det mode, versions, every export argument) into the "
                     "artifact (ONNX metadata_props, OpenVINO rt_info and metadata.yaml) and beside it "
                     "(ARTIFACT.provenance.json). `yolo-det parity` reads it."),
        epilog="example: yolo-det ultralytics export model=runs/detect/train/weights/best.pt format=onnx imgsz=640\n"
               "exit codes: 0 exported, 2 usage error or a failed export",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("pairs", nargs="*", metavar="ARG", help="Ultralytics export arguments (KEY=VALUE); model= required")
    export.set_defaults(func=_export)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def parse_pairs(pairs: List[str]) -> Dict[str, Any]:
    """``['epochs=3', 'segment', 'resume']`` -> ``{'epochs': 3, 'task': 'segment', 'resume': True}``.

    The syntax of ``yolo train``: values typed by Ultralytics' own parser, spaces around ``=``
    merged, leading ``--`` and trailing ``,`` dropped, a bare task name sets ``task``, a bare
    boolean argument (``resume``, ``amp``) is True, ``train`` itself may be repeated. ValueError
    for anything else, an unknown key or a value of the wrong type.
    """
    from ..integrations.ultralytics import api

    merge_equals_args, parse_key_value_pair, TASKS, MODES = api.cli_parsers()
    DEFAULT_CFG_DICT = api.default_cfg_dict()

    out: Dict[str, Any] = {}
    for pair in merge_equals_args(list(pairs)):
        pair = pair[2:] if pair.startswith("--") else pair
        pair = pair[:-1] if pair.endswith(",") else pair
        if "=" in pair:
            if pair.startswith("="):
                raise ValueError(f"{pair!r} is not KEY=VALUE")
            try:
                key, value = parse_key_value_pair(pair)
            except (AssertionError, NameError, SyntaxError, ValueError) as exc:  # Ultralytics asserts on an empty value
                raise ValueError(str(exc)) from exc
            out[key] = value
        elif pair in TASKS:
            out["task"] = pair
        elif pair in MODES:
            if pair != "train":
                raise ValueError(f"{pair!r}: `yolo-det ultralytics train` only trains (use `yolo {pair}`)")
        elif isinstance(DEFAULT_CFG_DICT.get(pair), bool):
            out[pair] = True
        else:
            raise ValueError(f"{pair!r} is not KEY=VALUE" + (f" (e.g. {pair}={DEFAULT_CFG_DICT[pair]})"
                                                             if pair in DEFAULT_CFG_DICT else ""))
    known = set(DEFAULT_CFG_DICT) | set(HYP_KEYS) | {"task", "mode", "model", "cfg"}
    unknown = sorted(set(out) - known)
    if unknown:
        raise ValueError(f"unknown argument {', '.join(unknown)} (Ultralytics' arguments: `yolo cfg`; "
                         "yolo-det's: deterministic, deterministic_backward, deterministic_allow, deterministic_ops, "
                         "deterministic_fill_memory, virtual_world_size)")
    task = out.get("task")
    if task is not None and task not in TASKS:
        raise ValueError(f"task={task!r} is not one of {', '.join(TASKS)}")
    _check_types({k: v for k, v in out.items() if k in DEFAULT_CFG_DICT and k not in ("deterministic", "task", "mode")})
    return out


def _check_types(values: Dict[str, Any]) -> None:
    """Ultralytics' own type and range checks of its arguments, as ValueError."""
    from ..integrations.ultralytics import api

    try:
        api.check_types(values)
    except (TypeError, ValueError) as exc:
        raise ValueError(_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _pairs_and_model(args, verb: str, usage: str) -> Optional[Tuple[str, dict]]:
    """``model=`` and the other ``key=value`` pairs of ``yolo-det ultralytics VERB``; None after saying what is wrong."""
    try:
        kwargs = parse_pairs(args.pairs)
    except ImportError:
        print(f"yolo-det ultralytics {verb}: the ultralytics package is not installed: "
              f"{install_hint('ultralytics')}", file=sys.stderr)
        return None
    except ValueError as exc:
        print(f"yolo-det ultralytics {verb}: {exc}; usage: {usage}", file=sys.stderr)
        return None
    model = kwargs.pop("model", None)
    if not model:
        print(f"yolo-det ultralytics {verb}: model= is required; usage: {usage}", file=sys.stderr)
        return None
    kwargs.pop("mode", None)
    return str(model), kwargs


def _train(args) -> int:
    parsed = _pairs_and_model(args, "train", EXAMPLE)
    if parsed is None:
        return 2
    model, kwargs = parsed
    if not kwargs.get("data") and not kwargs.get("resume"):
        print("yolo-det ultralytics train: data= is required (a dataset yaml, or an image folder for classify); "
              f"usage: {EXAMPLE}", file=sys.stderr)
        return 2
    from ..integrations.ultralytics import trainer as integration
    from ..integrations.resume import ResumeStateError
    from ..session import NondeterministicOpError

    integration.ModeInputs.from_overrides(dict(kwargs)).resolve()  # a bad setting: exit 2 before anything is built
    if kwargs.get("resume"):  # killed before its first save completed: nothing to resume
        from ..integrations.resume import unsaved

        why = unsaved(str(kwargs["resume"]) if isinstance(kwargs["resume"], str) else str(model))
        if why:
            print(f"yolo-det: error: {why}", file=sys.stderr)
            return 2

    try:
        integration.train(str(model), **kwargs)
    except NondeterministicOpError as exc:
        print(f"yolo-det: strict mode stopped training:\n{exc}", file=sys.stderr)
        return 1
    except ResumeStateError as exc:  # strict: the resume state is missing or does not match
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, KeyboardInterrupt):
        raise  # the CLI's own handlers: exit 2, exit 130
    except Exception as exc:  # noqa: BLE001 - any other failure is reported in one line, without a traceback
        print(f"yolo-det ultralytics train: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return 2
    return 0


def _export(args) -> int:
    parsed = _pairs_and_model(args, "export", "yolo-det ultralytics export model=best.pt format=onnx")
    if parsed is None:
        return 2
    model, kwargs = parsed
    kwargs.pop("task", None)
    from ..integrations.ultralytics.export import export

    try:
        artifact, where = export(model, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure of the exporter is reported in one line
        print(f"yolo-det ultralytics export: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return 2
    print(f"exported {artifact}; provenance: " + ", ".join(f"{k} {v}" for k, v in where.items()))
    return 0
