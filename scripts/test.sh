#!/usr/bin/env bash
# The test command: installs everything it needs into .venv, then runs the suite.
#   bash scripts/test.sh [pytest args...]
# The end of the output names the 25 slowest tests and the seconds per test file (docs/testing.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
bash scripts/browser.sh || true
# The engines the cluster tests use: a one-node SLURM (skipped with its reason where it cannot start), stopped
# again at the end; Ray clusters are started by the tests themselves (ray.init).
bash scripts/slurm_local.sh || true
trap 'bash scripts/slurm_local.sh stop >/dev/null 2>&1 || true' EXIT
export PYTHONUNBUFFERED=1
# Two workers, a test file (or the files that share one session run, tests/conftest.py) on one worker:
# YOLO_DET_TEST_WORKERS=0 runs the suite in this one process, as does -n 0 among the arguments.
.venv/bin/python -m pytest -n "${YOLO_DET_TEST_WORKERS:-2}" --dist loadgroup --durations=25 "$@"
