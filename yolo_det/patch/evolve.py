"""The ``--evolve`` loop of a YOLOv5-family training script: mutations from (seed, generation).

Two shapes are found by tree shape, not by name:

* the clock reseed (v5.0 ... v7.0, PyPI ``yolov5``, yolov7, FFCA-YOLO): inside
  ``if <results>.exists():`` a statement ``<npr>.seed(<... time.time() ...>)`` reseeds numpy's
  global generator before the mutation. The patch inserts, first in that ``if`` body::

      yolo_det_v5.evolve_generation(opt, <results>)  # yolo-det

  (the generation is the number of rows in ``<results>``; the parent selection's Python
  ``random`` is seeded from it) and right after the reseed::

      <npr> = yolo_det_v5.evolve_rng(<npr>)  # yolo-det

  which hands back a generator derived from (seed, generation) under strict/warn and ``<npr>``
  itself (clock-seeded, the release's behaviour) under off.
* the genetic algorithm (master): ``for <g> in range(... .evolve ...)`` that calls ``train(...)``
  and has no clock reseed. Its initial population is drawn from the unseeded global ``random``
  before the loop, so ``yolo_det_v5.evolve_start(opt)  # yolo-det`` goes first in the suite that
  holds the loop; later draws follow the trainings, which reseed ``random`` themselves.

Revert is the codemod's generic one (every added line is marked).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import libcst as cst
import libcst.matchers as m

from .anchors import Plan
from .markers import ALIAS, MARKER

_CLOCK = m.Call(func=m.Attribute(value=m.Name("time"), attr=m.Name("time")))
_RESEED = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
    func=m.Attribute(value=m.Name(), attr=m.Name("seed")),
    args=[m.Arg(value=m.MatchIfTrue(lambda node: bool(m.findall(node, _CLOCK))))]))])
_EXISTS = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("exists")), args=[])
_EVOLVE_RANGE = m.For(target=m.Name(), iter=m.Call(func=m.Name("range"), args=[m.Arg(
    value=m.MatchIfTrue(lambda node: bool(m.findall(node, m.Attribute(attr=m.Name("evolve"))))))]))
_TRAIN_CALL = m.Call(func=m.Name("train"))


class _Chains(cst.CSTVisitor):
    """The clock reseeds (with the ``if`` statements above them) and the evolve loops (with their suite)."""

    def __init__(self) -> None:
        self.owners: List[cst.CSTNode] = []  # compound statements entered, innermost last
        self.suites: List[Sequence[cst.BaseStatement]] = []
        self.reseeds: List[Tuple[cst.SimpleStatementLine, List[cst.CSTNode]]] = []
        self.loops: List[Tuple[cst.For, Sequence[cst.BaseStatement]]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.SimpleStatementLine):
            if m.matches(node, _RESEED):
                self.reseeds.append((node, list(self.owners)))
            return False
        if isinstance(node, (cst.BaseExpression, cst.Decorator, cst.Parameters)):
            return False
        if isinstance(node, cst.For) and m.matches(node, _EVOLVE_RANGE):
            self.loops.append((node, self.suites[-1] if self.suites else ()))
        if isinstance(node, (cst.Module, cst.IndentedBlock)):
            self.suites.append(node.body)
        elif isinstance(node, (cst.BaseCompoundStatement, cst.Else)):
            self.owners.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, (cst.Module, cst.IndentedBlock)):
            self.suites.pop()
        elif isinstance(original_node, (cst.BaseCompoundStatement, cst.Else)):
            self.owners.pop()


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(f"{code}  {MARKER}\n")  # type: ignore[return-value]


def _results_if(owners: List[cst.CSTNode]) -> Optional[Tuple[cst.If, str]]:
    """The nearest ``if <results>.exists():`` above a reseed and the name of ``<results>``."""
    for owner in reversed(owners):
        if isinstance(owner, cst.If) and m.matches(owner.test, _EXISTS) and isinstance(owner.body, cst.IndentedBlock):
            return owner, owner.test.func.value.value
    return None


def plan(module: cst.Module, result: Plan) -> List[str]:
    """Add the evolve insertions for ``module`` to ``result``; notes saying what was found."""
    chains = _Chains()
    module.visit(chains)
    notes: List[str] = []
    for reseed, chain in chains.reseeds:
        found = _results_if(chain)
        npr = reseed.body[0].value.func.value.value
        if found is not None:
            branch, results = found
            first = branch.body.body[0]
            result.before.setdefault(id(first), []).append(_line(f"{ALIAS}.evolve_generation(opt, {results})"))
        result.after.setdefault(id(reseed), []).append(_line(f"{npr} = {ALIAS}.evolve_rng({npr})"))
        notes.append("--evolve: mutations drawn from (seed, generation) under strict/warn, not the clock")
    if not chains.reseeds:
        for loop, suite in chains.loops:
            if not m.findall(loop.body, _TRAIN_CALL) or not suite:
                continue
            result.before.setdefault(id(suite[0]), []).append(_line(f"{ALIAS}.evolve_start(opt)"))
            notes.append("--evolve: the initial population drawn from the seed under strict/warn")
            break
    return sorted(set(notes))


__all__ = ["plan"]
