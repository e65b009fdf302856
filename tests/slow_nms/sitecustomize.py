"""Test-only: a machine on which NMS is slow, in one run of a `yolo-det verify` only.

With this folder on PYTHONPATH and ``YOLO_DET_TEST_SLOW_NMS=<run>:<first>[-<last>]`` set, the
process whose ``YOLO_DET_VERIFY_RUN`` is ``<run>`` sees ``time.time()`` jump 100 s at every call
made from a function named ``non_max_suppression`` (YOLOv5's and Ultralytics'), in its NMS calls
number ``<first>`` to ``<last>`` (default: all from ``<first>`` on). Nothing else in the process sees the jumps. Each slowed call
is counted in ``$YOLO_DET_TEST_SLOW_NMS_LOG`` (one line per NMS call), so tests can tell it ran.
"""

import os
import sys
import time

_spec = os.environ.get("YOLO_DET_TEST_SLOW_NMS", "")
_run, _, _first = _spec.partition(":")
if _spec and os.environ.get("YOLO_DET_VERIFY_RUN") == _run:
    _real = time.time
    _state = {"jump": 0.0, "calls": 0, "frame": None}
    _first, _, _last = _first.partition("-")
    _first_call, _last_call = int(_first or 1), int(_last or 10 ** 9)
    _log = os.environ.get("YOLO_DET_TEST_SLOW_NMS_LOG")

    def _clock():
        frame = sys._getframe(1)
        if frame.f_code.co_name != "non_max_suppression":
            return _real() + _state["jump"]
        if _state["frame"] is not frame:  # the first clock read of a new NMS call
            _state["frame"] = frame
            _state["calls"] += 1
            if _log and _first_call <= _state["calls"] <= _last_call:
                with open(_log, "a") as handle:
                    handle.write(f"slow NMS call {_state['calls']}\n")
        if _first_call <= _state["calls"] <= _last_call:
            _state["jump"] += 100.0
        return _real() + _state["jump"]

    time.time = _clock
