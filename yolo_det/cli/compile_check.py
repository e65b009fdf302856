"""``yolo-det compile-check MODULE:FACTORY --input SHAPE``: one training step compiled vs eager, named."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from .exit_codes import EXIT_USAGE
from .output import print_json
from ..core import verdicts


def register(sub) -> None:
    """Add ``compile-check`` to the ``yolo-det`` parser."""
    check = sub.add_parser(
        "compile-check",
        help="one training step of a model eager and torch.compile'd: bit-identical, or where they part",
        description=(
            "Build a model with MODULE:FACTORY (a function or class returning an nn.Module, imported from the\n"
            "current folder or the Python path), run one forward, loss (mean square of the output) and\n"
            "backward eagerly and compiled with Inductor under every eager-equal setting this torch has\n"
            "(deterministic, fallback_random, numerics='strict', batch_invariant, emulate_precision_casts),\n"
            "and say whether loss, module outputs and gradients are bit-identical; else name the modules where\n"
            "the forward starts to differ with their ops and source lines, and the gradients that differ.\n"
            "Equal values where Dynamo compiled no graph or broke the forward into several are not proven\n"
            "(yolo_det.proof.compiled_eager; docs/core.md, torch.compile)."
        ),
        epilog="example: yolo-det compile-check examples.attention_detector:build --input 2,3,64,64\n"
               "exit codes: 0 bit-identical, 1 compiled and eager differ (where printed), 2 usage error, "
               "3 not proven (no graph compiled, or graph breaks; docs/exit-codes.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("factory", metavar="MODULE:FACTORY", help="what builds the model, e.g. mypkg.models:build")
    check.add_argument("--input", required=True, metavar="SHAPE", help="the input's shape, e.g. 2,3,64,64 "
                       "(random numbers from seed 0)")
    check.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    check.add_argument("--json", nargs="?", const=True, default=False, metavar="PATH",
                       help="print the comparison as JSON on stdout (as every command's --json); --json PATH, "
                            "which wrote a file, is deprecated: use --json-out PATH")
    check.add_argument("--json-out", type=Path, metavar="PATH", help="also write the comparison as JSON here")
    check.set_defaults(func=_compile_check)


def _compile_check(args) -> int:
    if isinstance(args.json, str):  # the earlier --json PATH: still writes the file, text stays on stdout
        print(f"yolo-det compile-check: --json {args.json} is deprecated: use --json-out {args.json} to write the "
              "file (--json alone prints JSON on stdout, as every command's --json)", file=sys.stderr)
        args.json, args.json_out = False, args.json_out or Path(args.json)
    module_name, _, attr = args.factory.partition(":")
    try:
        shape = tuple(int(n) for n in args.input.split(","))
    except ValueError:
        print(f"yolo-det compile-check: --input {args.input!r} is not a shape like 2,3,64,64", file=sys.stderr)
        return EXIT_USAGE
    if not module_name or not attr:
        print(f"yolo-det compile-check: {args.factory!r} is not MODULE:FACTORY (e.g. mypkg.models:build)",
              file=sys.stderr)
        return EXIT_USAGE
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        print(f"yolo-det compile-check: cannot load {args.factory}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    import torch

    from ..proof import compiled_eager

    torch.manual_seed(0)
    model = factory()
    if not isinstance(model, torch.nn.Module):
        print(f"yolo-det compile-check: {args.factory} returned {type(model).__name__}, not an nn.Module",
              file=sys.stderr)
        return EXIT_USAGE
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(0)).to(args.device)
    result = compiled_eager.compare(model.to(args.device), x)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(verdicts.stamp(result, result["verdict"]), indent=2, default=str) + "\n")
    if args.json:
        return print_json(result, result["verdict"])
    print(compiled_eager.format_comparison(result, args.factory))
    return verdicts.exit_code(result["verdict"])
