"""Failover between two dispatchers on one PostgreSQL store, at the moments that matter: one is
stopped (SIGSTOP) at a named point of its cycle (after a pull, inside a write, after a commit,
inside a lease renewal) for longer than a lease while broadcasts stream in, or killed there with
SIGKILL. The dispatchers stop themselves at the point (NH_FAULT_PAUSE), so each point is hit
every run. After each fault:

- every agent shows every broadcast exactly once;
- every outcome is exact: targets = delivered = acknowledged = the agents, nothing failed or expired;
- an audit trigger finds no row of dispatch.deliveries or dispatch.shard_cursors written by a
  dispatcher that did not hold that shard's lease;
- the survivor takes every shard while its peer is still stopped, even when the peer was stopped
  holding locks (the takeover time is printed; it is not asserted, since these machines are noisy).

Then six agents stop and catch up on the broadcasts stored once while they were away, across a
takeover, with their categories changed meanwhile and a broadcast that expires.

Runs on the server NH_TEST_POSTGRES names (`make test` starts a throwaway one); skipped without it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from dispatchaudit import AUDIT, AUDIT_ROWS  # noqa: E402
from hubharness import BIN, POSTGRES, Hub, free_port, health_row, json_lines, postgres_database, stopped, wait_until  # noqa: E402

pytestmark = pytest.mark.skipif(not POSTGRES, reason="NH_TEST_POSTGRES is not set: run under Tests/Support/pgserver.py run -- …")

AGENTS = 8
HEARTBEAT_MS = 500
LEASE = 3.0  # max(3 s, three heartbeats), as the dispatcher takes it
PAUSE = 2 * LEASE + 2
# The catch-up test's agents away and here.
AWAY = [f"agent-{i}" for i in range(6)]
HERE = [f"agent-{i}" for i in range(6, AGENTS)]


class Fleet:
    """Registry, sync store and publish service, two dispatchers A and B on one PostgreSQL
    database, and AGENTS agents given both dispatchers."""

    def __init__(self, agent_heartbeat_ms=1000):
        self.url = postgres_database("nh_failover")
        self.hub = Hub(prefix="nh-failover-", settings={
            "NH_STORE": self.url, "NH_HEARTBEAT_MS": str(HEARTBEAT_MS), "NH_AGENT_HEARTBEAT_MS": str(agent_heartbeat_ms),
            "NH_LOG_LEVEL": "info"})
        self.dispatchers = {}
        for name in ["A", "B"]:
            agents = f"tcp://127.0.0.1:{free_port()}"
            self.dispatchers[name] = {
                "NH_DISPATCH_REQUESTS": f"tcp://127.0.0.1:{free_port()}", "NH_DISPATCH_AGENTS": agents, "NH_DISPATCH_ADVERTISE": agents,
                "NH_FAULT_PAUSE": os.path.join(self.hub.data, f"pause-{name}")}
        self.outputs = {}
        self.sent = []
        self.labels = {}

    def sql(self, statement):
        done = subprocess.run(["psql", self.url, "-qtAc", statement], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start_dispatcher(self, name):
        return self.hub.start(f"dispatch-{name}", "nh-dispatch", env=self.dispatchers[name])

    def start(self):
        hub = self.hub
        for name in ["nh-registry", "nh-sync"]:
            hub.start(name)
        assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")), timeout=30)
        hub.start("nh-publish")
        self.start_dispatcher("A")
        assert wait_until(lambda: self.sql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'dispatch' "
                                           "AND table_name = 'leases'") == "1", timeout=30)
        assert wait_until(lambda: self.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dispatch' "
                                           "AND table_name = 'leases' AND column_name = 'epoch'") == "1", timeout=30)
        self.sql(AUDIT)
        self.start_dispatcher("B")
        both = ",".join(d["NH_DISPATCH_AGENTS"] for d in self.dispatchers.values())
        for i in range(AGENTS):
            name = f"agent-{i}"
            env = {"NH_AGENT_HOME": os.path.join(hub.data, name), "NH_AGENT_INSTALLATION_ID": f"failover-{i}",
                   "NH_DISPATCH_AGENTS": both, "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}
            done = subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "News"], env={**hub.env, **env},
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            self.outputs[name] = os.path.join(hub.data, f"{name}.jsonl")
            hub.start(name, "nh-agent", env=env, stdout=open(self.outputs[name], "ab"))
        assert wait_until(self.balanced, timeout=60, interval=0.5), self.holders()

    def holders(self):
        """How many live leases each dispatcher holds."""
        rows = self.sql("SELECT endpoint, count(*) FROM dispatch.leases WHERE owner IS NOT NULL "
                        "AND expires_at > extract(epoch FROM clock_timestamp()) GROUP BY endpoint")
        by_endpoint = dict(line.split("|") for line in rows.splitlines() if line)
        return {name: int(by_endpoint.get(d["NH_DISPATCH_AGENTS"], 0)) for name, d in self.dispatchers.items()}

    def agents_served(self, only=None):
        total = 0
        for name, d in self.dispatchers.items():
            if only and name != only:
                continue
            done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "health"], env={**self.hub.env, **d},
                                  capture_output=True, text=True, timeout=30)
            total += int(health_row(done.stdout, "nh-dispatch").get("details", {}).get("agents", 0))
        return total

    def balanced(self):
        """Both dispatchers hold their share, and every agent is served."""
        return self.holders() == {"A": 32, "B": 32} and self.agents_served() == AGENTS

    def send(self, label):
        done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "send", "--tag", "News", f"messageParam={label}", "title=News"],
                              env=self.hub.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        self.sent.append(json.loads(done.stdout.splitlines()[-1])["notificationId"])

    def shown(self, name):
        return [line.get("notificationId") for line in json_lines(self.outputs[name]) if line.get("notificationId")]

    def all_shown_once(self):
        return all(sorted(set(self.shown(name)) & set(self.sent)) == sorted(self.sent) for name in self.outputs)

    def outcomes(self):
        rows = self.sql("SELECT notification_id, targets, delivered, acknowledged, failed, expired FROM dispatch.outcomes")
        return {r[0]: tuple(int(x) for x in r[1:]) for r in (line.split("|") for line in rows.splitlines() if line)}

    def exact(self):
        outcomes = self.outcomes()
        return all(outcomes.get(n) == (AGENTS, AGENTS, AGENTS, 0, 0) for n in self.sent)

    # For the catch-up test: agents by name, sends by label.

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

    def stop(self):
        self.hub.stop_all()


@pytest.fixture(scope="module")
def fleet():
    fleet = Fleet()
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


def check(fleet, fault):
    """The checks after every fault."""
    assert wait_until(fleet.all_shown_once, timeout=90, interval=0.5), {n: len(set(fleet.shown(n)) & set(fleet.sent)) for n in fleet.outputs}
    for name in fleet.outputs:
        ids = [i for i in fleet.shown(name) if i in set(fleet.sent)]
        assert len(ids) == len(set(ids)), f"{fault}: {name} showed {len(ids) - len(set(ids))} notifications twice"
    assert wait_until(fleet.exact, timeout=60, interval=0.5), (
        fault, {n: o for n, o in fleet.outcomes().items() if n in set(fleet.sent) and o != (AGENTS, AGENTS, AGENTS, 0, 0)})
    audit = fleet.sql(AUDIT_ROWS)
    assert audit == "", f"{fault}: rows written by a dispatcher that did not hold their shard's lease:\n{audit}"


@pytest.mark.parametrize("point,fault", [
    ("pulled", "pause"), ("write", "pause"), ("committed", "pause"), ("renewal", "pause"),
    ("pulled", "kill"), ("write", "kill"),
])
def test_a_dispatcher_paused_or_killed_at_a_point_of_its_cycle_loses_nothing_and_counts_nothing_twice(fleet, point, fault):
    assert wait_until(fleet.balanced, timeout=60, interval=0.5), fleet.holders()
    with open(fleet.dispatchers["A"]["NH_FAULT_PAUSE"], "w") as f:
        f.write(point)
    process = fleet.hub.processes["dispatch-A"]
    # Broadcasts stream in until A has stopped itself at the point, and a few more after.
    for i in range(40):
        fleet.send(f"{point}-{fault}-{i}")
        if stopped(process.pid):
            break
        time.sleep(0.1)
    assert wait_until(lambda: stopped(process.pid), timeout=10), f"dispatcher A never reached '{point}'"
    at = time.time()
    if fault == "kill":
        fleet.hub.kill("dispatch-A")
    for i in range(3):
        fleet.send(f"{point}-{fault}-while-{i}")
    # The survivor takes every shard while A is still stopped (or dead).
    assert wait_until(lambda: fleet.holders()["B"] == 64, timeout=PAUSE, interval=0.1), fleet.holders()
    print(f"\n{fault} at {point}: B held all 64 shards {time.time() - at:.2f} s after A stopped (lease {LEASE:.0f} s)")
    if fault == "pause":
        assert stopped(process.pid), "A resumed before B took its shards"
        time.sleep(max(0, PAUSE - (time.time() - at)))
        process.send_signal(signal.SIGCONT)
    else:
        fleet.start_dispatcher("A")
    for i in range(3):
        fleet.send(f"{point}-{fault}-after-{i}")
    check(fleet, f"{fault} at {point}")
    assert wait_until(fleet.balanced, timeout=60, interval=0.5), fleet.holders()


def test_agents_away_catch_up_once_in_order_on_what_reaches_them_now_across_a_takeover(fleet):
    """Broadcasts stored once: six of the eight agents stop. While they are away, broadcasts go to
    News and Sports; one agent's user swaps News for Sports and another's adds Sports
    (`nh-agent subscribe`, registered as each agent starts again); A is killed with two agents
    connected to the pair and B takes its shards over, closing the positions A left marked here at
    each shard's cursor; a broadcast with a 3-second time to live expires. When the six come back,
    each shows exactly what reaches it as registered now, once, in the order sent: a tag added
    brings nothing older, a tag removed stops what it brought. Every outcome is exact."""
    assert wait_until(fleet.balanced, timeout=60, interval=0.5), fleet.holders()
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
    time.sleep(1)  # anything shown twice, or late, would show by now
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


# Agents whose hellos go every 30 s: were they to leave a dispatcher only after three of them
# without a word, they would stay 90 s with one that is gone.
SLOW_HELLOS_MS = 30_000


@pytest.fixture(scope="module")
def slow_hello_fleet():
    fleet = Fleet(agent_heartbeat_ms=SLOW_HELLOS_MS)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_agents_leave_a_dead_or_silent_dispatcher_at_once_and_follow_their_shards(slow_hello_fleet, fault):
    """A killed dispatcher's agents see their connections close and go to the other at once; a
    stopped one's leave when a transport heartbeat goes unanswered for a lease period (a ping goes
    every lease period, so within two). The
    other redirects them back while the failed one's leases last; they stay, and are welcomed once
    it holds the shards: every agent is served again long before three of their hellos (90 s).
    The time is printed, not asserted."""
    fleet = slow_hello_fleet
    if "dispatch-A" not in fleet.hub.processes:
        fleet.start_dispatcher("A")
    assert wait_until(fleet.balanced, timeout=60, interval=0.5), fleet.holders()
    process = fleet.hub.processes["dispatch-A"]
    at = time.time()
    if fault == "kill":
        fleet.hub.kill("dispatch-A")
    else:
        process.send_signal(signal.SIGSTOP)
    try:
        assert wait_until(lambda: fleet.agents_served(only="B") == AGENTS, timeout=SLOW_HELLOS_MS / 1000, interval=0.1), (
            fleet.agents_served(only="B"), fleet.holders())
        print(f"\n{fault}: every agent served by B {time.time() - at:.2f} s after A stopped (lease {LEASE:.0f} s)")
        fleet.send(f"after-{fault}")
        assert wait_until(fleet.all_shown_once, timeout=60, interval=0.5)
    finally:
        if fault == "pause":
            process.send_signal(signal.SIGCONT)
