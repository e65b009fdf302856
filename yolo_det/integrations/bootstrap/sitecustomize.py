"""yolo-det's launch bootstrap: ``yolo-det run`` puts this folder first on the child's ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up (the ``site`` module, unless ``-S``/``-I``). This one
runs the ``sitecustomize`` it shadows first, then, when ``$YOLO_DET_BOOTSTRAP`` is set (only
``yolo-det run`` sets it), adds an import hook: once ``ultralytics.engine.model`` has been
imported, every model's trainer lookup returns yolo-det's trainer for that task (what
``yolo_det.ultralytics.enable()`` does), ``Model.tune`` first enables
:mod:`yolo_det.integrations.ultralytics.tune` and ``Model.export`` writes the artifact's provenance after it.
It imports nothing of yolo-det, torch or Ultralytics itself, so processes that never import Ultralytics are not
touched. Standard library only.

Where yolo-det cannot engage (this Python has no yolo_det, the integration fails to import against
this Ultralytics, the package has no ``Model._smart_load``), it never stays silent: under
``YOLO_DET_DETERMINISTIC=strict`` the process exits 2 naming the release and what is missing;
otherwise it says so once on stderr and the training runs as plain Ultralytics.
"""

import importlib
import importlib.abc
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP_VAR = "YOLO_DET_BOOTSTRAP"
TARGET = "ultralytics.engine.model"
_said = set()


def _cannot_engage(what):
    """Strict: exit 2 naming the release and the missing piece; otherwise say it once."""
    version = getattr(sys.modules.get("ultralytics"), "__version__", "?")
    strict = os.environ.get("YOLO_DET_DETERMINISTIC", "").strip().lower() == "strict"
    text = f"yolo-det cannot engage with ultralytics {version}: {what}"
    if strict:
        sys.stderr.write(f"yolo-det: error: {text}; strict refuses to train without yolo-det "
                         "(use a supported release, see docs/ultralytics.md, or unset strict)\n")
        sys.stderr.flush()
        raise SystemExit(2)
    if text not in _said:
        _said.add(text)
        sys.stderr.write(f"yolo-det: warning: {text}; training as plain Ultralytics\n")


def _chain() -> None:
    """Import the ``sitecustomize`` this file shadows (if any), as ``site`` would have."""
    me = sys.modules.get(__name__)
    index = next((i for i, p in enumerate(sys.path) if os.path.abspath(p or os.curdir) == _HERE), None)
    if index is None:
        return
    del sys.path[index]
    sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")
    except Exception as exc:  # noqa: BLE001 - what site.py does for a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")
    finally:
        sys.path.insert(min(index, len(sys.path)), _HERE)
        if me is not None:
            sys.modules["sitecustomize"] = me


def _trainer_lookup(original):
    """``Model._smart_load`` that hands back yolo-det's trainer for the model's own trainer class."""

    def _smart_load(self, key):
        found = original(self, key)
        if key not in ("trainer", "validator", "predictor") or not isinstance(found, type):
            return found
        try:
            from yolo_det.integrations.ultralytics import trainer as integration
        except ImportError as exc:
            missing_yolo_det = exc.name in ("yolo_det", "yolo_det.integrations")
            where = f"yolo_det is not installed in {sys.executable}" if missing_yolo_det \
                else f"the integration does not import ({type(exc).__name__}: {exc})"
            _cannot_engage(where)
            return found
        if key == "validator":  # `yolo val`, model.val(): a standalone evaluation
            return integration.deterministic_validator(found)
        if key == "predictor":  # `yolo predict`
            return integration.deterministic_predictor(found)
        try:
            return integration.deterministic_trainer(found)
        except integration.ConfigError as exc:  # strict, and this package lacks what yolo-det needs
            sys.stderr.write(f"yolo-det: error: {exc}\n")
            raise SystemExit(2) from None

    _smart_load._yolo_det = True
    _smart_load.__wrapped__ = original
    _smart_load.__doc__ = original.__doc__
    return _smart_load


def _tune_hook(original):
    """``Model.tune`` that first makes the tuner's search a function of its seed (yolo_det.integrations.ultralytics.tune)."""

    def tune(self, *args, **kwargs):
        try:
            from yolo_det.integrations.ultralytics import tune as ultralytics_tune
        except ImportError as exc:
            sys.stderr.write(f"yolo-det: cannot import yolo_det in {sys.executable} ({exc}); tuning without it\n")
        else:
            ultralytics_tune.enable()
        return original(self, *args, **kwargs)

    tune._yolo_det = True
    tune.__wrapped__ = original
    tune.__doc__ = original.__doc__
    return tune


def _export_hook(original):
    """``Model.export`` that then writes the artifact's provenance (which checkpoint, which arguments), as
    ``yolo-det ultralytics export`` does; a provenance that cannot be written is one warning, never a failed export."""

    def export(self, *args, **kwargs):
        artifact = original(self, *args, **kwargs)
        source = getattr(self, "ckpt_path", None)
        if not artifact or not source:
            return artifact
        try:
            from yolo_det.integrations.ultralytics.export import record_provenance

            record_provenance(source, artifact, kwargs)
        except Exception as exc:  # noqa: BLE001 - the export itself succeeded
            sys.stderr.write(f"yolo-det: warning: the export's provenance was not written ({type(exc).__name__}: "
                             f"{exc})\n")
        return artifact

    export._yolo_det = True
    export.__wrapped__ = original
    export.__doc__ = original.__doc__
    return export


def _install(module) -> None:
    model = getattr(module, "Model", None)
    if model is None or not callable(getattr(model, "_smart_load", None)):
        _cannot_engage(f"{TARGET} has no Model._smart_load (the trainer lookup yolo-det hooks)")
        return
    if not getattr(model._smart_load, "_yolo_det", False):
        model._smart_load = _trainer_lookup(model._smart_load)
    if model is not None and callable(getattr(model, "tune", None)) and not getattr(model.tune, "_yolo_det", False):
        model.tune = _tune_hook(model.tune)
    if callable(getattr(model, "export", None)) and not getattr(model.export, "_yolo_det", False):
        model.export = _export_hook(model.export)


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then installs the trainer lookup into the new module."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _install(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for ``ultralytics.engine.model``; leaves every other import alone."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)
        return spec


def _hook() -> None:
    if TARGET in sys.modules:
        _install(sys.modules[TARGET])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


_chain()
if os.environ.get(BOOTSTRAP_VAR):
    _hook()
