#!/usr/bin/env bash
# Installs the system services the test suite runs against, only when they are absent:
# PostgreSQL (storage tests), a Java development kit (PySpark's runtime, and the gateway's differential tests
# against the JDK's X500Principal and regex, which run Java source files), Chromium (HTML report rendering).
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "system-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
