"""The report page: every input's section, a summary of what they prove, written as one self-contained HTML file.

Styles and charts are inline (SVG drawn in Python), the one script is inline, and a Content-Security-Policy
forbids every fetch: the page shows the same offline, from an e-mail attachment or a CI artifact. The file is
written atomically (a temporary file in the same folder, then renamed).
"""

from __future__ import annotations

import datetime
import os
from html import escape
from pathlib import Path
from typing import List, Optional, Sequence

from .. import __version__
from ..core import atomic
from . import blocks
from .divergence import pair_sections, saved_section
from .evaluations import gap_section, parity_section
from .inputs import COMPARISON, GAP, PARITY, RUN, STUDY, STUDY_COMPARISON, Item, read_inputs
from .seeds import comparison_section, study_sections
from .timeline import run_section

DEFAULT_NAME = "report.html"
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

STYLE = """
:root{--ink:#111827;--muted:#6b7280;--line:#e5e7eb;--bg:#f8fafc;--good:#15803d;--bad:#b91c1c;--warn:#b45309}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1040px;margin:0 auto;padding:28px 24px 48px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:18px;margin:0;word-break:break-all;flex:1}
h3{font-size:14px;margin:14px 0 4px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.sub{color:var(--muted);margin:0 0 20px}
.card{background:#fff;border:1px solid var(--line);border-radius:10px;padding:18px 22px;margin:0 0 20px;
box-shadow:0 1px 2px rgba(0,0,0,.04)}
.card header{display:flex;align-items:center;gap:12px}
.kind{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);white-space:nowrap}
.badge{border-radius:999px;padding:2px 12px;font-size:13px;font-weight:600;white-space:nowrap;border:1px solid}
.badge.good{color:var(--good);background:#f0fdf4;border-color:#bbf7d0}
.badge.bad{color:var(--bad);background:#fef2f2;border-color:#fecaca}
.badge.warn{color:var(--warn);background:#fffbeb;border-color:#fde68a}
.badge.info{color:#1d4ed8;background:#eff6ff;border-color:#bfdbfe}
.summary{font-size:15px;margin:10px 0 12px}
figure{margin:8px 0 14px}figcaption{color:var(--muted);font-size:12.5px}
svg.chart{width:100%;height:auto;display:block}
svg text{font-family:inherit}svg .tick{font-size:11px;fill:#4b5563}svg .axis{font-size:12px;fill:#374151}
svg .mark{font-size:10.5px}svg .note{font-size:13px;fill:var(--muted)}svg .good{fill:var(--good)}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:3px 18px;margin:10px 0;font-size:14px}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;word-break:break-word}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:10px 0;font-size:13.5px;min-width:50%}
caption{text-align:left;color:var(--muted);font-size:12.5px;padding-bottom:4px}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f9fafb;font-weight:600}tr.bad td{background:#fef2f2}
td:not(:first-child){font-variant-numeric:tabular-nums}
.notes ul{margin:4px 0;padding-left:20px;color:#374151;font-size:13.5px}
ol.toc{padding-left:20px}ol.toc li{margin:3px 0}ol.toc a{color:inherit}
footer{color:var(--muted);font-size:12.5px}
"""

#: runs after the page loaded: marks the body so a test (or a person) can tell the page rendered without error
SCRIPT = """
(function(){var s=document.querySelectorAll('section.card:not(#overview)');
document.body.setAttribute('data-report-ready', String(s.length));
var f=document.getElementById('report-status');if(f){f.textContent='rendered '+s.length+' section(s)';}})();
"""


class ReportError(ValueError):
    """The report could not be written (the output's folder, a bad ``--out``)."""


def sections(items: Sequence[Item], metric: Optional[str] = None) -> List[blocks.Section]:
    """Every section, in this order: runs, their divergence, studies, saved comparisons, parity, the COCO gap."""
    runs = [i for i in items if i.kind == RUN]
    out = [run_section(i) for i in runs] + pair_sections(runs)
    out += study_sections([i for i in items if i.kind == STUDY], metric)
    out += [comparison_section(i.data, str(i.path)) for i in items if i.kind == STUDY_COMPARISON]
    out += [saved_section(i) for i in items if i.kind == COMPARISON]
    out += [parity_section(i) for i in items if i.kind == PARITY]
    out += [gap_section(i) for i in items if i.kind == GAP]
    for number, section in enumerate(out, 1):
        section.anchor = f"s{number}"
    return out


def render(parts: Sequence[blocks.Section], inputs: Sequence[os.PathLike]) -> str:
    """The whole page as text."""
    toc = "".join(f'<li><a href="#{escape(s.anchor)}">{escape(s.kind)}</a>: {blocks.badge(s.verdict, s.tone)} '
                  f'{escape(s.summary)}</li>' for s in parts)
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    listed = ", ".join(escape(str(p)) for p in inputs)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>yolo-det report</title><style>{STYLE}</style></head><body><main>"
            "<h1>yolo-det report</h1>"
            f'<p class="sub">What the inputs prove. Made {escape(when)} by yolo-det {escape(__version__)} from {listed}.</p>'
            f'<section class="card" id="overview" data-kind="overview"><h2>Overview</h2><ol class="toc">{toc}</ol>'
            "</section>" + "".join(s.html() for s in parts)
            + f'<footer><p id="report-status">{len(parts)} section(s)</p></footer></main>'
            f"<script>{SCRIPT}</script></body></html>\n")


def default_out() -> Path:
    return Path.cwd() / DEFAULT_NAME


def write_report(inputs: Sequence[os.PathLike], out: Optional[os.PathLike] = None,
                 metric: Optional[str] = None) -> Path:
    """Read ``inputs``, write the page to ``out`` (default ``./report.html``; a folder gets ``report.html``) and
    return its path. Every input is read before anything is written: a bad one leaves nothing behind."""
    path = Path(out) if out is not None else default_out()
    if path.is_dir():
        path = path / DEFAULT_NAME
    if not path.parent.is_dir():
        raise ReportError(f"--out {out}: its folder {path.parent} does not exist (create it, or name another file)")
    page = render(sections(read_inputs(inputs), metric), inputs)
    try:
        atomic.write_text(path, page)
    except OSError as exc:
        raise ReportError(f"cannot write {path}: {exc.strerror}") from None
    return path


__all__ = ["CSP", "DEFAULT_NAME", "ReportError", "render", "sections", "write_report"]
