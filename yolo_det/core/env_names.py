"""The name of every ``YOLO_DET_*`` environment variable yolo-det reads or sets, each spelled here once.

Every other module imports the name from here, so a variable cannot be renamed in one place and missed in
another; docs/core.md's table lists them all (a test checks that none is missing, another that no other
module spells one).
"""

from __future__ import annotations

# -- settings (core/mode.py's HYP_KEYS) ------------------------------------------------------------------
DETERMINISTIC = "YOLO_DET_DETERMINISTIC"
#: set by `yolo-det run --deterministic` beside DETERMINISTIC: the mode came from the launcher's option
MODE_FROM_RUN = "YOLO_DET_MODE_FROM_RUN"
BACKWARD = "YOLO_DET_BACKWARD"
ALLOW = "YOLO_DET_ALLOW"
OPS = "YOLO_DET_OPS"
FILL_MEMORY = "YOLO_DET_FILL_MEMORY"
VIRTUAL_WORLD_SIZE = "YOLO_DET_VIRTUAL_WORLD_SIZE"
FINGERPRINT_MODE = "YOLO_DET_FINGERPRINT_MODE"
#: ``deterministic_portable``: strict bits independent of the x86-64 CPU (core/portable.py); ``1`` or N threads
PORTABLE = "YOLO_DET_PORTABLE"

# -- seeds ----------------------------------------------------------------------------------------------
#: the seed the session seeded with (for loader workers and the processes it starts); not a training seed
SEED = "YOLO_DET_SEED"
#: the DDP rank the session seeded with
RANK = "YOLO_DET_RANK"
#: **the** training seed of a command that gives none
TRAIN_SEED = "YOLO_DET_TRAIN_SEED"
#: one role's seed, when it differs from the run's (``YOLO_DET_SEED_INIT``, ...): the prefix, then the role
SEED_ROLE_PREFIX = "YOLO_DET_SEED_"

# -- the fingerprint log and op capture -----------------------------------------------------------------
#: the fingerprint log's path: per-step fingerprints on (how ``verify`` talks to a run)
FINGERPRINT = "YOLO_DET_FINGERPRINT"
CAPTURE = "YOLO_DET_CAPTURE"
CAPTURE_STEP = "YOLO_DET_CAPTURE_STEP"
CAPTURE_THROUGH = "YOLO_DET_CAPTURE_THROUGH"
CAPTURE_READ = "YOLO_DET_CAPTURE_READ"

# -- verify, resume-at, seeds ---------------------------------------------------------------------------
VERIFY_RUN = "YOLO_DET_VERIFY_RUN"
RUN_INFO = "YOLO_DET_RUN_INFO"
STOP_AFTER_EPOCH = "YOLO_DET_STOP_AFTER_EPOCH"
GPU_LOCKS = "YOLO_DET_GPU_LOCKS"

# -- resume ---------------------------------------------------------------------------------------------
#: ``inexact``: strict resumes a run without the exact-resume sidecar
RESUME = "YOLO_DET_RESUME"
#: ``point:epoch``: SIGKILL the process at that point of that epoch's save (tests of kill-safety)
KILL_AT = "YOLO_DET_KILL_AT"
#: ``1``: a completed training keeps its full resume state (by default only the full-precision EMA stays)
KEEP_RESUME = "YOLO_DET_KEEP_RESUME"

# -- processes, launching, integrations -----------------------------------------------------------------
KILL_GRACE = "YOLO_DET_KILL_GRACE"
BOOTSTRAP = "YOLO_DET_BOOTSTRAP"
ULTRALYTICS = "YOLO_DET_ULTRALYTICS"
CACHE_DIR = "YOLO_DET_CACHE_DIR"

# -- trackers -------------------------------------------------------------------------------------------
TRACKERS = "YOLO_DET_TRACKERS"
TRACKER_TIMEOUT = "YOLO_DET_TRACKER_TIMEOUT"
#: seconds all of one command's tracker calls may take together (trackers/budget.py)
TRACKER_BUDGET = "YOLO_DET_TRACKER_BUDGET"

__all__ = ["MODE_FROM_RUN", "ALLOW", "BACKWARD", "BOOTSTRAP", "CACHE_DIR", "CAPTURE", "CAPTURE_READ", "CAPTURE_STEP",
           "CAPTURE_THROUGH", "DETERMINISTIC", "FILL_MEMORY", "FINGERPRINT", "FINGERPRINT_MODE", "GPU_LOCKS",
           "KEEP_RESUME", "KILL_AT", "KILL_GRACE", "OPS", "PORTABLE", "RANK", "RESUME", "RUN_INFO", "SEED",
           "SEED_ROLE_PREFIX", "STOP_AFTER_EPOCH", "TRACKERS", "TRACKER_BUDGET", "TRACKER_TIMEOUT", "TRAIN_SEED",
           "ULTRALYTICS", "VERIFY_RUN", "VIRTUAL_WORLD_SIZE"]
