"""The push stand-ins (Tests/Support/pushstandins.py) checked with clients of their own, written
from the services' documentation rather than from the stand-ins' code, so that the stand-ins are
known to be right before the hub is tested against them: APNs over HTTP/2 with an ES256 provider
token, FCM's OAuth token exchange and send, Web Push with aes128gcm and VAPID, and the stand-ins
run as a process."""
import base64
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import uuid

import h2.config
import h2.connection
import h2.events
import http_ece
import py_vapid
import pytest
import requests
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from conftest import ROOT
from pushstandins import StandIns

SCRIPT = os.path.join(ROOT, "Tests", "Support", "pushstandins.py")
DEVICE = "a1" * 32
TIMEOUT = 5


@pytest.fixture(scope="module")
def config(standins):
    """standins.json, read as the hub reads it."""
    with open(os.path.join(standins.folder, "standins.json")) as f:
        return json.load(f)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_json(value):
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def es256_jwt(key, header, claims):
    signing_input = f"{b64url_json(header)}.{b64url_json(claims)}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def rs256_jwt(key, header, claims):
    signing_input = f"{b64url_json(header)}.{b64url_json(claims)}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


class H2Client:
    """An HTTP/2 client on one TLS connection with many requests in flight, on h2 and ssl."""

    def __init__(self, origin, ca_file):
        url = urllib.parse.urlsplit(origin)
        self.authority = url.netloc
        context = ssl.create_default_context(cafile=ca_file)
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection((url.hostname, url.port), timeout=TIMEOUT),
                                        server_hostname=url.hostname)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                         header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.answers, self.settled = {}, False
        while not self.settled:  # the server's SETTINGS, and with them its window
            self._read()

    def send(self, path, headers, body=b""):
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "POST"), (":scheme", "https"), (":authority", self.authority),
                                        (":path", path), *headers.items(), ("content-length", str(len(body)))],
                               end_stream=not body)
        if body:
            self.conn.send_data(stream, body, end_stream=True)
        self.answers[stream] = [None, {}, b"", False]
        return stream

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def finished(self, streams):
        """(status, headers, body) of each stream, once all have ended."""
        while not all(self.answers[stream][3] for stream in streams):
            self._read()
        return [tuple(self.answers.pop(stream)[:3]) for stream in streams]

    def post(self, path, headers, body=b""):
        stream = self.send(path, headers, body)
        self.flush()
        return self.finished([stream])[0]

    def _read(self):
        data = self.sock.recv(1 << 16)
        assert data, "the server closed the connection"
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                self.settled = True
            elif isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                self.answers[event.stream_id][:2] = [int(headers.pop(":status")), headers]
            elif isinstance(event, h2.events.DataReceived):
                self.answers[event.stream_id][2] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.answers[event.stream_id][3] = True
        self.flush()

    def close(self):
        self.conn.close_connection()
        self.flush()
        self.sock.close()


# --- APNs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def apple_key(config):
    with open(config["apple"]["keyFile"], "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


@pytest.fixture(scope="module")
def apns(standins, config):
    client = H2Client(config["apple"]["endpoint"], config["caFile"])
    yield client
    client.close()


def provider_token(config, key, iat=None, kid=None):
    apple = config["apple"]
    return es256_jwt(key, {"alg": "ES256", "kid": kid or apple["keyId"]},
                     {"iss": apple["teamId"], "iat": int(time.time()) if iat is None else iat})


def apns_post(client, config, token, device=DEVICE, payload=None, **headers):
    body = json.dumps({"aps": {"alert": "Hello"}} if payload is None else payload).encode()
    headers = {"authorization": f"bearer {token}", "apns-topic": config["apple"]["bundleId"],
               "apns-push-type": "alert", **{name.replace("_", "-"): value for name, value in headers.items()}}
    status, answer_headers, answer = client.post(f"/3/device/{device}", headers, body)
    return status, answer_headers, json.loads(answer) if answer else None


def test_apple_delivers_a_notification_with_a_valid_provider_token(standins, config, apns, apple_key):
    apns_id = str(uuid.uuid4()).upper()
    status, headers, body = apns_post(apns, config, provider_token(config, apple_key), apns_id=apns_id,
                                      apns_priority="10", payload={"aps": {"alert": "Hi"}, "n": 1})
    assert (status, body, headers["apns-id"]) == (200, None, apns_id)
    [record] = standins.wait_for("apple", lambda r: r["apns"].get("apns-id") == apns_id, TIMEOUT)
    assert record["verified"] and record["problem"] is None and record["http"] == "HTTP/2"
    assert record["token"] == DEVICE and record["payload"] == {"aps": {"alert": "Hi"}, "n": 1}
    assert record["jwt_claims"]["iss"] == config["apple"]["teamId"]
    assert record["apns"]["apns-topic"] == "com.example.app" and record["apns"]["apns-priority"] == "10"


def test_apple_key_file_is_what_apple_gives(config):
    apple = config["apple"]
    assert os.path.basename(apple["keyFile"]) == f"AuthKey_{apple['keyId']}.p8"
    with open(apple["keyFile"]) as f:
        assert f.read().startswith("-----BEGIN PRIVATE KEY-----")
    for name in ("keyId", "teamId"):
        assert len(apple[name]) == 10 and apple[name].isalnum() and apple[name] == apple[name].upper()
    assert apple["bundleId"] == "com.example.app" and apple["publicKeyPem"].startswith("-----BEGIN PUBLIC KEY")


@pytest.mark.parametrize("case, reason", [("signature", "InvalidProviderToken"), ("kid", "InvalidProviderToken"),
                                          ("old", "ExpiredProviderToken"), ("missing", "MissingProviderToken")])
def test_apple_refuses_a_bad_provider_token(standins, config, apns, apple_key, case, reason):
    token = {"signature": lambda: provider_token(config, ec.generate_private_key(ec.SECP256R1())),
             "kid": lambda: provider_token(config, apple_key, kid="ABCDEFGHIJ"),
             "old": lambda: provider_token(config, apple_key, iat=int(time.time()) - 3700),
             "missing": lambda: ""}[case]()
    device = os.urandom(32).hex()
    status, _, body = apns_post(apns, config, token, device=device)
    assert (status, body) == (403, {"reason": reason})
    [record] = standins.wait_for("apple", lambda r: r["token"] == device, TIMEOUT)
    assert not record["verified"] and record["problem"] and record["status"] == 403


@pytest.mark.parametrize("change, reason", [
    ({"device": "1234"}, "BadDeviceToken"), ({"apns_topic": "com.example.other"}, "TopicDisallowed"),
    ({"payload": {"alert": "no aps"}}, "PayloadEmpty"), ({"apns_priority": "7"}, "BadPriority"),
    ({"apns_push_type": "shout"}, "InvalidPushType")])
def test_apple_refuses_a_bad_request(config, apns, apple_key, change, reason):
    status, _, body = apns_post(apns, config, provider_token(config, apple_key), **change)
    assert (status, body) == (400, {"reason": reason})


def test_apple_scripted_answer_then_success(standins, config, apns, apple_key):
    device, token = os.urandom(32).hex(), provider_token(config, apple_key)
    standins.apple.script(device, 429, {"reason": "TooManyRequests"}, {"Retry-After": "2"})
    status, headers, body = apns_post(apns, config, token, device=device)
    assert (status, body, headers["retry-after"]) == (429, {"reason": "TooManyRequests"}, "2")
    assert apns_post(apns, config, token, device=device)[0] == 200
    standins.apple.script(device, 500, times=2)
    assert [apns_post(apns, config, token, device=device)[:3:2] for _ in range(3)] == [
        (500, {"reason": "InternalServerError"})] * 2 + [(200, None)]


def test_apple_unregistered_device_and_service_down(standins, config, apns, apple_key):
    device, token = os.urandom(32).hex(), provider_token(config, apple_key)
    standins.apple.unregister(device)
    for _ in range(2):
        status, _, body = apns_post(apns, config, token, device=device)
        assert status == 410 and body["reason"] == "Unregistered"
        assert abs(body["timestamp"] - time.time() * 1000) < 60_000
    standins.apple.down(True)
    try:
        assert apns_post(apns, config, token)[:3:2] == (503, {"reason": "ServiceUnavailable"})
    finally:
        standins.apple.down(False)
    assert standins.apple.records()[-1]["status"] == 503
    assert apns_post(apns, config, token)[0] == 200


def test_apple_many_streams_on_several_connections(standins, config, apple_key):
    token, body = provider_token(config, apple_key), json.dumps({"aps": {"badge": 1}}).encode()
    headers = {"authorization": f"bearer {token}", "apns-topic": "com.example.app"}
    before = standins.apple.count
    clients = [H2Client(config["apple"]["endpoint"], config["caFile"]) for _ in range(3)]
    try:
        for _ in range(2):
            streams = [[client.send(f"/3/device/{os.urandom(32).hex()}", headers, body) for _ in range(200)]
                       for client in clients]
            for client in clients:
                client.flush()
            for client, sent in zip(clients, streams):
                assert {status for status, _, _ in client.finished(sent)} == {200}
    finally:
        for client in clients:
            client.close()
    assert standins.apple.count - before == 1200


def test_apple_speaks_http2_only(config):
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(config["apple"]["endpoint"] + f"/3/device/{DEVICE}", data=b"{}", verify=config["caFile"],
                      timeout=TIMEOUT)


# --- FCM -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def account(config):
    with open(config["fcm"]["serviceAccountFile"]) as f:
        return json.load(f)


def assertion(account, key=None, **changes):
    now = int(time.time())
    claims = {"iss": account["client_email"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
              "aud": account["token_uri"], "iat": now, "exp": now + 3600, **changes}
    key = key or serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    return rs256_jwt(key, {"alg": "RS256", "typ": "JWT", "kid": account["private_key_id"]}, claims)


def token_exchange(config, jwt):
    with open(config["fcm"]["serviceAccountFile"]) as f:
        token_uri = json.load(f)["token_uri"]
    form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": jwt}
    return requests.post(token_uri, data=form, verify=config["caFile"], timeout=TIMEOUT)


@pytest.fixture(scope="module")
def access_token(config, account):
    answer = token_exchange(config, assertion(account))
    assert answer.status_code == 200, answer.text
    document = answer.json()
    assert document["token_type"] == "Bearer" and document["expires_in"] == 3599
    return document["access_token"]


def fcm_send(config, access, message):
    fcm = config["fcm"]
    return requests.post(f"{fcm['endpoint']}/v1/projects/{fcm['projectId']}/messages:send",
                         json={"message": message}, verify=config["caFile"], timeout=TIMEOUT,
                         headers={"authorization": f"Bearer {access}"} if access else {})


def test_fcm_service_account_file(config, account):
    assert account["type"] == "service_account" and account["project_id"] == config["fcm"]["projectId"] == "nh-test"
    assert account["client_email"] == "hub@nh-test.iam.gserviceaccount.com"
    assert account["token_uri"] == config["fcm"]["endpoint"] + "/token"
    assert account["private_key"].startswith("-----BEGIN PRIVATE KEY-----") and account["private_key_id"]


def test_fcm_token_exchange_then_send_over_http1_and_http2(standins, config, access_token):
    assert standins.fcm.token_requests >= 1
    answer = fcm_send(config, access_token, {"token": "reg-1", "data": {"n": "1"}})
    assert answer.status_code == 200 and answer.json()["name"].startswith("projects/nh-test/messages/")
    [record] = standins.wait_for("fcm", lambda r: r["token"] == "reg-1", TIMEOUT)
    assert record["verified"] and record["http"] == "HTTP/1.1" and record["kind"] == "send"
    assert record["message"] == {"token": "reg-1", "data": {"n": "1"}}

    client = H2Client(config["fcm"]["endpoint"], config["caFile"])
    try:
        status, _, body = client.post("/v1/projects/nh-test/messages:send",
                                      {"authorization": f"Bearer {access_token}", "content-type": "application/json"},
                                      json.dumps({"message": {"token": "reg-2", "notification": {"title": "t"}}}).encode())
    finally:
        client.close()
    assert status == 200 and json.loads(body)["name"].startswith("projects/nh-test/messages/")
    assert standins.wait_for("fcm", lambda r: r["token"] == "reg-2", TIMEOUT)[0]["http"] == "HTTP/2"


@pytest.mark.parametrize("change", ["key", "aud", "scope", "expired", "iss"])
def test_fcm_refuses_a_wrong_assertion(config, account, change):
    now = int(time.time())
    jwt = {"key": lambda: assertion(account, key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
           "aud": lambda: assertion(account, aud="https://oauth2.googleapis.com/token"),
           "scope": lambda: assertion(account, scope="https://www.googleapis.com/auth/cloud-platform.read-only"),
           "expired": lambda: assertion(account, iat=now - 7200, exp=now - 3600),
           "iss": lambda: assertion(account, iss="someone@else.iam.gserviceaccount.com")}[change]()
    answer = token_exchange(config, jwt)
    assert answer.status_code == 400 and answer.json()["error"] in ("invalid_grant", "invalid_scope")


def test_fcm_refuses_a_send_without_a_valid_access_token(config):
    for access in (None, "ya29.made-up"):
        answer = fcm_send(config, access, {"token": "reg-1"})
        assert answer.status_code == 401
        assert answer.json()["error"]["status"] == "UNAUTHENTICATED" and answer.json()["error"]["code"] == 401


def test_fcm_refuses_a_message_without_a_token(config, access_token):
    answer = fcm_send(config, access_token, {"topic": "news"})
    assert answer.status_code == 400 and answer.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_fcm_unregistered_and_scripted_answers(standins, config, access_token):
    standins.fcm.unregister("reg-gone")
    answer = fcm_send(config, access_token, {"token": "reg-gone"})
    assert (answer.status_code, answer.json()) == (404, {"error": {
        "code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND",
        "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}})
    standins.fcm.script("reg-busy", 429, headers={"Retry-After": "2"})
    answer = fcm_send(config, access_token, {"token": "reg-busy"})
    assert answer.status_code == 429 and answer.headers["retry-after"] == "2"
    assert answer.json()["error"]["details"][0]["errorCode"] == "QUOTA_EXCEEDED"
    assert fcm_send(config, access_token, {"token": "reg-busy"}).status_code == 200


def test_fcm_refuses_access_tokens_after_they_are_revoked():
    with StandIns() as running:
        config = running.config()
        with open(config["fcm"]["serviceAccountFile"]) as f:
            account = json.load(f)
        access = token_exchange(config, assertion(account)).json()["access_token"]
        assert fcm_send(config, access, {"token": "reg-1"}).status_code == 200
        running.fcm.revoke_access_tokens()
        assert fcm_send(config, access, {"token": "reg-1"}).status_code == 401
        access = token_exchange(config, assertion(account)).json()["access_token"]
        assert fcm_send(config, access, {"token": "reg-1"}).status_code == 200
        assert running.fcm.token_requests == 2


# --- Web Push ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vapid():
    key = py_vapid.Vapid02()
    key.generate_keys()
    return key


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encrypt(subscription, plaintext):
    return http_ece.encrypt(plaintext, private_key=ec.generate_private_key(ec.SECP256R1()),
                            dh=unb64url(subscription["p256dh"]), auth_secret=unb64url(subscription["auth"]),
                            version="aes128gcm")


def vapid_headers(vapid, endpoint, **claims):
    origin = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(endpoint))
    return vapid.sign({"aud": origin, "sub": "mailto:ops@example.com", "exp": int(time.time()) + 3600, **claims})


def push(config, subscription, body, headers):
    return requests.post(subscription["endpoint"], data=body, verify=config["caFile"], timeout=TIMEOUT,
                         headers={"content-encoding": "aes128gcm", **headers})


def test_webpush_subscription_is_what_a_browser_gives(standins, config):
    subscription = standins.webpush.subscribe()
    assert subscription["endpoint"] == f"{config['webpush']['origin']}/push/{subscription['id']}"
    assert len(unb64url(subscription["p256dh"])) == 65 and unb64url(subscription["p256dh"])[0] == 4
    assert len(unb64url(subscription["auth"])) == 16 and "=" not in subscription["p256dh"] + subscription["auth"]


def test_webpush_decrypts_what_was_encrypted(standins, config, vapid):
    subscription, plaintext = standins.webpush.subscribe(), b'{"title": "Hello", "body": "\xc3\xa9t\xc3\xa9"}'
    answer = push(config, subscription, encrypt(subscription, plaintext),
                  {"ttl": "60", "urgency": "high", "topic": "news", **vapid_headers(vapid, subscription["endpoint"])})
    assert answer.status_code == 201 and answer.headers["location"].startswith("/message/")
    [record] = standins.wait_for("webpush", lambda r: r["subscription"] == subscription["id"], TIMEOUT)
    assert record["verified"] and record["plaintext"] == plaintext
    assert (record["ttl"], record["urgency"], record["topic"]) == (60, "high", "news")
    assert record["vapid_claims"]["sub"] == "mailto:ops@example.com"
    assert unb64url(record["vapid_key"]) == vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def test_webpush_refuses_bad_vapid(standins, config, vapid):
    subscription = standins.webpush.subscribe()
    body = encrypt(subscription, b"x")
    other = py_vapid.Vapid02()
    other.generate_keys()
    k = vapid_headers(other, subscription["endpoint"])["Authorization"].split("k=")[1]
    forged = vapid_headers(vapid, subscription["endpoint"])["Authorization"].split(",k=")[0] + ", k=" + k
    cases = [({}, 401), ({"authorization": forged}, 403),
             (vapid_headers(vapid, subscription["endpoint"], aud="https://push.example.net"), 403),
             ({"authorization": "WebPush abc"}, 401)]
    for headers, status in cases:
        assert push(config, subscription, body, {"ttl": "0", **headers}).status_code == status
    standins.webpush.expect_vapid_key(k)
    try:
        assert push(config, subscription, body, {"ttl": "0", **vapid_headers(vapid, subscription["endpoint"])}
                    ).status_code == 403
        assert push(config, subscription, body, {"ttl": "0", **vapid_headers(other, subscription["endpoint"])}
                    ).status_code == 201
    finally:
        standins.webpush.expect_vapid_key(None)
    records = standins.wait_for("webpush", lambda r: r["subscription"] == subscription["id"], TIMEOUT, count=6)
    assert [r["verified"] for r in records] == [False] * 5 + [True]


def test_webpush_refuses_bad_headers_and_bodies(standins, config, vapid):
    subscription, stranger = standins.webpush.subscribe(), standins.webpush.subscribe()
    auth = vapid_headers(vapid, subscription["endpoint"])
    good = encrypt(subscription, b"hello")
    for body, headers in [(good, {}), (good, {"ttl": "soon"}), (good, {"ttl": "1", "urgency": "asap"}),
                          (good, {"ttl": "1", "topic": "a" * 33}), (encrypt(stranger, b"hello"), {"ttl": "1"}),
                          (b"not encrypted at all", {"ttl": "1"})]:
        assert push(config, subscription, body, {**auth, **headers}).status_code == 400
    records = standins.wait_for("webpush", lambda r: r["subscription"] == subscription["id"], TIMEOUT, count=6)
    assert all(not r["verified"] and r["problem"] for r in records)
    assert "decrypt" in records[-1]["problem"]


def test_webpush_unregistered_subscription(standins, config, vapid):
    subscription = standins.webpush.subscribe()
    standins.webpush.unregister(subscription["id"])
    answer = push(config, subscription, encrypt(subscription, b"x"),
                  {"ttl": "1", **vapid_headers(vapid, subscription["endpoint"])})
    assert answer.status_code == 410


# --- As a process --------------------------------------------------------------------------------

def test_no_record_counts_only():
    with StandIns(record=False) as running:
        subscription = running.webpush.subscribe()
        answer = requests.post(subscription["endpoint"], data=b"x", verify=running.ca_file, timeout=TIMEOUT)
        assert answer.status_code == 401
        assert running.webpush.count == running.webpush.failed == 1 and running.webpush.records() == []


def test_runs_as_a_process(tmp_path):
    process = subprocess.Popen([sys.executable, SCRIPT, "--dir", str(tmp_path), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert select.select([process.stdout], [], [], 20)[0], "no ready line"
        assert process.stdout.readline() == "ready\n"
        config = json.loads((tmp_path / "standins.json").read_text())
        assert set(config) == {"caFile", "apple", "fcm", "webpush"} and os.path.exists(config["caFile"])
        assert config["fcm"]["projectId"] == "nh-test" and os.path.exists(config["apple"]["keyFile"])
        answer = requests.post(config["webpush"]["subscribe"], verify=config["caFile"], timeout=TIMEOUT)
        assert answer.status_code == 201 and answer.json()["endpoint"].startswith(config["webpush"]["origin"])
        assert requests.post(answer.json()["endpoint"], verify=config["caFile"], timeout=TIMEOUT).status_code == 401
        stats = requests.get(config["webpush"]["origin"] + "/_standins/stats", verify=config["caFile"],
                             timeout=TIMEOUT)
        # Each of the three requests above came on a connection of its own (no session).
        assert stats.json() == {"requests": 1, "failed": 1, "connections": 3}
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert "webpush: 1 requests, 1 failed, 3 connections" in out and "apple: 0 requests" in out
