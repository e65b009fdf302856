"""``yolo-det report``: one self-contained HTML page of what the inputs prove, checked in a real headless Chromium;
and the axes of ``verify --plot`` (integer steps, no +-0.05 axis when no tensor differs)."""

from __future__ import annotations

import pytest

from yolo_det.proof.compare import Comparison, Divergence


def _comparison(steps: int, differing) -> Comparison:
    first = next((Divergence(i + 1, "grad", "model.0.conv.weight") for i, n in enumerate(differing) if n), None)
    losses = [4.0 - 0.1 * i for i in range(steps)]
    return Comparison(identical=first is None, steps=steps, tensors=100 * steps, first_divergence=first,
                      lengths=(steps, steps), differing=list(differing),
                      losses=(losses, [v + (0.01 if first and i + 1 >= first.step else 0) for i, v in enumerate(losses)]))


def _saved_figure(monkeypatch, comparison, tmp_path):
    """The matplotlib Figure ``plot_comparison`` saves (drawn, so its ticks are final)."""
    from matplotlib.figure import Figure

    from yolo_det.proof.plot import plot_comparison

    saved = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    assert plot_comparison(comparison, tmp_path / "plot.png").is_file()
    return saved[0]


@pytest.mark.parametrize("differing", [[0], [0, 0], [0, 0, 0], [0] * 7, [0, 0, 3], [0, 1, 5, 2], [0] * 40 + [9]])
def test_verify_plot_steps_are_integers_and_the_count_axis_is_not_around_zero(monkeypatch, tmp_path, differing):
    fig = _saved_figure(monkeypatch, _comparison(len(differing), differing), tmp_path)
    top, bottom = fig.axes
    for axis in (top, bottom):
        low, high = axis.get_xlim()
        ticks = [t for t in axis.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    low, high = bottom.get_ylim()
    assert low == 0 and high >= 1, (low, high)  # never the -0.05..0.05 axis of an all-zero bar chart
    counts = [t for t in bottom.get_yticks() if low <= t <= high]
    assert all(float(t).is_integer() for t in counts), counts
    texts = " ".join(t.get_text() for t in bottom.texts)
    assert ("no differing tensors" in texts) == (not any(differing))
