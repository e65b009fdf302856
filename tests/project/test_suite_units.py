"""The suite's units of work under pytest-xdist (tests/conftest.py): a file's tests run on one worker, so its
module fixtures train once; the files that read one session run, or carry one group mark, share a worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PLAIN = '''
import os, pathlib, time, pytest
@pytest.mark.parametrize("i", range(20))  # enough tests that xdist's default would spread a file over both workers
def test_where(i):
    time.sleep(0.02)
    pathlib.Path(os.environ["OUT"], f"{__name__}-{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''
SHARED = PLAIN + '''
@pytest.fixture(scope="session")
def yolov5_strict_verify():  # stands in for conftest's run: the name is what groups the files
    return None
def test_reads_the_run(yolov5_strict_verify):
    pathlib.Path(os.environ["OUT"], f"{__name__}-run").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''
GROUPED = "import pytest\npytestmark = pytest.mark.xdist_group('cluster')\n" + PLAIN


BUSY = """
import subprocess, sys
def test_a_child_that_uses_a_cpu_second():  # the per-file table counts the CPU of the processes a test waits for
    subprocess.run([sys.executable, "-c", "import time\\nwhile time.process_time() < 1.0: pass"], check=True)
"""
WRITES = """
import os, pathlib
def test_saves_a_run_without_project():
    pathlib.Path(os.environ['YOLO_DET_TEST_STRAY_RUNS'], 'gw1', 'detect', 'val').mkdir(parents=True)
def test_saves_nothing():
    pass
"""
#: the files of the small suite that records on which worker each test ran
UNITS = {"test_a.py": PLAIN, "test_b.py": PLAIN, "test_c.py": SHARED, "test_d.py": SHARED, "test_e.py": GROUPED,
         "test_f.py": GROUPED}
#: every file of the small suite
FILES = {**UNITS, "test_g.py": BUSY, "test_writes.py": WRITES}
#: the tests that record their worker: 20 a file, and the two SHARED files' test_reads_the_run
RECORDED = 20 * len(UNITS) + 2
#: every test of the small suite: the recorded ones, BUSY's and WRITES'
TESTS = RECORDED + 1 + 2


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory):
    """One run of a small suite under conftest on two workers, as scripts/test.sh runs the real one: the files of
    ``UNITS``, one whose test starts a busy child, one whose test saves a run where Ultralytics would put one given
    no ``project=`` (with a run there from before the suite). (CompletedProcess, {test: the worker it ran on}, the
    run's junit XML)."""
    root = tmp_path_factory.mktemp("small-suite")
    for name, text in FILES.items():
        (root / name).write_text(text)
    out, stray = root / "out", root / "stray"
    out.mkdir()
    (stray / "gw0" / "detect" / "old").mkdir(parents=True)  # there before the suite: not this suite's
    env = {**os.environ, "OUT": str(out), "YOLO_DET_TEST_STRAY_RUNS": str(stray), "PYTHONPATH": str(ROOT / "tests")}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "--junitxml", str(root / "junit.xml"), "--rootdir", str(root),
                           str(root)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return proc, {p.name: p.read_text() for p in out.iterdir()}, root / "junit.xml"


def _every_test_passed(proc) -> bool:
    """The small suite's last line counts its every test as passed: no failure, error or skip."""
    return proc.stdout.rstrip().splitlines()[-1].startswith(f"{TESTS} passed in ")


def _table(proc) -> list:
    """The per-file table at the end of the small suite's output: its rows split into words, the "all" row last."""
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "seconds per test file" in line) + 2
    return [line.split() for line in lines[start:start + len(FILES) + 1]]


def test_a_file_or_a_shared_run_or_a_group_is_one_workers(small_suite):
    proc, ran, _ = small_suite
    assert _every_test_passed(proc), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(ran) == RECORDED, sorted(ran)
    worker = {name: {w for test, w in ran.items() if test.startswith(name[:-3] + "-")} for name in UNITS}
    assert all(len(workers) == 1 for workers in worker.values()), worker
    assert worker["test_c.py"] == worker["test_d.py"] and worker["test_e.py"] == worker["test_f.py"], worker


def test_the_per_file_table_counts_the_cpu_of_the_processes_a_test_waited_for(small_suite):
    """The end of the run: wall and CPU seconds per file, most CPU first; the file whose test waited for a child
    that used a CPU second shows at least that second."""
    rows = _table(small_suite[0])
    assert rows[-1][2:] == ["all", str(len(FILES)), "files"], rows
    files = {row[2]: (float(row[0]), float(row[1])) for row in rows[:-1]}
    assert set(files) == set(FILES), rows
    assert files["test_g.py"][1] >= 0.9 and files["test_g.py"][0] >= 0.9, rows  # 1.0 s and more, to the 0.1 printed
    cpu = [float(row[1]) for row in rows[:-1]]
    assert cpu == sorted(cpu, reverse=True), rows


def test_the_junit_xml_gives_each_test_its_cpu_seconds(small_suite):
    """``--junitxml``: every test case carries one ``cpu_s`` property, its setup, call and teardown together; the
    test that waited for the busy child shows that CPU second, and the cases add up to the table's column."""
    import xml.etree.ElementTree as ElementTree

    cases = {(case.get("classname"), case.get("name").split("@")[0]):  # name@its xdist group
             [float(p.get("value")) for p in case.iter("property") if p.get("name") == "cpu_s"]
             for case in ElementTree.parse(small_suite[2]).iter("testcase")}
    assert len(cases) == TESTS and all(len(values) == 1 for values in cases.values()), cases
    assert cases["test_g", "test_a_child_that_uses_a_cpu_second"][0] >= 1.0, cases
    total = float(_table(small_suite[0])[-1][1])
    assert abs(sum(values[0] for values in cases.values()) - total) <= 0.06, (cases, total)  # total printed to 0.1


def test_a_run_saved_into_the_venv_fails_the_suite_and_is_named(small_suite):
    """conftest's end-of-session check: a test whose Ultralytics run lands in the package's ``tests/tmp/runs`` (no
    ``project=``) fails the whole suite, naming the run and the fix, though every test passed."""
    proc = small_suite[0]
    assert proc.returncode == 1 and _every_test_passed(proc), proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if "outside their tmp_path" in line)
    assert "gw1/detect/val" in line and "gw0/detect/old" not in line and "project=" in line


def test_compiled_trees_never_run_a_stale_cache(tmp_path):
    """conftest's ``compile_tree`` caches bytecode for the processes the tests start; a file edited afterwards (same
    size, same modification time: what a timestamp cache cannot tell apart) runs as edited, also where
    PYTHONDONTWRITEBYTECODE keeps Python from writing a cache of its own."""
    from conftest import compile_tree

    module = tmp_path / "pkg" / "edited.py"
    module.parent.mkdir()
    module.write_text("VALUE = 'aaaa'\n")
    compile_tree(tmp_path / "pkg")
    assert list((tmp_path / "pkg" / "__pycache__").glob("edited.*.pyc"))
    stat = module.stat()
    module.write_text("VALUE = 'bbbb'\n")
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path / "pkg")}
    out = subprocess.run([sys.executable, "-c", "import edited; print(edited.VALUE)"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "bbbb", out.stderr
