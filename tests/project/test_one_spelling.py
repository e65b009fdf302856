"""Each name the run folder and the environment share is spelled once: ``determinism.json``, the fingerprint
log's name, ``trackers.json`` in ``yolo_det/record/run_folder.py``, every ``YOLO_DET_*`` variable in
``yolo_det/core/env_names.py``; every other module imports it. The scan reads the sources (string literals
that are exactly such a name; a name inside a message or a docstring is prose, not a definition)."""

import ast
import functools
import re
from pathlib import Path
from typing import Dict, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "yolo_det"
FILE_NAMES = ("determinism.json", "fingerprint.jsonl", "trackers.json")
ENV_NAME = re.compile(r"YOLO_DET_[A-Z][A-Z0-9_]*\Z")
OWNERS = {"file": "record/run_folder.py", "env": "core/env_names.py"}
#: (module, literal) spelled outside its owner on purpose, with the reason.
EXCEPTIONS = {
    ("integrations/bootstrap/sitecustomize.py", "YOLO_DET_BOOTSTRAP"):
        "the start-up hook runs before yolo_det can be imported: standard library only (its docstring)",
    ("integrations/bootstrap/sitecustomize.py", "YOLO_DET_DETERMINISTIC"):
        "the start-up hook runs before yolo_det can be imported: standard library only (its docstring)",
}
#: (module, literal) left to replace by the owner's name (none: every module imports it)
PENDING: Set[Tuple[str, str]] = set()


def _literals(path: Path) -> Set[str]:
    """The run-folder file names and ``YOLO_DET_*`` names a module spells as a whole string literal."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in FILE_NAMES or ENV_NAME.match(node.value):
                found.add(node.value)
    return found


@functools.lru_cache(maxsize=None)
def _spellings() -> Dict[str, Set[str]]:
    """literal -> the modules (relative to yolo_det/) that spell it."""
    out: Dict[str, Set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for literal in _literals(path):
            out.setdefault(literal, set()).add(module)
    return out


def _owner(literal: str) -> str:
    return OWNERS["file" if literal in FILE_NAMES else "env"]


def test_each_run_folder_file_name_and_environment_variable_is_spelled_by_its_owner_alone():
    stray = {(module, literal) for literal, modules in _spellings().items() for module in modules
             if module != _owner(literal)}
    unexplained = stray - set(EXCEPTIONS) - PENDING
    assert not unexplained, ("import these names from their owner (run folder files: yolo_det/record/run_folder.py, "
                             f"YOLO_DET_*: yolo_det/core/env_names.py) instead of spelling them: {sorted(unexplained)}")


def test_the_owners_spell_every_name_and_the_lists_of_leftovers_are_current():
    spellings = _spellings()
    for name in FILE_NAMES:
        assert OWNERS["file"] in spellings.get(name, set()), name
    assert {m for modules in spellings.values() for m in modules if m == OWNERS["env"]}
    stray = {(module, literal) for literal, modules in spellings.items() for module in modules
             if module != _owner(literal)}
    stale = (set(EXCEPTIONS) | PENDING) - stray
    assert not stale, f"these leftovers are gone: delete them from this test's lists: {sorted(stale)}"


def test_the_scan_finds_a_second_spelling(tmp_path):
    """The scan itself: a literal name is found, the same name in a message or a docstring is not."""
    module = tmp_path / "m.py"
    module.write_text('"""Reads YOLO_DET_SEED and determinism.json."""\nA = "YOLO_DET_SEED"\n'
                      'B = f"no {A} in determinism.json"\nC = "fingerprint.jsonl"\n')
    assert _literals(module) == {"YOLO_DET_SEED", "fingerprint.jsonl"}


#: modules that call ``os.replace`` themselves, with the reason; every other module goes through core/atomic.
REPLACE_EXCEPTIONS = {
    "core/atomic.py": "the one atomic writer",
    "patch/journal.py": "journalled multi-file writes keeping owner and mode; patch/ imports nothing of yolo-det "
                        "(its docstring)",
}
#: modules left to move to core/atomic (none)
REPLACE_PENDING: Set[str] = set()


def _replaces(path: Path) -> bool:
    """Whether a module calls ``os.replace`` / ``os.rename`` (or imports ``replace`` / ``rename`` from os)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("replace", "rename") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(a.name in ("replace", "rename") for a in node.names):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _replacing_modules() -> frozenset:
    return frozenset(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _replaces(p))


def test_files_are_replaced_only_by_the_one_atomic_writer():
    unexplained = _replacing_modules() - set(REPLACE_EXCEPTIONS) - REPLACE_PENDING
    assert not unexplained, ("write files through yolo_det/core/atomic.py (temp file, fsync, os.replace, folder "
                             f"fsync) instead of calling os.replace: {sorted(unexplained)}")
    stale = (set(REPLACE_EXCEPTIONS) | REPLACE_PENDING) - _replacing_modules()
    assert not stale, f"these modules no longer call os.replace: delete them from this test's lists: {sorted(stale)}"


def test_the_replace_scan_finds_a_call(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\ndef f(a, b):\n    os.replace(a, b)\n")
    assert _replaces(module)
    module.write_text("from os import rename\n")
    assert _replaces(module)
    module.write_text("def f(s):\n    return s.replace('a', 'b')\n")
    assert not _replaces(module)


#: left for the branch that splits evaluation/parity.py this round: use core.data_manifest.IMAGE_SUFFIXES.
SUFFIX_PENDING: Set[str] = set()


def test_one_set_of_image_suffixes():
    """Which files are images is decided by ``core/data_manifest.IMAGE_SUFFIXES`` alone (parity had 7 suffixes,
    the COCO evaluation 10, the data manifest 11)."""
    spelled = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in (".jpg", "jpg", ".jpeg", "jpeg"):
                spelled.add(path.relative_to(PACKAGE).as_posix())
    assert spelled - SUFFIX_PENDING == {"core/data_manifest.py"}
    from yolo_det.core.data_manifest import IMAGE_SUFFIXES, IMG_FORMATS

    assert IMAGE_SUFFIXES == {f".{name}" for name in IMG_FORMATS} and ".heic" in IMAGE_SUFFIXES
