"""The op table: which aten ops have no deterministic CUDA implementation, since and until when.

The data is ``yolo_det/strict/data/op_table.csv`` (``configs/op_table.csv`` links to it), one row per
aten op (and argument condition) as a dispatch mode sees it on CPU. Columns:

- ``op``: the aten overload packet, e.g. ``adaptive_max_pool2d_backward``.
- ``forward_ops``: forward ops whose backward runs ``op`` (``|``-separated), used to find the
  module that ran it.
- ``condition``: when the row applies, ``&``-separated: ``arg=v1|v2``, ``arg!=v``
  (schema argument names), ``overload=...``, ``self:floating``, ``self:quantized``, ``cublas``.
- ``cuda_kernel``/``aliases``: the name in PyTorch's error text now and in older releases.
- ``raises_since``: first release whose CUDA kernel alerts (``never`` if none).
- ``deterministic_since``: first release with a deterministic CUDA kernel (``never``/``always``).
- ``route_since``/``route_api``: since when the Python functions in ``route_api`` take a
  deterministic route on CUDA with determinism on; the native op keeps alerting.
- ``cpu_alerts``: the op alerts on CPU as well. ``silent``: nondeterministic without alert.
- ``modules``: ``nn`` classes that run it, with ``Class[attr=value]`` / ``[attr!=value]`` filters.
- ``functions``: Python API names that run it; ``replacement``: yolo-det's replacement.
- ``fix``, ``verified``, ``notes``: advice, how a row was checked, remarks.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch

from ..core.environment import torch_version as _torch_version

Version = Tuple[int, int]
TABLE_PATH = Path(__file__).resolve().parent / "data" / "op_table.csv"
COLUMNS = ("op", "forward_ops", "condition", "cuda_kernel", "aliases", "raises_since", "deterministic_since",
           "route_since", "route_api", "cpu_alerts", "silent", "modules", "functions", "replacement", "fix",
           "verified", "notes")
ALWAYS: Version = (0, 0)


class TableError(ValueError):
    """The op table file is malformed; the message names the file, line and column."""


def parse_version(text: Optional[str]) -> Optional[Version]:
    """``"2.1"``/``"2.1.0+cu121"`` -> (2, 1); ``never``/empty -> None; ``always`` -> (0, 0)."""
    text = (text or "").strip().lower()
    if text in ("", "never", "-"):
        return None
    if text == "always":
        return ALWAYS
    match = re.match(r"^(\d+)\.(\d+)", text)
    if not match:
        raise ValueError(f"{text!r} is not a torch version (expected MAJOR.MINOR)")
    return int(match.group(1)), int(match.group(2))


def installed_version() -> Version:
    """(major, minor) of the installed torch."""
    return _torch_version()


def format_version(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def _split(text: str) -> Tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split("|") if part.strip())


def _normalise(value: Any) -> str:
    """A value as the table writes it: ``(1, 1)`` -> ``1``, ``None`` -> ``None``."""
    if isinstance(value, (list, tuple)) and value and all(v == value[0] for v in value):
        value = value[0]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return str(value)


@dataclass(frozen=True)
class Condition:
    """One clause of a row's ``condition``: ``key=a|b``, ``key!=a``, ``self:floating``, ``cublas``."""

    key: str
    values: Tuple[str, ...] = ()
    negate: bool = False

    @classmethod
    def parse(cls, text: str) -> "Condition":
        text = text.strip()
        if ":" in text and "=" not in text:
            return cls(key=text)
        if text == "cublas":
            return cls(key="cublas")
        match = re.match(r"^(\w+)\s*(!=|=)\s*(.+)$", text)
        if not match:
            raise ValueError(f"condition {text!r} is not KEY=VALUE, KEY!=VALUE, self:floating or cublas")
        return cls(key=match.group(1), values=_split(match.group(3)), negate=match.group(2) == "!=")

    def holds(self, overload: str, arguments: Optional[Mapping[str, Any]]) -> bool:
        """Whether the clause holds for a call; True when the arguments are unknown."""
        if self.key == "cublas":
            return True
        if self.key == "overload":
            found = overload in self.values
            return found != self.negate
        if arguments is None:
            return True
        if self.key in ("self:floating", "self:quantized"):
            tensor = arguments.get("self")
            if not isinstance(tensor, torch.Tensor):
                return True
            if self.key == "self:floating":
                return tensor.is_floating_point() or tensor.is_complex()
            return tensor.is_quantized
        if self.key not in arguments:
            return True
        found = _normalise(arguments[self.key]) in self.values
        return found != self.negate


@dataclass(frozen=True)
class ModuleMatcher:
    """``AdaptiveAvgPool2d[output_size!=1]``: a module class name and attribute filters."""

    name: str
    filters: Tuple[Condition, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "ModuleMatcher":
        match = re.match(r"^(\w+)(?:\[(.*)\])?$", text.strip())
        if not match:
            raise ValueError(f"module {text!r} is not Class or Class[attr=value]")
        filters = tuple(Condition.parse(part) for part in (match.group(2) or "").split("&") if part.strip())
        return cls(match.group(1), filters)

    def matches(self, module: torch.nn.Module) -> bool:
        if self.name not in {klass.__name__ for klass in type(module).__mro__}:
            return False
        for clause in self.filters:
            value = _normalise(getattr(module, clause.key, None)).lower()
            if (value in {v.lower() for v in clause.values}) == clause.negate:
                return False
        return True


@dataclass(frozen=True)
class OpRow:
    """One row of the op table (see the module docstring for the columns)."""

    op: str
    forward_ops: Tuple[str, ...]
    conditions: Tuple[Condition, ...]
    cuda_kernel: str
    aliases: Tuple[str, ...]
    raises_since: Optional[Version]
    deterministic_since: Optional[Version]
    route_since: Optional[Version]
    route_api: Tuple[str, ...]
    cpu_alerts: bool
    silent: bool
    modules: Tuple[ModuleMatcher, ...]
    functions: Tuple[str, ...]
    replacement: str
    fix: str
    verified: str
    notes: str
    line: int = field(default=0, compare=False)

    @property
    def kernel_names(self) -> Tuple[str, ...]:
        return tuple(n for n in (self.cuda_kernel,) + self.aliases if n and n != "-")

    @property
    def is_env(self) -> bool:
        """A cuBLAS environment requirement, not an op alert."""
        return any(c.key == "cublas" for c in self.conditions)

    def deterministic(self, version: Version) -> bool:
        return self.deterministic_since is not None and version >= self.deterministic_since

    def raises(self, version: Version, routed: bool = False) -> bool:
        """Whether strict mode raises on CUDA for this op in ``version``.

        ``routed``: the call came through a Python function in ``route_api`` (which takes
        PyTorch's deterministic route from ``route_since`` on).
        """
        if self.raises_since is None or version < self.raises_since or self.deterministic(version):
            return False
        return not (routed and self.route_since is not None and version >= self.route_since)

    def nondeterministic(self, version: Version, routed: bool = False) -> bool:
        """Raises, or is silently nondeterministic, on CUDA in ``version``."""
        if self.silent:
            return not self.deterministic(version)
        return self.raises(version, routed)

    def applies(self, overload: str = "default", arguments: Optional[Mapping[str, Any]] = None) -> bool:
        return all(c.holds(overload, arguments) for c in self.conditions)


def _bool(text: str, where: str) -> bool:
    value = (text or "").strip().lower()
    if value in ("true", "yes", "1"):
        return True
    if value in ("false", "no", "0", ""):
        return False
    raise ValueError(f"{where}: {text!r} is not true or false")


def _row(record: Mapping[str, str], line: int) -> OpRow:
    def version(column: str) -> Optional[Version]:
        try:
            return parse_version(record[column])
        except ValueError as exc:
            raise ValueError(f"column {column}: {exc}") from None

    conditions = tuple(Condition.parse(part) for part in (record["condition"] or "").split("&") if part.strip())
    return OpRow(
        op=record["op"].strip(),
        forward_ops=_split(record["forward_ops"]),
        conditions=conditions,
        cuda_kernel=record["cuda_kernel"].strip(),
        aliases=_split(record["aliases"]),
        raises_since=version("raises_since"),
        deterministic_since=version("deterministic_since"),
        route_since=version("route_since"),
        route_api=_split(record["route_api"]),
        cpu_alerts=_bool(record["cpu_alerts"], "cpu_alerts"),
        silent=_bool(record["silent"], "silent"),
        modules=tuple(ModuleMatcher.parse(m) for m in _split(record["modules"])),
        functions=_split(record["functions"]),
        replacement=record["replacement"].strip(),
        fix=record["fix"].strip(),
        verified=record["verified"].strip(),
        notes=record["notes"].strip(),
        line=line,
    )


class OpTable:
    """The rows, indexed by op name, forward op and CUDA kernel name."""

    def __init__(self, rows: Iterable[OpRow], source: str = "") -> None:
        self.rows: Tuple[OpRow, ...] = tuple(rows)
        self.source = source
        self.by_op: Dict[str, List[OpRow]] = {}
        self.by_forward: Dict[str, List[OpRow]] = {}
        self.by_kernel: Dict[str, List[OpRow]] = {}
        for row in self.rows:
            self.by_op.setdefault(row.op, []).append(row)
            for name in row.forward_ops:
                self.by_forward.setdefault(name, []).append(row)
            for name in row.kernel_names:
                self.by_kernel.setdefault(name, []).append(row)

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def rows_for(self, name: str) -> List[OpRow]:
        """Rows for an aten op (``aten::x``, ``aten.x.default``, ``x``) or a CUDA kernel name."""
        name = (name or "").strip()
        if name in self.by_kernel:
            return list(self.by_kernel[name])
        op = name.split("::")[-1]
        if op.startswith("aten."):
            op = op[len("aten."):]
        for candidate in (op, op.split(".")[0]):
            if candidate in self.by_op:
                return list(self.by_op[candidate])
        return []

    def match(self, func: Any, args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None) -> List[OpRow]:
        """Rows whose op is the aten overload ``func`` and whose condition holds for this call."""
        rows = self.by_op.get(func.overloadpacket.__name__)
        if not rows:
            return []
        overload = func._overloadname or "default"
        needs_args = any(c.key not in ("overload", "cublas") for r in rows for c in r.conditions)
        arguments = bind_arguments(func, args, kwargs) if needs_args else None
        return [r for r in rows if r.applies(overload, arguments)]


def bind_arguments(func: Any, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """Map an aten call's arguments to their schema names (defaults filled); None if unknown."""
    try:
        schema = func._schema
        bound: Dict[str, Any] = {}
        for index, argument in enumerate(schema.arguments):
            if index < len(args):
                bound[argument.name] = args[index]
            elif kwargs and argument.name in kwargs:
                bound[argument.name] = kwargs[argument.name]
            elif argument.has_default_value():
                bound[argument.name] = argument.default_value
        return bound
    except Exception:  # noqa: BLE001 - an odd schema must never break the caller
        return None


def load_table(path: Optional[Path] = None) -> OpTable:
    """Read an op table (default: the packaged one; cached). Raises :class:`TableError`."""
    return _load(str(Path(path).resolve()) if path is not None else str(TABLE_PATH))


@functools.lru_cache(maxsize=8)
def _load(path: str) -> OpTable:
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise TableError(f"cannot read the op table {path}: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TableError(f"{path}: missing columns {', '.join(missing)}")
        rows = []
        for record in reader:
            try:
                rows.append(_row(record, reader.line_num))
            except (ValueError, AttributeError) as exc:
                raise TableError(f"{path}, line {reader.line_num}: {exc}") from None
    return OpTable(rows, path)


def cuda_kernel_info(op: str, table: Optional[OpTable] = None) -> Tuple[Optional[str], bool]:
    """(CUDA kernel name or None, known nondeterministic on CUDA in the installed torch) for an aten
    op as a dispatch mode names it (``aten.upsample_bilinear2d_backward.default``).

    Without the call's arguments, rows with conditions count as applying: "known" means some
    form of the op is. Used by ``yolo-det verify --locate`` to describe the op it names.
    """
    rows = (table or load_table()).rows_for(op)
    if not rows:
        return None, False
    version = installed_version()
    kernel = next((r.cuda_kernel for r in rows if r.cuda_kernel and r.cuda_kernel != "-"), None)
    return kernel, any(r.nondeterministic(version) for r in rows)
