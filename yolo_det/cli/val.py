"""``yolo-det val RUN_DIR``: re-run the validation a training logged and say whether it is the same number."""

from __future__ import annotations

import argparse
import sys

from .exit_codes import EXIT_OK, EXIT_USAGE
from .evidence import attach
from .output import print_json, print_result
from ..core import verdicts


def register(sub) -> None:
    """Add ``val`` to the ``yolo-det`` parser."""
    val = sub.add_parser(
        "val",
        help="re-run the validation a training run logged and compare it bit for bit with the record",
        description=(
            "Re-run the validation training logged at an epoch (default: the last), with the weights it\n"
            "validated (the full-precision EMA yolo-det keeps beside last.pt and best.pt; fp16 weights only\n"
            "where nothing else exists, saying so), the same settings and data, and compare predictions and\n"
            "metrics with the run's fingerprint log. Names what changed: data files, weights, environment,\n"
            "settings. YOLOv5-family runs of a patched train.py and Ultralytics runs (every task)."
        ),
        epilog="examples: yolo-det val runs/train/exp --epoch best\n"
               "          yolo-det val runs/train/exp --epoch best -- python val.py --weights runs/train/exp/weights/"
               "best.pt --data data.yaml\n"
               "          yolo-det val runs/detect/train --epoch best -- yolo val model=best.onnx data=data.yaml "
               "(an export: its source checkpoint and parity's causes, measured)\n"
               "exit codes: 0 identical bit for bit (with a command: it reproduces the logged number), 1 differs "
               "(what changed printed), 2 not a run / nothing run, 3 not proven: no fingerprint log, the re-run "
               "matches results.csv only to its printed digits (docs/exit-codes.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _options(val)
    # one remainder holds RUN_DIR and the command: argparse refuses `RUN_DIR -- CMD` with two positionals
    val.add_argument("cmd", nargs=argparse.REMAINDER, metavar="RUN_DIR [-- COMMAND ...]",
                     help="the training run's folder (runs/train/exp), then optionally -- and your own evaluation "
                          "command (python val.py ..., yolo val ...): list every setting that differs from the "
                          "training's validation and what aligning each one changes")
    val.set_defaults(func=_val)


def _options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--epoch", default="last", metavar="N|best|last",
                        help="which logged validation: last (default), best (best.pt's) or an epoch number")
    parser.add_argument("--log", metavar="JSONL", help="the run's fingerprint log (default: as determinism.json says)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--evaluator", choices=("release", "coco"), default="release",
                        help="coco: also score the re-run's predictions with the COCO API (faster-coco-eval and "
                             "pycocotools, annotations made from the YOLO labels) and explain the gap to the "
                             "release's number rule by rule (docs/coco.md)")
    parser.add_argument("--predictions", metavar="JSON", help="without RUN_DIR: score this predictions.json (COCO "
                        "results, as val.py --save-json / save_json=True write it) with the COCO API against --data")
    parser.add_argument("--data", metavar="YAML", help="with --predictions: the YOLO data YAML whose labels are the "
                        "ground truth (converted to COCO annotations on the fly)")
    parser.add_argument("--split", default="val", help="with --predictions: the split of --data (default: val)")
    parser.add_argument("--category-ids", default="auto", choices=("auto", "class", "class+1", "coco"),
                        help="with --predictions: the scheme of the file's category_id: class (the class index, "
                             "YOLOv5 and Ultralytics before 8.3.49 on custom data), class+1 (Ultralytics 8.3.49 on, "
                             "custom data), coco (COCO's category ids, what both write on COCO; with a coco_json, its "
                             "categories' ids); auto (default) finds it from the ids, file_name, the writer recorded "
                             "beside the file and the split, and refuses ids it cannot decide (docs/coco.md)")
    return parser


def _split(args: argparse.Namespace) -> list:
    """The command after ``--``; RUN_DIR and the options given after it (which the remainder swallowed) parsed
    into ``args`` (a usage error, exit 2, without RUN_DIR)."""
    rest = list(args.cmd)
    before, command = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    parser = _options(argparse.ArgumentParser(prog="yolo-det val"))
    parser.add_argument("run_dir", metavar="RUN_DIR", nargs="?" if args.predictions or args.data else None,
                        help="the training run's folder (runs/train/exp)")
    parsed = parser.parse_args(before)
    for key in ("epoch", "log", "evaluator", "predictions", "data", "split", "category_ids"):
        if getattr(parsed, key) != parser.get_default(key):
            setattr(args, key, getattr(parsed, key))
    args.json = args.json or parsed.json
    args.run_dir = parsed.run_dir
    return command


def _val(args: argparse.Namespace) -> int:
    from ..integrations.revalidation import RerunError, reproduce
    from ..evaluation.logged import NotARunError

    command = _split(args)
    if args.predictions or args.data:
        return _standalone(args)
    echo = (lambda text: print(text, file=sys.stderr)) if args.json else print
    try:
        if command:
            from ..integrations.revalidation import explain

            result = explain(args.run_dir, command, args.epoch, args.log, echo=echo, evaluator=args.evaluator)
            attach("val", result, [args.run_dir])  # not proven: a number missing, or equal numbers that say nothing
            if args.json:
                return print_result(result)
            print("\n".join(result.describe()))
            if result.coco is not None:
                from ..integrations.coco_eval import describe

                print("\n".join(describe(result.coco)))
            return result.exit_code
        verdict = reproduce(args.run_dir, args.epoch, args.log, echo=echo, evaluator=args.evaluator)
    except NotARunError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RerunError as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    attach("val", verdict, [args.run_dir])
    if args.json:
        print_result(verdict)
    else:
        print("\n".join(verdict.describe()))
        if verdict.coco is not None:
            from ..integrations.coco_eval import describe

            print("\n".join(describe(verdict.coco)))
    return verdict.exit_code


def _standalone(args: argparse.Namespace) -> int:
    """``yolo-det val --predictions P.json --data D.yaml``: the COCO API's numbers and the gap, no re-run."""
    from ..evaluation.coco import CocoError, agreement_text
    from ..evaluation.standalone import evaluate_file

    if args.run_dir:
        print(f"yolo-det: error: --predictions/--data score a predictions file without a run, but RUN_DIR "
              f"{args.run_dir} was given too: drop RUN_DIR, or drop --predictions/--data to re-run the run's "
              "validation", file=sys.stderr)
        return EXIT_USAGE
    if not (args.predictions and args.data):
        missing = "--data YAML (the YOLO data the predictions were made on)" if args.predictions else \
            "--predictions JSON (a COCO results list, as val.py --save-json writes it)"
        print(f"yolo-det: error: --predictions and --data go together: give {missing} as well", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = evaluate_file(args.predictions, args.data, args.split, args.category_ids)
    except (CocoError, OSError, ValueError, KeyError) as exc:
        print(f"yolo-det: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        return print_json(result, verdicts.NO_VERDICT)
    number = result["coco_metrics"]
    print(f"{result['predictions']} predictions on {result['images']} images: COCO API (pycocotools) mAP50 "
          f"{number['mAP50']:.6f} mAP50-95 {number['mAP50-95']:.6f}; faster-coco-eval "
          + agreement_text(result["agreement"]))
    ids = result["category_ids"]
    print(f"category ids: {ids['scheme']} = {ids['label']}; {ids['why']}")
    for release, chain in result["gap"].items():
        print(f"{release}'s rules on the same predictions: mAP50 {chain['start']['mAP50']:.6f} mAP50-95 "
              f"{chain['start']['mAP50-95']:.6f}; the steps to the COCO API:")
        for step in chain["steps"]:
            if not step["same"]:
                print(f"  {step['what']}: mAP50 {step['change']['mAP50']:+.6f} mAP50-95 "
                      f"{step['change']['mAP50-95']:+.6f}")
    return EXIT_OK
