#!/usr/bin/env bash
# Install the real servers the test suite and the demo use, when they are missing:
# redis-server (Debian's 7.0) and PostgreSQL, and the tools the deployment tests run: promtool
# (Debian's prometheus package) and kubectl. Needs root (or sudo) for apt-get.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
updated=""
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)  # tests/cluster: --cluster create
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the dashboard's browser tests
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)  # tests/spark (PySpark)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)  # alert rules: promtool check/test rules
if ! command -v kubectl >/dev/null 2>&1; then
  # examples/kubernetes: `kubectl kustomize` of the overlays (kubectl 1.21+). A kubectl package
  # when the configured repositories have one, else Debian's kubernetes-client.
  $SUDO apt-get update -qq && updated=1
  if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    need+=(kubectl)
  else
    need+=(kubernetes-client)
  fi
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "install-services: installing ${need[*]}"
[ -n "$updated" ] || $SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
