"""Shared fixtures: isolation of global flags, a synthetic dataset, an offline environment."""

from __future__ import annotations

import compileall
import importlib.util
import os
import py_compile
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import resource
except ImportError:  # Windows
    resource = None

ROOT = Path(__file__).resolve().parents[1]
# One settings folder per pytest-xdist worker: two Ultralytics processes writing one settings.json race.
CONFIG_DIR = Path(os.environ.get("YOLO_DET_TEST_CONFIG", "/tmp/yolo-det-test-config")
                  + (f"-{os.environ['PYTEST_XDIST_WORKER']}" if "PYTEST_XDIST_WORKER" in os.environ else ""))
# Keep Ultralytics/YOLOv5 from writing settings into the user's home during the tests.
os.environ.setdefault("YOLO_CONFIG_DIR", str(CONFIG_DIR))
os.environ.setdefault("YOLOV5_CONFIG_DIR", str(CONFIG_DIR))
os.environ.setdefault("YOLO_OFFLINE", "1")
# The environment the session started with: a session fixture built later from os.environ would take whatever the
# test that first asked for it had set (monkeypatch, a leaked variable) into every child of the rest of the session.
# A tracker's variables are left out: a training points at a tracker only where its test says so.
SESSION_ENVIRON = {key: value for key, value in os.environ.items()
                   if not key.startswith(("MLFLOW_", "WANDB_", "YOLO_DET_TRACKER"))}


# A suite started in the background (`cmd &` in a script, nohup) inherits SIGINT ignored, and so would every
# command the tests start: the tests of Ctrl-C and of signals held back during a patch's renames need the
# interpreter's own SIGINT handling, as a terminal gives it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from yolo_det import session as runtime  # noqa: E402
from yolo_det.core import determinism  # noqa: E402
from yolo_det.synthetic import make_dataset, offline_env  # noqa: E402


def compile_tree(path: Path) -> None:
    """Byte-compile the Python files under ``path`` once, so that the processes the tests start load bytecode
    instead of compiling them again (0.2 s of a YOLOv5 training's 5.6; where PYTHONDONTWRITEBYTECODE is set, Python
    writes no cache of its own). Checked-hash caches: each import compares them with the source, so a file edited
    later is compiled afresh, never run from a stale cache."""
    compileall.compile_dir(str(path), quiet=1, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


#: the controller's (folder, runs already there) of ``stray_runs_dir()``
STRAY = pytest.StashKey[tuple]()


def stray_runs_dir() -> Path | None:
    """Where Ultralytics saves a run given no ``project=`` while it believes pytest runs (``PYTEST_CURRENT_TEST``,
    which every command a test starts inherits, or pytest imported): its package's ``../tests/tmp/runs``, inside the
    ``.venv`` and outside every ``tmp_path``. ``$YOLO_DET_TEST_STRAY_RUNS`` names another folder (tests of this
    check); None without Ultralytics."""
    if os.environ.get("YOLO_DET_TEST_STRAY_RUNS"):
        return Path(os.environ["YOLO_DET_TEST_STRAY_RUNS"])
    spec = importlib.util.find_spec("ultralytics")
    return Path(spec.origin).parent.parent / "tests" / "tmp" / "runs" if spec and spec.origin else None


def _stray_runs(folder: Path | None) -> set:
    """The runs (worker/task/name) saved in ``folder``."""
    return {str(p.relative_to(folder)) for p in folder.glob("*/*/*")} if folder and folder.is_dir() else set()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # once, before pytest-xdist starts its workers
        compile_tree(ROOT / "yolo_det")
        folder = stray_runs_dir()
        config.stash[STRAY] = (folder, _stray_runs(folder))


def pytest_sessionfinish(session):
    """Fail the suite when a test saved an Ultralytics run into the ``.venv`` (docs/testing.md, "What a test may
    assume"): give its command or call ``project=`` under its ``tmp_path``."""
    if STRAY not in session.config.stash:  # a pytest-xdist worker: the controller checks once, at the end
        return
    folder, before = session.config.stash[STRAY]
    new = sorted(_stray_runs(folder) - before)
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"tests saved Ultralytics runs outside their tmp_path, in {folder}: {', '.join(new)} -- "
                   "an Ultralytics command or call that a test starts needs project= under its tmp_path")
        if reporter is not None:
            reporter.write_line(f"ERROR: {message}", red=True, bold=True)
        else:
            print(f"ERROR: {message}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _restore_global_state():
    """Every test starts and ends with the same global flags and no active session."""
    flags = determinism.snapshot()
    env = dict(os.environ)
    _absl_writes_to_the_real_stderr()
    yield
    _absl_writes_to_the_real_stderr()
    session = runtime.current()
    if session is not None:
        session.finish(echo=lambda _: None)
    determinism.restore(flags)
    for key in set(os.environ) - set(env):
        if key.startswith("YOLO_DET_"):
            del os.environ[key]
    for key, value in env.items():
        if key.startswith("YOLO_DET_"):
            os.environ[key] = value


def _absl_writes_to_the_real_stderr() -> None:
    """absl.logging (imported by openvino) keeps the stream it saw at import, pytest's capture file, and
    closes it when YOLOv5's ``logging.config.dictConfig`` clears the handlers: every later test then fails."""
    absl_logging = sys.modules.get("absl.logging")
    if absl_logging is not None:
        absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    """data.yaml of a 16+8 image synthetic dataset at 128 px."""
    return make_dataset(tmp_path_factory.mktemp("data"), n_train=16, n_val=8, imgsz=128)


@pytest.fixture(scope="session", autouse=True)
def _worker_ultralytics_settings() -> None:
    """The worker's own settings folder (``CONFIG_DIR``, which commands started with the tests' environment use)
    with Ultralytics' Ray Tune callback off, as in :func:`train_env`."""
    _ultralytics_settings(dict(os.environ), raytune=False)


@pytest.fixture(scope="session")
def train_env(tmp_path_factory) -> dict:
    """Environment for offline YOLOv5/Ultralytics training subprocesses."""
    env = offline_env(tmp_path_factory.mktemp("config"), base=SESSION_ENVIRON)
    env["PYTHONUNBUFFERED"] = "1"
    # The releases' "pytest runs" switch, with no test's id in it: this session fixture would otherwise keep the id
    # of whichever test set it up, and a 'test_mlflow' there turns Ultralytics' MLflow callback on in every child.
    env["PYTEST_CURRENT_TEST"] = "tests/conftest.py::train_env (session)"
    env.pop("YOLO_DET_DETERMINISTIC", None)
    env.pop("YOLO_DET_FINGERPRINT", None)
    # completed trainings keep their full resume state: tests compare uninterrupted and resumed runs' final sidecars
    # (model, optimizer, RNG states); tests of the default (only the EMA kept) remove it
    env["YOLO_DET_KEEP_RESUME"] = "1"
    _ultralytics_settings(env, raytune=False)
    return env


def _ultralytics_settings(env: dict, **values: object) -> None:
    """The installed Ultralytics' settings in ``env``'s settings folder: its Ray Tune callback imports ``ray.tune``
    in every training when Ray is installed (1.5 s a process with Ray 2.60, about 150 trainings a suite) and only
    reports metrics inside a Ray Tune session, which no test's training is."""
    if importlib.util.find_spec("ultralytics") is None:
        return
    code = f"from ultralytics.utils import SETTINGS; SETTINGS.update({values!r})"
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)


@pytest.fixture(scope="session")
def yolov5_package() -> Path:
    """The installed PyPI yolov5 package directory (the real target of the patch)."""
    yolov5 = pytest.importorskip("yolov5")
    return Path(yolov5.__file__).parent


@pytest.fixture(scope="session")
def patched_yolov5(tmp_path_factory, yolov5_package) -> Path:
    """One patched copy of the PyPI yolov5 (a folder named ``yolov5``) shared by every test that only runs its
    scripts: patched once, its bytecode compiled once. Never edit it; take ``yolov5_copy`` for that."""
    from yolo_det.patch import apply_patch

    dest = tmp_path_factory.mktemp("patched") / "yolov5"
    shutil.copytree(yolov5_package, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    changed = [f.relpath for f in apply_patch(dest).files if f.changed]
    assert {"train.py", "utils/general.py", "val.py"} <= set(changed), changed  # training, its NMS, evaluation
    compile_tree(dest)
    return dest


#: the patched PyPI yolov5's train.py as test_yolov5_e2e's runs train it (2 epochs of 2 steps on ``dataset``)
YOLOV5_TRAIN = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "128", "--workers", "2", "--batch-size", "8",
                "--noplots", "--device", "cpu"]


@pytest.fixture(scope="session")
def yolov5_strict_verify(tmp_path_factory, patched_yolov5, dataset, train_env):
    """``yolo-det verify --runs 2 --json`` of two strict 2-epoch runs of ``patched_yolov5`` (``runs/strict1``,
    ``runs/strict2``; each run's output in ``w/run{N}/output.log``): (CompletedProcess, folder). Read it only."""
    from support.cli import cli
    from support.verify import script_env

    root = tmp_path_factory.mktemp("strict-verify")
    train = [sys.executable, "train.py", "--data", dataset, "--epochs", "2", *YOLOV5_TRAIN,
             "--project", root / "runs", "--name", "strict{run}", "--deterministic", "strict"]
    proc = cli("verify", "--runs", "2", "--workdir", root / "w", "--json", "--", *train,
               cwd=patched_yolov5, env=script_env(train_env))
    return proc, root


@pytest.fixture
def yolov5_copy(tmp_path, yolov5_package) -> Path:
    """A fresh copy of the PyPI yolov5 package's sources, without caches."""
    dest = tmp_path / "yolov5"
    shutil.copytree(yolov5_package, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def run(cmd, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run a command, capture text output; used by end-to-end tests. In a copy of the PyPI yolov5, the copy is what
    ``import yolov5`` finds (:mod:`support.trees`)."""
    from support.trees import with_package_copy

    if env is None and cwd is not None:
        env = dict(os.environ)
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=with_package_copy(env, cwd), capture_output=True,
                          text=True, timeout=timeout)


PYTHON = sys.executable


@pytest.fixture
def restore_environ():
    """Put os.environ back after the test: Ultralytics trainers write it (CUBLAS_WORKSPACE_CONFIG,
    PYTHONHASHSEED) even when they never train."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


#: session fixtures that train: every file that reads one runs on the same pytest-xdist worker, so it trains once
SHARED_RUNS = ("yolov5_strict_verify",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``-n 2 --dist loadgroup`` (scripts/test.sh): a test file is one unit of work, so its module-scoped
    runs train once; files that read one of ``SHARED_RUNS``, or carry the same ``xdist_group`` mark (the SLURM
    and Ray files: one node, one machine), form one unit; units that hold more slow tests are handed out first
    so the last minutes are not one long file on one worker. Without xdist nothing changes."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def path(item) -> str:
        return item.nodeid.split("::", 1)[0]

    unit_of_file: dict = {}  # a file's unit: its group mark, else the shared run it reads, else the file
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        named = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
        unit = named or next((run for run in SHARED_RUNS if run in getattr(item, "fixturenames", ())), None)
        if unit:
            unit_of_file[path(item)] = unit
        else:
            unit_of_file.setdefault(path(item), Path(path(item)).stem)
    slow_tests: dict = {}
    for item in items:
        unit = unit_of_file[path(item)]
        slow_tests[unit] = slow_tests.get(unit, 0) + (item.get_closest_marker("slow") is not None)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(unit))
    order = {unit: i for i, unit in enumerate(sorted(slow_tests, key=lambda u: -slow_tests[u]))}
    items.sort(key=lambda item: order[unit_of_file[path(item)]])  # stable: a unit's tests keep their order


#: CPU seconds when the test's setup began
_CPU_MARK = pytest.StashKey[float]()


def _cpu_seconds() -> float | None:
    """User + system CPU seconds of this process and of the child processes it has waited for (None without
    ``resource``, i.e. on Windows). Jobs run by a SLURM daemon or a Ray cluster are not children: not counted."""
    if resource is None:
        return None
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    now = _cpu_seconds()
    if now is not None:
        item.stash[_CPU_MARK] = now
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test's teardown report carries the CPU seconds of its setup, call and teardown as ``cpu_s`` (in
    ``user_properties``: they travel from a pytest-xdist worker to the controller with the report, and
    ``--junitxml`` writes the teardown report's as the test case's property), for the per-file table below."""
    outcome = yield
    mark = item.stash.get(_CPU_MARK, None)
    if call.when == "teardown" and mark is not None:
        outcome.get_result().user_properties.append(("cpu_s", _cpu_seconds() - mark))


def pytest_terminal_summary(terminalreporter):
    """Seconds per test file (setup + call + teardown), most CPU first: where the suite's minutes go. ``wall`` is
    the time on its worker, which shares the cores with the other worker's file; ``cpu`` is what the file's tests
    and the processes they started and waited for used, whatever ran beside them: the steadier figure.

    A new capability's tests should add at most 120 CPU seconds here (with two workers on two cores, a minute of the
    suite); tests that train share their runs (see "Tests that train" in docs/testing.md).
    """
    totals: dict = {}
    seen = set()
    for reports in terminalreporter.stats.values():
        for rep in reports:
            nodeid, when = getattr(rep, "nodeid", None), getattr(rep, "when", None)
            if not nodeid or when not in ("setup", "call", "teardown") or (nodeid, when) in seen:
                continue
            seen.add((nodeid, when))
            file = totals.setdefault(nodeid.split("::", 1)[0], [0.0, 0.0])  # [wall, cpu]
            file[0] += getattr(rep, "duration", 0.0)
            file[1] += dict(getattr(rep, "user_properties", ())).get("cpu_s", 0.0)
    if not totals:
        return
    terminalreporter.write_sep("=", "seconds per test file (top 15)")
    terminalreporter.write_line(f"{'wall':>8}  {'cpu':>8}  file (cpu: its tests and the processes they waited for)")
    for path, (wall, cpu) in sorted(totals.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:15]:
        terminalreporter.write_line(f"{wall:8.1f}  {cpu:8.1f}  {path}")
    wall, cpu = (sum(column) for column in zip(*totals.values()))
    terminalreporter.write_line(f"{wall:8.1f}  {cpu:8.1f}  all {len(totals)} files")

