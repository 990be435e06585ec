"""The hub across four hosts, each a network namespace joined to the others by veth links:
PostgreSQL, the registry and the sync store on one; two dispatchers and the publish service on
another; agents on the last two. Breaking news and per-user sync run across them while one
dispatcher is stopped inside a write for longer than a lease, then the other is killed, and one
agents' host is cut off and reconnected; nothing accepted may be lost, no agent may show anything
twice, every outcome must be exact, no dispatcher may write for a shard it does not hold (an audit
trigger watches), and every device of a user must agree. Needs root (CI has it); skipped with the
reason where namespaces cannot be made."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from dispatchaudit import AUDIT, AUDIT_ROWS  # noqa: E402
from hubharness import BIN, FULL_KEY, health_row, json_lines, sas_token, stopped, wait_until  # noqa: E402
import netns  # noqa: E402
import pgserver  # noqa: E402

try:
    netns.Network.check()
    REASON = None
except netns.NamespacesUnavailable as error:
    REASON = str(error)

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network namespaces cannot be made here: {REASON}")

SENDS = 24
AGENTS_PER_HOST = 3


class MultiHost:
    """The hosts, the PostgreSQL server, and every process started, by name."""

    def __init__(self):
        self.net = netns.Network(["db", "core", "agents1", "agents2"]).create()
        self.data = tempfile.mkdtemp(prefix="nh-multihost-")
        self.processes = {}
        db, core = self.net.address("db"), self.net.address("core")
        try:
            self.pg = pgserver.PostgresServer(listen=db, wrap=self.net.command("db", []), trust=f"{self.net.subnet}.0/24").start()
        except pgserver.PostgresUnavailable as error:
            self.net.destroy()
            pytest.skip(f"PostgreSQL is not available: {error}")
        self.dispatchers = {"nh-dispatch-1": f"tcp://{core}:7722", "nh-dispatch-2": f"tcp://{core}:7723"}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NH_")}
        self.env.update({
            "NH_DATA_DIR": self.data, "NH_LOG_LEVEL": "debug", "NH_HEARTBEAT_MS": "500", "NH_AGENT_HEARTBEAT_MS": "1000",
            "NH_STORE": self.pg.tcp_url(host=db),
            "NH_REGISTRY_REQUESTS": f"tcp://{db}:7701", "NH_REGISTRY_EVENTS": f"tcp://{db}:7702",
            "NH_SYNC_REQUESTS": f"tcp://{db}:7731", "NH_SYNC_EVENTS": f"tcp://{db}:7732",
            "NH_PUBLISH_REQUESTS": f"tcp://{core}:7711", "NH_PUBLISH_EVENTS": f"tcp://{core}:7712",
            "NH_DISPATCH_REQUESTS": f"tcp://{core}:7721", "NH_DISPATCH_AGENTS": self.dispatchers["nh-dispatch-1"],
            # The gateway and nhctl read outcomes from dispatcher 1, else from dispatcher 2.
            "NH_DISPATCH_PEERS": f"tcp://{core}:7724",
            "NH_GATEWAY_REQUESTS": f"tcp://{core}:7781", "NH_GATEWAY_LISTEN": f"{core}:7780", "NH_NAMESPACE": f"http://{core}:7780/",
            "NH_AGENT_REQUESTS": "tcp://127.0.0.1:7741",
        })

    def start(self, name, host, executable=None, env=None, stdout=None):
        with open(os.path.join(self.data, f"{name}.log"), "ab") as log:
            process = self.net.popen(host, [os.path.join(BIN, executable or name)], env={**self.env, **(env or {})},
                                     stdout=stdout or log, stderr=log)
        self.processes[name] = process
        return process

    def dispatcher_env(self, name):
        core = self.net.address("core")
        port = {"nh-dispatch-1": 7721, "nh-dispatch-2": 7724}[name]
        return {"NH_DISPATCH_REQUESTS": f"tcp://{core}:{port}", "NH_DISPATCH_AGENTS": self.dispatchers[name],
                "NH_DISPATCH_ADVERTISE": self.dispatchers[name], "NH_FAULT_PAUSE": os.path.join(self.data, f"pause-{name}")}

    def sql(self, statement):
        done = self.net.run("db", ["psql", self.pg.tcp_url(host=self.net.address("db")), "-qtAc", statement],
                            capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def ctl(self, *args, host="core", env=None):
        return self.net.run(host, [os.path.join(BIN, "nhctl"), *args], env={**self.env, **(env or {})},
                            capture_output=True, text=True, timeout=60)

    def health(self, name):
        """A dispatcher's health details, asked on its own request socket."""
        done = self.ctl("--json", "health", env={"NH_DISPATCH_REQUESTS": self.dispatcher_env(name)["NH_DISPATCH_REQUESTS"]})
        return health_row(done.stdout, "nh-dispatch")

    def kill(self, name):
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=15)

    def stop(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()
        self.pg.stop()
        self.net.destroy()
        if not os.environ.get("NH_KEEP_DATA"):
            shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture(scope="module")
def hosts():
    hosts = MultiHost()
    try:
        for name in ["nh-registry", "nh-sync"]:
            hosts.start(name, "db")
        assert wait_until(lambda: os.path.exists(os.path.join(hosts.data, "keys.json")), timeout=30)
        hosts.start("nh-publish", "core")
        hosts.start("nh-gateway", "core")
        for name in hosts.dispatchers:
            hosts.start(name, "core", executable="nh-dispatch", env=hosts.dispatcher_env(name))
            if name == "nh-dispatch-1":
                assert wait_until(lambda: hosts.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dispatch' "
                                                    "AND table_name = 'leases' AND column_name = 'epoch'") == "1", timeout=30)
                hosts.sql(AUDIT)
        yield hosts
    finally:
        hosts.stop()


def shown(output):
    """The notification ids an agent printed, in order, with repeats."""
    return [line.get("notificationId") for line in json_lines(output) if line.get("notificationId")]


def test_breaking_news_and_user_sync_survive_a_dispatcher_kill_and_a_cut_link(hosts):
    # The user alice has one device on each agents' host; every agent follows News.
    credential = hosts.ctl("user", "credential", "alice")
    assert credential.returncode == 0, credential.stderr
    both = ",".join(hosts.dispatchers.values())
    outputs = {}
    agent_env = {}
    for host in ["agents1", "agents2"]:
        for i in range(AGENTS_PER_HOST):
            name = f"{host}-{i}"
            env = {"NH_AGENT_HOME": os.path.join(hosts.data, name), "NH_AGENT_INSTALLATION_ID": name, "NH_DISPATCH_AGENTS": both,
                   "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{7741 + i}"}
            if i == 0:
                env["NH_AGENT_USER_CREDENTIAL"] = credential.stdout.strip()
            subscribed = hosts.net.run(host, [os.path.join(BIN, "nh-agent"), "subscribe", "News"], env={**hosts.env, **env},
                                       capture_output=True, text=True, timeout=60)
            assert subscribed.returncode == 0, subscribed.stderr
            agent_env[name] = env
            outputs[name] = os.path.join(hosts.data, f"{name}.jsonl")
            hosts.start(name, host, executable="nh-agent", env=env, stdout=open(outputs[name], "ab"))

    def connected():
        return sum(int(hosts.health(name).get("details", {}).get("agents", 0)) for name in hosts.dispatchers) == len(outputs)

    # Both dispatchers hold shards, and every agent is served by the one that holds its shard.
    assert wait_until(connected, timeout=60, interval=1), [hosts.health(name) for name in hosts.dispatchers]
    # Where each is served can be seen: nhctl asks one dispatcher, which knows the holder of every
    # shard; each agent's health names the dispatcher it is connected to. The two agree.
    for name, env in agent_env.items():
        placement = json.loads(hosts.ctl("installations", "show", name).stdout)["placement"]
        health = hosts.net.run(name.rsplit("-", 1)[0], [os.path.join(BIN, "nh-agent"), "health"], env={**hosts.env, **env},
                               capture_output=True, text=True, timeout=30)
        details = dict(line.split(": ", 1) for line in health.stdout.splitlines() if ": " in line)
        assert placement["servedBy"] == details.get("dispatcher") and details.get("shard") == str(placement["shard"]), (placement, health.stdout)
        assert placement["connected"] == (placement["servedBy"] == placement["askedDispatcher"]), placement

    sent = []

    def send(i):
        done = hosts.ctl("--json", "send", "--tag", "News", f"messageParam=news {i}", "title=News")
        assert done.returncode == 0, done.stderr
        sent.append(json.loads(done.stdout.splitlines()[-1])["notificationId"])

    for i in range(SENDS // 6):
        send(i)
        time.sleep(0.2)
    # One dispatcher stops inside a write, longer than a lease: the other takes its shards, and
    # when it goes on its write is rolled back, not committed for shards it no longer holds.
    with open(hosts.dispatcher_env("nh-dispatch-2")["NH_FAULT_PAUSE"], "w") as f:
        f.write("write")
    paused = hosts.processes["nh-dispatch-2"]

    for i in range(SENDS // 6, SENDS // 3):
        send(i)
        time.sleep(0.2)
    assert wait_until(lambda: stopped(paused.pid), timeout=10), "nh-dispatch-2 never reached its write"
    time.sleep(7)
    paused.send_signal(signal.SIGCONT)
    assert wait_until(connected, timeout=60, interval=1), [hosts.health(name) for name in hosts.dispatchers]
    # One dispatcher dies: its shards go to the other within a lease, and their agents follow.
    hosts.kill("nh-dispatch-1")
    for i in range(SENDS // 3, 2 * SENDS // 3):
        send(i)
        time.sleep(0.2)
    # One agents' host is cut off, then joins again.
    hosts.net.cut("agents2")
    posted = []
    for i in range(2 * SENDS // 3, SENDS):
        send(i)
        done = hosts.ctl("--json", "user", "post", "alice", "--app-id", f"mh-{i}", "--title", "For alice", "--body", f"post {i}")
        assert done.returncode == 0, done.stderr
        posted.append(f"mh-{i}")
        time.sleep(0.3)
    time.sleep(3)
    hosts.net.restore("agents2")

    # Every agent shows every notification, once.
    def complete():
        return all(set(sent) <= set(shown(output)) for output in outputs.values())

    assert wait_until(complete, timeout=120, interval=1), {name: len(set(shown(o))) for name, o in outputs.items()}
    for name, output in outputs.items():
        ids = [i for i in shown(output) if i in set(sent)]
        assert len(ids) == len(set(ids)), f"{name} showed {len(ids) - len(set(ids))} notifications twice"
    # Every outcome is exact, and no dispatcher wrote for a shard it did not hold.
    agents = len(outputs)

    def outcomes():
        rows = hosts.sql("SELECT notification_id, targets, delivered, acknowledged, failed, expired FROM dispatch.outcomes")
        return {r[0]: tuple(int(x) for x in r[1:]) for r in (line.split("|") for line in rows.splitlines() if line)}

    assert wait_until(lambda: all(outcomes().get(n) == (agents, agents, agents, 0, 0) for n in sent), timeout=60, interval=1), (
        {n: o for n, o in outcomes().items() if n in set(sent) and o != (agents, agents, agents, 0, 0)})
    assert hosts.sql(AUDIT_ROWS) == ""

    # Outcomes are read from any dispatcher: with nh-dispatch-1, the one dispatch.requests names,
    # dead, nhctl and the gateway answer from its peer, as the shared store has them.
    core = hosts.net.address("core")
    key = {k["name"]: k["key"] for k in json.load(open(os.path.join(hosts.data, "keys.json")))["keys"]}[FULL_KEY]
    token = sas_token(f"http://{core}:7780/hub", FULL_KEY, key)
    for notification in sent[:3]:
        done = hosts.ctl("--json", "outcome", notification)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["acknowledged"] == agents, done.stdout
        answer = hosts.net.run("core", ["curl", "-s", "-w", "\n%{http_code}", "-H", f"Authorization: {token}",
                                        f"http://{core}:7780/hub/messages/{notification}?api-version=2015-04"],
                               capture_output=True, text=True, timeout=60)
        body, _, status = answer.stdout.rpartition("\n")
        assert status == "200" and notification in body and "Completed" in body, answer.stdout + answer.stderr

    # Alice's two devices agree: each has every post, and a dismiss on one reaches the other.
    alice = ["agents1-0", "agents2-0"]

    def user_list(device, host):
        """The user's notifications as the device has them: id, read state, action state, title and body."""
        done = hosts.net.run(host, [os.path.join(BIN, "nh-agent"), "list"], env={**hosts.env, **agent_env[device]},
                             capture_output=True, text=True, timeout=30)
        rows = []
        for line in done.stdout.splitlines():
            parts = line.split(None, 3)
            if len(parts) == 4:
                rows.append({"id": parts[0], "readState": parts[1], "userActionState": parts[2], "text": parts[3]})
        return rows

    def has_posts(device, host):
        texts = {n["text"] for n in user_list(device, host)}
        return all(f"For alice: post {p.removeprefix('mh-')}" in texts for p in posted)

    assert wait_until(lambda: has_posts(alice[0], "agents1") and has_posts(alice[1], "agents2"), timeout=60, interval=1)
    first = next(n for n in user_list(alice[0], "agents1") if n["text"] == f"For alice: post {posted[0].removeprefix('mh-')}")
    dismissed = hosts.net.run("agents1", [os.path.join(BIN, "nh-agent"), "dismiss", first["id"]],
                              env={**hosts.env, **agent_env[alice[0]]}, capture_output=True, text=True, timeout=30)
    assert dismissed.returncode == 0, dismissed.stderr

    def agree():
        states = [{n["id"]: (n.get("readState"), n.get("userActionState")) for n in user_list(d, h)}
                  for d, h in [(alice[0], "agents1"), (alice[1], "agents2")]]
        return states[0] == states[1] and states[0].get(first["id"], (None, None))[1] == "dismissed"

    assert wait_until(agree, timeout=60, interval=1)
