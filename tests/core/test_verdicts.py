"""One ``verdict`` vocabulary and a ``schema`` version in every command's JSON (issue 55, item 8)."""

from __future__ import annotations

import pytest

from yolo_det.cli import exit_codes
from yolo_det.core import verdicts


def test_every_verdict_maps_to_a_documented_exit_code():
    codes = {exit_codes.EXIT_OK, exit_codes.EXIT_FINDING, exit_codes.EXIT_USAGE, exit_codes.EXIT_NOT_PROVEN}
    assert set(verdicts.EXIT_CODES.values()) <= codes
    assert verdicts.exit_code(verdicts.IDENTICAL) == exit_codes.EXIT_OK
    assert verdicts.exit_code(verdicts.DIFFERS) == exit_codes.EXIT_FINDING
    assert verdicts.exit_code(verdicts.NOT_PROVEN) == exit_codes.EXIT_NOT_PROVEN
    assert verdicts.exit_code(verdicts.TOO_FEW) == exit_codes.EXIT_NOT_PROVEN


@pytest.mark.parametrize("old, new", [("differ", "differs"), ("A better beyond seed noise", "beyond seed noise"),
                                      ("B better beyond seed noise", "beyond seed noise"),
                                      ("different beyond seed noise (no better direction)", "beyond seed noise"),
                                      ("too few seeds for a verdict", "too few seeds")])
def test_old_words_read_back_as_todays(old, new):
    assert verdicts.normalize(old) == new
    assert verdicts.stamp({"verdict": old}, old)["verdict"] == new


def test_unknown_word_is_refused_naming_the_vocabulary():
    with pytest.raises(ValueError, match="not proven"):
        verdicts.stamp({}, "maybe")


def test_stamp_puts_schema_and_verdict_first_and_keeps_the_rest():
    out = verdicts.stamp({"steps": 3, "verdict": "x", "schema": 0}, verdicts.DIFFERS)
    assert list(out)[:2] == ["schema", "verdict"]
    assert out == {"schema": verdicts.SCHEMA, "verdict": "differs", "steps": 3}


# -- every command's --json: schema first, a verdict of the vocabulary, the exit code that verdict maps to ---------

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Dict, List, Tuple  # noqa: E402

from yolo_det.cli import main as cli_main  # noqa: E402
from yolo_det.studies.study import Study, StudyRun  # noqa: E402
from support.builders import checkpoint, run_folder, tiny_log  # noqa: E402

WRITER = """import os, sys
from yolo_det.record.log import LogWriter
w = LogWriter(os.environ["YOLO_DET_FINGERPRINT"], {"torch": "x", "rank": 0, "world_size": 1, "command": ["t"]})
w.write_step(1, {"param": (["w"], "a" * 32)}, lr={"lr": 0.1}, losses=[1.0], ddp={"world_size": 1, "ok": True})
w.write_final(1, ["model.w"], "c" * 32, "finish")
w.close()
"""
TINY_MODEL = """import torch
def build():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
"""


def _log(path: Path, steps: int, flip: bool = False) -> str:
    return str(tiny_log(path, steps, flip))


def _logs(tmp: Path, steps: int = 2, flip: bool = False) -> List[str]:
    return [_log(tmp / "a.jsonl", steps), _log(tmp / "b.jsonl", steps, flip)]


def _checkpoints(tmp: Path) -> List[str]:
    import torch

    return [str(checkpoint(tmp / name, {"w": torch.ones(2, 3)})) for name in ("a.pt", "b.pt")]


def _run_folders(tmp: Path) -> List[str]:
    """Two YOLOv5 run folders without weights: what decides was not there."""
    return [str(run_folder(tmp / name, opt={"epochs": 2, "hyp": {"lr0": 0.01}}, hyp={"lr0": 0.01}))
            for name in ("a", "b")]


def _searches(tmp: Path, lr0_b: float = 0.01) -> List[str]:
    out = []
    for name, lr0 in (("a", 0.01), ("b", lr0_b)):
        (tmp / name).mkdir()
        (tmp / name / "evolve.csv").write_text("metrics/mAP_0.5,lr0\n" + f"0.5,{lr0}\n")
        out.append(str(tmp / name))
    return out


def _study(folder: Path, values, seeds=(11, 22, 33)) -> str:
    runs = [StudyRun(i + 1, s, {"run": s, "init": s, "order": s, "augment": s}, str(folder / f"run{i + 1}.jsonl"),
                     None, {"val/box_loss": v, "fitness": 0.25 + v}, {"val/box_loss": v, "fitness": 0.25 + v}, 0,
                     "strict") for i, (s, v) in enumerate(zip(seeds, values))]
    Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["x"]}, runs).write(folder)
    return str(folder)


A_VALUES = [0.10, 0.20, 0.12, 0.15, 0.11, 0.18, 0.13, 0.16]
SEEDS = tuple(range(11, 19))


def _compare(tmp: Path, shift: float, seeds=SEEDS) -> List[str]:
    """A against B = A + ``shift`` with B's runs in another order (seed noise), on ``seeds``."""
    a_values = A_VALUES[:len(seeds)]
    b_values = [v + shift for v in a_values[1:] + a_values[:1]]
    return ["compare", _study(tmp / "a", a_values, seeds), _study(tmp / "b", b_values, seeds),
            "--metric", "val/box_loss", "--json"]


def _fake_val(monkeypatch, verdict: str) -> None:
    from yolo_det.evaluation.logged import Verdict
    from yolo_det.integrations import revalidation

    identical = {"identical": True, "differs": False, "not proven": None}[verdict]
    fake = Verdict(identical, "final", 1, {"mAP50": 0.5}, {"mAP50": 0.5}, [], [])
    monkeypatch.setattr(revalidation, "reproduce", lambda *a, **k: fake)


def _fake_explain(monkeypatch, missing: List[str], reproduced: bool) -> None:
    from yolo_det.integrations import revalidation

    from yolo_det.evaluation.logged import Explanation

    training = {"mAP50": 0.5, "mAP50-95": 0.3}
    yours = {k: v for k, v in (training if reproduced else {"mAP50": 0.4, "mAP50-95": 0.2}).items()
             if f"yours {k}" not in missing}
    fake = Explanation("last", 0, training, yours, [], [])
    monkeypatch.setattr(revalidation, "explain", lambda *a, **k: fake)


def _fake_parity(monkeypatch, verdict: str) -> None:
    from yolo_det.evaluation import parity

    report = parity.ParityReport("m.pt", "m.onnx", "onnx", {}, 1, (64, 64), verdict=verdict)
    monkeypatch.setattr(parity, "check", lambda *a, **k: report)


def _fake_compile(monkeypatch, verdict: str) -> None:
    from yolo_det.proof import compiled_eager

    monkeypatch.setattr(compiled_eager, "compare", lambda model, x: {"identical": verdict == "identical",
                                                                     "verdict": verdict, "graphs": 1})


def _predictions(tmp: Path) -> List[str]:
    from yolo_det.evaluation import coco
    from yolo_det.evaluation.standalone import split_images
    from yolo_det.synthetic import make_dataset

    data = Path(make_dataset(tmp / "data", n_train=1, n_val=2, imgsz=64))
    files, names = split_images(data)
    rows = [{"image_id": files[a["image_id"] - 1].stem, "category_id": a["category_id"], "bbox": a["bbox"],
             "score": 0.9} for a in coco.annotations_from_yolo(files, names)["annotations"]]
    (tmp / "p.json").write_text(json.dumps(rows))
    return ["val", "--predictions", str(tmp / "p.json"), "--data", str(data), "--json"]


def _module(tmp: Path, monkeypatch) -> str:
    (tmp / "tiny_model.py").write_text(TINY_MODEL)
    monkeypatch.syspath_prepend(str(tmp))
    monkeypatch.chdir(tmp)
    return "tiny_model:build"


Case = Callable[[Path, object], Tuple[List[str], str]]
CASES: Dict[str, Case] = {  # command -> (argv made from tmp_path and monkeypatch, the verdict expected)
    "diff logs identical": lambda t, m: (["diff", *_logs(t), "--json"], "identical"),
    "diff logs differs": lambda t, m: (["diff", *_logs(t, flip=True), "--json"], "differs"),
    "diff logs not proven": lambda t, m: (["diff", *_logs(t, steps=0), "--json"], "not proven"),
    "diff checkpoints": lambda t, m: (["diff", *_checkpoints(t), "--json"], "identical"),
    "diff run folders": lambda t, m: (["diff", *_run_folders(t), "--json"], "not proven"),
    "diff searches": lambda t, m: (["diff", *_searches(t, 0.02), "--json"], "differs"),
    "locate": lambda t, m: (["locate", *_logs(t), "--json", "--", "true"], "identical"),
    "verify": lambda t, m: (["verify", "--workdir", str(t / "w"), "--json", "--", sys.executable,
                             str((t / "writer.py", (t / "writer.py").write_text(WRITER))[0])], "identical"),
    "val identical": lambda t, m: (_fake_val(m, "identical"), ["val", str(t), "--json"])[1:] + ("identical",),
    "val not proven": lambda t, m: (_fake_val(m, "not proven"), ["val", str(t), "--json"])[1:] + ("not proven",),
    "val explain": lambda t, m: (_fake_explain(m, [], False), ["val", str(t), "--json", "--", "yolo", "val"])[1:]
    + ("differs",),
    "val --predictions": lambda t, m: (_predictions(t), "no verdict"),
    "parity agree": lambda t, m: (_fake_parity(m, "agree"), ["parity", "m.pt", "m.onnx", "--data", "d", "--json"])[1:]
    + ("agree",),
    "parity differs": lambda t, m: (_fake_parity(m, "differs"), ["parity", "m.pt", "m.onnx", "--data", "d",
                                                                  "--json"])[1:] + ("differs",),
    "seeds compare beyond": lambda t, m: (_compare(t, 0.4), "beyond seed noise"),
    "seeds compare within": lambda t, m: (_compare(t, 0.0), "within seed noise"),
    "seeds compare too few": lambda t, m: (_compare(t, 0.3, seeds=(11, 22)), "too few seeds"),
    "seeds --status": lambda t, m: (["seeds", "--status", "--workdir", _study(t / "s", [0.1, 0.2, 0.3]), "--json"],
                                    "no verdict"),
    "audit": lambda t, m: (["audit", "--model", _module(t, m).replace(":", ".py:"), "--imgsz", "16", "--json"],
                           "clean"),
    "compile-check identical": lambda t, m: (_fake_compile(m, "identical"), ["compile-check", _module(t, m), "--input",
                                                                             "1,3,8,8", "--json"])[1:] + ("identical",),
    "compile-check not proven": lambda t, m: (_fake_compile(m, "not proven"), ["compile-check", _module(t, m),
                                                                               "--input", "1,3,8,8", "--json"])[1:]
    + ("not proven",),
    "env": lambda t, m: (["env", "--json"], "no verdict"),
}


def _verdict_fields(value, path="") -> List[Tuple[str, object]]:
    """Every ``verdict`` field in a JSON document, nested ones too, with where it is."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "verdict":
                found.append((f"{path}.verdict", item))
            found += _verdict_fields(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _verdict_fields(item, f"{path}[{i}]")
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_every_commands_json_has_the_schema_and_a_verdict_of_the_vocabulary(case, tmp_path, monkeypatch, capsys):
    """Each command's ``--json`` starts with ``schema`` and ``verdict``; the verdict is a word of the vocabulary
    (nested verdicts too: a probe's, a metric's), and the command exits with the code that word maps to."""
    argv, expected = CASES[case](tmp_path, monkeypatch)
    code = cli_main(argv)
    out = capsys.readouterr().out
    document = json.loads(out)
    assert list(document)[:2] == ["schema", "verdict"], list(document)[:5]
    assert document["schema"] == verdicts.SCHEMA
    assert document["verdict"] == expected
    assert code == verdicts.exit_code(expected)
    wrong = [(where, word) for where, word in _verdict_fields(document) if word not in verdicts.VERDICTS]
    assert not wrong, wrong


# -- docs and CLI agree (issue 55, item 8) ----------------------------------------------------------------------------

import re  # noqa: E402
import shlex  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _exports(argv: List[str], capsys) -> Dict[str, str]:
    assert cli_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    return dict(line[len("export "):].split("=", 1) for line in lines)


@pytest.mark.parametrize("seed", ["0", "5", "4294967295"])
def test_env_exports_give_the_training_seed_as_yolo_det_run_does(seed, capsys, monkeypatch):
    """``yolo-det env --exports --seed N`` in a job script starts the training ``yolo-det run --seed N`` starts:
    the training seed (YOLO_DET_TRAIN_SEED) among the exports, not only PYTHONHASHSEED and YOLO_DET_SEED."""
    from yolo_det.cli import core as cli_core
    from yolo_det.core import processes, roles

    exports = _exports(["env", "--exports", "--seed", seed], capsys)
    seen = {}
    monkeypatch.setattr(processes, "run", lambda cmd, env: seen.update(env) or 0)
    assert cli_core.processes is processes and cli_main(["run", "--seed", seed, "--", "true"]) == 0
    assert exports[roles.TRAIN_SEED_ENV] == seed
    assert {k: seen[k] for k in exports} == exports  # every export is what run gives its command
    assert roles.TRAIN_SEED_ENV not in _exports(["env", "--exports"], capsys)  # no seed given, none exported


def _code_env_vars() -> set:
    from yolo_det.core import roles

    names = set()
    for path in (ROOT / "yolo_det").rglob("*.py"):
        names |= set(re.findall(r"YOLO_DET_[A-Z][A-Z_]*[A-Z]", path.read_text(encoding="utf-8")))
    return (names | set(roles.ROLE_ENV.values())) - {"YOLO_DET_SEED_"}


def test_every_environment_variable_the_code_reads_is_in_core_md_table():
    text = (ROOT / "docs" / "core.md").read_text(encoding="utf-8")
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = set(re.findall(r"`(YOLO_DET_[A-Z_]+)`", "".join(rows)))
    assert _code_env_vars() - documented == set(), "add these to docs/core.md's table of environment variables"
    assert "YOLO_DET_TRAIN_SEED" in documented and "YOLO_DET_SEED" in documented


def _extras() -> Dict[str, List[str]]:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {k: [r.strip() for r in v.strip().splitlines() if r.strip() and not r.strip().startswith("#")]
            for k, v in cfg["options.extras_require"].items()}


def test_no_message_asks_an_index_for_yolo_det_and_every_extra_hint_names_its_packages():
    """yolo-det is installed from its repository: ``pip install 'yolo-det[ray]'`` would ask PyPI for a package of
    that name. Messages name the extra's own packages (as setup.cfg declares them) and the checkout's ``-e '.[X]'``."""
    from yolo_det.core.extras import install_hint

    asking_an_index = []
    for path in (ROOT / "yolo_det").rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"pip install[^\n]*yolo-det\[", line):
                asking_an_index.append(f"{path.relative_to(ROOT)}:{number}")
    assert not asking_an_index, asking_an_index
    from packaging.requirements import Requirement

    from yolo_det.core.extras import requirements

    def by_name(lines):
        return {Requirement(line).name: Requirement(line).specifier for line in lines}

    for extra, packages in _extras().items():
        hint = install_hint(extra)
        assert f"pip install -e '.[{extra}]'" in hint
        named = requirements(extra)  # from the installed metadata: setup.cfg's, once installed
        assert not named or by_name(named) == by_name(packages), (extra, named, packages)
        assert all(shlex.quote(p) in hint for p in named), (extra, hint)


@pytest.mark.parametrize("module, extra", [("yolo_det.studies.executors", "ray"), ("yolo_det.studies.slurm", "slurm"),
                                           ("yolo_det.evaluation.coco", "coco"), ("yolo_det.studies.plot", "plot"),
                                           ("yolo_det.proof.plot", "plot"), ("yolo_det.cli.ultralytics", "ultralytics"),
                                           ("yolo_det.integrations.ultralytics.trainer", "ultralytics")])
def test_each_missing_package_message_uses_the_install_hint_of_an_existing_extra(module, extra):
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    assert re.search(rf"install_hint\((['\"]){extra}\1\)", source) and extra in _extras()


def test_no_page_of_the_docs_installs_yolo_det_from_an_index():
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    found = [f"{p.name}:{n}" for p in pages for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"pip install[^\n`]*yolo-det\[", line)]
    assert not found, f"{found}: install the extra from the repository, pip install -e '.[EXTRA]'"


def test_exit_codes_md_lists_every_verdict_with_its_exit_code():
    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    section = text.split("## JSON: `schema` and `verdict`", 1)[1]
    rows = {cells[1].strip("` "): int(cells[2]) for cells in (line.split("|") for line in section.splitlines())
            if len(cells) > 3 and cells[1].strip().startswith("`") and cells[2].strip().isdigit()}
    assert rows == verdicts.EXIT_CODES
    assert f"`{verdicts.SCHEMA}`" in section


@pytest.mark.parametrize("option", ["--json-out", "--json"])
def test_compile_check_writes_its_json_file_with_json_out_and_still_with_the_deprecated_json_path(
        option, tmp_path, monkeypatch, capsys):
    """``--json`` alone prints JSON on stdout as every command's; a file is ``--json-out PATH``; the earlier
    ``--json PATH`` still writes it and says so on stderr, the text staying on stdout."""
    from yolo_det.proof import compiled_eager

    _fake_compile(monkeypatch, "differs")
    monkeypatch.setattr(compiled_eager, "format_comparison", lambda result, name: "compiled and eager differ")
    out = tmp_path / "sub" / "c.json"
    code = cli_main(["compile-check", _module(tmp_path, monkeypatch), "--input", "1,3,8,8", option, str(out)])
    printed = capsys.readouterr()
    assert code == 1 and "compiled and eager differ" in printed.out
    saved = json.loads(out.read_text())
    assert saved["schema"] == verdicts.SCHEMA and saved["verdict"] == "differs"
    assert ("deprecated" in printed.err and "--json-out" in printed.err) == (option == "--json")
