"""yolo-det: reproducible YOLO training on CUDA servers.

Public API (users' scripts call these names; they are a contract)::

    yolo_det.seed_everything(seed, rank=0)
    yolo_det.set_determinism("strict" | "warn" | "off")
    with yolo_det.temporary_determinism("off"): ...
    with yolo_det.record_violations() as rep: ...      # rep.ops: {op: count}
    DataLoader(..., worker_init_fn=yolo_det.seed_worker, generator=yolo_det.make_generator(seed, rank=rank))
    session = yolo_det.configure(...)                   # start-up entry for training scripts

The names are loaded on first use (PEP 562), so ``import yolo_det`` and the commands that do
not train (``yolo-det --version``, ``apply-patch``, ``diff``, ``run``) start without torch.
"""

import importlib

__version__ = "0.1.0"

from . import _compat  # noqa: E402

_compat.install()  # old flat import paths (yolo_det.audit, yolo_det.fingerprint, ...) keep working

#: public name -> the module that defines it
_LAZY = {
    "FlagState": ".core.determinism", "set_determinism": ".core.determinism",
    "temporary_determinism": ".core.determinism",
    "MODES": ".core.mode", "ConfigError": ".core.mode", "Settings": ".core.mode", "resolve": ".core.mode",
    "ViolationReport": ".core.report", "record_violations": ".core.report",
    "DeterminismSetupError": ".session", "NondeterministicOpError": ".session", "Session": ".session",
    "backward_context": ".session", "configure": ".session", "current": ".session",
    "make_generator": ".core.seeding", "seed_everything": ".core.seeding", "seed_worker": ".core.seeding",
    "trial_seeds": ".core.seeding",
}


def make_deterministic(model, record=None):
    """Swap modules whose CUDA backward is nondeterministic for exact replacements (in place)."""
    from .strict.swap import make_deterministic as _make

    return _make(model, record=record)


#: sub-packages reached as attributes (``yolo_det.core.environment``): loading one loads what
#: ``import yolo_det`` used to load, so such chains keep working
_SUBMODULES = {"core", "strict", "world", "record", "proof", "evaluation", "studies", "patch", "session",
               "integrations", "cli", "synthetic"}


def __getattr__(name: str):
    """Load a public name (and its module) the first time it is used."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _SUBMODULES:
        for eager in sorted(set(_LAZY.values())):
            importlib.import_module(eager, __name__)
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'yolo_det' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "MODES", "ConfigError", "DeterminismSetupError", "FlagState", "NondeterministicOpError", "Session",
    "Settings", "ViolationReport", "backward_context", "configure", "current", "make_deterministic",
    "make_generator", "record_violations", "resolve", "seed_everything", "seed_worker", "set_determinism",
    "temporary_determinism", "trial_seeds", "__version__",
]
