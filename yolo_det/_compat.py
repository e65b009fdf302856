"""Import paths of earlier layouts kept working: ``yolo_det.audit`` (flat, before 0.2), ``yolo_det.proof.digest`` (before the capability folders).

Each old path resolves to the module that now holds the code (the same module object, so
``monkeypatch`` and ``isinstance`` see one thing); an old path whose names now live in two
modules gets a small namespace that re-exports both.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Dict, Optional, Sequence, Tuple

OLD_PATHS: Dict[str, Tuple[str, ...]] = {
    "yolo_det.mode": ("yolo_det.core.mode",),
    "yolo_det.determinism": ("yolo_det.core.determinism",),
    "yolo_det.seeding": ("yolo_det.core.seeding",),
    "yolo_det.report": ("yolo_det.core.report",),
    "yolo_det.environment": ("yolo_det.core.environment",),
    "yolo_det.runtime": ("yolo_det.session",),
    "yolo_det.digest": ("yolo_det.record.digest",),
    "yolo_det.fingerprint": ("yolo_det.record.fingerprint",),
    "yolo_det.fingerprint_log": ("yolo_det.record.log", "yolo_det.record.run_folder"),  # LOG_NAME: run_folder
    "yolo_det.fingerprint_sources": ("yolo_det.record.sources",),
    "yolo_det.compare": ("yolo_det.proof.compare", "yolo_det.proof.verify"),
    "yolo_det.verify": ("yolo_det.proof.verify",),
    "yolo_det.plot": ("yolo_det.proof.plot",),
    "yolo_det.optable": ("yolo_det.strict.optable",),
    "yolo_det.audit": ("yolo_det.strict.audit",),
    "yolo_det.cuda_emulation": ("yolo_det.strict.cuda_emulation",),
    "yolo_det.replacements": ("yolo_det.strict.replacements",),
    "yolo_det.ops": ("yolo_det.strict.swap",),
    "yolo_det.model_factory": ("yolo_det.strict.models",),
    "yolo_det.patcher": ("yolo_det.patch",),
    # before the capability folders (record/, evaluation/, studies/, integrations/<program>/)
    "yolo_det.proof.digest": ("yolo_det.record.digest",),
    "yolo_det.proof.digest_format": ("yolo_det.record.digest_format",),
    "yolo_det.proof.digest_kernel": ("yolo_det.record.digest_kernel",),
    "yolo_det.proof.recorder": ("yolo_det.record.recorder",),
    "yolo_det.proof.sources": ("yolo_det.record.sources",),
    "yolo_det.proof.pending": ("yolo_det.record.pending",),
    "yolo_det.proof.global_hooks": ("yolo_det.record.global_hooks",),
    "yolo_det.proof.log": ("yolo_det.record.log",),
    "yolo_det.proof.fingerprint": ("yolo_det.record.fingerprint",),
    "yolo_det.proof.rank_check": ("yolo_det.record.rank_check",),
    "yolo_det.proof.splice": ("yolo_det.record.splice",),
    "yolo_det.proof.capture": ("yolo_det.record.capture",),
    "yolo_det.proof.predictions": ("yolo_det.record.predictions",),
    "yolo_det.proof.evaluation": ("yolo_det.evaluation.logged",),
    "yolo_det.proof.eval_settings": ("yolo_det.evaluation.settings",),
    "yolo_det.proof.study": ("yolo_det.studies.study",),
    "yolo_det.proof.study_compare": ("yolo_det.studies.compare",),
    "yolo_det.proof.study_plot": ("yolo_det.studies.plot",),
    "yolo_det.proof.statistics": ("yolo_det.studies.statistics",),
    "yolo_det.integrations.yolov5_world": ("yolo_det.integrations.yolov5.world",),
    "yolo_det.integrations.evaluation": ("yolo_det.integrations.yolov5.evaluation",),
    "yolo_det.integrations.ultralytics_api": ("yolo_det.integrations.ultralytics.api",),
    "yolo_det.integrations.ultralytics_ddp": ("yolo_det.integrations.ultralytics.ddp",),
    "yolo_det.integrations.ultralytics_eval": ("yolo_det.integrations.ultralytics.evaluation",),
    "yolo_det.integrations.ultralytics_mode": ("yolo_det.integrations.ultralytics.mode",),
    "yolo_det.integrations.ultralytics_streams": ("yolo_det.integrations.ultralytics.streams",),
    "yolo_det.integrations.ultralytics_tune": ("yolo_det.integrations.ultralytics.tune",),
    "yolo_det.integrations.ultralytics_validation": ("yolo_det.integrations.ultralytics.validation",),
    "yolo_det.integrations.ultralytics_world": ("yolo_det.integrations.ultralytics.world",),
}


def _merged(name: str, targets: Sequence[str]) -> types.ModuleType:
    module = types.ModuleType(name, f"Old import path; re-exports {', '.join(targets)}.")
    exported = []
    for target in targets:
        real = importlib.import_module(target)
        public = getattr(real, "__all__", [n for n in vars(real) if not n.startswith("_")])
        for attr in public:
            setattr(module, attr, getattr(real, attr))
        exported += public
    module.__all__ = exported
    return module


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):  # noqa: D102 - importlib protocol
        targets = OLD_PATHS[spec.name]
        return importlib.import_module(targets[0]) if len(targets) == 1 else _merged(spec.name, targets)

    def exec_module(self, module) -> None:  # the target module ran when it was imported
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in OLD_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader())


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
