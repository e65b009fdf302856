#!/usr/bin/env bash
# Create (or reuse) .venv in the repo root and install yolo-det with its test extras.
# Used by scripts/test.sh and scripts/demo.sh. Re-installs only when setup.cfg changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# The interpreter for a new .venv: $PYTHON if set, else the distribution's /usr/bin/python3 where it is
# 3.10+ with venv, else python3 on PATH. Distributions build CPython with PGO and LTO; pyenv's default
# build has neither, and the suite (hundreds of processes importing torch) ran 15-20% slower on it.
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    PYTHON=/usr/bin/python3
  fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "yolo-det setup: creating .venv with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.yolo-det-installed"
want="$(cat setup.cfg pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "yolo-det setup: installing torch==2.14.1, torchvision==0.29.1, yolo-det[test] (a few minutes the first time)"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q -e ".[test]" "torch==2.14.1" "torchvision==0.29.1" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import torch, torchvision, yolov5, ultralytics, libcst, numba, xdist, yolo_det" \
    || { echo "yolo-det setup: install failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
