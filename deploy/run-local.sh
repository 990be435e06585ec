#!/usr/bin/env bash
# Starts every service on loopback with one data folder, waits until all answer health, and
# stops them all cleanly on Ctrl-C. Used by `make run`; works on its own too.
set -euo pipefail

BIN="${NH_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.build/release}"
export NH_DATA_DIR="${NH_DATA_DIR:-$(pwd)/data}"
LOGS="$NH_DATA_DIR/logs"
mkdir -p "$LOGS"

services=(nh-registry nh-sync nh-dispatch nh-publish nh-gateway nh-agent)
# The agent's JSON lines go to this terminal; every log line goes to the data folder.
pids=()

stop_all() {
  trap - INT TERM EXIT
  echo
  echo "stopping…"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  echo "all services stopped (last exit status $status); data kept in $NH_DATA_DIR"
  exit 0
}
trap stop_all INT TERM EXIT

for service in "${services[@]}"; do
  "$BIN/$service" 2>>"$LOGS/$service.log" &
  pids+=($!)
done

for _ in $(seq 1 100); do
  "$BIN/nhctl" health --agent --timeout 200 >/dev/null 2>&1 && break
  sleep 0.1
done

cat <<TXT

Notification hub is running on loopback. Data folder: $NH_DATA_DIR (logs in $LOGS)

$("$BIN/nhctl" health)

  registry   requests tcp://127.0.0.1:7701   change stream tcp://127.0.0.1:7702
  sync       requests tcp://127.0.0.1:7731   change stream tcp://127.0.0.1:7732
  dispatch   requests tcp://127.0.0.1:7721   agents        tcp://127.0.0.1:7722
  publish    requests tcp://127.0.0.1:7711   accepted hints tcp://127.0.0.1:7712
  gateway    HTTP     http://127.0.0.1:7780/hub (Notification Hubs REST API)   health tcp://127.0.0.1:7781
  agent      control  ipc://$NH_DATA_DIR/agent/control.sock (only you can reach it)

Web console: http://127.0.0.1:7780/console (sign in with a connection string below)
User inbox:  http://127.0.0.1:7780/inbox   (sign in with a credential from: $BIN/nhctl user credential USER)

Connection strings for backends and SDKs:
$("$BIN/nhctl" keys)

Send a first notification, from another terminal:
  export NH_DATA_DIR=$NH_DATA_DIR
  $BIN/nh-agent subscribe World                   # the local agent chooses a category
  $BIN/nhctl send --tag World messageParam="Breaking World News!"
The agent prints it here as one JSON line. Then:
  $BIN/nhctl outcome NOTIFICATION_ID              what became of it
  $BIN/nhctl keys                                 the listen and full connection strings
  $BIN/nhctl health                               one line per service
  tail -f $LOGS/*.log                             what the services are doing

This namespace holds one hub, "hub". A second app gets a hub of its own, with its own keys:
  $BIN/nhctl hub create news                      prints its connection strings (EntityPath=news)
  $BIN/nhctl --hub news send --tag World messageParam="News for the second app"
  $BIN/nhctl hub list                             every hub, with its installations

Press Ctrl-C to stop everything.
TXT

status=0
wait -n "${pids[@]}" || status=$?
# Services exit 0 only when told to stop (Ctrl-C reaches them too); anything else is a failure.
if [ "$status" -ne 0 ]; then echo "a service exited with status $status; see $LOGS" >&2; fi
stop_all
