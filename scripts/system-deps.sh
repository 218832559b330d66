#!/usr/bin/env bash
# Installs the system services the test suite runs against, only when they are absent:
# PostgreSQL (storage tests), a Java runtime (PySpark), Chromium (HTML report rendering).
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "system-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
