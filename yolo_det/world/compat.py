"""What a virtual world size cannot make invariant: refused under strict, a warning under warn.

Each entry says why, so the refusal tells the user what to change. Training programs name these options
differently; the adapters map their own option (YOLOv5 ``--sync-bn``, ``--multi-scale``, ...) to these keys.
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Mapping, Optional

from ..core.mode import ConfigError

REASONS: Mapping[str, str] = {
    "sync_bn": "SyncBatchNorm merges the ranks' statistics and sums their gradients in an order that depends on "
               "the number of processes; an invariant SyncBatchNorm needs V statistics rows in virtual order, "
               "which yolo-det does not provide. Train without it (each virtual rank normalises its micro-batch)",
    "multi_scale": "the multi-scale image size is drawn per process, so it changes with the number of processes; "
                   "train at one size",
    "image_weights": "image-weighted sampling draws the epoch from the process's generator, not per virtual rank",
    "autobatch": "an automatic batch size depends on the GPU's memory; give a batch divisible by V",
}


def check(options: Iterable[str], mode: str, warn: Optional[Callable[[str], None]] = None,
          reasons: Optional[Mapping[str, str]] = None) -> List[str]:
    """Refuse (strict: :class:`ConfigError`) or report (warn: ``warn(message)``, returned) each active option.

    ``options``: the keys of :data:`REASONS` (or of an adapter's own ``reasons``) the run has switched on.
    Mode ``off`` only returns the messages."""
    known = {**REASONS, **(reasons or {})}
    messages = [f"virtual_world_size cannot make {key.replace('_', '-')} invariant: {known[key]}"
                for key in options]
    if messages and mode == "strict":
        raise ConfigError("; ".join(messages) + " (under --deterministic warn the run goes on with a warning)")
    if warn is not None and mode == "warn":
        for message in messages:
            warn(message)
    return messages

