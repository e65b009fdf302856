"""`yolo-det verify` and `yolo-det run` never orphan the training command (issue 16, item 6):
each command runs in its own process group and a termination signal to yolo-det stops the
whole group, grandchildren (DataLoader workers, torchrun ranks) included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The "training command": starts a grandchild that ignores SIGTERM/SIGINT (only SIGKILL stops it),
# writes both pids, then sleeps.
TRAINER = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def _start(tmp_path: Path, *yolo_det_args: str):
    pids = tmp_path / "pids"
    env = dict(os.environ, PYTHONPATH=str(ROOT), YOLO_DET_KILL_GRACE="1")
    proc = subprocess.Popen([sys.executable, "-m", "yolo_det", *yolo_det_args, "--", sys.executable, "-c", TRAINER,
                             str(pids)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not pids.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc, [int(p) for p in pids.read_text().split()]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
@pytest.mark.parametrize("command, signum", [
    ("verify", signal.SIGTERM), ("verify", signal.SIGHUP), ("verify", signal.SIGINT), ("run", signal.SIGTERM),
])
def test_a_signal_to_yolo_det_stops_the_whole_training_group(tmp_path, command, signum):
    args = ("verify", "--workdir", str(tmp_path / "w")) if command == "verify" else ("run",)
    proc, (child, grandchild) = _start(tmp_path, *args)
    assert _alive(child) and _alive(grandchild)
    assert os.getpgid(child) == os.getpgid(grandchild) == child != os.getpgid(proc.pid)  # a group of its own

    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(grandchild), "a process of the training command survived"
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err


def test_run_returns_the_commands_exit_code(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "yolo_det", "run", "--seed", "3", "--", sys.executable, "-c",
                           "import os, sys; print(os.environ['PYTHONHASHSEED']); sys.exit(5)"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5 and proc.stdout.strip() == "3"


def test_verify_warns_when_the_command_has_no_run_placeholder(tmp_path, capsys):
    from yolo_det.cli import main

    for placeholder in ("", "{run}"):
        assert main(["verify", "--workdir", str(tmp_path), "--", sys.executable, "-c", f"print('x{placeholder}')"]) == 2
        err = capsys.readouterr().err
        assert ("the command has no {run}" in err) == (placeholder == ""), err


@pytest.mark.parametrize("args", [
    ["run", "--seed", "-5", "--", sys.executable, "-c", "pass"],
    ["run", "--seed", "4294967296", "--", sys.executable, "-c", "pass"],
    ["env", "--exports", "--seed", "-1"],
    ["run", "--seed", "abc", "--", sys.executable, "-c", "pass"],
])
def test_a_seed_outside_pythonhashseeds_range_is_a_usage_error(capsys, args):
    from yolo_det.cli import main

    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --seed:" in err and "Fatal Python error" not in err
    assert ("0 to 4294967295" in err) or ("not a whole number" in err)


def test_the_seed_range_ends_are_accepted(capsys):
    from yolo_det.cli import main
    from yolo_det.core.environment import check_seed
    from yolo_det.core.mode import ConfigError

    for seed in ("0", "4294967295"):
        assert main(["env", "--exports", "--seed", seed]) == 0
        assert f"PYTHONHASHSEED={seed}" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="out of range"):
        check_seed(-1)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_run_gives_the_terminal_to_the_command_so_ctrl_c_reaches_its_group(tmp_path):
    import pty

    pids = tmp_path / "pids"
    probe = tmp_path / "foreground"
    script = ("import os, sys, time\n"
              "for _ in range(200):  # yolo-det hands the terminal over just after starting us\n"
              "    if os.tcgetpgrp(0) == os.getpgrp():\n        break\n    time.sleep(0.05)\n"
              f"open({str(probe)!r}, 'w').write(str(os.tcgetpgrp(0) == os.getpgrp()))\n"
              + TRAINER.replace("sys.argv[1]", repr(str(pids))))
    env = dict(os.environ, PYTHONPATH=str(ROOT), YOLO_DET_KILL_GRACE="1")
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.execve(sys.executable, [sys.executable, "-m", "yolo_det", "run", "--", sys.executable, "-c", script], env)
    try:
        deadline = time.monotonic() + 60
        while not pids.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child, grandchild = [int(p) for p in pids.read_text().split()]
        assert probe.read_text() == "True"  # the command's group holds the terminal
        os.write(master, b"\x03")  # Ctrl-C: SIGINT to the foreground group
        _, status = os.waitpid(pid, 0)
        assert not _alive(child)
        # the grandchild ignores SIGINT: yolo-det stops what was left after the command exited (wait for that)
        deadline = time.monotonic() + 10
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)
        assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGINT  # the command died of SIGINT
    finally:
        os.close(master)


# Leaves a ProcessGroup's block by SystemExit (what submitit raises when SLURM requeues a job) while the command
# ignores SIGTERM; a SIGTERM to this process (SLURM cancelling the requeued job's step) arrives during the stop.
LEAVING = r"""
import os, signal, subprocess, sys, threading, time
from yolo_det.core.processes import ProcessGroup
child = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(120)"]
group = ProcessGroup(child, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, foreground=False)
try:
    with group:
        group.proc.stdout.readline()
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        sys.exit(7)
except BaseException as exc:
    print(type(exc).__name__, getattr(exc, "code", None), group.alive(), group.received, flush=True)
"""


def test_a_signal_while_the_group_is_stopped_keeps_the_exception_that_left_the_block(tmp_path):
    """The exception leaving the block is the one the caller sees (a requeue's SystemExit stays one), and the
    signal kills the group at once: raising in the middle of the stop left the command running, orphaned."""
    script = tmp_path / "leaving.py"
    script.write_text(LEAVING)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "YOLO_DET_KILL_GRACE": "600"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.split() == ["SystemExit", "7", "False", f"[{int(signal.SIGTERM)}]"], proc.stderr[-3000:]
