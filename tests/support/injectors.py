"""A family of kernel-fault injectors for the `verify --locate` tests, written here.

Each injector changes the real output of exactly one op -- every element one ULP up -- as a
nondeterministic kernel would: the op's inputs are untouched, only what it writes differs. It
is a ``TorchDispatchMode`` pushed before any capture (at interpreter start through
``sitecustomize``, or first in-process), so it sits *below* every mode a tool pushes later: the
capture sees "same inputs, different output" for that op and for no other. The injector finds
its op on its own (its own module-path tracking, its own step count), never through yolo-det.

A site is ``PHASE:OPS:WHERE:STEP[:TARGET]``:

* ``PHASE``: ``forward`` (a training forward op), ``backward`` (a backward op of a node made in
  module ``WHERE``: it reads a tensor a ``WHERE`` op used in forward), ``optimizer`` (an op of
  ``optimizer.step()`` that writes parameters), ``collate`` (an op of a DataLoader's collate
  function, in the main process: ``--workers 0``);
* ``OPS``: op packet names, ``|``-separated (``silu|silu_``, ``_foreach_add_|add_``);
* ``WHERE``: a module path by call chain (``model.4.cv3.act``), ``-`` for none;
* ``STEP``: the optimizer step (1-based) during which the op runs (its forward, backward,
  update; for ``collate``, the batch of that step);
* ``TARGET``: ``out`` (default: the op's first tensor output, or the tensors it writes) or the
  name of a written argument (``running_mean``).

What was changed is written as JSON to ``$INJECT_LOG`` (``op``, ``module``, ``step``) so tests
can check a location against it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SITECUSTOMIZE = r'''
import os, sys
if os.environ.get("INJECT") and os.environ.get("YOLO_DET_VERIFY_RUN") == os.environ.get("INJECT_RUN", "2"):
    sys.path.insert(0, os.environ["INJECT_HOME"])
    import injectors
    injectors.install(os.environ["INJECT"], os.environ.get("INJECT_LOG"))
'''


def _one_ulp(t: torch.Tensor) -> None:
    """Every element one ULP up (floats), one up (integers, wrapping) or negated (bool)."""
    if not t.numel():
        return
    if t.is_floating_point():
        t.copy_(torch.nextafter(t, torch.full_like(t, float("inf"))))
    elif t.dtype == torch.bool:
        t.logical_not_()
    else:
        t.add_(1)


def _tensors(obj: Any) -> List[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


class Injector(TorchDispatchMode):
    """Changes one op's output at one site (see the module docstring); ``hit`` says what it changed."""

    def __init__(self, site: str, log: Optional[str] = None) -> None:
        super().__init__()
        parts = site.split(":")
        self.phase, ops, self.where, step = parts[:4]
        self.ops = set(ops.split("|"))
        self.step = int(step)
        self.target = parts[4] if len(parts) > 4 else "out"
        self.log = log
        self.steps = 0  # optimizer steps completed
        self.in_optimizer = False
        self.in_collate = False
        self.params: set = set()
        self.saved: set = set()  # data pointers of tensors WHERE's forward ops used (backward sites)
        self.stack: List[tuple] = []  # (module, path) by call chain
        self.hit: Optional[Dict[str, Any]] = None
        self._handles: List[Any] = []

    # -- bookkeeping: steps, module paths, collate ---------------------------------------------
    def start(self) -> "Injector":
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles = [register_module_forward_pre_hook(self._enter), register_module_forward_hook(self._leave),
                         register_optimizer_step_pre_hook(self._pre_step),
                         register_optimizer_step_post_hook(self._post_step)]
        if self.phase == "collate":
            from torch.utils.data._utils import fetch

            original = fetch._MapDatasetFetcher.fetch
            injector = self

            def fetch_batch(fetcher, index):
                injector.in_collate = True
                try:
                    return original(fetcher, index)
                finally:
                    injector.in_collate = False

            fetch._MapDatasetFetcher.fetch = fetch_batch
            self._unpatch = lambda: setattr(fetch._MapDatasetFetcher, "fetch", original)
        self.__enter__()
        return self

    def stop(self) -> None:
        self.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        unpatch = getattr(self, "_unpatch", None)
        if unpatch is not None:
            unpatch()

    def _enter(self, module, args) -> None:
        path = ""
        if self.stack:
            parent, parent_path = self.stack[-1]
            name = next((n for n, m in parent.named_children() if m is module), None)
            if name is None:
                name = next((n for n, m in parent.named_modules(remove_duplicate=False) if m is module and n), None)
            name = name if name is not None else type(module).__name__
            path = f"{parent_path}.{name}" if parent_path else name
        self.stack.append((module, path))

    def _leave(self, module, args, output) -> None:
        if self.stack:
            self.stack.pop()

    def _pre_step(self, optimizer, args, kwargs) -> None:
        self.in_optimizer = True
        self.params = {p.data_ptr() for group in optimizer.param_groups for p in group["params"]}

    def _post_step(self, optimizer, args, kwargs) -> None:
        self.in_optimizer = False
        self.steps += 1

    # -- the op ----------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.hit is not None or self.steps != self.step - 1:
            return out
        packet = func.overloadpacket.__name__
        backward = torch._C._current_graph_task_id() != -1
        path = self.stack[-1][1] if self.stack else None
        changed: List[torch.Tensor] = []
        if self.phase == "forward" and not backward and torch.is_grad_enabled() and not self.in_optimizer:
            if path == self.where and packet in self.ops:
                changed = self._targets(func, args, kwargs, out)
        elif self.phase == "backward":
            if not backward and torch.is_grad_enabled() and path == self.where:
                self.saved.update(t.data_ptr() for t in _tensors(args) + _tensors(out))
            elif backward and packet in self.ops and any(t.data_ptr() in self.saved for t in _tensors(args)):
                changed = self._targets(func, args, kwargs, out)
        elif self.phase == "optimizer" and self.in_optimizer and packet in self.ops:
            written = self._written(func, args, kwargs)
            if any(t.data_ptr() in self.params for t in written):
                changed = [t for t in written if t.data_ptr() in self.params]
        elif self.phase == "collate" and self.in_collate and packet in self.ops:
            changed = self._targets(func, args, kwargs, out)
        if changed:
            for t in changed:
                _one_ulp(t)
            self.hit = {"op": str(func), "module": path if self.phase in ("forward", "backward") else None,
                        "step": self.step, "phase": self.phase}
            if self.phase == "backward":
                self.hit["module"] = self.where
            if self.log:
                with open(self.log, "w") as f:
                    json.dump(self.hit, f)
        return out

    def _written(self, func, args, kwargs) -> List[torch.Tensor]:
        written = []
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                value = kwargs.get(a.name, args[i] if i < len(args) else None)
                written.extend(_tensors(value))
        return written

    def _targets(self, func, args, kwargs, out) -> List[torch.Tensor]:
        if self.target != "out":
            names = [a.name for a in func._schema.arguments]
            i = names.index(self.target)
            value = kwargs.get(self.target, args[i] if i < len(args) else None)
            return _tensors(value)
        outputs = _tensors(out)
        return outputs[:1] if outputs else self._written(func, args, kwargs)


def install(site: str, log: Optional[str] = None) -> Injector:
    """Start an injector for ``site`` in this process (from ``sitecustomize``, at interpreter start)."""
    return Injector(site, log).start()


def injector_env(env: Dict[str, str], home: os.PathLike, site: str, run: int = 2,
                 log: Optional[os.PathLike] = None) -> Dict[str, str]:
    """``env`` with the injector for ``site`` in run ``run`` of a verify (``sitecustomize`` in ``home``)."""
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    # a copy beside it: the child's path gets ``home`` alone, not tests/support's other modules as top-level names
    shutil.copyfile(os.path.abspath(__file__), os.path.join(home, "injectors.py"))
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join([str(home), env.get("PYTHONPATH", "")])
    out.update(INJECT=site, INJECT_RUN=str(run), INJECT_HOME=str(home))
    if log is not None:
        out["INJECT_LOG"] = str(log)
    return out
