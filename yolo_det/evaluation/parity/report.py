"""What one ``yolo-det parity`` compared and concluded (:class:`ParityReport`): as JSON and as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ...core import verdicts
from .outputs import BOX_MATCH_IOU, RTOL


def _bound_text(row: Dict[str, Any]) -> str:
    """Which bound each element met: every element's error against its own allowance atol + rtol * |value|, and
    how much of it the closest one used (a relative error above rtol is within where atol carries it)."""
    share = row.get("max_share")
    allowance = f"atol {row['atol']:.3g} + rtol {RTOL:g} x |value|"
    if share is None:  # a report written before the allowance was recorded
        return f"{'within' if row['within'] else 'BEYOND'} tolerance rtol={RTOL:g}, atol={row['atol']:.3g}"
    if row["within"]:
        return (f"every element within its allowance {allowance} (the closest used {share:.0%} of it, mostly "
                f"{row.get('bound', 'atol')})")
    return f"BEYOND the allowance {allowance} (up to {share:.3g} times it, mostly {row.get('bound', 'atol')})"


@dataclass
class ParityReport(verdicts.Judged):
    """Everything one ``yolo-det parity`` compared and concluded."""

    model: str
    exported: str
    format: str
    runtime: Dict[str, Any]
    images: int
    imgsz: Optional[Tuple[int, int]]
    raw: List[Dict[str, Any]] = field(default_factory=list)
    raw_note: Optional[str] = None
    boxes: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, Any] = field(default_factory=dict)
    causes: List[Dict[str, Any]] = field(default_factory=list)
    provenance: Dict[str, Any] = field(default_factory=dict)
    class_names: Dict[str, Any] = field(default_factory=dict)
    skipped: List[Dict[str, Any]] = field(default_factory=list)
    rect: Dict[str, Any] = field(default_factory=dict)
    verdict: str = verdicts.NOT_PROVEN
    reasons: List[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        """The report as a JSON-able dict."""
        from dataclasses import asdict

        out = asdict(self)
        out["exit_code"] = self.exit_code
        return self.stamped(out)

    def describe(self) -> List[str]:
        """The report as text lines."""
        rt = self.runtime
        lines = [f"parity: {self.model} vs {self.exported} ({self.format}, {rt['name']} {rt['settings'].get('version', '')})",
                 f"  runtime settings: " + ", ".join(f"{k}={v}" for k, v in rt["settings"].items() if k != "version"),
                 f"  runtime repeat on the same input: {'bit-identical' if rt.get('repeatable') else 'DIFFERS'}",
                 f"  {self.images} images, square letterbox {self.imgsz}, the same float32 tensors fed to both"]
        if self.raw_note:
            lines.append(f"  raw outputs: {self.raw_note}")
        for r in self.raw:
            lines.append(f"  raw {r['output']} {r['shape']}: max abs error {r['max_abs']:.3g} at {r['where_abs']}, "
                         f"max rel error {r['max_rel']:.3g} at {r['where_rel']}; " + _bound_text(r))
        b = self.boxes
        if b:
            lines.append(f"  boxes after NMS: {b['matched']} matched (IoU >= {BOX_MATCH_IOU}, same class), "
                         f"{b['only_pt']} only in the .pt, {b['only_export']} only in the export"
                         + (f", max conf difference {b['max_conf_diff']:.3g}" if b.get("max_conf_diff") is not None else ""))
            for c in b.get("threshold_crossers", [])[:5]:
                lines.append(f"    crosses conf {c['threshold']}: image {c['image']} class {c['cls']} "
                             f"pt conf {c['pt_conf']} vs export {c['export_conf']}")
        m = self.metrics
        if m.get("pt_matched"):
            pe = m.get("export_matched")
            lines.append(f"  box mAP50-95 under matched settings: .pt {m['pt_matched']['map50_95']:.4f}"
                         + (f", export {pe['map50_95']:.4f}" if pe else "")
                         + f"  (mAP50 {m['pt_matched']['map50']:.4f}" + (f" / {pe['map50']:.4f}" if pe else "") + ")")
        lines += self._describe_rect()
        for s in self.skipped[:10]:
            lines.append(f"  image {s['image']} ({s['file']}) left out of {s['left_out_of']}: {s['why']}")
        if len(self.skipped) > 10:
            lines.append(f"  ... and {len(self.skipped) - 10} more images left out (see --json)")
        if self.class_names:
            lines.append(f"  class names: {self.class_names['detail']}")
        if self.causes:
            lines.append("  causes (metric change when only it is aligned):")
            for c in self.causes:
                ch = c.get("metric_change")
                change = (f"mAP50-95 {ch['map50_95']:+.4f}, mAP50 {ch['map50']:+.4f}" if ch else "not measurable")
                lines.append(f"    - {c['cause']}: {c['detail']} [{change}]"
                             + (" (aligned in this comparison)" if c.get("aligned") else ""))
        if self.provenance:
            lines.append(f"  provenance: {self.provenance.get('status')}")
        lines.append(f"verdict: {self.verdict}" + (": " + "; ".join(self.reasons) if self.reasons else ""))
        return lines

    def _describe_rect(self) -> List[str]:
        """Text lines of a dynamic export's comparison at the rect shapes `yolo val` feeds it."""
        r = self.rect
        if not r:
            return []
        lines = [f"  rect shapes `yolo val` feeds this dynamic export: {r['shapes']}, compared {r['compared']}"]
        lines += [f"    NOT compared {s['shape']} (image {', '.join(map(str, s['images']))}): {s['why']}"
                  for s in r["not_compared"]]
        b, m = r["boxes"], r.get("metrics")
        lines.append(f"    boxes at the rect shapes: {b['matched']} matched, {b['only_pt']} only in the .pt, "
                     f"{b['only_export']} only in the export"
                     + (f", max conf difference {b['max_conf_diff']:.3g}" if b.get("max_conf_diff") is not None else ""))
        if m:
            lines.append(f"    box mAP50-95 at the rect shapes: .pt {m['pt']['map50_95']:.4f}, export "
                         f"{m['export']['map50_95']:.4f}")
        return lines


__all__ = ["ParityReport"]
