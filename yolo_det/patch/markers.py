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


def removed_marker(line: cst.EmptyLine) -> bool:
    return line.comment is not None and line.comment.value.startswith(REMOVED)
