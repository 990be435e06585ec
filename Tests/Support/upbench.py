"""The UnifiedPush figures: one hub, agents on private session buses (dbus-daemon) as the
distributors, and the apps' connectors in this process (jeepney, one thread per bus), so that
each Message is timed the moment it is read off the bus.

- latency: a push (POST to the app's endpoint) until the connector gets Message, p50 and p99 over
  --messages sends one after another; beside it a plain hub notification (a direct send to the
  same agent) until the agent prints its line on standard output.
- one endpoint: --burst pushes from 8 clients at once until the connector has them all, each once;
  beside it as many plain notifications to the same agent until it printed them all.
- many endpoints: --agents agents with --endpoints-per-agent registered tokens each; one push to
  every endpoint, --rounds times, from 8 clients, until every one arrived, each once.

Prints one JSON object per figure (name, unit, count, seconds, baseline, value, note), as
desktopbench.py does; progress and complaints go to standard error. --help lists the settings."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hubharness import Hub, free_port, wait_until  # noqa: E402

DISTRIBUTOR = "org.unifiedpush.Distributor.nh"
CONNECTOR_PATH = "/org/unifiedpush/Connector"
CONNECTOR = "org.unifiedpush.Connector2"
SERVICE = "org.example.UpBench"
POSTERS = 8
PADDING = 200
API = "api-version=2015-04"


class BenchError(Exception):
    pass


def say(text):
    print(f"upbench: {text}", file=sys.stderr, flush=True)


def emit(name, unit, count, seconds, baseline=None, value=None, note=None):
    print(json.dumps({"name": name, "unit": unit, "count": count, "seconds": round(float(seconds), 6),
                      "baseline": baseline, "value": value, "note": note}), flush=True)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def missing():
    absent = [] if shutil.which("dbus-daemon") else ["dbus-daemon (Debian package dbus-daemon)"]
    for module, package in [("jeepney", "jeepney"), ("requests", "requests")]:
        try:
            __import__(module)
        except ImportError:
            absent.append(f"{package} (PyPI)")
    return absent


class Arrivals:
    """What arrived, by sequence number: each arrival's time (time.perf_counter) and where it came
    (the token, or the agent). `distinct` counts the numbers seen at least once."""

    def __init__(self):
        self.cond = threading.Condition()
        self.times = {}
        self.where = {}
        self.distinct = 0
        self.strange = []

    def record(self, seq, at, where):
        with self.cond:
            got = self.times.setdefault(seq, [])
            got.append(at)
            self.where.setdefault(seq, []).append(where)
            if len(got) == 1:
                self.distinct += 1
            self.cond.notify_all()

    def odd(self, what):
        with self.cond:
            self.strange.append(what)

    def wait(self, condition, timeout):
        with self.cond:
            return self.cond.wait_for(condition, timeout=timeout)

    def first(self, seq):
        with self.cond:
            got = self.times.get(seq)
            return got[0] if got else None

    def check(self, expected, what, whole=False):
        """Each number of `expected` (seq → where it should arrive) arrived exactly once, there;
        with `whole`, nothing else arrived either."""
        with self.cond:
            lost = [s for s in expected if s not in self.times]
            twice = {s: len(self.times[s]) for s in expected if len(self.times.get(s, [])) > 1}
            astray = [s for s, where in expected.items() if where is not None and s in self.where and set(self.where[s]) != {where}]
            unexpected = [s for s in self.times if s not in expected] if whole else []
            strange = list(self.strange)
        problems = []
        if lost:
            problems.append(f"{len(lost)} of {len(expected)} never arrived (such as #{', #'.join(map(str, sorted(lost)[:5]))})")
        if twice:
            sample = ", ".join(f"#{s} {n}×" for s, n in sorted(twice.items())[:5])
            problems.append(f"{len(twice)} arrived more than once ({sample})")
        if astray:
            problems.append(f"{len(astray)} arrived at the wrong token (such as #{astray[0]}: {self.where[astray[0]]})")
        if unexpected:
            problems.append(f"{len(unexpected)} arrived that were never sent here (such as #{unexpected[0]})")
        if strange:
            problems.append(f"{len(strange)} unreadable arrivals (such as {strange[0]})")
        if problems:
            raise BenchError(f"{what}: " + "; ".join(problems))


def body(seq):
    return b"%09d:" % seq + os.urandom(PADDING)


class Connector:
    """An app's connector on one session bus, in a thread of this process: it owns SERVICE, serves
    Connector2 at /org/unifiedpush/Connector, and registers tokens with the agent there. Each
    Message is timed as it is read off the socket and recorded in `arrivals` by the sequence
    number at the front of its bytes."""

    def __init__(self, address, arrivals, label):
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection
        self.label = label
        self.arrivals = arrivals
        self.connection = open_dbus_connection(bus=address)
        self.send_lock = threading.Lock()
        self.cond = threading.Condition()
        self.waiting = {}      # serial of a Register call → its token
        self.answers = {}      # token → the Register answer's fields, or an error
        self.endpoints = {}    # token → endpoint URL (NewEndpoint)
        self.unregistered = []
        self.errors = []
        self.messages = 0
        self.stopping = False
        serial = next(self.connection.outgoing_serial)
        self.connection.send(message_bus.RequestName(SERVICE, 4), serial=serial)
        deadline = time.time() + 20
        self.early = []
        while True:
            reply = self.connection.receive(timeout=max(0.01, deadline - time.time()))
            if reply.header.fields.get(5) == serial:
                break
            self.early.append(reply)
        if reply.body[0] not in (1, 4):
            raise BenchError(f"{label}: could not own {SERVICE} on its bus ({reply.body})")
        self.thread = threading.Thread(target=self.run, name=f"connector-{label}", daemon=True)
        self.thread.start()

    def send(self, message):
        serial = next(self.connection.outgoing_serial)
        with self.send_lock:
            self.connection.send(message, serial=serial)
        return serial

    def register(self, tokens):
        """Sends Register for each token at once; the answers and endpoints come to the loop."""
        from jeepney import DBusAddress, new_method_call
        distributor = DBusAddress("/org/unifiedpush/Distributor", bus_name=DISTRIBUTOR, interface="org.unifiedpush.Distributor2")
        for token in tokens:
            call = new_method_call(distributor, "Register", "a{sv}", ({"service": ("s", SERVICE), "token": ("s", token)},))
            serial = next(self.connection.outgoing_serial)
            with self.cond:
                self.waiting[serial] = token
            with self.send_lock:
                self.connection.send(call, serial=serial)

    def wait_endpoints(self, tokens, timeout):
        def done():
            return all(t in self.answers for t in tokens) and all(
                t in self.endpoints for t in tokens if self.answers[t] == "REGISTRATION_SUCCEEDED") or bool(self.errors)
        with self.cond:
            self.cond.wait_for(done, timeout=timeout)
            refused = {t: self.answers.get(t) for t in tokens if self.answers.get(t) != "REGISTRATION_SUCCEEDED"}
            without = [t for t in tokens if t not in self.endpoints]
            if self.errors:
                raise BenchError(f"{self.label}: the connector failed: {self.errors[0]}")
            if refused:
                sample = list(refused.items())[:3]
                raise BenchError(f"{self.label}: {len(refused)} of {len(tokens)} registrations not answered "
                                 f"REGISTRATION_SUCCEEDED in {timeout:.0f} s ({sample})")
            if without:
                raise BenchError(f"{self.label}: {len(without)} of {len(tokens)} tokens got no NewEndpoint in {timeout:.0f} s")
            return {t: self.endpoints[t] for t in tokens}

    def run(self):
        try:
            while not self.stopping:
                if self.early:
                    message, at = self.early.pop(0), time.perf_counter()
                else:
                    try:
                        message = self.connection.receive(timeout=0.2)
                    except TimeoutError:
                        continue
                    at = time.perf_counter()
                self.handle(message, at)
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            if not self.stopping:
                with self.cond:
                    self.errors.append(f"{type(error).__name__}: {error}")
                    self.cond.notify_all()

    def handle(self, message, at):
        from jeepney import MessageType, new_error, new_method_return
        header = message.header
        kind = header.message_type
        if kind in (MessageType.method_return, MessageType.error):
            with self.cond:
                token = self.waiting.pop(header.fields.get(5), None)
                if token is not None:
                    if kind == MessageType.error:
                        self.answers[token] = f"error {header.fields.get(4)}: {list(message.body)}"
                    else:
                        fields = {k: v[1] for k, v in message.body[0].items()}
                        self.answers[token] = fields.get("success", f"no success in {fields}")
                    self.cond.notify_all()
            return
        if kind != MessageType.method_call:
            return
        member = header.fields.get(3)
        interface = header.fields.get(2)
        if interface == "org.freedesktop.DBus.Peer" and member == "Ping":
            self.send(new_method_return(message))
            return
        if header.fields.get(1) != CONNECTOR_PATH or interface != CONNECTOR:
            self.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod"))
            return
        values = {k: v[1] for k, v in message.body[0].items()}
        if member == "Message":
            self.messages += 1
            data = bytes(values.get("message", b""))
            try:
                seq = int(data[:9])
            except ValueError:
                self.arrivals.odd(f"{self.label}: a Message of {len(data)} bytes starting {data[:12]!r}")
            else:
                self.arrivals.record(seq, at, values.get("token"))
            self.send(new_method_return(message, "a{sv}", ({"id": ("s", values.get("id", ""))},)))
            return
        if member == "NewEndpoint":
            with self.cond:
                self.endpoints[values.get("token")] = values.get("endpoint")
                self.cond.notify_all()
        elif member == "Unregistered":
            with self.cond:
                self.unregistered.append(values.get("token"))
        self.send(new_method_return(message, "a{sv}", ({},)))

    def stop(self):
        self.stopping = True
        self.thread.join(timeout=2)
        try:
            self.connection.close()
        except OSError:
            pass


class StdoutReader:
    """Reads an agent's standard output in a thread, timing each notification line as it comes
    and recording it in `arrivals` by the number in its payload's message (m-<seq>)."""

    def __init__(self, stream, arrivals, label):
        self.stream = stream
        self.arrivals = arrivals
        self.label = label
        self.thread = threading.Thread(target=self.run, name=f"stdout-{label}", daemon=True)
        self.thread.start()

    def run(self):
        for line in iter(self.stream.readline, b""):
            at = time.perf_counter()
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or event.get("event") != "notification":
                continue
            payload = event.get("payload")
            text = payload.get("message") if isinstance(payload, dict) else None
            if isinstance(text, str) and text.startswith("m-") and text[2:].isdigit():
                self.arrivals.record(int(text[2:]), at, self.label)
            else:
                self.arrivals.odd(f"{self.label}: a notification with payload {str(payload)[:80]}")


class Agent:
    def __init__(self, bench, index):
        self.bench = bench
        self.name = f"up-agent-{index}"
        self.index = index
        from unifiedpush import SessionBus
        self.bus = SessionBus(root=bench.hub.data)
        bench.buses.append(self.bus)
        self.env = {"NH_AGENT_HOME": os.path.join(bench.hub.data, self.name), "NH_AGENT_INSTALLATION_ID": self.name,
                    "NH_AGENT_DESKTOP": "0", "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", **self.bus.env}
        self.connector = None
        self.reader = None
        self.endpoints = {}

    def start(self, stdout=False):
        process = self.bench.hub.start(self.name, "nh-agent", env=self.env, stdout=subprocess.PIPE if stdout else subprocess.DEVNULL)
        if stdout:
            self.reader = StdoutReader(process.stdout, self.bench.plain, self.name)

    def health(self):
        try:
            done = subprocess.run([os.path.join(self.bench.bin, "nh-agent"), "health"], env={**self.bench.hub.env, **self.env},
                                  capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)

    def ready(self):
        health = self.health()
        return health.get("unifiedpush", "").startswith("serving") and health.get("dispatcherWelcomed") == "true"

    def wait_ready(self, timeout=60):
        # Not one `nh-agent health` before the agent wrote device.pub: the command takes the
        # agent's channel keys from its store and makes new ones when there are none yet, so run
        # while the agent makes its own it may overwrite them, and no command reaches it again.
        home = self.env["NH_AGENT_HOME"]
        deadline = time.time() + timeout
        if not wait_until(lambda: os.path.exists(os.path.join(home, "device.pub")), timeout=timeout, interval=0.05):
            raise BenchError(f"{self.name} wrote no device.pub in {timeout} s; see {self.log}")
        if not wait_until(self.ready, timeout=max(1, deadline - time.time()), interval=0.2):
            raise BenchError(f"{self.name} did not come up in {timeout} s: {self.health()}{self.keys_differ()}; see {self.log}")

    def keys_differ(self):
        """Why no command reaches the agent, when its store holds other keys than it serves with."""
        import sqlite3
        home = self.env["NH_AGENT_HOME"]
        try:
            with open(os.path.join(home, "device.pub")) as f:
                served = f.read().strip()
            with sqlite3.connect(f"file:{os.path.join(home, 'agent.db')}?mode=ro", uri=True) as db:
                stored = db.execute("SELECT value FROM settings WHERE key = 'curvePublicKey'").fetchone()
        except (OSError, sqlite3.Error):
            return ""
        if stored and stored[0] != served:
            return f" (the agent serves with key {served}, its store holds {stored[0]})"
        return ""

    @property
    def log(self):
        return os.path.join(self.bench.hub.data, f"{self.name}.log")

    def connect(self):
        self.connector = Connector(self.bus.address, self.bench.up, self.name)

    def register(self, tokens, timeout=90):
        self.connector.register(tokens)
        self.endpoints.update(self.connector.wait_endpoints(tokens, timeout))


class Bench:
    def __init__(self, bin_dir):
        self.bin = bin_dir
        self.hub = Hub(prefix="nh-up-bench-", bin_dir=bin_dir,
                       settings={"NH_LOG_LEVEL": "info", "NH_LIMITS_PUSHES_PER_SECOND_PER_ENDPOINT": "100000"})
        self.buses = []
        self.agents = []
        self.up = Arrivals()
        self.plain = Arrivals()
        self.up_expected = {}       # seq → the token it was pushed to
        self.plain_expected = {}    # seq → the agent it was sent to
        self.seq = 0
        self.local = threading.local()

    def next_seq(self):
        self.seq += 1
        return self.seq

    def session(self):
        import requests
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        return session

    def start(self):
        say(f"hub in {self.hub.data}")
        if not self.hub.start_services():
            raise BenchError(f"the hub's services did not start; see the logs in {self.hub.data}")
        self.token = self.hub.token()
        self.main = Agent(self, 0)
        self.agents.append(self.main)
        self.main.start(stdout=True)
        self.main.wait_ready()
        self.main.connect()
        self.main.register(["a0-t0"])
        self.endpoint = self.main.endpoints["a0-t0"]
        say(f"{self.main.name} ready; endpoint {self.endpoint}")

    # The two sends, as an application server and a backend make them.

    def push(self, endpoint, token, seq):
        self.up_expected[seq] = token
        response = self.session().post(endpoint, data=body(seq), headers={"TTL": "600"}, timeout=30)
        if response.status_code != 201:
            raise BenchError(f"POST {endpoint} (#{seq}) answered {response.status_code}: {response.text[:200]}")

    def notify(self, agent, seq):
        self.plain_expected[seq] = agent.name
        response = self.session().post(
            f"{self.hub.base}/hub/messages?direct&{API}", data=json.dumps({"title": "t", "message": f"m-{seq}"}),
            headers={"Authorization": self.token, "Content-Type": "application/json", "ServiceBusNotification-Format": "linux",
                     "ServiceBusNotification-DeviceHandle": agent.name}, timeout=30)
        if response.status_code != 201:
            raise BenchError(f"a direct send to {agent.name} (#{seq}) answered {response.status_code}: {response.text[:200]}")

    # Figure 1: one at a time.

    def sequential(self, arrivals, send, n, what, timeout=30):
        """Sends one at a time, each once the one before arrived; the milliseconds from each POST
        until its arrival. Each may take `timeout` seconds, all together 60 s + 0.5 s each."""
        latencies = []
        deadline = time.perf_counter() + 60 + 0.5 * n
        for i in range(n):
            seq = self.next_seq()
            started = time.perf_counter()
            send(seq)
            wait = max(0.1, min(timeout, deadline - time.perf_counter()))
            if not arrivals.wait(lambda: seq in arrivals.times, wait):
                raise BenchError(f"{what}: #{seq} ({i + 1} of {n}) did not arrive in {wait:.1f} s{self.connector_errors()}")
            latencies.append((arrivals.first(seq) - started) * 1000)
        return latencies

    def latency(self, n, warmup=5):
        say(f"latency: {n} plain notifications, then {n} pushes, one at a time")
        self.sequential(self.plain, lambda s: self.notify(self.main, s), warmup, "plain warm-up")
        plain = self.sequential(self.plain, lambda s: self.notify(self.main, s), n, "plain notification")
        self.sequential(self.up, lambda s: self.push(self.endpoint, "a0-t0", s), warmup, "push warm-up")
        up = self.sequential(self.up, lambda s: self.push(self.endpoint, "a0-t0", s), n, "push")
        for p in (50, 99):
            plain_name = f"plain hub notification POST to agent stdout, p{p}"
            emit(plain_name, "ms", n, 0, value=round(percentile(plain, p), 2),
                 note=f"{n} direct sends (?direct, format linux) to one agent, one after another, after {warmup} not timed; from "
                      f"the POST until the agent's JSON line on its stdout; mean {sum(plain) / n:.2f} ms")
            emit(f"unifiedpush POST to connector Message, p{p}", "ms", n, 0, baseline=plain_name, value=round(percentile(up, p), 2),
                 note=f"{n} pushes ({PADDING + 10} bytes, TTL 600) to one endpoint, one after another, after {warmup} not timed; "
                      f"from the POST until the app's connector (jeepney, in the bench process) read Message off its session bus; mean {sum(up) / n:.2f} ms")

    # Figures 2 and 3: many at once.

    def burst(self, arrivals, sends, what, timeout):
        """Runs the sends from POSTERS clients at once; the seconds from the first POST until the
        last arrival, and the seconds the posting alone took."""
        target = arrivals.distinct + len(sends)
        before = self.cpu()
        started = time.perf_counter()
        failed = []

        def run(send):
            if failed:
                return  # one POST failed: the rest are not sent, the error is raised below
            try:
                send()
            except Exception as error:  # noqa: BLE001 - raised in the main thread
                failed.append(error)
        with ThreadPoolExecutor(POSTERS) as pool:
            list(pool.map(run, sends))
        if failed:
            raise failed[0] if isinstance(failed[0], BenchError) else BenchError(f"{what}: {type(failed[0]).__name__}: {failed[0]}")
        posted = time.perf_counter() - started
        if not arrivals.wait(lambda: arrivals.distinct >= target, timeout):
            raise BenchError(f"{what}: {len(sends) - (target - arrivals.distinct)} of {len(sends)} arrived in {timeout:.0f} s"
                             f"{self.connector_errors()}")
        with arrivals.cond:
            last = max(times[0] for times in arrivals.times.values())
        after = self.cpu()
        used = {k: after[k] - before.get(k, 0) for k in after}
        shown = ", ".join(f"{k} {v:.1f}" for k, v in used.items() if v >= 0.05)
        return last - started, posted, f"; CPU seconds meanwhile ({os.cpu_count()} cores): {shown}"

    def cpu(self):
        """CPU seconds so far of the services, the agents (together) and this process."""
        tick = os.sysconf("SC_CLK_TCK")
        used = {}
        for name, process in list(self.hub.processes.items()):
            try:
                with open(f"/proc/{process.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            key = "agents" if name.startswith("up-agent-") else name
            used[key] = used.get(key, 0) + (int(fields[11]) + int(fields[12])) / tick
        times = os.times()
        used["this bench"] = times.user + times.system
        return used

    def one_endpoint(self, n):
        say(f"one endpoint: {n} plain notifications, then {n} pushes, from {POSTERS} clients")
        timeout = max(60, n / 20)
        plain_seqs = [self.next_seq() for _ in range(n)]
        plain_seconds, plain_posted, plain_cpu = self.burst(self.plain, [lambda s=s: self.notify(self.main, s) for s in plain_seqs],
                                                 "plain burst", timeout)
        self.settle()
        self.plain.check({s: self.main.name for s in plain_seqs}, "the plain burst")
        up_seqs = [self.next_seq() for _ in range(n)]
        up_seconds, up_posted, up_cpu = self.burst(self.up, [lambda s=s: self.push(self.endpoint, "a0-t0", s) for s in up_seqs],
                                           "push burst", timeout)
        self.settle()
        self.up.check({s: "a0-t0" for s in up_seqs}, "the push burst")
        plain_name = "plain hub notifications to one agent"
        emit(plain_name, "notifications/s", n, plain_seconds,
             note=f"{n} direct sends to one agent from {POSTERS} clients at once; from the first POST until the agent printed "
                  f"the last; each once; posting alone took {plain_posted:.2f} s{plain_cpu}")
        emit("unifiedpush messages into one endpoint", "messages/s", n, up_seconds, baseline=plain_name,
             note=f"{n} pushes to one app's endpoint from {POSTERS} clients at once; from the first POST until the connector "
                  f"had the last Message; each once; posting alone took {up_posted:.2f} s{up_cpu}")

    def many_endpoints(self, agents, per_agent, rounds):
        total = agents * per_agent
        say(f"many endpoints: starting {agents - 1} more agents, registering {per_agent} tokens on each")
        started = time.perf_counter()
        for i in range(1, agents):
            agent = Agent(self, i)
            self.agents.append(agent)
            agent.start()
        deadline = time.perf_counter() + 120
        for agent in self.agents[1:]:
            agent.wait_ready(timeout=max(1, deadline - time.perf_counter()))
            agent.connect()
        for agent in self.agents:
            first = 1 if agent is self.main else 0
            agent.connector.register([f"a{agent.index}-t{j}" for j in range(first, per_agent)])
        deadline = time.perf_counter() + 180
        for agent in self.agents:
            tokens = [f"a{agent.index}-t{j}" for j in range(per_agent)]
            agent.endpoints.update(agent.connector.wait_endpoints(tokens, timeout=max(1, deadline - time.perf_counter())))
        say(f"{total} endpoints registered in {time.perf_counter() - started:.1f} s; {rounds} rounds of one push to each")
        targets = [(agent.endpoints[f"a{agent.index}-t{j}"], f"a{agent.index}-t{j}") for agent in self.agents for j in range(per_agent)]
        sends, expected = [], {}
        for _ in range(rounds):
            for endpoint, token in targets:
                seq = self.next_seq()
                expected[seq] = token
                sends.append(lambda e=endpoint, t=token, s=seq: self.push(e, t, s))
        n = len(sends)
        seconds, posted, used = self.burst(self.up, sends, "the pushes to many endpoints", timeout=max(90, n / 20))
        self.settle()
        self.up.check(expected, f"the pushes to {total} endpoints")
        emit(f"unifiedpush messages into {total:,} endpoints", "messages/s", n, seconds, baseline="unifiedpush messages into one endpoint",
             note=f"{agents} agents, each on its own session bus with {per_agent} endpoints of one app (a connector thread per bus); "
                  f"one push to each of the {total} endpoints, {rounds} rounds, {n} in all, from {POSTERS} clients at once; from "
                  f"the first POST until the last Message; each once; posting alone took {posted:.2f} s{used}")

    def connector_errors(self):
        failed = [f"{a.name}: {a.connector.errors[0]}" for a in self.agents if a.connector and a.connector.errors]
        return f" (a connector failed: {failed[0]})" if failed else ""

    def settle(self, seconds=1.0):
        """A moment for a repeat to show."""
        time.sleep(seconds)

    def final_check(self):
        self.settle()
        self.up.check(self.up_expected, "over the whole run, pushes", whole=True)
        self.plain.check(self.plain_expected, "over the whole run, plain notifications", whole=True)
        for agent in self.agents:
            if agent.connector and agent.connector.unregistered:
                raise BenchError(f"{agent.name}: the connector was told Unregistered for {agent.connector.unregistered[:3]}")
            if agent.connector and agent.connector.errors:
                raise BenchError(f"{agent.name}: the connector failed: {agent.connector.errors[0]}")

    def complaints(self):
        """Notices, warnings and errors in the services' and agents' logs, counted on standard error."""
        for name in sorted(os.listdir(self.hub.data)):
            if not name.endswith(".log"):
                continue
            counts, sample = {}, {}
            with open(os.path.join(self.hub.data, name), errors="replace") as f:
                for line in f:
                    for level in ("error", "warning", "notice"):
                        if f" level={level} " in line:
                            counts[level] = counts.get(level, 0) + 1
                            sample.setdefault(level, line.strip()[:400])
            for level, count in counts.items():
                say(f"{name}: {count} {level} line(s), the first: {sample[level]}")

    def stop(self):
        for agent in self.agents:
            if agent.connector:
                agent.connector.stop()
        self.hub.stop_all()
        for bus in self.buses:
            bus.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the folder of the nh-* executables")
    parser.add_argument("--messages", type=int, default=300, help="sends timed one at a time, on each path (300)")
    parser.add_argument("--burst", type=int, default=2000, help="messages posted at once into one endpoint, and plain (2000)")
    parser.add_argument("--agents", type=int, default=10, help="agents, each on its own session bus (10)")
    parser.add_argument("--endpoints-per-agent", type=int, default=100, help="tokens registered on each agent, at most 100 (100)")
    parser.add_argument("--rounds", type=int, default=2, help="pushes to every endpoint (2)")
    parser.add_argument("--keep", action="store_true", help="keep the hub's data folder (its logs) after the run")
    options = parser.parse_args()
    if not 1 <= options.endpoints_per_agent <= 100:
        parser.error("--endpoints-per-agent is 1 to 100 (an installation holds at most 100 endpoints)")
    if min(options.messages, options.burst, options.agents, options.rounds) < 1:
        parser.error("--messages, --burst, --agents and --rounds are at least 1")
    absent = missing()
    if absent:
        say(f"missing: {', '.join(absent)}")
        return 3
    began = time.time()
    bench = Bench(options.bin)
    failure = None
    try:
        bench.start()
        bench.latency(options.messages)
        bench.one_endpoint(options.burst)
        bench.many_endpoints(options.agents, options.endpoints_per_agent, options.rounds)
        bench.final_check()
    except BenchError as error:
        failure = str(error)
    except Exception as error:  # noqa: BLE001 - reported below, with its traceback
        import traceback
        traceback.print_exc()
        failure = f"{type(error).__name__}: {error}"
    finally:
        bench.stop()
        bench.complaints()
    kept = options.keep or failure is not None
    say(f"{'failed' if failure else 'done'} in {time.time() - began:.1f} s; the logs are in {bench.hub.data}"
        + ("" if kept else " (removed)"))
    if not kept:
        shutil.rmtree(bench.hub.data, ignore_errors=True)
    if failure:
        # The last line of standard error is what nh-bench shows.
        say(f"failed: {failure}")
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
