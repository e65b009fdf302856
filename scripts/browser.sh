#!/usr/bin/env bash
# The browser the HTML report's test renders its page in: Debian's headless Chromium (/usr/bin/chromium).
# Installed with apt-get where the user is root and it is missing; elsewhere the report test is skipped
# (and fails under CI=true, where the set-up must have installed it).
set -uo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "yolo-det setup: installing Debian's chromium for the HTML report's browser test"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
    || echo "yolo-det setup: chromium could not be installed; the browser test will be skipped" >&2
else
  echo "yolo-det setup: no chromium and no root apt-get; the HTML report's browser test will be skipped" >&2
fi
