#!/usr/bin/env bash
# The test command: installs everything it needs into .venv, then runs the suite.
#   bash scripts/test.sh [pytest args...]
# The end of the output names the 25 slowest tests and the seconds per test file (docs/testing.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest --durations=25 "$@"
