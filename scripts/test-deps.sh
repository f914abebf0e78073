#!/usr/bin/env bash
# Installs what the test suite runs for real: redis-server, redis-cli and
# redis-benchmark (Debian's redis-server and redis-tools). Go modules,
# including the pebble ACME server, come through the Go toolchain.
set -euo pipefail
missing=()
for bin in redis-server redis-cli redis-benchmark; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing redis-server and redis-tools (missing: ${missing[*]})" >&2
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
