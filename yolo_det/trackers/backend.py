"""What a tracker backend is: one class per tracker, so a new tracker is one new module and one line in
:mod:`.registry` (docs/trackers.md).

A backend says whether the run uses its tracker without importing it (:meth:`Backend.in_use`), logs a run's
evidence and returns the link ``trackers.json`` keeps (:meth:`Backend.log_run`), attaches a command's verdict to
the run a link names (:meth:`Backend.log_verdict`), and names the run a release's own callback started
(:meth:`Backend.active_run`), noted before the callback ends it. :mod:`.publish` calls these for every backend
alike, each call inside the command's one time budget (:mod:`.budget`), never failing the caller.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

#: A tracker run's address as ``trackers.json`` keeps it (JSON-ready: ``{"run_id": ..., ...}``).
Link = Dict[str, Any]


def package_installed(package: str) -> bool:
    """True when ``package`` can be imported (found, not imported: an import of mlflow costs 1-2 s)."""
    if package in sys.modules:
        return sys.modules[package] is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


class Backend(ABC):
    """One experiment tracker: its name (``YOLO_DET_TRACKERS``' word and ``trackers.json``'s key), the package
    that must be installed, and the four calls :mod:`.publish` makes."""

    #: the tracker's name in ``YOLO_DET_TRACKERS`` and the key of its link in ``trackers.json``
    name: str = ""
    #: the import name whose presence decides "installed" (never imported to decide it)
    package: str = ""

    def installed(self) -> bool:
        """The tracker's package can be imported here."""
        return package_installed(self.package)

    @abstractmethod
    def in_use(self, run_dir: Path, link: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        """The run already uses this tracker (``YOLO_DET_TRACKERS`` unset): decided from the environment, the
        run folder and the link ``trackers.json`` holds (``{}`` when none), without importing the tracker."""

    def prepare(self) -> None:
        """Import what the calls need, before the time budget starts (an import's cost is not the store's; an
        import abandoned half-way by the budget would hold Python's import lock)."""
        importlib.import_module(self.package)

    @abstractmethod
    def log_run(self, run_dir: Path, evidence: Mapping[str, Any], link: Mapping[str, Any]) -> Link:
        """Log a finished run's evidence (:func:`.evidence.run_evidence`); ``link`` is what ``trackers.json``
        already holds for this tracker (``{}`` when nothing). Return the link to remember."""

    @abstractmethod
    def log_verdict(self, link: Mapping[str, Any], evidence: Mapping[str, Any]) -> None:
        """Attach a command's verdict (:func:`.evidence.verdict_evidence`) to the run ``link`` names."""

    def log_files(self, link: Mapping[str, Any], folder: Path, name: str) -> bool:
        """Attach the files of ``folder`` (e.g. a signed attestation bundle) to the run ``link`` names, under
        ``name``; False where the tracker keeps no files (the default)."""
        return False

    def active_run(self, started_by: str) -> Optional[Link]:
        """The link of the tracker run active in this process now (e.g. one a release's callback started, noted
        before the callback ends it), when the tracker is already imported; None otherwise. Never imports it."""
        return None

    def target(self, link: Mapping[str, Any]) -> str:
        """What identifies the tracker run a link names: a verdict goes to each target once (a copied run folder
        names the same run)."""
        return repr(sorted(link.items())) if isinstance(link, Mapping) else repr(link)


__all__ = ["Backend", "Link", "package_installed"]
