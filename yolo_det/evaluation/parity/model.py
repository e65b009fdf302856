"""The ``.pt`` model parity compares with: float32 on CPU, Conv+BN fused as the validators run it, the end-to-end
head switched between one-to-many and one-to-one on request, its weights rounded to fp16 for the fp16 cause.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from ...record import export_provenance
from .export import ParityInputError, class_names


class TorchModel:
    """The ``.pt`` model in float32 on CPU; the head switched between one-to-many and one-to-one on request."""

    def __init__(self, path: Path):
        import torch

        try:
            self.model, _ = export_provenance.load_checkpoint_model(path)
        except (OSError, RuntimeError, ValueError, ModuleNotFoundError) as exc:
            raise ParityInputError(f"{path}: cannot load the PyTorch model ({exc})") from exc
        self.digest = export_provenance.weights_digest(self.model)
        self.head = self.model.model[-1] if hasattr(self.model, "model") else None
        self.yolov5 = type(self.head).__name__ == "Detect" and hasattr(self.head, "anchors") and hasattr(self.head, "na")
        names = getattr(self.model, "names", None)
        self.nc = len(names) if names else int(getattr(self.head, "nc", 0))
        self.names = class_names(names)
        self.stride = int(max(self.model.stride)) if hasattr(self.model, "stride") else 32
        self.has_one2one = getattr(self.head, "one2one_cv2", None) is not None
        if hasattr(self.model, "fuse") and not self.has_one2one:
            # Conv+BN folded, as `yolo val` / val.py and the exporters run it (fusing an end-to-end model would drop
            # its one-to-many head, which the one-to-one cause needs)
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    self.model = self.model.fuse(verbose=False)
                except TypeError:  # YOLOv5's fuse() takes no verbose
                    self.model = self.model.fuse()
            self.model.eval()
        self.torch = torch
        self._fp16 = None

    def __call__(self, x: np.ndarray, end2end: bool = False, fp16_weights: bool = False) -> List[np.ndarray]:
        """The decoded outputs for the batch ``x`` (one-to-one head when ``end2end``)."""
        return self.run(x, end2end, fp16_weights=fp16_weights)[0]

    def run(self, x: np.ndarray, end2end: bool = False, one2many: bool = False,
            fp16_weights: bool = False) -> Tuple[List[np.ndarray], Optional[List[np.ndarray]]]:
        """The decoded outputs, and with ``one2many`` those of the one-to-many head from the same forward pass.

        An end-to-end head computes both heads in every eval forward (the one-to-many raw maps come back beside the
        one-to-one result), so its one-to-many decoding costs no second pass through the backbone.
        """
        model = self._half_rounded() if fp16_weights else self.model
        head = model.model[-1] if hasattr(model, "model") else None
        if self.has_one2one:
            head.end2end = end2end
        with self.torch.no_grad():
            out = model(self.torch.from_numpy(x))
            o2m = None
            if one2many:
                raw = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
                if isinstance(raw, dict) and isinstance(raw.get("one2many"), dict) and hasattr(head, "_inference"):
                    head.end2end = False  # decode as the one-to-many head does (xywh boxes)
                    try:
                        o2m = [head._inference(raw["one2many"]).float().numpy()]
                    finally:
                        head.end2end = end2end
                else:
                    o2m = self.run(x, False, fp16_weights=fp16_weights)[0]
        first = out[0] if isinstance(out, (tuple, list)) else out
        tensors = list(first) if isinstance(first, (tuple, list)) else [first]
        return [t.float().numpy() for t in tensors if isinstance(t, self.torch.Tensor)], o2m

    def clone(self) -> "TorchModel":
        """An independent copy (own modules and head state) for a forward on another thread."""
        import copy

        twin = copy.copy(self)
        twin.model, twin.head, twin._fp16 = copy.deepcopy(self.model), None, None
        twin.head = twin.model.model[-1] if hasattr(twin.model, "model") else None
        return twin

    def _half_rounded(self):
        """The model with every float weight rounded to fp16 and back: what an fp16-weight export computes with."""
        if self._fp16 is None:
            import copy

            self._fp16 = copy.deepcopy(self.model).half().float().eval()
        return self._fp16


__all__ = ["TorchModel"]
