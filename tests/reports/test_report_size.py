"""The report's size does not grow with the steps (issue 59, item 9): a 100k-step log gave a 1.2 MB page and two
diverging 50k-step logs 7.4 MB with 50,000 ``<rect>``s. Now a line keeps each window's min and max (a spike is
never lost), a count chart merges adjacent windows, and the page stays under 2 MB with the first divergence and
the extreme values still in it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from support.cli import cli

from yolo_det.record.log import LogWriter
from yolo_det.reports import blocks, charts

LIMIT = 2_000_000
HEADER = {"yolo_det": "0.9.0", "torch": "2.14.1", "rank": 0, "world_size": 1, "command": ["train.py"],
          "mode": "strict"}

values = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                   st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, -1.0]))


@settings(max_examples=150, deadline=None)
@given(ys=st.lists(values, max_size=6000), limit=st.sampled_from([2, 3, 10, 100, charts.MAX_POINTS]))
def test_a_downsampled_line_keeps_its_extremes_ends_and_order(ys, limit):
    points = [(float(i + 1), y) for i, y in enumerate(ys)]
    finite = [p for p in points if math.isfinite(p[1])]
    kept = charts.downsample(points, limit)
    assert len(kept) <= limit + 2 and set(kept) <= set(finite)
    assert [x for x, _ in kept] == sorted({x for x, _ in kept})  # in order, each point once
    if finite:
        assert min(y for _, y in kept) == min(y for _, y in finite)
        assert max(y for _, y in kept) == max(y for _, y in finite)
        assert kept[0] == finite[0] and kept[-1] == finite[-1]
    else:
        assert kept == []


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.one_of(st.just(0), st.integers(0, 40)), max_size=5000), data=st.data())
def test_count_bars_cover_every_differing_step_at_its_height_and_the_first_divergence_alone(counts, data):
    first = next((i + 1 for i, n in enumerate(counts) if n), None)
    highlight = data.draw(st.sampled_from([first, None]))
    spans = charts.count_spans(counts, highlight)
    assert len(spans) <= charts.MAX_BARS + 2
    assert all(a <= b for a, b, _ in spans) and all(b < c for (_, b, _), (c, _, _) in zip(spans, spans[1:]))
    for a, b, height in spans:
        assert height == max(counts[a - 1:b]) > 0
    covered = {step for a, b, _ in spans for step in range(a, b + 1)}
    assert {i + 1 for i, n in enumerate(counts) if n} <= covered
    if highlight is not None:
        assert (highlight, highlight, counts[highlight - 1]) in spans
        svg = charts.count_chart(counts, "step", "n", "n", highlight=highlight)
        assert f"<title>step {highlight}: {counts[highlight - 1]}</title>" in svg


def test_markers_are_thinned_but_the_solid_ones_kept():
    markers = [charts.Marker(i + 0.5, f"E{i}") for i in range(5000)] + [charts.Marker(4242.5, "resumed", dashed=False)]
    svg = charts.line_chart([charts.Series("loss", [(1, 1.0), (5000, 2.0)])], markers, 5000, "step", "loss", "t")
    assert svg.count('class="marker"') <= charts.MAX_MARKERS and "resumed" in svg


def test_tables_notes_and_texts_are_capped():
    html = blocks.table(("a",), [(i,) for i in range(10 * blocks.MAX_ROWS)])
    assert html.count("<tr>") == blocks.MAX_ROWS + 2 and f"{9 * blocks.MAX_ROWS} more rows" in html
    notes = blocks.notes([f"note {i}" for i in range(1000)])
    assert notes.count("<li>") == blocks.MAX_NOTES + 1
    assert len(blocks.text("x" * 10 ** 6)) < blocks.MAX_TEXT + 100


def _log(path: Path, steps: int, diverge: int = 0, spike: int = 0) -> Path:
    writer = LogWriter(path, HEADER)
    for step in range(1, steps + 1):
        grad = ("1" if diverge and step >= diverge else "0") * 32
        loss = 4.0 - step / steps + (6.5 if step == spike else 0.0) - (3.25 if step == spike + 1 else 0.0)
        writer.write_step(step, {"grad": (["w", "b"], grad + "f" * 32), "param": (["w", "b"], "a" * 64)},
                          lr={"group0.lr": 0.01}, losses=[loss])
    writer.write_final(steps, ["model.w"], "c" * 32, "finish")
    writer.close()
    return path


@pytest.mark.slow
def test_a_100k_step_log_and_two_diverging_50k_step_logs_give_pages_under_2_mb(tmp_path):
    """Two 100k-step logs' worth of lines (~48 MB written, then read): the steps' sizes the issue measured."""
    long = _log(tmp_path / "long.jsonl", 100_000, spike=77_777)
    proc = cli("report", long, "--out", tmp_path / "long.html")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "long.html").read_text()
    assert len(page.encode()) < LIMIT
    assert "100000 optimizer steps" in page
    # the spike and the lowest loss are named (and drawn: downsample keeps them, tested above)
    high, low = 4.0 - 77_777 / 100_000 + 6.5, 4.0 - 77_778 / 100_000 - 3.25
    assert f"max {charts.fmt(high, 6)} at step 77777" in page and f"min {charts.fmt(low, 6)} at step 77778" in page

    a, b = _log(tmp_path / "a.jsonl", 50_000), _log(tmp_path / "b.jsonl", 50_000, diverge=31_337)
    proc = cli("report", a, b, "--out", tmp_path / "ab.html")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "ab.html").read_text()
    assert len(page.encode()) < LIMIT and page.count("<rect") <= charts.MAX_BARS + 2
    assert "first divergence at step 31337: grad w" in page and re.search(r"<title>step 31337: \d+</title>", page)
    assert re.search(r"<title>steps 31338-50000: up to \d+</title>", page)  # every later step: one bar


@settings(max_examples=200, deadline=None)
@given(low=st.floats(-1e6, 1e6), width=st.floats(1e-9, 1e6), count=st.sampled_from([4, 6, 8]))
def test_tick_labels_never_repeat(low, width, count):
    """Issue 60, item 10: a narrow axis read 0.8991, 0.8991, 0.899, 0.899."""
    ticks = charts.nice_ticks(low, low + width, count)
    labels = charts.tick_labels(ticks)
    assert len(set(labels)) == len(labels), (ticks, labels)


def test_the_issues_narrow_axis_gets_distinct_labels():
    ticks = charts.nice_ticks(0.89895, 0.89915, 4)
    assert [charts.fmt(t) for t in ticks].count("0.8991") >= 2  # what the page said before
    labels = charts.tick_labels(ticks)
    assert len(set(labels)) == len(labels) and all(float(s) == t for s, t in zip(labels, ticks))
