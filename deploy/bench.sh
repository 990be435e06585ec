#!/usr/bin/env bash
# Runs the benchmark: the hub's bus figures beside raw libzmq and Mosquitto, in one run.
# Arguments go to nh-bench: `make bench` passes --output FILE, which deploy/bench-chart.py draws.
set -euo pipefail
BIN="${NH_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.build/release}"
# The push figures run the stand-in push services from this checkout's Tests/Support.
export NH_REPO_DIR="${NH_REPO_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
exec "$BIN/nh-bench" "$@"
