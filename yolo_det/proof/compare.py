"""Compare fingerprint logs: are two runs bit-identical, and if not, where do they first part?

Within a step, kinds are ranked in the order they happen: data, loss, grad, lr, param, ema,
rng; a validation (kind ``val``: predictions after NMS, metrics, best / early stop) ranks after
the last step before it; after the last step comes the final state (kind ``final``, reported
at the last step).
The first divergence is the earliest step, then the earliest kind, then the first tensor in
the log's order -- the place to start looking, since everything after it may just be a
consequence.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..core import verdicts
from .causes import Cause, cause_of_kind, setup_causes, virtual_world
from ..record.log import (ROOT_NAME, KINDS, FingerprintError, Log, LogReader, StepRecord, ValRecord, check_comparable, iter_kinds,
                  rank_paths, read_log)

ORDER: Tuple[str, ...] = KINDS + ("val", "final")
#: What each process records of its own share of a batch: under one virtual world size on different numbers
#: of processes these differ by design (rank 0 loads V/N micro-batches), while the V-run's state must not.
PER_PROCESS_KINDS: Tuple[str, ...] = ("data", "loss", "rng")
LogLike = Union[Log, os.PathLike, str]


@dataclass(frozen=True)
class Divergence:
    """Where two runs first differ: the step (from 1), the kind and the tensor name."""

    step: int
    kind: str
    tensor: str
    rank: int = 0
    detail: str = ""
    epoch: Optional[int] = None  # kind "val": the validation's epoch

    def sort_key(self) -> Tuple[int, int, int]:
        return self.step, ORDER.index(self.kind) if self.kind in ORDER else len(ORDER), self.rank

    def to_dict(self, with_rank: bool = False) -> Dict[str, Any]:
        out: Dict[str, Any] = {"step": self.step, "kind": self.kind, "tensor": self.tensor}
        if self.kind == "val":
            out["epoch"] = self.epoch
            out["detail"] = self.detail
        if with_rank:
            out["rank"] = self.rank
        return out


@dataclass
class Comparison(verdicts.Judged):
    """The result of comparing two runs' logs (see :func:`compare_logs`).

    ``identical``: same number of steps, every digest and the final state equal.
    ``steps``: steps compared (the shorter log's length); ``tensors``: digests compared.
    ``first_divergence``: a :class:`Divergence` or None. ``problem``: why the comparison is
    inconclusive (different lengths with identical common steps, a run that did not finish).
    """

    identical: bool
    steps: int
    tensors: int
    first_divergence: Optional[Divergence]
    lengths: Tuple[int, int]
    differing: List[int] = field(default_factory=list)
    divergence_kinds: Dict[str, int] = field(default_factory=dict)
    losses: Tuple[List[float], List[float]] = field(default_factory=lambda: ([], []))
    problem: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    paths: Tuple[str, str] = ("", "")
    ranks: int = 1
    validations: int = 0  # validation records compared
    val_differences: List[Dict[str, Any]] = field(default_factory=list)
    first_step_divergence: Optional[Divergence] = None  # the first training-step divergence, even after a val one

    @property
    def evaluation(self) -> bool:
        """Logs of standalone evaluations (``val.py``, ``yolo val``): validations and no training steps."""
        return self.lengths == (0, 0) and self.validations > 0

    @property
    def steps_identical(self) -> bool:
        """Every training step and the final state agree (validations may still differ)."""
        first = self.first_divergence
        return self.problem is None and self.first_step_divergence is None and (first is None or first.kind == "val")
    causes: List[Cause] = field(default_factory=list)  # set-up differences, the likely cause first
    locate: Optional[Any] = None  # a proof.locate.Location once --locate ran
    not_proven: Optional[str] = None  # nothing differs, but nothing decisive (a step, a tensor) was compared

    @property
    def verdict(self) -> str:
        """``identical``, ``differs``, ``not proven`` (nothing decisive compared) or ``inconclusive`` (a problem)."""
        if self.identical:
            return verdicts.IDENTICAL
        if self.first_divergence is not None:
            return verdicts.DIFFERS
        return verdicts.NOT_PROVEN if self.not_proven else verdicts.INCONCLUSIVE

    @property
    def cause(self) -> Optional[str]:
        """The cause class of a divergence: from the set-up, the op located, DDP, the kind; None if identical."""
        if self.first_divergence is None:
            return None
        if self.causes:
            return self.causes[0].cls
        if self.locate is not None and getattr(self.locate, "cause", None):
            return self.locate.cause
        if any("DDP ranks held different parameters" in note for note in self.notes):
            return "collective"
        return cause_of_kind(self.first_divergence.kind)

    def location(self) -> Optional[Dict[str, Any]]:
        """``{step, phase, op, module, kernel, known_nondeterministic, cause}`` for a divergence."""
        if self.first_divergence is None:
            return None
        if self.locate is not None:
            out = self.locate.to_dict()
            out["cause"] = self.cause
            return out
        return {"step": self.first_divergence.step, "phase": None, "op": None, "module": None, "kernel": None,
                "known_nondeterministic": None, "cause": self.cause}

    @property
    def conclusive(self) -> bool:
        """True when the comparison says identical or names a divergence."""
        return self.identical or self.first_divergence is not None

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready summary (the shape ``yolo-det diff --json`` prints)."""
        first = self.first_divergence
        return self.stamped({
            "identical": self.identical,
            "not_proven": self.not_proven,
            "steps": self.steps,
            "tensors": self.tensors,
            "first_divergence": first.to_dict(with_rank=self.ranks > 1) if first else None,
            "lengths": list(self.lengths),
            "differing_per_step": list(self.differing),
            "divergence_kinds": dict(self.divergence_kinds),
            "problem": self.problem,
            "notes": list(self.notes),
            "logs": list(self.paths),
            "validations": {"compared": self.validations, "identical": not self.val_differences,
                            "differing": list(self.val_differences)},
            "causes": [c.to_dict() for c in self.causes] if first else [],
            "locate": self.location(),
        })

    def describe(self, labels: Sequence[str] = ("A", "B"), context: int = 2) -> List[str]:
        """Human-readable lines: ``identical: ...`` or the first divergence and the losses around it."""
        lines = [f"note: {note}" for note in self.notes]
        if self.identical:
            if self.evaluation:
                lines.append(f"identical: {self.validations} evaluation(s): predictions of every image and metrics")
                return lines
            vals = f", {self.validations} validations" if self.validations else ""
            lines.append(f"identical: {self.steps} steps, {self.tensors} tensors{vals}")
            return lines
        first = self.first_divergence
        if first is None and self.not_proven:
            lines.append(f"not proven: {self.not_proven}")
            return lines
        if first is None:
            lines.append(f"inconclusive: {self.problem}")
            return lines
        lines.extend(f"likely cause ({c.cls}): {c.message}" for c in self.causes)
        where = f" on rank {first.rank}" if self.ranks > 1 else ""
        if first.kind == "val" and self.evaluation:
            lines.append(f"evaluations differ{where}: {first.detail}")
            return lines
        if first.kind == "val":
            epoch = f"epoch {first.epoch} " if first.epoch is not None else ""
            later = self.first_step_divergence
            steps = ("training steps identical" if later is None else
                     f"training steps identical up to step {first.step}, they differ from step {later.step}")
            lines.append(f"diverged at {epoch}validation{where} (after step {first.step}): {first.detail}, {steps}")
            lines.extend(self._loss_table(labels, first.step, context))
            if self.problem:
                lines.append(f"note: {self.problem}")
            return lines
        lines.append(f"diverged at step {first.step}{where}: kind {first.kind}, tensor {first.tensor}"
                     + (f" ({first.detail})" if first.detail else ""))
        if self.divergence_kinds:
            kinds = ", ".join(f"{k} {n}" for k, n in self.divergence_kinds.items())
            lines.append(f"  differing at step {first.step}: {kinds}")
        lines.extend(self._loss_table(labels, first.step, context))
        if self.locate is not None:
            lines.extend(self.locate.describe())
        lines.append(f"cause: {self.cause}")
        if self.problem:
            lines.append(f"note: {self.problem}")
        return lines

    def _loss_table(self, labels: Sequence[str], step: int, context: int) -> List[str]:
        a, b = self.losses
        last = max(len(a), len(b))
        rows = range(max(1, step - context), min(last, step + context) + 1)
        if not rows:
            return []
        out = [f"  losses around step {step}:", f"    {'step':>6}  {labels[0]:>18}  {labels[1]:>18}"]
        for s in rows:
            va = _fmt(a[s - 1]) if s <= len(a) else "-"
            vb = _fmt(b[s - 1]) if s <= len(b) else "-"
            mark = ">" if s == step else " "
            out.append(f"  {mark} {s:>6}  {va:>18}  {vb:>18}")
        return out


def _fmt(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.10g}"


def _load(log: LogLike) -> Log:
    return log if isinstance(log, Log) else read_log(log)


def _header_notes(a: Log, b: Log) -> List[str]:
    notes = []
    v = virtual_world(a.header, b.header)
    if v is not None:
        notes.append(f"one virtual world size V={v} on {a.world_size} and {b.world_size} processes: compared the "
                     f"V-run's state (gradients, learning rates, weights, EMA, validations, final); the data, loss "
                     f"and RNG records are each process's own share and were not compared")
    for key, what in (("torch", "torch versions"), ("world_size", "world sizes"), ("cuda", "GPUs")):
        if key == "world_size" and v is not None:
            continue
        va, vb = a.header.get(key), b.header.get(key)
        if va != vb:
            notes.append(f"the runs used different {what}: {va} vs {vb}")
    for log in (a, b):
        drift = log.ddp_mismatches()
        if drift:
            first = drift[0].ddp or {}
            notes.append(f"{log.path}: DDP ranks held different parameters at {len(drift)} of {log.count} "
                         f"steps, first at step {drift[0].step} (rank {first.get('rank')}, first at "
                         f"{first.get('tensor')})")
    return notes


def _compare_kind(kind: str, sa: StepRecord, sb: StepRecord) -> Tuple[int, int, Optional[Tuple[str, str]]]:
    """(compared, differing, first (tensor, detail)) for one kind of one step.

    Where either side is a compact line the kind's root digests are compared (lr is in no compact line)."""
    if sa.compact or sb.compact:
        if kind == "lr":
            return 0, 0, None
        ra, rb = sa.root(kind), sb.root(kind)
        if ra == rb:
            return 1, 0, None
        return 1, 1, (ROOT_NAME, "compact record: root digests differ; yolo-det locate re-runs to name the tensor"
                      if ra is not None and rb is not None else f"only in {'A' if rb is None else 'B'}")
    if kind != "lr" and sa.names.get(kind) == sb.names.get(kind) and sa.digests.get(kind) == sb.digests.get(kind):
        return len(sa.names.get(kind, [])), 0, None
    ea, eb = sa.entries(kind), sb.entries(kind)
    names = list(ea) + [n for n in eb if n not in ea]
    first = None
    differing = 0
    for name in names:
        if ea.get(name) == eb.get(name):
            continue
        differing += 1
        if first is None:
            if name not in eb or name not in ea:
                first = (name, f"only in {'A' if name not in eb else 'B'}")
            elif kind == "lr":
                first = (name, f"{ea[name]} vs {eb[name]}")
            else:
                first = (name, "")
    return len(names), differing, first


def _open(log: LogLike) -> Union[Log, LogReader]:
    """A :class:`Log` as it is, a path as a :class:`LogReader` (read step by step, bounded memory)."""
    return log if isinstance(log, Log) else LogReader(log)


def compare_logs(a: LogLike, b: LogLike) -> Comparison:
    """Compare two fingerprint logs (paths or :class:`Log` objects) step by step.

    Paths are read one line at a time, side by side, so memory does not grow with the logs.
    Raises :class:`~yolo_det.fingerprint_log.FingerprintError` when a log cannot be read or the two
    were made with different digest algorithms.
    """
    a = _open(a)
    try:
        b = _open(b)
        check_comparable(a, b)
    except BaseException:
        for log in (a, locals().get("b")):
            if isinstance(log, LogReader):
                log.close()
        raise
    steps = 0
    first: Optional[Divergence] = None
    kinds_at_first: Dict[str, int] = {}
    differing: List[int] = []
    losses: Tuple[List[float], List[float]] = ([], [])
    lengths = [0, 0]
    tensors = 0
    missing = object()
    skip = PER_PROCESS_KINDS if virtual_world(a.header, b.header) is not None else ()
    try:
        for sa, sb in itertools.zip_longest(a.steps if isinstance(a, Log) else a,
                                            b.steps if isinstance(b, Log) else b, fillvalue=missing):
            for side, record in enumerate((sa, sb)):
                if record is not missing:
                    lengths[side] += 1
                    losses[side].append(record.loss)
            if sa is missing or sb is missing:
                continue
            steps += 1
            count = 0
            kinds = [k for k in dict.fromkeys(list(iter_kinds(sa)) + list(iter_kinds(sb))) if k not in skip]
            kinds.sort(key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
            for kind in kinds:
                compared, differ, where = _compare_kind(kind, sa, sb)
                tensors += compared
                count += differ
                if differ and first is None:
                    first = Divergence(sa.step, kind, where[0], a.rank, where[1]) if where else None
                if differ and first is not None and first.step == sa.step:
                    kinds_at_first[kind] = differ
            differing.append(count)
    finally:
        for log in (a, b):
            if isinstance(log, LogReader):
                log.close()
    problem = None
    if lengths[0] != lengths[1]:
        problem = (f"the logs have different lengths: {a.path} has {lengths[0]} steps, {b.path} has "
                   f"{lengths[1]}" + ("" if first else f"; their first {steps} steps are identical" if steps else
                                      "; they have no step in common, so no step was compared"))
    final_equal = True
    if a.final is not None and b.final is not None:
        ea, eb = a.final.entries(), b.final.entries()
        names = list(ea) + [n for n in eb if n not in ea]
        tensors += len(names)
        bad = [n for n in names if ea.get(n) != eb.get(n)]
        final_equal = not bad
        if bad and first is None and problem is None:
            first = Divergence(steps, "final", bad[0], a.rank)
            kinds_at_first = {"final": len(bad)}
    elif problem is None and (a.final is None or b.final is None):
        unfinished = [str(log.path) for log in (a, b) if log.final is None]
        problem = (f"{' and '.join(unfinished)} did not finish (no final line): the run crashed, was killed "
                   "or did not call session.finish()")
        cut = [log.truncated for log in (a, b) if getattr(log, "truncated", None)]
        if cut:
            problem += "; " + "; ".join(cut)
    step_first = first
    validations, val_differences, val_first = compare_validations(
        a, b, reached=(lengths[0], lengths[1]), complete=(a.final is not None, b.final is not None))
    if val_first is not None and (first is None or val_first.sort_key() < first.sort_key()):
        first = val_first
        kinds_at_first = {"val": 1}
    identical = first is None and problem is None and final_equal
    not_proven = None
    if identical and tensors == 0 and validations == 0:  # all([]) over nothing: no verdict of identity
        identical = False
        not_proven = (f"the logs hold no training step, validation or final tensor to compare ({steps} steps, "
                      "0 tensors, 0 validations): nothing differs because nothing was compared")
    elif identical and tensors == 0 and _images(a, b) == 0:  # metrics alone: the predictions were not recorded
        identical = False
        not_proven = (f"the logs hold no training step or final tensor, and their {validations} validation(s) hold "
                      "no image's predictions (0 images: the evaluation's NMS output was not recorded): only the "
                      "metrics were compared, and equal metrics do not show equal predictions")
    causes = setup_causes(a.header, b.header, a.path, b.path)
    notes = _header_notes(a, b) + [log.truncated for log in (a, b) if getattr(log, "truncated", None)
                                   and not (problem and log.truncated in problem)]
    notes += _other_ranks_note(a, b)
    if identical:  # the steps agree; data that differs (a stale label cache under off) must still be said
        notes += [f"training was identical but {c.message}" for c in causes if c.cls == "data"]
    return Comparison(
        identical=identical, steps=steps, tensors=tensors, first_divergence=first,
        lengths=(lengths[0], lengths[1]), differing=differing, divergence_kinds=kinds_at_first,
        losses=losses, problem=problem, notes=notes,
        paths=(str(a.path), str(b.path)), ranks=max(a.world_size, b.world_size),
        validations=validations, val_differences=val_differences,
        first_step_divergence=step_first if step_first is not first else None,
        causes=causes, not_proven=not_proven,
    )


#: How the note of :func:`_other_ranks_note` begins (:func:`compare_ranked` compares every rank and drops it).
OTHER_RANKS = "only rank 0's logs were compared"


def _other_ranks_note(a: Any, b: Any) -> List[str]:
    """A note when two rank-0 logs of a DDP run have the other ranks' logs beside them, not compared here."""
    if a.rank != 0 or b.rank != 0 or max(a.world_size, b.world_size) <= 1 or virtual_world(a.header, b.header):
        return []
    others = [p.name for log in (a, b) for r, p in rank_paths(log.path).items() if r > 0]
    if not others:
        return []
    return [f"{OTHER_RANKS}: the runs trained on {max(a.world_size, b.world_size)} processes and the other ranks' "
            f"logs beside them ({', '.join(sorted(set(others))[:4])}{', ...' if len(set(others)) > 4 else ''}) hold "
            "each rank's own data, loss and RNG records; `yolo-det verify` compares every rank"]


def _images(a: Any, b: Any) -> int:
    """How many images' predictions the validations both logs hold compared (names of either side)."""
    return sum(len(set(va.names) | set(vb.names)) for va, vb in zip(a.validations, b.validations))


def _val_difference(va: ValRecord, vb: ValRecord) -> Tuple[List[str], str]:
    """(what differs, first name) between two validations; empty when identical."""
    what: List[str] = []
    first = ""
    ea, eb = va.entries(), vb.entries()
    images = list(ea) + [n for n in eb if n not in ea]
    bad = [n for n in images if ea.get(n) != eb.get(n)]
    if bad:
        what.append(f"predictions differ ({len(bad)} of {len(images)} images, first {bad[0]}{_image(va, vb, bad[0])})")
        first = bad[0]
    settings = _settings_difference(va.settings, vb.settings)
    if settings:
        what.append(f"settings differ ({settings})")
        first = first or "settings"
    metrics = [k for k in list(va.metrics) + [k for k in vb.metrics if k not in va.metrics]
               if not _same_float(va.metrics.get(k), vb.metrics.get(k))]
    if metrics:
        shown = ", ".join(f"{k} {_fmt(va.metrics.get(k, math.nan))} vs {_fmt(vb.metrics.get(k, math.nan))}"
                          for k in metrics[:3])
        what.append(f"metrics differ ({shown})")
        first = first or f"metrics.{metrics[0]}"
    for flag, label in (("best", "became best"), ("stop", "early stop")):
        if getattr(va, flag) != getattr(vb, flag):
            what.append(f"{label}: {getattr(va, flag)} vs {getattr(vb, flag)}")
            first = first or flag
    return what, first


def _image(va: ValRecord, vb: ValRecord, name: str) -> str:
    """`` (file x.jpg: 12 vs 9 boxes)`` for one image of two validations, from what their records hold."""
    parts = []
    for record in (va, vb):
        if record.files and name in record.names:
            parts.append(f"file {record.files[record.names.index(name)]}")
            break
    boxes = [r.boxes[r.names.index(name)] if r.boxes and name in r.names else None for r in (va, vb)]
    if boxes != [None, None]:
        parts.append(f"{'-' if boxes[0] is None else boxes[0]} vs {'-' if boxes[1] is None else boxes[1]} boxes")
    return f" ({': '.join(parts)})" if parts else ""


#: Settings that say how the evaluation went, not what it ran with: they may differ between identical runs.
#: ``weights`` is the path as given (a resumed training names its last.pt); ``weights_digest`` is what ran.
OUTCOME_SETTINGS = ("nms_cut_batches", "weights")


def _settings_difference(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> str:
    """``batch_size 16 vs 32, ...`` for the settings two evaluations ran with (empty: same, or unknown)."""
    if a is None or b is None:
        return ""
    keys = [k for k in list(a) + [k for k in b if k not in a] if k not in OUTCOME_SETTINGS and a.get(k) != b.get(k)]
    return ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")


def _same_float(x: Optional[float], y: Optional[float]) -> bool:
    if x is None or y is None:
        return x is y
    return x == y or (math.isnan(x) and math.isnan(y))


def _past_the_end(after_step: int, steps: int, complete: bool) -> bool:
    """Whether a validation after ``after_step`` lies where the other log does not reach: past its last step, or
    after it when that log has no final line (a kill may have cut the validation being written)."""
    return after_step > steps or (after_step == steps and not complete)


def compare_validations(a: Log, b: Log, reached: Optional[Tuple[int, int]] = None,
                        complete: Tuple[bool, bool] = (True, True)) -> Tuple[int, List[Dict[str, Any]], Optional[Divergence]]:
    """(validations compared, each differing one, the first as a :class:`Divergence` of kind ``val``).

    ``reached``: each log's number of steps; a validation that only one log holds, at a point the other log does
    not reach (it stopped earlier or was cut there, ``complete`` False), is not compared, not a divergence: the
    logs' different lengths or missing final line already make the comparison inconclusive."""
    differences: List[Dict[str, Any]] = []
    first: Optional[Divergence] = None
    for i in range(max(len(a.validations), len(b.validations))):
        va = a.validations[i] if i < len(a.validations) else None
        vb = b.validations[i] if i < len(b.validations) else None
        if va is None or vb is None:
            only = va or vb
            side = 1 if vb is None else 0  # the log that lacks it
            if reached is not None and _past_the_end(only.after_step, reached[side], complete[side]):
                continue
            what, name = [f"validation only in {'A' if vb is None else 'B'}"], "validation"
        elif va.after_step != vb.after_step:
            only = va
            what, name = [f"after step {va.after_step} vs {vb.after_step}"], "after_step"
        else:
            only = va
            what, name = _val_difference(va, vb)
        if not what:
            continue
        differences.append({"index": i, "epoch": only.epoch, "after_step": only.after_step, "differs": what})
        if first is None:
            first = Divergence(only.after_step, "val", name, a.rank, ", ".join(what), only.epoch)
    compared = min(len(a.validations), len(b.validations))
    return compared, differences, first


def _one_virtual_world(a: os.PathLike, b: os.PathLike) -> bool:
    readers = [LogReader(a)]
    try:
        readers.append(LogReader(b))
        return virtual_world(readers[0].header, readers[1].header) is not None
    finally:
        for reader in readers:
            reader.close()


def compare_ranked(a: Mapping[int, os.PathLike], b: Mapping[int, os.PathLike]) -> Comparison:
    """Compare two runs rank by rank (``{rank: log path}`` each); the earliest divergence wins.

    The result's losses and paths are rank 0's; ``tensors`` and ``differing`` add up all ranks.
    """
    if sorted(a) != sorted(b):
        if 0 in a and 0 in b and _one_virtual_world(a[0], b[0]):
            return compare_logs(a[0], b[0])  # the V-run's state is rank 0's; its header notes say so
        raise FingerprintError(f"the runs wrote logs for different ranks: {sorted(a)} vs {sorted(b)}")
    results = {rank: compare_logs(a[rank], b[rank]) for rank in sorted(a)}
    if len(results) == 1:
        return next(iter(results.values()))
    base = results[min(results)]
    divergences = [r.first_divergence for r in results.values() if r.first_divergence is not None]
    first = min(divergences, key=Divergence.sort_key) if divergences else None
    owner = next((r for r in results.values() if r.first_divergence is first), base)
    problems = [r.problem for r in results.values() if r.problem]
    unproven = [r.not_proven for r in results.values() if r.not_proven]
    width = max(len(r.differing) for r in results.values())
    return Comparison(
        identical=all(r.identical for r in results.values()),
        steps=min(r.steps for r in results.values()),
        tensors=sum(r.tensors for r in results.values()),
        first_divergence=first,
        lengths=base.lengths,
        differing=[sum(r.differing[i] for r in results.values() if i < len(r.differing)) for i in range(width)],
        divergence_kinds=owner.divergence_kinds if first else {},
        losses=base.losses,
        problem=problems[0] if problems else None,
        notes=[n for n in base.notes if not n.startswith(OTHER_RANKS)],
        paths=base.paths,
        ranks=max(len(results), base.ranks),
        validations=sum(r.validations for r in results.values()),
        val_differences=[d for r in results.values() for d in r.val_differences],
        first_step_divergence=owner.first_step_divergence if first else None,
        causes=base.causes,
        not_proven=unproven[0] if unproven and first is None and not problems else None,
    )


__all__ = ["Comparison", "Divergence", "ORDER", "PER_PROCESS_KINDS", "compare_logs", "compare_ranked",
           "compare_validations"]
