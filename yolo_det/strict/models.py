"""Build a model on CPU for an audit: a YOLOv5 cfg (from a repo's own code or the installed
``yolov5`` package), an Ultralytics model yaml, or any ``file.py:function`` factory.

Nothing is downloaded: weights are random, yaml files come from disk or the packages.
Every failure is a :class:`BuildError` whose message says what was tried.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import logging
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import torch


class BuildError(RuntimeError):
    """The model could not be built; the message says what was tried and what to change."""


@dataclass
class BuiltModel:
    """A model ready to audit, the inputs to run it on (None: a random image batch), a name, and
    notes on what the audit of it does not cover."""

    model: torch.nn.Module
    inputs: Optional[Tuple[Any, ...]]
    name: str
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: the file the model was built from (a yaml, a factory's .py), as audited: a bare name may resolve to a package's
    file: Optional[str] = None


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Silence the model builders' logging, prints and warnings; yields what they printed."""
    buffer = io.StringIO()
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            warnings.simplefilter("ignore")
            yield buffer
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _isolated_imports(path: Path, names: Sequence[str]) -> Iterator[None]:
    """Import from ``path`` first, with fresh copies of the top-level packages ``names``;
    afterwards ``sys.path`` and those ``sys.modules`` entries are as they were."""
    def owned(key: str) -> bool:
        return key.split(".")[0] in names

    saved = {k: v for k, v in sys.modules.items() if owned(k)}
    for key in saved:
        del sys.modules[key]
    sys.path.insert(0, str(path))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(path))
        for key in [k for k in sys.modules if owned(k)]:
            del sys.modules[key]
        sys.modules.update(saved)


def _failure(what: str, exc: BaseException, output: str = "") -> BuildError:
    tail = output.strip().splitlines()[-3:]
    detail = f" (its output ended: {' | '.join(tail)})" if tail else ""
    return BuildError(f"{what} failed: {type(exc).__name__}: {exc}{detail}")


# -- YOLOv5 -----------------------------------------------------------------------------------
def _yolov5_package() -> Path:
    try:
        import yolov5  # noqa: F401  (the PyPI package)
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"no --repo given and the yolov5 package cannot be imported ({exc}); "
                         "pass --repo PATH_TO_YOLOV5 or pip install yolov5") from None
    return Path(sys.modules["yolov5"].__file__).resolve().parent


def names_one_file(path: str) -> bool:
    """Whether a model path names one file and nothing else may stand for it: absolute, ``~``, ``./`` or ``../``."""
    return path.startswith(("/", "~", "./", "../", ".\\", "..\\")) or Path(path).is_absolute()


def missing_file(option: str, path: str) -> Optional[BuildError]:
    """The refusal of a model path that names one file (:func:`names_one_file`) which does not exist, else None:
    such a path is never replaced by a package's file of the same name."""
    if not names_one_file(path) or Path(path).expanduser().is_file():
        return None
    return BuildError(f"{option} {path}: no such file ({Path(path).expanduser().resolve()}); give the path of an "
                      "existing model yaml, or a bare name such as yolov5s.yaml for the package's own")


def _find_cfg(cfg: str, roots: Sequence[Path]) -> Path:
    """The yaml ``--cfg`` names: that file where it names one; else relative to the working folder or a root; a
    bare name (no folder part) also by name under a root's ``models/`` (one match)."""
    refused = missing_file("--cfg", cfg)
    if refused is not None:
        raise refused
    given = Path(cfg).expanduser()
    candidates: List[Path] = [given] + [root / given for root in roots]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    bare = len(given.parts) == 1
    for root in roots if bare else ():
        matches = sorted((root / "models").rglob(given.name)) if (root / "models").is_dir() else []
        if len(matches) == 1:
            return matches[0].resolve()
    looked = ", ".join(str(p) for p in [Path.cwd()] + list(roots))
    where = " and their models/ folders" if bare else " (a path with a folder part is not searched for by name)"
    raise BuildError(f"--cfg {cfg}: no such file (looked in {looked}{where})")


def build_yolov5(cfg: str, repo: Optional[str] = None) -> BuiltModel:
    """YOLOv5 ``Model(cfg)`` from ``repo``'s own ``models/yolo.py`` (custom modules included),
    or from the installed ``yolov5`` package when ``repo`` is None."""
    if repo is None:
        with _quiet():
            package = _yolov5_package()
        path = _find_cfg(cfg, [package])
        with _quiet() as output:
            try:
                from yolov5.models.yolo import Model

                return BuiltModel(Model(str(path)), None, path.name, file=str(path))
            except Exception as exc:  # noqa: BLE001
                raise _failure(f"building {path} with the yolov5 package", exc, output.getvalue()) from None
    root = Path(repo).resolve()
    code = root / "models" / "yolo.py"
    if not code.is_file():
        raise BuildError(f"--repo {repo}: {code} not found; point --repo at a YOLOv5-style repository")
    path = _find_cfg(cfg, [root])
    text = code.read_text(encoding="utf-8", errors="ignore")
    package_style = f"from {root.name}.models" in text  # e.g. a copy of the PyPI yolov5 package
    import_root, module, names = ((root.parent, f"{root.name}.models.yolo", [root.name]) if package_style
                                  else (root, "models.yolo", ["models", "utils"]))
    with _quiet() as output, _isolated_imports(import_root, names):
        try:
            Model = importlib.import_module(module).Model
            return BuiltModel(Model(str(path)), None, path.name, file=str(path))
        except Exception as exc:  # noqa: BLE001
            raise _failure(f"building {path} with {root}/models/yolo.py", exc, output.getvalue()) from None


# -- Ultralytics ------------------------------------------------------------------------------
def build_ultralytics(cfg: str) -> BuiltModel:
    """An Ultralytics model from a yaml (``yolov8n.yaml``, ``yolo11s-seg.yaml``, ``rtdetr-l.yaml``)."""
    refused = missing_file("--ultralytics", cfg)
    if refused is not None:
        raise refused
    with _quiet() as output:
        try:
            from ultralytics.nn import tasks
        except Exception as exc:  # noqa: BLE001
            raise BuildError(f"--ultralytics needs the ultralytics package ({exc}); pip install ultralytics") from None
        try:
            spec, file = _ultralytics_spec(tasks, cfg)
        except Exception as exc:  # noqa: BLE001
            raise BuildError(f"--ultralytics {cfg}: cannot load the model yaml ({exc})") from None
        name = Path(str(spec.get("yaml_file", cfg))).name
        task = tasks.guess_model_task(spec)
        model_class, notes = _ultralytics_class(tasks, name, task)
        if model_class is None:
            raise BuildError(f"--ultralytics {cfg}: task {task!r} has no model class in this ultralytics "
                             f"({getattr(sys.modules.get('ultralytics'), '__version__', '?')}); audit it with --model "
                             "and a factory that builds it")
        try:
            return BuiltModel(model_class(spec, verbose=False), None, name, notes, file=file)
        except Exception as exc:  # noqa: BLE001
            raise _failure(f"building {name} with ultralytics ({model_class.__name__})", exc, output.getvalue()) from None


def _ultralytics_spec(tasks: Any, cfg: str) -> Tuple[dict, Optional[str]]:
    """``tasks.yaml_model_load(cfg)`` and the file it read: the last path its ``check_yaml`` found (a bare name
    resolves to the package's cfg/models/, ``yolov8n.yaml`` to ``yolov8.yaml`` at scale n); None where this
    release resolves it otherwise."""
    original = getattr(tasks, "check_yaml", None)
    found: List[str] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if result:
            found.append(str(result))
        return result

    if original is not None:
        tasks.check_yaml = recording
    try:
        spec = tasks.yaml_model_load(cfg)
    finally:
        if original is not None:
            tasks.check_yaml = original
    return spec, (str(Path(found[-1]).resolve()) if found else None)


#: Ultralytics task -> its model class in ``ultralytics.nn.tasks`` (absent ones are skipped: older releases).
_TASK_CLASSES = {"detect": "DetectionModel", "segment": "SegmentationModel", "classify": "ClassificationModel",
                 "pose": "PoseModel", "obb": "OBBModel", "semantic": "SemanticSegmentationModel",
                 "depth": "DepthModel"}
OPEN_VOCABULARY_NOTE = ("{name}: open-vocabulary model built offline with placeholder text embeddings; the CLIP "
                        "text encoder (downloaded by set_classes) is not part of it and is not audited")


def _ultralytics_class(tasks: Any, name: str, task: str) -> Tuple[Optional[type], Tuple[str, ...]]:
    """The model class Ultralytics builds ``name`` with, and notes on what the audit leaves out."""
    if "rtdetr" in name:
        return getattr(tasks, "RTDETRDetectionModel", None), ()
    if "world" in name or "yoloe" in name:
        if "world" in name:
            cls = getattr(tasks, "WorldModel", None)
        else:
            cls = getattr(tasks, "YOLOESegModel" if task == "segment" else "YOLOEModel", None)
        if cls is None:
            raise BuildError(f"--ultralytics {name}: this ultralytics has no open-vocabulary model class; audit "
                             "it with --model and a factory that builds it")
        return cls, (OPEN_VOCABULARY_NOTE.format(name=name),)
    return getattr(tasks, _TASK_CLASSES.get(task, ""), None), ()


# -- any factory ------------------------------------------------------------------------------
def build_factory(target: str) -> BuiltModel:
    """``path/to/file.py:function``: the function returns a module, or ``(module, inputs)``."""
    file, sep, function = target.rpartition(":")
    if not sep or not file or not function:
        raise BuildError(f"--model {target}: expected path/to/file.py:function")
    path = Path(file).resolve()
    if not path.is_file():
        raise BuildError(f"--model {target}: {path} not found")
    name = "yolo_det_model_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    with _quiet() as output:
        try:
            sys.path.insert(0, str(path.parent))
            try:
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
            finally:
                with contextlib.suppress(ValueError):
                    sys.path.remove(str(path.parent))
            factory = getattr(module, function, None)
            if not callable(factory):
                raise BuildError(f"--model {target}: {path.name} has no function {function!r}")
            built = factory()
        except BuildError:
            raise
        except SystemExit as exc:  # the user's code asked to exit: a failed build, not yolo-det's exit status
            raise _failure(f"--model {target}", RuntimeError(f"it called sys.exit({exc.code!r})"),
                           output.getvalue()) from None
        except Exception as exc:  # noqa: BLE001
            raise _failure(f"--model {target}", exc, output.getvalue()) from None
    inputs = None
    if isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], torch.nn.Module):
        built, inputs = built
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if not isinstance(built, torch.nn.Module):
        raise BuildError(f"--model {target}: {function}() returned {type(built).__name__}, not a torch.nn.Module")
    return BuiltModel(built, inputs, f"{path.name}:{function}", file=str(path))


__all__ = ["BuildError", "BuiltModel", "build_factory", "build_ultralytics", "build_yolov5", "missing_file",
           "names_one_file"]
