#!/usr/bin/env bash
# Install the real servers the test suite and the demo use, when they are missing:
# redis-server (Debian's 7.0) and PostgreSQL. Needs root (or sudo) for apt-get.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)  # tests/cluster: --cluster create
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the dashboard's browser tests
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)  # tests/spark (PySpark)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-services: installing ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
