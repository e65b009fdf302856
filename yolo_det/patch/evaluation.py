"""The third kind of target of ``apply-patch``: a tree's evaluation scripts (``val.py``, ``test.py``,
``detect.py``, ``segment/val.py``, ``classify/predict.py`` ...).

Found by tree shape, not by name: a script that parses a command line (``parser = ArgumentParser()``
... ``opt = parser.parse_args()``), does not train (no ``backward``), and has a module-level
function that runs ``model(...)`` in a loop (the evaluation function: ``run`` in v6.0+, ``test``/
``detect`` in v5.0-style trees and yolov7). The patch inserts::

    from yolo_det.integrations import yolov5 as yolo_det_v5  # yolo-det      (after the imports)
    yolo_det_v5.add_eval_arguments(parser)  # yolo-det                       (before the parse)
    yolo_det_v5.evaluation_start(opt)  # yolo-det                            (after it)
    yolo_det_v5.evaluated(locals())  # yolo-det     (before the function's final return, or at its end)

The evaluation function hands over its own local names, so one call serves every release's names
for batch size, thresholds and metrics. Revert is the codemod's generic one.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import libcst as cst
import libcst.matchers as m

from .anchors import _IMPORT, _PARSER, Plan, _Index, _line
from . import skeleton
from .files import scripts_where
from .markers import ALIAS, IMPORT
from .nms import apply_planned
from .result import FileChange

#: Bytes every evaluation script holds (a cheap filter before parsing).
_NEEDS = (b"ArgumentParser", b"model(")
_MODEL_CALL = m.Call(func=m.Name("model"))
_PARSE = m.Call(func=m.Attribute(attr=m.Name("parse_args") | m.Name("parse_known_args")))
_RETURN = m.SimpleStatementLine(body=[m.Return()])
_TRAINS = m.Attribute(attr=m.Name("backward"))
#: What a top-level statement of a large script must hold to be parsed (see :mod:`.skeleton`).
KEEP_WORDS = skeleton.KEEP_WORDS + (b"model(",)


def find_targets(root: Path) -> List[Path]:
    """Candidate evaluation scripts under ``root`` (depth 2 like training scripts; no links, no library folders)."""
    return scripts_where(root, lambda text: all(word in text for word in _NEEDS) and b".backward(" not in text)


def plan(module: cst.Module) -> Tuple[Plan, List[str]]:
    """Plan the insertions; the names of the evaluation functions (empty: not an evaluation script)."""
    index = _Index()
    module.visit(index)
    entries = index.entries
    result = Plan()
    if m.findall(module, _TRAINS):
        return result, []  # a training script (its validations are recorded by the training patch)
    functions = [stmt for stmt in module.body if isinstance(stmt, cst.FunctionDef) and _evaluates(stmt)]
    parse = _parse_statement(entries)
    imports = [e for e in entries if e.func is None and e.body is module.body and m.matches(e.stmt, _IMPORT)]
    if not functions or parse is None or not imports:
        return result, []
    stmt, parser_name, opt_name = parse
    result.after.setdefault(id(imports[-1].stmt), []).append(_line(IMPORT))
    result.before.setdefault(id(stmt), []).append(_line(f"{ALIAS}.add_eval_arguments({parser_name})"))
    result.after.setdefault(id(stmt), []).append(_line(f"{ALIAS}.evaluation_start({opt_name})"))
    for func in functions:
        body = func.body
        call = _line(f"{ALIAS}.evaluated(locals())")
        if m.matches(body.body[-1], _RETURN):
            result.before.setdefault(id(body.body[-1]), []).append(call)
        else:
            result.append_to.setdefault(id(body), []).append(call)
    return result, [f.name.value for f in functions]


def _evaluates(func: cst.FunctionDef) -> bool:
    """A module-level function that calls ``model(...)`` in a ``for`` loop over data (not ``range()``:
    ``export.py``'s dry runs)."""
    if not isinstance(func.body, cst.IndentedBlock):
        return False
    loops = m.findall(func.body, m.For(iter=~m.Call(func=m.Name("range"))))
    return any(m.findall(loop.body, _MODEL_CALL) for loop in loops)


def _parse_statement(entries) -> Optional[Tuple[cst.SimpleStatementLine, str, str]]:
    """(``opt = parser.parse_args()`` statement, parser name, opt name) in the suite that built the parser."""
    for entry in entries:
        if not m.matches(entry.stmt, _PARSER):
            continue
        parser_name = entry.stmt.body[0].targets[0].target.value
        body = list(entry.body)
        for later in body[body.index(entry.stmt) + 1:]:
            if (m.matches(later, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())])]))
                    and m.findall(later, _PARSE)):
                return later, parser_name, later.body[0].targets[0].target.value
    return None


def apply_file(root: Path, path: Path) -> FileChange:
    """Patch one evaluation script; ``skipped`` when it does not have the shape of one."""
    return apply_planned(root, path, plan, "not an evaluation script", "evaluation: --deterministic/--fingerprint, "
                         "predictions, metrics and settings recorded in {functions}", keep=KEEP_WORDS)


__all__ = ["apply_file", "find_targets", "plan"]
