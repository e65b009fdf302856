"""From "step and tensor" to "op and module": where and why two runs part.

:func:`locate_runs` takes a comparison that diverged at step k and, unless the set-up already
explains it (:mod:`.causes`) or the step's own digests do (its batch or RNG states differ),
re-runs both runs with op capture on for step k only (:mod:`.capture`), twice: a first pass whose
pointwise ops, copies and views get digests derived from their inputs' (cheap) suggests the op,
and a confirming pass reads every input and output of the ops around it -- the op and every
derived op its inputs come from, or the whole step when the first pass saw no difference.
:func:`compare_captures` on the confirming pass then names the first op whose real inputs are
bit-identical in both runs and whose real outputs differ: its module path, phase, overload name
and, through ``kernel_info`` (the op table), its CUDA kernel and whether that kernel is known to
be nondeterministic. Ops that only alias memory (views, ``set_``, resizes, ``empty``), ops with no
tensor inputs, random ops whose generator state was the same, and ops that ran before the step's
first batch (the previous step's EMA update, the previous epoch's validation) are never named.

A step whose input batch differs (cause ``data``) is re-run the same way with only the loader's
fetches of that step captured (:func:`locate_data`): the op named is one of the dataset or the
collate function (phase ``data``), when the loader fetches in the training process; a loader with
worker processes fetches where no capture reaches, and the location says to re-run with none.

Captures are aligned by (phase, module path, op, how many times that op ran in that module so
far), not by global position: ops outside the model (loader traffic, logging) may differ in
number between runs.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..record.capture import ALIAS_OPS, COMPILED_OPS, OUTSIDE, PATH_VAR, READ_VAR, STEP_VAR, THROUGH_VAR, CaptureError, read_capture
from .compare import Comparison
from ..record.log import ROOT_NAME, KINDS, FingerprintError, read_log

#: ``kernel_info(op)`` -> (CUDA kernel name or None, known nondeterministic on CUDA for this torch).
KernelInfo = Callable[[str], Tuple[Optional[str], bool]]

#: Ops whose output depends on a random generator's state, not only on their inputs.
RANDOM_OPS = frozenset({
    "bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "normal", "normal_", "uniform_", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_",
    "multinomial", "native_dropout", "dropout", "rrelu_with_noise", "_fused_dropout", "poisson",
})
COLLECTIVE_PREFIXES = ("c10d.", "_c10d_functional.", "c10d_functional.")
#: How many ops of a compiled graph a location prints (all are in its dict).
GRAPH_LINES = 25
#: Inductor's caches are off in the re-runs of a compiled run: each graph is lowered again (the same kernels,
#: deterministic code generation) so that the session's compile guard can describe it for the capture.
NO_CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
#: First-divergence kinds the step's own digests explain without a re-run.
EXPLAINED = {"data": ("data", "the step's input batch differs"), "rng": ("rng", "the RNG states differ")}


@dataclass
class Location:
    """Where two runs part, as far as it could be told."""

    step: int
    cause: str
    phase: Optional[str] = None
    op: Optional[str] = None
    module: Optional[str] = None
    kernel: Optional[str] = None
    known_nondeterministic: Optional[bool] = None
    detail: str = ""
    captured: Tuple[int, int] = (0, 0)  # ops captured in each run
    unmatched: int = 0  # ops of one run with no counterpart in the other
    notes: List[str] = field(default_factory=list)
    positions: Optional[Tuple[int, int]] = None  # the op's position in each run's capture
    graphs: List[Dict[str, Any]] = field(default_factory=list)  # a compiled op: the graphs Inductor lowered for it

    def to_dict(self) -> Dict[str, Any]:
        return {"step": self.step, "phase": self.phase, "op": self.op, "module": self.module, "kernel": self.kernel,
                "known_nondeterministic": self.known_nondeterministic, "cause": self.cause, "detail": self.detail,
                "ops_captured": list(self.captured), **({"compiled_graphs": self.graphs} if self.graphs else {})}

    def describe(self) -> List[str]:
        lines = []
        if self.op is not None:
            kernel = ""
            if self.kernel:
                kernel = f", CUDA kernel {self.kernel}" + (" (known nondeterministic on CUDA)"
                                                           if self.known_nondeterministic else "")
            elif self.known_nondeterministic is False:
                kernel = " (not known to be nondeterministic on CUDA)"
            lines.append(f"located: step {self.step}, {self.phase}, op {self.op} in module {self.module}{kernel}")
        if self.detail:
            lines.append(f"  {self.detail}")
        for graph in self.graphs:
            ops = graph.get("ops") or []
            lines.append(f"  {graph.get('graph')}: {len(ops)} op{'s' if len(ops) != 1 else ''} "
                         "(module (class): op <- source line)" + (":" if ops else ""))
            lines.extend(f"    {op}" for op in ops[:GRAPH_LINES])
            if len(ops) > GRAPH_LINES:
                lines.append(f"    ... {len(ops) - GRAPH_LINES} more (determinism.json's locate section has them all)")
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines


# -- comparing two captures ---------------------------------------------------------------------
def _keyed(records: Sequence[Dict[str, Any]]) -> List[Tuple[Tuple[str, str, str, int], int, Dict[str, Any]]]:
    counts: Dict[Tuple[str, str, str], int] = {}
    out = []
    for position, record in enumerate(records):
        base = (str(record.get("phase")), str(record.get("module")), str(record.get("op")))
        n = counts.get(base, 0)
        counts[base] = n + 1
        out.append((base + (n,), position, record))
    return out


def _packet(op: str) -> str:
    """``aten.convolution.default`` -> ``convolution``."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else op


def _classify(op: str) -> str:
    if op.startswith(COLLECTIVE_PREFIXES):
        return "collective"
    if _packet(op) in RANDOM_OPS:
        return "rng"
    return "kernel"


def _can_be_named(record: Dict[str, Any]) -> bool:
    """Whether an op's output is a computation from its inputs: not an alias of memory, not made
    from numbers alone (a random op's generator state counts as an input), not before the step."""
    if record.get("pre") or record.get("alias") or _packet(str(record.get("op"))) in ALIAS_OPS:
        return False
    return record.get("t", 1) > 0 or "rng" in record


def compare_captures(a: Sequence[Dict[str, Any]], b: Sequence[Dict[str, Any]], step: int,
                     kernel_info: Optional[KernelInfo] = None, confirmed: bool = False) -> Location:
    """The first op (in run A's order) with bit-identical inputs and differing outputs.

    ``confirmed``: only ops whose inputs and outputs were all read in both captures count (the
    confirming pass). If the first op whose outputs differ already has differing inputs, those
    inputs were made before the capture (or changed outside PyTorch's dispatcher): the cause lies
    before the op.
    """
    kb = {key: (position, record) for key, position, record in _keyed(b)}
    keyed_a = _keyed(a)
    unmatched = sum(1 for key, _, _ in keyed_a if key not in kb) + len(set(kb) - {k for k, _, _ in keyed_a})
    first_input_diff = None
    for key, pa, ra in keyed_a:
        hit = kb.get(key)
        if hit is None or (confirmed and not (ra.get("read") and hit[1].get("read"))):
            continue
        pb, rb = hit
        if ra.get("out") == rb.get("out") or not _can_be_named(ra):
            continue
        if ra.get("in") == rb.get("in"):
            op = str(ra.get("op"))
            cause = _classify(op)
            if "rng" in ra and ra.get("rng") != "unknown":
                if ra.get("rng") == rb.get("rng"):
                    continue  # same generator state: the difference came in some other way
                cause = "rng"
            if op in COMPILED_OPS:
                return _compiled_location(step, ra, rb, (len(a), len(b)), unmatched, (pa, pb), first_input_diff)
            kernel, nondeterministic = kernel_info(op) if kernel_info is not None else (None, None)
            detail = {"kernel": "same inputs, different output: this op's kernel is not deterministic here",
                      "rng": "a random op drew different numbers from the same inputs: the generator state differed",
                      "collective": "a collective returned different results for the same inputs"}[cause]
            location = Location(step, cause, ra.get("phase"), op, _module_name(ra.get("module")), kernel,
                                nondeterministic, detail, (len(a), len(b)), unmatched, positions=(pa, pb))
            if first_input_diff is not None:
                location.notes.append(f"an earlier op, {first_input_diff}, already had different inputs")
            return location
        if first_input_diff is None:
            first_input_diff = f"{ra.get('op')} in {_module_name(ra.get('module'))} ({ra.get('phase')})"
    if first_input_diff is not None:
        return Location(step, "unknown", detail=f"the first op whose outputs differ, {first_input_diff}, already "
                        "had different inputs: they were made before the step or changed outside PyTorch's ops",
                        captured=(len(a), len(b)), unmatched=unmatched)
    return Location(step, "unknown", detail="the captured ops of both re-runs are identical: the divergence did "
                    "not recur in the re-runs (nondeterminism that does not show every time)",
                    captured=(len(a), len(b)), unmatched=unmatched)


def _compiled_location(step: int, ra: Dict[str, Any], rb: Dict[str, Any], captured: Tuple[int, int],
                       unmatched: int, positions: Tuple[int, int], first_input_diff: Optional[str]) -> Location:
    """A compiled graph gave other outputs for the same inputs: named with the graphs Inductor lowered for it."""
    op = str(ra.get("op"))
    what = "forward (its inputs, parameters and buffers)" if op == "compiled forward" else (
        "backward (the gradients flowing into it)")
    detail = (f"same inputs to the compiled {what}, different outputs: a kernel Inductor generated for this graph is "
              "not deterministic here. Its ops are fused into generated kernels, which raise no nondeterminism "
              "alert of their own, so the op is one of the graph's listed below (check them against "
              "`yolo-det audit`; `yolo_det.proof.compiled_eager.compare` runs the step eagerly beside it)")
    graphs = ra.get("graphs") or rb.get("graphs") or []
    location = Location(step, "kernel", ra.get("phase"), op, _module_name(ra.get("module")), None, None, detail,
                        captured, unmatched, positions=positions, graphs=list(graphs))
    if not graphs:
        location.notes.append("the process kept no description of its compiled graphs (no yolo-det session under "
                              "strict or warn, or Inductor read them from its cache)")
    if first_input_diff is not None:
        location.notes.append(f"an earlier op, {first_input_diff}, already had different inputs")
    return location


def step_window(records: Sequence[Dict[str, Any]]) -> Tuple[int, int]:
    """Positions (first, last) of the captured step's own ops: from its first batch on."""
    first = next((i for i, r in enumerate(records) if not r.get("pre")), len(records))
    return first, max(first, len(records) - 1)


def read_window(records: Sequence[Dict[str, Any]], position: int) -> Tuple[int, int]:
    """Positions (first, last) the confirming pass reads in full: the op at ``position`` and every
    op before it whose outputs were derived, not read, on the way to its inputs."""
    producers: Dict[str, List[int]] = {}
    for i in range(position):
        if records[i].get("d"):
            for h in records[i].get("out", ()):
                producers.setdefault(h, []).append(i)
    first = position
    seen = set()
    todo = [(h, position) for h in records[position].get("in", ())]
    while todo:
        digest, before = todo.pop()
        made = producers.get(digest)
        if not made:
            continue
        k = bisect.bisect_left(made, before) - 1
        if k < 0 or made[k] in seen:
            continue
        j = made[k]
        seen.add(j)
        first = min(first, j)
        todo.extend((h, j) for h in records[j].get("in", ()))
    return max(first, step_window(records)[0]), position


def _module_name(module: Any) -> str:
    if module == "":
        return "(model)"
    return str(module) if module else OUTSIDE


# -- what the logs already tell -----------------------------------------------------------------
def needs_capture(comparison: Comparison) -> bool:
    """Whether a re-run with op capture can say more than the logs (no set-up cause, not rng, not DDP ranks);
    a differing batch is re-run capturing the loader's fetches."""
    first = comparison.first_divergence
    return first is not None and not comparison.causes and first.kind != "rng" and comparison.cause != "collective"


def from_logs(comparison: Comparison) -> Optional[Location]:
    """The location the logs alone give (set-up cause, batch, RNG, DDP); None when a capture is needed."""
    first = comparison.first_divergence
    if first is None:
        return None
    if comparison.causes:
        top = comparison.causes[0]
        return Location(first.step, top.cls, detail="the runs' set-ups differ (likely cause above): no re-run needed")
    if first.kind in EXPLAINED:
        cls, what = EXPLAINED[first.kind]
        return Location(first.step, cls, phase="data" if cls == "data" else None,
                        detail=f"{what} at step {first.step} ({first.tensor}): the cause lies before the step")
    if comparison.cause == "collective":
        return Location(first.step, "collective", detail="DDP ranks held different parameters")
    return None


def through_for(comparison: Comparison) -> str:
    """``validation`` when the runs parted after the step's optimizer update (EMA, validation records)."""
    first = comparison.first_divergence
    if first is not None and (first.kind not in KINDS or first.kind == "ema"):
        return "validation"
    return "step"


def clock_hit(outputs: Sequence[os.PathLike]) -> bool:
    """Whether a run's output shows validation cut by a time limit (YOLOv5/Ultralytics NMS)."""
    for path in outputs:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "NMS time limit" in text and "exceeded" in text:
            return True
    return False


# -- re-running ---------------------------------------------------------------------------------
def _capture_env(base: Dict[str, str], step: int, path: Path, through: str) -> Dict[str, str]:
    env = dict(base)
    env[STEP_VAR] = str(step)
    env[PATH_VAR] = str(path)
    env[THROUGH_VAR] = through
    for name, value in NO_CACHE_ENV.items():
        env.setdefault(name, value)
    return env


def capture_run(cmd: Sequence[str], run: int, step: int, workdir: os.PathLike, *, through: str = "step",
                env: Optional[Dict[str, str]] = None, cwd: Optional[os.PathLike] = None,
                progress: Optional[Callable[[str], None]] = None, timeout: Optional[float] = None,
                total: int = 2, read: Optional[Tuple[int, int]] = None,
                header: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """Re-run run ``run`` of ``cmd`` (``{run}`` filled in) with op capture on for step ``step``; its records.

    ``read``: the confirming pass, whose ops at these positions (first, last) are read in full.
    ``header``: a dict the capture file's header is put into.
    """
    from .runner import RunFailedError, VerifyError, run_once, substitute

    name = (f"run{run}" if read is None else f"confirm{run}") + ("-data" if through == "data" else "")
    run_dir = Path(workdir).resolve() / "locate" / name
    path = run_dir / "capture.jsonl"
    path.unlink(missing_ok=True)
    base = dict(os.environ if env is None else env)
    capture_env = _capture_env(base, step, path, through)
    capture_env.pop(READ_VAR, None)
    if read is not None:
        capture_env[READ_VAR] = f"{read[0]}:{read[1]}"
    report = progress or (lambda _m: None)
    try:
        run_once(substitute(cmd, run), run, total, run_dir, capture_env, cwd,
                  lambda m: report(f"locate: {m}"), 0.5, timeout)
    except RunFailedError:
        if not path.exists():
            raise
    except VerifyError:
        if not path.exists():
            raise
    if not path.exists():
        raise VerifyError(f"the re-run of run {run} ended before step {step} ran, so no op capture was written; "
                          f"its output is in {run_dir / 'output.log'}")
    try:
        head, records = read_capture(path)
    except CaptureError as exc:
        raise VerifyError(str(exc)) from None
    if header is not None:
        header.update(head)
    return records


Capture = Callable[[int, Optional[Tuple[int, int]]], List[Dict[str, Any]]]


def locate_step(capture: Capture, runs: Tuple[int, int], step: int, kernel_info: Optional[KernelInfo] = None,
                progress: Optional[Callable[[str], None]] = None) -> Location:
    """Both passes over step ``step``: ``capture(run, read)`` re-runs a run and returns its op records
    (``read``: the positions the confirming pass reads in full, None for the first pass)."""
    records = [capture(run, None) for run in runs]
    suspect = compare_captures(records[0], records[1], step, kernel_info)
    if suspect.positions is not None:
        windows = [read_window(r, p) for r, p in zip(records, suspect.positions)]
        what = f"the ops leading to {suspect.op} in {suspect.module}"
    else:
        windows = [step_window(r) for r in records]
        what = "every op of the step"
    if progress:
        progress(f"locate: confirming: re-running both runs reading {what} in full")
    confirmed = [capture(run, window) for run, window in zip(runs, windows)]
    location = compare_captures(confirmed[0], confirmed[1], step, kernel_info, confirmed=True)
    whole = [step_window(r) for r in records]
    if location.op is None and windows != whole:  # the suspect was no fault (its inputs only looked the same)
        if progress:
            progress("locate: confirming: the suspect's real inputs differ; re-running both runs reading every op")
        confirmed = [capture(run, window) for run, window in zip(runs, whole)]
        location = compare_captures(confirmed[0], confirmed[1], step, kernel_info, confirmed=True)
    location.captured = (len(records[0]), len(records[1]))
    return location


def locate_data(capture: Capture, runs: Tuple[int, int], found: Location, workers: Callable[[], int],
                kernel_info: Optional[KernelInfo] = None, progress: Optional[Callable[[str], None]] = None) -> Location:
    """The loader op that made step ``found.step``'s batch differ, from captures of its fetches only
    (``capture`` as for :func:`locate_step`, first passes cached; ``workers()``: the most DataLoader
    worker processes those first passes saw). ``found`` (what the logs say) when no op can be named."""
    step = found.step
    for run in runs:
        capture(run, None)
    n = workers()
    if n:
        found.notes.append(f"the batch was made in {n} DataLoader worker process{'es' if n > 1 else ''}: ops there "
                           "cannot be captured; run the locate again with the loader in the training process "
                           "(--workers 0 for YOLOv5, workers=0 for Ultralytics) to name the op")
        return found
    location = locate_step(capture, runs, step, kernel_info, progress)
    if location.op is not None:
        return location
    found.captured = location.captured
    found.notes.append("no op of the loader's fetches gave different outputs for the same inputs: the difference "
                       "came in with what the loader read (files, sample order, augmentation state)")
    return found


def locate_runs(cmd: Sequence[str], comparison: Comparison, runs: Tuple[int, int] = (1, 2),
                workdir: os.PathLike = "yolo-det-verify", *, kernel_info: Optional[KernelInfo] = None,
                env: Optional[Dict[str, str]] = None, cwd: Optional[os.PathLike] = None,
                progress: Optional[Callable[[str], None]] = None, outputs: Sequence[os.PathLike] = (),
                timeout: Optional[float] = None) -> Optional[Location]:
    """Locate the divergence of ``comparison`` (set on ``comparison.locate`` and returned).

    Re-runs ``runs`` of ``cmd`` only when the logs cannot explain it. None when identical.
    """
    first = comparison.first_divergence
    if first is None:
        return None
    location = from_logs(comparison)
    if progress and first.tensor == ROOT_NAME:
        progress(f"locate: the logs are compact (one root digest per kind and step): the tensor and op are named by "
                 f"re-running runs {runs[0]} and {runs[1]} up to step {first.step} with full digests and op capture; "
                 f"that costs {first.step} optimizer steps of training per run")
    if location is not None and location.cause == "data" and not comparison.causes:
        location = _rerun_data(cmd, location, runs, workdir, kernel_info, env, cwd, progress, timeout)
    if location is None and first.kind not in KINDS and clock_hit(outputs):
        location = Location(first.step, "clock", phase="validation",
                            detail="validation was cut short by a time limit (NMS time limit exceeded) in a run")
    if location is None:
        through = through_for(comparison)
        if progress:
            progress(f"locate: re-running runs {runs[0]} and {runs[1]} with op capture at step {first.step}"
                     + (" and the validation after it" if through == "validation" else ""))

        def capture(run: int, read: Optional[Tuple[int, int]]) -> List[Dict[str, Any]]:
            return capture_run(cmd, run, first.step, workdir, through=through, env=env, cwd=cwd, progress=progress,
                               timeout=timeout, total=max(runs), read=read)

        location = locate_step(capture, runs, first.step, kernel_info, progress)
        if location.phase == "validation" and clock_hit(outputs):
            location.cause = "clock"
            location.detail = "validation was cut short by a time limit (NMS time limit exceeded) in a run"
    comparison.locate = location
    return location


def _rerun_data(cmd: Sequence[str], found: Location, runs: Tuple[int, int], workdir: os.PathLike,
               kernel_info: Optional[KernelInfo], env: Optional[Dict[str, str]], cwd: Optional[os.PathLike],
               progress: Optional[Callable[[str], None]], timeout: Optional[float]) -> Location:
    """:func:`locate_data` over re-runs of ``cmd`` capturing the loader's fetches of step ``found.step``."""
    if progress:
        progress(f"locate: the batch of step {found.step} differs: re-running runs {runs[0]} and {runs[1]} with op "
                 "capture of the DataLoader's fetches of that step")
    cache: Dict[Tuple[int, Any], List[Dict[str, Any]]] = {}
    workers: List[int] = [0]

    def capture(run: int, read: Optional[Tuple[int, int]]) -> List[Dict[str, Any]]:
        if (run, read) not in cache:
            header: Dict[str, Any] = {}
            cache[run, read] = capture_run(cmd, run, found.step, workdir, through="data", env=env, cwd=cwd,
                                           progress=progress, timeout=timeout, total=max(runs), read=read,
                                           header=header)
            workers[0] = max(workers[0], int(header.get("workers") or 0))
        return cache[run, read]

    from .verify import VerifyError

    try:
        return locate_data(capture, runs, found, lambda: workers[0], kernel_info, progress)
    except VerifyError as exc:  # the batch still differs: what the logs say stands
        found.notes.append(f"the re-run capturing the loader's fetches failed: {exc}")
        return found


def runs_of(log_a: os.PathLike, log_b: os.PathLike) -> Tuple[int, int]:
    """The run numbers ``yolo-det verify`` gave two logs (their headers), else (1, 2)."""
    numbers = []
    for path, default in ((log_a, 1), (log_b, 2)):
        try:
            value = read_log(path).header.get("verify_run")
        except FingerprintError:
            value = None
        numbers.append(int(value) if isinstance(value, int) and value > 0 else default)
    if numbers[0] == numbers[1]:
        return 1, 2
    return numbers[0], numbers[1]


__all__ = ["KernelInfo", "Location", "capture_run", "clock_hit", "compare_captures", "from_logs", "locate_data",
           "locate_runs", "locate_step", "needs_capture", "read_window", "runs_of", "step_window", "through_for"]
