"""The ``yolo-det`` command: parse, call the library, print, return an exit code.

One module per command or pair of commands: ``patch`` (apply-patch, revert-patch), ``core`` (run, env), ``verify``
(verify, diff), ``seeds`` (seeds, compare), ``val``, ``parity``, ``report``, ``attest`` (attest, attest verify,
reproduce), ``audit``, ``compile_check``,
``ultralytics`` (ultralytics train); ``output`` prints every command's ``--json`` document and ``evidence`` hands a
judging command's result to the trackers. Exit codes: see ``exit_codes`` (0 ok, 1 a finding, 2 usage error or
refusal, 3 not proven; 70 an unexpected internal error, never a finding's code).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import List, Optional

from .. import __version__
from ..core.mode import ConfigError
from ..core.processes import Terminated
from . import attest, audit, compile_check, core, parity, patch, report, seeds, ultralytics, val, verify
from .exit_codes import EPILOG, EXIT_INTERNAL, EXIT_USAGE

COMMAND_MODULES = (patch, core, verify, seeds, val, parity, report, attest, audit, compile_check, ultralytics)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="yolo-det",
        description="Reproducible YOLO training: determinism modes, a train.py patch, audits and run proofs.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"yolo-det {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("yolo-det: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"yolo-det: stopped ({exc}); the command's processes were stopped too", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # a bug: Python would exit 1, which a script reads as a finding (issue 59)
        traceback.print_exc(file=sys.stderr)
        print(f"yolo-det: internal error: {type(exc).__name__}: {exc}\nyolo-det {__version__} failed; this is a bug, "
              f"not a verdict: nothing was concluded (exit {EXIT_INTERNAL}). Please report it with the traceback "
              "above.", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
