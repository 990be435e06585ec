"""The push stand-ins (Tests/Support/pushstandins.py) checked with clients of their own, written
from the services' documentation rather than from the stand-ins' code, so that the stand-ins are
known to be right before the hub is tested against them: APNs over HTTP/2 with an ES256 provider
token, FCM's OAuth token exchange and send, Web Push with aes128gcm and VAPID, WNS with both forms
of token and its channel URIs over HTTP/1.1, ADM with Login with Amazon, Baidu's signed requests,
and the stand-ins run as a process."""
import hashlib
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


# --- WNS -----------------------------------------------------------------------------------------

@pytest.fixture
def loopback_names(monkeypatch):
    """Names under .localhost reach loopback, as libcurl resolves them (the hub's WNS channels)."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return resolve("127.0.0.1" if isinstance(host, str) and host.endswith(".localhost") else host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def wns_token(config, classic=False, **change):
    wns = config["wns"]
    form = {"grant_type": "client_credentials", "client_id": wns["packageSid"] if classic else wns["clientId"],
            "client_secret": wns["secret"], "scope": "notify.windows.com" if classic else "https://wns.windows.com/.default", **change}
    url = wns["classicTokenEndpoint"] if classic else wns["entraTokenEndpoint"]
    return requests.post(url, data=form, verify=config["caFile"], timeout=TIMEOUT)


TOAST = b'<toast><visual><binding template="ToastGeneric"><text>hi</text></binding></visual></toast>'


def wns_send(config, channel, token, body=TOAST, **headers):
    sent = {"authorization": f"Bearer {token}", "x-wns-type": "wns/toast", "content-type": "text/xml", **headers}
    return requests.post(channel, data=body, headers={k: v for k, v in sent.items() if v is not None},
                         verify=config["caFile"], timeout=TIMEOUT)


def test_wns_gives_tokens_for_either_form_of_credentials_and_its_scope_only(config, loopback_names):
    classic = wns_token(config, classic=True)
    assert classic.status_code == 200 and classic.json()["token_type"] == "bearer" and classic.json()["expires_in"] == 86400
    entra = wns_token(config)
    assert entra.status_code == 200 and entra.json()["expires_in"] == "86399" and entra.json()["access_token"]
    assert wns_token(config, scope="notify.windows.com").json()["error"] == "invalid_scope"
    assert wns_token(config, classic=True, client_secret="wrong").json()["error"] == "invalid_client"
    assert wns_token(config, client_id="someone-else").status_code == 401
    assert requests.post(config["wns"]["entraTokenEndpoint"], json={"grant_type": "client_credentials"},
                         verify=config["caFile"], timeout=TIMEOUT).status_code == 400


def test_wns_takes_a_notification_on_its_channel_over_http1(standins, config, loopback_names):
    token = wns_token(config).json()["access_token"]
    channel = standins.wns.channel()
    assert channel.startswith("https://wns.localhost:")
    answer = wns_send(config, channel, token, **{"x-wns-requestforstatus": "true", "x-wns-ttl": "60"})
    assert answer.status_code == 200 and answer.headers["x-wns-status"] == "received"
    assert answer.headers["x-wns-deviceconnectionstatus"] == "connected" and len(answer.headers["x-wns-msg-id"]) <= 16
    record = standins.wait_for("wns", lambda r: r["channel"] == channel, TIMEOUT)[0]
    assert record["verified"] and record["http"] == "HTTP/1.1" and record["xml_root"] == "toast"
    raw = wns_send(config, channel, token, body=b"\x00\x01raw", **{"x-wns-type": "wns/raw", "content-type": "application/octet-stream"})
    assert raw.status_code == 200


@pytest.mark.parametrize("change,status", [
    ({"authorization": None}, 401), ({"authorization": "Bearer made-up"}, 401), ({"x-wns-type": "wns/popup"}, 400),
    ({"content-type": "application/octet-stream"}, 400), ({"x-wns-type": "wns/tile"}, 400), ({"x-wns-tag": "a-tag-far-too-long!"}, 400),
    ({"x-wns-ttl": "soon"}, 400), ({"body": b"<toast>" + b"x" * 5000 + b"</toast>"}, 413), ({"body": b"not xml"}, 400),
])
def test_wns_refuses_what_wns_refuses(standins, config, loopback_names, change, status):
    token = wns_token(config).json()["access_token"]
    change = dict(change)
    body = change.pop("body", TOAST)
    assert wns_send(config, standins.wns.channel(), token, body=body, **change).status_code == status


def test_wns_answers_a_gone_channel_a_throttle_and_another_host(standins, config, loopback_names):
    token = wns_token(config).json()["access_token"]
    gone = standins.wns.channel()
    standins.wns.unregister(gone.split("token=")[1])
    assert wns_send(config, gone, token).status_code == 410
    busy = standins.wns.channel()
    standins.wns.script(busy.split("token=")[1], 406, b"", headers={"Retry-After": "3"})
    answer = wns_send(config, busy, token)
    assert answer.status_code == 406 and answer.headers["retry-after"] == "3"
    assert wns_send(config, busy, token).status_code == 200
    # The channel's host is WNS's: a request that names another is no channel of its.
    other = busy.replace("https://wns.localhost:", "https://127.0.0.1:")
    assert wns_send(config, other, token).status_code == 404


# --- ADM -----------------------------------------------------------------------------------------

def adm_token(config, **change):
    adm = config["adm"]
    form = {"grant_type": "client_credentials", "scope": "messaging:push", "client_id": adm["clientId"],
            "client_secret": adm["clientSecret"], **change}
    return requests.post(adm["tokenEndpoint"], data=form, verify=config["caFile"], timeout=TIMEOUT)


def adm_send(config, registration, token, message, **headers):
    sent = {"authorization": f"Bearer {token}", "content-type": "application/json", "accept": "application/json",
            "x-amzn-type-version": "com.amazon.device.messaging.ADMMessage@1.0",
            "x-amzn-accept-type": "com.amazon.device.messaging.ADMSendResult@1.0", **headers}
    return requests.post(f"{config['adm']['endpoint']}/messaging/registrations/{registration}/messages",
                         data=json.dumps(message), headers={k: v for k, v in sent.items() if v is not None},
                         verify=config["caFile"], timeout=TIMEOUT)


def test_adm_gives_tokens_for_messaging_push_and_takes_data_of_strings(standins, config):
    answer = adm_token(config)
    assert answer.status_code == 200 and answer.json()["scope"] == "messaging:push" and answer.json()["expires_in"] == 3600
    assert adm_token(config, scope="profile").json()["error"] == "invalid_scope"
    assert adm_token(config, client_secret="wrong").status_code == 401
    token = answer.json()["access_token"]
    sent = adm_send(config, "amzn1.adm-registration.v3.a", token, {"data": {"m": "hi"}, "consolidationKey": "k", "expiresAfter": 86400})
    assert sent.status_code == 200 and sent.json() == {"registrationID": "amzn1.adm-registration.v3.a"}
    standins.adm.canonical["amzn1.adm-registration.v3.old"] = "amzn1.adm-registration.v3.new"
    assert adm_send(config, "amzn1.adm-registration.v3.old", token, {"data": {}}).json()["registrationID"] == "amzn1.adm-registration.v3.new"
    # A notification message, ADM's preset keys, needs no data; 6 KB is the payload's, not the whole message's.
    assert adm_send(config, "amzn1.adm-registration.v3.a", token, {"notification": {"title": "t", "body": "b"}}).status_code == 200
    assert adm_send(config, "amzn1.adm-registration.v3.a", token,
                    {"data": {"m": "x" * 6000}, "consolidationKey": "k" * 64, "md5": "x" * 200}).status_code == 200


@pytest.mark.parametrize("message,headers,status,reason", [
    ({"data": {"m": 1}}, {}, 400, "InvalidData"),
    ({"notification": {"title": 1}}, {}, 400, "InvalidData"),
    ({"consolidationKey": "k"}, {}, 400, "InvalidData"),
    ({"data": {"m": "x"}, "expiresAfter": 10}, {}, 400, "InvalidExpiration"),
    ({"data": {"m": "x" * 6200}}, {}, 413, "MessageTooLarge"),
    ({"data": {"m": "x"}}, {"x-amzn-type-version": "com.amazon.device.messaging.ADMMessage@2.0"}, 400, "InvalidType"),
    ({"data": {"m": "x"}}, {"authorization": "Bearer made-up"}, 401, "AccessTokenExpired"),
])
def test_adm_refuses_what_adm_refuses(config, message, headers, status, reason):
    token = adm_token(config).json()["access_token"]
    answer = adm_send(config, "amzn1.adm-registration.v3.b", token, message, **headers)
    assert (answer.status_code, answer.json()["reason"]) == (status, reason)


def test_adm_says_when_a_device_is_gone(standins, config):
    token = adm_token(config).json()["access_token"]
    standins.adm.unregister("amzn1.adm-registration.v3.gone")
    answer = adm_send(config, "amzn1.adm-registration.v3.gone", token, {"data": {"m": "x"}})
    assert (answer.status_code, answer.json()) == (400, {"reason": "Unregistered"})


# --- Baidu ---------------------------------------------------------------------------------------

def php_urlencode(text):
    """PHP's urlencode, as Baidu's reference signs: only letters, digits and -_. stay, a space is +."""
    return urllib.parse.quote_plus(text, safe="").replace("~", "%7E")


def baidu_post(config, params, sign=None, **headers):
    url = f"{config['baidu']['endpoint']}/push/single_device"
    joined = "".join(f"{k}={params[k]}" for k in sorted(params))
    params = {**params, "sign": sign or hashlib.md5(php_urlencode("POST" + url + joined + config["baidu"]["secretKey"]).encode()).hexdigest()}
    sent = {"content-type": "application/x-www-form-urlencoded;charset=utf-8", "user-agent": "BCCS_SDK/3.0 (Linux; test) Python", **headers}
    return requests.post(url, data=urllib.parse.urlencode(params), headers=sent, verify=config["caFile"], timeout=TIMEOUT)


def baidu_params(config, **change):
    return {"apikey": config["baidu"]["apiKey"], "timestamp": str(int(time.time())), "device_type": "3",
            "channel_id": "3713840169076546629", "msg_type": "1", "msg": json.dumps({"title": "t", "description": "d ~*"}), **change}


def test_baidu_takes_a_signed_request_for_a_channel(standins, config):
    answer = baidu_post(config, baidu_params(config))
    assert answer.status_code == 200 and answer.json()["response_params"]["msg_id"]
    record = standins.wait_for("baidu", lambda r: r["channel"] == "3713840169076546629", TIMEOUT)[-1]
    assert record["verified"] and record["msg"] == {"title": "t", "description": "d ~*"}


@pytest.mark.parametrize("change,headers,code", [
    ({}, {"user-agent": "python-requests"}, 30602),
    ({"timestamp": str(int(time.time()) - 3600)}, {}, 30606),
    ({"channel_id": "not-a-channel"}, {}, 30602),
    ({"msg": json.dumps({"title": "t", "description": "x" * 4100})}, {}, 30602),
    ({"msg": json.dumps({"title": "no description"})}, {}, 30602),
    ({"apikey": "someone-else"}, {}, 30603),
])
def test_baidu_refuses_what_baidu_refuses(config, change, headers, code):
    assert baidu_post(config, baidu_params(config, **change), **headers).json()["error_code"] == code


def test_baidu_refuses_a_wrong_signature_and_says_when_a_channel_is_unbound(standins, config):
    answer = baidu_post(config, baidu_params(config), sign="0" * 32)
    assert answer.status_code == 401 and answer.json()["error_code"] == 30603
    standins.baidu.unregister("1111111111111111111")
    assert baidu_post(config, baidu_params(config, channel_id="1111111111111111111")).json()["error_code"] == 30608


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
        assert set(config) == {"caFile", "apple", "fcm", "webpush", "wns", "adm", "baidu"} and os.path.exists(config["caFile"])
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
