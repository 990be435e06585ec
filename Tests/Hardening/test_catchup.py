"""Broadcasts stored once, on SQLite: a dispatcher killed with an agent connected, whose position
was marked here, closes it at the store's cursor at its next start; the agent, and another away
all along, catch up once. (With two dispatchers on PostgreSQL, tags changed while away, a
takeover and an expiry: `test_failover.py`.)"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, Hub, free_port, health_row, json_lines, wait_until  # noqa: E402


def test_on_sqlite_an_agent_connected_when_the_dispatcher_dies_is_away_from_its_cursor_and_catches_up_once():
    """One dispatcher on SQLite, the default: killed with an agent connected, whose position
    was marked here. At the next start it is closed at the store's cursor, so that the broadcasts
    parked for it from then on are owed, and none before. The agent away all along catches up too."""
    hub = Hub(prefix="nh-catchup-", settings={"NH_AGENT_HEARTBEAT_MS": "500", "NH_LOG_LEVEL": "info"})
    outputs = {}
    labels = {}
    try:
        assert hub.start_services()

        def env(name):
            return {"NH_AGENT_HOME": os.path.join(hub.data, name), "NH_AGENT_INSTALLATION_ID": name,
                    "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}

        def start_agent(name):
            hub.start(name, "nh-agent", env=env(name), stdout=open(outputs[name], "ab"))

        def shown(name):
            return [labels[line["notificationId"]] for line in json_lines(outputs[name]) if line.get("notificationId") in labels]

        def served():
            done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "health"], env=hub.env, capture_output=True, text=True, timeout=30)
            return int(health_row(done.stdout, "nh-dispatch").get("details", {}).get("agents", 0))

        def send(label):
            done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "send", "--tag", "News", f"messageParam={label}"],
                                  env=hub.env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            labels[json.loads(done.stdout.splitlines()[-1])["notificationId"]] = label

        for name in ["here", "away"]:
            outputs[name] = os.path.join(hub.data, f"{name}.jsonl")
            done = subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "News"], env={**hub.env, **env(name)},
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            start_agent(name)
        assert wait_until(lambda: served() == 2, timeout=30, interval=0.3)
        send("one")
        assert wait_until(lambda: shown("here") == ["one"] and shown("away") == ["one"], timeout=30, interval=0.3)
        hub.stop("away")
        assert wait_until(lambda: served() == 1, timeout=30, interval=0.3)
        send("two")
        assert wait_until(lambda: shown("here") == ["one", "two"], timeout=30, interval=0.3)
        # Killed with "here" connected: its position says here. The agent stops meanwhile.
        time.sleep(2.5)  # the dispatcher's group of writes commits
        hub.kill("nh-dispatch")
        hub.stop("here")
        hub.start("nh-dispatch")
        send("three")
        send("four")
        for name in ["here", "away"]:
            start_agent(name)
        expected = {"here": ["one", "two", "three", "four"], "away": ["one", "two", "three", "four"]}
        assert wait_until(lambda: all(shown(n) == e for n, e in expected.items()), timeout=60, interval=0.3), {n: shown(n) for n in expected}
        time.sleep(1.5)
        assert {n: shown(n) for n in expected} == expected
    finally:
        hub.stop_all()
