"""The shapes of the JSON files yolo-det reads back, and one check that names the first field breaking its shape.

A reader calls :func:`problem` on what ``json.loads`` gave it before it trusts a field, and turns the answer into
its own error (exit 2, the file and the field named): a list where a mapping belongs, a text where a count
belongs, NaN where a whole number belongs is a damaged or foreign file, never a traceback. Only the fields a
reader uses are described; others are free (a newer writer may add some). Keys are optional unless ``required``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

__all__ = ["ANY", "BOOL", "DETERMINISM_JSON", "Dict", "FINGERPRINT_HEADER", "FINITE", "INT", "List", "Map", "NUM", "Opt",
           "STR", "STUDY_JSON", "TEXT", "Shape", "problem"]


class Shape:
    """What a value must be; :meth:`problem` says how ``value`` at ``where`` is not, or None."""

    what = "a value"

    def problem(self, value: Any, where: str) -> Optional[str]:
        raise NotImplementedError

    def _wrong(self, value: Any, where: str) -> str:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"{where or 'it'} is {shown}, not {self.what}"


class _Leaf(Shape):
    def __init__(self, what: str, test) -> None:
        self.what, self._test = what, test

    def problem(self, value: Any, where: str) -> Optional[str]:
        return None if self._test(value) else self._wrong(value, where)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


ANY = _Leaf("anything", lambda v: True)
INT = _Leaf("a whole number", _is_int)
#: a number; NaN and infinities are numbers (a metric can be NaN: the reader shows it as such)
NUM = _Leaf("a number", _is_num)
FINITE = _Leaf("a finite number", lambda v: _is_num(v) and math.isfinite(v))
STR = _Leaf("a text", lambda v: isinstance(v, str))
BOOL = _Leaf("true or false", lambda v: isinstance(v, bool))
#: shown as text: any scalar (a number or a word), never a list or mapping
TEXT = _Leaf("a text or number", lambda v: v is None or isinstance(v, (str, int, float, bool)))


class Opt(Shape):
    """``shape`` or null."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.what = f"{shape.what} or null"

    def problem(self, value: Any, where: str) -> Optional[str]:
        return None if value is None else self.shape.problem(value, where)


class List(Shape):
    """A list whose every item has ``item``'s shape."""

    def __init__(self, item: Shape = ANY) -> None:
        self.item = item
        self.what = "a list" if item is ANY else f"a list (each item {item.what})"

    def problem(self, value: Any, where: str) -> Optional[str]:
        if not isinstance(value, list):
            return self._wrong(value, where)
        for index, item in enumerate(value):
            found = self.item.problem(item, f"{where}[{index}]")
            if found:
                return found
        return None


class Map(Shape):
    """A mapping from names to values of ``value``'s shape."""

    def __init__(self, value: Shape = ANY) -> None:
        self.value = value
        self.what = "a mapping" if value is ANY else f"a mapping (each value {value.what})"

    def problem(self, value: Any, where: str) -> Optional[str]:
        if not isinstance(value, dict):
            return self._wrong(value, where)
        for key, item in value.items():
            found = self.value.problem(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None


class Dict(Shape):
    """A mapping with these fields (each optional unless in ``required``; other fields are free)."""

    what = "a mapping"

    def __init__(self, fields: Mapping[str, Shape], required: Sequence[str] = ()) -> None:
        self.fields, self.required = dict(fields), tuple(required)

    def problem(self, value: Any, where: str) -> Optional[str]:
        if not isinstance(value, dict):
            return self._wrong(value, where)
        for key in self.required:
            if key not in value:
                return f"{where or 'it'} has no {key!r}"
        for key, shape in self.fields.items():
            if key in value:
                found = shape.problem(value[key], f"{where}.{key}" if where else key)
                if found:
                    return found
        return None


def problem(value: Any, shape: Shape) -> Optional[str]:
    """How ``value`` breaks ``shape`` (the first field, named by its path: ``violations.ops[0].count is 'x', not a
    whole number``; the whole value is ``it``), or None when it fits."""
    return shape.problem(value, "")


#: the seeds by role (core/roles.record): the run seed, one per role, which were overridden
_SEEDS = Dict({"run": Opt(INT), "init": Opt(INT), "order": Opt(INT), "augment": Opt(INT), "overridden": Opt(List(TEXT))})
_ENVIRONMENT = Dict({"python": TEXT, "torch": TEXT, "platform": TEXT, "cuda_available": Opt(BOOL),
                     "gpus": Opt(List(ANY)), "packages": Opt(Map(TEXT))})

#: ``determinism.json`` (session.py writes it): what the report, ``diff RUN_A RUN_B`` and the trackers read
DETERMINISM_JSON = Dict({
    "schema": Opt(INT), "yolo_det": TEXT, "mode": Opt(STR), "mode_source": TEXT, "settings": Opt(Map()),
    "seed": Opt(INT), "seeds": Opt(_SEEDS), "rank": Opt(INT), "steps": Opt(INT),
    "flags_applied": Opt(Map()), "flags_now": Opt(Map()),
    "violations": Opt(Dict({"ops": List(Dict({"op": TEXT, "count": INT, "first_step": Opt(INT), "action": TEXT})),
                            "total": INT, "notes": List(TEXT)})),
    "replacements": Opt(List(TEXT)), "environment": Opt(_ENVIRONMENT), "fingerprint_log": Opt(STR),
    "ultralytics": Opt(Map()), "yolov5": Opt(Map()), "compile": Opt(Map()), "resume": Opt(Map()),
    "portable": Opt(Map()),
})

#: the first line of a fingerprint log (record/log.py writes it; ``format``, ``schema`` and ``digest`` are checked
#: there): the set-up the report shows and ``diff`` compares
FINGERPRINT_HEADER = Dict({
    "yolo_det": TEXT, "torch": TEXT, "python": TEXT, "host": TEXT, "mode": Opt(STR), "seed": Opt(INT),
    "seeds": Opt(_SEEDS), "settings": Opt(Map()), "command": Opt(List(TEXT)), "threads": Opt(INT),
    "interop_threads": Opt(INT), "packages": Opt(Map(TEXT)), "env": Opt(Map(TEXT)), "gpus": Opt(List(ANY)),
    "files": Opt(List(Dict({"index": Opt(INT), "arg": TEXT, "digest": TEXT}))), "verify_run": Opt(INT),
    "cwd": Opt(STR), "report": Opt(STR), "record": Opt(STR), "portable": Opt(Map()),
})

_METRICS = Map(NUM)
#: ``study.json`` (studies/study.py writes it)
STUDY_JSON = Dict({
    "settings": Dict({"seeds": List(INT), "vary": TEXT, "base_seed": Opt(INT), "mode": Opt(STR),
                      "command": Opt(List(TEXT)), "hardware": TEXT}),
    "runs": List(Dict({"run": INT, "seed": INT, "seeds": Opt(_SEEDS), "log": STR, "run_dir": Opt(STR),
                       "metrics": Opt(_METRICS), "best": Opt(_METRICS), "best_epoch": Opt(INT), "mode": Opt(STR),
                       "initial_weights": Opt(STR), "placement": Opt(Map()), "tainted": Opt(List(TEXT))},
                      required=("run", "seed", "log"))),
    "failed": Opt(List(Map())),
}, required=("settings", "runs"))

