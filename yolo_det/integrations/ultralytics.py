"""Ultralytics YOLOv8/11 training under yolo-det's strict|warn|off modes.

Ultralytics' own ``deterministic=True`` is warn-only, ``deterministic=False`` forces determinism
off, and training switches determinism off when it ends. Its train loader ignored the user's
seed before 8.4.124, no callback fires around backward, and DDP ranks re-create the trainer from
its import path (callbacks added in the parent are lost on older releases). The trainer here
keeps the mode the user chose for the whole run, seeds the train loader, wraps every backward in
the session's backward context, passes its settings to DDP ranks through the environment, and
puts the caller's global flags back when training ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Mapping, MutableMapping, Optional, Tuple

import torch
from torch.utils.data import DistributedSampler

try:
    import ultralytics
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("yolo-det's Ultralytics integration needs the ultralytics package: "
                      "pip install 'yolo-det[ultralytics]'") from exc
from ultralytics.cfg import get_cfg
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.utils import DEFAULT_CFG, LOGGER

from ..core import determinism, environment
from ..proof import fingerprint
from ..core.mode import HYP_KEYS, ConfigError, Settings, resolve, validate_mode
from ..session import Session, configure
from ..core.seeding import make_generator, seed_worker
from . import ultralytics_streams as _streams

#: The Ultralytics releases this integration is written and checked against.
SUPPORTED = ">=8.1,<8.5"
_SUPPORTED_RANGE = ((8, 1), (8, 5))
#: First release whose train loader derives its shuffle seed from the user's ``seed``.
LOADER_SEEDED_SINCE = (8, 4, 124)
#: Environment variable that carries a parent trainer's mode settings to its DDP ranks.
ENV_INPUTS = "YOLO_DET_ULTRALYTICS"
#: How errors and determinism.json name Ultralytics' own ``deterministic`` argument.
ARG_NAME = "Ultralytics argument"
#: Environment variables Ultralytics or yolo-det change during training and restore after it.
CALLER_ENV = (environment.CUBLAS_VAR, "PYTHONHASHSEED", "YOLO_DET_SEED", "YOLO_DET_RANK", ENV_INPUTS)
#: hyp-style key -> keyword of :func:`yolo_det.configure`.
_CONFIGURE_ARGS = {
    "deterministic": "mode",
    "deterministic_backward": "backward",
    "deterministic_allow": "allow",
    "deterministic_ops": "ops",
    "deterministic_fill_memory": "fill_uninitialized_memory",
}

COMPILE_STRICT = (
    "compile={value!r} cannot run under deterministic=strict: a torch.compile'd backward keeps the "
    "determinism flags it was compiled with, and ops fused into generated kernels may not raise PyTorch's "
    "nondeterminism alerts, so strict cannot be guaranteed. Train with compile=False, or with "
    "deterministic=warn to compile and get a best-effort report."
)
COMPILE_WARN = (
    "compile={value!r} with deterministic=warn: the compiled backward keeps the flags it was compiled with "
    "and ops fused into generated kernels may not be reported; the violation report can be incomplete. "
    "Use compile=False for a complete report."
)


def ultralytics_version(version: Optional[str] = None) -> Tuple[int, ...]:
    """The installed (or given) Ultralytics version as a tuple of ints, e.g. (8, 4, 190)."""
    text = (version or ultralytics.__version__).split("+")[0]
    return tuple(int("".join(ch for ch in part if ch.isdigit()) or 0) for part in text.split(".")[:3])


def version_warning(version: Optional[str] = None) -> Optional[str]:
    """A warning when the Ultralytics version is outside :data:`SUPPORTED`, else None."""
    low, high = _SUPPORTED_RANGE
    if low <= ultralytics_version(version)[:2] < high:
        return None
    found = version or ultralytics.__version__
    return (f"yolo-det's Ultralytics trainer supports ultralytics{SUPPORTED}; found {found}. "
            "It may not hook into training correctly.")


@dataclass(frozen=True)
class ModeInputs:
    """What decides a trainer's determinism settings, before resolution.

    ``explicit`` holds yolo-det keys passed to the trainer (``deterministic='strict'``,
    ``deterministic_allow=[...]``, ...; source ``cli``); ``ultralytics_arg`` is Ultralytics' own
    boolean ``deterministic`` when the user passed it (True -> warn, False -> off; source ``hyp``).
    Precedence: explicit > ``YOLO_DET_*`` environment > Ultralytics' argument > default (warn).
    """

    explicit: Mapping[str, Any] = field(default_factory=dict)
    ultralytics_arg: Optional[bool] = None

    @classmethod
    def from_overrides(cls, overrides: MutableMapping[str, Any],
                       env: Optional[Mapping[str, str]] = None) -> "ModeInputs":
        """Take yolo-det's keys out of Ultralytics ``overrides`` (in place) and return the inputs.

        In a DDP rank started by a :class:`DeterministicTrainer`, the parent's inputs come from
        ``$YOLO_DET_ULTRALYTICS`` instead: the rank's overrides no longer show what the user typed.
        """
        env = os.environ if env is None else env
        explicit = {key: overrides.pop(key) for key in list(overrides) if key in HYP_KEYS and key != "deterministic"}
        value = overrides.get("deterministic")
        arg = None
        if isinstance(value, str):
            explicit["deterministic"] = validate_mode(value, "deterministic=")
        elif isinstance(value, bool):
            arg = value
        inherited = env.get(ENV_INPUTS)
        if inherited:
            return cls.from_json(inherited)
        return cls({k: v for k, v in explicit.items() if v is not None}, arg)

    def hyp_layer(self, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """Ultralytics' argument as a hyp-layer mode, empty when ``YOLO_DET_DETERMINISTIC`` overrides it."""
        env = os.environ if env is None else env
        if self.ultralytics_arg is None or env.get(HYP_KEYS["deterministic"]):
            return {}
        return {"deterministic": "warn" if self.ultralytics_arg else "off"}

    def resolve(self, env: Optional[Mapping[str, str]] = None) -> Settings:
        """The settings these inputs give (ConfigError naming the source on a bad value)."""
        return resolve(cli=self.explicit, hyp=self.hyp_layer(env), env=env, hyp_name=ARG_NAME)

    def configure(self, seed: Optional[int]) -> Session:
        """Start this process's :class:`~yolo_det.runtime.Session` from these inputs."""
        kwargs = {_CONFIGURE_ARGS[key]: value for key, value in self.explicit.items()}
        return configure(hyp=self.hyp_layer(), hyp_name=ARG_NAME, seed=seed, **kwargs)

    def to_json(self) -> str:
        explicit = {k: list(v) if isinstance(v, tuple) else v for k, v in self.explicit.items()}
        return json.dumps({"explicit": explicit, "ultralytics_arg": self.ultralytics_arg})

    @classmethod
    def from_json(cls, text: str) -> "ModeInputs":
        try:
            data = json.loads(text)
            return cls(dict(data["explicit"]), data["ultralytics_arg"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"environment: {ENV_INPUTS}={text!r} is not valid ({exc}); unset it") from exc


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


def compile_conflict(mode: str, value: Any) -> Optional[str]:
    """Refuse ``compile`` under strict (ConfigError); return a warning for warn; None otherwise."""
    if not value or mode == "off":
        return None
    if mode == "strict":
        raise ConfigError(COMPILE_STRICT.format(value=value))
    return COMPILE_WARN.format(value=value)


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
    Ultralytics' boolean ``deterministic`` (True -> warn, False -> off). ``self.yolo_det`` is the
    run's :class:`~yolo_det.runtime.Session`. Define subclasses at module level in an importable
    module: DDP ranks re-create the trainer from its import path.
    """

    yolo_det: Session

    def __init__(self, cfg: Any = DEFAULT_CFG, overrides: Optional[Dict[str, Any]] = None,
                 _callbacks: Optional[dict] = None) -> None:
        overrides = dict(overrides or {})
        inputs = ModeInputs.from_overrides(overrides)
        settings = inputs.resolve()
        overrides["deterministic"] = settings.mode != "off"  # Ultralytics' init_seeds and args.yaml follow the mode
        preview = get_cfg(cfg, overrides)
        compile_conflict(settings.mode, getattr(preview, "compile", False))
        self._yolo_det_inputs = inputs
        self._yolo_det_caller = CallerState.capture()
        self._yolo_det_trains_here = False
        # Fingerprinting starts in _setup_train: a DDP parent never trains, and its log would clash with rank 0's.
        with _env_without(fingerprint.ENV_VAR):
            self.yolo_det = inputs.configure(seed=preview.seed)
        try:
            super().__init__(cfg, overrides, _callbacks)
            self._yolo_det_after_init()
        except BaseException:
            self._yolo_det_close(save=False, status="failed")
            raise

    def _yolo_det_after_init(self) -> None:
        """Undo what Ultralytics' init_seeds changed and record the run's Ultralytics facts."""
        session = self.yolo_det
        determinism.restore(session.flags_applied)
        cublas = session.cublas.get("value")
        if session.cublas.get("state") in ("set", "launch") and cublas:
            os.environ[environment.CUBLAS_VAR] = str(cublas)
        compiled = getattr(self.args, "compile", False)
        note = compile_conflict(session.settings.mode, compiled)
        if note:
            LOGGER.warning(f"yolo-det: {note}")
            session.report.note(note)
        session.extra["ultralytics"] = {
            "version": ultralytics.__version__,
            "supported": SUPPORTED,
            "trainer": f"{type(self).__module__}.{type(self).__qualname__}",
            "deterministic_arg": self._yolo_det_inputs.ultralytics_arg,
            "compile": compiled,
            "train_loader": {
                "seeded_by": "yolo-det (make_generator(seed, rank), seed_worker)",
                "ultralytics_honours_seed": ultralytics_version() >= LOADER_SEEDED_SINCE,
            },
            "status": "initialised",
        }

    def _yolo_det_close(self, save: bool, status: str) -> None:
        """Stop the session, write determinism.json if this process trained, restore the caller."""
        session = self.yolo_det
        try:
            session.extra.setdefault("ultralytics", {})["status"] = status
            session.finish(getattr(self, "save_dir", None) if save else None, echo=LOGGER.info if save else _quiet)
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
            status = f"failed: {type(exc).__name__}: {exc}"[:1000]
            raise
        finally:
            self._yolo_det_close(save=self._yolo_det_trains_here, status=status)

    def set_model_attributes(self) -> None:
        """Register the model (before compile, DDP, optimizer and EMA see it); strict swaps in replacements."""
        super().set_model_attributes()
        self.yolo_det.track(self.model)

    def _setup_train(self, *args: Any, **kwargs: Any) -> None:
        """Build the training state as Ultralytics does, then route backward through the session.

        Also starts fingerprinting when ``YOLO_DET_FINGERPRINT`` is set: only processes that train get here.
        """
        self._yolo_det_trains_here = True
        super()._setup_train(*args, **kwargs)
        if getattr(self, "ema", None) is not None:
            self.yolo_det.extra["ema"] = self.ema
        self.scaler = BackwardScaler(self.scaler, self.yolo_det, lambda: getattr(self, "loss_items", None))
        determinism.restore(self.yolo_det.flags_applied)
        fingerprint.start_from_env(self.yolo_det)
        self._yolo_det_resume = _streams.UltralyticsResume(self)  # last: resume restores the RNG states
        self._yolo_det_resume.start()

    def save_model(self) -> Any:
        """Ultralytics' checkpoint save, then the resume sidecar beside last.pt (strict/warn)."""
        saved = super().save_model()
        hooks = getattr(self, "_yolo_det_resume", None)
        if hooks is not None and saved is not False:
            hooks.save()
        return saved

    def get_dataloader(self, dataset_path: Any, batch_size: int = 16, rank: int = 0, mode: str = "train") -> Any:
        """Ultralytics' loader; the train loader's shuffle and workers seeded from ``args.seed``."""
        loader = super().get_dataloader(dataset_path, batch_size, rank, mode)
        if mode == "train":
            seed_train_loader(loader, self.args.seed, self.yolo_det.rank)
            if self.yolo_det.settings.mode != "off":  # per-sample streams: batches independent of workers
                loader = _streams.stream_loader(loader, self.args.seed)
        return loader


class DeterministicTrainer(DeterminismMixin, DetectionTrainer):
    """Ultralytics' detection trainer (YOLOv8/11) under yolo-det's determinism modes.

    ``YOLO("yolov8n.yaml").train(data=..., trainer=DeterministicTrainer, deterministic="strict")``
    """


def train(model: Any, **kwargs: Any) -> Any:
    """Train a detection model with :class:`DeterministicTrainer`; returns Ultralytics' metrics.

    ``model`` is a path (``yolov8n.yaml``, ``last.pt``) or a ``YOLO`` object; ``kwargs`` are
    Ultralytics training arguments plus ``deterministic='strict'|'warn'|'off'`` and the other
    ``deterministic_*`` keys. Raises ConfigError for other tasks (use :class:`DeterminismMixin`).
    """
    from ultralytics import YOLO

    yolo = YOLO(model) if isinstance(model, (str, os.PathLike)) else model
    if yolo.task != "detect":
        raise ConfigError(
            f"model {model!r} is a {yolo.task!r} model; DeterministicTrainer trains detection models. For other "
            "tasks, define `class T(yolo_det.ultralytics.DeterminismMixin, <Ultralytics trainer>)` in an importable "
            "module and pass trainer=T."
        )
    return yolo.train(trainer=DeterministicTrainer, **kwargs)


_warning = version_warning()
if _warning:
    LOGGER.warning(_warning)

__all__ = [
    "ARG_NAME", "BackwardScaler", "CallerState", "DeterminismMixin", "DeterministicTrainer", "ENV_INPUTS",
    "LOADER_SEEDED_SINCE", "ModeInputs", "SUPPORTED", "ScaledLoss", "compile_conflict", "seed_train_loader",
    "train", "ultralytics_version", "version_warning",
]
