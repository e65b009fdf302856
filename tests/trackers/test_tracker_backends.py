"""The tracker backend interface (docs/trackers.md): every tracker is one :class:`Backend` of the registry, called
alike by ``publish`` and chosen by ``selection`` from the registry's names, so a new tracker is one new module; and
the verdict a tracker records is the judging command's own (its word, that word's exit code, its JSON)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yolo_det.core import verdicts
from yolo_det.trackers import backend as backend_mod
from yolo_det.trackers import links, log_run, log_verdict, note_active_run, publish, registry, selection


def test_every_registered_tracker_is_one_backend_module():
    assert registry.NAMES == tuple(registry.BACKENDS) and len(set(registry.NAMES)) == len(registry.NAMES)
    for module in registry.MODULES:
        backend = importlib.import_module(f"yolo_det.trackers.{module}").BACKEND
        assert isinstance(backend, backend_mod.Backend)
        assert registry.get(backend.name) is backend and backend.package
    assert set(selection.TRACKERS) == set(registry.NAMES)
    with pytest.raises(selection.SelectionError, match="use a comma-separated list of " + ", ".join(registry.NAMES)):
        selection.requested({selection.ENV: "nosuchtracker"})


class Recorder(backend_mod.Backend):
    """A third tracker, added the way a new module would add one: it records what publish gives it."""

    name = "recorder"
    package = "json"  # installed everywhere

    def __init__(self, used: bool = True) -> None:
        self.used = used
        self.runs, self.verdicts = [], []
        self.active = None

    def in_use(self, run_dir, link, environ):
        return self.used

    def log_run(self, run_dir, evidence, link):
        self.runs.append((Path(run_dir), dict(evidence), dict(link)))
        return {"run": f"r{len(self.runs)}", "seen": dict(link)}

    def log_verdict(self, link, evidence):
        self.verdicts.append((dict(link), dict(evidence)))

    def active_run(self, started_by):
        return None if self.active is None else {"run": self.active, "started_by": started_by}


def _run_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "determinism.json").write_text(json.dumps({"mode": "strict", "seed": 3, "steps": 2}))
    return root


@pytest.fixture
def recorder(monkeypatch):
    for name in ("YOLO_DET_TRACKERS", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    tracker = Recorder()
    monkeypatch.setitem(registry.BACKENDS, tracker.name, tracker)
    return tracker


def test_a_new_backend_gets_the_evidence_the_verdicts_and_the_noted_run(tmp_path, recorder, monkeypatch):
    folder = _run_folder(tmp_path / "run")
    recorder.active = "callback-run"  # a release's callback started a run in this process
    assert note_active_run(folder, "ultralytics", echo=pytest.fail)["recorder"]["run"] == "callback-run"
    assert log_run(folder, echo=pytest.fail) == ["recorder"]
    (run_dir, evidence, link), = recorder.runs
    assert run_dir == folder and evidence["mode"] == "strict" and evidence["seed"] == 3
    assert link == {"run": "callback-run", "started_by": "ultralytics"}  # logged into the noted run
    assert links.read(folder)["recorder"]["run"] == "r1"
    copy = tmp_path / "copy"  # a copied folder names the same tracker run: one verdict
    copy.mkdir()
    (copy / "determinism.json").write_text((folder / "determinism.json").read_text())
    (copy / links.FILE).write_text((folder / links.FILE).read_text())
    assert log_verdict("diff", 0, {"verdict": "identical"}, [folder, copy], echo=pytest.fail) == [
        folder.resolve(), copy.resolve()]
    (link, evidence), = recorder.verdicts
    assert link["run"] == "r1" and evidence["verdict"] == "identical" and evidence["exit_code"] == 0
    monkeypatch.setenv(selection.ENV, "off")
    assert log_run(folder, echo=pytest.fail) == [] and note_active_run(folder, "x", echo=pytest.fail) == {}
    monkeypatch.setenv(selection.ENV, "recorder")  # asked for by name: chosen whether in use or not
    recorder.used = False
    assert log_run(folder, echo=pytest.fail) == ["recorder"]


def test_a_backend_that_raises_is_one_line_and_the_others_still_log(tmp_path, recorder, monkeypatch):
    class Broken(Recorder):
        name = "broken"

        def log_run(self, run_dir, evidence, link):
            raise ConnectionError("store down")

    monkeypatch.setitem(registry.BACKENDS, "broken", Broken())
    folder = _run_folder(tmp_path / "run")
    lines = []
    assert log_run(folder, echo=lines.append) == ["recorder"]
    assert len(lines) == 1 and "broken could not log the run's evidence (ConnectionError: store down)" in lines[0]
    assert "broken" not in links.read(folder)


class Protocol:
    """A result implementing core/verdicts' result protocol."""

    def __init__(self, word: str, extra: dict) -> None:
        self.verdict = word
        self.extra = extra

    @property
    def exit_code(self) -> int:
        return verdicts.exit_code(self.verdict)

    def to_json(self) -> dict:
        return verdicts.stamp(self.extra, self.verdict)


WORDS = st.sampled_from(list(verdicts.EXIT_CODES) + ["differ", "A better beyond seed noise", "too few seeds for a verdict"])
JUNK = st.one_of(st.none(), st.text(max_size=12), st.integers(), st.sampled_from(["Identical", "A better", "", "ok"]))
EXTRA = st.dictionaries(st.sampled_from(["better", "statement", "p", "runs"]), st.one_of(st.text(max_size=8), st.integers()),
                        max_size=3)


@st.composite
def results(draw):
    """A command's result as the CLI passes it: a protocol object, a mapping with a word (or junk), or nothing."""
    kind = draw(st.sampled_from(["protocol", "mapping", "junk mapping", "none"]))
    if kind == "protocol":
        return Protocol(draw(WORDS), draw(EXTRA))
    if kind == "mapping":
        return {"verdict": draw(WORDS), **draw(EXTRA)}
    if kind == "junk mapping":
        return {"verdict": draw(JUNK), **draw(EXTRA)}
    return None


def _oracle(result, code):
    """The word a command's own JSON says (independently of publish): its ``verdict`` when it is a word of the
    vocabulary or an earlier release's spelling of one, else None (the code's own word is then recorded)."""
    said = result.to_json()["verdict"] if isinstance(result, Protocol) else (result or {}).get("verdict")
    old = {"differ": "differs", "A better beyond seed noise": "beyond seed noise",
           "too few seeds for a verdict": "too few seeds"}
    if isinstance(said, str) and said in verdicts.EXIT_CODES:
        return said
    return old.get(said) if isinstance(said, str) else None


@settings(max_examples=300, deadline=None)
@given(result=results(), code=st.integers(min_value=0, max_value=4))
def test_the_recorded_verdict_is_the_commands_own_word_with_that_words_code(result, code):
    word, recorded_code, payload = publish.judged(result, code)
    assert word in verdicts.VERDICTS
    expected = _oracle(result, code)
    if expected is not None:  # never a word beside another word's exit code
        assert word == expected and recorded_code == verdicts.EXIT_CODES[expected]
    else:
        assert recorded_code == code and verdicts.EXIT_CODES[word] == (code if code in (0, 1, 2, 3) else 2)
    if isinstance(result, Protocol):
        assert payload == result.to_json() and payload["schema"] == verdicts.SCHEMA
    assert publish.verdict_word(result, payload, code) == word


def test_a_verdict_is_recorded_with_its_own_code_not_the_one_passed(tmp_path, recorder):
    """A command that said "not proven" and exited 0 (a CLI bug) still gets "not proven", exit 3, in the tracker."""
    folder = _run_folder(tmp_path / "run")
    links.remember(folder, "recorder", {"run": "r"})
    log_verdict("seeds_compare", 0, {"verdict": "not proven", "better": None}, [folder], echo=pytest.fail)
    (_, evidence), = recorder.verdicts
    assert (evidence["verdict"], evidence["exit_code"]) == ("not proven", 3)
    assert evidence["result"] == {"verdict": "not proven", "better": None}
