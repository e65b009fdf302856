"""Ultralytics YOLOv8/11 training (every task, RT-DETR) under yolo-det's strict|warn|off modes.

Ultralytics' own ``deterministic=True`` is warn-only, ``deterministic=False`` forces determinism
off, and training switches determinism off when it ends. Its train loader ignored the user's
seed before 8.4.124, no callback fires around backward, and DDP ranks re-create the trainer from
its import path (callbacks added in the parent are lost on older releases). The trainer here
keeps the mode the user chose for the whole run, seeds the train loader, wraps every backward in
the session's backward context, passes its settings to DDP ranks through the environment, and
puts the caller's global flags back when training ends. Every private Ultralytics API it uses goes
through :mod:`.api` (found by feature), so releases 8.0.238 to 8.4 and forks that vendor
the package (YOLOv10, YOLOv12) get what their pieces allow.

Over 800 lines on purpose: one trainer class whose hooks override Ultralytics' methods (set-up, loaders, step,
validation, save, end) and share its state; streams, resume, validation, DDP and world size live in their modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type

import torch
from torch.utils.data import DistributedSampler

from ...core import env_names
from ...core.extras import install_hint

try:
    import ultralytics
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("yolo-det's Ultralytics integration needs the ultralytics package: "
                      + install_hint("ultralytics")) from exc

from ...core import atomic, determinism, environment, roles, run_facts
from ...record import fingerprint
from ...strict import compiled
from ... import trackers
from .. import label_caches, launch
from .. import resume as _resume
from . import tune as ultralytics_tune
from ...core.mode import ConfigError, Settings
from ...session import REPORT_NAME, DeterminismSetupError, Session, explained_error
from ...core.seeding import make_generator, seed_worker
from . import api, loggers
from .evaluation import deterministic_predictor, deterministic_validator
from .mode import ARG_NAME, ENV_INPUTS, ModeInputs  # noqa: F401  (ARG_NAME: re-exported)
from .validation import StopProbe, record_validation, training_settings, validation_nms
from . import resume as _ultralytics_resume
from . import streams as _streams
from . import ddp as _ddp
from . import world as _world

#: The Ultralytics releases this integration is written and checked against (scripts/compat.py).
SUPPORTED = ">=8.0.238,<8.5"
_SUPPORTED_RANGE = ((8, 0, 238), (8, 5))
DEFAULT_CFG = api.default_cfg()
LOGGER = api.logger()
#: First release whose train loader derives its shuffle seed from the user's ``seed``.
LOADER_SEEDED_SINCE = (8, 4, 124)
#: Environment variables Ultralytics or yolo-det change during training and restore after it.
CALLER_ENV = (environment.CUBLAS_VAR, "PYTHONHASHSEED", env_names.SEED, env_names.RANK, ENV_INPUTS)

def ultralytics_version(version: Optional[str] = None) -> Tuple[int, ...]:
    """The installed (or given) Ultralytics version as a tuple of ints, e.g. (8, 4, 190)."""
    return api.version_tuple(version)


def version_warning(version: Optional[str] = None) -> Optional[str]:
    """A warning when the Ultralytics version is outside :data:`SUPPORTED`, else None."""
    low, high = _SUPPORTED_RANGE
    if low <= ultralytics_version(version) < high:
        return None
    found = version or ultralytics.__version__
    return (f"yolo-det's Ultralytics trainer supports ultralytics{SUPPORTED}; found {found}. "
            "It may not hook into training correctly.")


@dataclass
class CallerState:
    """The global flags and environment variables of the caller, to put back after training."""

    flags: determinism.FlagState
    env: Dict[str, Optional[str]]

    @classmethod
    def capture(cls) -> "CallerState":
        return cls(determinism.snapshot(), {key: os.environ.get(key) for key in CALLER_ENV})

    def restore(self) -> None:
        determinism.restore(self.flags)
        for key, value in self.env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def compile_mode(value: Any) -> Optional[str]:
    """Ultralytics' ``compile`` argument as a ``torch.compile`` mode: True -> ``default``; None when off."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("", "false", "none")):
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
        return "default"
    return str(value)


def compile_conflict(mode: str, value: Any) -> Optional[str]:
    """Refuse under strict a ``compile`` that cannot be made deterministic (ConfigError naming why: a mode that
    tunes by timing, a torch without Inductor's deterministic settings); under warn return what cannot be
    checked; None otherwise. Ultralytics compiles with the inductor back end (``attempt_compile``)."""
    compiled_mode = compile_mode(value)
    if compiled_mode is None or mode == "off":
        return None
    if mode == "strict":
        message = compiled.refusal("inductor", compiled_mode)
        if message:
            raise ConfigError(f"compile={value!r} cannot run under deterministic=strict. {message}")
        return None
    note = compiled.warn_note("inductor", compiled_mode)
    return f"compile={value!r} with deterministic=warn: {note}" if note else None


class ScaledLoss:
    """The scaled loss of one step; its ``backward()`` runs inside the session's backward context."""

    def __init__(self, tensor: torch.Tensor, session: Session, items: Any = None) -> None:
        self._tensor = tensor
        self._session = session
        self._items = items

    def backward(self, *args: Any, **kwargs: Any) -> None:
        with self._session.backward(self._items):
            self._tensor.backward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_tensor", "_session", "_items"):
            raise AttributeError(name)
        return getattr(self._tensor, name)


class BackwardScaler:
    """Wraps a trainer's GradScaler: ``scale(loss).backward()`` runs in ``session.backward()``.

    Ultralytics calls ``self.scaler.scale(self.loss).backward()`` inline in its training loop
    and fires no callback around it, so the scaler is the one seam every release shares.
    ``items`` returns the step's loss components (box, cls, dfl) for the fingerprint log.
    """

    def __init__(self, scaler: Any, session: Session, items: Callable[[], Any] = lambda: None) -> None:
        self._scaler = scaler
        self._session = session
        self._items = items

    def scale(self, outputs: torch.Tensor) -> ScaledLoss:
        return ScaledLoss(self._scaler.scale(outputs), self._session, self._items())

    def __getattr__(self, name: str) -> Any:
        if name in ("_scaler", "_session", "_items"):
            raise AttributeError(name)
        return getattr(self._scaler, name)


def seed_train_loader(loader: torch.utils.data.DataLoader, seed: int, rank: int) -> None:
    """Seed a built train loader's shuffle and worker streams from ``seed`` and ``rank``.

    Re-seeds the loader's generator in place (its sampler holds the same object), sets
    :func:`yolo_det.seed_worker` as ``worker_init_fn`` and seeds a DistributedSampler with
    ``seed`` on every rank, so shards stay disjoint. Loaders that built their iterator in
    ``__init__`` (Ultralytics < 8.4) are reset so their workers start from the new seeds.
    """
    generator = getattr(loader, "generator", None)
    if generator is not None:
        generator.set_state(make_generator(seed, rank).get_state())
    loader.worker_init_fn = seed_worker
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, DistributedSampler):
        sampler.seed = int(seed)
    if getattr(loader, "iterator", None) is not None and hasattr(loader, "reset"):
        loader.reset()


def _quiet(_: str) -> None:
    return None


def _refuse_under_run(exc: BaseException) -> None:
    """Under ``yolo-det run``, a trainer that cannot start is one line and exit 2, as under ``yolo-det ultralytics
    train`` (a script that builds the trainer itself gets the exception)."""
    if launch.bootstrapped() and isinstance(exc, Exception):
        print(f"yolo-det: error: {_one_line(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _one_line(exc: BaseException) -> str:
    """``ConfigError: deterministic= 'strcit' is not one of strict, warn, off``: an error in one line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")


def _failed(exc: BaseException) -> str:
    return f"failed: {type(exc).__name__}: {exc}"[:1000]


#: determinism.json ``settings`` field -> hyp-style key, for the settings a resumed run keeps.
_SAVED_FIELDS = {
    "deterministic": "mode",
    "deterministic_backward": "backward_mode",
    "deterministic_allow": "allow",
    "deterministic_ops": "ops",
    "deterministic_fill_memory": "fill_uninitialized_memory",
    "virtual_world_size": "virtual_world_size",
}


def _load_checkpoint_args(path: Path) -> Dict[str, Any]:
    """The training arguments saved in an Ultralytics checkpoint (``train_args``)."""
    ckpt = api.load_checkpoint(path)
    args = ckpt.get("train_args") if isinstance(ckpt, dict) else None
    return dict(args) if isinstance(args, dict) else {}


@dataclass
class ResumedRun:
    """A run being resumed: its checkpoint, the checkpoint's arguments, the yolo-det settings saved with it."""

    checkpoint: Path
    args: Dict[str, Any]
    report: Optional[Path]
    saved: Dict[str, Any]

    @classmethod
    def find(cls, args: Any) -> Optional["ResumedRun"]:
        """The run Ultralytics will resume for these arguments (as its ``check_resume`` finds it), or None."""
        resume = getattr(args, "resume", None)
        if not resume:
            return None
        if isinstance(resume, (str, os.PathLike)) and Path(resume).exists():
            path = Path(resume)
        else:
            latest = api.latest_run()
            if not latest:
                return None  # Ultralytics reports the missing checkpoint
            path = Path(latest)
        try:
            ckpt_args = _load_checkpoint_args(path)
        except Exception:  # noqa: BLE001 - Ultralytics reports an unreadable checkpoint itself
            return None
        run_dir = path.parent.parent if path.parent.name == "weights" else path.parent
        report = run_dir / REPORT_NAME
        saved: Dict[str, Any] = {}
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
            settings = data["settings"]
            for key, name in _SAVED_FIELDS.items():
                if settings["sources"].get(key, "default") != "default":
                    value = settings[name]
                    saved[key] = tuple(value) if isinstance(value, list) else value
        except (OSError, ValueError, KeyError, TypeError):
            report = None
        return cls(path, ckpt_args, report, saved)

    def describe(self, settings: Settings) -> Dict[str, Any]:
        """What determinism.json records about the resume: which saved settings were kept or overridden."""
        kept = sorted(k for k in self.saved if settings.sources.get(k) == "resume")
        return {
            "checkpoint": str(self.checkpoint),
            "saved_with_run": str(self.report) if self.report else None,
            "saved": {k: list(v) if isinstance(v, tuple) else v for k, v in self.saved.items()},
            "kept": kept,
            "overridden": {k: settings.sources.get(k) for k in sorted(self.saved) if k not in kept},
            "seed": self.args.get("seed"),
        }

    def message(self, settings: Settings) -> str:
        """One line for the log: the mode the resumed run trains in and why."""
        saved = self.saved.get("deterministic")
        if saved is None:
            why = "no yolo-det settings were saved with this run" if self.report is None else "none saved"
            return (f"resuming {self.checkpoint} with deterministic={settings.mode} ({settings.source}; {why})")
        if settings.source == "resume":
            return (f"resuming {self.checkpoint} with deterministic={settings.mode}, as saved with the run "
                    f"({self.report}); pass deterministic=MODE or set YOLO_DET_DETERMINISTIC to change it")
        return (f"resuming {self.checkpoint} with deterministic={settings.mode} from {settings.source}, "
                f"overriding deterministic={saved} saved with the run")


@contextlib.contextmanager
def _env_without(key: str) -> Iterator[None]:
    """Hide one environment variable inside the block."""
    value = os.environ.pop(key, None)
    try:
        yield
    finally:
        if value is not None:
            os.environ[key] = value


class DeterminismMixin:
    """Adds yolo-det's determinism modes to an Ultralytics trainer class (put it first in the bases).

    Settings come from ``deterministic='strict'|'warn'|'off'`` (and the other ``deterministic_*``
    keys) passed as trainer arguments, else ``YOLO_DET_*`` environment variables, else
    Ultralytics' boolean ``deterministic`` (True -> warn, False -> off), else, when resuming, the
    settings saved with the run (``determinism.json``, source ``resume``). ``self.yolo_det`` is the
    run's :class:`~yolo_det.runtime.Session`. Define subclasses at module level in an importable
    module: DDP ranks re-create the trainer from its import path.
    """

    yolo_det: Session

    def __init__(self, cfg: Any = DEFAULT_CFG, overrides: Optional[Dict[str, Any]] = None,
                 _callbacks: Optional[dict] = None) -> None:
        overrides = dict(overrides or {})
        inherited = bool(os.environ.get(ENV_INPUTS))
        handed = roles.train_seed()  # yolo-det run --seed / yolo-det seeds: the seed when the call gives none
        if handed is not None and "seed" not in overrides and not overrides.get("resume") and not inherited:
            overrides["seed"] = handed
        try:
            inputs = ModeInputs.from_overrides(overrides)
        except ConfigError as exc:
            _refuse_under_run(exc)
            raise
        preview = api.preview_args(cfg, {**overrides, "deterministic": True})
        _ultralytics_resume.refuse_unsaved(getattr(preview, "resume", None))  # killed before its first save completed
        resumed = ResumedRun.find(preview)
        if resumed is not None and not inherited:  # a DDP rank inherits the parent's inputs, saved ones included
            inputs = inputs.with_saved(resumed.saved)
        settings = inputs.resolve()
        overrides["deterministic"] = settings.mode != "off"  # Ultralytics' init_seeds and args.yaml follow the mode
        compile_conflict(settings.mode, resumed.args.get("compile") if resumed else getattr(preview, "compile", False))
        virtual = getattr(settings, "virtual_world_size", None)
        if virtual:  # refused before Ultralytics creates anything
            _world.check(virtual, preview, settings.mode, lambda text: LOGGER.warning(f"yolo-det: {text}"))
        self._yolo_det_world: Optional[_world.VirtualWorld] = None
        self._yolo_det_inputs = inputs
        self._yolo_det_caller = CallerState.capture()
        self._yolo_det_trains_here = False
        self._yolo_det_batch_arg = getattr(preview, "batch", None)  # autobatch (batch < 1) replaces args.batch
        seed = resumed.args.get("seed", preview.seed) if resumed else preview.seed  # resume trains with the checkpoint's args
        # Fingerprinting starts in _setup_train: a DDP parent never trains, and its log would clash with rank 0's.
        with _env_without(fingerprint.ENV_VAR):
            self.yolo_det = inputs.configure(seed=seed)
        self._yolo_det_facts()
        if resumed is not None:
            self.yolo_det.extra["resume"] = resumed.describe(self.yolo_det.settings)
            if self.yolo_det.is_main:
                LOGGER.info(f"yolo-det: {resumed.message(self.yolo_det.settings)}")
        try:
            if resumed is not None and not inherited and self.yolo_det.is_main:
                _ultralytics_resume.refuse_missing(resumed.checkpoint, self.yolo_det.settings.mode)  # before anything is built
            super().__init__(cfg, overrides, _callbacks)
            _ddp.engage(self)  # a CPU rank of a torchrun run: DDP over gloo
            if virtual:
                self._yolo_det_world = _world.VirtualWorld(virtual, self)
                self.yolo_det.world_plan = self._yolo_det_world.plan  # the fingerprint header records V
                _world.reseed(self, self._yolo_det_world.plan)
            self._yolo_det_after_init()
        except BaseException as exc:
            save_dir = getattr(self, "save_dir", None)  # a run folder exists: it gets the report of the failure
            self._yolo_det_close(save=save_dir is not None and Path(save_dir).is_dir(), status=_failed(exc), quiet=True)
            _refuse_under_run(exc)
            raise

    def _yolo_det_facts(self) -> None:
        """The ``ultralytics`` block of determinism.json (completed once Ultralytics has read the arguments)."""
        args = getattr(self, "args", None)
        hooks = api.coverage()
        self.yolo_det.extra["ultralytics"] = {
            "version": ultralytics.__version__,
            "supported": SUPPORTED,
            "package": api.package_info(),
            "hooks": hooks,
            "not_covered": api.not_covered(hooks),
            "trainer": f"{type(self).__module__}.{type(self).__qualname__}",
            "task": getattr(args, "task", None),
            "launched_by_yolo_det_run": launch.bootstrapped(),
            "deterministic_arg": self._yolo_det_inputs.ultralytics_arg,
            "compile": getattr(args, "compile", False),
            "ddp": _ddp.describe(self),
            "world": self._yolo_det_world.describe() if getattr(self, "_yolo_det_world", None) else None,
            "train_loader": {
                "seeded_by": "yolo-det (make_generator(seed, rank), seed_worker)",
                "ultralytics_honours_seed": api.loader_honours_seed(),
            },
            "status": "initialised",
        }

    def _yolo_det_after_init(self) -> None:
        """Undo what Ultralytics' init_seeds changed and record the run's Ultralytics facts."""
        session = self.yolo_det
        determinism.restore(session.flags_applied)
        self._yolo_det_seeds()
        cublas = session.cublas.get("value")
        if session.cublas.get("state") in ("set", "launch") and cublas:
            os.environ[environment.CUBLAS_VAR] = str(cublas)
        compiled = getattr(self.args, "compile", False)
        note = compile_conflict(session.settings.mode, compiled)
        if note:
            LOGGER.warning(f"yolo-det: {note}")
            session.report.note(note)
        self._yolo_det_facts()
        uncovered = session.extra["ultralytics"]["not_covered"]
        if uncovered and session.settings.mode != "off":
            note = f"ultralytics {api.version()} lacks hooks yolo-det uses; not covered: " + "; ".join(uncovered)
            session.report.note(note)
            if session.is_main:
                LOGGER.warning(f"yolo-det: {note}")

    def _yolo_det_seeds(self) -> None:
        """One seed per role (determinism.json ``seeds``); an init seed of its own re-seeds the main process
        now, after Ultralytics' ``init_seeds(seed + 1 + RANK)`` and before the model is built."""
        session = self.yolo_det
        seed = getattr(self.args, "seed", None)
        record = roles.record(None if seed is None else int(seed))
        roles.check_mode(session.settings.mode)
        if "init" in record["overridden"]:
            applied = int(seed or 0) + 1 + int(os.environ.get("RANK", "-1") or -1)
            record["init_applied"] = roles.reseed_init(record["init"], applied, seed, session.rank)
        session.extra["seeds"] = record

    def _yolo_det_close(self, save: bool, status: str, quiet: bool = False) -> None:
        """Stop the session, write determinism.json if this process trained, restore the caller."""
        session = self.yolo_det
        world = getattr(self, "_yolo_det_world", None)
        hooks = getattr(self, "_yolo_det_resume", None)
        try:
            if hooks is not None:  # the last save's sidecar is on disk before train() returns or raises
                hooks.wait()
            if session.is_main and getattr(self, "_yolo_det_trains_here", False) and getattr(self, "last", None):
                _ultralytics_resume.restored(self)  # set aside for on_train_end's uploads: back, however it ended
            session.extra.setdefault("ultralytics", {})["status"] = status
            if world is not None:
                world.remove()
                session.extra["ultralytics"]["world"] = world.describe()
            echo = LOGGER.info if save and not quiet else _quiet
            session.finish(getattr(self, "save_dir", None) if save else None, echo=echo)
        finally:
            self._yolo_det_caller.restore()

    def _yolo_det_rank_env(self) -> Dict[str, str]:
        """What DDP ranks need before they start: this trainer's inputs, cuBLAS config, hash seed."""
        env = environment.launcher_env(None, self.args.seed)
        env[ENV_INPUTS] = self._yolo_det_inputs.to_json()
        return env

    def train(self) -> Any:
        """Train (or launch DDP ranks) under the run's mode; restore the caller's state after, also on errors."""
        status = "failed"
        try:
            os.environ.update(self._yolo_det_rank_env())
            result = super().train()
            status = "completed"
            return result
        except SystemExit as exc:
            status = "stopped" if exc.code in (None, 0) else f"failed: SystemExit: {exc.code}"
            raise
        except BaseException as exc:
            inner = explained_error(exc)  # a refused op in a compiled forward: the alert, not Dynamo's wrapper
            status = _failed(inner)
            if inner is not exc:
                raise inner from exc
            raise
        finally:
            self._yolo_det_close(save=self._yolo_det_trains_here, status=status)

    def set_model_attributes(self) -> None:
        """Register the model (before compile, DDP, optimizer and EMA see it); strict swaps in replacements."""
        super().set_model_attributes()
        self.yolo_det.track(self.model)

    def _setup_train(self, *args: Any, **kwargs: Any) -> None:
        """Build the training state as Ultralytics does, then route backward through the session.

        Also starts fingerprinting (``YOLO_DET_FINGERPRINT``, else the run folder's own log under strict/warn unless
        ``fingerprint=off``): only processes that train get here.
        """
        self._yolo_det_trains_here = True
        label_caches.reset()
        label_caches.install_ultralytics()  # label caches built from other label contents are not trusted
        with _ddp.cpu_ddp(self):
            super()._setup_train(*args, **kwargs)
        self._yolo_det_resume = _ultralytics_resume.UltralyticsResume(self)
        try:
            self._yolo_det_resume.check()  # a strict resume that cannot be exact stops here, nothing trained
        except BaseException:
            self._yolo_det_trains_here = False  # refused: the run folder keeps the interrupted run's determinism.json
            raise
        if self.yolo_det.is_main and self.yolo_det.settings.mode != "off":  # before the first checkpoint: a
            _resume.mark_run(Path(self.last).parent, self.yolo_det.settings.to_dict())  # lost sidecar is known lost
        label_caches.write_manifest(self.save_dir, getattr(self, "data", None))
        run_facts.record(self.yolo_det, amp=bool(getattr(self, "amp", False)),  # after Ultralytics' AMP check
                         workers=getattr(getattr(self, "train_loader", None), "num_workers", None))
        loader = getattr(self, "train_loader", None)
        self.yolo_det.extra["run_facts"]["drop_last"] = getattr(loader, "drop_last", None)
        run_facts.record_fact(self.yolo_det, "memory_format", run_facts.memory_format(self.model))  # channels_last
        if not self.yolo_det.extra["run_facts"].get("batch_sizes"):  # the batch trained (autobatch's pick included)
            run_facts.record_batch(self.yolo_det, self.batch_size, from_step=1,
                                   why="autobatch" if float(self._yolo_det_batch_arg or 0) < 1 else "batch=")
        if getattr(self, "ema", None) is not None:
            self.yolo_det.extra["ema"] = self.ema
        self.scaler = BackwardScaler(self.scaler, self.yolo_det, lambda: getattr(self, "loss_items", None))
        if self._yolo_det_world is not None:
            self._yolo_det_world.install()  # V/N micro-batches per batch, the fixed-tree gradient
        if getattr(self, "stopper", None) is not None:
            self.stopper = StopProbe(self.stopper)  # early stopping goes into the validation records
        if self.yolo_det.settings.mode != "off":  # a logger's draw from the global generators is not the training's
            self.yolo_det.extra["ultralytics"]["loggers_rng_guarded"] = loggers.guard(self.callbacks)
        determinism.restore(self.yolo_det.flags_applied)
        fingerprint.start_for_run(self.yolo_det, self.save_dir)
        if _epoch_end not in self.callbacks.get("on_train_epoch_end", []):  # per-tensor lines at
            self.add_callback("on_train_epoch_end", _epoch_end)  # each epoch end, validated there or not
        if self.yolo_det.is_main and _note_tracker_run not in self.callbacks.get("on_train_end", []):
            self.callbacks.setdefault("on_train_end", []).insert(0, _note_tracker_run)  # before a tracker's ends its run
        if self.yolo_det.is_main:  # a completed run's resume state, and yolo-det's files out of trackers' uploads
            _ultralytics_resume.install_completion(self)
        # where determinism.json and data_manifest.json are, for diff/verify's causes (logs may be elsewhere)
        fingerprint.update_header(report=str((Path(self.save_dir) / REPORT_NAME).resolve()))
        if self.yolo_det.is_main:  # the settings are saved with the run from the start: a resume reads them
            self.yolo_det.extra["ultralytics"]["status"] = "running"
            self.yolo_det.save(self.save_dir)
        self._yolo_det_resume.start()  # last: resume restores the RNG states

    def _setup_ddp(self, *args: Any, **kwargs: Any) -> None:
        """Ultralytics' process group, or gloo on the CPU for ranks torchrun started with ``device=cpu``."""
        if getattr(self, "_yolo_det_cpu_world", 0):
            _ddp.join_gloo(self)
        else:
            super()._setup_ddp(*args, **kwargs)

    def _do_train(self, *args: Any, **kwargs: Any) -> Any:
        """Ultralytics' training loop (8.0 receives a CPU rank's world size as its argument)."""
        args, kwargs = _ddp.do_train_args(self, args, kwargs)
        return super()._do_train(*args, **kwargs)

    def build_optimizer(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        """Ultralytics' optimizer; under a virtual world size built on the unwrapped model (8.0's ``optimizer=auto``
        reads ``model.nc``, which a DDP wrapper hides: its learning rate would follow the number of processes)."""
        if self._yolo_det_world is not None:
            model = _world.unwrapped(model)
        optimizer = super().build_optimizer(model, *args, **kwargs)
        requested = kwargs.get("name", args[0] if args else None)
        iterations = kwargs.get("iterations", args[4] if len(args) > 4 else None)
        run_facts.record_optimizer(self.yolo_det, optimizer, requested=requested, iterations=iterations)
        return optimizer

    def _build_train_pipeline(self, *args: Any, **kwargs: Any) -> Any:
        """Ultralytics' train loader and optimizer settings for the batch size; called again after an out-of-memory
        halving in the first epoch (8.4 ``_oom_retries``): refused under strict, recorded and reported under warn."""
        retries = int(getattr(self, "_oom_retries", 0) or 0)
        if retries > getattr(self, "_yolo_det_halvings", 0):
            self._yolo_det_halvings = retries
            _oom_halving(self, retries)
        return super()._build_train_pipeline(*args, **kwargs)

    def preprocess_batch(self, batch: Any) -> Any:
        """Ultralytics' preprocessing; under a virtual world size the log first takes the raw micro-batch."""
        if self._yolo_det_world is not None:
            self._yolo_det_world.loaded(batch)
        return super().preprocess_batch(batch)

    def resume_training(self, ckpt: Any) -> Any:
        """Ultralytics' resume; on releases whose loop would not have closed mosaic yet, it stays open."""
        self._yolo_det_resuming = True
        try:
            return super().resume_training(ckpt)
        finally:
            self._yolo_det_resuming = False

    def _close_dataloader_mosaic(self) -> Any:
        """Ultralytics' close_mosaic, except a resume's close that the uninterrupted run never makes.

        Releases before 8.4 close mosaic on resume when ``start_epoch > epochs - close_mosaic`` but in
        the loop only at ``epoch == epochs - close_mosaic``; with ``epochs < close_mosaic`` the
        uninterrupted run keeps mosaic to the end, so under strict/warn the resumed run does too.
        """
        if getattr(self, "_yolo_det_resuming", False) and self.yolo_det.settings.mode != "off" \
                and self.epochs < self.args.close_mosaic and api.mosaic_closes_at_one_epoch_only(type(self)):
            self.yolo_det.extra.setdefault("resume", {})["mosaic_kept"] = (
                f"ultralytics {api.version()} would close mosaic on resume though the uninterrupted run keeps "
                f"it (epochs={self.epochs} < close_mosaic={self.args.close_mosaic}); kept, as without the resume")
            return None
        return super()._close_dataloader_mosaic()

    def validate(self) -> Any:
        """Ultralytics' validation with NMS free of its wall-clock limit under strict/warn; recorded in the log."""
        world = self._yolo_det_world
        if world is not None and world.skips_validation():  # rank 0 validates every image, as one process
            return None, None
        with validation_nms(self.yolo_det, validator=getattr(self, "validator", None)), world.validating_alone() if world else contextlib.nullcontext():
            metrics, fitness = super().validate()
        _record_head(self)
        record_validation(self, metrics, fitness, settings=training_settings(self)
                          if metrics is not None and fingerprint.active() is not None else None)
        return metrics, fitness

    def final_eval(self) -> Any:
        """The end-of-training validation of best.pt, also free of the NMS time limit under strict/warn."""
        hooks = getattr(self, "_yolo_det_resume", None)
        if hooks is not None:  # the last save's checkpoint is in place before Ultralytics strips it
            hooks.wait()
        world = self._yolo_det_world
        if world is not None and world.skips_validation():
            return world.wait_for_final_eval()
        with validation_nms(self.yolo_det, record=False), _ddp.cpu_validation(self), \
                world.validating_alone() if world else contextlib.nullcontext():
            return super().final_eval()

    def save_model(self) -> Any:
        """Ultralytics' checkpoint save, then the resume sidecar beside last.pt (strict/warn).

        Kill-safe under strict/warn: Ultralytics writes ``last.pt.partial``; the sidecar (with that file's
        digest) goes on disk first and the checkpoint is renamed into place after it (``integrations/resume``).
        """
        world = self._yolo_det_world
        hooks = getattr(self, "_yolo_det_resume", None)
        last = Path(self.last)
        staged = None
        if hooks is not None and self.yolo_det.is_main and self.yolo_det.settings.mode != "off":
            hooks.wait()  # the previous save's checkpoint is in place before this one is staged
            staged = _resume.staged_path(last)
        best = Path(self.best)
        try:
            if staged is not None:  # best.pt too: a kill while it is written leaves the previous best.pt
                self.last, self.best = staged, _resume.staged_path(best)
            with world.detached() if world is not None else contextlib.nullcontext():
                saved = super().save_model()
        finally:
            self.last, self.best = last, best
        if staged is not None and _resume.staged_path(best).is_file():
            atomic.replace(_resume.staged_path(best), best)
        if hooks is not None and saved is not False:
            hooks.save(staged=staged if staged is not None and staged.is_file() else None)
        elif staged is not None and staged.is_file():
            atomic.replace(staged, last)
        return saved

    def get_dataloader(self, dataset_path: Any, batch_size: int = 16, rank: int = 0, mode: str = "train") -> Any:
        """Ultralytics' loader; the train loader's shuffle and workers seeded from ``args.seed``."""
        world = self._yolo_det_world
        if world is not None and mode != "train":  # every image on rank 0, one GPU's validation batch
            batch_size, rank = world.val_batch(batch_size), -1
        loader = super().get_dataloader(dataset_path, batch_size, rank, mode)
        if mode == "train":
            seed_train_loader(loader, self.args.seed, self.yolo_det.rank)
            # Ultralytics drops the last incomplete batch when compiling: compiled and eager runs see other samples
            facts = self.yolo_det.extra.setdefault("ultralytics", {})
            facts.setdefault("train_loader", {})["drop_last"] = bool(getattr(loader, "drop_last", False))
            world = self._yolo_det_world
            seeds = self.yolo_det.extra.get("seeds")
            if world is not None:  # each virtual rank's shard from (seed, epoch, v), whatever the processes
                world.check_batch(batch_size)
                loader = _streams.stream_loader(loader, self.args.seed,
                                                roles.seed_for(seeds, "augment", self.args.seed),
                                                make_sampler=world.sampler)
            elif self.yolo_det.settings.mode != "off":  # per-sample streams: batches independent of workers
                loader = _streams.stream_loader(loader, roles.seed_for(seeds, "order", self.args.seed),
                                                roles.seed_for(seeds, "augment", self.args.seed))
        return loader


def _record_head(trainer: Any) -> None:
    """The head and NMS mode the first training-time validation used (``nms``; end-to-end heads: one-to-one or
    one-to-many + NMS), into ``run_facts``."""
    validator = getattr(trainer, "validator", None)
    if validator is None or "validation_head" in (trainer.yolo_det.extra.get("run_facts") or {}):
        return
    ema = getattr(getattr(trainer, "ema", None), "ema", None)
    layers = getattr(ema, "model", None)
    head = layers[-1] if isinstance(layers, torch.nn.Sequential) and len(layers) else None
    run_facts.record_fact(trainer.yolo_det, "validation_head", run_facts.validation_head(
        getattr(getattr(validator, "args", None), "nms", None), getattr(validator, "end2end", None),
        None if head is None else getattr(head, "one2one_cv2", None) is not None))


def _note_tracker_run(trainer: Any) -> None:
    """Ultralytics' ``on_train_end``, first: the tracker runs its callbacks started (each tracker backend's active
    run), remembered in the run folder, so the session's evidence goes into them after the callbacks have ended
    them (docs/trackers.md)."""
    trackers.note_active_run(getattr(trainer, "save_dir", None), "ultralytics", echo=LOGGER.warning)


def _epoch_end(trainer: Any) -> None:
    """Ultralytics' ``on_train_epoch_end``: the epoch's last step goes into the log in full."""
    fingerprint.epoch_end()


class BatchHalvingRefused(DeterminismSetupError):
    """Strict refused Ultralytics' out-of-memory batch halving: the run would not be the one its settings describe."""


def _oom_halving(trainer: Any, retries: int) -> None:
    """Ultralytics caught an out-of-memory error in the first epoch and halved ``args.batch`` (now ``batch_size``)."""
    session = trainer.yolo_det
    new = int(trainer.batch_size)
    old = next((int(b["batch"]) for b in reversed((session.extra.get("run_facts") or {}).get("batch_sizes") or [])),
               new * 2)
    step = session.optimizer_steps + 1
    if session.settings.mode == "strict":
        raise BatchHalvingRefused(
            f"yolo-det: out of memory at batch={old} in the first epoch; Ultralytics would halve the batch to {new} "
            f"and retry ({retries}/3), so the run would train another batch size than its settings say. Refused under "
            f"strict: set a batch that fits, e.g. batch={new} (or free GPU memory), or train under warn to accept "
            "the halving (it is then recorded)")
    run_facts.record_batch(session, new, from_step=step, why=f"out of memory at batch={old} (halving {retries}/3)")
    note = (f"Ultralytics halved the batch from {old} to {new} after an out-of-memory error in the first epoch "
            f"(retry {retries}/3, from step {step}): the run trains another batch size than its settings say")
    session.report.note(note)
    if session.is_main:
        LOGGER.warning(f"yolo-det: {note}")


def _absent(task: str) -> type:
    """Stands in for a task trainer this package lacks: the yolo-det class exists, using it says why not."""

    class Absent(api.trainer_base()):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            module, name = api.TASK_TRAINERS[task]
            raise ConfigError(f"ultralytics {api.version()} has no {module}.{name}; "
                              f"it cannot train task {task!r}")

    Absent.__name__ = Absent.__qualname__ = f"Absent{task.title()}Trainer"
    return Absent


_TASK_TRAINERS = api.task_trainers()
DetectionTrainer = _TASK_TRAINERS.get("detect") or _absent("detect")
SegmentationTrainer = _TASK_TRAINERS.get("segment") or _absent("segment")
PoseTrainer = _TASK_TRAINERS.get("pose") or _absent("pose")
OBBTrainer = _TASK_TRAINERS.get("obb") or _absent("obb")
ClassificationTrainer = _TASK_TRAINERS.get("classify") or _absent("classify")
RTDETRTrainer = _TASK_TRAINERS.get("rtdetr") or _absent("rtdetr")


class DeterministicTrainer(DeterminismMixin, DetectionTrainer):
    """Ultralytics' detection trainer (YOLOv8/11) under yolo-det's determinism modes.

    ``YOLO("yolov8n.yaml").train(data=..., trainer=DeterministicTrainer, deterministic="strict")``
    """


class DeterministicSegmentationTrainer(DeterminismMixin, SegmentationTrainer):
    """Ultralytics' instance segmentation trainer under yolo-det's determinism modes."""


class DeterministicPoseTrainer(DeterminismMixin, PoseTrainer):
    """Ultralytics' pose trainer under yolo-det's determinism modes."""


class DeterministicOBBTrainer(DeterminismMixin, OBBTrainer):
    """Ultralytics' oriented-box (OBB) trainer under yolo-det's determinism modes."""


class DeterministicClassificationTrainer(DeterminismMixin, ClassificationTrainer):
    """Ultralytics' classification trainer under yolo-det's determinism modes."""


class DeterministicRTDETRTrainer(DeterminismMixin, RTDETRTrainer):
    """Ultralytics' RT-DETR trainer under yolo-det's determinism modes."""


#: Ultralytics trainer -> the yolo-det trainer that extends it (importable by name, also in DDP ranks).
TRAINERS: Dict[type, type] = {
    DetectionTrainer: DeterministicTrainer,
    SegmentationTrainer: DeterministicSegmentationTrainer,
    PoseTrainer: DeterministicPoseTrainer,
    OBBTrainer: DeterministicOBBTrainer,
    ClassificationTrainer: DeterministicClassificationTrainer,
    RTDETRTrainer: DeterministicRTDETRTrainer,
}
# Their public path is the package's (recorded in determinism.json, imported by name in DDP ranks).
for _trainer in (DeterminismMixin, *TRAINERS.values()):
    _trainer.__module__ = __package__


def deterministic_trainer(trainer: Type[Any]) -> Type[Any]:
    """The yolo-det trainer for an Ultralytics trainer class (the class itself if it already is one).

    Trainers without a class of their own here (YOLO-World, YOLOE, ...) get ``DeterminismMixin``
    put in front of them in a class made once per trainer; DDP ranks of Ultralytics 8.4.145+
    receive it by value (cloudpickle), older releases cannot import it.
    """
    if isinstance(trainer, type) and issubclass(trainer, DeterminismMixin):
        return trainer
    if not callable(getattr(trainer, "_setup_train", None)):  # not a BaseTrainer-shaped class: train without us
        api.cannot_engage(f"its trainer {getattr(trainer, '__qualname__', trainer)!r} has no _setup_train",
                          api.requested_mode(), echo=LOGGER.warning)
        return trainer
    known = TRAINERS.get(trainer)
    if known is None:
        name = f"Deterministic{trainer.__name__}"
        known = TRAINERS[trainer] = type(name, (DeterminismMixin, trainer), {
            "__module__": __package__, "__qualname__": f"deterministic_trainer.<locals>.{name}",
            "__doc__": f"{trainer.__module__}.{trainer.__qualname__} under yolo-det's determinism modes.",
        })
    return known


def load_model(model: Any, task: Optional[str] = None) -> Any:
    """An Ultralytics model object for ``model`` as ``yolo`` builds it (RT-DETR by name, else ``YOLO``)."""
    if not isinstance(model, (str, os.PathLike)):
        return model
    if "rtdetr" in Path(str(model)).stem.lower():
        from ultralytics import RTDETR

        return RTDETR(str(model))
    from ultralytics import YOLO

    return YOLO(str(model), task=task)


def train(model: Any, **kwargs: Any) -> Any:
    """Train any Ultralytics model with the yolo-det trainer for its task; returns Ultralytics' metrics.

    ``model`` is a path (``yolov8n.yaml``, ``yolov8n-seg.yaml``, ``rtdetr-l.yaml``, ``last.pt``) or a
    model object (``YOLO``, ``RTDETR``, ...); ``task=`` picks the task of a yaml as ``yolo`` does.
    ``kwargs`` are Ultralytics training arguments plus ``deterministic='strict'|'warn'|'off'`` and
    the other ``deterministic_*`` keys. The trainer is the model's own (its ``task_map``) with
    :class:`DeterminismMixin` in front.
    """
    yolo = load_model(model, kwargs.pop("task", None))
    trainer = deterministic_trainer(yolo._smart_load("trainer"))  # Ultralytics' error names a model without one
    return yolo.train(trainer=trainer, **kwargs)


def enabled() -> bool:
    """Whether :func:`enable` is in effect in this process."""
    return getattr(getattr(api.model_class(), "_smart_load", None), "_yolo_det", False)


def enable() -> None:
    """From now on ``model.train(...)`` of every Ultralytics model trains with yolo-det's trainer for its task
    (and ``model.val()`` evaluates with NMS unclocked under strict/warn, recorded: :mod:`.evaluation`).

    Ultralytics picks a model's trainer from its ``task_map`` (``Model._smart_load("trainer")``);
    that lookup returns :func:`deterministic_trainer` of it afterwards. A ``trainer=`` you pass is
    used as given. Safe to call twice; :func:`disable` undoes it. ``yolo-det run`` calls this in
    the processes it launches. Where this package lacks a piece yolo-det needs (:data:`api.HOOKS`),
    strict (``YOLO_DET_DETERMINISTIC``) raises ConfigError naming it; otherwise it is said once.
    """
    Model = api.model_class()
    if enabled():
        return
    missing = api.missing_pieces()
    if missing:
        api.cannot_engage(f"it lacks {', '.join(missing)}", api.requested_mode(), echo=LOGGER.warning)
        return
    original = Model._smart_load

    def _smart_load(self: Any, key: str) -> Any:
        found = original(self, key)
        if key == "validator" and isinstance(found, type):  # model.val(): a standalone evaluation
            return deterministic_validator(found)
        if key == "predictor" and isinstance(found, type):  # model.predict()
            return deterministic_predictor(found)
        return deterministic_trainer(found) if key == "trainer" and isinstance(found, type) else found

    _smart_load._yolo_det = True  # type: ignore[attr-defined]
    _smart_load.__wrapped__ = original  # type: ignore[attr-defined]
    _smart_load.__doc__ = original.__doc__
    Model._smart_load = _smart_load
    ultralytics_tune.enable()  # the tuner's searches: a function of their seed


def disable() -> None:
    """Undo :func:`enable`: Ultralytics picks its own trainers again."""
    Model = api.model_class()
    ultralytics_tune.disable()

    while getattr(Model._smart_load, "_yolo_det", False):
        Model._smart_load = Model._smart_load.__wrapped__


_warning = version_warning()
if _warning:
    LOGGER.warning(_warning)

__all__ = [
    "ARG_NAME", "BackwardScaler", "CallerState", "DeterminismMixin", "DeterministicClassificationTrainer",
    "DeterministicOBBTrainer", "DeterministicPoseTrainer", "DeterministicRTDETRTrainer",
    "DeterministicSegmentationTrainer", "DeterministicTrainer", "ENV_INPUTS", "LOADER_SEEDED_SINCE", "ModeInputs",
    "ResumedRun", "SUPPORTED", "ScaledLoss", "TRAINERS", "compile_conflict", "deterministic_trainer",
    "deterministic_predictor", "deterministic_validator", "disable",
    "enable", "enabled", "load_model", "seed_train_loader", "train", "ultralytics_version", "version_warning",
]
