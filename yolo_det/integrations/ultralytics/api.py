"""Every private Ultralytics API yolo-det touches, found by feature (attribute, signature), not by version.

Ultralytics 8.0 to 8.4 and the forks that vendor a copy of the package (THU-MIG/yolov10 at 8.1.34,
sunsmarterjie/yolov12 at 8.3.63, ...) share the trainer's shape but move helpers between modules.
The rest of yolo-det asks this module, never ``ultralytics.*`` internals directly, so a vendored copy
with another version number gets whatever its pieces allow. :data:`HOOKS` is the table of what is
touched, where it was found (releases checked: 8.0.238, 8.1.47, 8.2.103, 8.3.63, 8.3.240, 8.4.190)
and what yolo-det does where it is missing; :func:`coverage` evaluates it for the imported package.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ...core import env_names


@dataclass(frozen=True)
class Hook:
    """One private Ultralytics API yolo-det relies on."""

    name: str
    what: str
    found: str
    fallback: str
    #: Without it yolo-det cannot engage at all (strict refuses, warn says so once).
    essential: bool = False
    #: Whether the fallback loses something yolo-det would otherwise give (it is reported then).
    loses: bool = True


#: The documented table (docs/ultralytics.md prints the same rows).
HOOKS: Tuple[Hook, ...] = (
    Hook("Model._smart_load", "the model's trainer lookup (enable(), yolo-det run)", "8.0 - 8.4",
         "none: pass trainer=deterministic_trainer(cls) by hand", essential=True),
    Hook("BaseTrainer._setup_train", "backward context, fingerprints, resume state", "8.0 - 8.4",
         "none: yolo-det cannot wrap backward", essential=True),
    Hook("BaseTrainer.scaler", "the GradScaler whose scale(loss).backward() is wrapped", "8.0 - 8.4",
         "none: yolo-det cannot wrap backward", essential=True),
    Hook("BaseTrainer.get_dataloader", "seeded train loader, per-sample streams", "8.0 - 8.4",
         "Ultralytics' loader (constant seed before 8.4.124; batches depend on workers)"),
    Hook("BaseTrainer.validate", "NMS without its clock, validation records", "8.0 - 8.4",
         "Ultralytics' validation (NMS time limit stays)"),
    Hook("BaseTrainer.save_model", "the resume sidecar beside last.pt", "8.0 - 8.4",
         "no sidecar: a resume is not exact"),
    Hook("BaseTrainer.callbacks", "the resumed model, EMA and RNG states loaded again before the release's own "
         "first-epoch callbacks", "8.0 - 8.4", "loaded after them (add_callback)"),
    Hook("InfiniteDataLoader.reset", "the data stream restarted at the resumed epoch and after close_mosaic",
         "8.0 - 8.4", "the stream is not re-positioned: a resume is not exact"),
    Hook("non_max_suppression", "NMS entry point validators call",
         "utils/ops.py 8.0 - 8.3.x; utils/nms.py late 8.3 - 8.4",
         "the NMS time limit stays (reported)"),
    Hook("get_cfg", "argument check before the trainer reads them (HUB 'session' dropped)", "8.0 - 8.4",
         "none", essential=True),
    Hook("check_cfg", "type checks of `yolo-det ultralytics train` arguments", "8.1 - 8.4",
         "types are checked when the trainer reads its arguments", loses=False),
    Hook("torch_load", "reading a checkpoint's train_args (resume)", "utils/patches.py 8.2 - 8.4",
         "torch.load(weights_only=False)", loses=False),
    Hook("build_dataloader seed", "whether the release seeds its train loader from seed=", "8.4.124+",
         "yolo-det seeds the loader itself (every release)", loses=False),
)


def version() -> str:
    """The imported package's ``__version__`` (a fork's vendored number)."""
    import ultralytics

    return str(getattr(ultralytics, "__version__", "0"))


def version_tuple(text: Optional[str] = None) -> Tuple[int, ...]:
    """A version as a tuple of ints, e.g. (8, 4, 190); used for messages, not to pick code paths."""
    text = (text or version()).split("+")[0]
    return tuple(int("".join(ch for ch in part if ch.isdigit()) or 0) for part in text.split(".")[:3])


def package_info() -> Dict[str, Any]:
    """Where the imported ``ultralytics`` comes from, and whether it is a vendored copy (a fork)."""
    import ultralytics

    path = Path(getattr(ultralytics, "__file__", "") or ".").resolve().parent
    try:
        from importlib import metadata

        dist = metadata.distribution("ultralytics")
        files = [Path(dist.locate_file(f)).resolve() for f in (dist.files or []) if f.name == "__init__.py"]
        installed = dist.version if any(f.parent == path for f in files) else None
    except Exception:  # noqa: BLE001 - no distribution metadata: a copied package
        installed = None
    return {"version": version(), "path": str(path), "vendored": installed is None}


def optional(module: str, name: str) -> Any:
    """``module.name`` if this package has it, else None (a release or fork without it)."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


#: task -> (module, class) of Ultralytics' own trainers; a release without one simply lacks it.
TASK_TRAINERS = {
    "detect": ("ultralytics.models.yolo.detect", "DetectionTrainer"),
    "segment": ("ultralytics.models.yolo.segment", "SegmentationTrainer"),
    "pose": ("ultralytics.models.yolo.pose", "PoseTrainer"),
    "obb": ("ultralytics.models.yolo.obb", "OBBTrainer"),
    "classify": ("ultralytics.models.yolo.classify", "ClassificationTrainer"),
    "rtdetr": ("ultralytics.models.rtdetr.train", "RTDETRTrainer"),
}


def task_trainers() -> Dict[str, type]:
    """Ultralytics' trainer class for each task this package has."""
    found = {task: optional(module, name) for task, (module, name) in TASK_TRAINERS.items()}
    return {task: cls for task, cls in found.items() if isinstance(cls, type)}


def model_class() -> type:
    """``ultralytics.engine.model.Model``, the base of YOLO, RTDETR and fork model classes."""
    from ultralytics.engine.model import Model

    return Model


def trainer_base() -> type:
    """``ultralytics.engine.trainer.BaseTrainer``."""
    from ultralytics.engine.trainer import BaseTrainer

    return BaseTrainer


def missing_pieces(table: Optional[Dict[str, Dict[str, Any]]] = None) -> List[str]:
    """The essential hooks (:data:`HOOKS`) this package lacks; empty when yolo-det can engage."""
    table = coverage() if table is None else table
    return [hook.name for hook in HOOKS if hook.essential and not table[hook.name]["available"]]


def _source(func: Any) -> str:
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return ""


def coverage() -> Dict[str, Dict[str, Any]]:
    """Each row of :data:`HOOKS`: whether this package offers it, and the fallback when not."""
    base = trainer_base()
    have = {
        "Model._smart_load": callable(getattr(model_class(), "_smart_load", None)),
        "BaseTrainer._setup_train": callable(getattr(base, "_setup_train", None)),
        "BaseTrainer.scaler": "self.scaler" in _source(getattr(base, "_setup_train", None)),
        "BaseTrainer.get_dataloader": callable(getattr(base, "get_dataloader", None)),
        "BaseTrainer.validate": callable(getattr(base, "validate", None)),
        "BaseTrainer.save_model": callable(getattr(base, "save_model", None)),
        "BaseTrainer.callbacks": "self.callbacks" in _source(getattr(base, "__init__", None)),
        "InfiniteDataLoader.reset": callable(getattr(optional("ultralytics.data.build", "InfiniteDataLoader"),
                                                     "reset", None)),
        "non_max_suppression": bool(nms_modules()),
        "get_cfg": optional("ultralytics.cfg", "get_cfg") is not None,
        "check_cfg": optional("ultralytics.cfg", "check_cfg") is not None,
        "torch_load": optional("ultralytics.utils.patches", "torch_load") is not None,
        "build_dataloader seed": loader_honours_seed(),
    }
    return {hook.name: {"available": bool(have[hook.name]), **({} if have[hook.name] else {"fallback": hook.fallback})}
            for hook in HOOKS}


def not_covered(table: Dict[str, Dict[str, Any]]) -> List[str]:
    """``name: fallback`` for each missing hook whose fallback loses something (reported on stdout)."""
    loses = {hook.name for hook in HOOKS if hook.loses}
    return [f"{name}: {row['fallback']}" for name, row in table.items() if not row["available"] and name in loses]


# -- arguments --------------------------------------------------------------------------------

def default_cfg() -> Any:
    """Ultralytics' default training configuration (``DEFAULT_CFG``)."""
    from ultralytics.utils import DEFAULT_CFG

    return DEFAULT_CFG


def default_cfg_dict() -> Dict[str, Any]:
    """Ultralytics' default arguments as a dict (the keys ``get_cfg`` accepts)."""
    from ultralytics.utils import DEFAULT_CFG_DICT

    return dict(DEFAULT_CFG_DICT)


def preview_args(cfg: Any, overrides: Dict[str, Any]) -> Any:
    """The arguments a trainer will read, without the keys the trainer takes out itself first.

    ``Model.train`` of late 8.3 releases passes the HUB ``session`` in the overrides and the trainer
    pops it before ``get_cfg``; ``get_cfg`` would reject it ("'session' is not a valid YOLO argument").
    """
    from ultralytics.cfg import get_cfg

    known = set(default_cfg_dict())
    return get_cfg(cfg, {k: v for k, v in overrides.items() if k in known})


def check_types(values: Dict[str, Any]) -> None:
    """Ultralytics' type and range checks of arguments (``check_cfg``), where the release has them."""
    check = optional("ultralytics.cfg", "check_cfg")
    if check is not None:
        check(dict(values))


def cli_parsers() -> Tuple[Callable[[List[str]], List[str]], Callable[[str], Tuple[str, Any]], Any, Any]:
    """``merge_equals_args``, ``parse_key_value_pair``, ``TASKS`` and ``MODES`` of ``ultralytics.cfg``."""
    from ultralytics import cfg

    return cfg.merge_equals_args, cfg.parse_key_value_pair, cfg.TASKS, cfg.MODES


# -- NMS ------------------------------------------------------------------------------------------

def nms_modules() -> List[Any]:
    """The modules whose ``non_max_suppression`` validators call through the module attribute.

    Late 8.3 and 8.4 call ``utils.nms.non_max_suppression``; earlier releases ``utils.ops``'s. Both
    are returned where both exist, so a validator calling either goes through the wrapper.
    """
    found = []
    for name in ("ultralytics.utils.nms", "ultralytics.utils.ops"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "non_max_suppression", None)):
            found.append(module)
    return found


def nms_time_base(function: Callable[..., Any]) -> float:
    """The constant of the release's ``time_limit = BASE + max_time_img * bs`` (0.5 in 8.0, 2.0 later)."""
    try:
        tree = ast.parse(_source(getattr(function, "__wrapped__", function)))
    except SyntaxError:
        return 2.0
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "time_limit" for t in node.targets):
            value = node.value
            if isinstance(value, ast.BinOp) and isinstance(value.left, ast.Constant) \
                    and isinstance(value.left.value, (int, float)):
                return float(value.left.value)
    return 2.0


# -- data, checkpoints, runs ----------------------------------------------------------------------

def run_first(trainer: Any, event: str, callback: Callable[[Any], None]) -> bool:
    """Register ``callback`` for ``event`` ahead of the callbacks already there (the release's own);
    False when the trainer has no callback table and it was appended with ``add_callback``."""
    table = getattr(trainer, "callbacks", None)
    if isinstance(table, dict) and isinstance(table.get(event), list):
        table[event].insert(0, callback)
        return True
    trainer.add_callback(event, callback)
    return False


def mosaic_closes_at_one_epoch_only(trainer: Optional[type] = None) -> bool:
    """Whether the training loop closes mosaic only ``if epoch == (self.epochs - self.args.close_mosaic)``.

    Releases before 8.4 do, while their ``resume_training`` closes it whenever ``start_epoch >
    epochs - close_mosaic``: with ``epochs < close_mosaic`` an uninterrupted run keeps mosaic and a
    resumed one drops it. 8.4 closes it ``epoch >= ...`` in the loop, consistently.
    """
    try:
        tree = ast.parse(_source(_release_method(trainer or trainer_base(), "_do_train")))
    except (AttributeError, SyntaxError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq) \
                and isinstance(node.left, ast.Name) and node.left.id == "epoch" \
                and "close_mosaic" in ast.dump(node.comparators[0]):
            return True
    return False


def _release_method(cls: type, name: str) -> Any:
    """``cls``'s method ``name`` as the release (or a fork) defines it: yolo-det's own wrappers in the MRO skipped."""
    for klass in cls.__mro__:
        method = vars(klass).get(name)
        if method is not None and not klass.__module__.startswith("yolo_det."):
            return method
    raise AttributeError(name)


def unbuffer_mosaic(transform: Any) -> bool:
    """Make a Mosaic-like transform draw partners from the whole dataset; True if it had a buffer to turn off.

    8.4 reads ``transform.buffer_enabled``; earlier releases call ``self.get_indexes()`` whose
    ``buffer=True`` default picks from ``dataset.buffer`` (the images this worker loaded lately).
    """
    if getattr(transform, "buffer_enabled", False) is True:
        transform.buffer_enabled = False
        return True
    method = getattr(type(transform), "get_indexes", None)
    if callable(method) and "get_indexes" not in vars(transform):
        try:
            parameter = inspect.signature(method).parameters.get("buffer")
        except (TypeError, ValueError):
            parameter = None
        if parameter is not None and parameter.default is True:
            vars(transform)["get_indexes"] = functools.partial(method, transform, buffer=False)
            return True
    return False


def loader_honours_seed() -> bool:
    """Whether the release's ``build_dataloader`` derives its generator from the user's seed (8.4.124+)."""
    build = optional("ultralytics.data.build", "build_dataloader")
    return "initial_seed" in _source(build)


def load_checkpoint(path: os.PathLike) -> Any:
    """A checkpoint read as the release reads it (``utils.patches.torch_load``, else ``torch.load``)."""
    load = optional("ultralytics.utils.patches", "torch_load")
    if load is None:
        return torch.load(str(path), map_location="cpu", weights_only=False)
    return load(str(path), map_location="cpu", weights_only=False)


def latest_run() -> Optional[str]:
    """The newest ``last.pt`` under the runs folder, as ``resume=True`` finds it."""
    get_latest_run = optional("ultralytics.utils.files", "get_latest_run")
    return get_latest_run() if get_latest_run is not None else None


def logger() -> Any:
    """Ultralytics' LOGGER."""
    from ultralytics.utils import LOGGER

    return LOGGER


# -- engaging ------------------------------------------------------------------------------------

_warned: set = set()


def cannot_engage(what: str, mode: Optional[str], echo: Callable[[str], None] = print) -> None:
    """yolo-det cannot train this package: strict raises ConfigError (exit 2), warn says it once."""
    text = (f"yolo-det cannot engage with ultralytics {version()} ({package_info()['path']}): {what}. "
            "Training runs as plain Ultralytics, without yolo-det's determinism.")
    if mode == "strict":
        from ...core.mode import ConfigError

        raise ConfigError(text + " strict refuses: use a release listed in docs/ultralytics.md or unset strict")
    if mode != "off" and text not in _warned:
        _warned.add(text)
        echo(f"yolo-det: warning: {text}")


def requested_mode(env: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The mode asked for in the environment (``YOLO_DET_DETERMINISTIC``), lower-cased, or None."""
    value = (os.environ if env is None else env).get(env_names.DETERMINISTIC, "").strip().lower()
    return value or None


__all__ = [
    "HOOKS", "Hook", "TASK_TRAINERS", "cannot_engage", "check_types", "cli_parsers", "coverage", "default_cfg",
    "default_cfg_dict", "latest_run", "load_checkpoint", "loader_honours_seed", "logger", "missing_pieces",
    "model_class", "mosaic_closes_at_one_epoch_only", "nms_modules", "nms_time_base", "not_covered",
    "optional", "package_info", "preview_args", "requested_mode", "task_trainers", "trainer_base",
    "unbuffer_mosaic", "version", "version_tuple",
]

