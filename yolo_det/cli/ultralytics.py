"""``yolo-det ultralytics train key=value ...``: Ultralytics training under a determinism mode.

Arguments are Ultralytics' ``key=value`` pairs (as for ``yolo train``) plus
``deterministic=strict|warn|off`` and the other ``deterministic_*`` keys.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

EXAMPLE = "yolo-det ultralytics train model=yolov8n.yaml data=data.yaml epochs=10 deterministic=strict"


def register(sub) -> None:
    """Add ``yolo-det ultralytics train`` to the ``yolo-det`` parser."""
    group = sub.add_parser(
        "ultralytics",
        help="train Ultralytics YOLOv8/11 models under a determinism mode",
        description="Ultralytics YOLOv8/11 integration (needs `pip install yolo-det[ultralytics]`).",
        epilog=f"example: {EXAMPLE}",
    )
    group.set_defaults(func=lambda args: _usage(group))
    commands = group.add_subparsers(dest="ultralytics_command", metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train a detection model with yolo-det's DeterministicTrainer",
        description=(
            "Train like `yolo train`, with yolo-det's strict|warn|off modes, a seeded train loader, backward "
            "passes inside the determinism context and determinism.json in the run directory. The mode comes "
            "from deterministic=MODE, else YOLO_DET_DETERMINISTIC, else Ultralytics' deterministic=True/False "
            "(True -> warn, False -> off), else warn."
        ),
        epilog=f"example: {EXAMPLE}\nexit codes: 0 trained, 1 strict stopped on a nondeterministic op, 2 usage error",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("pairs", nargs="*", metavar="KEY=VALUE", help="Ultralytics training arguments, model= required")
    train.set_defaults(func=_train)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def parse_pairs(pairs: List[str]) -> Dict[str, Any]:
    """``['epochs=3', 'deterministic=strict']`` -> ``{'epochs': 3, 'deterministic': 'strict'}``.

    Values are typed as ``yolo train`` types them (Ultralytics' own parser).
    """
    from ultralytics.cfg import parse_key_value_pair

    out: Dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair or pair.startswith("="):
            raise ValueError(f"{pair!r} is not KEY=VALUE")
        try:
            key, value = parse_key_value_pair(pair)
        except AssertionError as exc:  # Ultralytics asserts on an empty value
            raise ValueError(str(exc)) from exc
        out[key] = value
    return out


def _train(args) -> int:
    try:
        kwargs = parse_pairs(args.pairs)
    except ImportError:
        print("yolo-det ultralytics train: the ultralytics package is not installed: "
              "pip install 'yolo-det[ultralytics]'", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"yolo-det ultralytics train: {exc}; usage: {EXAMPLE}", file=sys.stderr)
        return 2
    model = kwargs.pop("model", None)
    if not model:
        print(f"yolo-det ultralytics train: model= is required; usage: {EXAMPLE}", file=sys.stderr)
        return 2
    from ..integrations import ultralytics as integration
    from ..integrations.resume import ResumeStateError
    from ..session import NondeterministicOpError

    try:
        integration.train(str(model), **kwargs)
    except SyntaxError as exc:  # Ultralytics' answer to an unknown argument
        print(f"yolo-det ultralytics train: {exc}", file=sys.stderr)
        return 2
    except NondeterministicOpError as exc:
        print(f"yolo-det: strict mode stopped training:\n{exc}", file=sys.stderr)
        return 1
    except ResumeStateError as exc:  # strict: the resume state is missing or does not match
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return 2
    return 0
