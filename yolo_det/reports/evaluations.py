"""Evaluations saved with ``--json``: export parity's table (``yolo-det parity``) and the COCO gap as a waterfall
from the trainer's number to the COCO API's (``yolo-det val --evaluator coco`` / ``val --predictions``)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from . import blocks, charts
from .inputs import Item, gap_chains

METRIC = "mAP50-95"


def parity_section(item: Item) -> blocks.Section:
    """``yolo-det parity --json``: raw outputs, boxes after NMS, mAP under matched settings, the causes."""
    d = item.data
    verdict = str(d.get("verdict"))
    rt = d.get("runtime") or {}
    raw = [(r.get("output"), "x".join(map(str, r.get("shape") or [])), charts.fmt(r.get("max_abs"), 3),
            charts.fmt(r.get("max_rel"), 3), charts.fmt(r.get("atol"), 3), "within" if r.get("within") else "BEYOND")
           for r in d.get("raw") or []]
    body = blocks.table(("raw output", "shape", "max abs error", "max rel error", "atol", "tolerance"), raw,
                        ["" if r[-1] == "within" else "bad" for r in raw], caption="raw head outputs, the same "
                        "float32 tensors fed to both")
    boxes = d.get("boxes") or {}
    metrics = d.get("metrics") or {}
    pt, ex = metrics.get("pt_matched") or {}, metrics.get("export_matched") or {}
    body += blocks.table(("", ".pt", "export"), [(k, charts.fmt(pt.get(k), 5), charts.fmt(ex.get(k), 5))
                                                 for k in ("map50_95", "map50") if k in pt or k in ex],
                         caption="box mAP under matched settings")
    causes = d.get("causes") or []
    body += blocks.table(("cause", "detail", "mAP50-95 change when only it is aligned"),
                         [(c.get("cause"), c.get("detail"),
                           charts.fmt((c.get("metric_change") or {}).get("map50_95"), 4)) for c in causes],
                         caption="causes")
    body += blocks.facts([("runtime", f"{rt.get('name', '')} {(rt.get('settings') or {}).get('version', '')}".strip()),
                          ("images", d.get("images")), ("input size", d.get("imgsz")),
                          ("boxes after NMS", f"{boxes.get('matched')} matched, {boxes.get('only_pt')} only in the "
                                              f".pt, {boxes.get('only_export')} only in the export" if boxes else None)])
    body += blocks.notes(list(d.get("reasons") or []) + ([d["raw_note"]] if d.get("raw_note") else []), "reasons")
    summary = (f"{d.get('exported')} ({d.get('format')}) against {d.get('model')}: {verdict}"
               + (f"; {len(causes)} cause(s) named" if causes else ""))
    return blocks.Section("export parity", str(item.path), verdict, summary, body, blocks.tone_of(verdict))


def _steps(chain: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return [s for s in chain.get("steps") or [] if not s.get("same")]


def _one_gap(name: str, chain: Mapping[str, Any]) -> str:
    start = chain.get("start") or {}
    logged = (start.get("release_logged") or {}).get(METRIC)
    begin = logged if isinstance(logged, (int, float)) else start.get(METRIC)
    coco = (chain.get("coco_api") or {}).get(METRIC)
    end = coco if isinstance(coco, (int, float)) else (chain.get("end") or {}).get(METRIC)
    steps = [(s.get("rule") or s.get("what"), (s.get("change") or {}).get(METRIC, 0.0)) for s in _steps(chain)]
    residual = (chain.get("residual") or {}).get(METRIC)
    if isinstance(residual, (int, float)) and residual and not chain.get("ends_at_coco_api"):
        steps.append(("residual", residual))
    if isinstance(begin, (int, float)) and isinstance(start.get(METRIC), (int, float)) and begin != start[METRIC]:
        steps.insert(0, ("recomputed", start[METRIC] - begin))
    chart = charts.waterfall((f"{name}'s number", float(begin or 0.0)), steps, ("COCO API", float(end or 0.0)), METRIC,
                             f"gap from {name} to the COCO API")
    rows = [(s.get("what"), s.get("release"), s.get("coco"), charts.fmt((s.get("change") or {}).get("mAP50"), 4),
             charts.fmt((s.get("change") or {}).get(METRIC), 4)) for s in _steps(chain)]
    table = blocks.table(("rule", f"{name}", "COCO API", "mAP50 change", f"{METRIC} change"), rows,
                         caption="the rules that differ, in the order applied (change = after - before)")
    return blocks.figure(chart, f"{METRIC} from {name}'s number to the COCO API's, one rule at a time (green up, red down; "
                                f"the axis spans the numbers, it does not start at 0)") + table


def gap_section(item: Item) -> blocks.Section:
    """``yolo-det val --evaluator coco --json`` (or ``--predictions``): the gap, rule by rule, per release family."""
    chains = gap_chains(item.data)
    exact = all(c.get("ends_at_coco_api") for c in chains.values())
    verdict = "ends at the COCO API" if exact else "residual"
    parts = []
    for name, chain in chains.items():
        start, end = chain.get("start") or {}, chain.get("coco_api") or chain.get("end") or {}
        parts.append(f"{name} {charts.fmt(start.get(METRIC), 5)} -> COCO API {charts.fmt(end.get(METRIC), 5)} in "
                     f"{len(_steps(chain))} rule(s)")
    body = "".join(_one_gap(name, chain) for name, chain in chains.items())
    notes = list((item.data.get("coco") or item.data).get("notes") or []) if isinstance(item.data, dict) else []
    body += blocks.notes(notes)
    summary = f"{METRIC}: " + "; ".join(parts) + ("; every chain ends exactly at the COCO API's number" if exact else
                                                 "; a chain does not end at the COCO API's number (see residual)")
    return blocks.Section("COCO gap", str(item.path), verdict, summary, body, blocks.GOOD if exact else blocks.WARN)


__all__ = ["gap_section", "parity_section"]
