"""``yolo-det apply-patch`` and ``yolo-det revert-patch``: thin wrappers around :mod:`yolo_det.patcher`."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the codemod (libcst) is imported only when a patch command runs
    from ..patch import PatchResult

from .exit_codes import EXIT_OK, EXIT_USAGE


def register(sub) -> None:
    """Add ``apply-patch`` and ``revert-patch`` to the ``yolo-det`` parser."""
    apply = sub.add_parser(
        "apply-patch",
        help="patch a YOLOv5-family repo's train.py so `--deterministic strict|warn|off` works",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Patch every YOLOv5-family training script in REPO (train.py, classify/train.py,\n"
            "segment/train.py, train_aux.py, ...) with a syntax-tree codemod. The patched script:\n"
            "  - accepts --deterministic {strict,warn,off} and --fingerprint PATH (and --seed where\n"
            "    the release has none); 'deterministic:' in the hyp YAML works too\n"
            "  - applies the mode right after the release's init_seeds(...)\n"
            "  - seeds the train loader's workers where the release does not (v5.0-v6.1, yolov7)\n"
            "  - runs the backward inside yolo-det's determinism context\n"
            "  - writes determinism.json into the run folder\n"
            "  - lifts the NMS wall-clock limit in utils/general.py under strict/warn (so mAP and\n"
            "    best.pt do not depend on machine speed) and reports each validation\n"
            "Every added line ends in '# yolo-det'. Idempotent; undo with revert-patch."
        ),
        epilog=(
            "example:\n"
            "  yolo-det apply-patch ./yolov5 --dry-run     # review the diff\n"
            "  yolo-det apply-patch ./yolov5\n"
            "  python ./yolov5/train.py --data coco128.yaml --deterministic strict\n"
            "exit codes: 0 patched or already patched, 2 refused (unknown layout; nothing changed)"
        ),
    )
    apply.add_argument("repo", metavar="REPO", help="the repository folder (with train.py), or one training script")
    apply.add_argument("--dry-run", action="store_true", help="print the unified diff and change nothing")
    apply.set_defaults(func=_apply)

    revert = sub.add_parser(
        "revert-patch",
        help="remove yolo-det's patch (byte-identical to the original; keeps your other edits)",
        description="Remove exactly what apply-patch added from every patched script in REPO.\n"
                    "The result is byte-identical to the original when nothing else was edited.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 reverted or nothing to revert, 2 error (nothing changed)",
    )
    revert.add_argument("repo", metavar="REPO", help="the repository folder, or one training script")
    revert.add_argument("--dry-run", action="store_true", help="print the unified diff and change nothing")
    revert.set_defaults(func=_revert)


def _apply(args) -> int:
    return _run("apply-patch", args)


def _revert(args) -> int:
    return _run("revert-patch", args)


def _run(name: str, args) -> int:
    from ..patch import PatchError, apply_patch, revert_patch

    action = apply_patch if name == "apply-patch" else revert_patch
    try:
        result = action(args.repo, dry_run=args.dry_run)
    except PatchError as exc:
        print(f"yolo-det {name}: {exc.details()}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"yolo-det {name}: {exc.strerror or exc}: {exc.filename or args.repo}; nothing was changed",
              file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        sys.stdout.write(result.diff)
    _summary(result)
    return EXIT_OK


def _train_command(repo: Path) -> str:
    """How to start the patched ``train.py``: a copy of a package (``__init__.py`` beside it, the PyPI yolov5) imports
    itself by name, so its parent goes first on PYTHONPATH, or Python imports the installed, unpatched package."""
    if repo.is_dir() and (repo / "__init__.py").is_file() and (repo / "train.py").is_file():
        return f"PYTHONPATH={shlex.quote(str(repo.resolve().parent))} python {shlex.quote(str(repo / 'train.py'))}"
    return "python train.py"


def _summary(result: "PatchResult") -> None:
    """One line per script and a closing line (on stderr under --dry-run, so stdout stays a clean diff)."""
    out = sys.stderr if result.dry_run else sys.stdout
    would = "would be " if result.dry_run else ""
    for note in result.recovered:
        print(f"yolo-det: {note}", file=out)
    for change in result.files:
        status = change.status if not (result.dry_run and change.changed) else f"{would}{change.status}"
        notes = f" ({'; '.join(change.notes)})" if change.notes else ""
        print(f"  {change.relpath}: {status}{notes}", file=out)
    changed = len(result.files_changed)
    if result.action == "apply":
        if result.already_patched:
            print(f"yolo-det: {result.repo} is already patched; nothing to do", file=out)
        else:
            print(f"yolo-det: {changed} file(s) {would}patched in {result.repo}. Train with "
                  f"`{_train_command(Path(result.repo))} ... --deterministic strict|warn|off`; undo with "
                  f"`yolo-det revert-patch {result.repo}`", file=out)
    elif changed:
        print(f"yolo-det: {changed} file(s) {would}reverted in {result.repo}", file=out)
    else:
        print(f"yolo-det: nothing to revert in {result.repo} (no yolo-det patch found)", file=out)
