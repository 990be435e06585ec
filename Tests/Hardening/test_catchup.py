"""Broadcasts stored once: agents that are away when a tag or template broadcast is planned get
no row each, and catch up when they come back, with real agents on two dispatchers sharing one
PostgreSQL store.

Six of eight agents stop. While they are away:
- broadcasts to News and Sports are sent;
- one agent's user swaps News for Sports, another's adds Sports (`nh-agent subscribe`, which
  takes effect when the agent starts and registers again): a tag removed stops what it brought,
  a tag added brings nothing older, and what still reaches it is kept;
- dispatcher A is killed while two agents are connected to the pair, and B takes its shards over;
  then A starts again and takes its share back;
- a broadcast with a 3-second time to live expires.

Then the six come back. Each shows exactly what reaches it as it is now, once, in the order
sent; the expired one never. Every outcome is exact: targets counted when planned, acknowledged
as agents catch up, and expired for those that never could.

The first test runs on the server NH_TEST_POSTGRES names (`make test` starts a throwaway one),
skipped without it; the second on SQLite."""
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, POSTGRES, Hub, free_port, health_row, json_lines, wait_until  # noqa: E402
from test_failover import AGENTS, Fleet  # noqa: E402

needs_postgres = pytest.mark.skipif(not POSTGRES, reason="NH_TEST_POSTGRES is not set: run under Tests/Support/pgserver.py run -- …")

AWAY = [f"agent-{i}" for i in range(6)]
HERE = [f"agent-{i}" for i in range(6, AGENTS)]


class CatchUpFleet(Fleet):
    def __init__(self):
        super().__init__()
        self.labels = {}

    def agent_env(self, name):
        i = int(name.split("-")[1])
        both = ",".join(d["NH_DISPATCH_AGENTS"] for d in self.dispatchers.values())
        return {**self.hub.env, "NH_AGENT_HOME": os.path.join(self.hub.data, name), "NH_AGENT_INSTALLATION_ID": f"failover-{i}",
                "NH_DISPATCH_AGENTS": both}

    def agent_cli(self, name, *args):
        done = subprocess.run([os.path.join(BIN, "nh-agent"), *args], env=self.agent_env(name), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def send_to(self, label, tag, ttl=None):
        command = [os.path.join(BIN, "nhctl"), "--json", "send", "--tag", tag, f"messageParam={label}", f"title={tag}"]
        if ttl:
            command += ["--ttl", str(ttl)]
        done = subprocess.run(command, env=self.hub.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        notification = json.loads(done.stdout.splitlines()[-1])["notificationId"]
        self.labels[notification] = label
        self.sent.append(notification)
        return notification

    def shown_labels(self, name):
        return [self.labels[i] for i in self.shown(name) if i in self.labels]

    def outcome(self, notification):
        rows = self.sql(f"SELECT targets, delivered, acknowledged, failed, expired FROM dispatch.outcomes WHERE notification_id = '{notification}'")
        return tuple(int(x) for x in rows.split("|")) if rows else None

    def served(self, count):
        return self.holders() == {"A": 32, "B": 32} and self.agents_served() == count


@pytest.fixture(scope="module")
def fleet():
    fleet = CatchUpFleet()
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


@needs_postgres
def test_agents_away_catch_up_once_in_order_on_what_reaches_them_now_across_a_takeover_and_a_restart(fleet):
    hub = fleet.hub
    n0 = fleet.send_to("before", "News")
    assert wait_until(lambda: all(fleet.shown_labels(a) == ["before"] for a in fleet.outputs), timeout=60, interval=0.5)
    assert wait_until(lambda: fleet.outcome(n0) == (AGENTS, AGENTS, AGENTS, 0, 0), timeout=30, interval=0.5), fleet.outcome(n0)

    for name in AWAY:
        hub.stop(name)
    assert wait_until(lambda: fleet.agents_served() == len(HERE), timeout=30, interval=0.5)
    # Nothing is stored per agent away: the broadcast's rows are one, and one per shard.
    before = int(fleet.sql("SELECT count(*) FROM dispatch.deliveries WHERE acked_at IS NULL"))

    n1 = fleet.send_to("news-1", "News")
    n2 = fleet.send_to("sports-2", "Sports")
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == ["news-1"] for a in HERE), timeout=60, interval=0.5)
    assert int(fleet.sql("SELECT count(*) FROM dispatch.deliveries WHERE acked_at IS NULL")) == before
    assert fleet.sql(f"SELECT sum(parked) FROM dispatch.broadcast_shards WHERE notification_id = '{n1}'") == str(len(AWAY))

    # While away, agent-0's user swaps News for Sports, and agent-1's adds Sports: registered
    # when each starts again.
    fleet.agent_cli("agent-0", "subscribe", "Sports")
    fleet.agent_cli("agent-0", "unsubscribe", "News")
    fleet.agent_cli("agent-1", "subscribe", "Sports")
    n3 = fleet.send_to("sports-3", "Sports")
    n4 = fleet.send_to("news-4", "News")
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == ["news-4"] for a in HERE), timeout=60, interval=0.5)

    # A is killed with agents connected to the pair; B takes every shard over.
    hub.kill("dispatch-A")
    assert wait_until(lambda: fleet.holders()["B"] == 64, timeout=30, interval=0.2), fleet.holders()
    assert wait_until(lambda: fleet.agents_served(only="B") == len(HERE), timeout=30, interval=0.5)
    n5 = fleet.send_to("news-5", "News")
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == ["news-5"] for a in HERE), timeout=60, interval=0.5)
    fleet.start_dispatcher("A")
    assert wait_until(lambda: fleet.served(len(HERE)), timeout=60, interval=0.5), fleet.holders()

    # One that expires while they are away: the agents here show it; for the others it expires.
    n6 = fleet.send_to("news-6-short", "News", ttl=3)
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == ["news-6-short"] for a in HERE), timeout=60, interval=0.5)
    assert wait_until(lambda: fleet.outcome(n6) == (AGENTS, 2, 2, 0, 6), timeout=30, interval=0.5), fleet.outcome(n6)

    for name in AWAY:
        hub.start(name, "nh-agent", env={**fleet.agent_env(name), "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"},
                  stdout=open(fleet.outputs[name], "ab"))
    expected = {
        "agent-0": ["before"],
        "agent-1": ["before", "news-1", "news-4", "news-5"],
        **{a: ["before", "news-1", "news-4", "news-5"] for a in AWAY[2:]},
        **{a: ["before", "news-1", "news-4", "news-5", "news-6-short"] for a in HERE},
    }
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == expected[a][-1:] for a in expected), timeout=90, interval=0.5), {
        a: fleet.shown_labels(a) for a in expected}
    assert wait_until(lambda: fleet.agents_served() == AGENTS, timeout=30, interval=0.5)
    # A broadcast after they are back reaches each as registered now.
    n7 = fleet.send_to("sports-7", "Sports")
    for a in ["agent-0", "agent-1"]:
        expected[a].append("sports-7")
    assert wait_until(lambda: all(fleet.shown_labels(a)[-1:] == ["sports-7"] for a in ["agent-0", "agent-1"]), timeout=60, interval=0.5)
    time.sleep(2)  # anything shown twice, or late, would show by now
    assert {a: fleet.shown_labels(a) for a in expected} == expected

    # Outcomes: (targets, delivered, acknowledged, failed, expired).
    # agent-0 dropped News: its part of each News broadcast it missed waits for that one's expiry.
    exact = {
        n1: (AGENTS, AGENTS - 1, AGENTS - 1, 0, 0),
        n2: (0, 0, 0, 0, 0),  # no one had Sports then
        n3: (0, 0, 0, 0, 0),  # nor then: the new categories are registered as the agents start
        n4: (AGENTS, AGENTS - 1, AGENTS - 1, 0, 0),
        n5: (AGENTS, AGENTS - 1, AGENTS - 1, 0, 0),
        n6: (AGENTS, 2, 2, 0, 6),
        n7: (2, 2, 2, 0, 0),
    }
    assert wait_until(lambda: all(fleet.outcome(n) == o for n, o in exact.items()), timeout=30, interval=0.5), {
        n: fleet.outcome(n) for n in exact}
    assert fleet.sql(f"SELECT state FROM dispatch.outcomes WHERE notification_id = '{n2}'") == "NoTargetFound"
    # What agent-0 will never catch up on is still parked; nothing else is.
    parked = fleet.sql("SELECT notification_id, sum(parked) - sum(caught_up) FROM dispatch.broadcast_shards GROUP BY notification_id "
                       "HAVING sum(parked) > sum(caught_up) ORDER BY 1")
    assert sorted(line.split("|")[0] for line in parked.splitlines()) == sorted([n1, n4, n5]), parked
    # Each agent's position is marked here again.
    assert fleet.sql("SELECT count(*) FROM dispatch.agent_positions WHERE here") == str(AGENTS)


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
