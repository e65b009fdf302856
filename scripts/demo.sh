#!/usr/bin/env bash
# The main job: installs what it needs into .venv, then runs the demo on a synthetic dataset
# (no download). Outputs land in ./demo-out/.   bash scripts/demo.sh [--skip-ultralytics]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export PYTHONUNBUFFERED=1
export PATH="$root/.venv/bin:$PATH"
exec .venv/bin/python scripts/demo.py "$@"
