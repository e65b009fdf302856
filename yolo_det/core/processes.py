"""Launching a training command so that nothing it starts outlives yolo-det.

The command gets its own process group, so its DataLoader workers, torchrun's ranks and any
other grandchildren can be signalled together. While it runs, a termination signal sent to
yolo-det (SIGTERM, SIGHUP, SIGINT, SIGQUIT) is forwarded to the whole group; the group gets
:func:`grace` seconds to exit and is then killed. ``yolo-det run`` puts the command's group in
the terminal's foreground, so Ctrl-C and prompts reach it as they would without yolo-det;
``yolo-det verify`` keeps the terminal (Ctrl-C stops verify and every run) and gives its runs
no stdin. Both launch through :class:`ProcessGroup`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import env_names

FORWARDED = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT") if hasattr(signal, n))
GRACE_ENV = env_names.KILL_GRACE


def grace() -> float:
    """Seconds a signalled group gets before SIGKILL (``$YOLO_DET_KILL_GRACE``, default 10)."""
    try:
        return max(float(os.environ.get(GRACE_ENV, "10")), 0.0)
    except ValueError:
        return 10.0


class Terminated(BaseException):
    """yolo-det itself received a termination signal while a command ran (the group was stopped)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"received {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class ProcessGroup:
    """``cmd`` started in a process group of its own; use it as a context manager.

    In the block, termination signals to this process are forwarded to the group; with
    ``raise_on_signal`` the first one also raises :class:`Terminated` (KeyboardInterrupt for
    SIGINT) in the block. Leaving the block by an exception stops the whole group (signal,
    :func:`grace`, SIGKILL); leaving it normally stops what the command left running. A signal that
    arrives while the block is being left raises nothing (it would replace the exception leaving the
    block, a SLURM requeue's ``SystemExit``, and cut the stop short, orphaning the group) and kills the
    group at once. With
    ``foreground`` (and a terminal we hold) the group gets the terminal while it runs; without,
    Ctrl-C reaches yolo-det, which forwards it (give such a command ``stdin=DEVNULL``).
    """

    def __init__(self, cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[os.PathLike] = None, stdin: Any = None, stdout: Any = None, stderr: Any = None,
                 raise_on_signal: bool = True, foreground: bool = True) -> None:
        self.cmd = [str(c) for c in cmd]
        self.raise_on_signal = raise_on_signal
        self.foreground = foreground
        self.received: List[int] = []
        self._leaving = False
        self._previous: Dict[int, Any] = {}
        self._tty: Optional[int] = None
        kwargs: Dict[str, Any] = {}
        if os.name == "posix":
            if sys.version_info >= (3, 11):
                kwargs["process_group"] = 0
            else:  # pragma: no cover - older Pythons
                kwargs["preexec_fn"] = os.setpgrp
        self.proc = subprocess.Popen(self.cmd, env=None if env is None else dict(env), cwd=cwd,
                                     stdin=stdin, stdout=stdout, stderr=stderr, **kwargs)
        self.pgid = self.proc.pid

    # -- signalling ---------------------------------------------------------------------------
    def send(self, signum: int) -> None:
        """Send ``signum`` to every process of the group (the command and its descendants)."""
        if os.name != "posix":  # pragma: no cover
            self.proc.send_signal(signum)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def alive(self) -> bool:
        """Whether any process of the group is still running (zombies do not count)."""
        if self.proc.poll() is None:
            return True
        return bool(_members(self.pgid))

    def stop(self, signum: int = signal.SIGTERM, wait: Optional[float] = None) -> None:
        """Signal the group, give it ``wait`` seconds (default :func:`grace`), then SIGKILL what is left."""
        if not self.alive():
            return
        self.send(signum)
        deadline = time.monotonic() + (grace() if wait is None else wait)
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        if self.alive():
            self.send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def wait(self) -> int:
        """Wait for the command; a forwarded signal does not stop the wait (the command decides)."""
        while True:
            try:
                return self.proc.wait()
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue

    # -- the context --------------------------------------------------------------------------
    def __enter__(self) -> "ProcessGroup":
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED:
                with contextlib.suppress(ValueError, OSError):
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        self._give_terminal()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self._leaving = True
        try:
            if kind is not None:
                self.stop(self.received[0] if self.received else signal.SIGTERM)
            elif self.alive():
                self.stop(signal.SIGTERM)  # the command exited but left processes running
        finally:
            self._take_terminal_back()
            for signum, handler in self._previous.items():
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        first = not self.received
        self.received.append(signum)
        if self._leaving or (not first and self.raise_on_signal is False):
            self.send(signal.SIGKILL)  # a second signal, or one while stopping: stop waiting for a clean exit
            return
        self.send(signum)
        if first and self.raise_on_signal:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(signum)

    # -- the terminal -------------------------------------------------------------------------
    def _give_terminal(self) -> None:
        """Put the command's group in the terminal's foreground when we hold it (Ctrl-C, prompts)."""
        if os.name != "posix" or not self.foreground:
            return
        try:
            fd = sys.stdin.fileno()
            if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
                return
            with _ignoring(signal.SIGTTOU):
                os.tcsetpgrp(fd, self.pgid)
            self._tty = fd
        except (OSError, ValueError, AttributeError):
            self._tty = None

    def _take_terminal_back(self) -> None:
        if self._tty is None:
            return
        with contextlib.suppress(OSError), _ignoring(signal.SIGTTOU):
            os.tcsetpgrp(self._tty, os.getpgrp())
        self._tty = None


@contextlib.contextmanager
def _ignoring(signum: int):
    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def _members(pgid: int) -> List[int]:
    """Live (not zombie) processes of group ``pgid``, from /proc; on other systems, probe the group."""
    if os.path.isdir("/proc/self"):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                found.append(int(entry))
        return found
    try:  # pragma: no cover - no /proc
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return []
    return [pgid]  # pragma: no cover


def run(cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None, cwd: Optional[os.PathLike] = None) -> int:
    """Run ``cmd`` in its own group to the end, forwarding termination signals; its exit code (128+N if killed)."""
    with ProcessGroup(cmd, env=env, cwd=cwd, raise_on_signal=False) as group:
        code = group.wait()
    return exit_code(code)


__all__ = ["FORWARDED", "GRACE_ENV", "ProcessGroup", "Terminated", "exit_code", "grace", "run"]
