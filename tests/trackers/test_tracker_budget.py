"""One time budget per command for every tracker call together, one warning line, never a failed caller
(docs/trackers.md, "A tracker that fails never fails the training"; issue 59 item 7).

The stores that used to hold a command for minutes: an MLflow SQLite store at a path that cannot hold a database
(MLflow 3 retries the engine's creation for ~100 s: a training's finish waited 105 s, ``diff`` 1 min 47 s with 37
stderr lines) and a server that accepts and never answers (5 s per judged run: ~200 s for two 20-seed studies).
The time bounds below are hang guards (each case took minutes before), not performance figures.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import PYTHON, run
from support.trackers import TINY, MlflowServer, SilentServer, need
from support.verify import script_env
from yolo_det.trackers import budget as budget_mod
from yolo_det.trackers import links, log_run, log_verdict

#: seconds a command may take here, start-up included (a hang guard: the old code took 105 s, 107 s, 200 s)
HANG_GUARD_S = 45
UNWRITABLE = "sqlite:////proc/mlflow.db"  # procfs: no file can be created there
#: the same training, MLflow's own check of the path turned off: the budget alone bounds the engine's retries
BUDGET_ALONE = ("import runpy, sys; from yolo_det.trackers import mlflow_runs; mlflow_runs.check_store = lambda uri: None; "
                "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def _warnings(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("yolo-det: warning:")]


@pytest.fixture
def clean_trackers(monkeypatch):
    for name in ("YOLO_DET_TRACKERS", "YOLO_DET_TRACKER_BUDGET", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
                 "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("guard", ["sqlite check", "budget alone"])
def test_an_unwritable_sqlite_store_costs_a_training_one_line_not_minutes(guard, tmp_path, train_env):
    need("mlflow")
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    run_dir = tmp_path / "run"
    env = script_env(train_env, MLFLOW_TRACKING_URI=UNWRITABLE)
    env.pop("YOLO_DET_TRACKERS", None)
    cmd = [PYTHON, script, run_dir]
    if guard == "budget alone":
        cmd = [PYTHON, "-c", BUDGET_ALONE, script, run_dir]
        env[budget_mod.BUDGET_ENV] = "3"
    start = time.monotonic()
    proc = run(cmd, env=env, timeout=300)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (run_dir / "determinism.json").is_file()  # the run's own evidence is there
    warnings = _warnings(proc.stderr)
    assert len(warnings) == 1 and "mlflow could not log the run's evidence" in warnings[0], proc.stderr
    assert ("/proc/mlflow.db" if guard == "sqlite check" else budget_mod.BUDGET_ENV) in warnings[0]
    if guard == "sqlite check":  # MLflow never touched the store: none of its retry lines
        assert "SQLAlchemy engine could not be created" not in proc.stderr, proc.stderr
    assert "mlflow" not in links.read(run_dir)
    assert seconds < HANG_GUARD_S, seconds


def _run_folder(root: Path, link=None) -> Path:
    """A run folder: a report and, when ``link`` is given, a ``trackers.json`` naming that MLflow run."""
    root.mkdir(parents=True)
    (root / "determinism.json").write_text(json.dumps({"mode": "warn", "seed": 0, "steps": 2}))
    if link is not None:
        (root / links.FILE).write_text(json.dumps({"mlflow": link}))
    return root


def test_diff_with_an_unwritable_sqlite_store_returns_its_verdict_and_one_line(tmp_path, train_env):
    need("mlflow")
    a = _run_folder(tmp_path / "a", {"tracking_uri": UNWRITABLE, "run_id": "0" * 32, "experiment_id": "0"})
    b = _run_folder(tmp_path / "b")
    env = script_env(train_env, MLFLOW_TRACKING_URI=UNWRITABLE)
    env.pop("YOLO_DET_TRACKERS", None)
    start = time.monotonic()
    proc = run([PYTHON, "-m", "yolo_det", "diff", a, b, "--json"], env=env, timeout=300)
    seconds = time.monotonic() - start
    assert json.loads(proc.stdout)["verdict"]  # the command's verdict stands
    warnings = _warnings(proc.stderr)
    assert len(warnings) == 1 and "mlflow could not log the diff verdict" in warnings[0], proc.stderr
    assert "SQLAlchemy engine could not be created" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3, proc.stderr  # not MLflow's 37 retry lines
    assert seconds < HANG_GUARD_S, seconds


def test_a_silent_server_costs_one_budget_for_forty_judged_runs(tmp_path, clean_trackers):
    """Two 20-seed studies judged against a server that accepts and never answers: one budget, one line."""
    need("mlflow")
    server = SilentServer(lifetime=120)
    try:
        runs = [_run_folder(tmp_path / f"seed{i}", {"tracking_uri": server.uri, "run_id": f"{i:032x}"})
                for i in range(40)]
        lines = []
        start = time.monotonic()
        judged = log_verdict("seeds_compare", 0, {"verdict": "within seed noise"}, runs, echo=lines.append)
        seconds = time.monotonic() - start
    finally:
        server.stop()
    assert judged == [r.resolve() for r in runs]
    assert len(lines) == 1, lines
    assert "mlflow could not log the seeds_compare verdict for 40 of 40 runs" in lines[0], lines[0]
    assert server.accepted >= 1  # it was asked, and never answered
    assert seconds < HANG_GUARD_S, seconds


def test_a_spent_budget_skips_every_later_call_and_says_so_once(tmp_path, clean_trackers, monkeypatch):
    """A call that outlives the budget is abandoned; the calls after it are not started; one line names them all."""
    from yolo_det.trackers import registry

    calls = []
    release = __import__("threading").Event()

    class Hung(registry.Backend):
        name = "hung"
        package = "json"

        def in_use(self, run_dir, link, environ):
            return True

        def log_run(self, run_dir, evidence, link):
            raise AssertionError("not called here")

        def log_verdict(self, link, evidence):
            calls.append(link["id"])
            release.wait(30)  # a store that never answers (released at the test's end)

    monkeypatch.setitem(registry.BACKENDS, "hung", Hung())
    monkeypatch.setenv(budget_mod.BUDGET_ENV, "0.5")
    runs = []
    for i in range(5):
        folder = _run_folder(tmp_path / f"r{i}")
        (folder / links.FILE).write_text(json.dumps({"hung": {"id": i}}))
        runs.append(folder)
    lines = []
    try:
        log_verdict("verify", 1, {"verdict": "differs"}, runs, echo=lines.append)
    finally:
        release.set()
    assert calls == [0]  # the first call held the whole budget; the other four were skipped
    assert len(lines) == 1 and "hung could not log the verify verdict for 5 of 5 runs" in lines[0], lines
    assert "OutOfTime" in lines[0] and budget_mod.BUDGET_ENV in lines[0]


@pytest.mark.parametrize("value,seconds", [("", budget_mod.BUDGET_S), ("2.5", 2.5), ("0", 0.0), ("-1", budget_mod.BUDGET_S),
                                           ("ten", budget_mod.BUDGET_S)])
def test_the_budget_is_read_from_the_environment(value, seconds):
    assert budget_mod.budget_seconds({budget_mod.BUDGET_ENV: value}) == seconds


def test_a_zero_budget_runs_nothing_and_a_failure_is_reraised():
    with pytest.raises(budget_mod.OutOfTime):
        budget_mod.Budget(0).call(pytest.fail, "never called")
    with pytest.raises(KeyError):
        budget_mod.Budget(5).call({}.__getitem__, "missing")
    assert budget_mod.Budget(5).call(sum, [1, 2]) == 3


def test_a_working_sqlite_store_still_gets_the_evidence_and_the_verdict(tmp_path, clean_trackers, monkeypatch):
    """The SQLite check and the budget leave a store that works alone: evidence and verdict land, no warning."""
    need("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # MLflow creates its tables (seconds) before the budget runs; the artifacts stay under tmp_path
    experiment = MlflowClient(tracking_uri=uri).create_experiment("t", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    monkeypatch.chdir(tmp_path)
    folder = _run_folder(tmp_path / "run")
    lines = []
    assert log_run(folder, echo=lines.append) == ["mlflow"]
    assert log_verdict("diff", 0, {"verdict": "identical"}, [folder], echo=lines.append) == [folder.resolve()]
    assert lines == []
    link = links.read(folder)["mlflow"]
    tags = MlflowClient(tracking_uri=uri).get_run(link["run_id"]).data.tags
    assert tags["yolo_det.mode"] == "warn" and tags["yolo_det.verdict.diff"] == "identical"
    assert tags["yolo_det.verdict.diff.exit_code"] == "0"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    need("mlflow")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-budget"))
    yield server
    server.stop()


@pytest.mark.slow
def test_a_working_server_gets_every_verdict_of_many_judged_runs(mlflow_server, tmp_path, clean_trackers):
    """Twelve judged runs on a real server: the budget is a bound on hangs, not a cut of working calls."""
    from mlflow.tracking import MlflowClient

    uri = mlflow_server.uri()
    client = MlflowClient(tracking_uri=uri)
    ids = [client.create_run("0").info.run_id for _ in range(12)]
    runs = [_run_folder(tmp_path / f"seed{i}", {"tracking_uri": uri, "run_id": run_id}) for i, run_id in enumerate(ids)]
    lines = []
    log_verdict("seeds", 0, {"verdict": "no verdict", "runs": len(runs)}, runs, echo=lines.append)
    assert lines == []
    for run_id in ids:
        tags = client.get_run(run_id).data.tags
        assert tags["yolo_det.verdict.seeds"] == "no verdict" and tags["yolo_det.verdict.seeds.exit_code"] == "0"
