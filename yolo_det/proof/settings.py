"""A run's resolved training settings as its release wrote them, compared key by key (no torch).

Ultralytics writes ``args.yaml`` (every argument after defaults and overrides), the YOLOv5 family
``opt.yaml`` (its ``hyp`` as a dict in 7.0) and ``hyp.yaml``. Keys are flat: ``lr0``, ``hyp.lr0``.
Output locations and tokens are not settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

SETTINGS_FILES = ("args.yaml", "opt.yaml", "hyp.yaml")
#: Settings that say where a run writes or how it is named, not what it computes.
OUTPUT_KEYS = frozenset({"name", "project", "save_dir", "exist_ok", "fingerprint", "resume", "local_rank",
                         "entity", "upload_dataset", "bbox_interval", "artifact_alias", "hf_token", "neptune_token",
                         "roboflow_token", "plots", "noplots", "verbose", "save_period"})


class SettingsError(ValueError):
    """A settings file exists but cannot be read."""


def _yaml(path: Path) -> Optional[Dict[str, Any]]:
    import yaml

    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: cannot read it as YAML ({exc})") from None
    return data if isinstance(data, dict) else None


def read_settings(folder: "os.PathLike[str] | str") -> Tuple[Dict[str, Any], List[str]]:
    """(flat settings, the files they came from) of a run folder; empty when it holds none."""
    settings: Dict[str, Any] = {}
    used: List[str] = []
    for name in SETTINGS_FILES:
        data = _yaml(Path(folder) / name)
        if data is None:
            continue
        used.append(name)
        prefix = "hyp." if name == "hyp.yaml" else ""
        for key, value in data.items():
            if name == "opt.yaml" and key == "hyp" and isinstance(value, dict):
                for k, v in value.items():
                    settings.setdefault(f"hyp.{k}", v)
                continue
            settings[prefix + str(key)] = value
    return settings, used


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind: ``False`` and ``0.0`` differ (``multi_scale`` became a float in 8.4)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _fmt(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(a: Dict[str, Any], b: Dict[str, Any], release_a: Optional[str] = None,
                release_b: Optional[str] = None, ignore: Optional[Callable[[Any, Any], bool]] = None) -> List[str]:
    """Every setting that differs, key by key: both values, or which run (and release) lacks the key.

    ``ignore(value_a, value_b)``: differences expected by design (verify's ``{run}``), left out.
    """
    out = []
    ra, rb = release_a or "release unknown", release_b or "release unknown"
    for key in list(a) + [k for k in b if k not in a]:
        if key.split(".")[-1] in OUTPUT_KEYS:
            continue
        if key not in b:
            out.append(f"{key}: {_fmt(a[key])} in A ({ra}), absent in B ({rb})")
        elif key not in a:
            out.append(f"{key}: absent in A ({ra}), {_fmt(b[key])} in B ({rb})")
        elif not _same(a[key], b[key]) and not (ignore is not None and ignore(a[key], b[key])):
            out.append(f"{key}: {_fmt(a[key])} vs {_fmt(b[key])}")
    return out


def release_from_report(report: Dict[str, Any]) -> Optional[str]:
    """The training release a ``determinism.json`` names (``ultralytics 8.4.190``, ``yolov5 7.0.14``)."""
    section = report.get("ultralytics")
    if isinstance(section, dict) and section.get("version"):
        return f"ultralytics {section['version']}"
    packages = (report.get("environment") or {}).get("packages") or {}
    for name in ("ultralytics", "yolov5"):
        if packages.get(name):
            return f"{name} {packages[name]}"
    return None


def settings_cause_message(diffs: List[str], files_a: List[str], files_b: List[str]) -> str:
    """The one-line cause for ``diffs`` (the first three named)."""
    return (f"{len(diffs)} resolved settings differ ({', '.join(files_a) or 'none'} vs "
            f"{', '.join(files_b) or 'none'}): " + "; ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else ""))


__all__ = ["OUTPUT_KEYS", "SETTINGS_FILES", "SettingsError", "differences", "read_settings", "release_from_report",
           "settings_cause_message"]
