"""Strip plots of seed studies: one column per study, one point per seed, the mean and its interval."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from ..core.extras import install_hint
from . import statistics
from ..proof.plot import PlotError, plot_path
from .study import Study


def plot_studies(studies: Mapping[str, Study], metric: str, path: os.PathLike) -> Path:
    """Write a PNG of ``metric`` over each study's seeds (a strip plot with the mean's 95% interval)."""
    try:
        from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is
    except ImportError:
        raise PlotError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    fig = Figure(figsize=(max(3.0, 1.6 * len(studies) + 1.5), 4.5))
    path = plot_path(path, fig.canvas.get_supported_filetypes())
    axis = fig.subplots()
    for x, (label, study) in enumerate(studies.items()):
        values = [v for v in study.values(metric) if v == v]
        if not values:
            continue
        offsets = [x + 0.08 * ((i % 5) - 2) for i in range(len(values))]
        axis.scatter(offsets, values, s=18, alpha=0.8)
        summary = statistics.summarize(values)
        if summary.ci is not None:
            axis.errorbar([x + 0.3], [summary.mean], yerr=[[summary.mean - summary.ci[0]], [summary.ci[1] - summary.mean]],
                          fmt="o", color="black", capsize=4)
    axis.set_xticks(range(len(studies)))
    axis.set_xticklabels([f"{label}\n({len(s.runs)} seeds)" for label, s in studies.items()])
    axis.set_ylabel(metric)
    axis.set_title(f"{metric} per seed; black: mean and 95% CI")
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise PlotError(f"cannot write the plot {path}: {exc.strerror}") from None
    return path


__all__ = ["plot_studies"]
