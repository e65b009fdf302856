"""Finding the anchors of a YOLOv5-family train.py by tree shape, and planning what to insert there."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import libcst as cst
import libcst.matchers as m

from .files import inside
from .markers import ALIAS, IMPORT, MARKER


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
_FITNESS = m.SimpleStatementLine(body=[m.Assign(  # fi = fitness(np.array(results).reshape(1, -1))
    targets=[m.AssignTarget(target=m.Name())],
    value=m.Call(func=m.Name("fitness"), args=[m.Arg(value=m.MatchIfTrue(
        lambda node: bool(m.findall(node, m.Name("results")))))]))])


# -- analysis --------------------------------------------------------------------------------

@dataclass
class _Entry:
    stmt: cst.BaseStatement
    body: Sequence[cst.BaseStatement]
    func: Optional[cst.FunctionDef]


def descend(node: cst.CSTNode) -> bool:
    """Statements only live in suites: skip simple lines and expressions (most of the tree)."""
    return not isinstance(node, _LEAVES)


_LEAVES = (cst.SimpleStatementLine, cst.BaseExpression, cst.Decorator, cst.Parameters, cst.BaseSmallStatement)


class _Index(cst.CSTVisitor):
    """Every statement with its suite and enclosing function (None: module level)."""

    def __init__(self) -> None:
        self.entries: List[_Entry] = []
        self._funcs: List[cst.FunctionDef] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and descend(node)

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
class Plan:
    before: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    after: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    wrap: Dict[int, str] = field(default_factory=dict)
    loop: Dict[int, tuple] = field(default_factory=dict)  # id(first) -> (id(last), the marked for's header)
    guard: Dict[int, str] = field(default_factory=dict)  # id(If) -> the call its test is passed through
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


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def analyse(module: cst.Module, root: Path, path: Path) -> Plan:
    """Find the anchors in an unpatched module and plan the insertions (or list what is missing)."""
    index = _Index()
    module.visit(index)
    entries = index.entries
    plan = Plan()
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
    _plan_validation(plan, in_train)
    _plan_resume(plan, in_train)
    _plan_world(plan, entries, in_train, train)
    _plan_finish(plan, train)
    if not has_seed:
        plan.notes.append("adds --seed (this release has none)")
    return plan


def _train_function(entries: List[_Entry], plan: Plan) -> Optional[cst.FunctionDef]:
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


def _parser_anchor(entries: List[_Entry], plan: Plan) -> Optional[cst.BaseStatement]:
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


def _plan_import(plan: Plan, last_import: _Entry) -> None:
    plan.after.setdefault(id(last_import.stmt), []).append(_line(IMPORT))


def _plan_start(plan: Plan, in_train: List[_Entry], has_hyp: bool, has_seed: bool) -> None:
    seeds = next(e.stmt for e in in_train if m.matches(e.stmt, _INIT_SEEDS))
    call = seeds.body[0].value
    args = ["opt", "hyp"] if has_hyp else ["opt"]
    first = next((a for a in call.args if a.keyword is None or a.keyword.value == "seed"), None)
    if first is not None:
        args.append(f"init_seed={code_of(first.value)}")
    if not has_seed:
        args.append("reseed=True")
    plan.after.setdefault(id(seeds), []).append(_line(f"{ALIAS}.start({', '.join(args)})"))


_LOSS_ITEMS = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Tuple(
    elements=[m.Element(value=m.Name("loss")), m.Element(value=m.Name())]))])])


def _plan_backward(plan: Plan, in_train: List[_Entry]) -> None:
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
    return "\n" not in code_of(stmt.with_changes(leading_lines=())).rstrip("\r\n")


def _plan_hyp_loads(plan: Plan, entries: List[_Entry], train: cst.FunctionDef) -> None:
    """Pop the deterministic* keys after hyp loads outside train(); train() hands its own
    dict to start(), so the run's saved hyp.yaml/opt.yaml keep the keys for --resume."""
    for entry in entries:
        if entry.func is not train and m.matches(entry.stmt, _HYP_LOAD):
            plan.after.setdefault(id(entry.stmt), []).append(_line(f"{ALIAS}.pop_hyp_keys(hyp)"))


def _plan_loader(plan: Plan, in_train: List[_Entry], module: cst.Module, root: Path, path: Path,
                 has_seed: bool) -> None:
    """Wrap the train loader: per-sample streams in every release, worker seeding where it has none."""
    seeded = _loader_is_seeded(module, root, path)
    if seeded is None:
        seeded = has_seed
    loader = next((e for e in in_train if m.matches(e.stmt, _TRAIN_LOADER)), None)
    if seeded and loader is None:
        return  # the loader is seeded; per-sample streams need the anchor (not found: no exact resume)
    if plan.check(loader is not None, "train loader (loader, dataset = create_dataloader(..., augment=True))"):
        before = in_train[:in_train.index(loader)]
        args = "opt, start_epoch" if any(_assigns(e.stmt, "start_epoch") for e in before) else "opt"
        plan.wrap[id(loader.stmt)] = f"{ALIAS}.seeded_loaders({args})"
        if not seeded:
            plan.notes.append("seeds the train loader's workers (create_dataloader has no worker_init_fn/generator)")


def _assigns(stmt: cst.BaseStatement, name: str) -> bool:
    """Whether the simple statement ``stmt`` assigns ``name`` (also inside a tuple target)."""
    target = m.AssignTarget(target=m.Name(name) | m.Tuple(elements=[
        m.ZeroOrMore(), m.Element(value=m.Name(name)), m.ZeroOrMore()]))
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.ZeroOrMore(), target, m.ZeroOrMore()])]))


_EPOCH_LOOP = m.For(target=m.Name("epoch"), iter=m.Call(func=m.Name("range")))
_SAVE_LAST = m.SimpleStatementLine(body=[m.Expr(value=m.Call(
    func=m.Attribute(value=m.Name("torch"), attr=m.Name("save")),
    args=[m.Arg(), m.Arg(value=m.Name("last"))]))])


_SAVE_BEST = m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("save")), args=[m.Arg(), m.Arg(value=m.Name("best"))])


def _plan_resume(plan: Plan, in_train: List[_Entry]) -> None:
    """Exact resume where the release has the shapes for it: the epoch loop and ``torch.save(ckpt, last)``."""
    loop = next((e for e in in_train if m.matches(e.stmt, _EPOCH_LOOP)), None)
    save = next((e for e in in_train if m.matches(e.stmt, _SAVE_LAST)), None)
    if loop is None or save is None or not isinstance(loop.stmt.body, cst.IndentedBlock):
        return
    call = loop.stmt.iter
    start = code_of(call.args[0].value) if len(call.args) >= 2 else "0"
    before = in_train[:in_train.index(loop)]
    names = [n if any(_assigns(e.stmt, n) for e in before) else "None" for n in ("optimizer", "scaler")]
    call = f"{ALIAS}.resume_point({start}, {', '.join(names)}"
    # kill-safe save: the release writes last.pt.partial, save_state() writes the sidecar and then renames it
    plan.before.setdefault(id(save.stmt), []).append(_line(f"last = {ALIAS}.stage(last)"))
    if any(_assigns(e.stmt, "last_opt_step") for e in before):  # v5.1+: the step cadence of accumulation
        plan.before.setdefault(id(loop.stmt), []).append(_line(f"last_opt_step = {call}, last_opt_step)"))
        plan.after.setdefault(id(save.stmt), []).append(_line(f"last = {ALIAS}.save_state(last, epoch, last_opt_step)"))
    else:
        plan.before.setdefault(id(loop.stmt), []).append(_line(f"{call})"))
        plan.after.setdefault(id(save.stmt), []).append(_line(f"last = {ALIAS}.save_state(last, epoch)"))
    plan.append_to.setdefault(id(loop.stmt.body), []).append(_line(f"{ALIAS}.epoch_end(epoch)"))
    plan.after.setdefault(id(loop.stmt), []).append(_line(f"{ALIAS}.saves_done()"))  # before the release strips last.pt
    body = list(save.body)
    following = body[body.index(save.stmt) + 1] if body.index(save.stmt) + 1 < len(body) else None
    if following is not None and m.matches(following, m.If()) and m.findall(following, _SAVE_BEST):
        # best.pt written under another name and renamed: a kill while it is written leaves the previous best.pt
        plan.before.setdefault(id(following), []).append(_line(f"best = {ALIAS}.stage(best)"))
        plan.after.setdefault(id(following), []).append(_line(f"best = {ALIAS}.placed(best)"))
    plan.notes.append("saves resume state beside last.pt for an exact --resume")


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
        parts = code_of(node.module).split(".")
        for start in range(len(parts)):
            for base in (path.parent, root):
                candidate = base.joinpath(*parts[start:]).with_suffix(".py")
                if candidate.is_file() and not candidate.is_symlink() and inside(root, candidate):
                    return candidate
    return None


def _plan_validation(plan: Plan, in_train: List[_Entry]) -> None:
    """After each epoch's ``fi = fitness(...results...)``: the validation's metrics for the fingerprint log.

    Optional: scripts without it (classify/train.py) just get no validation records.
    """
    for entry in in_train:
        if m.matches(entry.stmt, _FITNESS):
            fi = entry.stmt.body[0].targets[0].target.value
            plan.after.setdefault(id(entry.stmt), []).append(
                _line(f"{ALIAS}.validated(epoch, results, {fi}, best_fitness)"))
            return


def _plan_finish(plan: Plan, train: cst.FunctionDef) -> None:
    body = train.body
    if not isinstance(body, cst.IndentedBlock):  # pragma: no cover - train() is never a one-liner
        return
    last = body.body[-1]
    call = _line(f"{ALIAS}.finish(opt)")
    if m.matches(last, m.SimpleStatementLine(body=[m.Return()])):
        plan.before.setdefault(id(last), []).append(call)
    else:
        plan.append_to.setdefault(id(body), []).append(call)


# -- DDP on CPU and the virtual world size (optional: a tree without these shapes refuses V at run time) ---

_INIT_GROUP = m.Call(func=m.Attribute(attr=m.Name("init_process_group")) | m.Name("init_process_group"))
_DDP_WRAP = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name("model"))],
                                                 value=_call_named("smart_DDP", "DDP", "DistributedDataParallel"))])
_MODEL_CALL = m.Assign(targets=[m.AssignTarget(target=m.Name())],
                       value=m.Call(func=m.Name("model"), args=[m.Arg(value=m.Name(), keyword=None)]))
_MULTI_SCALE = m.If(test=m.Attribute(attr=m.Name("multi_scale")))
_BATCH_LOOP = m.For(target=m.Tuple(elements=[m.Element(value=m.Name()), m.Element(value=m.Tuple(
    elements=[m.Element(value=m.Name()), m.Element(value=m.Name()), m.ZeroOrMore()]))]))


def _bare_header(block: cst.BaseSuite) -> bool:
    """A block header without a comment (the marker goes there and revert restores it to this)."""
    return isinstance(block, cst.IndentedBlock) and block.header.comment is None and \
        block.header.whitespace.value == ""


def _plan_world(plan: Plan, entries: List[_Entry], in_train: List[_Entry], train: cst.FunctionDef) -> None:
    """DDP on CPU (gloo) and the virtual micro-batch loop, where the tree has the shapes for them.

    The launch block (``if LOCAL_RANK != -1: ... init_process_group(...)`` outside train()) gets its test
    passed through ``ddp_launch`` (a CPU rank joins gloo there and skips the CUDA block); the model's DDP
    wrap is followed by ``parallel(model)``; the batch's forward ... backward statements run inside
    ``for imgs, targets in micro_batches(imgs, targets):`` (one pass without a virtual world size)."""
    launch = next((e for e in entries if e.func is not train and isinstance(e.stmt, cst.If)
                   and _bare_header(e.stmt.body) and m.findall(e.stmt.body, _INIT_GROUP)
                   and _only_sets_the_device(e.stmt.body)), None)
    wrap = next((e for e in in_train if isinstance(e.stmt, cst.If)
                 and any(m.matches(s, _DDP_WRAP) for s in getattr(e.stmt.body, "body", ()))), None)
    loop = _micro_batch_loop(in_train)
    if launch is None or wrap is None or loop is None:
        return
    plan.guard[id(launch.stmt)] = f"{ALIAS}.ddp_launch"
    plan.after.setdefault(id(wrap.stmt), []).append(_line(f"model = {ALIAS}.parallel(model)"))
    first, last, header, loss = loop
    plan.loop[id(first)] = (id(last), header)
    scale = next((e.stmt for e in in_train if m.matches(e.stmt, _MULTI_SCALE) and e.body is not None
                  and any(_assigns(s, "ni") for s in e.body)), None)
    if scale is not None:  # the size of a step drawn from (seed, step) under V, not from the process's random
        plan.wrap[id(scale)] = f"{ALIAS}.multi_scale_stream(ni)"
    plan.before.setdefault(id(last), []).append(_line(f"{loss} = {ALIAS}.world_loss({loss})"))
    plan.notes.append("DDP on CPU (gloo) and --virtual-world-size (the batch as virtual micro-batches)")


def _only_sets_the_device(block: cst.BaseSuite) -> bool:
    """A launch block a CPU rank may skip: it checks, picks the GPU and joins the group, assigning local names
    (``device``, a message) but no attribute or item (v5.0's block divides ``opt.batch_size`` by the world size:
    skipping it would change the run)."""
    targets = m.findall(block, m.AssignTarget() | m.AugAssign() | m.AnnAssign())
    return all(isinstance(t.target, cst.Name) for t in targets)


def _plain_loss_call(stmt: cst.SimpleStatementLine) -> bool:
    """``loss, items = compute_loss(pred, targets...)``: the loss of the predictions and the targets alone (a
    segment tree's ``masks=`` or yolov7's images argument are per-image tensors the loop does not split)."""
    call = stmt.body[0].value
    return isinstance(call, cst.Call) and len(call.args) == 2 and all(a.keyword is None for a in call.args)


def _micro_batch_loop(in_train: List[_Entry]) -> Optional[tuple]:
    """(first, last statement, the for header, the loss name) of the batch's forward ... backward, or None.

    The forward is the statement holding ``pred = model(imgs)`` before the backward, in the backward's suite,
    inside ``for i, (imgs, targets, ...) in ...:``; the loss is the backward's ``loss, items = ...`` target."""
    backward = next((e for e in in_train if m.matches(e.stmt, _BACKWARD)), None)
    if backward is None:
        return None
    body = list(backward.body)
    end = body.index(backward.stmt)
    first = next((s for s in body[:end] if m.findall(s, _MODEL_CALL)), None)
    loss_line = next((e.stmt for e in in_train if m.matches(e.stmt, _LOSS_ITEMS)), None)
    if first is None or loss_line is None or not _plain_loss_call(loss_line):
        return None
    imgs = m.findall(first, _MODEL_CALL)[0].value.args[0].value.value
    batch_loops = [e.stmt for e in in_train if m.matches(e.stmt, _BATCH_LOOP)
                   and e.stmt.target.elements[1].value.elements[0].value.value == imgs
                   and m.findall(e.stmt.body, m.Name(imgs)) and backward.stmt in m.findall(e.stmt.body, _BACKWARD)]
    if not batch_loops:
        return None
    targets = batch_loops[0].target.elements[1].value.elements[1].value.value
    loss = loss_line.body[0].targets[0].target.elements[0].value.value
    step = ", ni" if any(_assigns(stmt, "ni") for stmt in body[:end]) else ""  # the batch's index in the run
    header = f"{imgs}, {targets} in {ALIAS}.micro_batches({imgs}, {targets}{step})"
    return first, backward.stmt, header, loss
