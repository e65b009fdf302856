"""``yolo-det verify`` (run training N times, compare fingerprints) and ``yolo-det diff`` (compare two logs)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .exit_codes import EXIT_USAGE as EXIT_ERROR
from .evidence import attach
from .output import print_result
from ..core import verdicts

_EXIT_HELP = ("exit codes: 0 identical, 1 diverged (first divergence printed), 2 error: a run failed, "
              "a log is missing/truncated/corrupt, or the logs cannot be compared (e.g. different lengths), "
              "3 not proven: nothing differs in what was compared, but what decides (steps and tensors, weights, "
              "rows) was not there to compare (docs/exit-codes.md)")


def register(sub) -> None:
    """Add ``verify`` and ``diff`` to the ``yolo-det`` parser."""
    verify = sub.add_parser(
        "verify",
        help="run a training command N times with per-step fingerprints and prove the runs bit-identical",
        description=(
            "Run the training command N times with YOLO_DET_FINGERPRINT set, then compare the runs\n"
            "step by step: print 'identical: S steps, T tensors', or the first step, kind\n"
            "(data/loss/grad/lr/param/ema/rng/final) and tensor where they diverge.\n"
            "'{run}' in the command becomes the run number. The command must use yolo-det\n"
            "(a train.py patched with yolo-det apply-patch, or a script calling yolo_det.configure())."
        ),
        epilog=("example: yolo-det verify --runs 2 -- python train.py --data data.yaml --epochs 1 "
                "--name verify{run}\n" + _EXIT_HELP),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("--runs", type=int, default=2, metavar="N", help="how many runs (default 2, at least 2)")
    verify.add_argument("--workdir", default="yolo-det-verify", metavar="DIR",
                        help="where each run's log and output go (default ./yolo-det-verify/)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    verify.add_argument("--plot", metavar="PNG", help="write loss curves and differing tensors per step to PNG")
    verify.add_argument("--resume-at", type=int, metavar="K", default=None,
                        help="exact-resume check: run 1 uninterrupted; every other run stops cleanly after epoch K "
                             "(its checkpoint written), is resumed with the release's own resume command "
                             "(YOLOv5 --resume <run>/weights/last.pt, Ultralytics resume=True) and compared with "
                             "run 1: fingerprints, final full-precision state and results.csv")
    verify.add_argument("--locate", action="store_true",
                        help="when runs diverge at step k, re-run both with op capture for step k and name the "
                             "first op (module, phase, kernel) whose output differs for identical inputs")
    verify.add_argument("cmd", nargs=argparse.REMAINDER, help="-- followed by the training command")
    verify.set_defaults(func=_verify)

    locate = sub.add_parser(
        "locate",
        help="for two logs that diverge, re-run their command with op capture and name the op and module",
        description=("Compare two fingerprint logs; if they diverge at step k and their set-ups do not explain\n"
                     "it, re-run the runs (CMD, '{run}' filled in with each log's run number) with op capture\n"
                     "for step k only, and name the first op whose inputs are identical and outputs differ."),
        epilog="example: yolo-det locate w/run1/fingerprint.jsonl w/run2/fingerprint.jsonl -- python train.py "
               "--name v{run}\n" + _EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    locate.add_argument("a", metavar="A.jsonl", help="first log")
    locate.add_argument("b", metavar="B.jsonl", help="second log")
    locate.add_argument("--workdir", default="yolo-det-verify", metavar="DIR",
                        help="where the re-runs' captures go (DIR/locate/run<i>/, default ./yolo-det-verify/)")
    locate.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    locate.add_argument("cmd", nargs=argparse.REMAINDER, help="-- followed by the training command")
    locate.set_defaults(func=_locate)

    diff = sub.add_parser(
        "diff",
        help="compare two fingerprint logs (first step and tensor where they diverge), two checkpoints (.pt), "
             "two run folders (releases, settings, data, metrics; also runs made without yolo-det) "
             "or two hyperparameter search folders (--evolve, tune)",
        description=("Compare two fingerprint logs written anywhere (e.g. on two machines), or two YOLOv5 /\n"
                     "Ultralytics checkpoints: every tensor (model, EMA, optimizer state) bit for bit and the\n"
                     "training values (epoch, best_fitness, ...); date, git, wandb id, options and paths are\n"
                     "listed when they differ but not judged."),
        epilog=("examples: yolo-det diff run1/fingerprint.jsonl run2/fingerprint.jsonl\n"
                "          yolo-det diff runs/a/weights/best.pt runs/b/weights/best.pt\n"
                "          yolo-det diff runs/detect/train runs/detect/train2   (run folders: args.yaml / opt.yaml,\n"
                "                      hyp.yaml, data, results.csv, weights)\n"
                "          yolo-det diff runs/evolve/a runs/evolve/b   (evolve.csv / tune_results rows)\n" + _EXIT_HELP),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument("a", metavar="A", help="first log (.jsonl), checkpoint (.pt) or run / search folder")
    diff.add_argument("b", metavar="B", help="second log (.jsonl), checkpoint (.pt) or run / search folder")
    diff.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    diff.add_argument("--plot", metavar="PNG", help="write loss curves and differing tensors per step to PNG")
    diff.set_defaults(func=_diff)


def _error(command: str, message: str) -> int:
    print(f"yolo-det {command}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _plot(command: str, comparison, path: Optional[str], labels: Sequence[str]) -> Optional[int]:
    if not path:
        return None
    from ..proof.plot import PlotError, plot_comparison

    try:
        written = plot_comparison(comparison, path, labels)
    except PlotError as exc:
        return _error(command, str(exc))
    print(f"yolo-det {command}: plot written to {written}", file=sys.stderr)
    return None


def _command(args) -> List[str]:
    cmd = list(args.cmd)
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _verify(args) -> int:
    from ..proof.verify import verify

    cmd = _command(args)
    if not cmd:
        return _error("verify", "no training command given; usage: yolo-det verify [--runs N] -- CMD ...")
    if args.runs < 2:
        return _error("verify", f"--runs must be at least 2, got {args.runs}")

    def progress(message: str) -> None:
        print(f"yolo-det verify: {message}", file=sys.stderr, flush=True)

    if args.resume_at is not None:
        return _verify_resume(args, cmd, progress)
    result, failed = _runs(lambda: verify(cmd, runs=args.runs, workdir=args.workdir, progress=progress,
                                          env=_child_env()))
    if failed is not None:
        return failed
    if result.searches:
        return _report_searches(result, args)
    comparison = result.comparison
    other = result.comparisons.index(comparison) + 2
    labels = ("run 1", f"run {other}")
    if args.locate and comparison.first_divergence is not None:
        outputs = [run.output for run in result.runs]
        _run_locate("verify", cmd, comparison, (1, other), args.workdir, progress, outputs)
    if args.json:
        print_result(result)
    else:
        print("logs:")
        for run in result.runs:
            print(f"  run {run.index}: {run.log}")
    failed = _report("verify", result, comparison, args, labels)
    _report_artifacts(result, args)
    attach("verify", result, [run.log for run in result.runs])
    return failed if failed is not None else result.exit_code


def _report_searches(result, args) -> int:
    """A hyperparameter search: its generations (run 1 vs each other run) decide (``VerifyResult.verdict``)."""
    worst = result.search
    other = result.searches.index(worst) + 2
    if args.json:
        return print_result(result)
    print("\n".join(worst.describe(labels=("run 1", f"run {other}"))))
    if worst.identical and not result.identical:
        print("diverged: the searches' rows are identical, the last trial's fingerprint log or files are not "
              f"(compare them with yolo-det diff; logs in {args.workdir})")
    return result.exit_code


def _report_artifacts(result, args) -> None:
    """Checkpoints and results.csv of run 1 vs the others, printed (a difference is in ``result.verdict``)."""
    shown = result.artifacts_differ or (result.artifacts[0] if result.artifacts else None)
    if shown is None or args.json:
        return
    index = result.artifacts.index(shown) + 2
    print(f"run files (run 1 vs run {index}):")
    print("\n".join(f"  {line}" for line in shown.describe()))
    if not shown.proven and not shown.differs:
        print("  (the verdict rests on the fingerprint logs; no checkpoint file was there to compare as well)")
    logs = result.comparison.verdict if result.comparisons else None
    if result.artifacts_differ is not None and logs != verdicts.DIFFERS:
        if logs == verdicts.IDENTICAL:
            print("diverged: the training steps and validations are identical, the files the runs wrote are not")
        else:
            print("diverged: the files the runs wrote differ" + (f" (the logs: {logs})" if logs else ""))


def _verify_resume(args, cmd: List[str], progress) -> int:
    """``verify --resume-at K``: uninterrupted vs stopped-and-resumed runs."""
    from ..proof.resume_at import verify_resume

    if args.resume_at < 1:
        return _error("verify", f"--resume-at must be an epoch count >= 1, got {args.resume_at}")
    result, failed = _runs(lambda: verify_resume(cmd, args.resume_at, runs=args.runs, workdir=args.workdir,
                                                 progress=progress, env=_child_env()))
    if failed is not None:
        return failed
    worst = result.worst
    if args.json:
        print_result(result)
    else:
        print("\n".join(result.describe()))
    failed = _plot("verify", worst.comparison, args.plot, ("run 1", f"run {worst.index}"))
    if failed is not None:
        return failed
    if result.verdict == verdicts.INCONCLUSIVE:
        _error("verify", f"cannot decide: {worst.comparison.problem}")
    return result.exit_code


def _run_locate(command: str, cmd: List[str], comparison, runs, workdir: str, progress, outputs=()) -> None:
    """Locate the divergence (re-running when needed); a failure becomes a note, the divergence stands."""
    from ..proof.locate import locate_runs
    from ..proof.verify import RunFailedError, VerifyError
    from ..strict.optable import cuda_kernel_info

    try:
        locate_runs(cmd, comparison, runs, workdir, kernel_info=cuda_kernel_info, progress=progress, outputs=outputs,
                    env=_child_env())
    except RunFailedError as exc:
        comparison.notes.append(f"--locate: the re-run failed: {exc}")
        if exc.tail:
            print(f"--- last lines of the re-run of run {exc.run} ---\n{exc.tail}\n---", file=sys.stderr)
    except VerifyError as exc:
        comparison.notes.append(f"--locate: {exc}")


def _locate(args) -> int:
    from ..proof.compare import compare_logs
    from ..proof.locate import runs_of
    from ..record.log import FingerprintError, read_log

    cmd = list(args.cmd)
    if "--" in cmd and cmd[0] != "--":  # options written after the logs: A B --workdir W -- CMD
        options, cmd = cmd[:cmd.index("--")], cmd[cmd.index("--"):]
        extra = argparse.ArgumentParser(prog="yolo-det locate", add_help=False)
        extra.add_argument("--workdir", default=args.workdir)
        extra.add_argument("--json", action="store_true", default=args.json)
        try:
            parsed, unknown = extra.parse_known_args(options)
        except SystemExit:
            return _error("locate", f"bad options before '--': {' '.join(options)}")
        if unknown:
            return _error("locate", f"unknown options before '--': {' '.join(unknown)}")
        args.workdir, args.json = parsed.workdir, parsed.json
    cmd = cmd[1:] if cmd and cmd[0] == "--" else cmd
    if not cmd:
        return _error("locate", "no training command given; usage: yolo-det locate A.jsonl B.jsonl -- CMD ...")
    try:
        comparison = compare_logs(read_log(args.a), read_log(args.b))
    except FingerprintError as exc:
        return _error("locate", str(exc))

    def progress(message: str) -> None:
        print(f"yolo-det locate: {message}", file=sys.stderr, flush=True)

    if comparison.first_divergence is not None:
        _run_locate("locate", cmd, comparison, runs_of(args.a, args.b), args.workdir, progress)
    if args.json:
        print_result(comparison)
    args.plot = None
    failed = _report("locate", comparison, comparison, args, ("A", "B"))
    return failed if failed is not None else comparison.exit_code


def _runs(call: Callable[[], Any]) -> Tuple[Any, Optional[int]]:
    """``(call(), None)``, or ``(None, exit code)`` after printing why the runs could not be compared
    (a run that failed, with the last lines of its output)."""
    from ..record.log import FingerprintError
    from ..proof.verify import RunFailedError, VerifyError

    try:
        return call(), None
    except RunFailedError as exc:
        print(f"yolo-det verify: error: {exc}", file=sys.stderr)
        if exc.tail:
            print(f"--- last lines of run {exc.run}'s output ---\n{exc.tail}\n---", file=sys.stderr)
        return None, EXIT_ERROR
    except (VerifyError, FingerprintError) as exc:
        return None, _error("verify", str(exc))


def _child_env() -> Dict[str, str]:
    """The runs' environment: this one plus the bootstrap ``yolo-det run`` gives, so that
    ``yolo-det verify -- yolo train ...`` (Ultralytics without code changes) trains under yolo-det too."""
    from ..integrations import launch

    env = dict(os.environ)
    env.update(launch.child_env(env))
    return env


def _report(command: str, result, comparison, args, labels: Sequence[str]) -> Optional[int]:
    """Print the log comparison (text unless --json) and write the plot; the exit code where the plot failed
    (else the caller returns ``result.exit_code``). Logs that cannot be compared are said on stderr, as an error
    where they decide the result (``inconclusive``), in the text where something else decided it."""
    decides = result.verdict == verdicts.INCONCLUSIVE
    if not args.json:
        lines = comparison.describe(labels=labels)
        if comparison.verdict != verdicts.INCONCLUSIVE or not decides:
            print("\n".join(lines))
        else:
            print("\n".join(line for line in lines if line.startswith("note:")))
    failed = _plot(command, comparison, args.plot, labels)
    if decides:
        _error(command, f"cannot decide: {comparison.problem}")
    return failed


def _diff(args) -> int:
    from ..proof.checkpoint_format import looks_like_checkpoint
    from ..proof.compare import compare_logs
    from ..proof.inputs import mismatch
    from ..record.log import FingerprintError

    wrong = mismatch(args.a, args.b)
    if wrong:
        return _error("diff", wrong)
    if looks_like_checkpoint(args.a) or looks_like_checkpoint(args.b):
        return _diff_checkpoints(args)
    if os.path.isdir(args.a) and os.path.isdir(args.b):
        from ..proof.run_dirs import is_run_dir
        from ..proof.search import is_search

        if not (is_search(args.a) and is_search(args.b)) and is_run_dir(args.a) and is_run_dir(args.b):
            return _diff_run_dirs(args)
        return _diff_searches(args)
    try:
        comparison = compare_logs(args.a, args.b)  # streams both logs: memory stays bounded
    except FingerprintError as exc:
        return _error("diff", str(exc))
    attach("diff", comparison, [args.a, args.b])
    if args.json:
        print_result(comparison)
    failed = _report("diff", comparison, comparison, args, ("A", "B"))
    return failed if failed is not None else comparison.exit_code


def _diff_results(args, compare, error, plot: Optional[str] = None) -> int:
    """Compare ``args.a`` and ``args.b`` with ``compare``; print ``describe()`` or JSON; 0 identical, 1 differ,
    3 not proven (nothing differs, what decides was not compared), 2 when ``error`` is raised (or ``--plot``
    was given where ``plot`` says why it does not apply)."""
    if args.plot and plot:
        return _error("diff", plot)
    try:
        result = compare(args.a, args.b)
    except error as exc:
        return _error("diff", str(exc))
    attach("diff", result, [args.a, args.b])
    if args.json:
        return print_result(result)
    print("\n".join(result.describe()))
    return result.exit_code


def _diff_run_dirs(args) -> int:
    """``yolo-det diff RUN_A RUN_B``: two run folders (also made without yolo-det), causes first."""
    from ..proof.run_dirs import RunDirError, compare_runs

    return _diff_results(args, compare_runs, RunDirError,
                         "--plot draws fingerprint logs; give the runs' fingerprint.jsonl files to plot")


def _diff_searches(args) -> int:
    """``yolo-det diff DIR_A DIR_B``: two hyperparameter search folders, generation by generation."""
    from ..proof.search import SearchError, compare_searches

    return _diff_results(args, compare_searches, SearchError)


def _diff_checkpoints(args) -> int:
    """``yolo-det diff A.pt B.pt``: 0 identical tensors and values, 1 differ, 2 not comparable, 3 no tensors."""
    from ..proof.checkpoint import CheckpointError, compare_checkpoints

    return _diff_results(args, compare_checkpoints, CheckpointError,
                         "--plot draws fingerprint logs; it does not apply to checkpoints")
