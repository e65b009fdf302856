"""Exact resume: the state a release's checkpoint lacks, saved beside it and restored on resume.

At every checkpoint save a *sidecar* ``<checkpoint>.yolo-det`` is written next to ``last.pt``
(atomically, with a format version): the main process's RNG states (torch CPU and CUDA, numpy,
random), the GradScaler state, where the data stream is (the next epoch), the full-precision
model and EMA (YOLOv5 and Ultralytics keep them in fp16) and the tensors their modules cache
outside the state_dict (YOLOv5's ``Detect`` grids), where the release stores it lossy, the
optimizer state, plus the yolo-det settings and where they came from. On resume it is read,
checked against the checkpoint the release loaded (epoch, and the fp16 weights it holds must be
the sidecar's weights rounded), and applied right before the first resumed epoch.

A resume that cannot be exact (no sidecar, or one that does not match the checkpoint) is refused
under strict (nothing is trained; the message says why and what to do) and resumed as the release
does under warn, with a warning that says why. Why the sidecar is missing is told from the run
folder (:func:`missing_state`): a run that yolo-det trained (its ``determinism.json``, or the
marker written into ``weights/`` when training starts) saves one with every checkpoint, so its
absence means the process ended between ``last.pt`` and its sidecar (or the file was removed).

A kill at any instant keeps a consistent pair (:func:`consistent_state`). The release's checkpoint is
staged as ``last.pt.partial``; the sidecar, carrying the staged file's `checkpoint_sha256`, replaces
the previous one (kept as ``last.pt.yolo-det.prev``); only then is the checkpoint renamed into place.
Whatever instant the process dies, ``last.pt`` has its sidecar by digest: the current one, or the
previous one when the kill came between the sidecar and the rename; the ``.prev`` is removed once the checkpoint
is in place, so at rest each checkpoint has one sidecar. A completed training keeps only the full-precision EMA
of each sidecar (``completion``; ``$YOLO_DET_KEEP_RESUME=1`` keeps everything). ``$YOLO_DET_KILL_AT=point:epoch``
(points `before`, `between`, `after`) SIGKILLs the process at that point of that epoch's save,
for tests of exactly this.

The package, by seam: ``files`` (the kill-safe file protocol: the sidecar writer, digest pairing, DDP ranks'
states), ``state`` (what a sidecar holds: capture and restore, RNG states through :mod:`yolo_det.core.rng`),
``cadence`` (gradient accumulation across a checkpoint), ``completion`` (what a completed training keeps, and
yolo-det's files kept out of a tracker's upload of ``weights/``), ``policy`` (what a run folder says about a missing
sidecar, strict's refusal; file names from :mod:`yolo_det.record.run_folder`) and ``plumbing`` (the kill point,
stop-after-epoch and run-info hooks of ``verify --resume-at``, `seeds` and the tests). Every name is
re-exported here: ``yolo_det.integrations.resume`` is the path callers use.
"""

from __future__ import annotations

# noqa below: CADENCE, PENDING, pending_gradients, INFO_ENV, PREVIOUS_SUFFIX, STAGED_SUFFIX, DEFERRED, cpu_state
# are read here by callers although not in __all__
from .cadence import (CADENCE, PENDING, StepCadence, accumulation_problem, cadence, gradients,  # noqa: F401
                      loop_variable, pending_gradients, set_gradients)
from .completion import keep_requested, put_back, set_aside
from .completion import finish as finish_completed
from .files import (ResumeStateError, Writer, adopt_previous, consistent_state, file_digest, rank_path, rank_rng,
                    read, write_rank_state)
from .plumbing import (INFO_ENV, KILL_ENV, KILL_POINTS, STOP_ENV, kill_if_asked, python_command,  # noqa: F401
                       stop_epoch, write_run_info)
from .policy import (COMPLETED, INEXACT_ENV, KEEP_ENV, MARKER, PREVIOUS_SUFFIX, RUN_RECORD, STAGED_SUFFIX, SUFFIX,  # noqa: F401
                     completed, expects_sidecar, final_path, inexact_allowed, mark_run, marked_settings, missing_state,
                     previous_path, refusal, run_folder, run_record, sidecar_path, staged_path, unsaved)
from .state import (DEFERRED, FORMAT, VERSION, capture, continue_fingerprint, cpu_state, finish_copy,  # noqa: F401
                    load_module, load_module_caches, module_caches, rng_state, set_rng_state, weight_mismatch)

__all__ = ["COMPLETED", "KEEP_ENV", "completed", "finish_completed", "keep_requested", "put_back", "set_aside",
           "FORMAT", "KILL_ENV", "KILL_POINTS", "MARKER", "STOP_ENV", "adopt_previous", "consistent_state",
           "file_digest", "final_path", "kill_if_asked", "previous_path", "staged_path", "unsaved", "SUFFIX", "VERSION", "ResumeStateError", "StepCadence", "Writer",
           "accumulation_problem", "cadence", "capture", "continue_fingerprint", "expects_sidecar", "finish_copy", "gradients",
           "INEXACT_ENV", "RUN_RECORD", "inexact_allowed", "mark_run", "marked_settings", "missing_state", "refusal",
           "run_folder", "run_record",
           "load_module", "load_module_caches", "loop_variable", "module_caches", "python_command", "rank_path",
           "rank_rng", "read", "rng_state", "write_rank_state", "set_gradients", "set_rng_state", "sidecar_path", "stop_epoch", "weight_mismatch",
           "write_run_info"]
