"""Plot a comparison: both runs' loss curves with the first divergence marked, and how many
tensors differ at each step (matplotlib, no display needed)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Sequence

from ..core.extras import install_hint
from .compare import Comparison


class PlotError(RuntimeError):
    """The plot could not be written (matplotlib missing, or the file not writable)."""


def plot_comparison(comparison: Comparison, path: os.PathLike, labels: Sequence[str] = ("run 1", "run 2")) -> Path:
    """Write a PNG of ``comparison`` to ``path`` and return the path."""
    try:
        from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is
    except ImportError:
        raise PlotError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    fig = Figure(figsize=(9, 6))
    path = plot_path(path, fig.canvas.get_supported_filetypes())
    first = comparison.first_divergence
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    try:
        for losses, label, style in zip(comparison.losses, labels, ("-", "--")):
            steps = list(range(1, len(losses) + 1))
            top.plot(steps, [v if v is not None and not math.isnan(v) else math.nan for v in losses],
                     style, label=label, linewidth=1.2)
        if first is not None:
            for axis in (top, bottom):
                axis.axvline(first.step, color="tab:red", linestyle=":", linewidth=1.5)
            top.annotate(f"step {first.step}: {first.kind} {first.tensor}", xy=(first.step, 1),
                         xycoords=("data", "axes fraction"), xytext=(4, -14), textcoords="offset points",
                         color="tab:red", fontsize=8)
        title = (f"identical: {comparison.steps} steps, {comparison.tensors} tensors" if comparison.identical
                 else f"first divergence: step {first.step}, {first.kind}" if first is not None
                 else f"inconclusive: {comparison.problem}")
        top.set_title(title, fontsize=10)
        top.set_ylabel("loss")
        top.legend(loc="upper right", fontsize=8)
        steps = list(range(1, len(comparison.differing) + 1))
        bottom.bar(steps, comparison.differing, color="tab:red", width=0.8)
        bottom.set_ylabel("differing tensors")
        bottom.set_xlabel("optimizer step")
        _integer_axes(top, bottom, comparison)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise PlotError(f"cannot write {path}: {exc.strerror}") from None
    return path


def _integer_axes(top, bottom, comparison: Comparison) -> None:
    """Steps and tensor counts are whole numbers: integer ticks only, the count axis from 0 (at least to 1, so no
    tensor differing is not drawn as a -0.05..0.05 axis) and said in words when nothing differs."""
    from matplotlib.ticker import MaxNLocator

    steps = max([len(comparison.differing), *(len(losses) for losses in comparison.losses), 1])
    top.set_xlim(0.5, steps + 0.5)  # shared with the bottom axis
    for axis in (top.xaxis, bottom.xaxis, bottom.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    most = max(comparison.differing, default=0)
    bottom.set_ylim(0, max(most, 1) * 1.1)
    if most == 0:
        bottom.text(0.5, 0.5, "no differing tensors", transform=bottom.transAxes, ha="center", va="center",
                    color="tab:green", fontsize=9)


DEFAULT_NAME = "comparison.png"


def plot_path(path: os.PathLike, formats: Mapping[str, str]) -> Path:
    """Where the plot goes: ``DIR/comparison.png`` for a folder, ``.png`` added to a name without a
    suffix; a suffix matplotlib cannot write is a :class:`PlotError` (nothing written)."""
    text = os.fspath(path)
    path = Path(path)
    if path.is_dir() or text.endswith(("/", os.sep)):
        return path / DEFAULT_NAME
    suffix = path.suffix.lower().lstrip(".")
    if not suffix:
        return path.with_name(path.name + ".png")
    if suffix not in formats:
        raise PlotError(f"cannot write a plot to {path}: matplotlib does not write .{suffix} files; use "
                        f".png (or one of {', '.join('.' + f for f in sorted(formats))})")
    return path
