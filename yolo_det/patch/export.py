"""The fourth kind of target of ``apply-patch``: a tree's export script (YOLOv5-family ``export.py``).

Found by tree shape: a script with a module-level function that calls ``torch.onnx.export(...)`` and no
``.backward(`` (it does not train). At the start of each such function the patch inserts::

    from yolo_det.integrations import yolov5 as yolo_det_v5  # yolo-det
    torch = yolo_det_v5.torch_for_export()  # yolo-det

(``torch`` seen through a proxy whose ``onnx.export`` passes ``dynamo=False`` where the installed torch's
signature has it: torch >= 2.9 defaults to the dynamo exporter, which the releases' export code was never
written for), and before the final ``return NAME`` of the function that takes ``weights`` and ``include``
(``run`` in v6.0+)::

    yolo_det_v5.exports_done(locals())  # yolo-det

which writes the provenance (source checkpoint weight digest, every export argument, versions) into each ONNX /
OpenVINO artifact and beside it. Revert is the codemod's generic one (every added line is marked).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import libcst as cst
import libcst.matchers as m

from .anchors import Plan
from .files import scripts_where
from .markers import ALIAS, IMPORT, MARKER
from .nms import apply_planned
from .result import FileChange

_ONNX_EXPORT = m.Call(func=m.Attribute(value=m.Attribute(value=m.Name("torch"), attr=m.Name("onnx")),
                                       attr=m.Name("export")))
_RETURN_NAME = m.SimpleStatementLine(body=[m.Return(value=m.Name())])
_DOCSTRING = m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())])
KEEP_WORDS = (b"torch.onnx.export", b"include", b"yolo-det", b"yolo_det", b"def ")


def find_targets(root: Path) -> List[Path]:
    """Candidate export scripts under ``root`` (depth 2, no links, no library folders)."""
    return scripts_where(root, lambda text: b"torch.onnx.export(" in text and b".backward(" not in text)


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(f"{code}  {MARKER}\n")  # type: ignore[return-value]


def _params(func: cst.FunctionDef) -> List[str]:
    p = func.params
    return [x.name.value for x in list(p.params) + list(p.kwonly_params) + list(p.posonly_params)]


def plan(module: cst.Module) -> Tuple[Plan, List[str]]:
    """Plan the insertions into the export functions of ``module``; the names of the functions patched."""
    result = Plan()
    patched: List[str] = []
    for func in module.body:
        if not isinstance(func, cst.FunctionDef) or not isinstance(func.body, cst.IndentedBlock):
            continue
        body = func.body.body
        if m.findall(func.body, _ONNX_EXPORT) and body:
            lines = [_line(IMPORT), _line(f"torch = {ALIAS}.torch_for_export()")]
            if m.matches(body[0], _DOCSTRING) and len(body) > 1:
                result.after.setdefault(id(body[0]), []).extend(lines)
            else:
                result.before.setdefault(id(body[0]), []).extend(lines)
            patched.append(func.name.value)
        elif {"weights", "include"} <= set(_params(func)) and body and m.matches(body[-1], _RETURN_NAME):
            result.before.setdefault(id(body[-1]), []).extend([_line(IMPORT), _line(f"{ALIAS}.exports_done(locals())")])
            patched.append(func.name.value)
    return result, patched


def apply_file(root: Path, path: Path) -> FileChange:
    """Patch one export script; ``skipped`` when it has no ``torch.onnx.export`` call in a function."""
    return apply_planned(root, path, plan, "no torch.onnx.export in a function: nothing to do",
                         "export: dynamo=False where torch defaults to the dynamo exporter, provenance written into "
                         "the artifacts in {functions}", min_lines=1, keep=KEEP_WORDS)


__all__ = ["apply_file", "find_targets", "plan"]
