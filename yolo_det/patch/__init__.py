"""``yolo-det apply-patch`` / ``revert-patch``: the libcst codemod of YOLOv5-family ``train.py``.

Owns: ``codemod`` (apply/revert one repository), ``anchors`` (finding the statements to patch by
tree shape and planning the insertions), ``transforms`` (the libcst transformers), ``markers``
(how patched lines are marked), ``files`` (targets, reading), ``journal`` (the tree lock and
all-or-nothing writes that keep owners and modes), ``skeleton`` (parsing only what matters of
large files), ``result``, ``nms`` (the second kind of target: the release's NMS in
``utils/general.py``, its wall-clock limit), ``evaluation`` (the third kind: ``val.py``, ``test.py``,
``detect.py``), ``evolve`` (the ``--evolve`` loop: mutations from the seed), ``export``
(``export.py``: the ONNX exporter it was written for, provenance of its artifacts).
Imports nothing else of yolo-det: the code it inserts calls :mod:`yolo_det.integrations.yolov5`.
"""

from .codemod import MARKER, FileChange, PatchError, PatchResult, apply_patch, is_patched, revert_patch

__all__ = ["PatchError", "PatchResult", "FileChange", "apply_patch", "revert_patch", "is_patched", "MARKER"]
