"""Which class a predictions.json's ``category_id`` is: the releases' id schemes, found from the ids and the evidence.

YOLOv5's ``val.py --save-json`` and Ultralytics before 8.3.49 write the YOLO class index, Ultralytics from 8.3.49
the index + 1 (8.3.49-8.3.x and the forks built on them, e.g. 8.3.63's, without ``file_name``; later releases
with it), and all of them, on COCO itself (one split path ``.../coco/val2017.txt``, not a list), COCO's own category
ids: 80 classes in ids 1..90 with gaps (:data:`yolo_det.evaluation.coco.COCO_CATEGORIES`). A scheme fits when it
maps every id of the file to a class. Where every fitting scheme makes the same classes of the ids, the ids decide;
where they make different classes, only evidence that is there decides -- rows with ``file_name`` (Ultralytics, class
+ 1), the writer recorded in the run's ``determinism.json`` beside the file, COCO's split -- and only when every
writer it leaves writes one scheme here. Otherwise the ids are refused with the ids named and ``--category-ids``: a
wrong map would score boxes of the right place as the wrong class.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .coco import COCO_CATEGORIES, CocoError, is_coco80

#: The schemes, in the order a tie is reported: name -> what writes it.
SCHEMES = {
    "class": "the YOLO class index, 0..nc-1 (YOLOv5 val.py --save-json, Ultralytics before 8.3.49, on custom data)",
    "class+1": "the class index + 1, 1..nc (Ultralytics save_json from 8.3.49 on, on custom data)",
    "coco": "COCO category ids (both releases on COCO: 80 classes in ids 1..90 with gaps; with a coco_json, its "
            "categories' ids, by name)",
}
#: ``--category-ids`` values: ``auto`` finds the scheme.
CHOICES = ("auto", *SCHEMES)
#: The split files on which the releases write COCO's ids (YOLOv5: ``.../coco/val2017.txt``; Ultralytics: a path
#: holding ``coco`` that ends so).
COCO_SPLITS = ("val2017.txt", "test-dev2017.txt")


@dataclass(frozen=True)
class Scheme:
    """The scheme of a file's category ids: its name (:data:`SCHEMES`), every id's class, and why it was chosen."""

    name: str
    mapping: Dict[int, int]
    why: str

    def to_json(self) -> Dict[str, Any]:
        """The scheme, what writes it, why, and each id of the file with its class (keys as text, as JSON has)."""
        return {"scheme": self.name, "label": SCHEMES[self.name], "why": self.why,
                "mapped": {str(k): v for k, v in sorted(self.mapping.items())}}


#: The writers of predictions.json whose ids are not COCO's: name -> (scheme off COCO, rows carry file_name).
#: YOLOv5 ``val.py`` and Ultralytics before 8.3.49 write the class index (``class_map = range(nc)``); Ultralytics
#: 8.3.49 on (and the forks vendoring it, e.g. 8.3.63's) the class + 1, and from a later 8.3 on with ``file_name``.
WRITERS = {
    "yolov5": ("class", False),
    "ultralytics<8.3.49": ("class", False),
    "ultralytics>=8.3.49": ("class+1", False),
    "ultralytics, rows with file_name": ("class+1", True),
}
#: The first Ultralytics release whose ``class_map`` off COCO is ``range(1, nc + 1)`` (8.3.48 writes the index).
CLASS_PLUS_ONE_FROM = (8, 3, 49)


def is_coco_split(entries: Sequence[Path], value: Any = None) -> bool:
    """Whether a release treats the split as COCO's (there it writes COCO's ids): ``value``, the data YAML's
    ``val:``/split as written, must be one path, not a list (the releases test ``isinstance(val, str)``), and
    ``entries`` its resolved path: a ``val2017.txt``/``test-dev2017.txt`` under a path holding ``coco``."""
    if value is not None and not isinstance(value, str):
        return False
    return len(entries) == 1 and Path(entries[0]).name in COCO_SPLITS and "coco" in str(entries[0])


def coco_writers(entries: Sequence[Path], value: Any = None, yolov5_val: Optional[Path] = None) -> Tuple[str, ...]:
    """The writers (``ultralytics``, ``yolov5``) that write COCO's ids on this split: Ultralytics on
    :func:`is_coco_split` of the split; YOLOv5 where the data's ``val`` (whatever the split), one path
    ``yolov5_val``, ends ``coco/val2017.txt`` (YOLOv5's own test)."""
    out = ("ultralytics",) if is_coco_split([Path(e).resolve() for e in entries], value) else ()  # as it resolves
    if yolov5_val is not None and str(yolov5_val).endswith(os.path.join("coco", "val2017.txt")):
        out += ("yolov5",)
    return out


def writer_scheme(writer: str, coco: Sequence[str]) -> str:
    """The scheme ``writer`` (a key of :data:`WRITERS`) writes on a split where ``coco`` (:func:`coco_writers`)
    write COCO's ids."""
    family = "yolov5" if writer == "yolov5" else "ultralytics"
    return "coco" if family in coco else WRITERS[writer][0]


def recorded_writer(report: Any) -> Optional[Tuple[str, str]]:
    """(writer, what says so) from a run's ``determinism.json`` (its ``yolov5`` block, or its ``ultralytics``
    block's version, an 8.x number: the forks built on a release carry its number), None when it names neither or
    the number is not Ultralytics' 8.x (a fork's own numbering says nothing about its writer)."""
    if not isinstance(report, dict):
        return None
    if isinstance(report.get("yolov5"), dict):
        return "yolov5", "the run's determinism.json records YOLOv5"
    block = report.get("ultralytics")
    version = block.get("version") if isinstance(block, dict) else None
    if not isinstance(version, str):
        packages = (report.get("environment") or {}).get("packages") if isinstance(report.get("environment"),
                                                                                  dict) else None
        version = packages.get("ultralytics") if isinstance(packages, dict) and block is not None else None
    if not isinstance(version, str):
        return None
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            return None
        parts.append(int(digits))
    if len(parts) < 3 or parts[0] != 8:  # not Ultralytics' 8.x numbering (a fork's own): it says nothing
        return None
    writer = "ultralytics>=8.3.49" if tuple(parts) >= CLASS_PLUS_ONE_FROM else "ultralytics<8.3.49"
    return writer, f"the run's determinism.json records ultralytics {version}"


def coco_table(names: Sequence[Any], truth_info: Mapping[str, Any]) -> Optional[Dict[int, int]]:
    """Category id -> class of the ``coco`` scheme: a coco_json's categories by name (``truth_info``'s
    ``category_ids``), else COCO's own ids where the names are COCO's 80 classes in order; None: no such ids."""
    if truth_info.get("category_ids") is not None:
        return {int(k): int(v) for k, v in truth_info["category_ids"].items()}
    if is_coco80(names):
        return {category_id: index for index, (category_id, _) in enumerate(COCO_CATEGORIES)}
    return None


def integer_ids(values: Iterable[Any], where: str) -> List[int]:
    """The ``category_id`` values as integers; one that is not a whole number is a :class:`CocoError`."""
    out = []
    for number, value in enumerate(values):
        if isinstance(value, float) and not value.is_integer():
            raise CocoError(f"{where}: row {number} has category_id {value}, not a whole number: a category id is "
                            "the class (an integer) in the scheme the program that wrote the file uses; give "
                            "predictions.json as val.py --save-json or save_json=True write it")
        out.append(int(value))
    return out


def resolve(ids: Iterable[int], names: Sequence[Any], where: str, table: Optional[Dict[int, int]] = None,
            table_source: str = "COCO's 91-id table", file_name: bool = False, coco_split: Any = False,
            choice: str = "auto", writer: Optional[Tuple[str, str]] = None) -> Scheme:
    """The scheme of ``ids`` (the file ``where``'s category ids) for a data of ``names``: ``table`` the ``coco``
    scheme's ids (:func:`coco_table`), ``file_name`` whether the rows carry it (Ultralytics), ``coco_split`` the
    writers that write COCO's ids on this split (:func:`coco_writers`; True: all), ``choice`` a scheme the user gave
    (``--category-ids``), ``writer`` (writer, what says so) recorded with the run (:func:`recorded_writer`)."""
    seen = sorted(set(ids))
    nc = len(names)
    candidates = {"class": {i: i for i in range(nc)}, "class+1": {i + 1: i for i in range(nc)}, "coco": table}
    fits = {name: {i: m[i] for i in seen} for name, m in candidates.items() if m is not None
            and all(i in m for i in seen)}
    if choice != "auto":
        if choice not in fits:
            raise CocoError(_not_chosen(choice, seen, candidates, names, where, table_source))
        return Scheme(choice, fits[choice], f"--category-ids {choice}")
    if not seen:
        return Scheme(next(iter(fits)), {}, "the file has no rows: no category id to read")
    if not fits:
        raise CocoError(_no_scheme(seen, candidates, names, where, table_source))
    coco = ("ultralytics", "yolov5") if coco_split is True else tuple(coco_split or ())
    decided = _decide(fits, file_name, coco, writer)
    if decided is None:
        raise CocoError(_ambiguous(fits, names, where, file_name, coco, writer))
    name, why = decided
    return Scheme(name, fits[name], why)


def _writers(file_name: bool, writer: Optional[Tuple[str, str]]) -> Tuple[List[str], str]:
    """The writers the evidence leaves (keys of :data:`WRITERS`) and the evidence in words."""
    if file_name:
        return ["ultralytics, rows with file_name"], "the rows carry file_name (only Ultralytics writes it)"
    if writer is not None:
        return [writer[0]], writer[1]
    return ([w for w, (_, named) in WRITERS.items() if not named],
            "the rows carry no file_name, and no writer is recorded beside the file (YOLOv5 and Ultralytics before "
            "8.3.49 write the class index, Ultralytics 8.3.49 to 8.3.x and the forks built on it, e.g. 8.3.63, "
            "the class + 1)")


def _decide(fits: Dict[str, Dict[int, int]], file_name: bool, coco: Sequence[str],
            writer: Optional[Tuple[str, str]] = None) -> Optional[Tuple[str, str]]:
    """(scheme, why) among schemes that fit, or None when they map the ids apart and nothing decides: the ids alone
    where every fitting scheme makes the same classes of them, else the one scheme every writer the evidence leaves
    writes on this split (``coco``: the writers that write COCO's ids here), where it fits. A scheme is never
    chosen for being the only fitting one of the writers' several: a file of COCO's ids from another program fits
    class + 1 too."""
    others = list(fits)
    if len({tuple(m.items()) for m in fits.values()}) == 1:
        name = next(iter(fits))
        if len(fits) == 1:
            return name, f"only {name} maps every id of the file to a class"
        return name, f"{' and '.join(others)} map every id to the same class"
    writers, evidence = _writers(file_name, writer)
    split = (f"the split is COCO's val2017.txt (there {' and '.join(coco)} write COCO's ids)" if coco else
             "the split is no single COCO val2017.txt (where the releases write COCO's ids)")
    schemes = {writer_scheme(w, coco) for w in writers}
    if len(schemes) == 1 and next(iter(schemes)) in fits:  # every writer the evidence leaves writes that scheme
        return next(iter(schemes)), f"{' and '.join(others)} fit; {split}; {evidence}"
    return None  # writers that write different schemes here, or one whose scheme does not fit (another program)


def _ids(values: Iterable[Any], limit: int = 12) -> str:
    values = sorted(values)
    return ", ".join(map(str, values[:limit])) + (f" and {len(values) - limit} more" if len(values) > limit else "")


def _misfits(seen: List[int], candidates: Mapping[str, Optional[Dict[int, int]]], names: Sequence[Any],
             table_source: str) -> List[str]:
    """Per scheme, the ids it cannot map (or why it does not apply)."""
    nc = len(names)
    out = []
    for name, ranged in (("class", f"0..{nc - 1}"), ("class+1", f"1..{nc}")):
        outside = [i for i in seen if i not in candidates[name]]
        if outside:
            out.append(f"{name} ({ranged}, this data's {nc} classes): {_ids(outside)} outside")
    table = candidates["coco"]
    if table is None:
        coco_ids = {i for i, _ in COCO_CATEGORIES}
        looks = [i for i in seen if i in coco_ids and i >= nc]
        shown = ", ".join(repr(str(n)) for n in list(names)[:5]) + (", ..." if nc > 5 else "")
        out.append("coco: COCO's 91-id scheme needs the data's names to be COCO's 80 classes in order, and this "
                   f"data names {nc} ({shown}) and no coco_json"
                   + (f" (ids {_ids(looks)} look like COCO's category ids)" if looks else ""))
    else:
        outside = [i for i in seen if i not in table]
        if outside:
            out.append(f"coco ({table_source}): {_ids(outside)} not among its category ids")
    return out


def _no_scheme(seen: List[int], candidates: Mapping[str, Optional[Dict[int, int]]], names: Sequence[Any],
               where: str, table_source: str) -> str:
    return (f"the category ids of {where} ({_ids(seen)}) fit no scheme: "
            + "; ".join(_misfits(seen, candidates, names, table_source))
            + ". Give --data the data YAML the predictions were made on (its names, and coco_json where the ids are "
              "its categories'); a file whose rows mix schemes (e.g. 0 and 90) was written by two programs or on two "
              "datasets and cannot be scored as one")


def _not_chosen(choice: str, seen: List[int], candidates: Mapping[str, Optional[Dict[int, int]]],
                names: Sequence[Any], where: str, table_source: str) -> str:
    why = [m for m in _misfits(seen, candidates, names, table_source) if m.startswith(choice + " ")
           or m.startswith(choice + ":")]
    return (f"--category-ids {choice} does not fit the category ids of {where}: {'; '.join(why)}: give the scheme "
            f"of the program that wrote the file ({', '.join(CHOICES)})")


def _ambiguous(fits: Dict[str, Dict[int, int]], names: Sequence[Any], where: str, file_name: bool,
               coco: Sequence[str], writer: Optional[Tuple[str, str]] = None) -> str:
    apart = [i for i in next(iter(fits.values())) if len({m[i] for m in fits.values()}) > 1]

    def shown(m: Dict[int, int]) -> str:
        return ", ".join(f"{i} -> class {m[i]} {str(names[m[i]])!r}" for i in apart[:4])

    _writers_left, evidence = _writers(file_name, writer)
    return (f"the category ids of {where} fit {' and '.join(fits)}, which make ids {_ids(apart)} different classes ("
            + "; ".join(f"{name}: {shown(m)}" for name, m in fits.items())
            + "), and nothing decides: the split is "
            + (f"COCO's val2017.txt (where {' and '.join(coco)} write COCO's ids)" if coco else
               "no single COCO val2017.txt (where the releases write COCO's ids)")
            + f"; {evidence}: give --category-ids {' or --category-ids '.join(fits)}, the scheme of the program "
              "that wrote it")


__all__ = ["CHOICES", "CLASS_PLUS_ONE_FROM", "COCO_SPLITS", "SCHEMES", "Scheme", "WRITERS", "coco_table",
           "coco_writers", "integer_ids", "is_coco_split", "recorded_writer", "resolve", "writer_scheme"]
