"""The package's folders are its architecture: imports run one way, and old import paths still work."""

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "yolo_det"
# A module may import its own layer and the layers listed for it (directly or inside functions).
ALLOWED = {
    "core": set(),
    "strict": {"core"},
    "proof": {"core"},
    "patch": set(),
    "world": {"core"},
    "session": {"core", "strict", "proof"},
    "synthetic": set(),
    "integrations": {"core", "strict", "proof", "session", "patch", "world"},
    "ultralytics": {"integrations"},
    "cli": {"core", "strict", "proof", "session", "patch", "integrations", "synthetic", "world"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path, module: str):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            yield from (n for n in names if n.startswith("yolo_det"))
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("yolo_det"))


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield path, module


@pytest.mark.parametrize("path,module", list(_modules()), ids=lambda x: str(x))
def test_imports_run_one_way(path, module):
    layer = _layer(module)
    if layer in ("", "_compat", "__main__"):
        return  # the package's public face may import everything
    allowed = ALLOWED[layer] | {layer, ""}
    wrong = sorted({t for t in _imports(path, module) if _layer(t) not in allowed and t != "yolo_det.__version__"})
    assert not wrong, f"{module} (layer {layer}) imports {wrong}; allowed: {sorted(allowed - {''})}"


def _edges(path: Path, module: str):
    """The modules ``module`` imports: ``from . import x`` names module ``x`` where it is one."""
    known = {m for _, m in _modules()}
    for target in _imports(path, module):
        parent = target.rsplit(".", 1)[0]
        yield target if target in known else parent


def test_no_import_circles_inside_a_folder():
    """Modules of one folder import each other one way: no circle A -> B -> ... -> A.

    What counts: every ``import``/``from ... import`` of a module of the same folder, at module
    level or inside a function (a function-level import that closes a circle is still one, it only
    moves the failure to run time). A folder's ``__init__`` (its public face) is left out.
    """
    graph = {}
    for path, module in _modules():
        if path.name == "__init__.py":
            continue
        folder = module.rsplit(".", 1)[0]
        graph[module] = {t for t in _edges(path, module) if t != module and t.rsplit(".", 1)[0] == folder}

    def reach(module):
        seen, todo = set(), list(graph[module])
        while todo:
            target = todo.pop()
            if target not in seen and target in graph:
                seen.add(target)
                todo.extend(graph[target])
        return seen

    circles = [f"{m} (imports {sorted(graph[m])})" for m in sorted(graph) if m in reach(m)]
    assert not circles, "modules in an import circle inside their folder: " + "; ".join(circles)


def test_every_folder_says_what_it_owns():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()) >= 2, f"{init.parent.name}/__init__.py needs a docstring"


@pytest.mark.parametrize("old,new", [
    ("yolo_det.audit", "yolo_det.strict.audit"), ("yolo_det.ops", "yolo_det.strict.swap"),
    ("yolo_det.replacements", "yolo_det.strict.replacements"), ("yolo_det.fingerprint", "yolo_det.proof.fingerprint"),
    ("yolo_det.digest", "yolo_det.proof.digest"), ("yolo_det.patcher", "yolo_det.patch"),
    ("yolo_det.runtime", "yolo_det.session"), ("yolo_det.determinism", "yolo_det.core.determinism"),
])
def test_documented_old_paths_are_the_new_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_old_compare_path_still_offers_verify():
    from yolo_det.compare import compare_logs, verify
    from yolo_det.proof.compare import compare_logs as new_compare
    from yolo_det.proof.verify import verify as new_verify

    assert compare_logs is new_compare and verify is new_verify


def test_public_names_and_patched_script_paths():
    import yolo_det
    import yolo_det.integrations.yolov5 as v5

    for name in yolo_det.__all__:
        assert hasattr(yolo_det, name), name
    assert callable(v5.start) and callable(v5.backward)
