#!/usr/bin/env bash
# Runs the benchmark: the hub's bus figures beside raw libzmq and Mosquitto, in one run.
# Arguments go to nh-bench: `make bench` passes --output FILE, which deploy/bench-chart.py draws.
set -euo pipefail
BIN="${NH_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.build/release}"
exec "$BIN/nh-bench" "$@"
