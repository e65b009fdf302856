"""``yolo-det`` called in this process: a test about a command's output and exit code pays no start-up.

A new interpreter costs about 2-3 s on these machines (torch, Numba's cached kernel, Ultralytics); a
test that only reads what ``diff``, ``locate`` or ``val`` prints and returns does not need one. Tests
about the process itself (signals, process groups, start-up hooks, ``run``) keep starting
``python -m yolo_det`` (:func:`support.verify.yolo_det_cmd`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from typing import Mapping, Optional


@contextlib.contextmanager
def _environ(env: Optional[Mapping[str, str]]):
    if env is None:
        yield
        return
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def cli(*args, cwd=None, env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``yolo-det ARGS`` in this process, as :func:`conftest.run` runs it in a child.

    Returns a ``CompletedProcess`` with the exit code and what the command printed (a command it
    starts writes to the test's own output). ``env`` stands for ``os.environ`` and ``cwd`` for the
    working directory during the call; both, and ``sys.argv``, are put back afterwards.
    """
    from yolo_det.cli import main

    from .trees import package_copy, with_package_copy

    argv = [str(a) for a in args]
    if package_copy(cwd) is not None:  # the PyPI yolov5's copy: what `import yolov5` finds in the commands it starts
        env = with_package_copy(os.environ if env is None else env, cwd)
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_argv = os.getcwd(), sys.argv
    try:
        with _environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = ["yolo-det", *argv]
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
    return subprocess.CompletedProcess(["yolo-det", *argv], code, out.getvalue(), err.getvalue())
