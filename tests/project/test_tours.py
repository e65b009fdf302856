"""The first hour works: the README's tours run as written, and every command docs/index.md names exists.

The shell blocks come from the markdown itself, so a doc edit that breaks a command fails here. A fenced bash or sh
block of README.md or docs/index.md is a tour's when an HTML comment right above it names the tour
(``<!-- tour: yolov5 ultralytics -->``, invisible on GitHub); every other block is in ``EXCLUDED`` with the reason no
tour runs it, so a new block must be classified. A tour is its blocks in page order, run by ``bash -e`` in a fresh
shell: HOME in tmp, PATH holding only the system's folders (the tour's own ``source .../.venv/bin/activate`` puts the
``.venv`` first), no PYTHONPATH but what the docs set, the working folder a tmp folder holding the test's tiny data
(``data.yaml``, 8 + 4 images of 64 px) and a copy of the PyPI ``yolov5`` package at ``./yolov5``. What a new user
would type for their own data (``coco128.yaml``, pretrained weights, the image size of real data) is replaced through
``PLACEHOLDERS``, a table small enough to read; a placeholder-looking word the table does not know (``RUN_DIR``,
``...``, ``path/to/...``) fails the test naming it.

One exception to "no PYTHONPATH": where the ``.venv`` belongs to another checkout (a git worktree sharing one), its
editable install would import that checkout's ``yolo_det``; this checkout's root is then put on PYTHONPATH so the
commands run the code under test (a command the docs give ``PYTHONPATH=.`` then imports the ``.venv``'s). A fresh
clone sets none.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from yolo_det.synthetic import make_dataset

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/index.md")
TOURS = ("yolov5", "ultralytics")
MARK = re.compile(r"^<!--\s*tour:\s*([\w ,-]+?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")

#: what the docs name for a user's own machine and data -> what the tours run here (each key must occur in a tour)
PLACEHOLDERS: Dict[str, str] = {
    "path/to/yolo-det": str(ROOT),  # where the user cloned yolo-det (its .venv)
    "coco128.yaml": "data.yaml",  # the datasets the releases download: the test's tiny one, in the working folder
    "coco8.yaml": "data.yaml",
    "--weights yolov5s.pt": "--weights '' --cfg yolov5n.yaml",  # pretrained weights are a download: nano from YAML
    "--img 640": "--img 64",  # the tiny data's image size
    "imgsz=640": "imgsz=64",
}

#: the first line of each shell block no tour runs -> why
EXCLUDED: Dict[str, str] = {
    "bash scripts/demo.sh": "the set-up: both install the .venv the tours run in, and scripts/test.sh runs this suite "
                            "(it would run itself)",
    "yolo-det verify --runs 2 -- python train.py --data data.yaml --epochs 1 --name v{run} --deterministic strict":
        "shown from inside a training tree with what each command prints (`#` lines); verify, diff and locate of the "
        "PyPI yolov5 run in tests/proof/ (test_verify.py, test_run_dirs.py, test_locate.py)",
    "yolo-det seeds --n 5 --workdir studies/base -- python train.py --data d.yaml --epochs 30 --name base{run}":
        "two studies of 5 seeds x 30 epochs; seeds and compare run in tests/studies/ (test_studies.py)",
    "yolo-det val runs/train/exp --epoch best -- python val.py --weights runs/train/exp/weights/best.pt --data d.yaml":
        "shown from inside a training tree; val, the COCO evaluator and parity run in tests/evaluation/ "
        "(test_eval_yolov5.py, test_coco_gap.py, test_parity.py)",
}

#: words that stand for something the user fills in: capitals (RUN_DIR, KEY.pem), an ellipsis, path/to/..., <...>
PLACEHOLDER = re.compile(r"(?<![\w$./{-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*(?:\.[a-z]+|:[A-Z_]+)?(?![\w=])"
                         r"|\.\.\.|…|\bpath/to/[\w./-]*|<[\w -]+>")
#: capitals that are no placeholder: the variables a shell line sets or reads
NOT_PLACEHOLDERS = {"PATH", "HOME"}


def shell_blocks(page: Path) -> List[Tuple[int, List[str], str]]:
    """The fenced bash/sh blocks of ``page``: (line number of the fence, the tours marked above it, the block)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        if fence.group(1) in ("bash", "sh"):
            above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = MARK.match(above)
            tours = mark.group(1).replace(",", " ").split() if mark else []
            blocks.append((i + 1, tours, "\n".join(lines[i + 1:end]) + "\n"))
        i = end + 1
    return blocks


def first_command(block: str) -> str:
    """A block's first line that is not a comment, its own comment cut."""
    line = next((ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    return re.sub(r"\s+#.*$", "", line).strip()


def _whole(key: str) -> str:
    """A regular expression matching ``key`` as a whole word of a command (not inside a longer path or number)."""
    return rf"(?<![\w./-]){re.escape(key)}(?![\w-]|\.\w)"


def fill(block: str, table: Dict[str, str] = PLACEHOLDERS) -> str:
    """``block`` with the table's placeholders filled in; a ValueError names any other placeholder it holds."""
    for key, value in table.items():
        block = re.sub(_whole(key), lambda _: value, block)
    unknown = []
    for line in block.splitlines():
        code = re.sub(r"(^|\s)#.*$", "", line)  # comments say what a line does; only the command is run
        unknown += [m.group(0) for m in PLACEHOLDER.finditer(code) if m.group(0) not in NOT_PLACEHOLDERS]
    if unknown:
        raise ValueError(f"placeholder(s) {', '.join(sorted(set(unknown)))} not in the test's PLACEHOLDERS table: "
                         "add what the tour should run instead, or write the docs' command without one")
    return block


def tour_script(tour: str) -> str:
    """The tour's blocks, in page order, placeholders filled."""
    parts = [f"# {page}:{line}\n{fill(block)}" for page in PAGES for line, tours, block in shell_blocks(ROOT / page)
             if tour in tours]
    return "\n".join(parts)


def test_every_shell_block_is_a_tour_or_excluded_with_a_reason():
    unclassified, unknown_tours, seen = [], [], set()
    for page in PAGES:
        for line, tours, block in shell_blocks(ROOT / page):
            unknown_tours += [f"{page}:{line}: {t}" for t in tours if t not in TOURS]
            if not tours:
                seen.add(first_command(block))
                if first_command(block) not in EXCLUDED:
                    unclassified.append(f"{page}:{line}: {first_command(block)!r}")
    assert not unknown_tours, f"tours this test does not run ({', '.join(TOURS)}): {unknown_tours}"
    assert not unclassified, ("shell blocks neither marked `<!-- tour: NAME -->` nor in EXCLUDED with a reason: "
                              + "; ".join(unclassified))
    assert not set(EXCLUDED) - seen, f"EXCLUDED names blocks the docs no longer have: {set(EXCLUDED) - seen}"


@pytest.mark.parametrize("tour", TOURS)
def test_each_tour_has_commands_and_fills_every_placeholder(tour):
    script = tour_script(tour)
    commands = [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(commands) >= 3, f"the {tour} tour runs only {commands}"
    assert "activate" in script, "the tour does not run the README's set-up of its shell"


def test_every_placeholder_in_the_table_is_used():
    text = "\n".join(block for page in PAGES for _, tours, block in shell_blocks(ROOT / page) if tours)
    unused = [k for k in PLACEHOLDERS if not re.search(_whole(k), text)]
    assert not unused, f"PLACEHOLDERS entries no tour holds any longer: {unused}"


@pytest.mark.parametrize("command, named", [
    ("yolo-det diff RUN_A RUN_B", "RUN_A, RUN_B"),
    ("yolo-det report RUN_DIR... --out report.html", "..., RUN_DIR"),
    ("yolo-det attest runs/x --key KEY.pem --out bundle/", "KEY.pem"),
    ("source path/to/venv/bin/activate", "path/to/venv/bin/activate"),
    ("yolo-det compile-check MODULE:FACTORY", "MODULE:FACTORY"),
    ("yolo-det run -- yolo train ...", "..."),
])
def test_a_placeholder_the_table_does_not_know_is_named(command, named):
    with pytest.raises(ValueError, match=re.escape(f"placeholder(s) {named} not in")):
        fill(command, {})


@pytest.mark.parametrize("command", [
    "PYTHONPATH=. python ./yolov5/train.py --data data.yaml --deterministic strict   # RUN_DIR in a comment",
    'eval "$(yolo-det env --exports --offline)"',
    "export PATH=$HOME/bin:$PATH",
    "yolo-det verify --runs 2 -- python train.py --name v{run}",
])
def test_commands_as_written_hold_no_placeholder(command):
    assert fill(command, {}) == command


def test_a_table_entry_fills_only_whole_words():
    assert fill("--img 640 --img 6400 x/coco128.yaml.bak", {"--img 640": "--img 64", "coco128.yaml": "d.yaml"}) \
        == "--img 64 --img 6400 x/coco128.yaml.bak"


# ---- docs/index.md: a table of signposts (`...` stands for the rest); each yolo-det command in it must exist ----

INDEX_COMMAND = re.compile(r"`(yolo-det [^`]*)`")


def _subparsers(parser):
    import argparse

    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def unknown_parts(command: str) -> List[str]:
    """The subcommands and options of ``command`` (``yolo-det ...``) that yolo-det's parser does not have."""
    from yolo_det.cli import build_parser

    tokens = command.split()[1:]
    tokens = tokens[:tokens.index("--")] if "--" in tokens else tokens
    parser, missing = build_parser(), []
    while tokens and _subparsers(parser) is not None and not tokens[0].startswith("-"):
        choices = _subparsers(parser).choices
        if tokens[0] not in choices:
            if parser.prog == "yolo-det":
                missing.append(f"command {tokens[0]!r}")
            break
        parser, tokens = choices[tokens[0]], tokens[1:]
    options = parser._option_string_actions
    missing += [f"option {t.split('=')[0]!r} of {parser.prog}" for t in tokens
                if t.startswith("-") and t.split("=")[0] not in options]
    return missing


def test_every_yolo_det_command_the_index_names_exists():
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    commands = INDEX_COMMAND.findall(text)
    assert len(commands) >= 15, commands
    wrong = {c: unknown_parts(c) for c in commands if unknown_parts(c)}
    assert not wrong, f"docs/index.md names commands or options yolo-det does not have: {wrong}"


def test_a_renamed_option_in_the_index_would_fail():
    assert unknown_parts("yolo-det verify --runs 2 -- python train.py") == []
    assert unknown_parts("yolo-det verify --runz 2 -- python train.py") == ["option '--runz' of yolo-det verify"]
    assert unknown_parts("yolo-det verfy RUN") == ["command 'verfy'"]
    assert unknown_parts("yolo-det attest verify bundle/ --key PUB.pem") == []


# ---- the tours, run ----

def _fresh_env(home: Path) -> Dict[str, str]:
    """A new user's shell: HOME, the system's PATH, nothing else (see the module docstring for PYTHONPATH)."""
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    venv_python = ROOT / ".venv" / "bin" / "python"
    if not venv_python.is_file():
        pytest.skip("no .venv in this checkout: the README's set-up (bash scripts/test.sh) makes the one the tours use")
    code = "import importlib.util as u; print(u.find_spec('yolo_det').origin)"
    where = subprocess.run([str(venv_python), "-c", code], env=env, cwd=home, capture_output=True, text=True)
    if where.returncode != 0 or Path(where.stdout.strip()).resolve() != (ROOT / "yolo_det" / "__init__.py").resolve():
        env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def workdir(tmp_path) -> Path:
    """The folder a user runs the tours from: their data and a copy of the PyPI yolov5 (where the docs say
    ./yolov5), found without importing it here (torch's import is the tours' to pay)."""
    spec = importlib.util.find_spec("yolov5")
    if spec is None or spec.origin is None:
        pytest.skip("the PyPI yolov5 is not installed")
    work = tmp_path / "work"
    make_dataset(work, n_train=8, n_val=4, imgsz=64)
    shutil.copytree(Path(spec.origin).parent, work / "yolov5", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "home").mkdir()
    return work


#: what each tour leaves in the working folder, as the docs say
LEAVES = {
    "yolov5": ["runs/train/exp/determinism.json", "runs/train/exp/fingerprint.jsonl", "runs/train/exp/weights/best.pt"],
    "ultralytics": ["runs/detect/train/determinism.json", "runs/detect/train/weights/best.onnx"],
}


@pytest.mark.slow  # trains the real PyPI yolov5 / Ultralytics
@pytest.mark.parametrize("tour", TOURS)
def test_the_tour_runs_as_written(tour, workdir):
    script = workdir.parent / f"{tour}.sh"
    # On a failure, the command that failed and its status; the rest is the docs' own text.
    script.write_text("trap 'echo \"tour failed (exit $?) at: $BASH_COMMAND\" >&2' ERR\n" + tour_script(tour))
    env = _fresh_env(workdir.parent / "home")
    proc = subprocess.run(["bash", "-e", str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)
    failed = re.findall(r"tour failed \(exit \d+\) at: .*", proc.stderr)
    assert proc.returncode == 0, (f"the {tour} tour of {' and '.join(PAGES)}: {failed[-1] if failed else ''}\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    missing = [p for p in LEAVES[tour] if not (workdir / p).is_file()]
    assert not missing, f"the {tour} tour ran but left no {missing} in the folder it ran from"
