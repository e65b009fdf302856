"""``yolo-det report INPUT... [--out report.html]``: one self-contained HTML page of what the inputs prove."""

from __future__ import annotations

import argparse
import sys

from .exit_codes import EXIT_OK, EXIT_USAGE


def register(sub) -> None:
    """Add ``report`` to the ``yolo-det`` parser."""
    p = sub.add_parser(
        "report",
        help="write one self-contained HTML page of what runs, studies, parity and COCO-gap results prove",
        description=(
            "Read each input (told apart by its content) and write one HTML page that needs nothing at view time\n"
            "(inline styles, SVG charts and script; no URL is fetched):\n"
            "  a training run folder or fingerprint log: its timeline (steps, epochs, validations, resume points),\n"
            "    mode, seeds, environment and alerts; two or more runs: the first divergence from the first run\n"
            "    (step, kind, tensor) or 'identical', as yolo-det diff decides it;\n"
            "  a seed study folder (study.json): each seed's value, the mean and its 95%% interval; two studies:\n"
            "    the comparison's verdict, as yolo-det compare decides it;\n"
            "  JSON saved from --json: yolo-det parity (the parity table), yolo-det val --evaluator coco or\n"
            "    --predictions (the COCO gap as a waterfall), diff / verify / locate (the divergence with its op),\n"
            "    seeds, compare. See docs/report.md."
        ),
        epilog="example: yolo-det report runs/train/exp runs/train/exp2 seeds/ parity.json gap.json --out report.html\n"
               "exit codes: 0 written, 2 an input is missing or none of the above, or --out cannot be written "
               "(nothing written)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="a run folder, fingerprint log, study folder or saved "
                                                              "--json output (content decides which)")
    p.add_argument("--out", metavar="HTML", help="the page to write (default: report.html in the current folder; a "
                                                 "folder gets report.html in it)")
    p.add_argument("--metric", metavar="NAME", help="the seed studies' metric (default: fitness, else the first "
                                                    "metric they share; best:NAME for the best epoch)")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from ..reports.inputs import ReportInputError
    from ..reports.page import ReportError, write_report

    try:
        path = write_report(args.inputs, args.out, args.metric)
    except (ReportInputError, ReportError) as exc:
        print(f"yolo-det report: error: {exc} (nothing written)", file=sys.stderr)
        return EXIT_USAGE
    print(f"yolo-det report: wrote {path.resolve()}")
    return EXIT_OK
