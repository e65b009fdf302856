"""Small detector-shaped models written for yolo-det's tests (shapes only; random weights).

Each mirrors a block that users reported failing (or not) under strict determinism on CUDA:
FFCA-YOLO's SCAM, CBAM, SE, CoordAtt, PSP pooled context, a grid_sample head, reflection
padding, a bicubic upsample, plus a plain YOLOv5-like model. ``detector(block)`` puts a block
into a YOLOv5-like network so module paths read like YOLOv5's (``model.4.att.max``).
"""

from .blocks import PlainDetector, detector  # noqa: F401
from .zoo import BLOCKS, EXPECTED  # noqa: F401
