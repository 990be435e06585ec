"""A Matrix chat reaching a Linux app through the hub, as Matrix clients that use UnifiedPush
(Element, FluffyChat, NeoChat) are reached. A real homeserver (Synapse, from PyPI, in a venv of its
own: Tests/Support/synapse.py) with two users in a room; bob's app is a GDBus connector (as a GTK
client's) registered with the agent on a private session bus, and bob's pusher names the hub's
gateway (`/_matrix/push/v1/notify`) with the app's endpoint as its pushkey.

- each of alice's messages reaches bob's app as the notification Synapse posted: its event id, its
  text, the pushkey; and the time from the message sent to the app is printed;
- once bob's app is unregistered, the gateway answers the pushkey `rejected`, and Synapse removes
  the pusher.

Skipped, with the reason, only where Synapse's venv, dbus-daemon or the GDBus connector's python3-gi
cannot be had."""
import base64
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

import synapse  # noqa: E402
import unifiedpush  # noqa: E402
from hubharness import BIN, Hub, agent_health, wait_until  # noqa: E402

MISSING = synapse.missing() + unifiedpush.missing() + [m for m in [unifiedpush.gdbus_missing()] if m]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"cannot run Matrix here: missing {', '.join(MISSING)}")

AGENT = "matrix-device"


class Chat:
    """The hub, bob's device (agent and app), and a homeserver with alice and bob in one room."""

    def __init__(self):
        self.hub = Hub(prefix="nh-matrix-")
        self.bus = self.server = None
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        assert self.hub.start_services()
        self.bus = unifiedpush.SessionBus(root=self.hub.data)
        self.agent_env = {"NH_AGENT_HOME": os.path.join(self.hub.data, AGENT), "NH_AGENT_INSTALLATION_ID": AGENT,
                          "NH_AGENT_DESKTOP": "0", **self.bus.env}
        self.hub.start(AGENT, "nh-agent", env=self.agent_env)
        assert wait_until(lambda: self.health().get("unifiedpush", "").startswith("serving")
                          and self.health().get("dispatcherWelcomed") == "true", timeout=60), self.hub.describe(AGENT)
        self.app = self.bus.app(f"org.example.Chat{uuid.uuid4().hex[:8]}", stack="gdbus")
        answer = self.app.register(str(uuid.uuid4()), description="bob@hub.test")
        assert answer.get("success") == "REGISTRATION_SUCCEEDED", answer
        self.endpoint = self.app.wait_for("NewEndpoint")["endpoint"]
        self.server = synapse.Synapse(os.path.join(self.hub.data, "synapse"))
        _, self.alice = self.server.register("alice", "secret-a")
        self.bob_id, self.bob = self.server.register("bob", "secret-b")
        self.room = self.server.create_room(self.alice, invite=[self.bob_id])
        self.server.join(self.bob, self.room)
        self.server.set_pusher(self.bob, self.endpoint, self.hub.base)

    def health(self):
        return agent_health({**self.hub.env, **self.agent_env}) or {}

    def stop(self):
        if self.server:
            self.server.stop()
        if self.bus:
            self.bus.stop()
        self.hub.stop_all()


@pytest.fixture(scope="module")
def chat():
    c = Chat()
    yield c
    c.stop()


def test_a_room_message_reaches_the_app(chat):
    sent = []
    for i in range(10):
        at = time.time()
        sent.append((chat.server.send(chat.alice, chat.room, f"message {i} über"), at))
        chat.app.wait_for("Message", count=i + 1, timeout=30)
    messages = chat.app.events("Message")
    assert len(messages) == 10
    latencies = []
    for (event_id, at), message in zip(sent, messages):
        notification = json.loads(base64.b64decode(message["message"]))["notification"]
        assert notification["event_id"] == event_id and notification["room_id"] == chat.room
        assert notification["content"]["body"].endswith(" über") and notification["sender"].startswith("@alice:")
        assert [d["pushkey"] for d in notification["devices"]] == [chat.endpoint]
        latencies.append((message["at"] - at) * 1000)
    print(f"\nMatrix message to app: median {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms, "
          f"over {len(latencies)} messages")
    time.sleep(1)
    assert len(chat.app.events("Message")) == 10, "each message once"


def test_a_gone_app_has_its_pusher_removed(chat):
    assert chat.server.pushers(chat.bob)
    done = subprocess.run([os.path.join(BIN, "nh-agent"), "apps", "remove", chat.endpoint], env={**chat.hub.env, **chat.agent_env},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    before = len(chat.app.events("Message"))
    chat.server.send(chat.alice, chat.room, "to nobody")
    assert wait_until(lambda: not chat.server.pushers(chat.bob), timeout=30), chat.server.log_tail()
    time.sleep(0.5)
    assert len(chat.app.events("Message")) == before
