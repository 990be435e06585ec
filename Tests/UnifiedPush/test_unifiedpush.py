"""UnifiedPush as an app and its server meet it. One hub; an agent on a private session bus
(dbus-daemon from Debian) is the distributor; each app is a real connector process on that bus,
written with one of two D-Bus stacks: jeepney (Tests/Support/upconnector.py) and GLib's GDBus
(Tests/Support/gdbusconnector.py, python3-gi), as a GTK app's; each application server is pywebpush, a real Web Push
server that encrypts (RFC 8291) and signs (VAPID, RFC 8292). What the app gets is decrypted with
its own keys (http_ece) and compared byte for byte.

- register (Distributor2 with a VAPID key, and Distributor1): NewEndpoint, and `nh-agent apps`;
- each registration's endpoint is the gateway's address and a secret alone, linking apps to nothing;
- each message at least once under a stable id, across a SIGKILL of the agent mid-stream;
- the Matrix push gateway: a notification to each device's pushkey, `rejected` for others;
- a push: 201 with Location and TTL, the Message to the app, decrypted; the outcome, /metrics;
- refusals: unknown and unregistered endpoints 410, oversize 413, no or the wrong VAPID key
  401/403, bad TTL, Urgency and Topic 400;
- the agent offline, then back: each message once, and of two with one Topic only the newer;
- the agent not running: a registration starts it through the bus, from the distributor's service
  file (deploy/dbus);
- an app not running: started by D-Bus activation; an app that cannot be started: kept, and given
  on its next Register;
- 1,000 messages to one app: each once, in order;
- the endpoint still works after the gateway, dispatcher, registry, publish service and agent restart;
- Unregister and `nh-agent apps remove`: Unregistered, then 410.

Skipped, with the reason, only where dbus-daemon, jeepney, pywebpush or http_ece cannot be had."""
import base64
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

import unifiedpush  # noqa: E402
from hubharness import BIN, ROOT, Hub, free_port, wait_until  # noqa: E402

pytestmark = pytest.mark.skipif(bool(unifiedpush.missing()), reason=f"cannot run UnifiedPush here: missing {', '.join(unifiedpush.missing())}")

AGENT = "up-device"
# The D-Bus stacks the apps are written with; GDBus where Debian's python3-gi is there.
STACKS = ["jeepney", pytest.param("gdbus", marks=pytest.mark.skipif(bool(unifiedpush.gdbus_missing()),
                                                                    reason=str(unifiedpush.gdbus_missing())))]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Keys:
    """An app's subscription keys (what it decrypts with) and its server's VAPID key pair."""

    def __init__(self):
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        from py_vapid import Vapid
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.p256dh = b64url(self.private.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))
        self.auth = os.urandom(16)
        self.vapid = Vapid()
        self.vapid.generate_keys()
        self.vapid_public = b64url(self.vapid.public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))

    def subscription(self, endpoint):
        return {"endpoint": endpoint, "keys": {"p256dh": self.p256dh, "auth": b64url(self.auth)}}

    def push(self, endpoint, data, vapid=True, ttl=60, headers=None):
        """pywebpush's POST; the response whatever its status."""
        from pywebpush import WebPushException, webpush
        try:
            return webpush(self.subscription(endpoint), data, vapid_private_key=self.vapid if vapid else None,
                           vapid_claims={"sub": "mailto:ops@example.org"} if vapid else None,
                           ttl=0 if "TTL" in (headers or {}) else ttl, headers=headers or {},
                           content_encoding="aes128gcm", timeout=30)
        except WebPushException as error:
            return error.response

    def decrypt(self, body):
        import http_ece
        return http_ece.decrypt(body, private_key=self.private, auth_secret=self.auth, version="aes128gcm")


class Setup:
    def __init__(self):
        self.hub = Hub(prefix="nh-up-", settings={"NH_LIMITS_PUSHES_PER_SECOND_PER_ENDPOINT": "5000"})
        self.bus = None
        try:
            self._start()
        except BaseException:
            # What started is ended, by its process id, even when the setup does not finish.
            self.stop()
            raise

    def _start(self):
        assert self.hub.start_services()
        self.bus = unifiedpush.SessionBus(root=self.hub.data)
        # The device's power supplies, as the kernel shows them: on mains power to begin with.
        self.power = os.path.join(self.hub.data, "power_supply")
        self.set_power(mains=True)
        self.agent_env = {"NH_AGENT_HOME": os.path.join(self.hub.data, AGENT), "NH_AGENT_INSTALLATION_ID": AGENT,
                          "NH_AGENT_DESKTOP": "0", "NH_AGENT_POWER_SUPPLY": self.power, **self.bus.env}
        self.start_agent()

    def set_power(self, mains, battery=80):
        for name, files in [("AC", {"type": "Mains", "online": "1" if mains else "0"}),
                            ("BAT0", {"type": "Battery", "status": "Charging" if mains else "Discharging", "capacity": str(battery)})]:
            os.makedirs(os.path.join(self.power, name), exist_ok=True)
            for key, value in files.items():
                with open(os.path.join(self.power, name, key), "w") as f:
                    f.write(value + "\n")

    def start_agent(self):
        self.hub.start(AGENT, "nh-agent", env=self.agent_env)
        assert wait_until(lambda: (self.health() or {}).get("unifiedpush", "").startswith("serving"), timeout=60), \
            (self.health(), self.hub.describe(AGENT))
        assert wait_until(lambda: (self.health() or {}).get("dispatcherWelcomed") == "true", timeout=60), \
            (self.health(), self.hub.describe(AGENT))

    def agent(self, *arguments, check=True):
        done = subprocess.run([os.path.join(BIN, "nh-agent"), *arguments], env={**self.hub.env, **self.agent_env},
                              capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def health(self):
        done = self.agent("health", check=False)
        return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line) if done.returncode in (0, 1) else None

    def app(self, v1=False, keys=True, running=True, stack="jeepney"):
        service = f"org.example.App{uuid.uuid4().hex[:8]}"
        app = self.bus.app(service, v1=v1, stack=stack) if running else self.bus.activatable(service, v1=v1, stack=stack)
        app.keys = Keys() if keys else None
        app.token = str(uuid.uuid4())
        return app

    def register(self, app, vapid=True):
        answer = app.register(app.token, vapid=app.keys.vapid_public if vapid and app.keys else None, description="alice@example.org")
        success = answer.get("success")
        assert success in ("REGISTRATION_SUCCEEDED", "NEW_ENDPOINT"), answer
        endpoint = app.wait_for("NewEndpoint")["endpoint"]
        assert endpoint.startswith(self.hub.base + "/up/"), endpoint
        return endpoint

    def outcome(self, location):
        response = requests.get(location, params={"api-version": "2015-04"},
                                headers={"Authorization": self.hub.token(resource=location.split("?")[0])}, timeout=10)
        return response

    def stop(self):
        if self.bus:
            self.bus.stop()
        self.hub.stop_all()


@pytest.fixture(scope="module")
def setup():
    s = Setup()
    yield s
    s.stop()


@pytest.mark.parametrize("stack", STACKS)
def test_register_push_and_decrypt(setup, stack):
    app = setup.app(stack=stack)
    endpoint = setup.register(app)
    assert requests.get(endpoint, timeout=10).json() == {"unifiedpush": {"version": 1}}
    assert requests.get(setup.hub.base + "/up", timeout=10).json() == {"unifiedpush": {"version": 1}}
    listed = setup.agent("apps").stdout
    assert app.service in listed and endpoint in listed and "VAPID" in listed, listed

    data = os.urandom(1000) + "über".encode()
    response = app.keys.push(endpoint, data, ttl=120, headers={"Urgency": "high"})
    assert response.status_code == 201, response.text
    assert response.headers["TTL"] == "120"
    location = response.headers["Location"]
    message = app.wait_for("Message")
    assert app.keys.decrypt(base64.b64decode(message["message"])) == data
    assert message["token"] == app.token and message["id"]

    # Counted: the notification's outcome says acknowledged once it is, and /metrics counts the push.
    def acknowledged():
        reply = setup.outcome(location)
        return (reply.status_code == 200 and "<State>Completed</State>" in reply.text
                and "<Name>Success</Name><Count>1</Count>" in reply.text)
    assert wait_until(acknowledged, timeout=20), setup.outcome(location).text
    metrics = requests.get(setup.hub.base + "/metrics", timeout=10).text
    assert 'nh_push_endpoint_requests_total{service="nh-gateway",status="201"}' in metrics
    time.sleep(1)
    assert len(app.events("Message")) == 1


@pytest.mark.parametrize("stack", STACKS)
def test_endpoints_link_apps_to_nothing(setup, stack):
    """Each registration's endpoint is the gateway's address and a random secret alone: two apps of
    one device share nothing else, and an app registered again keeps its endpoint. An endpoint given
    in the earlier form, which named the installation, still reaches its app."""
    first, second = setup.app(stack=stack), setup.app(stack=stack)
    one, two = setup.register(first), setup.register(second)
    for endpoint in (one, two):
        path = endpoint[len(setup.hub.base):]
        assert path.count("/") == 2 and path.startswith("/up/"), endpoint
        assert AGENT not in endpoint and "linux" not in endpoint, endpoint
    assert one.rsplit("/", 1)[1] != two.rsplit("/", 1)[1]
    first.register(first.token, vapid=first.keys.vapid_public)
    assert wait_until(lambda: len(first.events("NewEndpoint")) == 2, timeout=10)
    assert first.events("NewEndpoint")[-1]["endpoint"] == one
    earlier = f"{setup.hub.base}/up/{AGENT}/{one.rsplit('/', 1)[1]}"
    assert first.keys.push(earlier, b"by the earlier form").status_code == 201
    assert first.keys.decrypt(base64.b64decode(first.wait_for("Message")["message"])) == b"by the earlier form"
    assert first.keys.push(one, b"by the endpoint").status_code == 201
    assert wait_until(lambda: len(first.events("Message")) == 2, timeout=20)
    assert not second.events("Message")
    assert setup.agent("apps", "remove", earlier).returncode == 0
    assert wait_until(lambda: requests.post(one, data=b"x", timeout=10).status_code == 410, timeout=10)


def test_matrix_gateway_forwards_to_the_endpoint(setup):
    """/_matrix/push/v1/notify as the Matrix push gateway API defines it: each device's notification
    goes to its pushkey, the app's endpoint, as the bytes the homeserver posted; pushkeys that are
    not endpoints here, or are gone, come back in `rejected`; bad bodies get Matrix errors."""
    gateway = f"{setup.hub.base}/_matrix/push/v1/notify"
    assert requests.get(gateway, timeout=10).json() == {"unifiedpush": {"gateway": "matrix"}}
    app = setup.app()
    endpoint = setup.register(app, vapid=False)
    gone = setup.register(setup.app(), vapid=False)
    assert setup.agent("apps", "remove", gone).returncode == 0
    notification = {"notification": {"event_id": "$e1", "room_id": "!r:hub.test", "type": "m.room.message", "sender": "@a:hub.test",
                                     "content": {"msgtype": "m.text", "body": "hello über"}, "prio": "high", "counts": {"unread": 1},
                                     "devices": [{"app_id": "org.example.chat", "pushkey": endpoint, "pushkey_ts": 1, "data": {}}]}}
    body = json.dumps(notification).encode()
    answer = requests.post(gateway, data=body, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"rejected": []}, answer.text
    assert base64.b64decode(app.wait_for("Message")["message"]) == body
    # Two devices in one request: each gets the notification narrowed to itself; others rejected.
    strangers = ["https://elsewhere.example/up/x", f"{setup.hub.base}/up/never-given", gone]
    notification["notification"]["devices"] = [{"app_id": "a", "pushkey": key} for key in [endpoint, *strangers]]
    answer = requests.post(gateway, json=notification, timeout=10)
    assert answer.status_code == 200 and sorted(answer.json()["rejected"]) == sorted(strangers), answer.text
    second = json.loads(base64.b64decode(app.wait_for("Message", count=2)["message"]))
    assert second["notification"]["devices"] == [{"app_id": "a", "pushkey": endpoint}]
    assert second["notification"]["content"]["body"] == "hello über"
    # Over a push message's 4,096 bytes: the event's content stays behind, the ids go.
    notification["notification"]["devices"] = [{"app_id": "a", "pushkey": endpoint}]
    notification["notification"]["content"]["body"] = "x" * 5000
    assert requests.post(gateway, json=notification, timeout=10).json() == {"rejected": []}
    third = json.loads(base64.b64decode(app.wait_for("Message", count=3)["message"]))
    assert third["notification"]["event_id"] == "$e1" and "content" not in third["notification"]
    for bad, code in ((b"not json", "M_NOT_JSON"), (b"[]", "M_BAD_JSON"), (b'{"notification":{"devices":[]}}', "M_BAD_JSON")):
        refused = requests.post(gateway, data=bad, timeout=10)
        assert refused.status_code == 400 and refused.json()["errcode"] == code, refused.text
    time.sleep(0.5)
    assert len(app.events("Message")) == 3


def test_connector_v1(setup):
    app = setup.app(v1=True)
    endpoint = setup.register(app, vapid=False)
    response = app.keys.push(endpoint, b"over Connector1", vapid=False)
    assert response.status_code == 201, response.text
    message = app.wait_for("Message")
    assert app.keys.decrypt(base64.b64decode(message["message"])) == b"over Connector1"


@pytest.mark.parametrize("stack", STACKS)
def test_refusals(setup, stack):
    app = setup.app(stack=stack)
    # A Register whose arguments do not follow the spec fails as the spec says a registration fails.
    bad = app.register(app.token, vapid="not-a-key")
    assert bad.get("success") == "REGISTRATION_FAILED" and bad.get("reason") == "INTERNAL_ERROR" and "vapid" in bad.get("message", ""), bad
    if stack == "gdbus":
        for fields, word in [({"service": ["s", "not a bus name"], "token": ["s", "t"]}, "service"),
                             ({"service": ["s", app.service]}, "token"),
                             ({"service": ["s", app.service], "token": ["s", "x" * 101]}, "token"),
                             ({"service": ["s", app.service], "token": ["s", "t"], "description": ["s", "d" * 101]}, "description")]:
            answer = app.register_raw(fields)
            assert answer.get("success") == "REGISTRATION_FAILED" and word in answer.get("message", ""), (fields, answer)
    endpoint = setup.register(app)
    # Unknown endpoints: another secret, another installation, a malformed path.
    assert requests.post(endpoint[:-4] + "AAAA", data=b"x", timeout=10).status_code == 410
    assert requests.post(f"{setup.hub.base}/up/nobody/{endpoint.rsplit('/', 1)[1]}", data=b"x", timeout=10).status_code == 410
    assert requests.post(f"{setup.hub.base}/up/an-unknown-secret", data=b"x", timeout=10).status_code == 410
    assert requests.post(f"{setup.hub.base}/up/a/b/c/d", data=b"x", timeout=10).status_code == 404
    # 4,096 bytes of body pass the size check (and are refused for their missing signature); 4,097 do not.
    assert requests.post(endpoint, data=b"x" * 4096, headers={"TTL": "60"}, timeout=10).status_code == 401
    too_big = requests.post(endpoint, data=b"x" * 4097, headers={"TTL": "60"}, timeout=10)
    assert too_big.status_code == 413 and too_big.json()["error"] == "payload_too_large"
    # The older draft's aesgcm: its keys would travel in headers the app never gets.
    draft = requests.post(endpoint, data=b"x" * 64, headers={"TTL": "60", "Content-Encoding": "aesgcm"}, timeout=10)
    assert draft.status_code == 415 and "aes128gcm" in draft.json()["message"], draft.text
    # VAPID: none, and another server's key.
    unsigned = app.keys.push(endpoint, b"hello", vapid=False)
    assert unsigned.status_code == 401, unsigned.text
    stranger = Keys()
    stranger.p256dh, stranger.auth = app.keys.p256dh, app.keys.auth
    forged = stranger.push(endpoint, b"hello")
    assert forged.status_code == 403 and "another VAPID key" in forged.text
    for headers, what in [({"TTL": "soon"}, "TTL"), ({"TTL": "60", "Urgency": "urgent"}, "Urgency"),
                          ({"TTL": "60", "Topic": "not a topic!"}, "Topic")]:
        refused = app.keys.push(endpoint, b"hello", headers=headers)
        assert refused.status_code == 400 and what in refused.json()["message"], refused.text
    time.sleep(1)
    assert app.events("Message") == []


def test_offline_agent_and_topics(setup):
    app = setup.app()
    endpoint = setup.register(app)
    setup.hub.stop(AGENT)
    first = app.keys.push(endpoint, b"plain")
    old = app.keys.push(endpoint, b"score 1-0", headers={"Topic": "score"})
    new = app.keys.push(endpoint, b"score 2-0", headers={"Topic": "score"})
    assert [r.status_code for r in (first, old, new)] == [201, 201, 201]
    setup.start_agent()
    app.wait_for("Message", count=2)
    time.sleep(2)
    got = [app.keys.decrypt(m) for m in app.messages()]
    assert got == [b"plain", b"score 2-0"], got


def test_urgency_follows_the_power_supply(setup):
    app = setup.app()
    endpoint = setup.register(app)
    try:
        setup.set_power(mains=False, battery=50)
        assert wait_until(lambda: setup.health().get("unifiedpushMinimumUrgency") == "low", timeout=10), setup.health()
        for data, urgency in [(b"advert", "very-low"), (b"topic update", "low"), (b"chat", "normal")]:
            assert app.keys.push(endpoint, data, headers={"TTL": "600", "Urgency": urgency}).status_code == 201
        app.wait_for("Message", count=2)
        setup.set_power(mains=False, battery=10)
        assert wait_until(lambda: setup.health().get("unifiedpushMinimumUrgency") == "high", timeout=10), setup.health()
        assert app.keys.push(endpoint, b"later", headers={"TTL": "600", "Urgency": "normal"}).status_code == 201
        assert app.keys.push(endpoint, b"call", headers={"TTL": "600", "Urgency": "high"}).status_code == 201
        app.wait_for("Message", count=3)
        time.sleep(1.5)
        assert [app.keys.decrypt(m) for m in app.messages()] == [b"topic update", b"chat", b"call"]
    finally:
        setup.set_power(mains=True)
    # Back on mains power: what was kept goes, in the order it came.
    app.wait_for("Message", count=5)
    assert [app.keys.decrypt(m) for m in app.messages()][3:] == [b"advert", b"later"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_registration_starts_the_agent_through_the_bus(setup, stack):
    """An app that registers while no agent runs gets its endpoint and its messages: the session bus
    starts the agent from the service file the nh-agent package installs. Here the bus has no systemd
    manager, so it runs Exec, pointed at the built agent with this hub's settings."""
    shipped = open(os.path.join(ROOT, "deploy", "dbus", "org.unifiedpush.Distributor.nh.service")).read()
    assert "Name=org.unifiedpush.Distributor.nh" in shipped and "SystemdService=nh-agent.service" in shipped
    bus = unifiedpush.SessionBus(root=setup.hub.data)
    pidfile = os.path.join(bus.dir, "agent.pid")
    env = {**setup.hub.env, "NH_AGENT_HOME": os.path.join(bus.dir, "agent"), "NH_AGENT_INSTALLATION_ID": f"up-activated-{stack}",
           "NH_AGENT_DESKTOP": "0", "NH_AGENT_POWER_SUPPLY": setup.power,
           "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", **bus.env}
    wrapper = os.path.join(bus.dir, "nh-agent")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\necho $$ > {shlex.quote(pidfile)}\n"
                f"exec env {' '.join(shlex.quote(f'{k}={v}') for k, v in env.items())} {shlex.quote(os.path.join(BIN, 'nh-agent'))} "
                f">> {shlex.quote(os.path.join(bus.dir, 'agent.log'))} 2>&1\n")
    os.chmod(wrapper, 0o755)
    with open(os.path.join(bus.services, "org.unifiedpush.Distributor.nh.service"), "w") as f:
        f.write(shipped.replace("Exec=/usr/bin/nh-agent", f"Exec={wrapper}"))
    try:
        app = bus.app(f"org.example.Activated{uuid.uuid4().hex[:8]}", stack=stack)
        app.keys, app.token = Keys(), str(uuid.uuid4())
        answer = app.register(app.token, vapid=app.keys.vapid_public)
        assert answer.get("success") == "REGISTRATION_SUCCEEDED", answer
        assert os.path.exists(pidfile), "the bus started the agent"
        endpoint = app.wait_for("NewEndpoint", timeout=60)["endpoint"]
        assert app.keys.push(endpoint, b"started by the bus").status_code == 201
        message = app.wait_for("Message", timeout=60)
        assert app.keys.decrypt(base64.b64decode(message["message"])) == b"started by the bus"
    finally:
        if os.path.exists(pidfile):
            pid = int(open(pidfile).read())
            try:
                os.kill(pid, signal.SIGTERM)
                assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                                  timeout=20)
            except ProcessLookupError:
                pass
        bus.stop()


def test_activation_and_an_app_that_cannot_start(setup):
    # Registered while running, then it exits: the bus starts it again for the message.
    app = setup.app(running=False)
    app.start()
    endpoint = setup.register(app)
    app.stop()
    assert app.keys.push(endpoint, b"wake up").status_code == 201
    message = app.wait_for("Message", timeout=60)
    assert app.keys.decrypt(base64.b64decode(message["message"])) == b"wake up"
    assert message["pid"] != app.events("ready")[0]["pid"], "the message came to a connector started by the bus"

    # No .service file: it cannot be started, so the agent keeps what comes until it registers again.
    gone = setup.app()
    endpoint = setup.register(gone)
    gone.stop()
    for i in range(3):
        assert gone.keys.push(endpoint, f"kept {i}".encode()).status_code == 201
    assert wait_until(lambda: f"{gone.service}" in setup.agent("apps").stdout and "3 waiting" in setup.agent("apps").stdout, timeout=30), \
        setup.agent("apps").stdout
    gone.start()
    setup.register(gone)
    gone.wait_for("Message", count=3)
    time.sleep(1)
    assert [gone.keys.decrypt(m) for m in gone.messages()] == [b"kept 0", b"kept 1", b"kept 2"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_kill_mid_stream_repeats_a_message_only_under_its_id(setup, stack):
    """At least once, under a stable id: the agent killed (SIGKILL) while it hands 300 messages
    over; once it is back, every message has reached the app, and any that came twice came under the
    id it had the first time, as the README promises."""
    app = setup.app(keys=True, stack=stack)
    endpoint = setup.register(app, vapid=False)
    session = requests.Session()
    for i in range(300):
        assert session.post(endpoint, data=f"k{i:03d}".encode(), headers={"TTL": "600"}, timeout=30).status_code == 201
        if i == 100:
            assert wait_until(lambda: len(app.events("Message")) >= 20, timeout=30)
            setup.hub.kill(AGENT)
    setup.start_agent()
    app.wait_for("Message", count=300, timeout=120)
    time.sleep(1)
    ids = {}
    for event in app.events("Message"):
        ids.setdefault(base64.b64decode(event["message"]).decode(), set()).add(event["id"])
    assert sorted(ids) == [f"k{i:03d}" for i in range(300)], f"{300 - len(ids)} missing"
    assert all(len(seen) == 1 for seen in ids.values()), {m: seen for m, seen in ids.items() if len(seen) > 1}
    assert len(set().union(*ids.values())) == 300
    print(f"\n{len(app.events('Message')) - 300} repeats of 300 after a SIGKILL")


def test_thousand_messages_in_order(setup):
    app = setup.app(keys=True)
    endpoint = setup.register(app, vapid=False)
    session = requests.Session()
    for i in range(1000):
        response = session.post(endpoint, data=f"m{i:04d}".encode(), headers={"TTL": "600"}, timeout=30)
        assert response.status_code == 201, response.text
    app.wait_for("Message", count=1000, timeout=120)
    time.sleep(2)
    got = [m.decode() for m in app.messages()]
    assert got == [f"m{i:04d}" for i in range(1000)], (len(got), len(set(got)))


def test_endpoint_survives_restarts(setup):
    app = setup.app()
    endpoint = setup.register(app)
    for name in ["nh-gateway", "nh-dispatch", "nh-registry", "nh-publish"]:
        setup.hub.stop(name)
        setup.hub.start(name)
    setup.hub.stop(AGENT)
    setup.start_agent()
    assert wait_until(lambda: requests.get(endpoint, timeout=5).status_code == 200, timeout=30)
    response = app.keys.push(endpoint, b"after restarts")
    assert response.status_code == 201, response.text
    assert app.keys.decrypt(base64.b64decode(app.wait_for("Message")["message"])) == b"after restarts"
    # Registering again with the same token keeps the endpoint.
    app.register(app.token, vapid=app.keys.vapid_public)
    assert app.wait_for("NewEndpoint", count=2)["endpoint"] == endpoint


def test_unregister_then_gone(setup):
    app = setup.app()
    endpoint = setup.register(app)
    app.unregister(app.token)
    app.wait_for("Unregistered")
    assert wait_until(lambda: app.keys.push(endpoint, b"late").status_code == 410, timeout=10)
    assert app.service not in setup.agent("apps").stdout

    other = setup.app()
    endpoint = setup.register(other)
    removed = setup.agent("apps", "remove", other.service)
    assert "410" in removed.stdout
    other.wait_for("Unregistered")
    assert other.keys.push(endpoint, b"late").status_code == 410
    refused = setup.agent("apps", "remove", "org.example.Nobody", check=False)
    assert refused.returncode == 2 and "no app" in refused.stderr


def test_an_endpoint_reaches_its_own_hubs_installation_alone(setup):
    """A second hub with an agent of the same installation id, on a desktop of its own: its app's
    endpoint names its hub, a push reaches that app, and the endpoint's secret under the other hub's
    installation of the same id is gone (410), both ways."""
    made = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "hub", "keys", "up-b"], env=setup.hub.env, capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        made = subprocess.run([os.path.join(BIN, "nhctl"), "hub", "create", "up-b"], env=setup.hub.env, capture_output=True, text=True, timeout=30)
        assert made.returncode == 0, made.stderr
        made = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "hub", "keys", "up-b"], env=setup.hub.env, capture_output=True, text=True, timeout=30)
    listen = next(json.loads(line) for line in made.stdout.splitlines() if json.loads(line)["keyName"] == "DefaultListenSharedAccessSignature")
    bus = unifiedpush.SessionBus(root=setup.hub.data)
    try:
        env = {"NH_AGENT_HOME": os.path.join(setup.hub.data, "up-b-agent"), "NH_AGENT_INSTALLATION_ID": AGENT, "NH_AGENT_DESKTOP": "0",
               "NH_AGENT_POWER_SUPPLY": setup.power, "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}",
               "NH_AGENT_CONNECTION_STRING": listen["primaryConnectionString"], **bus.env}
        setup.hub.start("up-b-agent", "nh-agent", env=env)

        def serving():
            done = subprocess.run([os.path.join(BIN, "nh-agent"), "health"], env={**setup.hub.env, **env}, capture_output=True, text=True, timeout=30)
            fields = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
            return fields.get("unifiedpush", "").startswith("serving") and fields.get("dispatcherWelcomed") == "true"
        assert wait_until(serving, timeout=60), setup.hub.describe("up-b-agent")

        theirs = bus.app(f"org.example.B{uuid.uuid4().hex[:8]}")
        theirs.keys, theirs.token = Keys(), str(uuid.uuid4())
        answer = theirs.register(theirs.token, vapid=theirs.keys.vapid_public)
        assert answer.get("success") in ("REGISTRATION_SUCCEEDED", "NEW_ENDPOINT"), answer
        their_endpoint = theirs.wait_for("NewEndpoint")["endpoint"]
        # The endpoint names neither the hub nor the installation: the registry finds both by its secret.
        assert "up-b" not in their_endpoint[len(setup.hub.base):] and AGENT not in their_endpoint, their_endpoint
        # The gateway reads the hub catalog each second: until it has read the new hub, a push is
        # 503, to try again (nothing is stored).
        assert wait_until(lambda: theirs.keys.push(their_endpoint, b"to B's app").status_code == 201, timeout=10)
        assert theirs.keys.decrypt(base64.b64decode(theirs.wait_for("Message")["message"])) == b"to B's app"

        mine = setup.app()
        my_endpoint = setup.register(mine)
        # Each endpoint's secret under the other hub's installation of the same id, in the earlier
        # form that named it: gone.
        their_secret, my_secret = their_endpoint.rsplit("/", 1)[1], my_endpoint.rsplit("/", 1)[1]
        assert theirs.keys.push(f"{setup.hub.base}/up/{AGENT}/{their_secret}", b"crossed").status_code == 410
        assert mine.keys.push(f"{setup.hub.base}/up/up-b%2F{AGENT}/{my_secret}", b"crossed").status_code == 410
        time.sleep(1)
        assert len(theirs.events("Message")) == 1 and not mine.events("Message")
    finally:
        if "up-b-agent" in setup.hub.processes:
            setup.hub.stop("up-b-agent")
        bus.stop()
