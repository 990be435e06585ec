"""The sync store on PostgreSQL, shared by two sync processes behind one hub: a user's two devices
each talk to a different one, and the dispatcher follows the first one's change stream. A post
through one and a dismiss through the other reach both devices, and both processes publish every
change, in the same order. Runs on the server NH_TEST_POSTGRES names (`make test` starts a
throwaway one); skipped without it."""
import json
import os
import subprocess
import time

import pytest
import requests
import zmq

from conftest import BIN, free_port, json_lines, needs_postgres, postgres_hub, wait_until

API = "api-version=2015-01"
pytestmark = needs_postgres


@pytest.fixture(scope="module")
def hub():
    hub = postgres_hub("sync")
    yield hub
    hub.stop_all()


class Stream:
    """A subscriber to a sync process's change stream, as the dispatcher is, with the hub's bus keys."""

    def __init__(self, hub, endpoint):
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.curve_publickey, self.socket.curve_secretkey = hub.bus_keys()
        self.socket.curve_serverkey = hub.bus_server_key()
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(endpoint)
        self.changes = []  # (stream sequence, userId, user sequence, origin)
        self.heartbeats = 0

    def read(self):
        while self.socket.poll(0):
            topic, sequence, body = self.socket.recv_multipart()
            if topic == b"~hb":
                self.heartbeats += 1
                continue
            payload = json.loads(body)["payload"]
            self.changes.append((int.from_bytes(sequence, "big"), payload["userId"], payload["sequence"], payload.get("origin")))
        return self


def nhctl(hub, *arguments, env=None):
    return subprocess.run([os.path.join(BIN, "nhctl"), *arguments], env={**hub.env, **(env or {})},
                          capture_output=True, text=True, timeout=30)


def start_device(hub, name, credential, env=None):
    """An agent signed in as a user, with a control socket of its own; its output and environment."""
    output = os.path.join(hub.data, f"{name}.jsonl")
    device = {"NH_AGENT_HOME": os.path.join(hub.data, name), "NH_AGENT_INSTALLATION_ID": name,
              "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", "NH_AGENT_USER_CREDENTIAL": credential, **(env or {})}
    hub.start(name, "nh-agent", env=device, stdout=open(output, "ab"))
    return {"name": name, "output": output, "env": {**hub.env, **device}}


def state(device, notification):
    """The notification as the device's output last showed it: a dict, "deleted", or None."""
    latest = None
    for line in json_lines(device["output"]):
        if line.get("id") == notification:
            if line.get("event") == "user.deleted":
                latest = "deleted"
            elif line.get("event") in ("user.created", "user.updated"):
                latest = line["notification"]
    return latest


def agents(hub):
    try:
        return requests.get(f"{hub.base}/metrics", timeout=5).text.count('nh_agents{service="nh-dispatch"} 2') == 1
    except requests.RequestException:
        return False


def test_a_post_through_one_sync_and_a_dismiss_through_the_other_reach_both_devices(hub):
    streams = [Stream(hub, hub.endpoint("SYNC", "EVENTS")), Stream(hub, hub.second["NH_SYNC_EVENTS"])]
    # Subscribed once a heartbeat has come through from each.
    assert wait_until(lambda: all(s.read().heartbeats > 0 for s in streams), timeout=20)

    result = nhctl(hub, "user", "credential", "pat")
    assert result.returncode == 0, result.stderr
    credential = result.stdout.strip()
    first = start_device(hub, "pat-first", credential)
    second = start_device(hub, "pat-second", credential, env={"NH_SYNC_REQUESTS": hub.second["NH_SYNC_REQUESTS"]})
    assert wait_until(lambda: agents(hub), timeout=30), "both devices connect to the dispatcher"

    # Posted through the first sync (the hub's publish service forwards to it): both devices show it.
    r = requests.post(f"{hub.base}/hub/users/pat/notifications?{API}", headers={"Authorization": hub.token()},
                      data=json.dumps({"appNotificationId": "order-1", "visual": {"title": "Order shipped", "body": "On its way"}}))
    assert r.status_code == 201, r.text
    notification = r.json()["notification"]["id"]
    assert wait_until(lambda: isinstance(state(first, notification), dict) and isinstance(state(second, notification), dict), timeout=20)

    # Dismissed on the second device, through the second sync: the first sync publishes that change
    # too, so the dispatcher, which follows the first, signals the first device, which reads it there.
    result = subprocess.run([os.path.join(BIN, "nh-agent"), "dismiss", notification], env=second["env"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert wait_until(lambda: (state(first, notification) or {}).get("userActionState") == "dismissed", timeout=20)
    assert (state(second, notification) or {}).get("userActionState") == "dismissed"
    # Either sync reads what the other wrote.
    for env in ({}, {"NH_SYNC_REQUESTS": hub.second["NH_SYNC_REQUESTS"]}):
        listed = nhctl(hub, "user", "list", "pat", env=env)
        assert listed.returncode == 0 and notification in listed.stdout and "dismissed" in listed.stdout, listed.stdout + listed.stderr

    # Deleted on the first device, through the first sync: the second device, which reads from the
    # second sync, sees the delete.
    result = subprocess.run([os.path.join(BIN, "nh-agent"), "delete", notification], env=first["env"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert wait_until(lambda: state(second, notification) == "deleted", timeout=20)

    # Both processes published every change, their own and the other's, under the same numbers, in order.
    def pat(stream):
        return [change for change in stream.read().changes if change[1] == "pat"]
    assert wait_until(lambda: all(len(pat(s)) >= 3 for s in streams), timeout=20)
    time.sleep(0.5)
    changes = [pat(s) for s in streams]
    assert changes[0] == changes[1], changes
    assert [c[2] for c in changes[0]] == [1, 2, 3], "the user's sequence: post, dismiss, delete"
    assert [c[3] for c in changes[0]] == [None, "pat-second", "pat-first"], "each change names the device that made it"
    sequences = [c[0] for c in changes[0]]
    assert sequences == sorted(sequences) and len(set(sequences)) == 3
