"""``yolo-det seeds`` (one command under N seeds, the spread of its metrics) and ``yolo-det compare``
(two studies: a difference beyond seed noise or not)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Dict, List, Optional, Sequence

from ..core.mode import MODES, mode_arg
from ..core.roles import ROLES, VARY
from .verify import _child_env, _command, _error

from .exit_codes import EXIT_FINDING, EXIT_OK
from .evidence import attach
from .output import print_json, print_result
from ..core import verdicts


def register(sub) -> None:
    seeds = sub.add_parser(
        "seeds",
        help="run a training command under N seeds and report each metric's mean, spread and confidence interval",
        description=(
            "Run the training command N times under seeds trial_seeds(BASE, N), each with its fingerprint log\n"
            "(DIR/run<i>/), collect every run's metrics (results.csv columns and fitness, final and best epoch)\n"
            "and print per metric mean, standard deviation, min, max and the 95% interval of the mean. The seed\n"
            "reaches the command as `yolo-det run --seed` hands it on ({seed} and {run} in CMD are replaced for\n"
            "scripts that want them). DIR/study.json and DIR/study.csv are rewritten after each run; the same\n"
            "command again continues a stopped study with the seeds still missing.\n"
            "--vary init|order|augment changes one source of randomness and keeps the others at the first seed."
        ),
        epilog=("example: yolo-det seeds --n 5 --workdir studies/base -- python train.py --data data.yaml "
                "--epochs 10 --name s{run}\nexit codes: 0 done, 1 a run failed, 2 usage error or refusal (also: CMD without "
                "{run} under strict, an unknown --metric for --decompose)"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    seeds.add_argument("--n", type=int, default=None, metavar="N",
                       help="how many seeds (at least 2; required unless --status)")
    seeds.add_argument("--base-seed", type=int, default=0, metavar="S", help="the study's seed (default 0)")
    seeds.add_argument("--vary", choices=VARY, default="all",
                       help="which source of randomness changes between runs (default all)")
    seeds.add_argument("--decompose", action="store_true",
                       help="run one study per source (init, order, augment) and all, and report each source's "
                            "share of the variance (DIR/<source>/)")
    seeds.add_argument("--deterministic", type=mode_arg, choices=MODES, default="strict",
                       help="mode for the runs (default strict: the spread is then the seeds' alone)")
    seeds.add_argument("--workdir", default="yolo-det-seeds", metavar="DIR",
                       help="the study folder (default ./yolo-det-seeds/)")
    seeds.add_argument("--parallel", type=int, default=1, metavar="K",
                       help="run K seeds at a time on a work queue (a free slot starts the next seed), one visible "
                            "GPU each unless --gpus-per-seed says otherwise (CUDA_VISIBLE_DEVICES); default 1")
    seeds.add_argument("--gpus-per-seed", type=int, default=None, metavar="G",
                       help="GPUs in each slot (a seed that trains DDP over them starts torchrun in CMD); 0: CPU slots, "
                            "no GPU visible to the runs (default: 1 with --parallel K > 1)")
    seeds.add_argument("--executor", choices=("local", "slurm", "ray"), default="local",
                       help="where the seeds run: local (this machine's work queue; default), slurm (one SLURM job "
                            "array through submitit, at most --parallel seeds at once, --gpus-per-seed GPUs each, "
                            "requeued and resumed exactly on preemption or time-out) or ray (each seed a Ray "
                            "task with --gpus-per-seed GPUs; a local Ray cluster of --parallel CPUs unless "
                            "--ray-address names one)")
    seeds.add_argument("--slurm-partition", default=None, metavar="NAME",
                       help="the SLURM partition of the seeds' jobs (default: the cluster's default partition)")
    seeds.add_argument("--slurm-time", type=int, default=None, metavar="MIN",
                       help="each job's time limit in minutes (default 60); a seed that runs out is requeued and "
                            "resumes from its last checkpoint")
    seeds.add_argument("--slurm-config", default=None, metavar="YAML",
                       help="submitit SlurmExecutor parameters for the jobs (partition, time, mem, cpus_per_task, "
                            "qos, account, setup, additional_parameters, ...); the options above override it")
    seeds.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="an existing Ray cluster for --executor ray (auto, ray://host:10001)")
    seeds.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                       help="hand this environment variable on to the seeds although it is one of yolo-det's per-run "
                            "controls, which are withheld otherwise (YOLO_DET_RESUME, YOLO_DET_KILL_AT, "
                            "YOLO_DET_STOP_AFTER_EPOCH, YOLO_DET_CAPTURE*, YOLO_DET_VERIFY_RUN, YOLO_DET_RANK); "
                            "repeatable")
    seeds.add_argument("--metric", default="fitness", help="the metric --decompose and --plot report (default fitness)")
    seeds.add_argument("--json", action="store_true", help="print the study as JSON on stdout")
    seeds.add_argument("--plot", metavar="PNG", help="write a strip plot of --metric per seed to PNG")
    seeds.add_argument("--status", action="store_true",
                       help="print the study in --workdir (seeds done, failed, missing; where each ran) and run nothing")
    seeds.add_argument("cmd", nargs=argparse.REMAINDER, help="-- followed by the training command")
    seeds.set_defaults(func=_seeds)

    compare = sub.add_parser(
        "compare",
        help="compare two seed studies: the difference of means, its interval, a p-value and a verdict",
        description=(
            "Compare two studies made by `yolo-det seeds` (two configurations, models or code versions) on one\n"
            "metric: A minus B with the t-test's 95% interval, the p-value of the test that decides (exact\n"
            "sign-flip / permutation test up to 65,536 arrangements: 16 pairs, 9 vs 9 runs; seeded Monte-Carlo\n"
            "with its error bound above, never a t-test alone; paired on the seeds both ran where they hold at\n"
            "least half the runs) and the verdict 'A better beyond seed noise', 'B better beyond seed noise',\n"
            "'within seed noise', 'no effect: ... bit-identical seed by seed', 'too few seeds for a verdict' or\n"
            "'not proven: ...' (NaN/inf values, a constant metric, a Monte-Carlo p too close to 0.05)\n"
            "(losses: lower is better). Every other metric is shown as information (Holm-adjusted p), and\n"
            "set-up differences between the studies (dataset, mode, packages, ...) are named."
        ),
        epilog=("exit codes: 0 within seed noise or no effect, 1 a difference beyond seed noise, 2 usage error, "
                "3 too few seeds for a verdict or not proven (NaN/inf values, a constant metric, ...)"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("a", metavar="STUDY_A", help="a study folder (or its study.json)")
    compare.add_argument("b", metavar="STUDY_B", nargs="?", default=None,
                         help="another study folder (or its study.json); left out with --split-by")
    compare.add_argument("--split-by", choices=("hardware",), default=None,
                         help="compare one study's seeds on one kind of hardware (GPU model and count, or CPU) with "
                              "its seeds on the other: does the hardware move the metric beyond seed noise?")
    compare.add_argument("--metric", default="fitness",
                         help="the metric the verdict is about (default fitness; best:NAME for the best epoch)")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    compare.add_argument("--plot", metavar="PNG", help="write a strip plot of the metric per study to PNG")
    compare.set_defaults(func=_compare)


def _number(value: Optional[float]) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.6g}"


def _table(rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in rows]


def summary_lines(study: Any) -> List[str]:
    """The study's table: per metric mean, std, min, max and the 95% interval of the mean."""
    summary = study.summary()
    rows = [("metric", "mean", "std", "min", "max", "95% CI of the mean")]
    final_is_best = all(run.best == run.metrics for run in study.runs)
    n_runs = len(study.runs)
    for name, s in summary.items():
        if name.startswith("best:") and final_is_best and name != "best:fitness":
            continue  # the best epoch is the final one in every run: the same figures again
        ci = "-" if s.ci is None else f"[{_number(s.ci[0])}, {_number(s.ci[1])}]"
        rows.append((name, _number(s.mean), _number(s.std), _number(s.min), _number(s.max), ci))
    settings = study.settings
    head = (f"seed study: {len(study.runs)} of {len(study.seeds)} runs, vary {settings.get('vary')}, "
            f"base seed {settings.get('base_seed')}, mode {settings.get('mode')}; seeds "
            + ", ".join(str(r.seed) for r in study.runs))
    lines = [head] + _table(rows)
    if 0 < n_runs < 2:
        lines.append("note: one run has no spread: run at least two seeds for an interval")
    lines += _unresolved_notes(summary)
    lines += [f"warning: run {t['run']} (seed {t['seed']}) did not run as the study says: {'; '.join(t['why'])}; "
              "`yolo-det compare` gives no verdict on this study" for t in study.tainted()]
    missing = study.missing_logs()
    if missing:
        lines.append(f"note: the logs of run(s) {', '.join(str(r.index) for r in missing)} are missing "
                     f"({study.log_path(missing[0])}): the metrics above come from study.json; the runs' set-ups "
                     "cannot be checked")
    return lines


def _unresolved_notes(summary: Dict[str, Any]) -> List[str]:
    """One note per metric whose runs are all equal: not a spread of 0, a spread its resolution cannot show."""
    return [f"note: {name}: all {s.n} runs equal ({_number(s.mean)}): their spread is not resolved at this metric's "
            f"resolution (~{_number(s.resolution)}), so no interval (not a spread of 0); more seeds or a finer "
            "metric resolve it" for name, s in summary.items() if not s.resolved]


def _seeds(args) -> int:
    from ..studies.study import StudyError, decompose, device_slots, plan, run_study, share_first_run
    from ..studies.progress import Board
    from ..proof.verify import RunFailedError, VerifyError

    if args.status:
        return _status(args)
    if args.n is None:
        return _error("seeds", "--n N is required (how many seeds); usage: yolo-det seeds --n N -- CMD ...")
    cmd = _command(args)
    if not cmd:
        return _error("seeds", "no training command given; usage: yolo-det seeds --n N -- CMD ...")
    if args.decompose and args.vary != "all":
        return _error("seeds", "--decompose runs every --vary itself; leave --vary out")
    if args.vary != "all" and args.deterministic == "off":
        return _error("seeds", f"--vary {args.vary} needs yolo-det's per-sample streams, which run under strict "
                               "and warn only")
    if args.parallel < 1:
        return _error("seeds", f"--parallel must be at least 1, got {args.parallel}")
    env = _child_env()
    try:
        if args.executor == "local" and (args.parallel > 1 or args.gpus_per_seed is not None):
            device_slots(args.parallel, env, gpus_per_seed=args.gpus_per_seed)  # refuse before any run starts
        plan(args.base_seed, args.n, args.vary)
        slurm = _slurm_parameters(args)
        if not any("{run}" in str(a) for a in cmd):
            shared = ("CMD has no {run}: if it names its output folder (--name exp, name=exp with --exist-ok or "
                      "exist_ok=True) every run writes the same folder and a run's metrics may be another's. Put {run} "
                      "in the output name (--name exp{run}, name=exp{run})")
            if args.deterministic == "strict":
                return _error("seeds", shared + " (refused under strict; under --deterministic warn this is a warning)")
            print(f"yolo-det seeds: warning: {shared}; each run's folder is checked to be its own", file=sys.stderr)
        varies = list(VARY) if args.decompose else [args.vary]
        studies = {}
        for vary in varies:
            folder = f"{args.workdir}/{vary}" if args.decompose else args.workdir
            if args.decompose and vary != "all":
                share_first_run(studies["all"], folder)  # run 1 is the plain run of the first seed in every study
            board = Board(args.n, label=f"seeds ({vary})" if args.decompose else "seeds", folder=folder,
                          slots=args.parallel)
            try:
                studies[vary] = run_study(cmd, args.n, args.base_seed, vary, folder, args.deterministic, env=env,
                                          progress=_progress, parallel=args.parallel,
                                          gpus_per_seed=args.gpus_per_seed, executor=args.executor,
                                          ray_address=args.ray_address, events=board.event, slurm=slurm,
                                          pass_env=args.pass_env)
            finally:
                board.close()
    except RunFailedError as exc:
        print(f"yolo-det seeds: error: {exc}\n{exc.tail}", file=sys.stderr)
        print("yolo-det seeds: the seeds finished so far are kept; run the same command again to continue",
              file=sys.stderr)
        return EXIT_FINDING
    except (StudyError, VerifyError) as exc:
        return _error("seeds", str(exc))
    try:
        parts = decompose(studies, args.metric) if args.decompose else None
    except StudyError as exc:
        return _error("seeds", f"{exc} (the studies are kept: run again with --metric NAME to decompose)")
    for study in studies.values():  # a study claims nothing: its summary goes to each seed's run
        attach("seeds", verdicts.Document(verdicts.NO_VERDICT, _study_json(study)), [r.run_dir for r in study.runs])
    if args.json:
        out: Dict[str, Any] = {vary: _study_json(s) for vary, s in studies.items()} if args.decompose \
            else _study_json(studies[args.vary])
        if parts is not None:
            out = {"studies": out, "decomposition": parts}
        print_json(out, verdicts.NO_VERDICT)
    else:
        for vary, study in studies.items():
            print("\n".join(summary_lines(study)))
            print(f"study written to {study.path}")
        if parts is not None:
            print("\n".join(decomposition_lines(parts)))
    if args.plot:
        return _plot("seeds", {v: s for v, s in studies.items()}, args.metric, args.plot)
    return EXIT_OK


def _slurm_parameters(args) -> Optional[Dict[str, Any]]:
    """submitit's SlurmExecutor parameters from --slurm-config and the options (None unless --executor slurm)."""
    from ..studies.study import StudyError

    slurm_options = [args.slurm_partition, args.slurm_time, args.slurm_config]
    if args.executor != "slurm":
        if any(o is not None for o in slurm_options):
            raise StudyError("--slurm-partition, --slurm-time and --slurm-config need --executor slurm")
        return None
    from ..studies import slurm

    try:
        params = slurm.parameters(args.parallel, args.gpus_per_seed, args.slurm_partition, args.slurm_time,
                                  slurm.load_config(args.slurm_config))
        slurm.check_cluster()  # before the study folder is made
        return params
    except slurm.SlurmError as exc:
        raise StudyError(str(exc)) from None


def _status(args) -> int:
    """``seeds --status``: the study in ``--workdir`` as it stands (nothing runs)."""
    from ..studies.study import StudyError, load_study

    try:
        study = load_study(args.workdir)
    except (StudyError, OSError, ValueError) as exc:
        return _error("seeds", f"no study to show in {args.workdir}: {exc}")
    total = len(study.seeds)
    failed = list(study.failed)
    state = {"done": len(study.runs), "failed": len(failed), "missing": total - len(study.runs) - len(failed),
             "total": total}
    if args.json:
        return print_json({**_study_json(study), "state": state}, verdicts.NO_VERDICT)
    print(f"{study.path}: {state['done']}/{total} seeds done, {state['failed']} failed, {state['missing']} not run; "
          "run the same command again to continue the missing and failed seeds")
    tainted = {t["run"]: t["why"] for t in study.tainted()}
    if tainted:
        print(f"warning: {len(tainted)} of {total} seeds did not run as the study says (mode "
              f"{study.settings.get('mode')}, exact resumes): `yolo-det compare` gives no verdict on this study")
    for run in study.runs:
        where = run.placement or {}
        extra = f", SLURM job {where['job']}" if where.get("job") else ""
        if where.get("preemptions"):
            extra += f", requeued {where['preemptions']} time(s)"
        if where.get("resumed"):
            extra += ", resumed after epoch(s) " + ", ".join(str(r.get("epochs_done", "?")) for r in where["resumed"])
        why = tainted.get(run.index)
        if why:
            extra += "; NOT AS THE STUDY SAYS: " + "; ".join(why)
        print(f"  run {run.index} seed {run.seed}: done on {where.get('host', '?')} ({where.get('executor', '?')}, "
              f"devices {where.get('devices') or 'as started'}{extra})")
    for item in failed:
        print(f"  run {item['run']} seed {item['seed']}: failed: {item['error']}")
    return EXIT_OK


def _study_json(study: Any) -> Dict[str, Any]:
    data = study.to_dict()
    return {"study": str(study.path), "settings": data["settings"], "runs": data["runs"], "failed": data["failed"],
            "tainted": data["tainted"], "summary": data["summary"]}


def decomposition_lines(parts: Dict[str, Any]) -> List[str]:
    """Each source's standard deviation, variance with its interval, and share of the summed variance with
    its interval (or why there is none)."""
    level = f"{100 * parts.get('confidence', 0.95):.0f}%"
    rows = [("source", "runs", "std", "variance", f"{level} CI", "share", f"share {level} CI")]
    for vary, row in parts["sources"].items():
        vci = "-" if row.get("variance_ci") is None else \
            f"[{_number(row['variance_ci'][0])}, {_number(row['variance_ci'][1])}]"
        sci = "-" if row.get("share_ci") is None else \
            f"[{100 * row['share_ci'][0]:.0f}%, {100 * row['share_ci'][1]:.0f}%]"
        if vary not in ROLES:
            share, sci = "(all at once)", ""
        elif row.get("resolved") is False:
            share = "not resolved"
        elif row["share"] is None:
            share = "-"
        else:
            share = f"{100 * row['share']:.0f}%"
        rows.append((vary, str(row["n"]), _number(row["std"]), _number(row["variance"]), vci, share, sci))
    lines = [f"variance of {parts['metric']} by source of randomness:"] + _table(rows)
    if parts.get("missing"):
        lines.append(f"note: no variance for {', '.join(parts['missing'])} (fewer than two runs with "
                     f"{parts['metric']}): no shares, since the others alone would not sum to the whole")
    else:
        lines.append("note: shares treat the sources as independent; their intervals hold together "
                     f"({level}, Bonferroni over the three chi-square intervals of the variances)")
    if parts.get("unresolved"):
        lines.append(f"note: {', '.join(parts['unresolved'])}: every run equal, so the variance is not resolved at "
                     f"this metric's resolution (~{_number(parts.get('resolution'))}, the smallest gap between its "
                     "values): not 0, but below what that resolution shows; its interval runs from 0 to the largest "
                     "variance a spread within one step could hide, and it has no share, only a share interval")
    return lines


def _progress(message: str) -> None:
    print(f"yolo-det seeds: {message}", file=sys.stderr, flush=True)


def _plot(command: str, studies: Dict[str, Any], metric: str, path: str) -> int:
    from ..proof.plot import PlotError
    from ..studies.plot import plot_studies

    try:
        written = plot_studies(studies, metric, path)
    except PlotError as exc:
        return _error(command, str(exc))
    print(f"yolo-det {command}: plot written to {written}", file=sys.stderr)
    return EXIT_OK


def _compare(args) -> int:
    from ..studies.study import StudyError, load_study
    from ..studies.compare import HARDWARE_CAUSES, compare_studies, split_by_hardware

    if (args.b is None) == (args.split_by is None):
        return _error("compare", "give two studies (STUDY_A STUDY_B), or one study with --split-by hardware")
    try:
        if args.split_by:
            a, b = split_by_hardware(load_study(args.a))
            print(f"yolo-det compare: A = the seeds on {a.settings['hardware']}, B = the seeds on "
                  f"{b.settings['hardware']}", file=sys.stderr)
            result = compare_studies(a, b, args.metric, expected=HARDWARE_CAUSES)
        else:
            a, b = load_study(args.a), load_study(args.b)
            result = compare_studies(a, b, args.metric)
    except StudyError as exc:
        return _error("compare", str(exc))
    attach("seeds_compare", result, [run.run_dir for study in (a, b) for run in study.runs])
    if args.json:
        print_result(result)
    else:
        print("\n".join(comparison_lines(result)))
    if args.plot:
        failed = _plot("compare", {"A": a, "B": b}, args.metric, args.plot)
        if failed:
            return failed
    return result.exit_code


def _tainted_lines(tainted: Sequence[Dict[str, Any]]) -> List[str]:
    """The verdict withheld, first: each seed that did not run as its study says, and why."""
    if not tainted:
        return []
    lines = [f"NOT PROVEN: {len(tainted)} seed(s) did not run as its study says, so the spreads below are not the "
             "studies' modes' and no verdict is given (the statistics alone are shown):"]
    lines += [f"  study {t['study']} run {t['run']} seed {t['seed']}: {'; '.join(t['why'])}" for t in tainted]
    lines.append("  for a verdict, run the study again in a new --workdir without what tainted them "
                 "(`yolo-det seeds --status` lists it)")
    return lines


def _sizes(d: Any, paired: bool) -> str:
    """The runs the test used: ``N pairs`` or ``N_A vs N_B runs``."""
    return f"{d.n} pairs" if paired else f"{d.n_a} vs {d.n_b} runs"


def comparison_lines(result: Any) -> List[str]:
    """The verdict on the chosen metric, then every metric's figures, then notes and set-up differences."""
    main = result.metric
    d = main.difference
    ci = "-" if d.ci is None else f"[{_number(d.ci[0])}, {_number(d.ci[1])}]"
    lines = _tainted_lines(result.tainted)
    bound = f" in [{_number(d.p_low)}, {_number(d.p_high)}]" if d.draws else ""
    lines += [f"{main.metric}: {main.said} (A - B = {_number(d.difference)}, t-test 95% CI {ci}, "
              f"p = {_number(d.p_value)}{bound}, {d.test}, {_sizes(d, result.paired)})"]
    if d.why:
        lines.append(f"  decided by: {d.why}")
    if main.verdict == verdicts.TOO_FEW:
        lines.append(f"  no outcome of {d.test} with {_sizes(d, result.paired)} could reach p < 0.05: run more "
                     "seeds (yolo-det seeds --n with a larger N continues a study)")
    rows = [("metric", "mean A", "mean B", "A - B", "t-test 95% CI", "p", "p (Holm)", "verdict")]
    for m in [main] + result.others:
        mci = "-" if m.difference.ci is None else f"[{_number(m.difference.ci[0])}, {_number(m.difference.ci[1])}]"
        rows.append((m.metric, _number(m.a.mean), _number(m.b.mean), _number(m.difference.difference), mci,
                     _number(m.difference.p_value), "(primary)" if m is main else _number(m.difference.p_adjusted),
                     m.said))
    lines += _table(rows)
    lines += [f"note: {n}" for n in result.notes]
    if result.setup:
        lines.append("the studies' set-ups also differ (is that what you meant to compare?):")
        lines += [f"  [{c.cls}] {c.message}" for c in result.setup]
    return lines
