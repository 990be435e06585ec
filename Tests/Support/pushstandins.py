"""Stand-in push services on loopback, for the end-to-end tests and the benchmarks: APNs (HTTP/2,
token-based auth), FCM HTTP v1 with its OAuth token endpoint, a Web Push service (RFC 8030,
8291, 8292), WNS (channel URIs on wns.localhost, over HTTP/1.1, with the Microsoft account and
Entra token endpoints), ADM (with Login with Amazon's token endpoint) and Baidu Cloud Push (signed
requests). Each checks what the real service checks, answers as it answers, and records every
request it received.

    with StandIns() as standins:
        hub_config = standins.config()          # also written to <folder>/standins.json
        ...                                     # the hub delivers
        standins.wait_for("apple", lambda r: r["token"] == device, timeout=5)

or as a process: `python3 pushstandins.py --dir DIR [--quiet] [--no-record]` writes
DIR/standins.json, prints `ready`, serves until SIGTERM or SIGINT, then prints its counts.

Each service (standins.apple, .fcm, .webpush, .wns, .adm, .baidu) keeps every request as a dict: method, path,
headers (lower-case names), body, http ("HTTP/2" or "HTTP/1.1"), status (the answer's), verified
and problem (which check failed, and why), and the fields its class lists in `fields`. Answers are
scripted by target (device token, registration token, subscription id) with script(), unregister()
and down().

Besides the real services' paths, every stand-in answers `GET /_standins/stats` (its counts of
requests, refused requests and TLS connections, so that a benchmark can tell how many connections
a client opened) and the Web Push one `POST /_standins/subscribe` (a new subscription), for a
process outside.

Python 3.11 with h2, http_ece and cryptography."""
import argparse
import base64
import collections
import datetime
import functools
import http
import http.server
import ipaddress
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import ssl
import string
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack.hpack
import http_ece
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOST = "127.0.0.1"
# WNS channel URIs are under a domain the hub is told (push.wnsChannelDomain): here localhost, whose
# names libcurl resolves to loopback without asking DNS.
WNS_HOST = "wns.localhost"

# hpack decodes Huffman-coded header values in Python, a byte at a time; a provider sends the same
# authorization header with every request, not indexed since it is secret, so its decoding is
# remembered. (Pure function of bytes: the cache changes nothing else.)
hpack.hpack.decode_huffman = functools.lru_cache(maxsize=1024)(hpack.hpack.decode_huffman)


# --- Encodings and JSON Web Tokens ---------------------------------------------------------------

def b64url(data):
    """base64url without padding (RFC 7515)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text):
    """The bytes of base64url text, with or without padding; ValueError if it is not base64url."""
    text = text.strip().rstrip("=")
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def decode_jwt(token):
    """(header, claims, signing input, signature) of a compact JWS; ValueError if malformed."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT of three parts")
    header, claims = json.loads(unb64url(parts[0])), json.loads(unb64url(parts[1]))
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("JWT header or claims not a JSON object")
    return header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), unb64url(parts[2])


def es256_valid(public_key, signing_input, signature):
    """An ES256 signature, raw r||s of 64 bytes as RFC 7518 has it, verifies."""
    if len(signature) != 64:
        return False
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    try:
        public_key.verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def rs256_valid(public_key, signing_input, signature):
    try:
        public_key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        return True
    except InvalidSignature:
        return False


def pkcs8_pem(private_key):
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode("ascii")


def public_pem(private_key):
    return private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


def uncompressed_point(public_key):
    return public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def identifier(length, alphabet=string.ascii_uppercase + string.digits):
    return "".join(secrets.choice(alphabet) for _ in range(length))


def write_private(path, text):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)


def make_certificates(folder):
    """A throwaway CA (ca.pem) and a certificate it signed for 127.0.0.1 and localhost
    (server.pem, server-key.pem); returns (certificate path, key path)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    validity = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))

    def certificate(subject_name, key, issuer_name, issuer_key, extensions):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(validity[0]).not_valid_after(validity[1])
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())

    def usage(**kwargs):
        flags = dict.fromkeys(["digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                               "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only"], False)
        return x509.KeyUsage(**{**flags, **kwargs})

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("Push stand-ins test CA", ca_key, "Push stand-ins test CA", ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True), (usage(key_cert_sign=True, crl_sign=True), True)])
    server = certificate("127.0.0.1", key, "Push stand-ins test CA", ca_key, [
        (x509.BasicConstraints(ca=False, path_length=None), True), (usage(digital_signature=True), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost"),
                                      x509.DNSName(WNS_HOST)]), False)])
    with open(os.path.join(folder, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    cert_path, key_path = os.path.join(folder, "server.pem"), os.path.join(folder, "server-key.pem")
    with open(cert_path, "wb") as f:
        f.write(server.public_bytes(serialization.Encoding.PEM))
    write_private(key_path, pkcs8_pem(key))
    return cert_path, key_path


# --- What every service shares -------------------------------------------------------------------

Request = collections.namedtuple("Request", "method path headers body http")


class Refuse(Exception):
    """A check failed: the service answers `status` with `body` (a dict is sent as JSON)."""

    def __init__(self, status, body, problem, headers=None):
        super().__init__(problem)
        self.status, self.body, self.problem, self.headers = status, body, problem, headers or {}


class Service:
    """Records, scripted answers, unregistered targets and a down switch; the subclasses check
    requests (`check`) and say what their answers look like (`success`, `error_body`, `gone`)."""
    name = ""
    alpn = ("h2", "http/1.1")
    fields = ()  # the service's own record fields, None until known

    def __init__(self, record=True, log=None):
        self.keep, self.log = record, log
        self.origin = None
        self.count = self.failed = self.connections = 0
        self._records = []
        self._changed = threading.Condition()
        self._scripts = {}
        self._gone = {}
        self._down = False
        # A slow service: the streams a connection may carry, and how long each answer waits.
        self.max_streams = 1000
        self.answer_delay = 0.0
        self.hung = set()  # connections that read requests and never answer again
        self.live = set()  # the connections open now

    def prepare(self, folder, origin):
        """Called once the port is known, before the first request: keys and files."""
        self.origin = origin

    def script(self, target, status, body_dict=None, headers=None, times=1):
        """The next `times` requests for `target` that pass the checks get this answer (after any
        answers already queued for it); then the default success again. A body_dict of None gives
        the body the real service would send with that status."""
        with self._changed:
            queue = self._scripts.setdefault(target, collections.deque())
            queue.extend([(status, body_dict, dict(headers or {}))] * times)

    def unregister(self, target):
        """Every later request for `target` gets the real service's answer for a device that is gone."""
        with self._changed:
            self._gone[target] = (*self.gone(target), {})

    def down(self, is_down=True):
        """While down, every request is still recorded but answered 503."""
        self._down = is_down

    def slow(self, max_streams=1000, answer_delay=0.0):
        """Connections opened from now on allow `max_streams` streams at once, and every answer
        waits `answer_delay` seconds (on its own stream: the others go on meanwhile)."""
        self.max_streams, self.answer_delay = max_streams, answer_delay

    def hang(self):
        """The connections open now stop answering: they read every request and answer none, as a
        connection stuck on a path or in an overloaded service. New connections answer as usual."""
        with self._changed:
            self.hung |= self.live

    def records(self):
        with self._changed:
            return list(self._records)

    def clear(self):
        with self._changed:
            self._records.clear()

    def wait_for(self, predicate=None, timeout=5.0, count=1):
        """The records matching `predicate` (all if None) as soon as there are `count` of them, or
        whatever matched when `timeout` seconds have passed."""
        predicate = predicate or (lambda record: True)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                matching = [record for record in self._records if predicate(record)]
                left = deadline - time.monotonic()
                if len(matching) >= count or left <= 0:
                    return matching
                self._changed.wait(left)

    def stats(self):
        return {"requests": self.count, "failed": self.failed, "connections": self.connections}

    def connected(self):
        """Counts a client connection whose TLS handshake completed."""
        with self._changed:
            self.connections += 1

    def handle(self, request):
        """(status, headers, body) for one request, which is checked and recorded."""
        record = {"method": request.method, "path": request.path, "headers": request.headers,
                  "body": request.body, "http": request.http, **dict.fromkeys(self.fields),
                  "verified": False, "problem": None, "status": None, "received_at": time.monotonic()}
        try:
            target = self.check(request, record)
            record["verified"] = True
            status, body, headers = self._answer(target, record)
        except Refuse as refusal:
            record["problem"] = refusal.problem
            status, body, headers = refusal.status, refusal.body, dict(refusal.headers)
        except Exception as error:  # a bug in the stand-in: seen in the record rather than lost
            record["problem"] = f"stand-in error: {error!r}"
            status, body, headers = 500, self.error_body(500, "stand-in error"), {}
        if self._down:
            status, body, headers = 503, self.error_body(503, "service down"), {}
        record["status"] = status
        if record["problem"] and self.log:
            print(f"{self.name}: {request.method} {request.path} -> {status}: {record['problem']}", file=self.log)
        self._keep(record)
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            headers.setdefault("content-type", "application/json; charset=UTF-8")
        return status, headers, body or b""

    def _answer(self, target, record):
        """For a request that passed the checks: what is scripted for its target, else success."""
        if self._down:
            return 503, self.error_body(503, "service down"), {}
        with self._changed:
            queue = self._scripts.get(target)
            scripted = queue.popleft() if queue else self._gone.get(target)
        if scripted is None:
            return self.success(record)
        status, body, headers = scripted
        if body is None and status < 300:
            _, body, extra = self.success(record)
            return status, body, {**extra, **headers}
        return status, self.error_body(status, "scripted") if body is None else body, dict(headers)

    def _keep(self, record):
        with self._changed:
            self.count += 1
            self.failed += record["problem"] is not None
            if self.keep:
                self._records.append(record)
            self._changed.notify_all()

    def control(self, request):
        """The stand-in's own paths under /_standins/."""
        if request.path == "/_standins/stats":
            return 200, {"content-type": "application/json"}, json.dumps(self.stats()).encode()
        return 404, {}, b""

    # Subclasses:
    def check(self, request, record):
        """Fills the record's fields; returns the target (device, subscription) or raises Refuse."""
        raise NotImplementedError

    def success(self, record):
        """The default answer to a request that passed the checks: (status, body, headers)."""
        raise NotImplementedError

    def error_body(self, status, problem):
        raise NotImplementedError

    def gone(self, target):
        """The (status, body) answered for an unregistered target."""
        raise NotImplementedError


def parse_json(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


class VerifiedCache(dict):
    """Signature checks by token: a client signs a token once and uses it for many requests."""

    def lookup(self, token, verify):
        found = self.get(token)
        if found is None:
            if len(self) > 10_000:
                self.clear()
            found = self[token] = verify(token)
        return found


class IssuesTokens:
    """A service with an OAuth token endpoint (FCM, WNS, ADM): the access tokens it issued, until
    they expire or are revoked, and how many token requests came."""

    def start_issuing(self):
        self.token_requests = 0
        self._access = {}  # access token: expiry (time.time())

    def token_requested(self):
        with self._changed:
            self.token_requests += 1

    def issue(self, prefix, lifetime):
        access = prefix + secrets.token_urlsafe(40)
        self._access[access] = time.time() + lifetime
        return access

    def valid(self, authorization):
        """Whether an Authorization header carries a bearer token this service issued, not yet expired."""
        scheme, _, access = authorization.partition(" ")
        return scheme.lower() == "bearer" and self._access.get(access.strip(), 0) >= time.time()

    def revoke_access_tokens(self):
        """Every access token issued so far is refused from now on (401), as after a key rotation."""
        self._access.clear()

    def stats(self):
        return {**super().stats(), "tokenRequests": self.token_requests}


# --- APNs ----------------------------------------------------------------------------------------

APNS_PUSH_TYPES = {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm",
                   "liveactivity", "pushtotalk"}
APNS_REASONS = {403: "Forbidden", 404: "BadPath", 405: "MethodNotAllowed", 410: "Unregistered",
                413: "PayloadTooLarge", 429: "TooManyRequests", 500: "InternalServerError",
                503: "ServiceUnavailable"}
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class Apple(Service):
    """APNs provider API with token-based authentication, HTTP/2 only:
    POST /3/device/<token> with `authorization: bearer <ES256 JWT>`."""
    name = "apple"
    alpn = ("h2",)
    fields = ("token", "jwt_claims", "payload", "apns")
    bundle_id = "com.example.app"

    def prepare(self, folder, origin):
        super().prepare(folder, origin)
        self.key_id, self.team_id = identifier(10), identifier(10)
        key = ec.generate_private_key(ec.SECP256R1())
        self.public_key, self.public_key_pem = key.public_key(), public_pem(key)
        self.key_file = os.path.join(folder, f"AuthKey_{self.key_id}.p8")
        write_private(self.key_file, pkcs8_pem(key))
        self._tokens = VerifiedCache()

    def config(self):
        return {"endpoint": self.origin, "keyFile": self.key_file, "keyId": self.key_id, "teamId": self.team_id,
                "bundleId": self.bundle_id, "publicKeyPem": self.public_key_pem}

    def handle(self, request):
        status, headers, body = super().handle(request)
        headers.setdefault("apns-id", request.headers.get("apns-id") or str(uuid.uuid4()))
        return status, headers, body

    def check(self, request, record):
        match = re.fullmatch(r"/3/device/([^/?]*)", request.path)
        if not match:
            raise Refuse(404, {"reason": "BadPath"}, "not /3/device/<token>")
        token = record["token"] = match.group(1)
        if request.method != "POST":
            raise Refuse(405, {"reason": "MethodNotAllowed"}, f"method {request.method}")
        headers = request.headers
        record["apns"] = {name: value for name, value in headers.items() if name.startswith("apns-")}
        self._check_provider_token(headers.get("authorization", ""), record)
        push_type = headers.get("apns-push-type", "alert")
        topic = headers.get("apns-topic")
        if not topic:
            raise Refuse(400, {"reason": "MissingTopic"}, "no apns-topic")
        if topic != self.bundle_id and not (push_type == "voip" and topic == self.bundle_id + ".voip"):
            raise Refuse(400, {"reason": "TopicDisallowed"}, f"apns-topic {topic!r}, not {self.bundle_id!r}")
        if not re.fullmatch(r"[0-9a-fA-F]{64}", token):
            raise Refuse(400, {"reason": "BadDeviceToken"}, "device token is not 64 hexadecimal digits")
        for name, valid, reason in (
                ("apns-push-type", lambda v: v in APNS_PUSH_TYPES, "InvalidPushType"),
                ("apns-priority", lambda v: v in ("1", "5", "10"), "BadPriority"),
                ("apns-expiration", str.isdigit, "BadExpirationDate"),
                ("apns-id", UUID.fullmatch, "BadMessageId"),
                ("apns-collapse-id", lambda v: len(v.encode()) <= 64, "BadCollapseId")):
            if name in headers and not valid(headers[name]):
                raise Refuse(400, {"reason": reason}, f"{name}: {headers[name]!r}")
        limit = 5120 if push_type == "voip" else 4096
        if len(request.body) > limit:
            raise Refuse(413, {"reason": "PayloadTooLarge"}, f"payload of {len(request.body)} bytes")
        payload = record["payload"] = parse_json(request.body)
        if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
            raise Refuse(400, {"reason": "PayloadEmpty"}, "payload is not a JSON object with an aps object")
        return token

    def _check_provider_token(self, authorization, record):
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refuse(403, {"reason": "MissingProviderToken"}, "no authorization: bearer <token>")
        claims, problem = self._tokens.lookup(token.strip(), self._verify_token)
        record["jwt_claims"] = claims
        if problem:
            raise Refuse(403, {"reason": "InvalidProviderToken"}, problem)
        age = time.time() - claims["iat"]
        if age > 3600:
            raise Refuse(403, {"reason": "ExpiredProviderToken"}, f"iat {int(age)} s old")
        if age < -60:
            raise Refuse(403, {"reason": "InvalidProviderToken"}, f"iat {int(-age)} s in the future")

    def _verify_token(self, token):
        """(claims, problem): what does not depend on the time."""
        try:
            header, claims, signing_input, signature = decode_jwt(token)
        except ValueError as error:
            return None, f"malformed provider token: {error}"
        if header.get("alg") != "ES256":
            return claims, f"alg {header.get('alg')!r}, not ES256"
        if header.get("kid") != self.key_id:
            return claims, f"kid {header.get('kid')!r}, not {self.key_id}"
        if claims.get("iss") != self.team_id:
            return claims, f"iss {claims.get('iss')!r}, not {self.team_id}"
        if type(claims.get("iat")) is not int:
            return claims, "iat is not an integer"
        if not es256_valid(self.public_key, signing_input, signature):
            return claims, "signature does not verify"
        return claims, None

    def success(self, record):
        return 200, b"", {}

    def error_body(self, status, problem):
        return {"reason": APNS_REASONS.get(status, http.HTTPStatus(status).phrase.replace(" ", ""))}

    def gone(self, target):
        return 410, {"reason": "Unregistered", "timestamp": int(time.time() * 1000)}


# --- FCM -----------------------------------------------------------------------------------------

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_ERRORS = {  # status: (status name, FCM error code or None, message)
    400: ("INVALID_ARGUMENT", "INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", None, "Request had invalid authentication credentials. Expected OAuth 2 access "
                                   "token, login cookie or other valid authentication credential."),
    403: ("PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"),
    404: ("NOT_FOUND", "UNREGISTERED", "Requested entity was not found."),
    429: ("RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded for quota metric 'Send requests'."),
    500: ("INTERNAL", "INTERNAL", "Internal error encountered."),
    503: ("UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."),
}


def google_error(status, message=None):
    """Google's error JSON, with FCM's error code in the details as FCM gives it."""
    name, code, default = GOOGLE_ERRORS.get(status, ("UNKNOWN", None, http.HTTPStatus(status).phrase))
    error = {"code": status, "message": message or default, "status": name}
    if code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    return {"error": error}


class Fcm(IssuesTokens, Service):
    """FCM HTTP v1 (POST /v1/projects/nh-test/messages:send) and Google's OAuth 2 token endpoint
    (POST /token, a JWT bearer assertion signed with the service account's key)."""
    name = "fcm"
    fields = ("kind", "token", "message", "assertion_claims")
    project_id = "nh-test"
    client_email = "hub@nh-test.iam.gserviceaccount.com"

    def prepare(self, folder, origin):
        super().prepare(folder, origin)
        self.token_uri = origin + "/token"
        self.send_path = f"/v1/projects/{self.project_id}/messages:send"
        self.private_key_id = secrets.token_hex(20)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = key.public_key()
        self.start_issuing()
        self.service_account_file = os.path.join(folder, "service-account.json")
        write_private(self.service_account_file, json.dumps({
            "type": "service_account", "project_id": self.project_id, "private_key_id": self.private_key_id,
            "private_key": pkcs8_pem(key), "client_email": self.client_email,
            "client_id": str(secrets.randbelow(10 ** 21)).zfill(21), "token_uri": self.token_uri}, indent=2))

    def config(self):
        return {"endpoint": self.origin, "serviceAccountFile": self.service_account_file,
                "projectId": self.project_id}

    def check(self, request, record):
        if request.method == "POST" and request.path == "/token":
            record["kind"] = "token"
            self.token_requested()
            self._check_assertion(request, record)
            return None
        if request.method != "POST" or request.path != self.send_path:
            raise Refuse(404, google_error(404, "Not found."), f"no {request.method} {request.path} here")
        record["kind"] = "send"
        if not self.valid(request.headers.get("authorization", "")):
            raise Refuse(401, google_error(401), "no valid bearer access token")
        document = parse_json(request.body)
        message = record["message"] = document.get("message") if isinstance(document, dict) else None
        if not isinstance(message, dict):
            raise Refuse(400, google_error(400, "Invalid JSON payload received. Unknown name or no message."),
                         "body is not JSON with a message object")
        token = record["token"] = message.get("token")
        if not isinstance(token, str) or not token:
            raise Refuse(400, google_error(400, "Recipient of the message is not set."), "message has no token")
        data = message.get("data", {})
        if not isinstance(data, dict) or not all(isinstance(value, str) for value in data.values()):
            raise Refuse(400, google_error(400, "Invalid value at 'message.data' (TYPE_STRING)"),
                         "message.data is not an object of strings")
        return token

    def _check_assertion(self, request, record):
        def refuse(description, error="invalid_grant"):
            raise Refuse(400, {"error": error, "error_description": description}, description)

        form = urllib.parse.parse_qs(request.body.decode("utf-8", "replace"))
        if form.get("grant_type") != [JWT_BEARER]:
            refuse(f"Invalid grant_type: {', '.join(form.get('grant_type', []))}", "unsupported_grant_type")
        try:
            header, claims, signing_input, signature = decode_jwt(form.get("assertion", [""])[0])
        except ValueError as error:
            refuse(f"Invalid JWT: {error}")
        record["assertion_claims"] = claims
        if header.get("alg") != "RS256":
            refuse(f"Invalid JWT: alg {header.get('alg')!r}, not RS256")
        if "kid" in header and header["kid"] != self.private_key_id:
            refuse("Invalid JWT Signature.")
        if claims.get("iss") != self.client_email:
            refuse("Invalid JWT: iss is not the service account's client_email")
        if FCM_SCOPE not in str(claims.get("scope", "")).split():
            refuse(f"Invalid JWT: scope does not contain {FCM_SCOPE}", "invalid_scope")
        if claims.get("aud") != self.token_uri:
            refuse(f"Invalid JWT: aud {claims.get('aud')!r}, not {self.token_uri}")
        iat, exp, now = claims.get("iat"), claims.get("exp"), time.time()
        if type(iat) is not int or type(exp) is not int or not (iat < exp <= iat + 3600) or exp < now \
                or iat > now + 60:
            refuse("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
                   "Check your iat and exp values in the JWT claim.")
        if not rs256_valid(self.public_key, signing_input, signature):
            refuse("Invalid JWT Signature.")

    def success(self, record):
        if record["kind"] == "token":
            return 200, {"access_token": self.issue("ya29.", 3599), "expires_in": 3599, "token_type": "Bearer"}, {}
        message_id = f"0:{time.time_ns() // 1000}%{secrets.token_hex(8)}"
        return 200, {"name": f"projects/{self.project_id}/messages/{message_id}"}, {}

    def error_body(self, status, problem):
        return google_error(status)

    def gone(self, target):
        return 404, google_error(404)


# --- Web Push ------------------------------------------------------------------------------------

URGENCIES = {"very-low", "low", "normal", "high"}


class WebPush(Service):
    """A push service (RFC 8030) taking messages encrypted with aes128gcm (RFC 8291) from an
    application server identified with VAPID (RFC 8292): POST /push/<subscription id>."""
    name = "webpush"
    fields = ("subscription", "plaintext", "ttl", "urgency", "topic", "vapid_claims", "vapid_key")

    def prepare(self, folder, origin):
        super().prepare(folder, origin)
        self._subscriptions = {}  # id: (private key, auth secret)
        self._vapid = VerifiedCache()
        self._expected_key = None

    def config(self):
        return {"origin": self.origin, "subscribe": self.origin + "/_standins/subscribe"}

    def subscribe(self):
        """A new subscription, as the JSON a browser gives (keys flattened): id, endpoint, p256dh, auth."""
        sid = secrets.token_urlsafe(16)
        key, auth = ec.generate_private_key(ec.SECP256R1()), secrets.token_bytes(16)
        self._subscriptions[sid] = (key, auth)
        return {"id": sid, "endpoint": f"{self.origin}/push/{sid}",
                "p256dh": b64url(uncompressed_point(key.public_key())), "auth": b64url(auth)}

    def expect_vapid_key(self, key):
        """Only this application server key (base64url, uncompressed point) is accepted; None: any."""
        self._expected_key = key.rstrip("=") if key else None

    def control(self, request):
        if request.method == "POST" and request.path == "/_standins/subscribe":
            return 201, {"content-type": "application/json"}, json.dumps(self.subscribe()).encode()
        return super().control(request)

    def check(self, request, record):
        match = re.fullmatch(r"/push/([A-Za-z0-9_-]+)", request.path)
        sid = record["subscription"] = match and match.group(1)
        if not sid or request.method != "POST" or sid not in self._subscriptions:
            raise Refuse(404, self.error_body(404, None), f"no subscription at {request.method} {request.path}")
        headers = request.headers
        self._check_vapid(headers.get("authorization", ""), record)
        ttl = headers.get("ttl", "")
        if not ttl.isdigit():
            raise Refuse(400, self.error_body(400, "Missing or invalid TTL header"), f"TTL {ttl!r}")
        record["ttl"] = int(ttl)
        urgency = record["urgency"] = headers.get("urgency")
        if urgency is not None and urgency not in URGENCIES:
            raise Refuse(400, self.error_body(400, "Invalid Urgency header"), f"Urgency {urgency!r}")
        topic = record["topic"] = headers.get("topic")
        if topic is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", topic):
            raise Refuse(400, self.error_body(400, "Invalid Topic header"), f"Topic {topic!r}")
        if headers.get("content-encoding", "").lower() != "aes128gcm":
            raise Refuse(400, self.error_body(400, "Content-Encoding must be aes128gcm"),
                         f"Content-Encoding {headers.get('content-encoding')!r}")
        if len(request.body) > 4096:
            raise Refuse(413, self.error_body(413, "Payload too large"), f"body of {len(request.body)} bytes")
        key, auth = self._subscriptions[sid]
        try:
            record["plaintext"] = http_ece.decrypt(request.body, private_key=key, auth_secret=auth,
                                                   version="aes128gcm")
        except Exception as error:
            raise Refuse(400, self.error_body(400, "Message could not be decrypted"),
                         f"body does not decrypt: {error}")
        return sid

    def _check_vapid(self, authorization, record):
        scheme, _, rest = authorization.partition(" ")
        params = dict(part.strip().partition("=")[::2] for part in rest.split(","))
        if scheme.lower() != "vapid" or not params.get("t") or not params.get("k"):
            raise Refuse(401, self.error_body(401, "Missing VAPID authorization"),
                         "no authorization: vapid t=<jwt>, k=<key>")
        key = record["vapid_key"] = params["k"].rstrip("=")
        claims, status, problem = self._vapid.lookup((params["t"], key), self._verify_vapid)
        record["vapid_claims"] = claims
        if not problem and self._expected_key and key != self._expected_key:
            status, problem = 403, "VAPID key is not the expected one"
        if not problem and claims.get("aud") != self.origin:
            status, problem = 403, f"aud {claims.get('aud')!r}, not {self.origin}"
        if not problem and not (time.time() < claims["exp"] <= time.time() + 86400):
            status, problem = 403, f"exp {claims['exp']} is past or more than 24 h ahead"
        if problem:
            raise Refuse(status, self.error_body(status, "Invalid VAPID authorization"), problem)

    @staticmethod
    def _verify_vapid(token_and_key):
        """(claims, status, problem): what does not depend on the time or the settings."""
        token, key = token_and_key
        try:
            header, claims, signing_input, signature = decode_jwt(token)
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
        except ValueError as error:
            return None, 401, f"malformed VAPID token or key: {error}"
        if header.get("alg") != "ES256":
            return claims, 401, f"alg {header.get('alg')!r}, not ES256"
        if type(claims.get("exp")) is not int:
            return claims, 401, "exp is not an integer"
        if not re.match(r"(mailto:|https:)", str(claims.get("sub", ""))):
            return claims, 403, "sub is not a mailto: or https: URI"
        if not es256_valid(public_key, signing_input, signature):
            return claims, 403, "signature does not verify for k"
        return claims, None, None

    def success(self, record):
        return 201, b"", {"location": f"/message/{secrets.token_urlsafe(12)}", "ttl": str(record["ttl"])}

    def error_body(self, status, problem):
        phrase = http.HTTPStatus(status).phrase
        return {"code": status, "error": phrase, "message": problem or phrase}

    def gone(self, target):
        return 410, self.error_body(410, "Subscription is no longer valid")


# --- WNS -----------------------------------------------------------------------------------------

WNS_TYPES = {"wns/toast": "toast", "wns/tile": "tile", "wns/badge": "badge", "wns/raw": None}
WNS_ENTRA_SCOPE = "https://wns.windows.com/.default"


def oauth_error(status, error, description):
    return Refuse(status, {"error": error, "error_description": description}, description)


def form_fields(request, content_type="application/x-www-form-urlencoded"):
    """The form of a token request, refused unless its content type says it is one."""
    if not request.headers.get("content-type", "").lower().startswith(content_type):
        raise oauth_error(400, "invalid_request", f"Content-Type {request.headers.get('content-type')!r}, not {content_type}")
    form = urllib.parse.parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[0] for key, values in form.items()}


class Wns(IssuesTokens, Service):
    """WNS, over HTTP/1.1 only: channel URIs https://wns.localhost:<port>/w/?token=<channel>, a POST
    each with `Authorization: Bearer`, `X-WNS-Type` and the content type it needs; the Microsoft
    account service's token endpoint (POST /accesstoken.srf, a Package SID and secret, scope
    notify.windows.com) and Entra's (POST /<tenant>/oauth2/v2.0/token, scope
    https://wns.windows.com/.default)."""
    name = "wns"
    alpn = ("http/1.1",)
    fields = ("kind", "channel", "type", "xml_root", "wns", "form")
    package_sid = "ms-app://S-1-15-2-1234567890-1234567890-1234567890-123456789-1234567890-123456789-1234567890"
    tenant_id = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    client_id = "3f2a9a1e-6c5b-4e0d-8a7e-1b2c3d4e5f60"

    def prepare(self, folder, origin):
        super().prepare(folder, origin.replace(HOST, WNS_HOST))
        self.secret = secrets.token_urlsafe(24)
        self.start_issuing()
        self.secret_file = os.path.join(folder, "wns-secret")
        write_private(self.secret_file, self.secret + "\n")

    def config(self):
        return {"origin": self.origin, "packageSid": self.package_sid, "tenantId": self.tenant_id, "clientId": self.client_id,
                "secret": self.secret, "secretFile": self.secret_file, "classicTokenEndpoint": self.origin + "/accesstoken.srf",
                "entraTokenEndpoint": f"{self.origin}/{self.tenant_id}/oauth2/v2.0/token", "channelDomain": "localhost"}

    def channel(self):
        """A new channel URI, as Windows hands one to an app."""
        return f"{self.origin}/w/?token={secrets.token_urlsafe(24)}"

    def check(self, request, record):
        path, _, query = request.path.partition("?")
        if request.method == "POST" and (path == "/accesstoken.srf" or path == f"/{self.tenant_id}/oauth2/v2.0/token"):
            record["kind"] = "token"
            self.token_requested()
            form = record["form"] = form_fields(request)
            if form.get("grant_type") != "client_credentials":
                raise oauth_error(400, "unsupported_grant_type", f"grant_type {form.get('grant_type')!r}")
            classic = path == "/accesstoken.srf"
            client, scope = (self.package_sid, "notify.windows.com") if classic else (self.client_id, WNS_ENTRA_SCOPE)
            if form.get("client_id") != client or form.get("client_secret") != self.secret:
                raise oauth_error(400 if classic else 401, "invalid_client", "the client id or secret is not the app's")
            if form.get("scope") != scope:
                raise oauth_error(400, "invalid_scope", f"scope {form.get('scope')!r}, not {scope}")
            return None
        record["kind"] = "send"
        token = urllib.parse.parse_qs(query).get("token", [None])[0]
        if path != "/w/" or not token:
            raise Refuse(404, b"", f"{request.method} {request.path} is no channel")
        record["channel"] = f"{self.origin}{request.path}"
        if request.method != "POST":
            raise Refuse(405, b"", f"method {request.method}")
        if request.http != "HTTP/1.1":
            raise Refuse(400, b"", f"WNS speaks HTTP/1.1, not {request.http}")
        headers = request.headers
        if headers.get("host", "").split(":")[0] != WNS_HOST:
            raise Refuse(404, b"", f"Host {headers.get('host')!r} is not the channel's")
        record["wns"] = {name: value for name, value in headers.items() if name.startswith("x-wns-")}
        if not self.valid(headers.get("authorization", "")):
            raise Refuse(401, b"", "no valid bearer access token", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        kind = record["type"] = headers.get("x-wns-type")
        if kind not in WNS_TYPES:
            raise Refuse(400, b"", f"X-WNS-Type {kind!r}")
        expected = "application/octet-stream" if kind == "wns/raw" else "text/xml"
        if headers.get("content-type", "").split(";")[0].strip().lower() != expected:
            raise Refuse(400, b"", f"Content-Type {headers.get('content-type')!r} for {kind}, not {expected}")
        for name, pattern in (("x-wns-cache-policy", r"cache|no-cache"), ("x-wns-requestforstatus", r"true|false"),
                              ("x-wns-ttl", r"\d+"), ("x-wns-tag", r"[A-Za-z0-9]{1,16}"), ("x-wns-group", r"[A-Za-z0-9]{1,16}")):
            if name in headers and not re.fullmatch(pattern, headers[name]):
                raise Refuse(400, b"", f"{name}: {headers[name]!r}")
        if "expect" in headers:
            raise Refuse(400, b"", "Expect: 100-continue is not supported")
        if len(request.body) > 5000:
            raise Refuse(413, b"", f"body of {len(request.body)} bytes, more than 5000")
        if not request.body:
            raise Refuse(400, b"", "empty body")
        root = WNS_TYPES[kind]
        if root:
            try:
                import xml.etree.ElementTree as ElementTree
                element = ElementTree.fromstring(request.body)
            except ElementTree.ParseError as error:
                raise Refuse(400, b"", f"the {kind} body is not XML: {error}")
            record["xml_root"] = element.tag
            if element.tag != root:
                raise Refuse(400, b"", f"the {kind} body's root is <{element.tag}>, not <{root}>")
        return token

    def success(self, record):
        if record["kind"] == "token":
            access = self.issue("EgA", 86400)
            if record["form"].get("scope") == WNS_ENTRA_SCOPE:
                return 200, {"token_type": "Bearer", "expires_in": "86399", "ext_expires_in": "86399", "access_token": access}, {}
            return 200, {"access_token": access, "token_type": "bearer", "expires_in": 86400}, {}
        headers = {"X-WNS-Status": "received", "X-WNS-Msg-ID": secrets.token_hex(8)[:16], "MS-CV": secrets.token_urlsafe(8)}
        if record["wns"].get("x-wns-requestforstatus") == "true":
            headers["X-WNS-DeviceConnectionStatus"] = "connected"
        return 200, b"", headers

    def error_body(self, status, problem):
        return b""

    def gone(self, target):
        return 410, b""


# --- ADM -----------------------------------------------------------------------------------------

ADM_MESSAGE_TYPE = "com.amazon.device.messaging.ADMMessage@1.0"
ADM_RESULT_TYPE = "com.amazon.device.messaging.ADMSendResult@1.0"


class Adm(IssuesTokens, Service):
    """ADM: POST /messaging/registrations/<id>/messages with a Login with Amazon access token
    (POST /auth/o2/token, client credentials, scope messaging:push)."""
    name = "adm"
    fields = ("kind", "registration", "message", "form")
    client_id = "amzn1.application-oa2-client.0123456789abcdef0123456789abcdef"

    def prepare(self, folder, origin):
        super().prepare(folder, origin)
        self.client_secret = secrets.token_hex(32)
        self.start_issuing()
        self.secret_file = os.path.join(folder, "adm-secret")
        write_private(self.secret_file, self.client_secret + "\n")
        self.canonical = {}  # registration id: the one ADM answers instead

    def config(self):
        return {"clientId": self.client_id, "clientSecret": self.client_secret, "secretFile": self.secret_file,
                "endpoint": self.origin, "tokenEndpoint": self.origin + "/auth/o2/token"}

    def check(self, request, record):
        if request.method == "POST" and request.path == "/auth/o2/token":
            record["kind"] = "token"
            self.token_requested()
            form = record["form"] = form_fields(request)
            if form.get("grant_type") != "client_credentials":
                raise oauth_error(400, "unsupported_grant_type", f"grant_type {form.get('grant_type')!r}")
            if form.get("scope") != "messaging:push":
                raise oauth_error(400, "invalid_scope", f"scope {form.get('scope')!r}, not messaging:push")
            if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
                raise oauth_error(401, "invalid_client", "Client authentication failed")
            return None
        record["kind"] = "send"
        match = re.fullmatch(r"/messaging/registrations/([^/]+)/messages", request.path)
        if not match or request.method != "POST":
            raise Refuse(404, {"reason": "NotFound"}, f"no {request.method} {request.path} here")
        registration = record["registration"] = urllib.parse.unquote(match.group(1))
        headers = request.headers
        if not self.valid(headers.get("authorization", "")):
            raise Refuse(401, {"reason": "AccessTokenExpired"}, "no valid bearer access token")
        if headers.get("x-amzn-type-version") != ADM_MESSAGE_TYPE or headers.get("x-amzn-accept-type") != ADM_RESULT_TYPE:
            raise Refuse(400, {"reason": "InvalidType"}, "X-Amzn-Type-Version or X-Amzn-Accept-Type is not ADM's")
        if not headers.get("content-type", "").startswith("application/json"):
            raise Refuse(400, {"reason": "InvalidData"}, f"Content-Type {headers.get('content-type')!r}")
        message = record["message"] = parse_json(request.body)
        # A data message (the app's key-value pairs), a notification message (ADM's preset ones), or both.
        parts = {name: message[name] for name in ("data", "notification") if isinstance(message, dict) and name in message}
        if not parts:
            raise Refuse(400, {"reason": "InvalidData"}, "neither data nor notification")
        for name, part in parts.items():
            if not isinstance(part, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in part.items()):
                raise Refuse(400, {"reason": "InvalidData"}, f"{name} is not an object of strings")
        payload = sum(len(json.dumps(part, separators=(",", ":"), ensure_ascii=False).encode()) for part in parts.values())
        if payload > 6144:
            raise Refuse(413, {"reason": "MessageTooLarge"}, f"payload of {payload} bytes")
        expires = message.get("expiresAfter")
        if expires is not None and (type(expires) is not int or not 60 <= expires <= 2678400):
            raise Refuse(400, {"reason": "InvalidExpiration"}, f"expiresAfter {expires!r}")
        key = message.get("consolidationKey")
        if key is not None and (not isinstance(key, str) or len(key) > 64):
            raise Refuse(400, {"reason": "InvalidConsolidationKey"}, f"consolidationKey {key!r}")
        return registration

    def success(self, record):
        if record["kind"] == "token":
            return 200, {"access_token": self.issue("Atc|", 3600), "scope": "messaging:push", "token_type": "bearer", "expires_in": 3600}, {}
        registration = record["registration"]
        return 200, {"registrationID": self.canonical.get(registration, registration)}, {"X-Amzn-RequestId": str(uuid.uuid4())}

    def error_body(self, status, problem):
        return {"reason": {401: "AccessTokenExpired", 413: "MessageTooLarge", 429: "MaxRateExceeded"}.get(status, problem or "Error")}

    def gone(self, target):
        return 400, {"reason": "Unregistered"}


# --- Baidu ---------------------------------------------------------------------------------------

BAIDU_ERRORS = {30600: "Internal Server Error", 30602: "Request Params Not Valid", 30603: "Authentication Failed",
                30606: "Request Time Expires Timeout", 30607: "Channel Token Timeout", 30608: "Bind Relation Not Found",
                30699: "Requests Are Too Frequent To Be Temporarily Rejected"}


def php_urlencode(text):
    """PHP's urlencode: letters, digits and -_. as they are, a space as +, the rest %XX in upper case."""
    return "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "-_.") else "+" if b == 32 else f"%{b:02X}"
                   for b in text.encode("utf-8"))


def baidu_sign(method, url, params, secret_key):
    joined = "".join(f"{key}={params[key]}" for key in sorted(params) if key != "sign")
    import hashlib
    return hashlib.md5(php_urlencode(method.upper() + url + joined + secret_key).encode()).hexdigest()


class Baidu(Service):
    """Baidu Cloud Push REST API 3.0: POST /rest/3.0/push/single_device, a form signed with the
    app's secret key (MD5 of PHP's urlencode of method, URL, sorted key=value pairs and the key)."""
    name = "baidu"
    fields = ("channel", "params", "msg")
    api_key = "Kb4fTqNUaW4vGZQ1Lq2P7o9x"

    def prepare(self, folder, origin):
        super().prepare(folder, origin)
        self.secret_key = secrets.token_hex(16)
        self.secret_file = os.path.join(folder, "baidu-secret")
        write_private(self.secret_file, self.secret_key + "\n")

    def config(self):
        return {"apiKey": self.api_key, "secretKey": self.secret_key, "secretFile": self.secret_file,
                "endpoint": self.origin + "/rest/3.0"}

    def channel(self):
        """A device's channel as registrations carry it: userId-channelId."""
        return f"{secrets.randbelow(10 ** 18)}-{secrets.randbelow(10 ** 19):019d}"

    def refuse(self, code, problem, status=400):
        return Refuse(status, {"request_id": secrets.randbelow(10 ** 9), "error_code": code, "error_msg": BAIDU_ERRORS.get(code, "Error")},
                      problem)

    def check(self, request, record):
        if request.method != "POST":
            raise self.refuse(30601, f"method {request.method}", 405)
        if request.path != "/rest/3.0/push/single_device":
            raise Refuse(404, {"error_code": 30602, "error_msg": "Request Params Not Valid"}, f"no {request.path} here")
        headers = request.headers
        if headers.get("content-type", "").lower().replace(" ", "") != "application/x-www-form-urlencoded;charset=utf-8":
            raise self.refuse(30602, f"Content-Type {headers.get('content-type')!r}")
        if not headers.get("user-agent", "").startswith("BCCS_SDK/3.0"):
            raise self.refuse(30602, f"User-Agent {headers.get('user-agent')!r} is not an SDK's")
        params = record["params"] = {key: values[0] for key, values in
                                     urllib.parse.parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        for name in ("apikey", "timestamp", "sign", "channel_id", "msg"):
            if not params.get(name):
                raise self.refuse(30602, f"no {name}")
        url = f"{self.origin}{request.path}"
        if params["apikey"] != self.api_key or params["sign"] != baidu_sign("POST", url, params, self.secret_key):
            raise self.refuse(30603, "the API key or the signature is wrong", 401)
        if not params["timestamp"].isdigit() or abs(int(params["timestamp"]) - time.time()) > 600:
            raise self.refuse(30606, f"timestamp {params['timestamp']!r}")
        channel = record["channel"] = params["channel_id"]
        if not re.fullmatch(r"\d{10,25}", channel):
            raise self.refuse(30602, f"channel_id {channel!r}")
        if params.get("device_type", "3") not in ("3", "4") or params.get("msg_type", "0") not in ("0", "1"):
            raise self.refuse(30602, "device_type or msg_type")
        expires = params.get("msg_expires", "18000")
        if not expires.isdigit() or not 1 <= int(expires) <= 604800:
            raise self.refuse(30602, f"msg_expires {expires!r}")
        if len(params["msg"].encode()) > 4096:
            raise self.refuse(30602, f"msg of {len(params['msg'].encode())} bytes")
        msg = record["msg"] = parse_json(params["msg"].encode())
        if not isinstance(msg, dict):
            raise self.refuse(30602, "msg is not a JSON object")
        if params.get("msg_type") == "1" and params.get("device_type", "3") == "3" and not msg.get("description"):
            raise self.refuse(30602, "an Android notification needs a description")
        return channel

    def success(self, record):
        return 200, {"request_id": secrets.randbelow(10 ** 9),
                     "response_params": {"msg_id": str(secrets.randbelow(10 ** 18)), "send_time": int(time.time())}}, {}

    def error_body(self, status, problem):
        code = 30699 if status == 429 else 30600
        return {"request_id": secrets.randbelow(10 ** 9), "error_code": code, "error_msg": BAIDU_ERRORS[code]}

    def gone(self, target):
        return 400, {"request_id": secrets.randbelow(10 ** 9), "error_code": 30608, "error_msg": BAIDU_ERRORS[30608]}


# --- TLS servers: HTTP/2 with h2, HTTP/1.1 when ALPN picks it ------------------------------------

class Server:
    """A TLS listener on a free loopback port; a thread accepts, and one thread serves each
    connection, in HTTP/2 when ALPN chose h2 (or the service speaks nothing else)."""

    def __init__(self, service, cert, key):
        self.service = service
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(list(service.alpn))
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self._stopping = threading.Event()
        self._connections = {}  # socket: thread
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=f"{service.name}-accept", daemon=True)

    def start(self):
        self._thread.start()

    def stop(self, timeout=5.0):
        self._stopping.set()
        self._thread.join(timeout)
        self.listener.close()
        with self._lock:
            connections = dict(self._connections)
        for sock in connections:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # wakes the thread reading it
            except OSError:
                pass
        for thread in connections.values():
            thread.join(timeout)

    def respond(self, request):
        if request.path.startswith("/_standins/"):
            return self.service.control(request)
        return self.service.handle(request)

    def _accept(self):
        self.listener.settimeout(0.1)
        while not self._stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:  # such as too many open files: try again a little later
                time.sleep(0.05)
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve, args=(sock,), name=f"{self.service.name}-connection",
                                      daemon=True)
            thread.start()

    def _serve(self, raw):
        try:
            sock = self.context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        except OSError:
            raw.close()
            return
        with self._lock:
            self._connections[sock] = threading.current_thread()
        try:
            if self._stopping.is_set():
                return
            sock.settimeout(10)
            sock.do_handshake()
            sock.settimeout(None)
            self.service.connected()
            if sock.selected_alpn_protocol() == "h2" or self.service.alpn == ("h2",):
                H2Connection(self, sock).run()
            else:
                Http1Handler(sock, sock.getpeername(), self)
        except (OSError, ValueError, h2.exceptions.ProtocolError):
            pass  # the client went away or spoke nonsense: the connection ends
        finally:
            with self._lock:
                self._connections.pop(sock, None)
            sock.close()


class H2Connection:
    """One HTTP/2 connection, server side: requests on many streams at once, each answered as soon
    as its last frame arrives; answer bodies wait for flow-control window where needed."""
    WINDOW = 1 << 24

    def __init__(self, server, sock):
        self.server, self.sock = server, sock
        # Header characters are not checked again here: the clients are HTTP/2 libraries that do.
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8", validate_inbound_headers=False))
        self.requests = {}  # stream id: (headers, [body parts])
        self.unsent = {}  # stream id: body bytes not yet sent

    def run(self):
        service = self.server.service
        with service._changed:
            service.live.add(self)
        try:
            self._run(service)
        finally:
            with service._changed:
                service.live.discard(self)
                service.hung.discard(self)

    def _run(self, service):
        conn = self.conn
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: service.max_streams,
                              h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.WINDOW})
        conn.increment_flow_control_window(self.WINDOW)
        self.delay = service.answer_delay
        self.due = []  # (when, stream id, headers, parts): answers waiting for their time
        out = bytearray(conn.data_to_send())
        while True:
            # Answers wait while more requests are already there to read, so that a client that
            # sends many at once gets them in few writes.
            if out and (len(out) >= 1 << 16 or not self._readable()):
                self.sock.sendall(out)
                out.clear()
            if self.due and not self._readable():
                wait = max(0.0, min(when for when, *_ in self.due) - time.monotonic())
                if not select.select([self.sock], [], [], wait)[0]:
                    now = time.monotonic()
                    ready = [entry for entry in self.due if entry[0] <= now]
                    self.due = [entry for entry in self.due if entry[0] > now]
                    for _, stream_id, headers, parts in ready:
                        self._answer(stream_id, headers, parts)
                    out += conn.data_to_send()
                    continue
            data = self.sock.recv(1 << 16)
            if not data:
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.sock.sendall(out + conn.data_to_send())
                return
            for event in events:
                self._on(event)
            out += conn.data_to_send()
            if any(isinstance(event, h2.events.ConnectionTerminated) for event in events):
                self.sock.sendall(out)
                return

    def _readable(self):
        return self.sock.pending() or select.select([self.sock], [], [], 0)[0]

    def _on(self, event):
        if isinstance(event, h2.events.RequestReceived):
            self.requests[event.stream_id] = (event.headers, [])
        elif isinstance(event, h2.events.DataReceived):
            if event.stream_id in self.requests:
                self.requests[event.stream_id][1].append(event.data)
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id in self.requests:
                request = self.requests.pop(event.stream_id)
                if self in self.server.service.hung:
                    return  # read, never answered
                if self.delay:
                    self.due.append((time.monotonic() + self.delay, event.stream_id, *request))
                else:
                    self._answer(event.stream_id, *request)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
            self.unsent.pop(event.stream_id, None)
            self.due = [entry for entry in self.due if entry[1] != event.stream_id]
        elif isinstance(event, h2.events.WindowUpdated):
            for stream_id in list(self.unsent):
                self._send_body(stream_id)

    def _answer(self, stream_id, header_list, parts):
        pseudo, headers = {}, {}
        for name, value in header_list:
            if name.startswith(":"):
                pseudo[name] = value
            else:
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        request = Request(pseudo.get(":method", ""), pseudo.get(":path", ""), headers, b"".join(parts), "HTTP/2")
        status, answer_headers, body = self.server.respond(request)
        response = [(":status", str(status))] + [(name.lower(), str(value)) for name, value in answer_headers.items()]
        response.append(("content-length", str(len(body))))
        try:
            self.conn.send_headers(stream_id, response, end_stream=not body)
        except h2.exceptions.StreamClosedError:
            return  # the client reset the stream meanwhile
        if body:
            self.unsent[stream_id] = body
            self._send_body(stream_id)

    def _send_body(self, stream_id):
        body = self.unsent.pop(stream_id)
        try:
            while body:
                size = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
                if size <= 0:
                    self.unsent[stream_id] = body
                    return
                self.conn.send_data(stream_id, body[:size], end_stream=size >= len(body))
                body = body[size:]
        except h2.exceptions.StreamClosedError:
            pass


class Http1Handler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, for a client that did not choose h2 (or a service, as WNS, that
    speaks nothing else). A connection the service marks hung reads requests and answers none."""
    protocol_version = "HTTP/1.1"

    def handle(self):
        service = self.server.service
        with service._changed:
            service.live.add(self)
        try:
            super().handle()
        finally:
            with service._changed:
                service.live.discard(self)
                service.hung.discard(self)

    def answer(self):
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self in self.server.service.hung:
            # Read, never answered: the connection stays open until the client gives up on it.
            try:
                while self.rfile.read(1 << 16):
                    pass
            except OSError:
                pass
            self.close_connection = True
            return
        headers = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        status, answer_headers, payload = self.server.respond(
            Request(self.command, self.path, headers, bytes(body), "HTTP/1.1"))
        self.send_response(status)
        for name, value in answer_headers.items():
            self.send_header(name, str(value))
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def log_message(self, format, *args):
        pass


# --- All three -----------------------------------------------------------------------------------

class StandIns:
    """The stand-ins, their keys and a CA in one folder (temporary unless given, and then removed on
    stop). Attributes once started: apple, fcm, webpush, wns, adm, baidu (the services), folder."""

    def __init__(self, folder=None, record=True, log=None):
        self.folder, self._own_folder = folder, folder is None
        self.apple, self.fcm, self.webpush = Apple(record, log), Fcm(record, log), WebPush(record, log)
        self.wns, self.adm, self.baidu = Wns(record, log), Adm(record, log), Baidu(record, log)
        self._servers = []

    @property
    def services(self):
        return {service.name: service for service in (self.apple, self.fcm, self.webpush, self.wns, self.adm, self.baidu)}

    def start(self):
        if self._own_folder:
            self.folder = tempfile.mkdtemp(prefix="nh-standins-")
        os.makedirs(self.folder, exist_ok=True)
        cert, key = make_certificates(self.folder)
        self.ca_file = os.path.join(self.folder, "ca.pem")
        for service in self.services.values():
            server = Server(service, cert, key)
            service.prepare(self.folder, f"https://{HOST}:{server.port}")
            self._servers.append(server)
        for server in self._servers:
            server.start()
        with open(os.path.join(self.folder, "standins.json"), "w") as f:
            json.dump(self.config(), f, indent=2)
        return self

    def stop(self):
        for server in self._servers:
            server.stop()
        self._servers = []
        if self._own_folder and self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def config(self):
        """What a hub's configuration needs, as written to standins.json."""
        return {"caFile": self.ca_file, **{name: service.config() for name, service in self.services.items()}}

    def wait_for(self, service, predicate=None, timeout=5.0, count=1):
        """Service.wait_for on a service given by name or itself."""
        service = self.services[service] if isinstance(service, str) else service
        return service.wait_for(predicate, timeout, count)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Stand-in APNs, FCM, Web Push, WNS, ADM and Baidu services on loopback.")
    parser.add_argument("--dir", required=True, help="folder for standins.json, the CA and the keys")
    parser.add_argument("--quiet", action="store_true", help="do not log refused requests to stderr")
    parser.add_argument("--no-record", action="store_true", help="count requests only, keep none (benchmarks)")
    parser.add_argument("--vapid-key", help="the only VAPID public key Web Push accepts (base64url)")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    standins = StandIns(os.path.abspath(args.dir), record=not args.no_record,
                        log=None if args.quiet else sys.stderr)
    with standins:
        standins.webpush.expect_vapid_key(args.vapid_key)
        print("ready", flush=True)
        while not stopping.wait(0.5):
            pass
    for name, service in standins.services.items():
        counts = ", ".join(f"{value} {re.sub('([A-Z])', lambda m: ' ' + m[1].lower(), key)}"
                           for key, value in service.stats().items())
        print(f"{name}: {counts}", flush=True)  # e.g. "fcm: 120 requests, 0 failed, 1 token requests"


if __name__ == "__main__":
    main()
