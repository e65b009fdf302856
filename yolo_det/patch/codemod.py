"""``yolo-det apply-patch`` / ``revert-patch``: a libcst codemod of YOLOv5-family training scripts.

The patch only inserts calls into :mod:`yolo_det.integrations.yolov5` (all logic lives there)
at anchors found by tree shape, so unseen forks of the same lineage patch too. Every line it
adds ends in ``# yolo-det``; a wrapped statement sits in ``with ...:  # yolo-det``; a line it
takes out stays in the file as a ``# yolo-det removed: <code>`` comment. Revert undoes exactly
those, so it restores the original bytes and keeps the user's edits elsewhere.

Files are transformed in memory first and written with temp-file + rename only when every
target transformed; on any failure nothing changes.
"""

from __future__ import annotations

import ast
import difflib
import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import libcst as cst
import libcst.matchers as m

MARKER = "# yolo-det"
REMOVED = "# yolo-det removed: "
ALIAS = "yolo_det_v5"
IMPORT = f"from yolo_det.integrations import yolov5 as {ALIAS}"
MAX_DEPTH = 2  # train.py, classify/train.py, segment/train.py; deeper folders are library code
SKIP_DIRS = {"__pycache__", "venv", "env", "site-packages", "node_modules", "runs", "build", "dist", "wandb"}


class PatchError(Exception):
    """The target cannot be patched (or reverted); nothing was changed.

    ``found`` and ``missing`` name the anchors the codemod looked for in ``path``.
    """

    def __init__(self, message: str, path: Optional[Path] = None,
                 found: Sequence[str] = (), missing: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.found = list(found)
        self.missing = list(missing)

    def details(self) -> str:
        """The message with the found/missing anchors, one per line."""
        lines = [str(self)]
        if self.found or self.missing:
            lines.append("  found:   " + (", ".join(self.found) or "-"))
            lines.append("  missing: " + (", ".join(self.missing) or "-"))
        return "\n".join(lines)


@dataclass
class FileChange:
    """One training script: its bytes before and after, and what the codemod did."""

    path: Path
    relpath: str
    before: bytes
    after: bytes
    status: str  # patched | updated | already patched | reverted | not patched | skipped
    notes: List[str] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        """Unified diff of this file (``a/`` and ``b/`` paths relative to the repo)."""
        if not self.changed:
            return ""
        old = self.before.decode(self.encoding).splitlines(keepends=True)
        new = self.after.decode(self.encoding).splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.relpath}", f"b/{self.relpath}"))


@dataclass
class PatchResult:
    """What apply/revert did (or, with ``dry_run``, would do) to a repository."""

    repo: Path
    action: str  # apply | revert
    dry_run: bool
    files: List[FileChange]

    @property
    def files_changed(self) -> List[Path]:
        return [f.path for f in self.files if f.changed]

    @property
    def already_patched(self) -> bool:
        """True when apply found every target patched already (nothing to change)."""
        return self.action == "apply" and bool(self.files) and all(
            f.status == "already patched" for f in self.files if f.status != "skipped")

    @property
    def diff(self) -> str:
        return "".join(f.diff() for f in self.files)


# -- public API ------------------------------------------------------------------------------

def apply_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Patch every YOLOv5-family training script in ``repo`` (a folder, or one ``.py`` file).

    Idempotent: a patched file is left byte-identical. Raises :class:`PatchError` (nothing
    written) when no training script with the known anchors is found.
    """
    root, targets, required = _targets(repo)
    changes = [_apply_file(root, path, path in required) for path in targets]
    if not any(c.status != "skipped" for c in changes):
        raise _nothing_to_patch(root, changes)
    if not dry_run:
        _write_atomically([c for c in changes if c.changed])
    return PatchResult(root, "apply", dry_run, changes)


def revert_patch(repo: os.PathLike, dry_run: bool = False) -> PatchResult:
    """Remove yolo-det's patch from every script in ``repo``; byte-identical to the original
    when nothing else was edited, keeping the user's edits elsewhere."""
    root, targets, _ = _targets(repo, revert=True)
    changes = [_revert_file(root, path) for path in targets]
    if not dry_run:
        _write_atomically([c for c in changes if c.changed])
    return PatchResult(root, "revert", dry_run, changes)


def is_patched(source: bytes) -> bool:
    """True when ``source`` carries yolo-det's patch (any marked line)."""
    return _is_patched(cst.parse_module(source), source)


# -- discovering targets ---------------------------------------------------------------------

def _targets(repo: os.PathLike, revert: bool = False) -> Tuple[Path, List[Path], set]:
    """(root, candidate scripts, scripts that must patch) for a folder or a single file."""
    given = Path(repo)
    if not given.exists():
        raise PatchError(f"{given}: no such file or directory")
    if given.is_file():
        if given.is_symlink():
            raise PatchError(f"{given} is a symbolic link; patch the file it points to instead")
        path = given.resolve()
        return path.parent, [path], {path}
    root = given.resolve()
    found = sorted(_scan(root), key=lambda p: (len(p.relative_to(root).parts), str(p)))
    if revert:
        return root, [p for p in found if MARKER.encode() in p.read_bytes()], set()
    main = root / "train.py"
    if not found and not main.is_file():
        raise PatchError(f"{root}: no train.py and no other YOLOv5-style training script found; "
                         "pass the repository folder (the one with train.py) or the script itself")
    if main.is_file() and main not in found:
        found.insert(0, main)
    return root, found, {main}


def _scan(root: Path) -> Iterator[Path]:
    """Training-script candidates under ``root``: no symlinks, no hidden or library folders."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = [] if depth >= MAX_DEPTH else sorted(
            d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not (Path(folder) / d).is_symlink())
        for name in files:
            path = Path(folder) / name
            if name.endswith(".py") and not path.is_symlink() and _inside(root, path) and _looks_like_trainer(path):
                yield path


def _inside(root: Path, path: Path) -> bool:
    return os.path.realpath(path).startswith(str(root) + os.sep)


def _looks_like_trainer(path: Path) -> bool:
    try:
        text = path.read_bytes()
    except OSError:
        return False
    return (b"backward(" in text and b"init_seeds" in text and b"ArgumentParser" in text) or MARKER.encode() in text


# -- per-file apply / revert -----------------------------------------------------------------

def _read(root: Path, path: Path) -> Tuple[str, bytes, cst.Module]:
    rel = path.relative_to(root).as_posix()
    if path.is_symlink() or not _inside(root, path):
        raise PatchError(f"{rel} is a symbolic link or lies outside {root}; refusing to touch it", path)
    source = path.read_bytes()
    try:
        return rel, source, cst.parse_module(source)
    except (cst.ParserSyntaxError, UnicodeDecodeError) as exc:
        raise PatchError(f"{rel}: cannot parse it as Python ({exc}); nothing was changed", path) from None


def _apply_file(root: Path, path: Path, required: bool) -> FileChange:
    rel, source, module = _read(root, path)
    patched_before = _is_patched(module, source)
    base = module.visit(_Revert()) if patched_before else module
    plan = _analyse(base, root, path)
    if plan.missing:
        if required:
            raise PatchError(
                f"{rel} does not have the layout of a YOLOv5-family training script yolo-det knows "
                "(anchors missing, see below); nothing was changed. If it is one, please report the "
                "release or fork.", path, plan.found, plan.missing)
        return FileChange(path, rel, source, source, "skipped", [f"missing: {', '.join(plan.missing)}"],
                          module.encoding)
    new = base.visit(_Apply(plan)).bytes
    _check_syntax(rel, source, new, module.encoding)
    if new == source:
        status = "already patched"
    else:
        status = "updated" if patched_before else "patched"
    return FileChange(path, rel, source, new, status, plan.notes, module.encoding)


def _revert_file(root: Path, path: Path) -> FileChange:
    rel, source, module = _read(root, path)
    if not _is_patched(module, source):
        return FileChange(path, rel, source, source, "not patched", encoding=module.encoding)
    new = module.visit(_Revert()).bytes
    _check_syntax(rel, source, new, module.encoding)
    return FileChange(path, rel, source, new, "reverted", encoding=module.encoding)


def _check_syntax(rel: str, before: bytes, after: bytes, encoding: str) -> None:
    """Refuse to write a result this Python cannot parse when it could parse the original."""
    try:
        ast.parse(before.decode(encoding))
    except (SyntaxError, ValueError):
        return
    try:
        ast.parse(after.decode(encoding))
    except SyntaxError as exc:  # pragma: no cover - a codemod bug; keep the user's file safe
        raise PatchError(f"{rel}: the patched file would not compile ({exc}); nothing was changed") from None


def _nothing_to_patch(root: Path, changes: List[FileChange]) -> PatchError:
    lines = [f"{root}: no training script with the YOLOv5 layout was found; nothing was changed"]
    lines += [f"  {c.relpath}: {'; '.join(c.notes)}" for c in changes]
    return PatchError("\n".join(lines), root)


# -- writing ---------------------------------------------------------------------------------

def _replace(src: str, dst: Path) -> None:
    os.replace(src, dst)


def _write_atomically(changes: List[FileChange]) -> None:
    """Write every file to a temp file beside it, then rename all; undo renames on failure."""
    temps: List[Tuple[FileChange, str]] = []
    done: List[FileChange] = []
    try:
        for change in changes:
            fd, tmp = tempfile.mkstemp(prefix=f".{change.path.name}.", suffix=".yolo-det-tmp", dir=change.path.parent)
            temps.append((change, tmp))
            with os.fdopen(fd, "wb") as handle:
                handle.write(change.after)
            os.chmod(tmp, change.path.stat().st_mode & 0o7777)
        for change, tmp in temps:
            _replace(tmp, change.path)
            done.append(change)
    except BaseException:
        for change in done:
            change.path.write_bytes(change.before)
        raise
    finally:
        for _, tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


# -- matchers --------------------------------------------------------------------------------

def _call_named(*names: str) -> m.Call:
    options = [m.Name(n) for n in names] + [m.Attribute(attr=m.Name(n)) for n in names]
    return m.Call(func=m.OneOf(*options))


_INIT_SEEDS = m.SimpleStatementLine(body=[m.Expr(value=_call_named("init_seeds"))])
_BACKWARD = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
    func=m.Attribute(value=_call_named("scale") | m.Name(), attr=m.Name("backward"))))])
_EMA = m.SimpleStatementLine(body=[m.Assign(
    targets=[m.AssignTarget(target=m.Name())],
    value=_call_named("ModelEMA") | m.IfExp(body=_call_named("ModelEMA")))])
_DISABLE_DETERMINISM = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
    func=m.Attribute(value=m.Name("torch"), attr=m.Name("use_deterministic_algorithms")),
    args=[m.Arg(value=m.Name("False")), m.ZeroOrMore()]))])
_HYP_LOAD = m.SimpleStatementLine(body=[m.Assign(
    targets=[m.AssignTarget(target=m.Name("hyp"))],
    value=m.Call(func=m.Attribute(value=m.Name("yaml"), attr=m.Name("safe_load") | m.Name("load"))))])
_PARSER = m.SimpleStatementLine(body=[m.Assign(
    targets=[m.AssignTarget(target=m.Name())], value=_call_named("ArgumentParser"))])
_TRAIN_LOADER = m.SimpleStatementLine(body=[m.Assign(
    targets=[m.AssignTarget(target=m.Tuple())],
    value=m.Call(func=m.Name("create_dataloader"),
                 args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("augment"), value=m.Name("True")), m.ZeroOrMore()]))])
_IMPORT = m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()])


def _marked_line(node: cst.CSTNode) -> bool:
    comment = node.trailing_whitespace.comment if isinstance(node, cst.SimpleStatementLine) else None
    return comment is not None and comment.value.strip() == MARKER


def _marked_with(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.With) or not isinstance(node.body, cst.IndentedBlock):
        return False
    comment = node.body.header.comment
    return comment is not None and comment.value.strip() == MARKER


def _removed_marker(line: cst.EmptyLine) -> bool:
    return line.comment is not None and line.comment.value.startswith(REMOVED)


# -- analysis --------------------------------------------------------------------------------

@dataclass
class _Entry:
    stmt: cst.BaseStatement
    body: Sequence[cst.BaseStatement]
    func: Optional[cst.FunctionDef]


def _descend(node: cst.CSTNode) -> bool:
    """Statements only live in suites: skip simple lines and expressions (most of the tree)."""
    return not isinstance(node, _LEAVES)


_LEAVES = (cst.SimpleStatementLine, cst.BaseExpression, cst.Decorator, cst.Parameters, cst.BaseSmallStatement)


class _Index(cst.CSTVisitor):
    """Every statement with its suite and enclosing function (None: module level)."""

    def __init__(self) -> None:
        self.entries: List[_Entry] = []
        self._funcs: List[cst.FunctionDef] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and _descend(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._funcs.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._funcs.pop()

    def visit_Module(self, node: cst.Module) -> None:
        self._record(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._record(node.body)

    def _record(self, body: Sequence[cst.BaseStatement]) -> None:
        func = self._funcs[-1] if self._funcs else None
        self.entries.extend(_Entry(stmt, body, func) for stmt in body)


@dataclass
class _Plan:
    before: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    after: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    wrap: Dict[int, str] = field(default_factory=dict)
    remove: set = field(default_factory=set)
    append_to: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)  # id(IndentedBlock)
    found: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def check(self, ok: bool, anchor: str) -> bool:
        (self.found if ok else self.missing).append(anchor)
        return ok


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(f"{code}  {MARKER}\n")  # type: ignore[return-value]


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _analyse(module: cst.Module, root: Path, path: Path) -> _Plan:
    """Find the anchors in an unpatched module and plan the insertions (or list what is missing)."""
    index = _Index()
    module.visit(index)
    entries = index.entries
    plan = _Plan()
    train = _train_function(entries, plan)
    parser = _parser_anchor(entries, plan)
    imports = [e for e in entries if e.func is None and e.body is module.body and m.matches(e.stmt, _IMPORT)]
    plan.check(bool(imports), "module imports")
    where = f"{train.name.value}()" if train is not None else "train()"
    in_train = [e for e in entries if e.func is train] if train is not None else []
    params = {p.name.value for p in train.params.params} if train is not None else set()
    if train is not None:
        plan.check("opt" in params, f"parameter 'opt' of {where}")
    ema = next((e for e in in_train if m.matches(e.stmt, _EMA) and _ema_model_arg(e.stmt)), None)
    plan.check(ema is not None, f"EMA (ema = ModelEMA(model)) in {where}")
    if plan.missing:
        return plan
    has_seed = _has_seed_argument(entries, parser)
    _plan_import(plan, imports[-1])
    plan.before.setdefault(id(parser), []).append(_line(f"{ALIAS}.add_arguments({_parser_name(entries, parser)})"))
    _plan_start(plan, in_train, "hyp" in params, has_seed)
    ema_name = ema.stmt.body[0].targets[0].target.value
    plan.after.setdefault(id(ema.stmt), []).append(_line(f"{ALIAS}.track({_ema_model_arg(ema.stmt)}, {ema_name})"))
    _plan_backward(plan, in_train)
    _plan_hyp_loads(plan, entries, train)
    _plan_loader(plan, in_train, module, root, path, has_seed)
    _plan_finish(plan, train)
    if not has_seed:
        plan.notes.append("adds --seed (this release has none)")
    return plan


def _train_function(entries: List[_Entry], plan: _Plan) -> Optional[cst.FunctionDef]:
    seeds = {id(e.func): e.func for e in entries if e.func is not None and m.matches(e.stmt, _INIT_SEEDS)}
    backs = {id(e.func): e.func for e in entries if e.func is not None and m.matches(e.stmt, _BACKWARD)}
    plan.check(bool(seeds), "init_seeds(...) call in a function")
    plan.check(bool(backs), "backward (scaler.scale(loss).backward()) in a function")
    both = [f for key, f in seeds.items() if key in backs]
    if seeds and backs and not both:
        plan.check(False, "init_seeds(...) and backward in the same function")
        return None
    both.sort(key=lambda f: f.name.value != "train")
    return both[0] if both else None


def _parser_anchor(entries: List[_Entry], plan: _Plan) -> Optional[cst.BaseStatement]:
    """The statement that parses the command line, in the suite that built the parser."""
    for entry in entries:
        if not m.matches(entry.stmt, _PARSER):
            continue
        name = entry.stmt.body[0].targets[0].target.value
        parse = m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("parse_args") | m.Name("parse_known_args")))
        later = list(entry.body)[list(entry.body).index(entry.stmt) + 1:]
        found = next((s for s in later if m.findall(s, parse)), None)
        if found is not None:
            plan.check(True, "argument parser (parser = ArgumentParser() ... parser.parse_args())")
            return found
    plan.check(False, "argument parser (parser = ArgumentParser() ... parser.parse_args())")
    return None


def _parser_name(entries: List[_Entry], parse_stmt: cst.BaseStatement) -> str:
    for entry in entries:
        if m.matches(entry.stmt, _PARSER) and parse_stmt in entry.body:
            return entry.stmt.body[0].targets[0].target.value
    return "parser"  # pragma: no cover - _parser_anchor found it in this suite


def _ema_model_arg(stmt: cst.SimpleStatementLine) -> Optional[str]:
    value = stmt.body[0].value
    call = value.body if isinstance(value, cst.IfExp) else value
    if call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].keyword is None:
        return call.args[0].value.value
    return None


_SEED_ARGUMENT = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
    func=m.Attribute(attr=m.Name("add_argument")),
    args=[m.Arg(value=m.SimpleString(value=m.MatchIfTrue(lambda v: v.strip("'\"") == "--seed"))), m.ZeroOrMore()]))])


def _has_seed_argument(entries: List[_Entry], parse_stmt: cst.BaseStatement) -> bool:
    """Whether the parser's suite adds ``--seed`` (YOLOv5 v6.2+)."""
    suite = next((e.body for e in entries if e.stmt is parse_stmt), ())
    return any(m.matches(stmt, _SEED_ARGUMENT) for stmt in suite)


def _plan_import(plan: _Plan, last_import: _Entry) -> None:
    plan.after.setdefault(id(last_import.stmt), []).append(_line(IMPORT))


def _plan_start(plan: _Plan, in_train: List[_Entry], has_hyp: bool, has_seed: bool) -> None:
    seeds = next(e.stmt for e in in_train if m.matches(e.stmt, _INIT_SEEDS))
    call = seeds.body[0].value
    args = ["opt", "hyp"] if has_hyp else ["opt"]
    first = next((a for a in call.args if a.keyword is None or a.keyword.value == "seed"), None)
    if first is not None:
        args.append(f"init_seed={_code(first.value)}")
    if not has_seed:
        args.append("reseed=True")
    plan.after.setdefault(id(seeds), []).append(_line(f"{ALIAS}.start({', '.join(args)})"))


_LOSS_ITEMS = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Tuple(
    elements=[m.Element(value=m.Name("loss")), m.Element(value=m.Name())]))])])


def _plan_backward(plan: _Plan, in_train: List[_Entry]) -> None:
    """Wrap each backward; pass ``loss_items`` (from ``loss, loss_items = compute_loss(...)``) when there is one."""
    items = next((e.stmt.body[0].targets[0].target.elements[1].value.value
                  for e in in_train if m.matches(e.stmt, _LOSS_ITEMS)), "")
    for entry in in_train:
        if not m.matches(entry.stmt, _BACKWARD):
            continue
        plan.wrap[id(entry.stmt)] = f"{ALIAS}.backward({items})"
        body = list(entry.body)
        for earlier in body[:body.index(entry.stmt)]:
            if m.matches(earlier, _DISABLE_DETERMINISM) and _one_line(earlier):
                plan.remove.add(id(earlier))
                plan.notes.append("comments out torch.use_deterministic_algorithms(False) before the backward")


def _one_line(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` fits on one line, so a ``# yolo-det removed:`` comment can hold it."""
    return "\n" not in _code(stmt.with_changes(leading_lines=())).rstrip("\r\n")


def _plan_hyp_loads(plan: _Plan, entries: List[_Entry], train: cst.FunctionDef) -> None:
    """Pop the deterministic* keys after hyp loads outside train(); train() hands its own
    dict to start(), so the run's saved hyp.yaml/opt.yaml keep the keys for --resume."""
    for entry in entries:
        if entry.func is not train and m.matches(entry.stmt, _HYP_LOAD):
            plan.after.setdefault(id(entry.stmt), []).append(_line(f"{ALIAS}.pop_hyp_keys(hyp)"))


def _plan_loader(plan: _Plan, in_train: List[_Entry], module: cst.Module, root: Path, path: Path,
                 has_seed: bool) -> None:
    seeded = _loader_is_seeded(module, root, path)
    if seeded is None:
        seeded = has_seed
    if seeded:
        return
    loader = next((e for e in in_train if m.matches(e.stmt, _TRAIN_LOADER)), None)
    if plan.check(loader is not None, "train loader (loader, dataset = create_dataloader(..., augment=True))"):
        plan.wrap[id(loader.stmt)] = f"{ALIAS}.seeded_loaders(opt)"
        plan.notes.append("seeds the train loader's workers (create_dataloader has no worker_init_fn/generator)")


def _loader_is_seeded(module: cst.Module, root: Path, path: Path) -> Optional[bool]:
    """Whether the imported ``create_dataloader`` passes worker_init_fn/generator (None: unknown)."""
    source = _dataloader_module(module, root, path)
    return None if source is None else _passes_worker_seeding(str(source), source.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _passes_worker_seeding(source: str, mtime_ns: int) -> Optional[bool]:
    try:
        tree = ast.parse(Path(source).read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "create_dataloader":
            return any(isinstance(k, ast.keyword) and k.arg in ("worker_init_fn", "generator")
                       for k in ast.walk(node))
    return None


_LOADER_IMPORT = m.SimpleStatementLine(body=[m.ImportFrom(
    names=[m.ZeroOrMore(), m.ImportAlias(name=m.Name("create_dataloader")), m.ZeroOrMore()])])


def _dataloader_module(module: cst.Module, root: Path, path: Path) -> Optional[Path]:
    """The file ``create_dataloader`` is imported from (top-level ``from X import``), if in the repo."""
    for stmt in module.body:
        if not m.matches(stmt, _LOADER_IMPORT):
            continue
        node = stmt.body[0]
        if node.module is None or node.relative:
            continue
        parts = _code(node.module).split(".")
        for start in range(len(parts)):
            for base in (path.parent, root):
                candidate = base.joinpath(*parts[start:]).with_suffix(".py")
                if candidate.is_file() and not candidate.is_symlink() and _inside(root, candidate):
                    return candidate
    return None


def _plan_finish(plan: _Plan, train: cst.FunctionDef) -> None:
    body = train.body
    if not isinstance(body, cst.IndentedBlock):  # pragma: no cover - train() is never a one-liner
        return
    last = body.body[-1]
    call = _line(f"{ALIAS}.finish(opt)")
    if m.matches(last, m.SimpleStatementLine(body=[m.Return()])):
        plan.before.setdefault(id(last), []).append(call)
    else:
        plan.append_to.setdefault(id(body), []).append(call)


# -- transforms ------------------------------------------------------------------------------

def _wrap(stmt: cst.BaseStatement, expression: str) -> cst.With:
    return cst.With(
        items=[cst.WithItem(item=cst.parse_expression(expression))],
        body=cst.IndentedBlock(
            body=[stmt.with_changes(leading_lines=())],
            header=cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(MARKER)),
        ),
        leading_lines=stmt.leading_lines,
    )


def _removed_line(stmt: cst.BaseStatement) -> cst.EmptyLine:
    code = _code(stmt.with_changes(leading_lines=())).rstrip("\r\n")
    return cst.EmptyLine(indent=True, comment=cst.Comment(REMOVED + code))


class _Apply(cst.CSTTransformer):
    """Carry out a :class:`_Plan` on the module it was made for."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and _descend(node)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._suite(original.body, updated.body) + self.plan.append_to.get(id(original), [])
        return updated.with_changes(body=body)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._suite(original.body, updated.body))

    def _suite(self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]) -> list:
        out: list = []
        pending: List[cst.EmptyLine] = []
        for orig, new in zip(originals, updated):
            key = id(orig)
            if key in self.plan.remove:
                pending += [*new.leading_lines, _removed_line(new)]
                continue
            out += self.plan.before.get(key, [])
            if key in self.plan.wrap:
                new = _wrap(new, self.plan.wrap[key])
            if pending:
                new = new.with_changes(leading_lines=[*pending, *new.leading_lines])
                pending = []
            out.append(new)
            out += self.plan.after.get(key, [])
        return out


class _Revert(cst.CSTTransformer):
    """Undo every marked change: drop marked lines, unwrap marked ``with``, restore removed lines."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and _descend(node)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body, orphans = _revert_suite(updated.body)
        return updated.with_changes(body=body, footer=[*orphans, *updated.footer])

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body, orphans = _revert_suite(updated.body)
        return updated.with_changes(body=body, footer=[*orphans, *updated.footer])


def _revert_suite(body: Sequence[cst.BaseStatement]) -> Tuple[list, List[cst.EmptyLine]]:
    out: list = []
    carry: List[cst.EmptyLine] = []
    for stmt in body:
        if carry:
            stmt = stmt.with_changes(leading_lines=[*carry, *stmt.leading_lines])
            carry = []
        restored, stmt = _restore_removed(stmt)
        out += restored
        if _marked_line(stmt):
            carry = list(stmt.leading_lines)
        elif _marked_with(stmt):
            inner = list(stmt.body.body)
            inner[0] = inner[0].with_changes(leading_lines=[*stmt.leading_lines, *inner[0].leading_lines])
            out += inner
        else:
            out.append(stmt)
    return out, carry


def _restore_removed(stmt: cst.BaseStatement) -> Tuple[list, cst.BaseStatement]:
    """Statements recorded as ``# yolo-det removed:`` lines above ``stmt``, and ``stmt`` without them."""
    restored: list = []
    lines: List[cst.EmptyLine] = []
    for line in stmt.leading_lines:
        if _removed_marker(line):
            code = line.comment.value[len(REMOVED):]
            restored.append(cst.parse_statement(code + "\n").with_changes(leading_lines=lines))
            lines = []
        else:
            lines.append(line)
    if not restored:
        return [], stmt
    return restored, stmt.with_changes(leading_lines=lines)


class _Finder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if _marked_line(node) or _marked_with(node) or (isinstance(node, cst.EmptyLine) and _removed_marker(node)):
            self.found = True
            return False
        return not isinstance(node, (cst.BaseExpression, cst.BaseSmallStatement))


def _is_patched(module: cst.Module, source: bytes) -> bool:
    if MARKER.encode("ascii") not in source:  # Python source encodings are ASCII-compatible
        return False
    finder = _Finder()
    module.visit(finder)
    return finder.found


__all__ = ["PatchError", "PatchResult", "FileChange", "apply_patch", "revert_patch", "is_patched", "MARKER"]
