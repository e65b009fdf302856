"""The second kind of target of ``apply-patch``: the release's own NMS in ``utils/general.py``.

Every YOLOv5-family release and fork sets ``time_limit = ...`` in ``non_max_suppression`` and
leaves the per-image loop with ``if (time.time() - t) > time_limit: ... break``, so validation
results depend on the clock. The function is found by that shape (not by its name); right after
the assignment the patch inserts::

    from yolo_det.integrations import yolov5 as yolo_det_v5  # yolo-det
    time_limit = yolo_det_v5.nms_time_limit(time_limit)  # yolo-det

and, before the function's final ``return output``, ``yolo_det_v5.nms_output(output)  # yolo-det``
(the predictions for the fingerprint log's validation records). The import is local, so the
module still imports where yolo-det is not installed until NMS runs. A tree without such a limit
has nothing to patch. Revert is the codemod's generic one (every added line is marked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import libcst as cst
import libcst.matchers as m

from .anchors import Plan
from .files import check_syntax, inside, read_large
from .markers import ALIAS, IMPORT, MARKER
from .result import FileChange
from .transforms import Apply, Revert, module_is_patched

#: Where the releases keep their NMS, relative to the repository root.
CANDIDATES = ("utils/general.py",)

_CLOCK = m.Call(func=m.Attribute(value=m.Name("time"), attr=m.Name("time") | m.Name("perf_counter")
                                 | m.Name("monotonic")))
_ASSIGN = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())])])
_RETURN_NAME = m.SimpleStatementLine(body=[m.Return(value=m.Name())])


def _limit_check(name: str) -> m.If:
    """``if (<clock>() - t) > <name>:`` (the release's time-limit check)."""
    return m.If(test=m.Comparison(
        left=m.BinaryOperation(left=_CLOCK, operator=m.Subtract()),
        comparisons=[m.ComparisonTarget(operator=m.GreaterThan(), comparator=m.Name(name))]))


def find_targets(root: Path) -> List[Path]:
    """The NMS modules of the repository at ``root`` that exist (no symlinks, nothing outside ``root``)."""
    found = []
    for rel in CANDIDATES:
        path = root.joinpath(*rel.split("/"))
        if path.is_file() and not path.is_symlink() and inside(root, path):
            found.append(path)
    return found


def _functions(module: cst.Module) -> List[cst.FunctionDef]:
    return [node for node in m.findall(module, m.FunctionDef()) if isinstance(node, cst.FunctionDef)]


def _limit_anchor(func: cst.FunctionDef) -> Optional[Tuple[cst.SimpleStatementLine, str]]:
    """The ``time_limit = ...`` statement in ``func``'s own suite whose name the loop's check compares with."""
    if not isinstance(func.body, cst.IndentedBlock):
        return None
    for stmt in func.body.body:
        if not m.matches(stmt, _ASSIGN):
            continue
        name = stmt.body[0].targets[0].target.value
        checks = m.findall(func.body, _limit_check(name))
        if any(m.findall(check, m.Break()) for check in checks):
            return stmt, name
    return None


def plan(module: cst.Module) -> Tuple[Plan, List[str]]:
    """Plan the insertions into every NMS function of ``module``; the names of the functions patched."""
    result = Plan()
    patched: List[str] = []
    for func in _functions(module):
        anchor = _limit_anchor(func)
        if anchor is None:
            continue
        stmt, name = anchor
        result.after.setdefault(id(stmt), []).extend([
            _line(IMPORT), _line(f"{name} = {ALIAS}.nms_time_limit({name})")])
        last = func.body.body[-1]
        if m.matches(last, _RETURN_NAME):
            result.before.setdefault(id(last), []).append(_line(f"{ALIAS}.nms_output({last.body[0].value.value})"))
        patched.append(func.name.value)
    return result, patched


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(f"{code}  {MARKER}\n")  # type: ignore[return-value]


#: What a top-level statement of utils/general.py must hold to be parsed: the limit's check, or a patch.
KEEP_WORDS = (b"time_limit", b"time.time", b"yolo-det", b"yolo_det")


def apply_file(root: Path, path: Path) -> FileChange:
    """Lift the NMS time limit in one module; ``skipped`` (nothing to do) when it has none."""
    # Only the statements that can hold the limit (or an earlier patch) go through libcst.
    return apply_planned(root, path, plan, "no NMS time limit: nothing to do",
                         "NMS time limit lifted under strict/warn in {functions}", min_lines=1, keep=KEEP_WORDS)


def apply_planned(root: Path, path: Path, planner: Callable[[cst.Module], Tuple[Plan, List[str]]], skip: str,
                  note: str, min_lines: Optional[int] = None, keep: Sequence[bytes] = KEEP_WORDS) -> FileChange:
    """Patch one file with ``planner`` (insertions and the functions they go in) on its unpatched form;
    ``skipped`` with note ``skip`` when it plans no function, else ``note`` naming them (``{functions}``)."""
    rel, source, module, outline = read_large(root, path, min_lines=min_lines, keep=keep)
    text = source if outline is None else outline.text
    patched_before = module_is_patched(module, text)
    base = module.visit(Revert()) if patched_before else module
    insertions, functions = planner(base)
    if not functions:
        return FileChange(path, rel, source, source, "skipped", [skip], module.encoding)
    new = base.visit(Apply(insertions)).bytes
    new = new if outline is None else outline.expand(new)
    check_syntax(rel, source, new, module.encoding)
    status = "already patched" if new == source else ("updated" if patched_before else "patched")
    notes = [note.format(functions=", ".join(f + "()" for f in functions))]
    return FileChange(path, rel, source, new, status, notes, module.encoding)


__all__ = ["CANDIDATES", "apply_file", "apply_planned", "find_targets", "plan"]
