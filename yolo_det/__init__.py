"""yolo-det: reproducible YOLO training on CUDA servers.

Public API (users' scripts call these names; they are a contract)::

    yolo_det.seed_everything(seed, rank=0)
    yolo_det.set_determinism("strict" | "warn" | "off")
    with yolo_det.temporary_determinism("off"): ...
    with yolo_det.record_violations() as rep: ...      # rep.ops: {op: count}
    DataLoader(..., worker_init_fn=yolo_det.seed_worker, generator=yolo_det.make_generator(seed, rank=rank))
    session = yolo_det.configure(...)                   # start-up entry for training scripts
"""

__version__ = "0.1.0"

from . import _compat  # noqa: E402

_compat.install()  # old flat import paths (yolo_det.audit, yolo_det.fingerprint, ...) keep working

from .core.determinism import FlagState, set_determinism, temporary_determinism  # noqa: E402
from .core.mode import MODES, ConfigError, Settings, resolve  # noqa: E402
from .core.report import ViolationReport, record_violations  # noqa: E402
from .session import (  # noqa: E402
    DeterminismSetupError,
    NondeterministicOpError,
    Session,
    backward_context,
    configure,
    current,
)
from .core.seeding import make_generator, seed_everything, seed_worker, trial_seeds  # noqa: E402


def make_deterministic(model, record=None):
    """Swap modules whose CUDA backward is nondeterministic for exact replacements (in place)."""
    from .strict.swap import make_deterministic as _make

    return _make(model, record=record)


__all__ = [
    "MODES", "ConfigError", "DeterminismSetupError", "FlagState", "NondeterministicOpError", "Session",
    "Settings", "ViolationReport", "backward_context", "configure", "current", "make_deterministic",
    "make_generator", "record_violations", "resolve", "seed_everything", "seed_worker", "set_determinism",
    "temporary_determinism", "trial_seeds", "__version__",
]
