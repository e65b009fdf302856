"""The run folder's one owner (``yolo_det/record/run_folder.py``): its readers find the training's log, not an
evaluation's, and every reader of a run folder agrees with it."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st


def _log(path: Path, epochs, run_dir=None) -> Path:
    """A fingerprint log with one step and one validation per epoch in ``epochs``."""
    from yolo_det.record.log import LogWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = LogWriter(path, {"yolo_det": "0.1.0", "torch": "2.x", "rank": 0, "world_size": 1, "command": ["t"]})
    for step, epoch in enumerate(epochs, 1):
        writer.write_step(step, {"param": (["w"], "a" * 32)}, lr={"group0.lr": 0.01}, losses=[1.0])
        writer.write_validation(epoch, step, ["batch0.image0"], "b" * 32, {"mAP50": 0.5}, None, None)
    writer.write_final(len(epochs), ["model.w"], "c" * 32, "finish", **({"run_dir": run_dir} if run_dir else {}))
    writer.close()
    return path


def _training_folder(root: Path, report=None) -> Path:
    (root / "weights").mkdir(parents=True)
    (root / "opt.yaml").write_text("epochs: 3\n")
    (root / "weights" / "last.pt").write_bytes(b"")
    if report is not None:
        (root / "determinism.json").write_text(json.dumps(report))
    return root


def test_find_run_takes_the_trainings_log_not_an_evaluations_numbered_one(tmp_path):
    """A run folder holding the training's ``fingerprint.jsonl`` and an evaluation's ``fingerprint.1.jsonl``
    (written into it later): the logged validations are the training's (bug: ``sorted(glob(...))[0]`` took
    ``fingerprint.1.jsonl``, which sorts first)."""
    from yolo_det.evaluation import logged

    run_dir = _training_folder(tmp_path / "exp")
    _log(run_dir / "fingerprint.jsonl", [0, 1, 2])  # the training: three epochs validated
    _log(run_dir / "fingerprint.1.jsonl", [None])  # a standalone evaluation placed beside it
    run = logged.find_run(run_dir)
    assert run.log == run_dir / "fingerprint.jsonl"
    assert [v.epoch for v in run.validations] == [0, 1, 2]


def test_find_run_never_takes_an_evaluations_log_for_the_trainings(tmp_path):
    """Only an evaluation's numbered log (and a rank's) in the folder: the training's log is not there."""
    from yolo_det.evaluation import logged

    run_dir = _training_folder(tmp_path / "exp")
    _log(run_dir / "fingerprint.1.jsonl", [None])
    _log(run_dir / "fingerprint.rank1.jsonl", [0])
    assert logged.find_run(run_dir).log is None


names = st.sampled_from(["fingerprint.jsonl", "fingerprint.1.jsonl", "fingerprint.2.jsonl",
                         "fingerprint.rank1.jsonl", "fingerprint.gen0.jsonl", "other.jsonl"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(present=st.sets(names), pointer=st.one_of(st.none(), names, st.just("elsewhere/fp.jsonl")))
def test_every_reader_of_a_run_folder_finds_the_same_log(tmp_path_factory, present, pointer):
    """The training's log of a run folder, whatever logs it holds and whatever ``determinism.json`` names:
    the folder's own ``fingerprint.jsonl``, else the existing file the report names, else none (oracle: the
    rule spelled out here); ``proof/run_dirs``, ``evaluation/logged`` and the trackers' evidence all agree."""
    from yolo_det.evaluation import logged
    from yolo_det.proof.run_dirs import RunFolder
    from yolo_det.record import run_folder
    from yolo_det.trackers import evidence

    root = tmp_path_factory.mktemp("run")
    run_dir = _training_folder(root / "exp")
    for name in present:
        _log(run_dir / name, [0], run_dir=str(run_dir))
    if pointer is None:
        pointed = None
    elif pointer.startswith("elsewhere"):
        pointed = _log(root / pointer, [0])
    else:
        pointed = run_dir / pointer  # a file only when present
    report = {} if pointed is None else {"fingerprint_log": str(pointed)}
    (run_dir / "determinism.json").write_text(json.dumps(report))
    own = run_dir / "fingerprint.jsonl"
    expected = own if own.is_file() else (pointed if pointed is not None and pointed.is_file() else None)
    assert run_folder.find_log(run_dir, report) == expected
    assert RunFolder.read(run_dir).log == expected
    assert logged.find_run(run_dir).log == expected
    final = (evidence.run_evidence(run_dir) or {}).get("final")
    assert (final or {}).get("log") == (None if expected is None else str(expected))


def test_the_run_folder_of_a_folder_a_log_or_a_checkpoint(tmp_path):
    """One ``run_folder_of``: a folder holding ``determinism.json`` or ``trackers.json``, a log's final
    ``run_dir`` (else its own folder), a checkpoint's folder above ``weights/``; None elsewhere."""
    from yolo_det.record import run_folder

    run_dir = _training_folder(tmp_path / "exp", report={"mode": "warn"})
    log = _log(tmp_path / "logs" / "fp.jsonl", [0], run_dir=str(run_dir))
    assert run_folder.run_folder_of(run_dir) == run_dir.resolve()
    assert run_folder.run_folder_of(log) == run_dir.resolve()
    assert run_folder.run_folder_of(run_dir / "weights" / "last.pt") == run_dir.resolve()
    assert run_folder.run_folder_of(tmp_path / "logs") is None
    assert run_folder.checkpoint_folder(run_dir / "weights" / "last.pt") == run_dir
    assert run_folder.checkpoint_folder(tmp_path / "best.pt") == tmp_path


def test_an_unreadable_report_is_an_error_naming_the_file(tmp_path):
    from yolo_det.record import run_folder

    (tmp_path / "determinism.json").write_text("{not json")
    with pytest.raises(run_folder.RunFolderError) as info:
        run_folder.read_report(tmp_path)
    assert info.value.path == tmp_path / "determinism.json"
    (tmp_path / "determinism.json").write_text("[1, 2]")
    with pytest.raises(run_folder.RunFolderError):
        run_folder.read_report(tmp_path)
    assert run_folder.read_report(tmp_path / "nowhere") is None


def test_an_evaluations_log_takes_the_first_free_number(tmp_path):
    from yolo_det.record import run_folder

    assert run_folder.evaluation_log_path(tmp_path) == tmp_path / "fingerprint.jsonl"
    (tmp_path / "fingerprint.jsonl").write_text("")
    (tmp_path / "fingerprint.1.rank1.jsonl").write_text("")
    assert run_folder.evaluation_log_path(tmp_path) == tmp_path / "fingerprint.1.jsonl"
    assert run_folder.evaluation_log_path(tmp_path, rank=1) == tmp_path / "fingerprint.2.jsonl"


def test_every_log_of_a_folder_is_listed_and_nothing_else(tmp_path):
    from yolo_det.record import run_folder

    names = ["fingerprint.jsonl", "fingerprint.1.jsonl", "fingerprint.rank1.jsonl", "fingerprint.gen0.jsonl"]
    for name in names + ["fingerprints.jsonl", "other.jsonl", "fingerprint.json"]:
        (tmp_path / name).write_text("")
    assert [p.name for p in run_folder.log_files(tmp_path)] == sorted(names)


def test_a_resumed_runs_logs_read_as_one_chain(tmp_path):
    """``read_log_chain`` is ``splice.join_logs`` applied in order (oracle): steps renumbered, the last final."""
    from yolo_det.record import run_folder
    from yolo_det.record.splice import join_logs

    a, b, c = (_log(tmp_path / f"{n}.jsonl", epochs) for n, epochs in (("a", [0]), ("b", [1, 2]), ("c", [3])))
    chain = run_folder.read_log_chain([a, b, c])
    assert chain.steps == join_logs(join_logs(a, b), c).steps and len(chain.steps) == 4
    assert chain.final.steps == 4 and [v.epoch for v in chain.validations] == [0, 1, 2, 3]
    assert run_folder.read_log_chain([a]).steps == join_logs(a, b).steps[:1]


def test_a_final_line_that_does_not_check_is_no_final_record(tmp_path):
    from yolo_det.record import run_folder

    log = _log(tmp_path / "fp.jsonl", [0], run_dir=str(tmp_path))
    assert run_folder.final_record(log).run_dir == str(tmp_path)
    text = log.read_text().splitlines()
    text[-1] = json.dumps({"final": True, "steps": 1, "names": ["a", "b"], "digests": "c" * 32})  # 2 names, 1 digest
    log.write_text("\n".join(text) + "\n")
    assert run_folder.final_record(log) is None
