"""The package's folders are its architecture: imports run one way, and old import paths still work.

Each folder (a *layer*) may import itself and the layers listed for it in :data:`ALLOWED`, at module
level or inside functions; modules of one folder import each other without circles. The checks read
the sources (no import runs), so each is also run on a copy with one upward import or one circle
added, in every folder, to show that it refuses them.
"""

import ast
import functools
import importlib
import re
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "yolo_det"
#: the sub-folders of ``integrations`` that are layers of their own: one per training program, the re-run
#: of a logged validation (it dispatches to both) and the launcher's start-up hook (it enables Ultralytics)
SUBLAYERS = ("yolov5", "ultralytics", "revalidation", "bootstrap")
_BELOW_INTEGRATIONS = {"core", "strict", "world", "record", "proof", "evaluation", "trackers", "session", "patch"}
#: layer -> the other layers it may import. Bottom to top.
ALLOWED = {
    "core": set(),
    "patch": set(),
    "synthetic": set(),
    "strict": {"core"},
    "world": {"core"},
    "record": {"core"},
    "proof": {"core", "record"},
    "evaluation": {"core", "record", "proof"},
    "studies": {"core", "record", "proof"},
    "reports": {"core", "record", "proof", "evaluation", "studies"},
    "trackers": {"core", "record"},
    "attest": {"core", "record", "proof"},
    "session": {"core", "strict", "record", "trackers"},
    "integrations": _BELOW_INTEGRATIONS,
    "integrations.yolov5": _BELOW_INTEGRATIONS | {"integrations"},
    "integrations.ultralytics": _BELOW_INTEGRATIONS | {"integrations"},
    "integrations.revalidation": _BELOW_INTEGRATIONS | {"integrations", "integrations.yolov5",
                                                          "integrations.ultralytics"},
    "integrations.bootstrap": {"integrations", "integrations.ultralytics"},
    "ultralytics": {"integrations", "integrations.ultralytics"},
    "cli": _BELOW_INTEGRATIONS | {"studies", "reports", "synthetic", "attest", "integrations", "integrations.yolov5",
                                  "integrations.ultralytics", "integrations.revalidation"},
}
#: the package's public face may import every layer
UNCHECKED = ("", "_compat", "__main__")


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "integrations" and parts[2] in SUBLAYERS:
        return f"integrations.{parts[2]}"
    return parts[1] if len(parts) > 1 else ""


def _sources() -> Dict[str, Tuple[Path, str]]:
    """module name -> (path, source) for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[module] = (path, path.read_text(encoding="utf-8"))
    return out


SOURCES = _sources()


@functools.lru_cache(maxsize=None)
def _nodes(source: str) -> Tuple[ast.AST, ...]:
    return tuple(n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _imports(module: str, path: Path, source: str, known) -> Iterator[str]:
    """Every yolo_det module ``source`` imports (``from pkg import mod`` names ``pkg.mod``)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in _nodes(source):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("yolo_det"):
                for alias in node.names:
                    yield f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("yolo_det"))


def upward_imports(sources: Dict[str, Tuple[Path, str]], only: str = "") -> List[str]:
    """``"module (layer L) imports [...]"`` for every module (or ``only`` that one) importing a layer not allowed to it."""
    found = []
    for module, (path, source) in sources.items():
        layer = _layer(module)
        if layer in UNCHECKED or (only and module != only):
            continue
        allowed = ALLOWED[layer] | {layer, ""}
        wrong = sorted({t for t in _imports(module, path, source, sources)
                        if _layer(t) not in allowed and t != "yolo_det.__version__"})
        if wrong:
            found.append(f"{module} (layer {layer}) imports {wrong}; allowed: {sorted(allowed - {''})}")
    return found


def folder_circles(sources: Dict[str, Tuple[Path, str]]) -> List[str]:
    """Modules in an import circle with modules of their own folder (a folder's ``__init__`` left out).

    Every import counts, at module level or inside a function: a function-level import that closes
    a circle is still one, it only moves the failure to run time.
    """
    graph = {}
    for module, (path, source) in sources.items():
        if path.name == "__init__.py":
            continue
        folder = module.rsplit(".", 1)[0]
        graph[module] = {t for t in _imports(module, path, source, sources)
                         if t != module and t.rsplit(".", 1)[0] == folder}

    def reach(module):
        seen, todo = set(), list(graph[module])
        while todo:
            target = todo.pop()
            if target not in seen and target in graph:
                seen.add(target)
                todo.extend(graph[target])
        return seen

    return [f"{m} (imports {sorted(graph[m])})" for m in sorted(graph) if m in reach(m)]


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_run_one_way(module):
    wrong = upward_imports(SOURCES, only=module)
    assert not wrong, "imports that run upward:\n" + "\n".join(wrong)


def test_no_import_circles_inside_a_folder():
    circles = folder_circles(SOURCES)
    assert not circles, "modules in an import circle inside their folder: " + "; ".join(circles)


def test_every_module_has_a_layer():
    unknown = sorted({_layer(m) for m in SOURCES} - set(ALLOWED) - set(UNCHECKED))
    assert not unknown, f"folders without a rule in ALLOWED: {unknown}"


def _folders() -> Dict[str, List[str]]:
    """folder (package) -> its plain modules, for every folder with at least two."""
    out: Dict[str, List[str]] = {}
    for module, (path, _) in SOURCES.items():
        if path.name != "__init__.py" and "." in module:
            out.setdefault(module.rsplit(".", 1)[0], []).append(module)
    return {folder: sorted(mods) for folder, mods in sorted(out.items()) if len(mods) >= 2}


def _with(sources, module: str, line: str):
    path, source = sources[module]
    return {**sources, module: (path, source + "\n\ndef _added():\n    " + line + "\n")}


@pytest.mark.parametrize("layer", sorted(set(ALLOWED) - {"cli"}))
def test_an_upward_import_is_refused_in_every_layer(layer):
    """Add one import of a layer not allowed to it (inside a function) to a module of each layer."""
    module = next(m for m in SOURCES if _layer(m) == layer)
    forbidden = sorted(set(ALLOWED) - ALLOWED[layer] - {layer})
    assert forbidden, layer
    # "cli" sits above every layer; a layer with a sub-folder of its own is tried against that too
    target = "cli" if "cli" in forbidden else forbidden[0]
    target_module = next(m for m in SOURCES if _layer(m) == target)
    found = upward_imports(_with(SOURCES, module, f"import {target_module}"))
    assert any(f.startswith(f"{module} ") and target_module in f for f in found), found


@pytest.mark.parametrize("folder", sorted(_folders()))
def test_a_circle_is_refused_in_every_folder(folder):
    """Two modules of each folder made to import each other (one inside a function) form a circle."""
    a, b = _folders()[folder][:2]
    sources = _with(_with(SOURCES, a, f"import {b}"), b, f"from {a.rsplit('.', 1)[0]} import {a.rsplit('.', 1)[1]}")
    found = folder_circles(sources)
    assert any(f.startswith(a + " ") for f in found) and any(f.startswith(b + " ") for f in found), found


#: words a folder's docstring writes as ``word`` that are no module of it (a layer's name is allowed everywhere)
NOT_MODULES = {"core": {"verdict", "schema"}, "integrations/ultralytics": {"val", "predict"},
               "integrations/yolov5": {"yolov5"}, "record": {"locate"}}
_LITERAL = re.compile(r"``([a-z_][a-z0-9_]*)``")
_MOD_REF = re.compile(r":mod:`([\w.]+)`")


def _package_folders() -> List[Path]:
    """Every folder of the package that is a package of its own (the top level's docstring is the public API)."""
    return sorted(init.parent for init in PACKAGE.rglob("*/__init__.py"))


def _modules_of(folder: Path) -> set:
    """The modules a folder holds: its ``.py`` files and its sub-packages."""
    return ({p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
            | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()})


def docstring_drift(folder: Path, doc: str) -> List[str]:
    """What a folder's ``__init__`` docstring says wrong about the modules it holds: each module it does not name
    (as ````name````), each ````name```` that is no module of the folder (nor a layer, nor in :data:`NOT_MODULES`), each
    ``:mod:`` reference to a module that does not exist."""
    rel = folder.relative_to(PACKAGE).as_posix()
    modules, named = _modules_of(folder), set(_LITERAL.findall(doc))
    layers = {layer.split(".")[0] for layer in ALLOWED}
    wrong = [f"yolo_det/{rel}/__init__.py does not name its module {m!r} ({rel}/{m}.py)"
             for m in sorted(modules - named)]
    wrong += [f"yolo_det/{rel}/__init__.py names ``{n}``, which is no module of yolo_det/{rel}/ (removed or renamed?)"
              for n in sorted(named - modules - layers - NOT_MODULES.get(rel, set()))]
    wrong += [f"yolo_det/{rel}/__init__.py refers to :mod:`{ref}`, which does not exist"
              for ref in _MOD_REF.findall(doc) if ref not in SOURCES]
    return wrong


@pytest.mark.parametrize("folder", _package_folders(), ids=lambda f: f.relative_to(PACKAGE).as_posix())
def test_every_folder_says_what_it_owns(folder):
    """Each folder's docstring names exactly the modules the folder holds: a module added, removed or renamed
    changes it, so the docstring a reader starts from never lists a module that is gone or hides one that is there."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    assert doc and len(doc.splitlines()) >= 2, f"{folder.relative_to(PACKAGE)}/__init__.py needs a docstring"
    wrong = docstring_drift(folder, doc)
    assert not wrong, "\n".join(wrong)


def test_a_drifted_docstring_is_named_module_by_module():
    """The check names the module a docstring leaves out and the one it names that is gone."""
    folder = PACKAGE / "world"
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    drifted = doc.replace("``engine``", "engine") + " ``engines`` :mod:`yolo_det.world.gone`"
    assert docstring_drift(folder, drifted) == [
        "yolo_det/world/__init__.py does not name its module 'engine' (world/engine.py)",
        "yolo_det/world/__init__.py names ``engines``, which is no module of yolo_det/world/ (removed or renamed?)",
        "yolo_det/world/__init__.py refers to :mod:`yolo_det.world.gone`, which does not exist"]


def test_no_file_name_prefix_stands_in_for_a_folder():
    """Three or more modules of one folder sharing a prefix (``study_*``, ``ultralytics_*``) want a folder."""
    prefixes: Dict[Tuple[str, str], List[str]] = {}
    for module, (path, _) in SOURCES.items():
        if path.name != "__init__.py" and "_" in path.stem.strip("_"):
            prefixes.setdefault((module.rsplit(".", 1)[0], path.stem.split("_")[0]), []).append(path.stem)
    crowded = {k: v for k, v in prefixes.items() if len(v) >= 3}
    assert not crowded, f"file-name prefixes doing a folder's job: {crowded}"


@pytest.mark.parametrize("old,new", [
    ("yolo_det.audit", "yolo_det.strict.audit"), ("yolo_det.ops", "yolo_det.strict.swap"),
    ("yolo_det.replacements", "yolo_det.strict.replacements"), ("yolo_det.fingerprint", "yolo_det.record.fingerprint"),
    ("yolo_det.digest", "yolo_det.record.digest"), ("yolo_det.patcher", "yolo_det.patch"),
    ("yolo_det.runtime", "yolo_det.session"), ("yolo_det.determinism", "yolo_det.core.determinism"),
    ("yolo_det.proof.digest", "yolo_det.record.digest"), ("yolo_det.proof.log", "yolo_det.record.log"),
    ("yolo_det.proof.study", "yolo_det.studies.study"), ("yolo_det.proof.eval_settings", "yolo_det.evaluation.settings"),
    ("yolo_det.integrations.yolov5_world", "yolo_det.integrations.yolov5.world"),
    ("yolo_det.integrations.ultralytics_mode", "yolo_det.integrations.ultralytics.mode"),
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
