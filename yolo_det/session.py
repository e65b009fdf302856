"""The run session: one call at start-up (:func:`configure`) that resolves the mode, seeds,
applies the flags and starts recording alerts; a backward context; ``determinism.json``.

Training scripts (or yolo-det's patch of them) call :func:`configure` once, wrap each
backward pass in ``session.backward()`` and call ``session.finish(save_dir)`` at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import torch

from . import __version__
from .core import active, atomic, determinism, environment, portable, report as report_mod, seeding
from .core.mode import ConfigError, Settings, resolve
from .record.run_folder import REPORT_NAME

SCHEMA_VERSION = 1


class DeterminismSetupError(RuntimeError):
    """Strict determinism cannot be guaranteed in this process; the message says what to do."""


def _effective(mode: str, allow) -> tuple:
    """(flag mode for PyTorch, escalate): strict with an allow-list runs warn-only and escalates."""
    if mode == "strict" and allow:
        return "warn", True
    return mode, False


class Session:
    """Determinism state of one training process: settings, seeds, flags, alerts, steps."""

    def __init__(self, settings: Settings, seed: Optional[int], rank: int, repo: Optional[os.PathLike]) -> None:
        self.settings = settings
        self.seed = seed
        self.rank = rank
        self.repo = repo
        self.report = report_mod.ViolationReport()
        self.opaque = report_mod.OpaqueReport()
        self.replacements: List[Dict[str, Any]] = []
        self.extra: Dict[str, Any] = {}
        self.optimizer_steps = 0
        self.backward_passes = 0
        self.flags_before = determinism.snapshot()
        self.cublas: Dict[str, object] = {}
        self.portable: Optional[Dict[str, Any]] = None  # what portable pinned and checked (core/portable.py)
        flag_mode, escalate = _effective(settings.mode, settings.allow)
        self._global_escalate = escalate
        self._recorder = report_mod.Recorder(self.report, settings.allow, escalate)
        self._step_hook = None
        self._compile_guard: Any = None
        self._hooks: List[Any] = []
        self._finished = False
        self._tracked = False  # the evidence went to the trackers (once per run)
        self.flags_applied = determinism.flags_for(flag_mode, fill_uninitialized_memory=settings.fill_uninitialized_memory)

    # -- lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        self.cublas = environment.prepare_cublas()
        if not self.cublas["ok"] and self.settings.mode != "off":
            message = environment.CUBLAS_LATE_MESSAGE.format(torch=torch.__version__)
            if self.settings.mode == "strict":
                raise DeterminismSetupError(message)
            self.report.note(message)
        if self.settings.portable is not None:
            self._pin_portable(self.settings.portable)
        determinism.restore(self.flags_applied)
        self._recorder.start()
        if self.settings.mode != "off":
            from .strict.compiled import Guard

            # torch.compile: Inductor's deterministic settings, refusals, and the op scan of lowered graphs
            self._compile_guard = Guard(self.settings.mode, self.settings.allow, self._compiled_op).install()
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # torch < 2.0: steps are counted as backward passes
            pass
        else:
            self._step_hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        self.report.step = self.step

    def _pin_portable(self, threads: int) -> None:
        """Check every portable pin and set the thread count; a pin not in force refuses under strict, else is
        said on stderr and noted in the report."""
        portable.pin_threads(threads)
        self.portable = portable.check(threads)
        problems = self.portable["problems"]
        if not problems:
            return
        message = portable.message(problems, threads)
        if self.settings.mode == "strict":
            raise DeterminismSetupError(message)
        self.report.note(message)
        print(f"yolo-det: warning: {message}", file=sys.stderr, flush=True)

    def _keep_threads(self) -> None:
        """Portable: the intra-op thread count back to its pin where the training changed it (Ultralytics'
        ``select_device`` sets its own on CPU), noted once."""
        if self.portable is None:
            return
        before = portable.pin_threads(self.portable["threads"])
        if before is not None:
            self.report.note(f"the training set the intra-op thread count to {before}; portable set it back to "
                             f"{self.portable['threads']}")

    def finish(self, save_dir: Optional[os.PathLike] = None, *, restore_flags: bool = False,
               echo: Callable[[str], None] = print, closed_by: str = "finish") -> Optional[Path]:
        """Stop recording; on the main rank print the report and write ``determinism.json``.

        Returns the file written (None on other ranks or without ``save_dir``). With
        ``restore_flags`` the global flags go back to what they were before :func:`configure`;
        ``closed_by`` says in the log's final line how the run ended. Safe to call twice.
        """
        if not self._finished:
            self._finished = True
            from .record import fingerprint

            fingerprint.finish_session(self, save_dir, closed_by)  # the log's last step and final state
            self._recorder.stop()
            if self._compile_guard is not None:
                self._compile_guard.remove()
            if self._step_hook is not None:
                self._step_hook.remove()
            for hook in self._hooks:
                hook.remove()
            if restore_flags:
                determinism.restore(self.flags_before)
            if active.current() is self:
                active.set_current(None)
        if not self.is_main:
            return None
        echo(self.report.summary())
        if self.opaque:
            echo(self.opaque.summary())
        if save_dir is None:
            return None
        path = self.save(save_dir)
        self._log_to_trackers(save_dir)
        return path

    def _log_to_trackers(self, save_dir: os.PathLike) -> None:
        """Once, for a strict/warn run that trained: its evidence to the experiment trackers in use
        (docs/trackers.md); a tracker that fails is one warning line on stderr, never an error."""
        if self._tracked or self.settings.mode == "off" or self.step == 1:
            return
        self._tracked = True
        from . import trackers

        trackers.log_run(save_dir, echo=lambda line: print(line, file=sys.stderr, flush=True))

    # -- steps -----------------------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        return self.rank in (-1, 0)

    @property
    def step(self) -> int:
        """The current step, from 1: optimizer steps when they can be counted, else backward passes."""
        count = self.optimizer_steps if self._step_hook is not None else self.backward_passes
        return count + 1

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.optimizer_steps == 0 and "optimizer" not in (self.extra.get("run_facts") or {}):
            from .core import run_facts

            run_facts.record_optimizer(self, optimizer)  # the optimizer the run actually steps
        self.optimizer_steps += 1
        self.report.step = self.step

    # -- backward --------------------------------------------------------------------------
    @contextlib.contextmanager
    def backward(self, loss: Any = None) -> Iterator["Session"]:
        """Run a backward pass under ``deterministic_backward`` with every alert recorded.

        Restores the global flags afterwards, also on exceptions. A strict-mode error is
        re-raised as :class:`NondeterministicOpError` naming the op, where it may come from
        in the model, and the options. ``loss``: optional loss components (a tensor, or a
        list/dict of them) for the fingerprint log when fingerprinting is on.
        """
        if loss is not None:
            from .record import fingerprint

            fingerprint.record_loss(loss)
        flag_mode, escalate = _effective(self.settings.backward_mode, self.settings.allow)
        self.report.step = self.step
        self._keep_threads()
        report_mod.refresh()
        self._recorder.escalate = escalate
        try:
            with determinism.temporary_determinism(
                flag_mode, fill_uninitialized_memory=self.settings.fill_uninitialized_memory
            ):
                yield self
        except RuntimeError as exc:
            inner = explained_error(exc)  # a backward graph compiled lazily here: the alert under Inductor's wrapper
            if inner is not exc:
                raise inner from exc
            op = report_mod._record_raise(exc) or report_mod.parse_alert(str(exc))
            if op is not None and not isinstance(exc, NondeterministicOpError):
                raise NondeterministicOpError(explain(op, self)) from exc
            raise
        finally:
            self._recorder.escalate = self._global_escalate
            self.backward_passes += 1
            self.report.step = self.step

    # -- models ----------------------------------------------------------------------------
    def track(self, model: torch.nn.Module, ema: Any = None) -> torch.nn.Module:
        """Register the training model (and its EMA, if any) with the session; return the model.

        Under strict with ``deterministic_ops: replace`` the model's modules whose CUDA
        backward is nondeterministic are swapped in place for exact replacements (recorded
        in the report). Fingerprints and error messages use the registered model.
        """
        self.extra["model"] = model
        self._keep_threads()
        if ema is not None:
            self.extra["ema"] = ema
        if self.settings.mode == "strict" and self.settings.ops == "replace":
            from .strict.swap import make_deterministic

            make_deterministic(model, record=self.replacements)
        if self.settings.mode != "off":
            from .strict.opaque import on_first_forward

            self._check_opaque(model)
            # Functions the source scan could not resolve: from the first training forward's graph
            self._hooks.append(on_first_forward(model, lambda found: self._finished or self._decide_opaque(found)))
        return model

    def _check_opaque(self, model: torch.nn.Module) -> None:
        """Find the kernels PyTorch's switch cannot see; under strict replace them (``replace``)
        or refuse before training (or at the first forward, for Functions found only in its graph)
        unless allowed; under warn report them."""
        from .strict.opaque import scan_model

        findings = scan_model(model)
        if not findings:
            return
        if self.settings.mode == "strict" and self.settings.ops == "replace":
            from .strict.swap import swap_opaque

            left = swap_opaque(model, findings, record=self.replacements)
            for finding in findings:
                if finding not in left:
                    self.opaque.add(finding.to_dict(), "replaced")
            findings = left
        self._decide_opaque(findings)

    def _decide_opaque(self, findings) -> None:
        """Report each finding not yet reported; under strict refuse those not allowed."""
        from .strict.opaque import action_for, refusal_message

        refused = []
        for finding in findings:
            if finding.op in self.opaque.records:
                continue
            action = action_for(finding, self.settings.mode == "strict", self.settings.allow)
            self.opaque.add(finding.to_dict(), action)
            if action == "refused":
                refused.append(finding)
        if refused:
            raise OpaqueKernelError(refusal_message(refused))

    # -- torch.compile ---------------------------------------------------------------------
    def _compiled_op(self, entry: Dict[str, Any]) -> None:
        """A table op found in a graph Inductor lowered: reported like an eager alert (under its CUDA kernel
        name); under strict, unless allowed, refused with :class:`NondeterministicOpError`."""
        op = entry.get("cuda_kernel") or entry["op"]
        allowed = bool({op, entry["op"]} & set(self.settings.allow))
        action = "allowed" if allowed else ("raised" if self.settings.mode == "strict" else "warned")
        entry["action"] = action
        self.report.add(op, action)
        if action == "raised":
            where = f" It comes from: {', '.join(entry['modules'][:5])}." if entry.get("modules") else ""
            error = NondeterministicOpError(
                f"{report_mod.strict_message(op)}\n"
                f"yolo-det: {entry['op']} is in {entry['graph']} that torch.compile lowered; it has no "
                f"deterministic CUDA implementation in torch {torch.__version__}.{where}\n"
                "Options: (1) compile without this op: yolo_det.make_deterministic(model) before torch.compile, "
                "automatic in strict with 'deterministic_ops: replace' where a replacement exists; (2) allow it, "
                f"reported but not raised: 'deterministic_allow: [{op}]' or YOLO_DET_ALLOW={op}; (3) train "
                "without compile; (4) run with --deterministic warn to report it instead of failing."
            )
            error._yolo_det_recorded = True  # type: ignore[attr-defined]  (counted above, once)
            raise error

    @property
    def compile_record(self) -> Optional[Dict[str, Any]]:
        """The report's ``compile`` section (None while nothing compiled in this session)."""
        guard = self._compile_guard
        if guard is None or not (guard.record.get("calls") or guard.record.get("graphs") or guard.record.get("refused")):
            return None
        return guard.describe()

    def compiled_graphs(self) -> List[Dict[str, Any]]:
        """Each graph Inductor lowered in this process, described (op, module, source line): what ``locate``
        names inside a compiled graph. Empty without compile (or under ``off``)."""
        guard = self._compile_guard
        return list(guard.graphs) if guard is not None else []

    # -- report ----------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """The contents of ``determinism.json``."""
        return {
            "schema": SCHEMA_VERSION,
            "yolo_det": __version__,
            "mode": self.settings.mode,
            "mode_source": self.settings.source,
            "settings": self.settings.to_dict(),
            "seed": self.seed,
            "rank": self.rank,
            "steps": self.step - 1,
            "flags_applied": self.flags_applied.to_dict(),
            "flags_now": determinism.snapshot().to_dict(),
            "cublas_workspace_config": self.cublas,
            **({"portable": self.portable} if self.portable is not None else {}),
            "violations": self.report.to_dict(),
            "replacements": list(self.replacements),
            "opaque_kernels": self.opaque.to_dict(),
            "environment": environment.manifest(self.repo),
            **{k: v for k, v in self.extra.items() if k not in ("model", "ema")},
            **({"compile": self.compile_record} if self.compile_record is not None else {}),
        }

    def save(self, save_dir: os.PathLike) -> Path:
        """Write ``determinism.json`` into ``save_dir`` (created if needed) atomically."""
        return atomic.write_text(Path(save_dir) / REPORT_NAME,
                                 json.dumps(self.to_dict(), indent=2, default=str) + "\n")


class NondeterministicOpError(RuntimeError):
    """PyTorch's strict-mode error, with the op, its likely modules and the options added."""


def explain(op: str, session: Optional["Session"] = None) -> str:
    """PyTorch's message for ``op`` plus where it comes from and how to get past it."""
    where = ""
    model = session.extra.get("model") if session is not None else None
    if model is not None:
        from .strict.audit import modules_for_op

        modules = modules_for_op(model, op)
        if modules:
            where = f" It comes from: {', '.join(modules[:5])}."
    return (
        f"{report_mod.strict_message(op)}\n"
        f"yolo-det: {op} has no deterministic CUDA implementation in torch {torch.__version__}.{where}\n"
        "Options: (1) use yolo-det's deterministic replacements (yolo_det.make_deterministic(model), "
        "automatic in strict with 'deterministic_ops: replace'); (2) allow this op, reported but not "
        f"raised: 'deterministic_allow: [{op}]' in the hyp YAML or YOLO_DET_ALLOW={op}; "
        "(3) run with --deterministic warn to report nondeterministic ops instead of failing."
    )


def explained_error(exc: BaseException) -> BaseException:
    """The yolo-det error (a refused op or compile) under Inductor's ``InductorError`` / Dynamo's
    ``BackendCompilerFailed``; ``exc`` itself when it wraps none."""
    from .strict.compiled import CompileRefused, explained

    inner = explained(exc)
    return inner if isinstance(inner, (NondeterministicOpError, CompileRefused)) else exc


class OpaqueKernelError(DeterminismSetupError):
    """Strict refused to train: the model calls kernels PyTorch's determinism switch cannot see."""


def configure(
    mode: Optional[str] = None,
    *,
    hyp: Optional[Mapping[str, Any]] = None,
    hyp_name: str = "hyp.yaml",
    seed: Optional[int] = None,
    rank: Optional[int] = None,
    backward: Optional[str] = None,
    allow: Optional[Any] = None,
    ops: Optional[str] = None,
    fill_uninitialized_memory: Optional[bool] = None,
    repo: Optional[os.PathLike] = None,
    saved: Optional[Mapping[str, Any]] = None,
    virtual_world_size: Optional[int] = None,
    fingerprint: Optional[str] = None,
) -> Session:
    """Start determinism for this process; call once at start-up, before the model trains.

    Resolves every setting (arguments > ``hyp`` dict > ``YOLO_DET_*`` env > ``saved`` settings
    of a resumed run > default ``warn``), seeds ``random``/``numpy``/``torch`` when ``seed`` is given, prepares
    ``CUBLAS_WORKSPACE_CONFIG`` on CUDA, applies the flags, and records every
    nondeterministic-op alert from now on. Returns the :class:`Session` (also
    :func:`current`); a previous session is finished first. Raises
    :class:`~yolo_det.mode.ConfigError` for bad values and :class:`DeterminismSetupError`
    when strict cannot be guaranteed.
    """
    settings = resolve(
        cli={
            "deterministic": mode,
            "deterministic_backward": backward,
            "deterministic_allow": allow,
            "deterministic_ops": ops,
            "deterministic_fill_memory": fill_uninitialized_memory,
            "virtual_world_size": virtual_world_size,
            "fingerprint": fingerprint,
        },
        hyp=hyp,
        hyp_name=hyp_name,
        saved=saved,
    )
    previous = active.current()
    if previous is not None:
        previous.finish(echo=lambda _: None)
    if rank is None:
        rank = int(os.environ.get("RANK", "-1") or -1)
    if seed is not None:
        seed = seeding.seed_everything(seed, rank)
    session = Session(settings, seed, rank, repo)
    session._start()
    active.set_current(session)
    from .record import fingerprint

    fingerprint.start_from_env(session)  # per-step fingerprints when YOLO_DET_FINGERPRINT is set
    return session


def current() -> Optional[Session]:
    """The session :func:`configure` started in this process, or None."""
    return active.current()


@contextlib.contextmanager
def backward_context(loss: Any = None) -> Iterator[Optional[Session]]:
    """``session.backward(loss)`` of the current session, or a no-op block when there is none."""
    session = active.current()
    if session is None:
        if loss is not None:
            from .record import fingerprint

            fingerprint.record_loss(loss)
        yield None
        return
    with session.backward(loss):
        yield session


__all__ = [
    "ConfigError", "DeterminismSetupError", "NondeterministicOpError", "OpaqueKernelError", "Session", "backward_context",
    "configure", "current", "explain", "explained_error", "REPORT_NAME",
]
