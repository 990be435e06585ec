#!/usr/bin/env python3
"""Soak: the whole hub on loopback under a mixed load while services and agents are killed with
SIGKILL and started again, then every agent's output compared with what the sender sent.

- The five services and several agents (each with its own home folder, control endpoint and
  categories; some signed in as users, two devices per user) run on free loopback ports with a
  temporary data folder.
- Senders mix tag and template sends (nhctl and the REST API), native, direct and user-targeted
  sends, rich sends, user posts (nhctl and REST), and read, dismiss, activate, snooze and delete of
  user notifications (from a device with nh-agent, or over REST with a user token). Every send
  carries a marker of its own; retries reuse the idempotency key (or the appNotificationId of a
  post). A send is "accepted" once the hub acknowledged it and "unknown" when no attempt got an
  answer: an unknown one may arrive once or not at all, never twice.
- Chaos: at random intervals one service or agent gets SIGKILL and is started again after a short
  random delay, an agent sometimes only after several heartbeats. Each recovery is timed: kill to
  health answered (services) and to a delivery shown again (end to end, and for agents).
- Categories of running agents change now and then; a tag send counts as addressed to an agent
  only when the agent's categories gave the same answer everywhere between the send and the
  dispatcher's planning of it (its outcome's start time).
- At the end sending and chaos stop, everything settles (bounded), and the agents' JSON lines are
  compared with the record: lost, duplicated, misdelivered; every device of a user must hold the
  same notifications in the same states as the sync store, and the store what the sender's
  acknowledged changes left.

Every process it starts is ended by its pid, also on failure. Exit status: 0 when nothing was lost,
duplicated or misdelivered, devices agree and no service died on its own; 1 otherwise; 2 when the
hub could not be started.
"""
import argparse
import collections
import datetime
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import string
import subprocess
import sys
import threading
import time
import traceback
import uuid

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, Hub, free_port, wait_until  # noqa: E402

API = "api-version=2015-01"
CATEGORIES = ["World", "Sports", "Tech", "Local"]
# name, user, categories at start
AGENTS = [
    ("a0", "alice", ["World", "Sports"]),
    ("a1", "alice", ["World", "Tech"]),
    ("a2", "bob", ["Sports", "Local"]),
    ("a3", "bob", ["World", "Local", "Tech"]),
    ("a4", None, ["World"]),
    ("a5", None, ["Sports", "Tech"]),
]
EXPRESSIONS = [
    "World", "Sports", "Tech", "Local", "World && !Sports", "Sports || Tech", "(World || Local) && !Tech",
    "$UserId:alice", "$UserId:bob || Local", "$InstallationId:soak-a4 || Sports", "!World",
]
SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"]
# How often each service is picked for a kill, relative to the others.
SERVICE_WEIGHTS = [1, 2, 3, 2, 1]
# The senders' nhctl makes one attempt per call, so that every retry is the sender's own, with the
# same idempotency key or app id, and shows in the record.
SENDER_CLIENT = {"NH_REQUEST_ATTEMPTS": "1", "NH_REQUEST_TIMEOUT_MS": "2000"}
# What the senders do, with weights.
OPERATIONS = [
    ("tag-nhctl", 22), ("tag-rest", 10), ("native-nhctl", 5), ("broadcast-rest", 2), ("direct-nhctl", 3),
    ("direct-rest", 2), ("user-send-nhctl", 3), ("rich-nhctl", 6), ("user-post-nhctl", 12), ("user-post-rest", 6),
    ("state-agent", 8), ("state-rest", 6), ("delete-agent", 3), ("delete-rest", 2),
]
# How long after the registry shows a category change the dispatcher may still plan with the old one.
INDEX_MARGIN = 1.5


class Interrupted(Exception):
    pass


def stamp(seconds):
    """A Unix time as the hub writes times."""
    if seconds is None:
        return "never"
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# MARK: tag expressions

def matches(expression, tags):
    """Whether a set of tags matches a tag expression: `!` binds tightest, then `&&`, then `||`."""
    tokens = re.findall(r"\(|\)|&&|\|\||!|[A-Za-z0-9_@#.:$-]+", expression)
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def parse_or():
        value = parse_and()
        while peek() == "||":
            take()
            right = parse_and()
            value = value or right
        return value

    def parse_and():
        value = parse_unary()
        while peek() == "&&":
            take()
            right = parse_unary()
            value = value and right
        return value

    def parse_unary():
        token = take()
        if token == "!":
            return not parse_unary()
        if token == "(":
            value = parse_or()
            take()
            return value
        return token in tags

    return parse_or()


# MARK: the record

class Send:
    """One notification the sender sent (or tried to): to a tag expression, an installation, a user
    or everyone; or a user post."""

    def __init__(self, kind, marker, target):
        self.kind = kind
        self.marker = marker
        self.target = target  # ("tag", expr) | ("installation", agent) | ("user", user) | ("all", None) | ("post", user)
        self.status = "pending"
        self.attempts = 0
        self.clean = True  # one attempt, answered quickly: no copy of the request can still be on its way
        self.id = None
        self.t0 = time.time()
        self.t1 = None
        self.errors = []
        # user posts: what the store should hold at the end
        self.read = {"unread"}
        self.action = {"noInteraction"}
        self.tainted = set()
        self.deleted = "no"
        self.busy = False
        self.ops = []


class Change:
    """A change of an agent's categories, from the command until the registry shows it."""

    def __init__(self, agent, before, after):
        self.agent = agent
        self.before = set(before)
        self.after = set(after)
        self.begin = time.time()
        self.confirmed = None


class Tail:
    """An agent's JSON lines, read as they are written."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.rest = b""
        self.lines = []
        self.bad = 0
        self.markers = set()
        self.created = set()
        self.lock = threading.Lock()

    def poll(self):
        with self.lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    data = f.read()
            except FileNotFoundError:
                return
            self.offset += len(data)
            data = self.rest + data
            *complete, self.rest = data.split(b"\n")
            for line in complete:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    self.bad += 1
                    continue
                self.lines.append(obj)
                marker = marker_of(obj)
                if marker:
                    self.markers.add(marker)
                    if obj.get("event") == "user.created":
                        self.created.add(marker)

    def seen(self, marker):
        self.poll()
        with self.lock:
            return marker in self.markers

    def shown_post(self, marker):
        self.poll()
        with self.lock:
            return marker in self.created


def parse_time(text):
    """Seconds since the epoch of an agent line's ISO 8601 time (UTC, "Z"); None when absent."""
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        return None


def marker_of(line):
    """The sender's marker in an agent's output line, if any."""
    event = line.get("event")
    if event == "notification":
        if line.get("rich"):
            return line["rich"].get("message")
        payload = line.get("payload")
        if isinstance(payload, dict):
            return payload.get("message")
        return None
    if event in ("user.created", "user.updated", "user.deleted"):
        return (line.get("notification") or {}).get("appNotificationId")
    if event == "rich.failed":
        return None
    return None


class Agent:
    def __init__(self, soak, name, user, categories):
        self.name = name
        self.user = user
        self.installation = f"soak-{name}"
        self.categories = list(categories)
        self.home = os.path.join(soak.hub.data, "agents", name)
        self.output = os.path.join(soak.hub.data, "agents", f"{name}.jsonl")
        self.env = {"NH_AGENT_HOME": self.home, "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}",
                    "NH_AGENT_INSTALLATION_ID": self.installation, "NH_AGENT_DESKTOP": "0"}
        self.tail = Tail(self.output)
        self.initial = self.tags(categories)
        self.changes = []

    def tags(self, categories):
        tags = set(categories) | {f"$InstallationId:{self.installation}"}
        if self.user:
            tags.add(f"$UserId:{self.user}")
        return tags


# MARK: the soak

class Soak:
    def __init__(self, options):
        self.options = options
        self.random = random.Random(options.seed)
        self.hub = Hub(prefix="nh-soak-", settings={
            "NH_LOG_LEVEL": options.log_level, "NH_AGENT_HEARTBEAT_MS": str(options.agent_heartbeat_ms)})
        os.makedirs(os.path.join(self.hub.data, "agents"))
        os.makedirs(os.path.join(self.hub.data, "rich-files"))
        self.run_id = "".join(self.random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        self.agents = {name: Agent(self, name, user, categories) for name, user, categories in AGENTS}
        self.users = sorted({a.user for a in self.agents.values() if a.user})
        self.credentials = {}
        self.user_tokens = {}
        self.sends = []
        self.counter = 0
        self.lock = threading.Lock()  # the record
        self.process_lock = threading.RLock()  # hub.processes and `down`
        self.down = set()  # names killed on purpose and not started again yet
        self.children = set()  # one-shot commands running now
        self.children_lock = threading.Lock()
        self.kills = []
        self.crashes = []
        self.errors = []
        self.stop_sending = threading.Event()
        self.stop_chaos = threading.Event()
        self.stop_all = threading.Event()
        self.started = time.time()
        self.hard_deadline = self.started + options.seconds + options.settle + 600
        self.outcomes = {}

    def log(self, message):
        print(f"[{time.time() - self.started:7.1f}s] {message}", flush=True)

    # MARK: commands

    def command(self, arguments, env=None, timeout=30):
        """Runs a one-shot command; returns (returncode, stdout, stderr, seconds) or None when it
        did not finish in time (it is then ended by its pid)."""
        began = time.time()
        with self.children_lock:
            if self.stop_all.is_set():
                return None
            process = subprocess.Popen(arguments, env={**self.hub.env, **(env or {})}, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            self.children.add(process)
        try:
            out, err = process.communicate(timeout=timeout)
            return process.returncode, out, err, time.time() - began
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return None
        finally:
            with self.children_lock:
                self.children.discard(process)

    def nhctl(self, *arguments, timeout=30, env=None):
        return self.command([os.path.join(BIN, "nhctl"), *arguments, "--json"], env=env, timeout=timeout)

    def agent_command(self, agent, *arguments, timeout=30):
        return self.command([os.path.join(BIN, "nh-agent"), *arguments], env=agent.env, timeout=timeout)

    def marker(self, kind):
        with self.lock:
            self.counter += 1
            return f"sk{self.run_id}-{self.counter:05d}-{kind.split('-')[0]}"

    def new_send(self, kind, target, marker=None):
        send = Send(kind, marker or self.marker(kind), target)
        with self.lock:
            self.sends.append(send)
        return send

    # MARK: processes

    def start(self, name):
        with self.process_lock:
            if self.stop_all.is_set():
                return
            if name in self.agents:
                agent = self.agents[name]
                # A line cut short by a kill must not swallow the next one.
                if os.path.exists(agent.output) and os.path.getsize(agent.output) > 0:
                    with open(agent.output, "rb+") as f:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":
                            f.write(b"\n")
                with open(agent.output, "ab") as out:
                    self.hub.start(name, "nh-agent", env=agent.env, stdout=out)
            else:
                self.hub.start(name)
            self.down.discard(name)

    def kill(self, name):
        with self.process_lock:
            self.down.add(name)
            return self.hub.kill(name)

    def running(self, name):
        with self.process_lock:
            process = self.hub.processes.get(name)
            return process is not None and process.poll() is None and name not in self.down

    def watch(self):
        """A process that ended without being killed here crashed: noted, and started again."""
        with self.process_lock:
            for name, process in list(self.hub.processes.items()):
                if name in self.down or process.poll() is None:
                    continue
                log = os.path.join(self.hub.data, f"{name}.log")
                tail = ""
                try:
                    with open(log, errors="replace") as f:
                        tail = "".join(f.readlines()[-8:])
                except OSError:
                    pass
                self.crashes.append({"name": name, "pid": process.pid, "status": process.returncode,
                                     "at": round(time.time() - self.started, 1), "log": tail})
                self.log(f"CRASH: {name} (pid {process.pid}) exited with {process.returncode} without being killed")
                del self.hub.processes[name]
                self.start(name)

    def health(self):
        """Which services answer health now (nhctl health, 300 ms each)."""
        result = self.nhctl("health", "--timeout", "300", timeout=15)
        answers = {}
        for line in (result[1] if result else "").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            answers[entry.get("service")] = entry.get("status") == "ok"
        return answers

    def healthy(self, service):
        return self.health().get(service, False)

    # MARK: start

    def start_system(self):
        for name in SERVICES:
            self.start(name)
        if not wait_until(lambda: os.path.exists(os.path.join(self.hub.data, "keys.json")), timeout=30):
            raise RuntimeError("no keys.json: the services did not start (see the logs in the data folder)")
        if not wait_until(lambda: all(self.health().get(s) for s in SERVICES), timeout=60, interval=0.3):
            raise RuntimeError("the services did not all answer health")
        for user in self.users:
            result = self.nhctl("user", "credential", user)
            if not result or result[0] != 0:
                raise RuntimeError(f"nhctl user credential {user} failed: {result}")
            self.credentials[user] = json.loads(result[1])["credential"]
        for agent in self.agents.values():
            result = self.agent_command(agent, "subscribe", *agent.categories)
            if not result or result[0] != 0:
                raise RuntimeError(f"nh-agent subscribe failed for {agent.name}: {result}")
            if agent.user:
                result = self.agent_command(agent, "login", self.credentials[agent.user])
                if not result or result[0] != 0:
                    raise RuntimeError(f"nh-agent login failed for {agent.name}: {result}")
            self.start(agent.name)
        for agent in self.agents.values():
            if not wait_until(lambda: self.registered_tags(agent) == agent.tags(agent.categories) - self.derived(agent),
                              timeout=60, interval=0.3):
                raise RuntimeError(f"{agent.name} did not register")
        for agent in self.agents.values():
            if self.probe(agent, timeout=60) is None:
                raise RuntimeError(f"{agent.name} did not receive its first notification")
        self.log(f"hub up in {self.hub.data}: {len(SERVICES)} services, {len(self.agents)} agents, users "
                 + ", ".join(f"{u} ({' '.join(a.name for a in self.agents.values() if a.user == u)})" for u in self.users))

    def derived(self, agent):
        return {t for t in agent.tags([]) if t.startswith("$")}

    def registered_tags(self, agent):
        result = self.nhctl("installations", "show", agent.installation, timeout=15)
        if not result or result[0] != 0:
            return None
        try:
            return set(json.loads(result[1]).get("tags", []))
        except ValueError:
            return None

    # MARK: sending

    def attempt(self, send, call, attempts=3, deadline=25):
        """Calls `call` (which returns (ok, id, definite_error)) until the hub acknowledges, at most
        `attempts` times within `deadline` seconds, keeping the same idempotency key or app id."""
        stop = time.time() + deadline
        for number in range(attempts):
            if number and (time.time() >= stop or self.stop_all.is_set()):
                break
            send.attempts += 1
            began = time.time()
            try:
                ok, ident, error = call()
            except requests.RequestException as e:
                ok, ident, error = False, None, f"{type(e).__name__}"
            took = time.time() - began
            if ok:
                send.status = "accepted"
                send.id = ident
                send.t1 = time.time()
                # One attempt answered within the clients' own first timeout: no retry of it is on its way.
                send.clean = send.attempts == 1 and took < 1.8
                return True
            send.clean = False
            send.errors.append(error)
            time.sleep(self.random.uniform(0.3, 1.2))
        send.status = "unknown"
        send.t1 = time.time()
        return False

    def nhctl_send(self, send, arguments):
        key = str(uuid.uuid4())

        def call():
            result = self.nhctl("send", *arguments, "--idempotency-key", key, env=SENDER_CLIENT)
            if result is None:
                return False, None, "nhctl did not finish"
            if result[0] == 0:
                return True, json.loads(result[1])["notificationId"], None
            return False, None, result[2].strip()[:200]

        self.attempt(send, call)

    def rest_headers(self, **extra):
        return {"Authorization": self.hub.token(), "Content-Type": "application/json", **extra}

    def rest_send(self, send, body, headers, direct=False):
        key = str(uuid.uuid4())

        def call():
            url = f"{self.hub.base}/hub/messages?{API}" + ("&direct" if direct else "")
            r = requests.post(url, data=json.dumps(body), timeout=(2, 10),
                              headers=self.rest_headers(**headers, **{"ServiceBusNotification-IdempotencyKey": key}))
            if r.status_code == 201:
                return True, r.headers.get("TrackingId"), None
            return False, None, f"HTTP {r.status_code} {r.text[:150]}"

        self.attempt(send, call)

    def pick_expression(self):
        return self.random.choice(EXPRESSIONS)

    def op_tag_nhctl(self):
        expression = self.pick_expression()
        send = self.new_send("tag-nhctl", ("tag", expression))
        self.nhctl_send(send, ["--tag", expression, f"messageParam={send.marker}", "title=soak"])

    def op_tag_rest(self):
        expression = self.pick_expression()
        send = self.new_send("tag-rest", ("tag", expression))
        self.rest_send(send, {"messageParam": send.marker, "title": "soak"},
                       {"ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": expression})

    def op_native_nhctl(self):
        expression = self.pick_expression()
        send = self.new_send("native-nhctl", ("tag", expression))
        self.nhctl_send(send, ["--tag", expression, "--native", json.dumps({"message": send.marker, "kind": "native"})])

    def op_broadcast_rest(self):
        send = self.new_send("broadcast-rest", ("all", None))
        self.rest_send(send, {"message": send.marker}, {"ServiceBusNotification-Format": "linux"})

    def op_direct_nhctl(self):
        agent = self.random.choice(list(self.agents.values()))
        send = self.new_send("direct-nhctl", ("installation", agent.name))
        self.nhctl_send(send, ["--installation", agent.installation, "--native", json.dumps({"message": send.marker})])

    def op_direct_rest(self):
        agent = self.random.choice(list(self.agents.values()))
        send = self.new_send("direct-rest", ("installation", agent.name))
        self.rest_send(send, {"message": send.marker},
                       {"ServiceBusNotification-Format": "linux", "ServiceBusNotification-DeviceHandle": agent.installation},
                       direct=True)

    def op_user_send_nhctl(self):
        user = self.random.choice(self.users)
        send = self.new_send("user-send-nhctl", ("user", user))
        self.nhctl_send(send, ["--user", user, f"messageParam={send.marker}"])

    def op_rich_nhctl(self):
        if self.random.random() < 0.3:
            user = self.random.choice(self.users)
            send = self.new_send("rich-nhctl", ("user", user))
            target = ["--user", user]
        else:
            expression = self.pick_expression()
            send = self.new_send("rich-nhctl", ("tag", expression))
            target = ["--tag", expression]
        path = os.path.join(self.hub.data, "rich-files", f"{send.marker}.bin")
        with open(path, "wb") as f:
            f.write(send.marker.encode() + os.urandom(self.random.randint(100, 4000)))
        self.nhctl_send(send, ["--rich", path, "--message", send.marker, "--rich-type", "file", *target])

    def op_user_post_nhctl(self):
        user = self.random.choice(self.users)
        send = self.new_send("user-post-nhctl", ("post", user))

        def call():
            result = self.nhctl("user", "post", user, "--app-id", send.marker, "--title", send.marker, "--body", "soak",
                                env=SENDER_CLIENT)
            if result is None:
                return False, None, "nhctl did not finish"
            if result[0] == 0:
                return True, json.loads(result[1])["id"], None
            return False, None, result[2].strip()[:200]

        self.attempt(send, call)

    def op_user_post_rest(self):
        user = self.random.choice(self.users)
        send = self.new_send("user-post-rest", ("post", user))

        def call():
            r = requests.post(f"{self.hub.base}/hub/users/{user}/notifications?{API}", timeout=(2, 10),
                              headers=self.rest_headers(),
                              data=json.dumps({"appNotificationId": send.marker, "visual": {"title": send.marker, "body": "soak"}}))
            if r.status_code == 201:
                return True, r.json()["notification"]["id"], None
            return False, None, f"HTTP {r.status_code} {r.text[:150]}"

        self.attempt(send, call)

    def take_post(self):
        """A post acknowledged at once, not deleted and not being changed by the other sender."""
        with self.lock:
            candidates = [s for s in self.sends if s.target[0] == "post" and s.status == "accepted" and s.clean
                          and s.deleted == "no" and not s.busy]
            if not candidates:
                return None
            post = self.random.choice(candidates[-40:])
            post.busy = True
            return post

    def user_token(self, user, fresh=False):
        if fresh or user not in self.user_tokens:
            r = requests.post(f"{self.hub.base}/hub/users/tokens?{API}", data=json.dumps({"credential": self.credentials[user]}),
                              timeout=(2, 10))
            if r.status_code != 200:
                raise requests.RequestException(f"token: HTTP {r.status_code}")
            self.user_tokens[user] = r.json()["token"]
        return self.user_tokens[user]

    def apply_op(self, post, name, fields, ok, clean):
        """Notes what an acknowledged (ok) or uncertain change may have left in the store."""
        post.ops.append((name, "accepted" if ok else "unknown", clean))
        if fields == "delete":
            post.deleted = "yes" if ok else "maybe"
            return
        for field, value in fields.items():
            candidates = post.read if field == "readState" else post.action
            if ok and clean and field not in post.tainted:
                candidates.clear()
            elif not (ok and clean):
                post.tainted.add(field)
            candidates.add(value)

    AGENT_ACTIONS = {
        "read": {"readState": "read"}, "dismiss": {"userActionState": "dismissed"},
        "activate": {"readState": "read", "userActionState": "activated"}, "snooze": {"userActionState": "snoozed"},
    }

    def op_state_agent(self, delete=False):
        post = self.take_post()
        if not post:
            return
        try:
            # A user acts on a device that has shown the notification (the device may be down now:
            # nh-agent then changes it in the store directly).
            devices = [a for a in self.agents.values() if a.user == post.target[1] and a.tail.shown_post(post.marker)]
            if not devices:
                return
            agent = self.random.choice(devices)
            action = "delete" if delete else self.random.choice(list(self.AGENT_ACTIONS))
            ok, clean = False, True
            for number in range(2):
                began = time.time()
                result = self.agent_command(agent, action, post.id)
                took = time.time() - began
                if result and result[0] == 0:
                    ok = True
                    # An answer after the agent's own timeout may come from the fallback, while the
                    # agent may still carry out the change later.
                    clean = clean and took < 1.8
                    break
                clean = False
                if result and action == "delete" and number > 0 and "not_found" in result[2]:
                    ok = True
                    break
                time.sleep(self.random.uniform(0.3, 1.0))
            kind = "delete-agent" if delete else "state-agent"
            with self.lock:
                self.sends.append(self.op_record(kind, post, f"{action} on {agent.name}", ok))
            self.apply_op(post, action, "delete" if delete else self.AGENT_ACTIONS[action], ok, clean)
        finally:
            post.busy = False

    def op_state_rest(self, delete=False):
        post = self.take_post()
        if not post:
            return
        try:
            user = post.target[1]
            url = f"{self.hub.base}/hub/users/me/notifications/{post.id}?{API}"
            if delete:
                fields = "delete"
            else:
                fields = self.random.choice([
                    {"readState": "read"}, {"readState": "unread"}, {"userActionState": "dismissed"},
                    {"userActionState": "snoozed"}, {"readState": "read", "userActionState": "activated"},
                    {"userActionState": "noInteraction"}])
            ok, clean = False, True
            for number in range(2):
                try:
                    for fresh in (False, True):
                        headers = {"Authorization": f"Bearer {self.user_token(user, fresh)}", "Content-Type": "application/json"}
                        if delete:
                            r = requests.delete(url, headers=headers, timeout=(2, 10))
                        else:
                            r = requests.patch(url, headers=headers, data=json.dumps(fields), timeout=(2, 10))
                        if r.status_code != 401:
                            break
                    if r.status_code in (200, 204) or (delete and number > 0 and r.status_code == 404):
                        ok = True
                        break
                except requests.RequestException:
                    pass
                clean = False
                time.sleep(self.random.uniform(0.3, 1.0))
            kind = "delete-rest" if delete else "state-rest"
            with self.lock:
                self.sends.append(self.op_record(kind, post, json.dumps(fields), ok))
            self.apply_op(post, "delete" if delete else "patch", fields, ok, clean)
        finally:
            post.busy = False

    def op_record(self, kind, post, what, ok):
        record = Send(kind, post.marker, ("change", post.target[1]))
        record.status = "accepted" if ok else "unknown"
        record.id = post.id
        record.errors = [] if ok else [what]
        return record

    def sender(self, number):
        names = [name for name, _ in OPERATIONS]
        weights = [weight for _, weight in OPERATIONS]
        rng = random.Random(self.options.seed * 100 + number if self.options.seed is not None else None)
        while not self.stop_sending.is_set() and time.time() < self.hard_deadline:
            name = rng.choices(names, weights)[0]
            try:
                if name == "state-agent":
                    self.op_state_agent()
                elif name == "delete-agent":
                    self.op_state_agent(delete=True)
                elif name == "state-rest":
                    self.op_state_rest()
                elif name == "delete-rest":
                    self.op_state_rest(delete=True)
                else:
                    getattr(self, "op_" + name.replace("-", "_"))()
            except Exception:
                self.errors.append(traceback.format_exc())
                self.log(f"sender {number}: {traceback.format_exc().strip().splitlines()[-1]}")
            time.sleep(rng.uniform(0.02, self.options.pause))

    # MARK: categories

    def subscriptions(self):
        while not self.stop_sending.wait(self.random.uniform(6, 15)):
            if time.time() >= self.hard_deadline:
                return
            agent = self.random.choice(list(self.agents.values()))
            if not self.running(agent.name):
                continue
            before = list(agent.categories)
            category = self.random.choice(CATEGORIES)
            if category in before and len(before) > 1:
                verb, after = "unsubscribe", [c for c in before if c != category]
            elif category not in before:
                verb, after = "subscribe", before + [category]
            else:
                continue
            change = Change(agent, agent.tags(before), agent.tags(after))
            with self.lock:
                agent.changes.append(change)
                agent.categories = after
            result = self.agent_command(agent, verb, category)
            if not result or result[0] != 0:
                self.log(f"nh-agent {verb} {category} on {agent.name} failed: {result}")
                shown = self.agent_command(agent, "categories")
                if shown and shown[0] == 0 and set(shown[1].split()) == set(before):
                    with self.lock:
                        agent.categories = before
                        change.after = change.before
                    change.confirmed = time.time()
                    continue
            wanted = agent.tags(after) - self.derived(agent)
            if wait_until(lambda: self.registered_tags(agent) == wanted, timeout=30, interval=0.3):
                change.confirmed = time.time()
                self.log(f"{agent.name}: {verb} {category} -> {' '.join(sorted(after))} "
                         f"(registered after {change.confirmed - change.begin:.1f} s)")
            else:
                self.log(f"{agent.name}: {verb} {category} not registered within 30 s")

    # MARK: chaos

    def probe(self, agent, timeout=60):
        """A direct send to one agent; returns seconds until the agent shows it, or None."""
        send = self.new_send("probe", ("installation", agent.name))
        began = time.time()
        self.nhctl_send(send, ["--installation", agent.installation, "--native", json.dumps({"message": send.marker})])
        if wait_until(lambda: agent.tail.seen(send.marker), timeout=max(1, timeout - (time.time() - began)), interval=0.05):
            return time.time() - began
        return None

    def chaos(self):
        rng = random.Random(self.options.seed * 7 if self.options.seed is not None else None)
        while not self.stop_chaos.wait(rng.uniform(self.options.chaos_min, self.options.chaos_max)):
            if time.time() >= self.hard_deadline:
                return
            try:
                if rng.random() < 0.6:
                    self.chaos_service(rng.choices(SERVICES, SERVICE_WEIGHTS)[0], rng)
                else:
                    self.chaos_agent(rng.choice(list(self.agents.values())), rng)
            except Exception:
                self.errors.append(traceback.format_exc())
                self.log(f"chaos: {traceback.format_exc().strip().splitlines()[-1]}")

    def chaos_service(self, name, rng):
        # Mostly a quick restart; sometimes an outage long enough for clients to give up.
        long = rng.random() < 0.2
        delay = rng.uniform(4.0, 10.0) if long else rng.uniform(0.1, 2.0)
        killed = time.time()
        pid = self.kill(name)
        time.sleep(delay)
        self.start(name)
        restarted = time.time()
        health = None
        if wait_until(lambda: self.healthy(name), timeout=60, interval=0.1):
            health = time.time() - killed
        live = [a for a in self.agents.values() if self.running(a.name)]
        flowing = None
        if live:
            took = self.probe(rng.choice(live), timeout=60)
            flowing = None if took is None else time.time() - killed
        entry = {"at": round(killed - self.started, 1), "target": name, "pid": pid, "down": round(restarted - killed, 2),
                 "long": long, "health": None if health is None else round(health, 2),
                 "delivering": None if flowing is None else round(flowing, 2)}
        self.kills.append(entry)
        self.log(f"kill -9 {name} (pid {pid}): down {entry['down']} s, health after {entry['health']} s, "
                 f"deliveries again after {entry['delivering']} s")

    def chaos_agent(self, agent, rng):
        long = rng.random() < 0.4
        # Longer than the dispatcher's silence window (three heartbeats), or a quick restart.
        heartbeat = self.options.agent_heartbeat_ms / 1000
        delay = rng.uniform(4 * heartbeat, 8 * heartbeat) if long else rng.uniform(0.1, 1.5)
        killed = time.time()
        pid = self.kill(agent.name)
        time.sleep(delay)
        self.start(agent.name)
        restarted = time.time()
        took = self.probe(agent, timeout=60)
        receiving = None if took is None else time.time() - killed
        entry = {"at": round(killed - self.started, 1), "target": agent.name, "pid": pid, "down": round(restarted - killed, 2),
                 "long": long, "receiving": None if receiving is None else round(receiving, 2), "killedAt": killed}
        self.kills.append(entry)
        self.log(f"kill -9 {agent.name} (pid {pid}){' for longer than the session window' if long else ''}: "
                 f"down {entry['down']} s, receiving again after {entry['receiving']} s")

    # MARK: run

    def run(self):
        threads = [threading.Thread(target=self.sender, args=(n,), daemon=True, name=f"sender-{n}")
                   for n in range(self.options.senders)]
        threads.append(threading.Thread(target=self.subscriptions, daemon=True, name="subscriptions"))
        chaos = threading.Thread(target=self.chaos, daemon=True, name="chaos")
        for thread in threads + [chaos]:
            thread.start()
        end = time.time() + self.options.seconds
        last = 0
        while time.time() < end:
            time.sleep(0.5)
            self.watch()
            if time.time() - last >= 15:
                last = time.time()
                with self.lock:
                    done = collections.Counter(s.status for s in self.sends)
                self.log(f"sends so far: {dict(done)}; kills {len(self.kills)}, crashes {len(self.crashes)}")
        self.log("stopping the senders and the chaos")
        self.stop_sending.set()
        self.stop_chaos.set()
        for thread in threads + [chaos]:
            while thread.is_alive() and time.time() < self.hard_deadline:
                thread.join(timeout=0.5)
                self.watch()
        with self.process_lock:
            for name in list(self.down):
                self.start(name)
        self.watch()

    def settle(self):
        """Waits (bounded) until every expected delivery is there and the devices agree, then a
        little longer so that a late repeat would show."""
        began = time.time()
        deadline = began + self.options.settle
        report = None
        while time.time() < deadline:
            self.watch()
            report = self.analyse(quick=True)
            if report["missing"] == 0 and report["devicesAgree"]:
                break
            time.sleep(1.0)
        self.log(f"settled after {time.time() - began:.1f} s" if report and report["missing"] == 0 and report["devicesAgree"]
                 else f"not settled after {time.time() - began:.1f} s")
        time.sleep(3)
        self.watch()
        return time.time() - began

    # MARK: analysis

    def planned_at(self, send):
        """When the dispatcher planned a send (its outcome's start time), or None."""
        if send.id in self.outcomes:
            return self.outcomes[send.id]
        try:
            r = requests.get(f"{self.hub.base}/hub/messages/{send.id}?{API}", headers=self.rest_headers(Accept="application/json"),
                             timeout=(2, 10))
            if r.status_code == 200 and r.json().get("startTime"):
                text = r.json()["startTime"]
                when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
                self.outcomes[send.id] = when
                return when
        except (requests.RequestException, ValueError):
            pass
        return None

    def tag_sets(self, agent, low, high):
        """Every category set the dispatcher may have used for `agent` between `low` and `high`."""
        changes = agent.changes
        current = agent.initial
        sets = []
        for change in changes:
            if change.begin <= low:
                current = change.after
        sets.append(current)
        for change in changes:
            end = (change.confirmed + INDEX_MARGIN) if change.confirmed else float("inf")
            if change.begin <= high and end >= low:
                sets.extend([change.before, change.after])
        return sets

    def classify(self, send, agent):
        """'yes' when the send is addressed to the agent, 'no' when not, 'maybe' when the agent's
        categories changed around it."""
        kind, value = send.target
        if kind == "installation":
            return "yes" if value == agent.name else "no"
        if kind == "user":
            return "yes" if agent.user == value else "no"
        if kind == "all":
            return "yes"
        if kind != "tag":
            return "no"
        low = send.t0 - 0.2
        high = (send.t1 or time.time()) + INDEX_MARGIN
        answers = {matches(value, tags) for tags in self.tag_sets(agent, low, float("inf"))}
        if len(answers) == 1:
            return "yes" if answers.pop() else "no"
        planned = self.planned_at(send) if send.id else None
        high = max(high, planned + INDEX_MARGIN) if planned else float("inf")
        answers = {matches(value, tags) for tags in self.tag_sets(agent, low, high)}
        if len(answers) == 1:
            return "yes" if answers.pop() else "no"
        return "maybe"

    def device_states(self, agent):
        result = self.agent_command(agent, "list", timeout=20)
        if not result or result[0] != 0:
            return None
        states = {}
        for line in result[1].splitlines():
            parts = line.split()
            if len(parts) >= 3:
                states[parts[0]] = (parts[1], parts[2])
        return states

    def store_states(self, user):
        result = self.nhctl("user", "list", user, timeout=20)
        if not result or result[0] != 0:
            return None
        notifications = {}
        for line in result[1].splitlines():
            try:
                n = json.loads(line)
            except ValueError:
                continue
            notifications[n["id"]] = n
        return notifications

    def diagnose_delivery(self, agent, send):
        """Where a lost delivery got to: the agent's store of shown deliveries, the dispatcher's pending ones."""
        notes = []
        try:
            db = sqlite3.connect(f"file:{os.path.join(agent.home, 'agent.db')}?mode=ro", uri=True, timeout=5)
            rows = db.execute("SELECT delivery_id, seen_at FROM seen WHERE notification_id = ?", (send.id,)).fetchall()
            db.close()
            for delivery, seen_at in rows:
                notes.append(f"the agent marked {delivery} shown at {stamp(seen_at)} but wrote no line for it")
            db = sqlite3.connect(f"file:{os.path.join(self.hub.data, 'dispatch.db')}?mode=ro", uri=True, timeout=5)
            rows = db.execute("SELECT delivery_id, delivered_at FROM deliveries WHERE notification_id = ? AND installation_id = ?",
                              (send.id, agent.installation)).fetchall()
            outcome = db.execute("SELECT state, targets, delivered, acknowledged, expired, failed FROM outcomes "
                                 "WHERE notification_id = ?", (send.id,)).fetchone()
            db.close()
            for delivery, delivered_at in rows:
                notes.append(f"the dispatcher still holds {delivery} (sent {stamp(delivered_at)})")
            if outcome:
                notes.append("outcome {} targets {} delivered {} acknowledged {} expired {} failed {}".format(*outcome))
        except sqlite3.Error as error:
            notes.append(f"cannot read the stores: {error}")
        return "; ".join(notes)

    def diagnose_post(self, agent, marker, ident):
        try:
            db = sqlite3.connect(f"file:{os.path.join(agent.home, 'agent.db')}?mode=ro", uri=True, timeout=5)
            cached = db.execute("SELECT 1 FROM user_cache WHERE id = ?", (ident,)).fetchone()
            db.close()
        except sqlite3.Error as error:
            return f"cannot read the agent's store: {error}"
        return "the device's copy holds it" if cached else "the device's copy does not hold it"

    def analyse(self, quick=False):
        for agent in self.agents.values():
            agent.tail.poll()
        with self.lock:
            sends = list(self.sends)
        deliveries = collections.Counter()  # (agent, marker) -> notification lines
        created = collections.Counter()  # (agent, marker) -> user.created lines
        user_events = collections.defaultdict(set)  # marker -> agents with any user event for it
        rich_failed = []
        misdelivered = []
        # The agent shows a delivery, then remembers it as seen: a SIGKILL between the two shows it
        # again when the agent is back, under the same delivery id (its one window for a repeat, as
        # AgentDaemon says). Such a repeat is counted apart, not as a duplicate.
        window = 0.25
        kills = collections.defaultdict(list)
        for kill in self.kills:
            if "killedAt" in kill:
                kills[kill["target"]].append(kill["killedAt"])
        first_shown = {}
        self.crash_window_repeats = []
        for agent in self.agents.values():
            with agent.tail.lock:
                lines = list(agent.tail.lines)
            for line in lines:
                event = line.get("event")
                marker = marker_of(line)
                if event == "notification":
                    key = (agent.name, line.get("deliveryId"))
                    shown_at = parse_time(line.get("receivedAt"))
                    if key in first_shown and shown_at is not None and first_shown[key] is not None and any(
                            first_shown[key] <= killed <= first_shown[key] + window for killed in kills[agent.name]):
                        self.crash_window_repeats.append(f"{agent.name}: {marker}")
                        continue
                    first_shown.setdefault(key, shown_at)
                    deliveries[(agent.name, marker)] += 1
                    if line.get("installationId") != agent.installation:
                        misdelivered.append(f"{agent.name} showed a delivery for {line.get('installationId')}: {marker}")
                elif event in ("user.created", "user.updated", "user.deleted"):
                    user_events[marker].add(agent.name)
                    if event == "user.created":
                        created[(agent.name, marker)] += 1
                    owner = (line.get("notification") or {}).get("userId")
                    if owner != agent.user:
                        misdelivered.append(f"{agent.name} ({agent.user}) got {event} of {owner}: {marker}")
                elif event == "rich.failed":
                    rich_failed.append(f"{agent.name}: {line.get('notificationId')} after {line.get('attempts')} tries: {line.get('reason')}")
        known = {s.marker for s in sends}
        for (name, marker), count in deliveries.items():
            if marker not in known:
                misdelivered.append(f"{name} showed a notification the sender never sent: {marker}")
        for marker, names in user_events.items():
            if marker not in known:
                misdelivered.append(f"{', '.join(sorted(names))} showed a user notification the sender never posted: {marker}")

        lost, duplicated, missing = [], [], 0
        shown_total = 0
        optional = 0
        expected = 0
        store = {u: self.store_states(u) for u in self.users}
        for send in sends:
            if send.status not in ("accepted", "unknown"):
                continue
            kind = send.target[0]
            if kind == "change":
                continue
            if kind == "post":
                user = send.target[1]
                present = store.get(user) is not None and any(
                    n["appNotificationId"] == send.marker for n in store[user].values())
                for agent in self.agents.values():
                    count = created[(agent.name, send.marker)]
                    if agent.user != user:
                        if agent.name in user_events.get(send.marker, set()):
                            misdelivered.append(f"{agent.name} ({agent.user}) got post {send.marker} for {user}")
                        continue
                    shown_total += count
                    if count > 1:
                        duplicated.append(f"{agent.name}: user.created {count} times for {send.marker} ({send.kind})")
                    if not present:
                        optional += 1
                    else:
                        expected += 1
                        if count == 0:
                            missing += 1
                            ident = next(i for i, n in store[user].items() if n["appNotificationId"] == send.marker)
                            lost.append(f"{agent.name}: never showed post {send.marker} ({send.kind}, {send.status}, id {ident}) "
                                        f"that the store holds" + ("" if quick else f"; {self.diagnose_post(agent, send.marker, ident)}"))
                if send.status == "accepted" and send.deleted == "no" and store.get(user) is not None and not present:
                    missing += 1
                    lost.append(f"store: accepted post {send.marker} ({send.kind}) for {user} is not in the store")
                continue
            for agent in self.agents.values():
                count = deliveries[(agent.name, send.marker)]
                shown_total += count
                target = self.classify(send, agent) if not quick or count == 0 else "seen"
                if count > 1:
                    duplicated.append(f"{agent.name}: {send.marker} ({send.kind}, {send.status}) shown {count} times")
                if target == "seen":
                    continue
                if count and target == "no":
                    misdelivered.append(f"{agent.name}: {send.marker} ({send.kind} to {send.target}) is not addressed to it")
                if target == "maybe" or (target == "yes" and send.status == "unknown"):
                    optional += 1
                elif target == "yes":
                    expected += 1
                    if count == 0:
                        missing += 1
                        lost.append(f"{agent.name}: never showed {send.marker} ({send.kind} to {send.target}, id {send.id})"
                                    + ("" if quick else f"; {self.diagnose_delivery(agent, send)}"))

        devices, disagreements, state_errors = self.compare_devices(sends, store)
        return {
            "missing": missing, "lost": lost, "duplicated": duplicated, "misdelivered": misdelivered,
            "deliveries": shown_total, "expected": expected, "optional": optional, "richFailed": rich_failed,
            "devicesAgree": not disagreements, "disagreements": disagreements, "devices": devices,
            "storeAgrees": not state_errors, "stateErrors": state_errors,
            "badLines": sum(a.tail.bad for a in self.agents.values()),
        }

    def compare_devices(self, sends, store):
        """Every device of a user holds what the store holds, in the same states; and the store
        holds what the sender's acknowledged changes left."""
        disagreements = []
        devices = {}
        for user in self.users:
            notifications = store.get(user)
            if notifications is None:
                disagreements.append(f"{user}: the store's list could not be read")
                continue
            truth = {i: (n["readState"], n["userActionState"]) for i, n in notifications.items()}
            for agent in self.agents.values():
                if agent.user != user:
                    continue
                held = self.device_states(agent)
                if held is None:
                    disagreements.append(f"{agent.name}: nh-agent list failed")
                    continue
                devices[agent.name] = len(held)
                for i in sorted(set(truth) | set(held)):
                    if truth.get(i) != held.get(i):
                        disagreements.append(f"{agent.name} ({user}): {i} is {held.get(i, 'absent')} on the device, "
                                             f"{truth.get(i, 'absent')} in the store")
        state_errors = []
        for send in sends:
            if send.target[0] != "post" or send.status != "accepted":
                continue
            notifications = store.get(send.target[1])
            if notifications is None:
                continue
            found = next((n for n in notifications.values() if n["appNotificationId"] == send.marker), None)
            if send.deleted == "yes" and found:
                state_errors.append(f"{send.marker}: deleted (acknowledged) but still in the store")
            if found:
                if found["readState"] not in send.read or found["userActionState"] not in send.action:
                    state_errors.append(
                        f"{send.marker}: store has {found['readState']}/{found['userActionState']}, the acknowledged "
                        f"changes leave {sorted(send.read)}/{sorted(send.action)} (ops {send.ops})")
        return devices, disagreements, state_errors

    # MARK: report

    def report(self, settle_seconds):
        result = self.analyse()
        with self.lock:
            sends = list(self.sends)
        by_kind = collections.Counter(s.kind for s in sends)
        status = collections.Counter(s.status for s in sends)
        retried = sum(1 for s in sends if s.attempts > 1)
        ok = (not result["lost"] and not result["duplicated"] and not result["misdelivered"] and result["devicesAgree"]
              and result["storeAgrees"] and not self.crashes)
        summary = {
            "seconds": self.options.seconds, "settleSeconds": round(settle_seconds, 1), "data": self.hub.data,
            "agents": len(self.agents), "users": self.users, "sendsByKind": dict(sorted(by_kind.items())),
            "accepted": status["accepted"], "unknown": status["unknown"], "retried": retried,
            "deliveries": result["deliveries"], "expected": result["expected"], "optional": result["optional"],
            "lost": len(result["lost"]), "duplicated": len(result["duplicated"]), "misdelivered": len(result["misdelivered"]),
            "devicesAgree": result["devicesAgree"], "storeAgrees": result["storeAgrees"], "devices": result["devices"],
            "richFailed": result["richFailed"], "badLines": result["badLines"],
            "crashWindowRepeats": list(getattr(self, "crash_window_repeats", [])),
            "kills": self.kills, "crashes": self.crashes, "harnessErrors": len(self.errors),
            "details": {k: result[k][:50] for k in ("lost", "duplicated", "misdelivered", "disagreements", "stateErrors")},
            "categoryChanges": sum(len(a.changes) for a in self.agents.values()),
            "ok": ok,
        }
        print()
        print(f"soak: {self.options.seconds} s of load and chaos, settled in {settle_seconds:.1f} s; data in {self.hub.data}")
        print(f"sends by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
        print(f"accepted {status['accepted']}, unknown {status['unknown']} ({retried} needed more than one attempt); "
              f"category changes {summary['categoryChanges']}")
        print(f"deliveries shown {result['deliveries']} (expected {result['expected']}, optional {result['optional']})")
        print(f"lost {len(result['lost'])}, duplicated {len(result['duplicated'])}, misdelivered {len(result['misdelivered'])}")
        repeats = getattr(self, "crash_window_repeats", [])
        if repeats:
            print(f"shown again after a SIGKILL within {0.25} s of being shown, before it was remembered (the agent's one "
                  f"window for a repeat, same delivery id): {', '.join(repeats[:10])}")
        print(f"devices agree: {'yes' if result['devicesAgree'] else 'NO'} "
              f"({', '.join(f'{k} holds {v}' for k, v in sorted(result['devices'].items()))}); "
              f"store agrees with the acknowledged changes: {'yes' if result['storeAgrees'] else 'NO'}")
        if result["richFailed"]:
            print(f"rich fetches given up: {len(result['richFailed'])}")
        for title, key in (("lost", "lost"), ("duplicated", "duplicated"), ("misdelivered", "misdelivered"),
                           ("devices disagree", "disagreements"), ("store disagrees", "stateErrors"), ("rich failed", "richFailed")):
            for item in result[key][:20]:
                print(f"  {title}: {item}")
        print(f"kills ({len(self.kills)}):")
        for k in self.kills:
            if k["target"] in SERVICES:
                print(f"  t+{k['at']:6.1f}s kill -9 {k['target']:<12} pid {k['pid']:<7} down {k['down']:5.2f} s: "
                      f"answers health {k['health']} s and delivers again {k['delivering']} s after the kill")
            else:
                print(f"  t+{k['at']:6.1f}s kill -9 agent {k['target']:<6} pid {k['pid']:<7} down {k['down']:5.2f} s: "
                      f"receives again {k['receiving']} s after the kill{' (down past the session window)' if k['long'] else ''}")
        for name in SERVICES + ["agent"]:
            key = "health" if name != "agent" else "receiving"
            kills = [k for k in self.kills if k.get(key) is not None
                     and (k["target"] == name or (name == "agent" and k["target"] in self.agents))]
            if kills:
                total = [k[key] for k in kills]
                after = [k[key] - k["down"] for k in kills]
                print(f"  recovery of {name}: {len(kills)} kills; kill to {key} worst {max(total):.2f} s, mean "
                      f"{sum(total) / len(total):.2f} s; restart to {key} worst {max(after):.2f} s, mean {sum(after) / len(after):.2f} s")
        if self.crashes:
            print(f"crashes ({len(self.crashes)}): processes that exited without being killed")
            for c in self.crashes:
                print(f"  t+{c['at']}s {c['name']} pid {c['pid']} status {c['status']}\n    " + c["log"].replace("\n", "\n    "))
        if self.errors:
            print(f"harness errors: {len(self.errors)} (first below)")
            print(self.errors[0])
        print("result: " + ("OK" if ok else "FAILED"))
        return summary

    def shutdown(self):
        self.stop_sending.set()
        self.stop_chaos.set()
        with self.children_lock:
            self.stop_all.set()
            children = list(self.children)
        for child in children:
            if child.poll() is None:
                child.kill()
        with self.process_lock:
            self.hub.stop_all()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Soak the hub under load while killing services and agents.")
    parser.add_argument("--seconds", type=float, default=60, help="how long to send and kill (default 60)")
    parser.add_argument("--settle", type=float, default=None, help="most seconds to wait for everything to arrive")
    parser.add_argument("--senders", type=int, default=2, help="sender threads (default 2)")
    parser.add_argument("--pause", type=float, default=0.25, help="most seconds a sender waits between operations")
    parser.add_argument("--chaos-min", type=float, default=3.0, help="fewest seconds between kills")
    parser.add_argument("--chaos-max", type=float, default=8.0, help="most seconds between kills")
    parser.add_argument("--agent-heartbeat-ms", type=int, default=1000, help="agentHeartbeatMs for the whole hub")
    parser.add_argument("--seed", type=int, default=None, help="random seed")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--summary", help="write the summary as JSON to this file")
    parser.add_argument("--keep", action="store_true", help="keep the data folder even when the soak passes")
    options = parser.parse_args(argv)
    if options.seed is None:
        options.seed = random.randrange(1 << 30)
    if options.settle is None:
        options.settle = max(60.0, min(180.0, options.seconds * 0.25))

    soak = Soak(options)

    def interrupted(signum, frame):
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    status = 2
    summary = None
    try:
        soak.log(f"seed {options.seed}; binaries in {BIN}")
        try:
            soak.start_system()
        except RuntimeError as error:
            soak.log(f"could not start the hub: {error}")
            return 2
        soak.run()
        settled = soak.settle()
        summary = soak.report(settled)
        summary["seed"] = options.seed
        status = 0 if summary["ok"] else 1
        return status
    except Interrupted as error:
        soak.log(f"interrupted ({error}); stopping everything")
        return 1
    finally:
        soak.shutdown()
        if options.summary:
            with open(options.summary, "w") as f:
                json.dump(summary or {"ok": False, "status": status, "data": soak.hub.data}, f, indent=1)
        if status == 0 and not options.keep:
            shutil.rmtree(soak.hub.data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
