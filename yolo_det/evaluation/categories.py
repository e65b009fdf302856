"""Which class a predictions.json's ``category_id`` is: the id schemes the releases write, found from the ids and the data.

YOLOv5's ``val.py --save-json`` writes the YOLO class index, Ultralytics' ``save_json`` the index + 1, and both,
on COCO itself (a split ``.../coco/val2017.txt``), COCO's own category ids: 80 classes in ids 1..90 with gaps
(:data:`yolo_det.evaluation.coco.COCO_CATEGORIES`). A scheme fits when it maps every id of the file to a class; the
one that fits is used, and where several fit and make different classes of the ids, what the releases write for
this data decides (COCO's ids on COCO's split; else the class index, or class + 1 in rows that carry
``file_name``, as Ultralytics writes them). Ids no scheme fits, or ids two schemes fit with nothing to decide
between them, are refused with the ids named: a wrong map would score boxes of the right place as the wrong class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .coco import COCO_CATEGORIES, CocoError, is_coco80

#: The schemes, in the order a tie is reported: name -> what writes it.
SCHEMES = {
    "class": "the YOLO class index, 0..nc-1 (YOLOv5 val.py --save-json on custom data)",
    "class+1": "the class index + 1, 1..nc (Ultralytics save_json on custom data)",
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


def is_coco_split(entries: Sequence[Path]) -> bool:
    """Whether the split is COCO's as the releases test it (a ``val2017.txt``/``test-dev2017.txt`` list under a
    path holding ``coco``): there they write COCO's category ids instead of the class index."""
    return len(entries) == 1 and Path(entries[0]).name in COCO_SPLITS and "coco" in str(entries[0])


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
            table_source: str = "COCO's 91-id table", file_name: bool = False, coco_split: bool = False,
            choice: str = "auto") -> Scheme:
    """The scheme of ``ids`` (the file ``where``'s category ids) for a data of ``names``: ``table`` the ``coco``
    scheme's ids (:func:`coco_table`), ``file_name`` whether the rows carry it (Ultralytics), ``coco_split`` whether
    the split is COCO's (:func:`is_coco_split`), ``choice`` a scheme the user gave (``--category-ids``)."""
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
    decided = _decide(fits, file_name, coco_split)
    if decided is None:
        raise CocoError(_ambiguous(fits, names, where, file_name, coco_split))
    name, why = decided
    return Scheme(name, fits[name], why)


def _decide(fits: Dict[str, Dict[int, int]], file_name: bool, coco_split: bool) -> Optional[Tuple[str, str]]:
    """(scheme, why) among schemes that fit, or None when they map the ids apart and nothing decides."""
    others = list(fits)
    if len({tuple(m.items()) for m in fits.values()}) == 1:
        name = next(iter(fits))
        if len(fits) == 1:
            return name, f"only {name} maps every id of the file to a class"
        return name, f"{' and '.join(others)} map every id to the same class"
    writer = "class+1" if file_name else "class"
    rows = ("the rows carry file_name (Ultralytics writes it, with class + 1)" if file_name else
            "the rows carry no file_name (YOLOv5 writes the class index)")
    split = ("the split is COCO's val2017.txt (there the releases write COCO's ids)" if coco_split else
             "the split is not COCO's val2017.txt (where the releases write COCO's ids)")
    if coco_split and "coco" in fits:
        return "coco", f"{' and '.join(others)} fit; {split}"
    if writer in fits:
        return writer, f"{' and '.join(others)} fit; {split} and {rows}"
    return None


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
               coco_split: bool) -> str:
    apart = [i for i in next(iter(fits.values())) if len({m[i] for m in fits.values()}) > 1]

    def shown(m: Dict[int, int]) -> str:
        return ", ".join(f"{i} -> class {m[i]} {str(names[m[i]])!r}" for i in apart[:4])

    return (f"the category ids of {where} fit {' and '.join(fits)}, which make ids {_ids(apart)} different classes ("
            + "; ".join(f"{name}: {shown(m)}" for name, m in fits.items())
            + "), and nothing decides: the split is "
            + ("COCO's val2017.txt" if coco_split else "not COCO's val2017.txt (where the releases write COCO's ids)")
            + (", the rows carry file_name (Ultralytics writes class + 1)" if file_name else
               ", the rows carry no file_name (YOLOv5 writes the class index)")
            + f": give --category-ids {' or --category-ids '.join(fits)}, the scheme of the program that wrote it")


__all__ = ["CHOICES", "COCO_SPLITS", "SCHEMES", "Scheme", "coco_table", "integer_ids", "is_coco_split", "resolve"]
