"""A real Matrix homeserver (Synapse, from PyPI's matrix-synapse) for the tests of the Matrix push
gateway: started in a folder of the test's, on loopback only, with an SQLite database, no TLS and
no federation, and ended by its process id. Users are made through the admin register API with the
shared secret, and Synapse may send pushes to a gateway on 127.0.0.1 (ip_range_whitelist), which
it refuses by default.

Synapse lives in a virtual environment of its own, made once and kept for later runs, so that its
dependencies never meet the test suite's (NH_SYNAPSE_VENV, default /var/tmp/nh-synapse-venv):

    python3 Tests/Support/synapse.py install        # makes the venv where it is missing
    missing()                                        # what cannot run here, [] when all is in place

    server = Synapse(tmp_path)                       # waits until the client API answers
    alice, alice_token = server.register("alice", "secret-a")
    bob, bob_token = server.register("bob", "secret-b")
    room = server.create_room(alice_token, invite=[bob])
    server.join(bob_token, room)
    server.set_pusher(bob_token, "https://push.example/up/KEY", "http://127.0.0.1:PORT")
    server.send(alice_token, room, "hello")          # Synapse POSTs /_matrix/push/v1/notify
    server.stop()

    python3 Tests/Support/synapse.py selfcheck      # the whole path against a recording gateway

A pusher's URL must have the path /_matrix/push/v1/notify and nothing before it, so a gateway is
given as a base URL without a path. In a room of two, each message matches .m.rule.room_one_to_one
(m.room.encrypted ones .m.rule.encrypted_room_one_to_one); in a bigger room .m.rule.message
(.m.rule.encrypted): all of them notify, so the other members get one push a message.
"""
import base64
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VENV = os.environ.get("NH_SYNAPSE_VENV", "/var/tmp/nh-synapse-venv")
PYTHON = os.path.join(VENV, "bin", "python")
# The version whose behaviour the tests were written against; a change makes install() run again.
REQUIREMENT = os.environ.get("NH_SYNAPSE_REQUIREMENT", "matrix-synapse==1.163.2")
READY = os.path.join(VENV, "nh-ready")
NOTIFY_PATH = "/_matrix/push/v1/notify"
HTTP_TIMEOUT = 15
# Every rate limit Synapse has, raised far beyond what a test does.
RATE_LIMITS = ["rc_message", "rc_registration", "rc_registration_token_validity", "rc_login.address",
               "rc_login.account", "rc_login.failed_attempts", "rc_admin_redaction", "rc_joins.local",
               "rc_joins.remote", "rc_joins_per_room", "rc_key_requests", "rc_3pid_validation",
               "rc_invites.per_room", "rc_invites.per_user", "rc_invites.per_issuer", "rc_third_party_invite",
               "rc_media_create", "rc_presence.per_user", "rc_delayed_event_mgmt", "rc_room_creation",
               "rc_reports", "rc_user_directory", "rc_profile"]


def _venv_ready():
    try:
        with open(READY) as f:
            return f.read().strip() == REQUIREMENT and os.path.exists(PYTHON)
    except OSError:
        return False


def missing():
    """What cannot run here: the venv with Synapse (made by install()) and requests for the tests."""
    absent = [] if _venv_ready() else [f"{REQUIREMENT} (PyPI) in the venv {VENV}: python3 Tests/Support/synapse.py install"]
    try:
        import requests  # noqa: F401
    except ImportError:
        absent.append("requests (PyPI)")
    return absent


def install(timeout=900):
    """Makes the venv and installs Synapse into it, unless it is there already; at most `timeout`
    seconds in all. Needs the venv module (Debian's python3-venv for Debian's own python3)."""
    if _venv_ready():
        return
    deadline = time.time() + timeout
    if os.path.exists(READY):
        os.unlink(READY)
    if not os.path.exists(PYTHON) or subprocess.run([PYTHON, "-c", "pass"], timeout=30).returncode != 0:
        result = subprocess.run([sys.executable, "-m", "venv", "--clear", VENV], capture_output=True, text=True,
                                timeout=max(1, deadline - time.time()))
        if result.returncode != 0:
            raise RuntimeError(f"python3 -m venv failed (Debian: apt-get install python3-venv): {result.stderr.strip()}")
    subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", REQUIREMENT],
                   check=True, timeout=max(1, deadline - time.time()))
    subprocess.run([PYTHON, "-c", "import synapse.app.homeserver"], check=True, timeout=max(1, deadline - time.time()))
    with open(READY, "w") as f:
        f.write(REQUIREMENT + "\n")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Synapse:
    """One homeserver in `root_dir`: its config, signing key, database, media and log file."""

    def __init__(self, root_dir, server_name="hub.test", timeout=90):
        import requests
        self.http = requests.Session()
        self.http.trust_env = False
        self.dir = os.path.abspath(str(root_dir))
        os.makedirs(os.path.join(self.dir, "media"), exist_ok=True)
        self.server_name = server_name
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.dir, "homeserver.log")
        self.secret = secrets.token_hex(16)
        self.process = None
        self._write_config()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _write_config(self):
        # YAML is a superset of JSON, so the config and the logging config are written as JSON.
        key = base64.b64encode(os.urandom(32)).decode().rstrip("=")
        with open(os.path.join(self.dir, "signing.key"), "w") as f:
            f.write(f"ed25519 a_test {key}\n")
        logging_config = {
            "version": 1, "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
            "handlers": {"file": {"class": "logging.FileHandler", "formatter": "plain", "filename": self.log_path}},
            "root": {"level": "INFO", "handlers": ["file"]}}
        with open(os.path.join(self.dir, "log.config"), "w") as f:
            json.dump(logging_config, f, indent=1)
        config = {
            "server_name": self.server_name,
            "public_baseurl": self.base + "/",
            "pid_file": os.path.join(self.dir, "homeserver.pid"),
            "listeners": [{"port": self.port, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
                           "x_forwarded": False, "resources": [{"names": ["client"], "compress": False}]}],
            "database": {"name": "sqlite3", "args": {"database": os.path.join(self.dir, "homeserver.db")}},
            "log_config": os.path.join(self.dir, "log.config"),
            "media_store_path": os.path.join(self.dir, "media"),
            "signing_key_path": os.path.join(self.dir, "signing.key"),
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "registration_shared_secret": self.secret,
            "enable_registration": False,
            "report_stats": False,
            "enable_metrics": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            # Loopback is in the default ip_range_blacklist; pushers may reach 127.0.0.1 all the same.
            "ip_range_whitelist": ["127.0.0.1"],
            "push": {"include_content": True},
        }
        for name in RATE_LIMITS:
            node = config
            for part in name.split("."):
                node = node.setdefault(part, {})
            node.update({"per_second": 10000, "burst_count": 10000})
        self.config_path = os.path.join(self.dir, "homeserver.yaml")
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=1)

    def _start(self, timeout):
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        started = time.time()
        with open(os.path.join(self.dir, "synapse.out"), "ab") as out:
            self.process = subprocess.Popen([PYTHON, "-m", "synapse.app.homeserver", "-c", self.config_path],
                                            cwd=self.dir, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env)
        self.pid = self.process.pid
        deadline = started + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"Synapse exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self.http.get(self.base + "/_matrix/client/versions", timeout=2).status_code == 200:
                    break
            except Exception:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"Synapse did not answer within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.startup_seconds = time.time() - started

    def log_tail(self, lines=40):
        text = ""
        for name in ("synapse.out", "homeserver.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text += "".join(f.readlines()[-lines:])
            except OSError:
                pass
        return text

    def request(self, method, path, token=None, body=None, expect=200):
        """One client-server API call; its JSON answer. Raises with Synapse's answer on another status."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = self.http.request(method, self.base + path, headers=headers, json=body, timeout=HTTP_TIMEOUT)
        if response.status_code != expect:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    def register(self, user, password, admin=False):
        """A new local user through /_synapse/admin/v1/register and the shared secret:
        (user_id, access_token)."""
        nonce = self.request("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), user.encode(), password.encode(), b"admin" if admin else b"notadmin"]))
        answer = self.request("POST", "/_synapse/admin/v1/register", body={
            "nonce": nonce, "username": user, "password": password, "admin": admin, "mac": mac.hexdigest()})
        return answer["user_id"], answer["access_token"]

    def create_room(self, token, invite=(), is_direct=False, encrypted=False, name=None):
        """A private room made by the token's user, with `invite` (user ids) invited; its room id."""
        body = {"preset": "private_chat", "invite": list(invite), "is_direct": is_direct}
        if name:
            body["name"] = name
        if encrypted:
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "",
                                      "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]
        return self.request("POST", "/_matrix/client/v3/createRoom", token, body)["room_id"]

    def join(self, token, room_id):
        return self.request("POST", f"/_matrix/client/v3/rooms/{urllib.parse.quote(room_id)}/join", token, {})["room_id"]

    def send_event(self, token, room_id, event_type, content):
        """Any message event; its event id, once Synapse has stored it."""
        path = (f"/_matrix/client/v3/rooms/{urllib.parse.quote(room_id)}/send/{event_type}/"
                f"{secrets.token_hex(8)}")
        return self.request("PUT", path, token, content)["event_id"]

    def send(self, token, room_id, body):
        """A text message; its event id."""
        return self.send_event(token, room_id, "m.room.message", {"msgtype": "m.text", "body": body})

    def set_pusher(self, token, pushkey, gateway_url, app_id="org.example.chat", data_extra=None):
        """An HTTP pusher for the token's user that POSTs whole events to gateway_url + NOTIFY_PATH;
        data_extra goes into data, which Synapse hands back in notification.devices[].data."""
        data = {"url": gateway_url.rstrip("/") + NOTIFY_PATH, **(data_extra or {})}
        self.request("POST", "/_matrix/client/v3/pushers/set", token, {
            "kind": "http", "app_id": app_id, "pushkey": pushkey, "app_display_name": "Chat",
            "device_display_name": "Phone", "lang": "en", "data": data, "append": False})

    def delete_pusher(self, token, pushkey, app_id="org.example.chat"):
        self.request("POST", "/_matrix/client/v3/pushers/set", token, {"kind": None, "app_id": app_id, "pushkey": pushkey})

    def pushers(self, token):
        """The token's user's pushers, as GET /_matrix/client/v3/pushers lists them."""
        return self.request("GET", "/_matrix/client/v3/pushers", token)["pushers"]

    def push_rules(self, token):
        """The token's user's push rules (GET /_matrix/client/v3/pushrules/)."""
        return self.request("GET", "/_matrix/client/v3/pushrules/", token)

    def stop(self):
        """Ends this server's process only: SIGTERM, then SIGKILL after 15 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class RecordingGateway:
    """A push gateway stand-in on loopback: records every POST to NOTIFY_PATH (its JSON body and
    when it arrived) and answers {"rejected": [...]} with the pushkeys in `reject`."""

    def __init__(self):
        self.requests = []
        self.reject = set()
        self.lock = threading.Lock()
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                arrived = time.time()
                if self.path != NOTIFY_PATH:
                    self.send_error(404)
                    return
                body = json.loads(raw)
                devices = body.get("notification", {}).get("devices", [])
                with gateway.lock:
                    gateway.requests.append({"at": arrived, "body": body})
                    rejected = [d["pushkey"] for d in devices if d.get("pushkey") in gateway.reject]
                answer = json.dumps({"rejected": rejected}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def received(self):
        with self.lock:
            return list(self.requests)

    def wait_for(self, count, timeout=20):
        """The recorded requests once there are at least `count`, or all there are after `timeout` s."""
        deadline = time.time() + timeout
        while len(self.received()) < count and time.time() < deadline:
            time.sleep(0.02)
        return self.received()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def selfcheck():
    """Five messages from alice reach a recording gateway as pushes for bob's pusher; then the
    same in an encrypted room and a room of three, and what a rejected pushkey does to the pusher."""
    import statistics
    import tempfile
    started = time.time()
    install()
    print(f"venv ready in {time.time() - started:.1f} s ({VENV})")
    pushkey = "https://example.invalid/up/SECRET"
    gateway = RecordingGateway()
    with tempfile.TemporaryDirectory(prefix="nh-synapse-") as root, Synapse(root) as server:
        print(f"Synapse answered after {server.startup_seconds:.1f} s at {server.base} (pid {server.pid})")
        alice, alice_token = server.register("alice", "alice-password")
        bob, bob_token = server.register("bob", "bob-password")
        carol, carol_token = server.register("carol", "carol-password")
        room = server.create_room(alice_token, invite=[bob], is_direct=True)
        server.join(bob_token, room)
        server.set_pusher(bob_token, pushkey, gateway.base, data_extra={"format_hint": "kept"})
        assert [p["pushkey"] for p in server.pushers(bob_token)] == [pushkey]

        def push_for(event_id, timeout=20):
            deadline = time.time() + timeout
            while time.time() < deadline:
                for request in gateway.received():
                    if request["body"]["notification"].get("event_id") == event_id:
                        return request
                time.sleep(0.005)
            return None

        latencies = []
        for n in range(5):
            sent = time.time()
            event_id = server.send(alice_token, room, f"message {n}")
            request = push_for(event_id)
            assert request, f"no push for message {n}"
            assert request["body"]["notification"]["devices"][0]["pushkey"] == pushkey
            latencies.append(request["at"] - sent)
        assert len(gateway.received()) == 5, gateway.received()
        print("one body as received:\n" + json.dumps(gateway.received()[-1]["body"], indent=2))
        print("send to POST, ms: " + ", ".join(f"{x * 1000:.1f}" for x in latencies) +
              f"; median {statistics.median(latencies) * 1000:.1f}")

        encrypted = server.create_room(alice_token, invite=[bob], encrypted=True)
        server.join(bob_token, encrypted)
        event_id = server.send_event(alice_token, encrypted, "m.room.encrypted", {
            "algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnAC", "sender_key": "c2VuZGVy",
            "session_id": "c2Vzc2lvbg", "device_id": "ALICEDEVICE"})
        request = push_for(event_id, timeout=5)
        print("encrypted room (m.room.encrypted): " +
              (f"pushed, type {request['body']['notification']['type']}" if request else "no push"))

        group = server.create_room(alice_token, invite=[bob, carol])
        server.join(bob_token, group)
        server.join(carol_token, group)
        event_id = server.send(alice_token, group, "to the three of us")
        request = push_for(event_id, timeout=5)
        print(f"room of three: {'pushed' if request else 'no push'}")

        gateway.reject.add(pushkey)
        event_id = server.send(alice_token, room, "answered with rejected")
        assert push_for(event_id), "no push for the message answered with rejected"
        deadline = time.time() + 10
        while server.pushers(bob_token) and time.time() < deadline:
            time.sleep(0.05)
        left = server.pushers(bob_token)
        count = len(gateway.received())
        server.send(alice_token, room, "after the rejection")
        time.sleep(2)
        print(f"rejected pushkey: pushers left {[p['pushkey'] for p in left]}; "
              f"pushes after it {len(gateway.received()) - count}")
        assert not left
    gateway.stop()
    print("selfcheck passed")


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "selfcheck"
    if command == "install":
        started = time.time()
        install(timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 900)
        print(f"{REQUIREMENT} ready in {VENV} ({time.time() - started:.1f} s)")
    elif command == "missing":
        print("\n".join(missing()) or "nothing missing")
    elif command == "selfcheck":
        selfcheck()
    else:
        sys.exit("usage: synapse.py install [SECONDS] | missing | selfcheck")


if __name__ == "__main__":
    main()
