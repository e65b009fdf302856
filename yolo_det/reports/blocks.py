"""The HTML pieces every section of the report is made of: the section itself, tables, fact lists, notes.

Every text that comes from an input goes through :func:`html.escape` here, so a file name or a note can never
become markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Iterable, Optional, Sequence, Tuple

from ..core import verdicts

GOOD, BAD, WARN, INFO = "good", "bad", "warn", "info"
#: what one section shows at most, whatever its input holds (issue 59, item 9: a page <= 2 MB): rows of a table,
#: lines of a note list, characters of one text
MAX_ROWS, MAX_NOTES, MAX_TEXT = 400, 100, 2000
#: a verdict's exit code (core.verdicts) decides its colour: 0 good, 1 a finding, 2 and 3 a warning
TONES = {0: GOOD, 1: BAD, 2: WARN, 3: WARN}


@dataclass
class Section:
    """One part of the page: what it shows (``kind``, ``title``), the verdict in a word and a line, the body."""

    kind: str
    title: str
    verdict: str
    summary: str
    body: str
    tone: str = INFO
    anchor: str = ""

    def html(self) -> str:
        return (f'<section class="card" id="{escape(self.anchor)}" data-kind="{escape(self.kind)}">'
                f'<header><span class="kind">{escape(self.kind)}</span><h2>{text(self.title)}</h2>'
                f'{badge(self.verdict, self.tone)}</header><p class="summary">{text(self.summary)}</p>'
                f'{self.body}</section>')


def tone_of(verdict: str) -> str:
    """The colour of a verdict word of :mod:`yolo_det.core.verdicts` (an earlier release's word too)."""
    try:
        code = verdicts.exit_code(verdict)
    except ValueError:
        return INFO
    return INFO if verdict == verdicts.NO_VERDICT else TONES.get(code, INFO)


def badge(text: str, tone: str) -> str:
    return f'<span class="badge {escape(tone)}">{escape(clip(text))}</span>'


def clip(value: Any) -> str:
    """``value`` as text, cut at :data:`MAX_TEXT` characters (saying how many were left out)."""
    said = str(value)
    return said if len(said) <= MAX_TEXT else f"{said[:MAX_TEXT]} ... ({len(said) - MAX_TEXT} more characters)"


def text(value: Any) -> str:
    """``value`` as escaped text (``-`` for None), cut at :data:`MAX_TEXT` characters."""
    return "-" if value is None else escape(clip(value))


def facts(rows: Iterable[Tuple[str, Any]]) -> str:
    """A two-column list of facts; rows whose value is None or empty are left out."""
    items = "".join(f"<dt>{escape(k)}</dt><dd>{text(v)}</dd>" for k, v in rows if v not in (None, "", [], {}))
    return f'<dl class="facts">{items}</dl>' if items else ""


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], classes: Optional[Sequence[str]] = None,
          caption: str = "") -> str:
    """A table of escaped cells; ``classes`` gives each row a class (``bad`` rows are highlighted)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    rows = list(rows)
    for i, row in enumerate(rows[:MAX_ROWS]):
        cls = f' class="{escape(classes[i])}"' if classes and i < len(classes) and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{text(c)}</td>" for c in row) + "</tr>")
    if not body:
        return ""
    if len(rows) > MAX_ROWS:
        body.append(f'<tr><td colspan="{len(header)}">... {len(rows) - MAX_ROWS} more rows (the first {MAX_ROWS} are '
                    'shown; the input holds them all)</td></tr>')
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def notes(lines: Iterable[str], title: str = "notes") -> str:
    kept = [line for line in lines if line]
    more = [f"... {len(kept) - MAX_NOTES} more (the first {MAX_NOTES} are shown)"] if len(kept) > MAX_NOTES else []
    items = "".join(f"<li>{escape(clip(line))}</li>" for line in kept[:MAX_NOTES] + more)
    return f'<div class="notes"><h3>{escape(title)}</h3><ul>{items}</ul></div>' if items else ""


def figure(svg: str, caption: str) -> str:
    return f'<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>'


__all__ = ["BAD", "GOOD", "INFO", "MAX_NOTES", "MAX_ROWS", "MAX_TEXT", "Section", "TONES", "WARN", "badge", "clip",
           "facts", "figure", "notes", "table", "text",
           "tone_of"]
