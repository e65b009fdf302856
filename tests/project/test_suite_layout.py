"""The suite's own layout: test files in folders by capability like the package, one name each, and no test file
importing another (what tests share lives in ``tests/support/``). Each check also runs on a small tree made here
with the fault it refuses."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

import pytest

TESTS = Path(__file__).resolve().parents[1]
#: the folders that hold test files: the package's capability folders, and ``project`` for the repository's own checks
FOLDERS = ("core", "patch", "strict", "world", "record", "proof", "evaluation", "studies", "reports", "trackers", "attest",
           "integrations/shared", "integrations/yolov5", "integrations/ultralytics", "session", "cli", "project")
#: the folders of tests/ that hold no test files: the shared helpers and the data the tests read
NOT_TESTS = ("support", "fixtures", "models", "opaque_fixtures", "slow_nms")


def _test_files(root: Path) -> List[Path]:
    skip = tuple(root / name for name in NOT_TESTS)
    return sorted(p for p in root.rglob("test_*.py") if not any(parent in skip for parent in p.parents))


def misplaced(root: Path) -> List[str]:
    """Test files outside the capability folders (tests/ itself among them), and ``__init__.py`` files in those
    folders (a package there would rename every test module, and ``integrations/yolov5`` would shadow yolov5)."""
    out = [f"{p.relative_to(root)}: not in a capability folder ({', '.join(FOLDERS)}); see docs/testing.md"
           for p in _test_files(root) if p.parent.relative_to(root).as_posix() not in FOLDERS]
    out += [f"{p.relative_to(root)}: test folders are no packages (pytest's rootdir imports, folders named like "
            "the packages they test)" for folder in FOLDERS for p in (root / folder).glob("__init__.py")]
    return out


def duplicate_names(root: Path) -> List[str]:
    """Test files of one name in two folders: pytest imports each under its bare name, so the second is refused."""
    seen: dict = {}
    for path in _test_files(root):
        seen.setdefault(path.name, []).append(path.relative_to(root).as_posix())
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(seen.items()) if len(paths) > 1]


def imports_of_tests(root: Path) -> List[str]:
    """Every import of a test module by a test file or a support module: what they share belongs in support/."""
    names = {p.stem for p in _test_files(root)}
    found = []
    for path in _test_files(root) + sorted((root / "support").rglob("*.py")) + [root / "conftest.py"]:
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(root)}:{node.lineno} imports {m}: move what it shares into tests/support/"
                      for m in modules if m.split(".")[0] in names]
    return found


def test_every_test_file_is_in_a_capability_folder():
    assert not misplaced(TESTS), "\n".join(misplaced(TESTS))


def test_no_two_test_files_share_a_name():
    assert not duplicate_names(TESTS), duplicate_names(TESTS)


def test_no_test_file_imports_another():
    assert not imports_of_tests(TESTS), "\n".join(imports_of_tests(TESTS))


def test_every_capability_folder_is_one_of_the_package():
    """A test folder is named for the package folder (or the integration) whose behaviour it holds."""
    package = TESTS.parent / "yolo_det"
    unknown = [f for f in FOLDERS if f not in ("project", "integrations/shared")
               and not (package / f).is_dir() and not (package / f"{f}.py").is_file()]
    assert not unknown, unknown
    assert all((TESTS / f).is_dir() for f in FOLDERS), [f for f in FOLDERS if not (TESTS / f).is_dir()]


@pytest.fixture
def tree(tmp_path) -> Path:
    """A small tests/ tree laid out as the suite is."""
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "builders.py").write_text("import json\n")
    (tmp_path / "conftest.py").write_text("")
    for folder, name in (("core", "test_mode.py"), ("record", "test_log.py")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text("from support.builders import json\n")
    return tmp_path


def test_the_checks_refuse_each_fault(tree):
    assert not misplaced(tree) and not duplicate_names(tree) and not imports_of_tests(tree)
    (tree / "test_new.py").write_text("")  # a file left at tests/
    (tree / "integrations" / "yolov5").mkdir(parents=True)
    (tree / "integrations" / "yolov5" / "__init__.py").write_text("")
    (tree / "record" / "test_mode.py").write_text("")  # core/ has one of this name
    (tree / "core" / "test_mode.py").write_text("import os\nfrom test_log import HEADER\n")
    (tree / "support" / "builders.py").write_text("def f():\n    import test_mode\n")
    assert [m.split(":")[0] for m in misplaced(tree)] == ["test_new.py", "integrations/yolov5/__init__.py"]
    assert duplicate_names(tree) == ["test_mode.py: core/test_mode.py, record/test_mode.py"]
    assert [m.split(" imports ")[0] for m in imports_of_tests(tree)] == ["core/test_mode.py:2", "support/builders.py:2"]
