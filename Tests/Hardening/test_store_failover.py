"""The store's failover, as an operator running PostgreSQL with a streaming replica meets it: every
service on the URL that names both servers (target_session_attrs=read-write), four agents on a tag
(two of them a user's devices), an event stream for that user (and, in the asynchronous case, the
user's inbox page in headless Chromium), and a stream of
broadcasts and user posts while the primary is lost (SIGKILL to its postmaster and every child) and
the replica promoted, or the primary started again. No service is restarted by the test.

Variants:
- synchronous: commits wait for the replica (synchronous_standby_names = 'ANY 1 (standby1)'), so
  nothing accepted is lost or shown twice; the dispatcher's own commits, which wait for no disk,
  may trail the promoted server and are planned again, and the agents drop the repeats;
- asynchronous, held behind: the replica gets nothing for a while before the kill (its WAL sender
  stopped), so the sends accepted meanwhile are lost by nature; every send accepted after the
  promotion still reaches every agent and device once, every outcome of the new history adds up,
  the devices and the inbox page list exactly what the store holds, the event stream is reset, and
  the services name the numbers that were lost;
- restart: the primary comes back on the same timeline; nothing is lost.

The times from the kill to the first accepted send and to every service healthy are printed, not
asserted: these machines are noisy."""
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from browser import BrowserUnavailable, chromium  # noqa: E402
from hubharness import BIN, Hub, free_port, health_row, json_lines, wait_until  # noqa: E402
from pgreplica import ReplicatedPostgres  # noqa: E402
from pgserver import PostgresUnavailable, find_bin_dir  # noqa: E402

API = "api-version=2015-01"
AGENTS = 4
DEVICES = 2  # the first two agents are alice's devices
USER = "alice"


def postgres_available():
    try:
        find_bin_dir()
        return True
    except PostgresUnavailable:
        return False


pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed (apt-get install postgresql)")


class Send:
    def __init__(self, kind, label):
        self.kind = kind  # "broadcast" or "post"
        self.label = label
        self.key = f"{label}-{uuid.uuid4().hex[:8]}"
        self.id = None
        self.accepted_at = None
        self.attempts = 0


class FailoverHub:
    def __init__(self, pair):
        self.pair = pair
        self.hub = Hub(prefix="nh-store-failover-", settings={
            "NH_STORE": pair.url(), "NH_HEARTBEAT_MS": "500", "NH_AGENT_HEARTBEAT_MS": "1000", "NH_LOG_LEVEL": "info",
            "NH_REQUEST_TIMEOUT_MS": "4000"})
        self.outputs = {}
        self.homes = {}
        self.sends = []
        self.events = []
        self.stream_stop = threading.Event()

    # MARK: setup

    def nhctl(self, *args, timeout=60):
        return subprocess.run([os.path.join(BIN, "nhctl"), *args], env=self.hub.env, capture_output=True, text=True, timeout=timeout)

    def start(self):
        assert self.hub.start_services(timeout=60), self.hub.describe("nh-gateway")
        assert wait_until(self.healthy, timeout=60, interval=0.3), self.nhctl("health").stdout
        done = self.nhctl("user", "credential", USER)
        assert done.returncode == 0, done.stderr
        self.credential = done.stdout.strip()
        for i in range(AGENTS):
            name = f"agent-{i}"
            home = os.path.join(self.hub.data, name)
            env = {"NH_AGENT_HOME": home, "NH_AGENT_INSTALLATION_ID": f"store-failover-{i}",
                   "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}
            self.homes[name] = (home, env)
            for command in [["subscribe", "World"]] + ([["login", self.credential]] if i < DEVICES else []):
                done = subprocess.run([os.path.join(BIN, "nh-agent"), *command], env={**self.hub.env, **env},
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
            self.outputs[name] = os.path.join(self.hub.data, f"{name}.jsonl")
            self.hub.start(name, "nh-agent", env=env, stdout=open(self.outputs[name], "ab"))
        assert wait_until(lambda: self.agents_connected() == AGENTS, timeout=60, interval=0.3), self.hub.describe("nh-dispatch")
        probe = Send("broadcast", "probe")
        assert self.send(probe, deadline=30)
        assert wait_until(lambda: all(probe.id in self.shown(n) for n in self.outputs), timeout=60, interval=0.3), (
            {n: len(self.shown(n)) for n in self.outputs}, self.hub.describe("nh-dispatch"))
        self.pids = {name: process.pid for name, process in self.hub.processes.items()}
        threading.Thread(target=self.follow_stream, daemon=True).start()
        assert wait_until(lambda: any(e[0] == "ready" for e in self.events), timeout=30), "the event stream did not open"

    def agents_connected(self):
        done = self.nhctl("--json", "health", timeout=30)
        return int(health_row(done.stdout, "nh-dispatch").get("details", {}).get("agents", 0))

    def healthy(self):
        return self.nhctl("health", timeout=30).returncode == 0

    def healthy_on_store(self):
        """Every service answers health, and each with a store reaches its primary."""
        done = self.nhctl("--json", "health", timeout=30)
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        services = [r for r in rows if r.get("service") != "nh-agent"]
        return (len(services) == 5 and all(r.get("status") == "ok" for r in services)
                and all(r.get("details", {}).get("storeRole") == "primary" for r in services if r["service"] != "nh-gateway"))

    def watch_health(self, since, until):
        """The first time from `since` when every service is healthy on its store, polled until `until()`."""
        self.healthy_at = None
        def poll():
            while not until() and self.healthy_at is None:
                began = time.time()
                if self.healthy_on_store():
                    self.healthy_at = began
                time.sleep(0.1)
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        return thread

    def token(self):
        r = requests.post(f"{self.hub.base}/hub/users/tokens", data=json.dumps({"credential": self.credential}), timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["token"]

    def follow_stream(self):
        """The user's event stream, read as a browser's EventSource would, reconnecting from the
        last event id; every event is kept as (name, id, data)."""
        last = None
        while not self.stream_stop.is_set():
            try:
                headers = {"Authorization": f"Bearer {self.token()}", "Accept": "text/event-stream"}
                if last is not None:
                    headers["Last-Event-ID"] = last
                with requests.get(f"{self.hub.base}/hub/users/me/notifications/stream", headers=headers, stream=True, timeout=(5, 30)) as r:
                    if r.status_code == 410:
                        self.events.append(("gone", None, r.text))
                        last = None
                        continue
                    event = {}
                    for raw in r.iter_lines(decode_unicode=True):
                        if self.stream_stop.is_set():
                            return
                        if raw == "":
                            if event.get("event"):
                                self.events.append((event["event"], event.get("id"), event.get("data")))
                                if event.get("id"):
                                    last = event["id"]
                            event = {}
                        elif not raw.startswith(":") and ":" in raw:
                            field, value = raw.split(":", 1)
                            event[field] = value.lstrip(" ")
            except (requests.RequestException, AssertionError):
                pass
            time.sleep(0.5)

    # MARK: sending

    def attempt(self, send):
        """One attempt at a send (with its idempotency key, or its post's app id); the HTTP status."""
        send.attempts += 1
        if send.kind == "broadcast":
            r = requests.post(f"{self.hub.base}/hub/messages?{API}", timeout=30, headers={
                "Authorization": self.hub.token(), "Content-Type": "application/json",
                "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "World",
                "ServiceBusNotification-IdempotencyKey": send.key,
            }, data=json.dumps({"title": "News", "messageParam": send.label}))
            if r.status_code == 201:
                send.id = r.headers["Location"].rsplit("/", 1)[1].split("?")[0]
        else:
            r = requests.post(f"{self.hub.base}/hub/users/{USER}/notifications?{API}", timeout=30,
                              headers={"Authorization": self.hub.token()},
                              data=json.dumps({"appNotificationId": send.key, "visual": {"title": send.label, "body": "b"}}))
            if r.status_code == 201:
                send.id = r.json()["notification"]["id"]
        if send.id:
            send.accepted_at = time.time()
        return r.status_code

    def send(self, send, deadline=20):
        """Sends until the hub accepts, retrying with the same idempotency key (or app id): a send is
        accepted once, whatever failed on its way."""
        stop = time.time() + deadline
        while time.time() < stop:
            try:
                if self.attempt(send) == 201:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.1)
        return False

    def stream(self, label, until):
        """Broadcasts and posts in turn, about four of each a second, until `until()` says stop."""
        n = 0
        while not until():
            for kind in ("broadcast", "post"):
                send = Send(kind, f"{label}-{kind}-{n}")
                self.sends.append(send)
                self.send(send)
            n += 1
            time.sleep(0.2)

    # MARK: what came of it

    def shown(self, name):
        return [line["notificationId"] for line in json_lines(self.outputs[name]) if line.get("notificationId")]

    def created(self, name):
        return [line["id"] for line in json_lines(self.outputs[name]) if line.get("event") == "user.created"]

    @staticmethod
    def states(notifications):
        return {n["id"]: (n["readState"], n["userActionState"]) for n in notifications}

    def device_copy(self, name):
        """A device's copy of its user's notifications: id → (read state, action state)."""
        home = self.homes[name][0]
        with sqlite3.connect(f"file:{os.path.join(home, 'agent.db')}?mode=ro", uri=True, timeout=10) as db:
            return self.states(json.loads(row[0]) for row in db.execute("SELECT document FROM user_cache"))

    def store_history(self):
        """The store's copy: id → (read state, action state)."""
        r = requests.get(f"{self.hub.base}/hub/users/me/notifications/history", headers={"Authorization": f"Bearer {self.token()}"}, timeout=10)
        assert r.status_code == 200, r.text
        return self.states(r.json()["notifications"])

    def agent_command(self, name, *args):
        return subprocess.run([os.path.join(BIN, "nh-agent"), *args], env={**self.hub.env, **self.homes[name][1]},
                              capture_output=True, text=True, timeout=30)

    def stored_broadcasts(self):
        rows = self.pair.current_sql("SELECT notification_id FROM publish.notifications")
        return set(rows.split())

    def outcomes(self):
        rows = self.pair.current_sql("SELECT notification_id, state, targets, delivered, acknowledged, failed, expired FROM dispatch.outcomes")
        result = {}
        for line in rows.splitlines():
            parts = line.split("|")
            result[parts[0]] = (parts[1], *(int(x) for x in parts[2:]))
        return result

    def log(self, service):
        with open(os.path.join(self.hub.data, f"{service}.log"), errors="replace") as f:
            return f.read()

    def metric(self, name, service):
        text = requests.get(f"{self.hub.base}/metrics", headers={"Authorization": self.hub.token()}, timeout=10).text
        match = re.search(rf'^{name}{{service="{service}"}} (\S+)$', text, re.M)
        return float(match.group(1)) if match else None

    def open_inbox(self):
        """The user's inbox page in headless Chromium, signed in and live."""
        from selenium.webdriver.common.by import By
        try:
            self.browser = chromium()
        except BrowserUnavailable as error:
            pytest.fail(str(error))
        self.browser.get(f"{self.hub.base}/inbox")
        self.browser.find_element(By.ID, "credential").send_keys(self.credential)
        self.browser.find_element(By.ID, "signin-button").click()
        assert wait_until(lambda: self.browser.find_element(By.ID, "live").text == "live", timeout=20), "the inbox did not go live"

    def inbox(self):
        """The ids the inbox page lists."""
        from selenium.webdriver.common.by import By
        from selenium.common.exceptions import StaleElementReferenceException
        try:
            return {li.get_attribute("data-id") for li in self.browser.find_elements(By.CSS_SELECTOR, "#list li[data-id]")}
        except StaleElementReferenceException:
            return None

    def stop(self):
        self.stream_stop.set()
        if getattr(self, "browser", None):
            self.browser.quit()
        self.hub.stop_all()


@pytest.mark.parametrize("variant", ["synchronous", "asynchronous-behind", "restart"])
def test_the_store_fails_over_and_nothing_accepted_afterwards_is_skipped(variant):
    try:
        pair = ReplicatedPostgres(synchronous=variant != "asynchronous-behind").start()
    except PostgresUnavailable as error:
        pytest.skip(f"no replicated PostgreSQL here: {error}")
    fleet = FailoverHub(pair)
    try:
        fleet.start()
        health = fleet.nhctl("health").stdout
        assert "standbys: standby1 streaming" in health, health
        assert ("ANY 1 (standby1)" in health) == (variant != "asynchronous-behind"), health
        assert ("standbys are asynchronous" in health) == (variant == "asynchronous-behind"), health

        if variant == "synchronous":
            # While no synchronous standby answers, a send waits for one and is answered 503 when the
            # request times out; once the standby is back its retry, with the same idempotency key,
            # gets the one notification the first attempt became.
            waiting = Send("broadcast", "no-standby")
            fleet.sends.append(waiting)
            pair.pause_standby()
            began = time.time()
            try:
                status = fleet.attempt(waiting)
            finally:
                answered = time.time() - began
                pair.resume_standby()
            assert status == 503, status
            print(f"\n{variant}: with the standby stopped, a send was answered {status} after {answered:.2f} s")
            assert fleet.send(waiting, deadline=30)
            assert fleet.pair.current_sql(f"SELECT count(*) FROM publish.notifications WHERE idempotency_key = '{waiting.key}'") == "1"

        if variant == "asynchronous-behind":
            fleet.open_inbox()

        # A stream of sends through the failover, from another thread.
        moment = {}
        done = threading.Event()
        sender = threading.Thread(target=fleet.stream, args=(variant, done.is_set), daemon=True)
        sender.start()
        time.sleep(2)
        dismissed = None
        if variant == "asynchronous-behind":
            pair.hold_standby_behind()
            # A device dismisses a post the replica has, and the dismiss is lost with the rest.
            dismissed = next(s for s in fleet.sends if s.kind == "post" and s.id)
            done_dismiss = fleet.agent_command("agent-0", "dismiss", dismissed.id)
            assert done_dismiss.returncode == 0, done_dismiss.stderr
            time.sleep(2)
            assert pair.standby_lag_bytes() > 0, "the standby was not behind"
        shown_in_inbox = fleet.inbox() if variant == "asynchronous-behind" else None
        moment["kill"] = time.time()
        pair.kill_primary()
        time.sleep(1)
        health_watch = fleet.watch_health(moment["kill"], done.is_set)
        if variant == "restart":
            pair.restart_primary()
        else:
            pair.promote()
        moment["back"] = time.time()
        # Until a dozen of each kind were accepted after the store came back.
        assert wait_until(lambda: sum(1 for s in fleet.sends if s.accepted_at and s.accepted_at > moment["back"]) >= 24,
                          timeout=90, interval=0.2), fleet.hub.describe("nh-publish")
        done.set()
        sender.join(timeout=60)
        health_watch.join(timeout=30)
        first = min(s.accepted_at for s in fleet.sends if s.accepted_at and s.accepted_at > moment["kill"])
        assert fleet.healthy_at, fleet.nhctl("health").stdout
        print(f"\n{variant}: first send accepted {first - moment['kill']:.2f} s after the kill; every service healthy on "
              f"the store {fleet.healthy_at - moment['kill']:.2f} s after it")

        accepted = [s for s in fleet.sends if s.id]
        assert all(s.id for s in fleet.sends), [s.label for s in fleet.sends if not s.id]
        broadcasts = [s for s in accepted if s.kind == "broadcast"]
        posts = [s for s in accepted if s.kind == "post"]
        stored = fleet.stored_broadcasts()
        lost = [s for s in broadcasts if s.id not in stored]
        after = [s for s in broadcasts if s.accepted_at > moment["back"]]
        if variant == "asynchronous-behind":
            assert lost, "the replica held behind lost no send: the variant tested nothing"
            # A send answered just after the kill may have been committed just before it, on the lost server.
            assert all(s.accepted_at < moment["back"] for s in lost), (
                "a send accepted after the promotion was lost", [(s.label, round(s.accepted_at - moment["back"], 3)) for s in lost])
            print(f"{variant}: lost by nature {len(lost)} broadcasts accepted in the {2:.0f} s before the kill")
        else:
            assert not lost, f"{variant}: {len(lost)} accepted broadcasts are not in the store"
        present = [s for s in broadcasts if s.id in stored]
        assert all(s in present for s in after)

        # Every broadcast of the new history reaches every agent once; nothing is shown twice.
        def all_shown():
            return all({s.id for s in present} <= set(fleet.shown(n)) for n in fleet.outputs)
        assert wait_until(all_shown, timeout=90, interval=0.5), (
            {n: len({s.id for s in present} - set(fleet.shown(n))) for n in fleet.outputs}, fleet.hub.describe("nh-dispatch", 60))
        for name in fleet.outputs:
            shown = fleet.shown(name)
            twice = {i for i in shown if shown.count(i) > 1}
            assert not twice, f"{variant}: {name} showed {len(twice)} notifications twice"

        # Every outcome of the new history adds up.
        def exact():
            outcomes = fleet.outcomes()
            return all(outcomes.get(s.id) == ("Completed", AGENTS, AGENTS, AGENTS, 0, 0) for s in present)
        assert wait_until(exact, timeout=60, interval=0.5), {
            s.label: fleet.outcomes().get(s.id) for s in present if fleet.outcomes().get(s.id) != ("Completed", AGENTS, AGENTS, AGENTS, 0, 0)}
        outcomes = fleet.outcomes()
        assert not [s for s in lost if s.id in outcomes], "a lost send has an outcome in the new history"

        # The devices hold exactly what the store holds, in the same states, and showed each post once.
        history = fleet.store_history()
        lost_posts = [s for s in posts if s.id not in history]
        if variant != "asynchronous-behind":
            assert not lost_posts, f"{variant}: {len(lost_posts)} accepted posts are not in the store"
        assert all(s.id in history for s in posts if s.accepted_at > moment["back"])
        devices = [f"agent-{i}" for i in range(DEVICES)]
        assert wait_until(lambda: all(fleet.device_copy(d) == history for d in devices), timeout=60, interval=0.5), {
            d: {i: (fleet.device_copy(d).get(i), history.get(i)) for i in set(fleet.device_copy(d)) | set(history)
                if fleet.device_copy(d).get(i) != history.get(i)} for d in devices}
        if dismissed:
            assert history[dismissed.id][1] == "noInteraction", "the dismiss made before the kill was not lost: nothing tested"
        for device in devices:
            created = fleet.created(device)
            assert len(created) == len(set(created)), f"{device} showed a post twice"
        if variant == "asynchronous-behind":
            assert lost_posts, "no post was lost: the variant tested nothing"
            # The devices had shown the lost posts, and withdrew them.
            for device in devices:
                withdrawn = {line["id"] for line in json_lines(fleet.outputs[device]) if line.get("event") == "user.deleted"}
                assert {s.id for s in lost_posts} & set(fleet.created(device)) <= withdrawn

        if variant == "asynchronous-behind":
            # The inbox page had shown posts the store lost: it lists what the store holds now.
            assert {s.id for s in lost_posts} & (shown_in_inbox or set()), "the inbox showed none of the posts lost"
            assert wait_until(lambda: fleet.inbox() == set(history), timeout=30, interval=0.5), (
                len((fleet.inbox() or set()) - set(history)), len(set(history) - (fleet.inbox() or set())))

        # The event stream: reset once the history was rewound, with the current state after it.
        names = [e[0] for e in fleet.events]
        if variant == "asynchronous-behind":
            assert wait_until(lambda: "reset" in [e[0] for e in fleet.events] or "gone" in [e[0] for e in fleet.events],
                              timeout=30), names[-20:]
        else:
            assert "reset" not in names and "gone" not in names, names

        # The services said what happened, and counted it.
        for service in ["nh-publish", "nh-sync", "nh-registry", "nh-dispatch"]:
            log = fleet.log(service)
            if variant == "restart":
                assert "history was rewound" not in log, service
            else:
                assert "history was rewound" in log, f"{service} did not report the new history:\n{log[-3000:]}"
                assert fleet.metric("nh_store_history_resets_total", service) == 1, service
        if variant == "asynchronous-behind":
            publish = fleet.log("nh-publish")
            assert re.search(r"lost=\"?publish numbers \d+", publish), publish[-3000:]
            assert re.search(r"lost=\"?user changes \d+", fleet.log("nh-sync")), fleet.log("nh-sync")[-3000:]
        elif variant == "synchronous":
            assert "lost=\"publish numbers none" in fleet.log("nh-publish") or "lost=publish numbers none" in fleet.log("nh-publish")
        assert "plannedAgainAfter" in fleet.log("nh-dispatch")
        for service in ["nh-publish", "nh-sync", "nh-registry", "nh-dispatch"]:
            for line in fleet.log(service).splitlines():
                if "history was rewound" in line or "store session renewed" in line:
                    print(f"{variant}: {service}: " + re.sub(r"^ts=\S+ level=\S+ service=\S+ ", "", line))
        health = fleet.nhctl("health").stdout
        if variant == "restart":
            assert "standbys: standby1" in health, health
        else:
            assert "risk: no standby" in health, health

        # No service was restarted.
        for name, pid in fleet.pids.items():
            process = fleet.hub.processes[name]
            assert process.pid == pid and process.poll() is None, f"{name} is not the process the test started"
    finally:
        fleet.stop()
        pair.stop()
