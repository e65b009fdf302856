"""The libcst transformers: insert the planned calls (apply) and take them out again (revert)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import libcst as cst

import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from .anchors import Plan, code_of, descend
from .markers import ALIAS, MARKER, REMOVED, marked_for, marked_guard, marked_line, marked_with, removed_marker


class MarkerError(ValueError):
    """A ``# yolo-det`` marker was edited so that revert cannot undo the patch exactly."""


# -- transforms ------------------------------------------------------------------------------

def _wrap(stmt: cst.BaseStatement, expression: str) -> cst.With:
    return cst.With(
        items=[cst.WithItem(item=cst.parse_expression(expression))],
        body=cst.IndentedBlock(
            body=[stmt.with_changes(leading_lines=())],
            header=cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(MARKER)),
        ),
        leading_lines=stmt.leading_lines,
    )


def _marked_header() -> cst.TrailingWhitespace:
    return cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(MARKER))


def _loop(stmts: List[cst.BaseStatement], header: str) -> cst.For:
    """``for <header>:  # yolo-det`` around ``stmts`` (their first's leading lines go above the loop)."""
    first = stmts[0]
    template = cst.ensure_type(cst.parse_statement(f"for {header}:\n    pass\n"), cst.For)
    body = [first.with_changes(leading_lines=()), *stmts[1:]]
    return template.with_changes(body=cst.IndentedBlock(body=body, header=_marked_header()),
                                 leading_lines=first.leading_lines)


def _guarded(node: cst.If, call: str) -> cst.If:
    """``if <call>(<test>, opt):  # yolo-det``: the release's test passed through yolo-det's call."""
    test = cst.Call(func=cst.parse_expression(call), args=[cst.Arg(value=node.test, comma=cst.Comma(
        whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(value=cst.Name("opt"))])
    return node.with_changes(test=test, body=node.body.with_changes(header=_marked_header()))


def _removed_line(stmt: cst.BaseStatement) -> cst.EmptyLine:
    code = code_of(stmt.with_changes(leading_lines=())).rstrip("\r\n")
    return cst.EmptyLine(indent=True, comment=cst.Comment(REMOVED + code))


class Apply(cst.CSTTransformer):
    """Carry out a :class:`Plan` on the module it was made for."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and descend(node)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._suite(original.body, updated.body) + self.plan.append_to.get(id(original), [])
        return updated.with_changes(body=body)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._suite(original.body, updated.body))

    def _suite(self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]) -> list:
        out: list = []
        pending: List[cst.EmptyLine] = []
        group: Optional[Tuple[int, str, list]] = None  # a micro-batch loop being filled: (id(last), header, stmts)
        for orig, new in zip(originals, updated):
            key = id(orig)
            if key in self.plan.loop:
                group = (*self.plan.loop[key], [])
                top, out = out, group[2]
            if key in self.plan.remove:
                pending += [*new.leading_lines, _removed_line(new)]
                continue
            out += self.plan.before.get(key, [])
            if key in self.plan.wrap:
                new = _wrap(new, self.plan.wrap[key])
            if key in self.plan.guard and isinstance(new, cst.If):
                new = _guarded(new, self.plan.guard[key])
            if pending:
                new = new.with_changes(leading_lines=[*pending, *new.leading_lines])
                pending = []
            out.append(new)
            out += self.plan.after.get(key, [])
            if group is not None and key == group[0]:
                top.append(_loop(group[2], group[1]))
                out, group = top, None
        return out


class Revert(cst.CSTTransformer):
    """Undo every marked change: drop marked lines, unwrap marked ``with``, restore removed lines."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and descend(node)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body, orphans = _revert_suite(updated.body)
        return updated.with_changes(body=body, footer=[*orphans, *updated.footer])

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body, orphans = _revert_suite(updated.body)
        return updated.with_changes(body=body, footer=[*orphans, *updated.footer])


def _revert_suite(body: Sequence[cst.BaseStatement]) -> Tuple[list, List[cst.EmptyLine]]:
    out: list = []
    carry: List[cst.EmptyLine] = []
    for stmt in body:
        if carry:
            stmt = stmt.with_changes(leading_lines=[*carry, *stmt.leading_lines])
            carry = []
        restored, stmt = _restore_removed(stmt)
        out += restored
        if marked_line(stmt):
            carry = list(stmt.leading_lines)
        elif marked_guard(stmt):
            header = stmt.body.header.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
            out.append(stmt.with_changes(test=stmt.test.args[0].value, body=stmt.body.with_changes(header=header)))
        elif marked_with(stmt) or marked_for(stmt):
            inner = list(stmt.body.body)
            inner[0] = inner[0].with_changes(leading_lines=[*stmt.leading_lines, *inner[0].leading_lines])
            out += inner
        else:
            out.append(stmt)
    return out, carry


def _restore_removed(stmt: cst.BaseStatement) -> Tuple[list, cst.BaseStatement]:
    """Statements recorded as ``# yolo-det removed:`` lines above ``stmt``, and ``stmt`` without them."""
    restored: list = []
    lines: List[cst.EmptyLine] = []
    for line in stmt.leading_lines:
        if removed_marker(line):
            code = line.comment.value[len(REMOVED):]
            try:
                statement = cst.parse_statement(code + "\n")
            except cst.ParserSyntaxError:
                raise MarkerError(f"the comment `{line.comment.value}` no longer holds one line of Python, so the "
                                  "line it stands for cannot be put back; restore it (or delete the comment and "
                                  "put the line back yourself)") from None
            restored.append(statement.with_changes(leading_lines=lines))
            lines = []
        else:
            lines.append(line)
    if not restored:
        return [], stmt
    return restored, stmt.with_changes(leading_lines=lines)


class _Finder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if marked_line(node) or marked_with(node) or marked_for(node) or marked_guard(node) or (isinstance(node, cst.EmptyLine) and removed_marker(node)):
            self.found = True
            return False
        return not isinstance(node, (cst.BaseExpression, cst.BaseSmallStatement))


def module_is_patched(module: cst.Module, source: bytes) -> bool:
    if MARKER.encode("ascii") not in source:  # Python source encodings are ASCII-compatible
        return False
    finder = _Finder()
    module.visit(finder)
    return finder.found



class _Unmarked(cst.CSTVisitor):
    """Statements that call yolo-det (use ``yolo_det_v5``) without the exact marker revert relies on."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.found: List[Tuple[int, str]] = []

    def _record(self, node: cst.CSTNode, code: str) -> None:
        self.found.append((self.get_metadata(PositionProvider, node).start.line, code.strip()))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        if not marked_line(node) and m.findall(node, m.Name(ALIAS)):
            self._record(node, code_of(node.with_changes(leading_lines=())).splitlines()[0])
        return False

    def visit_With(self, node: cst.With) -> bool:
        if not marked_with(node) and any(m.findall(item, m.Name(ALIAS)) for item in node.items):
            header = code_of(node.with_changes(leading_lines=())).splitlines()[0]
            self._record(node, header)
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and not isinstance(node, (cst.BaseExpression, cst.BaseSmallStatement))


def unmarked_uses(module: cst.Module) -> List[Tuple[int, str]]:
    """``(line, code)`` of every statement using ``yolo_det_v5`` whose ``# yolo-det`` marker was
    removed or changed: revert would keep it and drop its import (NameError at run time)."""
    visitor = _Unmarked()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
    return visitor.found
