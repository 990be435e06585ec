#!/usr/bin/env bash
# Runs the benchmark: the hub's bus figures beside raw libzmq and Mosquitto, in one run.
set -euo pipefail
BIN="${NH_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.build/release}"
exec "$BIN/nh-bench" "$@"
