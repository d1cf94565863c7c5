#!/bin/sh
# Regenerate the dashboard's screenshots in docs/screenshots/ (one per page): the browser tests
# drive a headless Chromium over data made by real workers and, with this variable set, write
# their screenshots there instead of a temp dir. Needs redis-server and Debian's chromium.
set -eu
cd "$(dirname "$0")/.."
STREAMWORKER_UPDATE_SCREENSHOTS=1 exec .venv/bin/pytest -q -p no:cacheprovider tests/dashboard/test_browser.py "$@"
