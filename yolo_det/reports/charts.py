"""Inline SVG charts drawn in Python for the HTML report: no script, font or file is fetched to show them.

Each function returns one ``<svg>`` element as text; every label is escaped. Axes that count (steps, tensors)
get integer ticks only. A chart's size does not grow with the steps (issue 59, item 9): a line keeps at most
:data:`MAX_POINTS` points (each window's minimum and maximum, so a spike is never lost), a count chart at most
:data:`MAX_BARS` bars (a window's largest count; adjacent windows of one height merged into one bar), and at most
:data:`MAX_MARKERS` markers are drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import List, Optional, Sequence, Tuple

WIDTH = 760
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 16, 14, 40
COLORS = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")
GOOD, BAD, MUTED, GRID = "#16a34a", "#dc2626", "#6b7280", "#e5e7eb"
#: a line's points at most: two per window (its min and max) over about one window per plotted pixel
MAX_POINTS = 1400
#: a count chart's bars at most (one window of steps each)
MAX_BARS = 700
#: vertical markers drawn at most (validations of a long run); the validations table still lists every one
MAX_MARKERS = 150
#: a waterfall's bars between its two totals at most
MAX_WATERFALL = 40


@dataclass
class Series:
    """One line of a line chart: its points (x, y), name and colour; ``dashed`` for a second run drawn over a first."""

    label: str
    points: List[Tuple[float, float]]
    color: str = COLORS[0]
    dashed: bool = False


@dataclass
class Marker:
    """A vertical line at ``x`` with a short label (a validation, a resume point, the first divergence)."""

    x: float
    label: str
    color: str = MUTED
    dashed: bool = True
    title: str = ""


@dataclass
class Frame:
    """The plotting area and the data ranges it maps."""

    x0: float
    x1: float
    y0: float
    y1: float
    height: int
    width: int = WIDTH
    parts: List[str] = field(default_factory=list)

    def x(self, value: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return PAD_LEFT + (value - self.x0) / span * (self.width - PAD_LEFT - PAD_RIGHT)

    def y(self, value: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - PAD_BOTTOM - (value - self.y0) / span * (self.height - PAD_TOP - PAD_BOTTOM)


def fmt(value: Optional[float], digits: int = 4) -> str:
    """A number for people: ``digits`` significant digits, ``-`` for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def tick_labels(ticks: Sequence[float], digits: int = 4) -> List[str]:
    """Each tick as :func:`fmt` writes it, with as many more significant digits as it takes for no two to read the
    same (0.899, 0.89905, 0.8991 rather than 0.899, 0.8991, 0.8991)."""
    for more in range(digits, 16):
        labels = [fmt(t, more) for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(t) for t in ticks]


def nice_ticks(low: float, high: float, count: int = 5, integer: bool = False) -> List[float]:
    """About ``count`` round tick values covering ``low..high`` (whole numbers only with ``integer``)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _open(frame: Frame, label: str) -> None:
    frame.parts.append(f'<svg class="chart" viewBox="0 0 {frame.width} {frame.height}" role="img" '
                       f'aria-label="{escape(label)}" preserveAspectRatio="xMinYMin meet">')


def _axes(frame: Frame, x_label: str, y_label: str, integer_y: bool = False) -> None:
    bottom, left, right = frame.height - PAD_BOTTOM, PAD_LEFT, frame.width - PAD_RIGHT
    ticks = [t for t in nice_ticks(frame.y0, frame.y1, 4, integer_y) if frame.y0 - 1e-12 <= t <= frame.y1 + 1e-12]
    for tick, said in zip(ticks, tick_labels(ticks)):
        y = frame.y(tick)
        frame.parts.append(f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>'
                           f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{said}</text>')
    for tick in nice_ticks(frame.x0, frame.x1, 8, integer=True):
        if frame.x0 - 1e-12 <= tick <= frame.x1 + 1e-12:
            x = frame.x(tick)
            frame.parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="{MUTED}"/>'
                               f'<text x="{x:.1f}" y="{bottom + 16}" class="tick" text-anchor="middle">{int(tick)}</text>')
    frame.parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="{MUTED}"/>'
                       f'<text x="{(left + right) / 2:.1f}" y="{frame.height - 6}" class="axis" '
                       f'text-anchor="middle">{escape(x_label)}</text>'
                       f'<text x="12" y="{(PAD_TOP + bottom) / 2:.1f}" class="axis" text-anchor="middle" '
                       f'transform="rotate(-90 12 {(PAD_TOP + bottom) / 2:.1f})">{escape(y_label)}</text>')


def _range(values: Sequence[float]) -> Tuple[float, float]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if low == high:
        pad = abs(low) * 0.05 or 0.5
        return low - pad, high + pad
    pad = (high - low) * 0.08
    return low - pad, high + pad


def downsample(points: Sequence[Tuple[float, float]], limit: int = MAX_POINTS) -> List[Tuple[float, float]]:
    """At most ``limit`` (+2: the first and last) of ``points``' finite points, in order: the lowest and the highest
    of each window of consecutive points, so the line's extremes (a spike, a NaN's neighbours) are always drawn."""
    finite = [(x, y) for x, y in points if y is not None and math.isfinite(y)]
    if len(finite) <= limit + 2:
        return finite
    size = math.ceil(len(finite) / max(limit // 2, 1))
    out = [finite[0]]
    for start in range(0, len(finite), size):
        window = range(start, min(start + size, len(finite)))
        low = min(window, key=lambda i: finite[i][1])
        high = max(window, key=lambda i: finite[i][1])
        out += [finite[i] for i in sorted({low, high}) if i != 0 and i != len(finite) - 1]
    out.append(finite[-1])
    return out


def extremes(points: Sequence[Tuple[float, float]]) -> str:
    """``min V at step S, max V at step S`` of a line's finite points (empty when none): said in the chart's text."""
    finite = [(x, y) for x, y in points if y is not None and math.isfinite(y)]
    if not finite:
        return ""
    low, high = min(finite, key=lambda p: p[1]), max(finite, key=lambda p: p[1])
    def step(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else fmt(x)

    return f"min {fmt(low[1], 6)} at step {step(low[0])}, max {fmt(high[1], 6)} at step {step(high[0])}"


def _thin(markers: Sequence[Marker], limit: int = MAX_MARKERS) -> List[Marker]:
    """At most ``limit`` markers: the solid ones (a resume point, the first divergence) all, the others evenly."""
    if len(markers) <= limit:
        return list(markers)
    solid = [m for m in markers if not m.dashed][:limit]
    rest = [m for m in markers if m.dashed]
    keep = max(limit - len(solid), 0)
    every = math.ceil(len(rest) / keep) if keep else len(rest) + 1
    return sorted(solid + rest[::every][:keep], key=lambda m: m.x)


def line_chart(series: Sequence[Series], markers: Sequence[Marker], steps: int, x_label: str, y_label: str,
               label: str, height: int = 240, note: str = "") -> str:
    """Lines over steps 1..``steps`` with vertical markers; ``note`` is written in the middle when no line has a point."""
    ys = [y for s in series for _, y in s.points]
    y0, y1 = _range(ys)
    frame = Frame(0.5, max(steps, 1) + 0.5, y0, y1, height)
    _open(frame, label)
    _axes(frame, x_label, y_label)
    for marker in _thin(markers):
        x = frame.x(marker.x)
        dash = ' stroke-dasharray="4 3"' if marker.dashed else ""
        title = f"<title>{escape(marker.title or marker.label)}</title>"
        frame.parts.append(f'<g class="marker"><line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_TOP}" '
                           f'y2="{height - PAD_BOTTOM}" stroke="{marker.color}" stroke-width="1.5"{dash}/>'
                           f'<text x="{x + 3:.1f}" y="{PAD_TOP + 10}" class="mark" fill="{marker.color}">'
                           f'{escape(marker.label)}</text>{title}</g>')
    for s in series:
        points = [(frame.x(x), frame.y(y)) for x, y in downsample(s.points)]
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            said = extremes(s.points)
            frame.parts.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="1.8"{dash}>'
                               f'<title>{escape(s.label + (": " + said if said else ""))}</title></polyline>')
        for x, y in points if len(points) <= 60 else ():
            frame.parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{s.color}"/>')
    if not ys and note:
        frame.parts.append(f'<text x="{frame.width / 2:.0f}" y="{height / 2:.0f}" class="note" '
                           f'text-anchor="middle">{escape(note)}</text>')
    frame.parts.append(_legend(series, frame.width))
    frame.parts.append("</svg>")
    return "".join(frame.parts)


def _legend(series: Sequence[Series], width: int) -> str:
    out, x = [], width - PAD_RIGHT
    for s in reversed(series):
        text = escape(s.label)
        x -= 26 + 7 * len(s.label)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(f'<line x1="{x}" x2="{x + 18}" y1="{PAD_TOP + 24}" y2="{PAD_TOP + 24}" stroke="{s.color}" '
                   f'stroke-width="2"{dash}/><text x="{x + 22}" y="{PAD_TOP + 28}" class="tick">{text}</text>')
    return "".join(out)


def count_spans(counts: Sequence[int], highlight: Optional[int] = None,
                limit: int = MAX_BARS) -> List[Tuple[int, int, int]]:
    """The bars of a count per step: ``(first step, last step, largest count)``, at most ``limit`` + 2. Steps are
    taken in windows of ``ceil(len / limit)``; the ``highlight`` step is a bar of its own; adjacent windows of one
    height are one bar; windows whose counts are all 0 have none."""
    n = len(counts)
    size = max(1, math.ceil(n / max(limit, 1)))
    bounds = set(range(1, n + 1, size))
    if highlight is not None and 1 <= highlight <= n:
        bounds |= {highlight} | ({highlight + 1} if highlight < n else set())
    starts = sorted(bounds)
    spans: List[Tuple[int, int, int]] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else n
        most = max(counts[start - 1:end])
        if not most:
            continue
        if (spans and spans[-1][1] == start - 1 and spans[-1][2] == most and highlight != start
                and not spans[-1][0] <= (highlight or 0) <= spans[-1][1]):
            spans[-1] = (spans[-1][0], end, most)
        else:
            spans.append((start, end, most))
    return spans


def count_chart(counts: Sequence[int], x_label: str, y_label: str, label: str, height: int = 150,
                highlight: Optional[int] = None) -> str:
    """Bars of a whole-number count per step (windows of steps where there are many: :func:`count_spans`), from 0;
    says "no differing tensors" when every count is 0."""
    most = max(counts, default=0)
    frame = Frame(0.5, max(len(counts), 1) + 0.5, 0.0, max(most, 1) * 1.1, height)
    _open(frame, label)
    _axes(frame, x_label, y_label, integer_y=True)
    for first, last, count in count_spans(counts, highlight):
        color = BAD if highlight is None or first <= highlight <= last else "#f87171"
        top, left = frame.y(count), frame.x(first - 0.4)
        width = max(1.0, frame.x(last + 0.4) - left)
        title = f"step {first}: {count}" if first == last else f"steps {first}-{last}: up to {count}"
        frame.parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{frame.y(0) - top:.1f}" '
                           f'fill="{color}"><title>{title}</title></rect>')
    if most == 0:
        frame.parts.append(f'<text x="{frame.width / 2:.0f}" y="{(PAD_TOP + height - PAD_BOTTOM) / 2 + 4:.0f}" '
                           f'class="note good" text-anchor="middle">no differing tensors</text>')
    frame.parts.append("</svg>")
    return "".join(frame.parts)


@dataclass
class Points:
    """One study's per-seed values with its mean and interval, for :func:`interval_chart`."""

    label: str
    values: List[Tuple[int, float]]  # (seed, value)
    mean: Optional[float]
    ci: Optional[Sequence[float]]


def interval_chart(rows: Sequence[Points], metric: str, label: str) -> str:
    """One row per study: a dot per seed, the mean as a bar and the 95% interval as a band."""
    row_height, top = 54, 18
    height = top + row_height * len(rows) + 34
    numbers = [v for r in rows for _, v in r.values] + [c for r in rows for c in (r.ci or ())]
    x0, x1 = _range(numbers)
    left, right = 150, WIDTH - PAD_RIGHT
    span = (x1 - x0) or 1.0

    def x(value: float) -> float:
        return left + (value - x0) / span * (right - left)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}" '
             'preserveAspectRatio="xMinYMin meet">']
    axis_y = height - 30
    ticks = [t for t in nice_ticks(x0, x1, 6) if x0 <= t <= x1]
    for tick, said in zip(ticks, tick_labels(ticks)):
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top - 6}" y2="{axis_y}" stroke="{GRID}"/>'
                     f'<text x="{x(tick):.1f}" y="{axis_y + 14}" class="tick" text-anchor="middle">{said}</text>')
    parts.append(f'<text x="{(left + right) / 2:.0f}" y="{height - 2}" class="axis" text-anchor="middle">'
                 f'{escape(metric)}</text>')
    for i, row in enumerate(rows):
        mid = top + row_height * i + row_height / 2
        color = COLORS[i % len(COLORS)]
        parts.append(f'<text x="{left - 10}" y="{mid + 4:.1f}" class="axis" text-anchor="end">{escape(row.label)}'
                     '</text>')
        if row.ci:
            lo, hi = x(row.ci[0]), x(row.ci[1])
            parts.append(f'<rect x="{lo:.1f}" y="{mid - 12:.1f}" width="{max(hi - lo, 1.5):.1f}" height="24" '
                         f'fill="{color}" fill-opacity="0.15" stroke="{color}" stroke-opacity="0.5">'
                         f'<title>95% interval of the mean: {fmt(row.ci[0])} to {fmt(row.ci[1])}</title></rect>')
        if row.mean is not None:
            parts.append(f'<line x1="{x(row.mean):.1f}" x2="{x(row.mean):.1f}" y1="{mid - 16:.1f}" '
                         f'y2="{mid + 16:.1f}" stroke="{color}" stroke-width="3"><title>mean {fmt(row.mean)}</title>'
                         '</line>')
        for j, (seed, value) in enumerate(row.values):
            if value is not None and math.isfinite(value):
                jitter = ((j % 5) - 2) * 3
                parts.append(f'<circle cx="{x(value):.1f}" cy="{mid + jitter:.1f}" r="4.5" fill="{color}" '
                             f'fill-opacity="0.85" stroke="white"><title>seed {seed}: {fmt(value, 6)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def waterfall(start: Tuple[str, float], steps: Sequence[Tuple[str, float]], end: Tuple[str, float], metric: str,
              label: str) -> str:
    """From the ``start`` number, one bar per change, to the ``end`` number (bars labelled, changes signed)."""
    if len(steps) > MAX_WATERFALL:  # the rest as one bar: their changes add up the same
        rest = steps[MAX_WATERFALL - 1:]
        steps = list(steps[:MAX_WATERFALL - 1]) + [(f"{len(rest)} more rules", sum(c for _, c in rest))]
    bars: List[Tuple[str, float, float, str]] = [(start[0], 0.0, start[1], COLORS[0])]
    level = start[1]
    for name, change in steps:
        bars.append((name, level, level + change, GOOD if change >= 0 else BAD))
        level += change
    bars.append((end[0], 0.0, end[1], COLORS[3]))
    height, bottom, top = 300, 300 - 96, 24
    levels = [start[1]] + [b for _, _, b, _ in bars[1:]]
    span = max(levels) - min(levels)
    pad = span * 0.25 if span else (abs(start[1]) * 0.05 or 0.05)
    # the axis spans the levels, not 0: a gap of 0.01 on a number of 0.4 stays visible (the totals start at its floor)
    low, high = min(levels) - pad, max(levels) + pad
    if min(levels) >= 0:
        low = max(0.0, low)
    bars = [(n, low if i in (0, len(bars) - 1) else a, b, c) for i, (n, a, b, c) in enumerate(bars)]

    def y(value: float) -> float:
        return bottom - (value - low) / ((high - low) or 1.0) * (bottom - top)

    slot = (WIDTH - PAD_LEFT - PAD_RIGHT) / len(bars)
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}" '
             'preserveAspectRatio="xMinYMin meet">']
    ticks = [t for t in nice_ticks(low, high, 4) if low <= t <= high]
    for tick, said in zip(ticks, tick_labels(ticks)):
        parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="{GRID}"/><text x="{PAD_LEFT - 6}" y="{y(tick) + 4:.1f}" class="tick" '
                     f'text-anchor="end">{said}</text>')
    for i, (name, a, b, color) in enumerate(bars):
        x = PAD_LEFT + slot * i + slot * 0.15
        w = slot * 0.7
        top_y, bottom_y = y(max(a, b)), y(min(a, b))
        total = i in (0, len(bars) - 1)
        value = fmt(b, 5) if total else ("0" if b == a else f"{b - a:+.3g}")
        parts.append(f'<rect x="{x:.1f}" y="{top_y:.1f}" width="{w:.1f}" height="{max(bottom_y - top_y, 1.0):.1f}" '
                     f'fill="{color}"><title>{escape(name)}: {escape(value)}</title></rect>'
                     f'<text x="{x + w / 2:.1f}" y="{top_y - 5:.1f}" class="tick" text-anchor="middle">'
                     f'{escape(value)}</text>')
        if i < len(bars) - 1:
            parts.append(f'<line x1="{x + w:.1f}" x2="{x + slot:.1f}" y1="{y(b):.1f}" y2="{y(b):.1f}" '
                         f'stroke="{MUTED}" stroke-dasharray="2 2"/>')
        cx = x + w / 2
        parts.append(f'<text x="{cx:.1f}" y="{bottom + 14}" class="tick" text-anchor="end" '
                     f'transform="rotate(-35 {cx:.1f} {bottom + 14})">{escape(name)}</text>')
    parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(low):.1f}" y2="{y(low):.1f}" '
                 f'stroke="{MUTED}"/><text x="12" y="{(top + bottom) / 2:.0f}" class="axis" text-anchor="middle" '
                 f'transform="rotate(-90 12 {(top + bottom) / 2:.0f})">{escape(metric)}</text></svg>')
    return "".join(parts)


__all__ = ["MAX_BARS", "MAX_MARKERS", "MAX_POINTS", "Marker", "Points", "Series", "count_chart", "count_spans",
           "downsample", "extremes", "fmt", "interval_chart", "line_chart", "nice_ticks", "tick_labels", "waterfall"]
