"""Process-wide wrappers that feed the recorder: ``DataLoader`` batches and the loss given to ``autograd.backward``."""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

_originals: Dict[str, Any] = {}
_backward_depth = 0


def patch(current: Callable[[], Any]) -> None:
    """Wrap ``DataLoader`` iterators and ``torch.autograd.backward`` to feed ``current()``, the active recorder."""
    from torch.utils.data import dataloader

    if "next" not in _originals:
        original = dataloader._BaseDataLoaderIter.__next__
        _originals["next"] = original

        def __next__(self):  # noqa: N807 - replaces the iterator's own method
            capture = getattr(current(), "capture", None)
            if capture is not None:  # loader traffic is no op of the step (its batch is digested), bar a data capture
                batch = capture.fetch(self, original)
            else:
                batch = original(self)
            recorder = current()
            if recorder is not None and not recorder.closed:
                recorder.on_batch(self, batch)
            return batch

        dataloader._BaseDataLoaderIter.__next__ = __next__
    if "backward" not in _originals:
        original_backward = torch.autograd.backward
        _originals["backward"] = original_backward

        def backward(tensors, *args, **kwargs):
            global _backward_depth
            recorder = current()
            if recorder is not None and not recorder.closed and _backward_depth == 0:
                recorder.on_backward(tensors)
            _backward_depth += 1
            try:
                return original_backward(tensors, *args, **kwargs)
            finally:
                _backward_depth -= 1

        backward.__wrapped__ = original_backward  # type: ignore[attr-defined]
        backward.__doc__ = original_backward.__doc__
        torch.autograd.backward = backward


def unpatch() -> None:
    """Put the originals back."""
    from torch.utils.data import dataloader

    original = _originals.pop("next", None)
    if original is not None:
        dataloader._BaseDataLoaderIter.__next__ = original
    original_backward = _originals.pop("backward", None)
    if original_backward is not None and getattr(torch.autograd.backward, "__wrapped__", None) is original_backward:
        torch.autograd.backward = original_backward



__all__ = ["patch", "unpatch"]
