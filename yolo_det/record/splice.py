"""Joining the fingerprint logs of an interrupted run and its resumption into one log.

The process that stopped after epoch K wrote steps 1..s; the resumed process numbers its steps
from 1 again. :func:`join_logs` renumbers the second part (s+1, s+2, ...) and keeps its final
state, so the joined log compares step by step with an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Union

from .log import FingerprintError, Log, check_comparable, read_log

LogLike = Union[Log, os.PathLike, str]


def _load(log: LogLike) -> Log:
    return log if isinstance(log, Log) else read_log(log)


def join_logs(first: LogLike, second: LogLike) -> Log:
    """``first``'s steps and validations, then ``second``'s renumbered after them; ``second``'s final
    state; ``first``'s header (the run's configuration: the resumed process's command line and loader
    start differ by design, so they are kept as ``resumed_header``, not compared)."""
    a, b = _load(first), _load(second)
    check_comparable(a, b)
    if not a.steps:
        raise FingerprintError(f"{a.path} holds no step: the interrupted run stopped before its first step")
    if b.final is None:
        raise FingerprintError(f"{b.path} has no final line: the resumed run did not finish")
    offset = len(a.steps)
    steps = list(a.steps) + [dataclasses.replace(s, step=s.step + offset) for s in b.steps]
    validations = list(a.validations) + [dataclasses.replace(v, after_step=v.after_step + offset)
                                         for v in b.validations]
    final = dataclasses.replace(b.final, steps=b.final.steps + offset)
    header = dict(a.header)
    header["resumed_header"] = dict(b.header)
    header["joined"] = [str(a.path), str(b.path)]
    header["resumed_after_step"] = offset
    return Log(path=b.path, header=header, steps=steps, final=final, validations=validations)


__all__ = ["join_logs"]
