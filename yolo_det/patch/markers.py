"""How a patched file marks what yolo-det added or took out (the contract revert relies on)."""

from __future__ import annotations


import libcst as cst

MARKER = "# yolo-det"
REMOVED = "# yolo-det removed: "
ALIAS = "yolo_det_v5"
IMPORT = f"from yolo_det.integrations import yolov5 as {ALIAS}"


def marked_line(node: cst.CSTNode) -> bool:
    comment = node.trailing_whitespace.comment if isinstance(node, cst.SimpleStatementLine) else None
    return comment is not None and comment.value.strip() == MARKER


def marked_with(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.With) or not isinstance(node.body, cst.IndentedBlock):
        return False
    comment = node.body.header.comment
    return comment is not None and comment.value.strip() == MARKER


def marked_for(node: cst.CSTNode) -> bool:
    """The virtual micro-batch loop yolo-det put around a batch's forward ... backward."""
    if not isinstance(node, cst.For) or not isinstance(node.body, cst.IndentedBlock):
        return False
    comment = node.body.header.comment
    return comment is not None and comment.value.strip() == MARKER


def marked_guard(node: cst.CSTNode) -> bool:
    """An ``if`` whose test yolo-det passed through one of its calls (``if yolo_det_v5.f(<test>, ...):``)."""
    if not isinstance(node, cst.If) or not isinstance(node.body, cst.IndentedBlock):
        return False
    comment = node.body.header.comment
    test = node.test
    return comment is not None and comment.value.strip() == MARKER and isinstance(test, cst.Call) and \
        isinstance(test.func, cst.Attribute) and isinstance(test.func.value, cst.Name) and \
        test.func.value.value == ALIAS and bool(test.args)


def removed_marker(line: cst.EmptyLine) -> bool:
    return line.comment is not None and line.comment.value.startswith(REMOVED)
