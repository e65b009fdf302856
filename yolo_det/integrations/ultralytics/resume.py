"""Exact resume for Ultralytics trainers (used by :class:`DeterminismMixin`): the sidecar, refusals, the stop.

Ultralytics keeps the EMA as the model and the optimizer in fp16 in ``last.pt``: :class:`UltralyticsResume`
writes the sidecar beside it (the fp32 model, EMA and optimizer, the RNG states, the data stream's position;
with gradient accumulation also the pending gradients and the step cadence, ``last_opt_step``), checks it on
``resume=True`` and restores it; a resume that cannot be exact is refused under strict (:func:`refuse`) and
said under warn. ``$YOLO_DET_STOP_AFTER_EPOCH`` stops a run cleanly for ``verify --resume-at``. The kill-safe
file protocol and state capture are :mod:`yolo_det.integrations.resume`'s, shared with YOLOv5.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...core import atomic, streams
from ...record.sources import unwrap
from .. import resume as _resume
from ..launch import bootstrapped
from . import api


RESUME_ANYWAY = "add deterministic=warn to the resume command (a trainer argument: it overrides the saved mode)"


def refuse(why: str, checkpoint: Path) -> None:
    """A strict resume that cannot be exact: nothing is trained. Under ``yolo-det run`` (the ``yolo`` CLI, a
    script) the process exits 2 with the message, as the CLI's refusals do; through the API a
    :class:`~yolo_det.integrations.resume.ResumeStateError` is raised (``yolo-det ultralytics train`` exits 2)."""
    message = _resume.refusal(why, checkpoint, RESUME_ANYWAY)
    if bootstrapped():
        print(f"yolo-det: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)  # EXIT_USAGE: a refusal
    raise _resume.ResumeStateError(message)


def refuse_missing(checkpoint: Path, mode: str) -> None:
    """Before the trainer is built: a strict resume of a checkpoint without its sidecar is refused at once
    (nothing loaded, nothing written); a sidecar that is there is checked after ``_setup_train``."""
    if mode == "strict" and not _resume.inexact_allowed() and not _resume.sidecar_path(checkpoint).is_file() \
            and not _resume.previous_path(checkpoint).is_file():
        refuse(_resume.missing_state(checkpoint), checkpoint)


def refuse_unsaved(resume: Any) -> None:
    """``resume=PATH`` of a yolo-det run killed before its first save completed: refused (exit 2 from the
    command line) with why, instead of Ultralytics resuming some other run or failing on a missing file."""
    if isinstance(resume, (str, os.PathLike)) and str(resume) not in ("True", "true", ""):
        why = _resume.unsaved(resume)
        if why:
            if bootstrapped():
                print(f"yolo-det: error: {why}", file=sys.stderr, flush=True)
                raise SystemExit(2)  # EXIT_USAGE: a refusal
            raise _resume.ResumeStateError(why)


class UltralyticsResume:
    """The trainer's sidecar, data-stream position and stop request (``$YOLO_DET_STOP_AFTER_EPOCH``)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.writer = _resume.Writer()
        self.sampler: Optional[streams.EpochSampler] = getattr(trainer.train_loader, "yolo_det_sampler", None)
        self.cadence: Optional[_resume.StepCadence] = None  # a resumed accumulation cadence, until it caught up
        self.reload: Optional[tuple] = None  # the applied resume state, loaded again at the first epoch start
        self.checked: Optional[tuple] = None  # (state, rng) that check() found usable: start() applies it

    @property
    def session(self) -> Any:
        return self.trainer.yolo_det

    def start(self) -> None:
        """After ``_setup_train``: the stream starts at the resumed epoch; resets keep the epoch; resume state."""
        trainer = self.trainer
        if self.sampler is not None:
            loader, sampler = trainer.train_loader, self.sampler
            original = loader.reset
            sampler.restart(trainer.start_epoch)
            if getattr(loader, "iterator", None) is not None:  # Ultralytics < 8.4 starts it in __init__
                original()

            def reset() -> None:  # close_mosaic: the new iterator samples the epoch about to start
                sampler.restart(trainer.epoch)  # first: older releases build the new iterator in reset()
                original()

            loader.reset = reset
        trainer.add_callback("on_fit_epoch_end", self._settle)
        trainer.add_callback("on_fit_epoch_end", self._rank_state)  # before a requested stop
        trainer.add_callback("on_fit_epoch_end", _stop_if_asked)
        if self.checked is not None:
            self._apply(*self.checked)

    def _settle(self, trainer: Any) -> None:
        """``on_fit_epoch_end``: the sidecar holds the optimizer's learning rates the next epoch starts with."""
        if self.session.is_main and self.session.settings.mode != "off":
            self.writer.settle_param_groups(_resume.sidecar_path(Path(trainer.last)), trainer.optimizer,
                                           int(trainer.epoch))

    def _rank_state(self, trainer: Any) -> None:
        """``on_fit_epoch_end`` on every rank: a DDP rank other than 0 writes its RNG states beside last.pt."""
        session = self.session
        if session.is_main or session.settings.mode == "off":
            return
        try:
            _resume.write_rank_state(Path(trainer.last), int(trainer.epoch), session.rank)
        except OSError as exc:
            print(f"yolo-det: warning: rank {session.rank}'s resume state could not be written: {exc}")

    def _checkpoint(self) -> Path:
        resume = getattr(self.trainer.args, "resume", None)
        return Path(resume) if isinstance(resume, (str, Path)) and Path(resume).is_file() else Path(self.trainer.last)

    def check(self) -> None:
        """On resume (strict/warn), before this process writes anything into the run folder: is the sidecar
        there and does it match the checkpoint? Strict refuses a resume that cannot be exact (nothing is
        trained); warn says why it is not exact and resumes as Ultralytics does."""
        trainer, session = self.trainer, self.session
        if not getattr(trainer, "resume", False) or session.settings.mode == "off":
            return
        checkpoint = self._checkpoint()
        path = _resume.sidecar_path(checkpoint)
        found = _resume.consistent_state(checkpoint)  # by digest: the previous sidecar after a kill mid-save
        state, rng = found["state"], None
        problems: List[str] = [] if state is not None else list(found["problems"])
        if state is not None:
            if int(state["epoch"]) + 1 != int(trainer.start_epoch):
                problems.append(f"the resume state was saved after epoch {int(state['epoch']) + 1}, the checkpoint "
                                f"resumes after epoch {trainer.start_epoch}")
            why = _resume.weight_mismatch(state.get("ema"), trainer.ema.ema, "EMA")
            if why:
                problems.append(why)
            accumulation = _resume.accumulation_problem(state)
            if accumulation:
                problems.append(accumulation)
            elif state.get("accumulation") and not _resume.StepCadence.supported(trainer):
                problems.append(_resume.PENDING if state.get("pending_gradients") else
                                "this trainer's loop cannot be given back its step cadence (last_opt_step)")
            if state.get("ema_updates") is not None and int(trainer.ema.updates) != state["ema_updates"]:
                problems.append(f"the EMA has {trainer.ema.updates} updates, the resume state {state['ema_updates']}")
            rng = _resume.rank_rng(checkpoint, state, session.rank)
            if isinstance(rng, str):
                problems.append(rng)
            if not problems and found.get("mismatch"):
                problems.append(found["mismatch"])
        if problems:
            if state is not None:
                problems = [f"{path.name} does not match {checkpoint.name}: " + "; ".join(problems)]
            self._report(problems)
            return
        self.checked = (state, rng)
        self.state_path = found["path"]

    def _apply(self, state: Dict[str, Any], rng: Any) -> None:
        """Restore what :meth:`check` found usable (at the end of ``_setup_train``)."""
        trainer, session = self.trainer, self.session
        checkpoint = self._checkpoint()
        path = _resume.sidecar_path(checkpoint)
        if getattr(self, "state_path", None) is not None:  # killed between the sidecar and the checkpoint
            _resume.adopt_previous(checkpoint, self.state_path)
        self._load(state, rng)
        self.reload = (state, rng)
        api.run_first(trainer, "on_train_epoch_start", self._first_epoch)
        if state.get("optimizer") is not None:
            saved = state["optimizer"]
            for group, live in zip(saved["param_groups"], trainer.optimizer.param_groups):
                group["fused"] = live.get("fused")
            trainer.optimizer.load_state_dict(saved)
        if state.get("scaler") and trainer.scaler.is_enabled():
            trainer.scaler.load_state_dict(state["scaler"])
        _resume.continue_fingerprint(state)
        accumulation = state.get("accumulation") or {}
        if accumulation.get("last_opt_step") is not None and _resume.StepCadence.supported(trainer):
            self.cadence = _resume.StepCadence(trainer, accumulation["last_opt_step"], accumulation.get("gradients"))
            self.cadence.install(trainer.model)
        # beside what the trainer recorded of the resumed settings (kept / overridden, seed)
        session.extra.setdefault("resume", {}).update({"checkpoint": str(checkpoint), "exact": True, "problems": [],
                                                       "epoch": int(trainer.start_epoch)})
        print(f"yolo-det: resumed exactly after epoch {trainer.start_epoch}: full-precision model, EMA and "
              f"optimizer, RNG states and the data stream from {path.name}", flush=True)

    def _load(self, state: Dict[str, Any], rng: Any) -> None:
        """The sidecar's full-precision model and EMA, the tensors their modules cache, the RNG states."""
        trainer = self.trainer
        _resume.load_module(unwrap(trainer.model), state.get("model"))
        _resume.load_module(trainer.ema.ema, state.get("ema"))
        caches = state.get("caches") or {}
        _resume.load_module_caches(unwrap(trainer.model), caches.get("model"))
        _resume.load_module_caches(trainer.ema.ema, caches.get("ema"))
        _resume.set_rng_state(rng)

    def _first_epoch(self, trainer: Any) -> None:
        """``on_train_epoch_start`` of the first resumed epoch, before the release's callbacks: load again.

        What ran on the live model since ``_setup_train`` ran in the uninterrupted run once, at its start,
        not again before this epoch: 8.0's TensorBoard callback traces the training model in train mode
        at ``on_train_start``, and those forwards move BatchNorm running statistics.
        """
        if self.reload is not None:
            state, rng = self.reload
            self.reload = None
            self._load(state, rng)

    def _report(self, problems: List[str]) -> None:
        """Strict refuses (:func:`refuse`); warn prints why the resume is not exact and goes on."""
        session = self.session
        session.extra.setdefault("resume", {}).update({"checkpoint": str(self._checkpoint()), "exact": False,
                                                       "problems": problems})
        text = "; ".join(problems)
        if session.settings.mode == "strict" and not _resume.inexact_allowed():
            refuse(text, self._checkpoint())
        print(f"yolo-det: resume not exact: {text}; it resumes as Ultralytics does", flush=True)

    def save(self, staged: Optional[Path] = None) -> None:
        """After Ultralytics wrote last.pt (or ``staged``, ``last.pt.partial``): the sidecar beside it
        (strict/warn), then a staged checkpoint renamed into place; the run info for verify.

        Under off only the run info: ``verify --resume-at`` then shows how Ultralytics' own resume differs.
        """
        trainer, session = self.trainer, self.session
        last = Path(trainer.last)
        if session.settings.mode != "off":
            self._write_sidecar(last, staged)
        elif staged is not None:
            atomic.replace(staged, last)
        command = [sys.executable, "-m", "yolo_det", "ultralytics", "train", f"model={last.resolve()}", "resume=True",
                   f"deterministic={session.settings.mode}"]
        _resume.write_run_info(checkpoint=last.resolve(), epochs_done=trainer.epoch + 1,
                               epochs=getattr(trainer, "epochs", None), release="ultralytics",
                               resume_command=command)

    def _write_sidecar(self, last: Path, staged: Optional[Path] = None) -> None:
        trainer, session = self.trainer, self.session
        error = self.writer.wait()
        if error is not None:
            print(f"yolo-det: warning: the previous resume state could not be written: {error}")
        data = {} if self.sampler is None else {"seed": self.sampler.seed, "shuffle": self.sampler.shuffle,
                                                "samples": self.sampler.n, "world_size": self.sampler.world_size}
        state = _resume.capture(
            epoch=trainer.epoch, next_epoch=trainer.epoch + 1, model=unwrap(trainer.model), ema=trainer.ema.ema,
            ema_updates=trainer.ema.updates, optimizer=trainer.optimizer, scaler=trainer.scaler,
            settings=session.settings.to_dict(), data=data, checkpoint=last, extra={"release": "ultralytics"},
            cadence=_resume.cadence(session), reuse=self.writer.last, last_opt_step=self._last_opt_step())
        best = getattr(trainer, "best", None)  # Ultralytics saved best.pt from this state when fitness is the best
        is_best = best is not None and getattr(trainer, "fitness", None) is not None \
            and trainer.best_fitness == trainer.fitness
        self.writer.write(_resume.sidecar_path(last), state, best=Path(best) if is_best else None, staged=staged)

    def _last_opt_step(self) -> Optional[int]:
        """The batch of the last optimizer step: the resumed cadence's until the loop stepped, else the loop's."""
        if self.cadence is not None and self.cadence.last_opt_step() is not None:
            return self.cadence.last_opt_step()
        return _resume.loop_variable("last_opt_step", self.trainer)

    def wait(self) -> None:
        error = self.writer.wait()
        if error is not None:
            print(f"yolo-det: warning: the resume state could not be written: {error}")


def completed(trainer: Any) -> None:
    """Ultralytics' ``on_train_end``, first (the main process; the training completed, its checkpoints stripped):
    the resume state a finished run no longer uses goes (``$YOLO_DET_KEEP_RESUME=1`` keeps it), and yolo-det's own
    files leave ``weights/`` while the release's callbacks upload that folder (:func:`restored` puts them back)."""
    weights = Path(trainer.last).parent
    _resume.finish_completed(weights, echo=lambda line: print(line, flush=True))
    _resume.set_aside(weights)


def restored(trainer: Any) -> None:
    """Ultralytics' ``on_train_end``, last (and when train() returns or raises): yolo-det's files back in ``weights/``."""
    _resume.put_back(Path(trainer.last).parent)


def install_completion(trainer: Any) -> None:
    """On the main process: :func:`completed` first among the ``on_train_end`` callbacks, :func:`restored` last."""
    ends = trainer.callbacks.setdefault("on_train_end", [])
    if completed not in ends:
        ends.insert(0, completed)
        ends.append(restored)


def _stop_if_asked(trainer: Any) -> None:
    """``on_fit_epoch_end`` callback: stop cleanly after epoch K (its checkpoint and sidecar written)."""
    stop = _resume.stop_epoch()
    if stop is None or int(trainer.epoch) + 1 != stop:
        return
    hooks = getattr(trainer, "_yolo_det_resume", None)
    if hooks is not None:
        hooks.wait()
    _resume.write_run_info(stopped_after_epoch=stop)
    print(f"yolo-det: stopping after epoch {stop} as ${_resume.STOP_ENV} asks (resume with resume=True)", flush=True)
    raise SystemExit(0)


__all__ = ["RESUME_ANYWAY", "UltralyticsResume", "completed", "install_completion", "refuse", "refuse_missing", "refuse_unsaved", "restored"]
