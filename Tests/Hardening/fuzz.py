#!/usr/bin/env python3
"""Fuzzes every bound socket of a running hub and checks that the services stay up, answer
health, keep their memory bounded and refuse every malformed input with an error that has a
stable code.

It starts the real executables itself (loopback ports, a temporary data folder), sends generated
and mutated inputs to:

- each service's request socket (a ROUTER; spoken to as a DEALER with an empty delimiter frame,
  as a REQ would): random bytes, odd multipart messages, oversized frames, envelopes with a broken
  structure, payloads with hostile values, missing and forged credentials, semantically invalid
  requests, and bit-level mutations of valid envelopes and of the golden fixtures;
- the dispatcher's agent socket (a CURVE client with a fresh key pair that no installation is
  bound to): the agent channel's text frames, mutated fixture frames, random bytes and odd
  multipart messages;
- the gateway's HTTP port: malformed requests over raw sockets and through `requests`.

Every input goes through an oracle, a model of the protocol's checks, that says whether the
input must be refused (and with which codes) or may be accepted. A reply is a failure when it
accepts what must be refused, carries an unexpected code, `internal`, or no code at all, or when
no reply comes. Between and after the inputs it checks that every process is alive, answers
health, and that no service's resident memory grew past a bound; at the end, that the stores
hold nothing that was not accepted by a reply the fuzzer saw.

Usage: fuzz.py [--frames N] [--seed S] [--exclude KIND,...] (see --help). Exit status 0 when
nothing failed, 1 on failures, 2 when the hub could not be set up.
"""
import argparse
import base64
import collections
import hashlib
import hmac
import itertools
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "Support"))

from hubharness import BIN, FULL_KEY, LISTEN_KEY, Hub, sas_token, wait_until  # noqa: E402

sys.setrecursionlimit(8000)

# The protocol's limits (HubConfig and the services' defaults).
MAX_MESSAGE_BYTES = 1 << 20
MAX_RICH_BYTES = 4 << 20
PUBLISH_MAX_BYTES = max(MAX_MESSAGE_BYTES, MAX_RICH_BYTES // 3 * 4 + 65_536)
# Past these a socket drops the connection instead of reading the frame (HubServer, the agent socket).
AGENT_SOCKET_LIMIT = MAX_MESSAGE_BYTES + 4096


def socket_limit(max_bytes):
    return max_bytes * 4 + 4096


# JSONSerialization refuses documents nested deeper than this.
JSON_DEPTH_LIMIT = 513

ERROR_CODES = {
    "malformed_frames", "empty_message", "malformed_envelope", "unsupported_version", "unknown_type",
    "invalid_payload", "unknown_field", "payload_too_large", "unauthorized", "forbidden", "not_found", "conflict",
    "invalid_tag", "invalid_expression", "invalid_template", "invalid_argument", "expired", "unavailable", "timeout",
    "internal", "rate_limited", "precondition_failed", "history_rewound",
}

# ---------------------------------------------------------------------------------------------
# The wire contract, as far as the oracle needs it.

def struct(req=None, opt=None):
    return ("struct", req or {}, opt or {})


TEMPLATE = struct({"body": "str"}, {"expiry": "str", "tags": ("list", "str"), "headers": ("map", "str")})
INSTALLATION = struct(
    {"installationId": "str", "platform": "str", "pushChannel": "str", "tags": ("list", "str")},
    {"userId": "str", "templates": ("map", TEMPLATE), "expirationTime": "date", "createdAt": "date", "lastSeen": "date",
     "version": "uint", "endpoints": ("map", struct(None, {"vapid": "str"}))})
PATCH_OPERATION = struct({"op": "str", "path": "str"}, {"value": "json"})
RICH_REFERENCE = struct({"richId": "str", "richType": "str", "message": "str", "contentType": "str", "size": "int"})
VISUAL = struct({"title": "str", "body": "str"})
DEVICE = struct({"device": "str", "publicKey": "str"}, {"name": "str"})
RECOVERY = struct({"publicKey": "str", "auth": "str", "record": "str"})
APPLE_SETTINGS = struct(None, {"keyFile": "str", "key": "str", "keyId": "str", "teamId": "str", "bundleId": "str", "endpoint": "str"})
FCM_SETTINGS = struct(None, {"serviceAccountFile": "str", "serviceAccount": "str", "endpoint": "str"})
WEB_PUSH_SETTINGS = struct(None, {"subject": "str", "keyFile": "str"})

PAYLOADS = {
    "health": struct(), "metrics": struct(),
    "installation.upsert": struct({"installation": INSTALLATION}, {"userToken": "str", "ifMatch": "str"}),
    "installation.patch": struct({"installationId": "str", "operations": ("list", PATCH_OPERATION)}),
    "installation.get": struct({"installationId": "str"}),
    "installation.delete": struct({"installationId": "str"}, {"ifMatch": "str"}),
    "installation.list": struct(None, {"tag": "str", "pushChannel": "str", "limit": "int", "after": "str"}),
    "registry.snapshot": struct(),
    "installation.byEndpoint": struct({"endpoint": "str"}),
    "job.create": struct({"type": ("enum", {"ImportCreateRegistrations", "ImportUpsertRegistrations", "ImportDeleteRegistrations",
                                            "ExportRegistrations"}), "outputDirectory": "str"}, {"importFile": "str"}),
    "job.get": struct({"jobId": "str"}), "job.list": struct(),
    "hub.create": struct({"name": "str"}), "hub.get": struct({"name": "str"}), "hub.list": struct(), "hub.delete": struct({"name": "str"}),
    "hub.policy.put": struct({"hub": "str", "name": "str", "rights": ("list", "str")}),
    "hub.policy.delete": struct({"hub": "str", "name": "str"}),
    "hub.keys.regenerate": struct({"hub": "str", "name": "str", "policyKey": "str"}),
    "hub.limits.put": struct({"hub": "str", "limits": struct(None, {"requestsPerSecond": "int", "sendsPerSecond": "int", "installations": "int"})}),
    "hub.catalog": struct(None, {"after": "uint"}),
    "notification.send": struct(
        {"format": ("enum", {"native", "template"})},
        {"idempotencyKey": "str", "body": "str", "properties": ("map", "str"), "tagExpression": "str",
         "installationId": "str", "userId": "str", "timeToLive": "int", "scheduledAt": "date", "rich": RICH_REFERENCE,
         "platform": ("enum", {"linux", "apns", "fcmv1", "gcm", "wns", "adm", "baidu", "browser"}), "headers": ("map", "str"),
         "test": "bool", "installationIds": ("list", "str"), "hub": "str"}),
    "notification.cancel": struct({"notificationId": "str"}),
    "notification.outcome": struct({"notificationId": "str"}),
    "notification.test.results": struct({"notificationId": "str"}),
    "push.credentials": struct(),
    "push.credentials.set": struct(
        None, {"apple": APPLE_SETTINGS, "fcm": FCM_SETTINGS, "browser": WEB_PUSH_SETTINGS, "remove": ("list", "str")}),
    "notification.pending": struct({"after": "uint"}, {"limit": "int"}),
    "rich.send": struct(
        {"message": "str", "richType": "str", "contentType": "str", "payload": "data"},
        {"idempotencyKey": "str", "sha256": "str", "tagExpression": "str", "installationId": "str", "userId": "str",
         "timeToLive": "int", "keyId": "str"}),
    "rich.fetch": struct({"richId": "str", "ticket": "str"}),
    "user.post": struct(
        {"userId": "str", "appNotificationId": "str"},
        {"visual": VISUAL, "raw": "str", "encrypted": "str", "keyId": "str", "priority": "str", "group": "str", "expiresAt": "date"}),
    "user.changes": struct({"cursor": "uint"}, {"limit": "int"}),
    "user.history": struct(),
    "user.state": struct(
        {"id": "str"},
        {"readState": ("enum", {"unread", "read"}),
         "userActionState": ("enum", {"noInteraction", "activated", "dismissed", "snoozed"}), "device": "str"}),
    "user.delete": struct({"id": "str"}, {"device": "str"}),
    "user.credential": struct({"userId": "str"}, {"lifetime": "int"}),
    "user.token": struct({"credential": "str"}),
    "user.key": struct(None, {"userId": "str", "device": "str"}),
    "user.key.put": struct(
        {"p256dh": "str", "auth": "str", "devices": ("list", DEVICE), "devicesSignature": "str", "recovery": RECOVERY},
        {"replaces": "str", "refusePlaintext": "bool", "envelopes": ("map", "str")}),
    "user.pairing": struct(
        {"step": ("enum", {"open", "get", "answer", "reveal", "deliver"})},
        {"code": "str", "commitment": "str", "publicKey": "str", "device": DEVICE, "sealed": "str"}),
    "agent.user.action": struct({"id": "str", "action": ("enum", {"read", "dismiss", "activate", "snooze", "delete"})}),
    "agent.categories": struct({"categories": ("list", "str")}),
    "agent.apps": struct(),
    "agent.apps.remove": struct({"app": "str"}),
}

REPLY_TYPES = {
    "health": "health.reply", "metrics": "metrics.reply",
    "installation.upsert": "installation.reply", "installation.patch": "installation.reply",
    "installation.get": "installation.reply", "installation.delete": "ack", "installation.list": "installation.page",
    "registry.snapshot": "registry.snapshot.reply", "installation.byEndpoint": "installation.reply",
    "job.create": "job.reply", "job.get": "job.reply", "job.list": "job.list.reply",
    "hub.create": "hub.description", "hub.get": "hub.description", "hub.list": "hub.list.reply", "hub.delete": "ack",
    "hub.policy.put": "hub.policy", "hub.policy.delete": "ack", "hub.keys.regenerate": "hub.policy", "hub.limits.put": "hub.description",
    "hub.catalog": "hub.catalog.reply",
    "notification.send": "notification.accepted", "notification.cancel": "ack",
    "notification.outcome": "notification.outcome.reply", "notification.pending": "notification.pending.reply",
    "notification.test.results": "notification.test.results.reply",
    "push.credentials": "push.credentials.reply", "push.credentials.set": "push.credentials.reply",
    "rich.send": "rich.accepted", "rich.fetch": "rich.payload",
    "user.post": "user.notification", "user.changes": "user.changes.reply", "user.history": "user.history.reply",
    "user.state": "user.notification", "user.delete": "ack", "user.credential": "user.credential.reply",
    "user.token": "user.token.reply", "user.key": "user.key.reply", "user.key.put": "user.key.reply",
    "user.pairing": "user.pairing.reply", "agent.user.action": "ack", "agent.categories": "ack",
    "agent.apps": "agent.apps.reply", "agent.apps.remove": "ack",
}

COMMON_TYPES = {"health", "metrics"}
# Requests that store something, and the store they change.
STORING_TYPES = {"notification.send": "notifications", "rich.send": "notifications", "installation.upsert": "installations",
                 "installation.patch": "installations", "user.post": "user notifications"}
SERVICE_TYPES = {
    "nh-registry": COMMON_TYPES | {"installation.upsert", "installation.patch", "installation.get", "installation.delete",
                                   "installation.list", "registry.snapshot", "installation.byEndpoint", "hub.create", "hub.get", "hub.list", "hub.delete",
                                   "hub.policy.put", "hub.policy.delete", "hub.keys.regenerate", "hub.limits.put", "hub.catalog",
                                   "job.create", "job.get", "job.list"},
    "nh-sync": COMMON_TYPES | {"user.post", "user.changes", "user.history", "user.state", "user.delete", "user.credential",
                               "user.token", "user.key", "user.key.put", "user.pairing"},
    "nh-dispatch": COMMON_TYPES | {"notification.outcome", "notification.test.results", "push.credentials", "push.credentials.set"},
    "nh-publish": COMMON_TYPES | {"notification.send", "notification.cancel", "rich.send", "rich.fetch",
                                  "notification.pending", "notification.outcome", "user.post"},
    "nh-gateway": set(COMMON_TYPES),
    "nh-agent": COMMON_TYPES | {"agent.user.action", "agent.categories", "agent.apps", "agent.apps.remove"},
}
SECTIONS = {"nh-registry": "REGISTRY", "nh-sync": "SYNC", "nh-dispatch": "DISPATCH", "nh-publish": "PUBLISH",
            "nh-gateway": "GATEWAY", "nh-agent": "AGENT"}
SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway", "nh-agent"]

# The right each shared-access request needs; the user-token requests; the rest need nothing.
SAS_RIGHTS = {
    "installation.upsert": "listen", "installation.patch": "listen", "installation.get": "listen",
    "installation.delete": "listen", "installation.list": "manage", "registry.snapshot": "namespace", "installation.byEndpoint": "namespace",
    "notification.send": "send", "notification.cancel": "send", "rich.send": "send", "rich.fetch": "listen",
    "notification.pending": "namespace", "notification.outcome": "send", "notification.test.results": "send", "user.post": "send",
    "user.credential": "manage", "push.credentials": "manage", "push.credentials.set": "manage",
    "job.create": "manage", "job.get": "manage", "job.list": "manage",
    **{kind: "namespace" for kind in ("hub.create", "hub.get", "hub.list", "hub.delete", "hub.policy.put", "hub.policy.delete",
                                      "hub.keys.regenerate", "hub.limits.put", "hub.catalog")},
}
# user.key is a user's own (a user token) without userId, a backend's (Send) with it.
USER_TOKEN_TYPES = {"user.changes", "user.history", "user.state", "user.delete", "user.key", "user.key.put", "user.pairing"}
KEY_RIGHTS = {FULL_KEY: {"listen", "send", "manage"}, LISTEN_KEY: {"listen"}}

TAG_CHARACTERS = re.compile(r"^[A-Za-z0-9_@#.:\-]+$")
CANONICAL_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{3})?Z$")
INTEGER = re.compile(r"^[+-]?[0-9]+$")
BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")

VALID, UNSURE, INVALID = 0, 1, 2


class FloatLit(str):
    """A JSON number written with a fraction or an exponent, kept as its text."""


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _float_literal(text):
    """The services' parser refuses a number too large for a double."""
    if math.isinf(float(text)):
        raise ValueError(f"{text} is out of range")
    return FloatLit(text)


LONG_DIGITS = re.compile(rb"[0-9]{300,}")


class _Pairs:
    duplicates = False


def _pairs(pairs):
    result = dict(pairs)
    if len(result) != len(pairs):
        _Pairs.duplicates = True
    return result


NOT_UTF8, NOT_JSON, TOO_DEEP, LENIENT, EDGE, DUPLICATES = (
    "not-utf8", "not-json", "too-deep", "lenient", "edge", "duplicate keys")
LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]", re.ASCII)
LONE_SURROGATE_ESCAPE_LOW = re.compile(r"\\u[dD][c-fC-F]", re.ASCII)
TRAILING_COMMA = re.compile(rb",\s*[}\]]")


def parse_json(data, unique_keys=False):
    """(value, clean) or (marker, False): how the services' JSON parser sees these bytes, as far
    as it can be told here. `clean` is False where the two parsers may disagree (a byte order
    mark); a repeated name is reported as such. `unique_keys` says that the bytes came straight
    from a serializer, so no name can be repeated."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if b"\x00" in data[:4]:
            return LENIENT, False  # the services' parser also reads UTF-16 and UTF-32
        return NOT_UTF8, False
    clean = True
    if text.startswith("\ufeff"):
        text = text[1:]
        clean = False
    _Pairs.duplicates = False
    try:
        if unique_keys:
            value = json.loads(text, parse_float=_float_literal, parse_constant=_reject_constant)
        else:
            value = json.loads(text, parse_float=_float_literal, parse_constant=_reject_constant, object_pairs_hook=_pairs)
    except RecursionError:
        return TOO_DEEP, False
    except ValueError:
        if TRAILING_COMMA.search(data):
            return LENIENT, False  # the services' parser takes a comma before } or ]
        return NOT_JSON, False
    if _Pairs.duplicates:
        return DUPLICATES, False
    if LONG_DIGITS.search(data):
        return EDGE, False  # an integer too large for a double, unless it is inside a string
    if (LONE_SURROGATE_ESCAPE.search(text) or LONE_SURROGATE_ESCAPE_LOW.search(text)) and has_lone_surrogate(value):
        return NOT_JSON, False
    if data.count(b"[") + data.count(b"{") >= JSON_DEPTH_LIMIT - 20:
        depth = nesting(data)
        if depth > JSON_DEPTH_LIMIT + 4:
            return TOO_DEEP, False
        if depth > JSON_DEPTH_LIMIT - 8:
            return EDGE, False
    return value, clean


def has_lone_surrogate(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
BRACKET_STEP = {0x5B: 1, 0x7B: 1, 0x5D: -1, 0x7D: -1}


def nesting(data):
    """How deep the arrays and objects of a JSON document go."""
    brackets = NOT_BRACKET.sub(b"", JSON_STRING.sub(b"", data))
    return max(itertools.accumulate(map(BRACKET_STEP.__getitem__, brackets)), default=0)


def worst(a, b):
    return a if a > b else b


def check_value(schema, value):
    """VALID, UNSURE or INVALID: whether the services' strict decoder takes `value` as `schema`."""
    if isinstance(schema, str):
        if schema == "str":
            return VALID if isinstance(value, str) and not isinstance(value, FloatLit) else INVALID
        if schema in ("int", "uint"):
            low, high = (-(1 << 63), (1 << 63) - 1) if schema == "int" else (0, (1 << 64) - 1)
            if isinstance(value, bool):
                return INVALID
            if isinstance(value, int):
                return VALID if low <= value <= high else INVALID
            if isinstance(value, FloatLit):
                try:
                    number = float(value)
                except (ValueError, OverflowError):
                    return INVALID
                if number != number or number in (float("inf"), float("-inf")) or number != int(number):
                    return INVALID
                return UNSURE if low <= int(number) <= high else INVALID
            return INVALID
        if schema == "date":
            if not isinstance(value, str) or isinstance(value, FloatLit):
                return INVALID
            match = CANONICAL_DATE.match(value)
            if not match:
                return UNSURE
            year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
            try:
                import datetime
                datetime.datetime(year, month, day, hour, minute, second)
            except ValueError:
                return UNSURE
            return VALID if 1970 <= year <= 9999 else UNSURE
        if schema == "data":
            if not isinstance(value, str) or isinstance(value, FloatLit):
                return INVALID
            if not BASE64.match(value.replace("=", "")):
                return INVALID
            if len(value) % 4 == 0 and BASE64.match(value):
                try:
                    base64.b64decode(value, validate=True)
                    return VALID
                except ValueError:
                    return UNSURE
            return UNSURE
        if schema == "json":
            return VALID
        if schema == "bool":
            return VALID if isinstance(value, bool) else INVALID
        raise AssertionError(schema)
    kind = schema[0]
    if kind == "enum":
        return VALID if isinstance(value, str) and not isinstance(value, FloatLit) and value in schema[1] else INVALID
    if kind == "list":
        if not isinstance(value, list):
            return INVALID
        verdict = VALID
        for item in value:
            verdict = worst(verdict, check_value(schema[1], item))
            if verdict == INVALID:
                break
        return verdict
    if kind == "map":
        if not isinstance(value, dict):
            return INVALID
        verdict = VALID
        for item in value.values():
            verdict = worst(verdict, check_value(schema[1], item))
            if verdict == INVALID:
                break
        return verdict
    if kind == "struct":
        if not isinstance(value, dict):
            return INVALID
        _, required, optional = schema
        verdict = VALID
        for name, field in required.items():
            if name not in value or value[name] is None:
                return INVALID
            verdict = worst(verdict, check_value(field, value[name]))
            if verdict == INVALID:
                return INVALID
        for name, field in optional.items():
            if value.get(name) is not None:
                verdict = worst(verdict, check_value(field, value[name]))
                if verdict == INVALID:
                    return INVALID
        return verdict
    raise AssertionError(schema)


def has_unknown_field(schema, value):
    """Whether a decoded value has a field its type does not have (a null one does not count)."""
    if isinstance(schema, str) or schema[0] == "enum":
        return False
    if schema[0] == "list":
        return any(has_unknown_field(schema[1], item) for item in value)
    if schema[0] == "map":
        return any(has_unknown_field(schema[1], item) for item in value.values())
    _, required, optional = schema
    for name, item in value.items():
        field = required.get(name) or optional.get(name)
        if field is None:
            if item is not None:
                return True
        elif item is not None and has_unknown_field(field, item):
            return True
    return False


def valid_tag(tag):
    return isinstance(tag, str) and 0 < len(tag.encode("utf-8", "surrogatepass")) <= 120 and bool(TAG_CHARACTERS.match(tag))


# ---------------------------------------------------------------------------------------------
# Credentials, checked here as the services check them.

def percent_decoded(text):
    """Foundation's removingPercentEncoding: nil for a bad escape or bytes that are not UTF-8."""
    if "%" not in text:
        return text
    out = bytearray()
    index = 0
    raw = text.encode("utf-8")
    while index < len(raw):
        if raw[index] == 0x25:
            pair = raw[index + 1:index + 3]
            if len(pair) < 2 or not all(c in b"0123456789abcdefABCDEF" for c in pair):
                return None
            out.append(int(pair, 16))
            index += 3
        else:
            out.append(raw[index])
            index += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def form_encoded(text):
    out = []
    for byte in text.encode("utf-8"):
        c = chr(byte)
        if c.isascii() and (c.isalnum() or c in "-_.~"):
            out.append(c)
        elif c == " ":
            out.append("+")
        else:
            out.append("%%%02X" % byte)
    return "".join(out)


def lowercase_escapes(text):
    return re.sub(r"%[0-9A-Fa-f]{2}", lambda m: m.group(0).lower(), text)


def lenient_b64(text, urlsafe=False):
    """Every byte string a lenient reading of `text` as base64 may give."""
    results = []
    if urlsafe:
        text = text.replace("-", "+").replace("_", "/")
    for candidate in (text, text + "=" * (-len(text) % 4)):
        for validate in (True, False):
            try:
                results.append(base64.b64decode(candidate, validate=validate))
            except ValueError:
                pass
    return results


class Credentials:
    """The hub's keys and the user-token secret, to tell a good credential from a forged one."""

    def __init__(self, keys, user_secret, resource):
        self.keys = keys
        self.user_secret = user_secret
        self.resource = resource
        self.known = {}

    def remember(self, token, verdict):
        self.known[token] = verdict

    def sas(self, token):
        """'none', 'forged', 'unsure', or the set of rights of a good token."""
        if token is None or token == "":
            return "none"
        if not isinstance(token, str):
            return "forged"
        if token in self.known:
            verdict = self.known[token]
            return verdict if isinstance(verdict, set) else "forged"
        if not token.isascii():
            return "unsure"
        trimmed = token.strip(" \t")
        if not trimmed.startswith("SharedAccessSignature "):
            return "forged"
        fields, raw = {}, {}
        for pair in trimmed[len("SharedAccessSignature "):].split("&"):
            if not pair:
                continue
            if "=" not in pair:
                return "forged"
            name, value = pair.split("=", 1)
            name = name.lower()
            raw[name] = value
            decoded = percent_decoded(value.replace("+", " "))
            fields[name] = decoded if decoded is not None else value
        if any(not fields.get(name) for name in ("sr", "sig", "se", "skn")):
            return "forged"
        if not INTEGER.match(fields["se"]):
            return "forged"
        expiry = int(fields["se"])
        if not -(1 << 63) <= expiry < (1 << 63):
            return "forged"
        key = self.keys.get(fields["skn"])
        if key is None:
            return "forged"
        signature = percent_decoded(raw["sig"])
        signature = signature if signature is not None else raw["sig"]
        resource = fields["sr"]
        lowered = resource.lower()
        candidates = {raw["sr"], form_encoded(lowered), lowercase_escapes(form_encoded(lowered)),
                      form_encoded(lowered).replace("+", "%20"), lowered, raw["sr"].lower()}
        expected = [hmac.new(key.encode(), f"{c}\n{expiry}".encode(), hashlib.sha256).digest() for c in candidates]
        strict = None
        try:
            strict = base64.b64decode(signature, validate=True) if len(signature) % 4 == 0 else None
        except ValueError:
            strict = None
        if strict is None or strict not in expected:
            if any(d in expected for d in lenient_b64(signature)):
                return "unsure"
            return "forged"
        if base64.b64encode(strict).decode() != signature:
            return "unsure"
        if expiry <= time.time() + 5:
            return "forged" if expiry < time.time() - 5 else "unsure"
        scope = self.normalize(resource)
        if scope is None:
            return "unsure"
        if not self.normalize(self.resource).startswith(scope):
            return "forged"
        return KEY_RIGHTS.get(fields["skn"], "unsure")

    @staticmethod
    def normalize(uri):
        decoded = percent_decoded(uri)
        text = (decoded if decoded is not None else uri).lower()
        for scheme in ("sb://", "https://", "http://"):
            if text.startswith(scheme):
                text = text[len(scheme):]
                break
        return text.rstrip("/") + "/"

    def user(self, token, kind):
        """'valid', 'forged' or 'unsure' for a user credential, token or ticket of `kind`."""
        if token is None or token == "" or not isinstance(token, str):
            return "forged"
        if token in self.known:
            verdict = self.known[token]
            return "valid" if verdict == kind else "forged"
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "nhu1":
            return "forged"
        expected = hmac.new(self.user_secret, f"nhu1.{parts[1]}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        if expected not in lenient_b64(parts[2], urlsafe=True):
            return "forged"
        canonical = base64.urlsafe_b64encode(expected).decode().rstrip("=")
        claims = None
        if parts[2] == canonical and re.match(r"^[A-Za-z0-9_-]*$", parts[1]):
            try:
                claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
            except ValueError:
                claims = None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int) or not isinstance(claims.get("k"), str):
            return "unsure"
        if claims["k"] in ("credential", "token", "ticket") and claims["k"] != kind:
            return "forged"
        if claims["exp"] < time.time() - 5:
            return "forged"
        return "unsure"


def mint_user_token(secret, user, kind, expiry):
    """A user token signed as the services sign them, for credentials that must be refused."""
    claims = json.dumps({"u": user, "k": kind, "exp": expiry, "n": "fz"}).encode()
    body = base64.urlsafe_b64encode(claims).decode().rstrip("=")
    signature = base64.urlsafe_b64encode(hmac.new(secret, f"nhu1.{body}".encode(), hashlib.sha256).digest()).decode().rstrip("=")
    return f"nhu1.{body}.{signature}"


# ---------------------------------------------------------------------------------------------
# The oracle for request sockets.

class Verdict:
    """What the oracle expects: 'error' (with the codes allowed, or None for any code), 'any'
    (the input may be accepted), or 'lenient' (the services' JSON parser may take what is not
    strictly JSON). `expected_id` is the correlation id an error reply must carry, when known."""
    __slots__ = ("kind", "codes", "expected_id", "request_type", "reason", "forwarded", "control")

    def __init__(self, kind, codes=None, expected_id=None, request_type=None, reason="", forwarded=False):
        self.kind = kind
        self.codes = codes
        self.expected_id = expected_id
        self.request_type = request_type
        self.reason = reason
        self.forwarded = forwarded
        self.control = False


def error(codes, reason, expected_id=None, request_type=None):
    return Verdict("error", set(codes) if codes is not None else None, expected_id, request_type, reason)


SEED_ID = re.compile(rb'"fz-[0-9]"')


def deletes_seed(body):
    """Whether a mutated body may delete one of the installations fz-0 to fz-9 that the run made
    first: a splice of two valid envelopes, or a cut that turns fz-gone-8 into fz-8, can make a
    well-formed delete of one. The semantic inputs patch those installations and expect their
    own error code, which a deleted installation's not_found would then take the place of."""
    return b"installation.delete" in body and SEED_ID.search(body) is not None


def request_verdict(service, frames, credentials, semantic=None, unique_keys=False):
    """The oracle: what `service` must answer to `frames`, sent by a DEALER."""
    body = frames[1:] if frames and frames[0] == b"" else frames
    if len(body) != 1:
        return error({"malformed_frames"}, "not exactly one body frame", "")
    data = body[0]
    limit = PUBLISH_MAX_BYTES if service == "nh-publish" else MAX_MESSAGE_BYTES
    if len(data) > limit:
        # The reply carries the top-level id when a scan of the bytes finds one (HubCodec.scanID,
        # which its unit tests pin), so the id is not judged here.
        return error({"payload_too_large"}, "over maxMessageBytes", None)
    if not data:
        return error({"empty_message"}, "empty body frame", "")
    value, clean = parse_json(data, unique_keys)
    if value is NOT_UTF8 or value is NOT_JSON or value is TOO_DEEP:
        return error({"malformed_envelope"}, f"body is {value}", "")
    if value is LENIENT:
        return Verdict("lenient", reason="JSON a strict parser refuses")
    if value is EDGE:
        return Verdict("any", reason="nested about as deep as the parser allows")
    if value is DUPLICATES:
        # JSON leaves a repeated name's meaning open, and the services' two parsers read it differently.
        return Verdict("any", reason="an object names a field twice")
    if not isinstance(value, dict):
        return error({"malformed_envelope"}, "not a JSON object", "")
    raw_id = value.get("id")
    expected_id = (raw_id if isinstance(raw_id, str) and not isinstance(raw_id, FloatLit) else "") if clean else None
    for key in value:
        if key not in ("v", "type", "id", "auth", "hub", "payload"):
            return error({"unknown_field"}, "unknown envelope field", expected_id)
    v = value.get("v")
    if isinstance(v, FloatLit):
        try:
            number = float(v)
        except (ValueError, OverflowError):
            number = float("nan")
        if not math.isfinite(number) or number != int(number) or not -(1 << 63) <= int(number) < (1 << 63):
            return error({"malformed_envelope"}, "v is not an integer", expected_id)
        v = int(number)
    if not isinstance(v, int) or isinstance(v, bool):
        return error({"malformed_envelope"}, "v missing or not a number", expected_id)
    kind = value.get("type")
    if not isinstance(kind, str) or isinstance(kind, FloatLit) or kind == "":
        return error({"malformed_envelope"}, "type missing or not a non-empty string", expected_id)
    if not isinstance(raw_id, str) or isinstance(raw_id, FloatLit):
        return error({"malformed_envelope"}, "id missing or not a string", expected_id)
    auth = value.get("auth")
    if auth is not None and (not isinstance(auth, str) or isinstance(auth, FloatLit)):
        return error({"malformed_envelope"}, "auth not a string", expected_id)
    hub = value.get("hub")
    if hub is not None and (not isinstance(hub, str) or isinstance(hub, FloatLit)):
        return error({"malformed_envelope"}, "hub not a string", expected_id)
    if v != 1:
        codes = {"unsupported_version"} if -(1 << 53) < v < (1 << 53) else {"unsupported_version", "malformed_envelope"}
        return error(codes, "unsupported version", expected_id)
    if kind not in SERVICE_TYPES[service]:
        return error({"unknown_type"}, "a type the service does not answer", expected_id)
    schema = PAYLOADS[kind]
    if "payload" not in value:
        return error({"invalid_payload"}, "no payload", expected_id, kind)
    payload = value["payload"]
    if not isinstance(payload, dict):
        return error({"invalid_payload"}, "a payload that is not an object", expected_id, kind)
    decoded = check_value(schema, payload)
    if decoded == INVALID:
        return error({"invalid_payload"}, "a payload that does not decode", expected_id, kind)
    if has_unknown_field(schema, payload):
        codes = {"unknown_field"} if decoded == VALID else {"unknown_field", "invalid_payload"}
        return error(codes, "payload has an unknown field", expected_id, kind)
    # Requests that wait on another service may honestly answer unavailable when it is busy: a user
    # post waits on the sync store, the agent's new categories on the registry.
    forwarded = (service == "nh-publish" and kind == "user.post") or (service == "nh-agent" and kind == "agent.categories")
    maybe = {"invalid_payload"} if decoded == UNSURE else set()
    # A hub of the namespace other than the default, which the fuzzed namespace does not have.
    if isinstance(hub, str) and hub.lower() != "hub" and (kind in SAS_RIGHTS or kind in USER_TOKEN_TYPES):
        return error(maybe | {"not_found", "unauthorized"}, "a hub the namespace does not have", expected_id, kind)
    # Credentials.
    sas_right = SAS_RIGHTS.get(kind)
    if kind == "user.key" and payload.get("userId") is not None:
        sas_right = "send"
    if sas_right:
        rights = credentials.sas(auth)
        if rights in ("none", "forged"):
            return error(maybe | {"unauthorized"}, f"{rights} credential", expected_id, kind)
        if rights == "unsure":
            return Verdict("any", reason="credential the oracle cannot judge", request_type=kind, forwarded=forwarded)
        if sas_right == "namespace":
            return error(maybe | {"unauthorized"}, "a hub's credential where the namespace's is needed", expected_id, kind)
        if sas_right not in rights and "manage" not in rights:
            return error(maybe | {"forbidden"}, "credential without the right", expected_id, kind)
    elif kind in USER_TOKEN_TYPES:
        user = credentials.user(auth, "token")
        if user == "forged":
            return error(maybe | {"unauthorized"}, "no or forged user token", expected_id, kind)
        if user == "unsure":
            return Verdict("any", reason="user token the oracle cannot judge", request_type=kind)
    if decoded == UNSURE:
        return Verdict("any", reason="payload the oracle cannot judge", request_type=kind, forwarded=forwarded)
    # What the handlers refuse whatever the input's history.
    if kind == "user.token" and credentials.user(payload["credential"], "credential") == "forged":
        return error({"unauthorized"}, "forged user credential", expected_id, kind)
    if kind == "rich.fetch" and credentials.user(payload["ticket"], "ticket") == "forged":
        return error({"unauthorized"}, "forged rich ticket", expected_id, kind)
    if kind == "agent.user.action":
        return error({"invalid_argument"}, "the fuzzed agent is signed in as no user", expected_id, kind)
    if kind == "agent.apps.remove":
        return error({"not_found"}, "no app is registered with the fuzzed agent", expected_id, kind)
    if kind == "agent.categories":
        categories = payload["categories"]
        if len(set(categories)) > 60 or not all(valid_tag(c) for c in categories):
            return error(None, "categories that are not tags cannot be registered", expected_id, kind)
    if semantic is not None:
        verdict = error(semantic, "semantically invalid", expected_id, kind)
        verdict.forwarded = forwarded
        return verdict
    return Verdict("any", request_type=kind, forwarded=forwarded, expected_id=expected_id)


# ---------------------------------------------------------------------------------------------
# The oracle for the agent channel.

AGENT_VERBS = {"hello", "ack", "bye", "welcome", "deliver", "signal", "error", "redirect"}


def agent_verdict(frames):
    """('json' or 'frame', codes or None): the error the dispatcher must answer with. Every input
    on a connection whose key no installation is bound to is refused."""
    if frames[0] == b"":
        return "json", {"unsupported_version"}
    if len(frames) != 1:
        return "frame", {"malformed_frames"}
    try:
        text = frames[0].decode("utf-8")
    except UnicodeDecodeError:
        return "frame", {"malformed_frames"}
    if "\r" in text:
        return "frame", None  # a CR LF pair is one Character to Swift's split, two lines here
    name, separator, rest = text.partition("\n")
    if name not in AGENT_VERBS:
        return "frame", {"malformed_frames"}
    malformed = {"malformed_frames"}

    def fields(count):
        if not separator:
            return None
        parts = rest.split("\n", count - 1)
        return parts if len(parts) == count else None

    def whole(text, low, high):
        return bool(INTEGER.fullmatch(text)) and low <= int(text) <= high

    if name == "hello":
        # A third field, when there is one, is the registry version the agent registered.
        parts = fields(3 if rest.count("\n") >= 2 else 2)
        if parts is None:
            return "frame", malformed
        if parts[0] != "1":
            return "frame", {"unsupported_version"}
        if parts[1] == "" or "\n" in parts[1]:
            return "frame", malformed
        if len(parts) == 3:
            if not whole(parts[2], 0, (1 << 64) - 1):
                return "frame", malformed
            return "frame", {"not_found", "forbidden", "unavailable"}
        return "frame", {"not_found", "forbidden"}
    if name == "ack":
        unsure = not text.isascii()
        for line in rest.split("\n"):
            if line.startswith("!") and "\t" not in line:
                return "frame", malformed | ({"unauthorized"} if unsure else set())
        return "frame", {"unauthorized"} | (malformed if unsure else set())
    if name == "bye":
        parts = fields(1)
        if parts is None or parts[0] == "" or "\n" in parts[0]:
            return "frame", malformed
        return "frame", {"unauthorized"}
    int64 = (-(1 << 63), (1 << 63) - 1)
    if name == "welcome":
        parts = fields(2)
        if parts is None or not whole(parts[1], *int64):
            return "frame", malformed
        return "frame", {"unknown_type"}
    if name == "signal":
        parts = fields(2)
        if parts is None or not whole(parts[1], 0, (1 << 64) - 1):
            return "frame", malformed
        return "frame", {"unknown_type"}
    if name == "error":
        return "frame", ({"unknown_type"} if fields(2) is not None else malformed)
    if name == "redirect":
        parts = fields(2)
        if parts is None or not parts[1].startswith(("tcp://", "ipc://")) or "\n" in parts[1]:
            return "frame", malformed
        return "frame", {"unknown_type"}
    parts = fields(7)
    if parts is None or not whole(parts[3], *int64) or parts[0] == "":
        return "frame", malformed
    if parts[4]:
        value, clean = parse_json(parts[4].encode("utf-8", "surrogatepass"))
        if value in (LENIENT, EDGE, DUPLICATES) or not clean:
            return "frame", malformed | {"unknown_type"}
        if not isinstance(value, dict) or check_value(RICH_REFERENCE, value) != VALID:
            if isinstance(value, dict) and check_value(RICH_REFERENCE, value) == UNSURE:
                return "frame", malformed | {"unknown_type"}
            return "frame", malformed
    return "frame", {"unknown_type"}


# ---------------------------------------------------------------------------------------------
# Inputs.

class Case:
    """One input: its frames, the generator that made it, and what a semantic generator knows
    about it (the codes a valid-looking request must be refused with), if anything."""
    __slots__ = ("frames", "kind", "semantic", "control", "dumped")

    def __init__(self, frames, kind, semantic=None, control=False, dumped=False):
        self.frames = frames
        self.kind = kind
        self.semantic = semantic
        self.control = control
        # Serialized from a value as it is: no name can be repeated in it.
        self.dumped = dumped

    def size(self):
        return sum(len(f) for f in self.frames)


def dump(value, ascii_only=True, pretty=False):
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(", ", ": ") if pretty else (",", ":"),
                      indent=1 if pretty else None)
    return text.encode("utf-8", "surrogatepass")


def deep(depth, kind):
    """A nested value `depth` containers deep, built without recursion."""
    value = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def deep_text(depth, kind):
    return ("[" * depth + "1" + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


FAR_FUTURE = "2099-01-01T00:00:00.000Z"
PAST = "2001-01-01T00:00:00.000Z"


def iso(seconds_from_now):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + seconds_from_now))


class Generator:
    """Makes inputs for every target from a seeded random source."""

    def __init__(self, rng, tokens, fixtures, wire_fixtures, excluded, prefix="fz"):
        self.rng = rng
        self.prefix = prefix
        self.tokens = tokens
        self.fixtures = fixtures
        self.wire_fixtures = wire_fixtures
        self.excluded = excluded
        self.counter = 0
        self.rich_payloads = [rng.randbytes(rng.randint(1, 24)) for _ in range(6)]

    def next_id(self):
        self.counter += 1
        return f"{self.prefix}{self.counter}"

    # Valid requests.

    def base_payload(self, kind):
        r = self.rng
        if kind in ("health", "metrics", "registry.snapshot", "user.history", "push.credentials", "hub.list", "job.list"):
            return {}
        # Jobs whose files cannot be had: refused with what to fix, never run.
        if kind == "job.create":
            return {"type": r.choice(["ImportCreateRegistrations", "ImportDeleteRegistrations"]), "importFile": r.choice(["", "relative.txt", "/fz/none"]),
                    "outputDirectory": r.choice(["", "relative", "/proc/fz"])}
        if kind == "job.get":
            return {"jobId": f"fz-job-{r.randrange(10)}"}
        # The namespace's hubs: refused to every key the fuzzer holds (a hub's own), whatever they name.
        if kind in ("hub.create", "hub.get", "hub.delete"):
            return {"name": r.choice(["fz-hub", "hub", "-bad", "x" * 300])}
        if kind in ("hub.policy.put", "hub.policy.delete", "hub.keys.regenerate", "hub.limits.put"):
            payload = {"hub": r.choice(["fz-hub", "hub"]), "name": "Fz"}
            if kind == "hub.policy.put":
                payload["rights"] = r.sample(["Listen", "Send", "Manage", "Nope"], r.randint(0, 2))
            if kind == "hub.keys.regenerate":
                payload["policyKey"] = r.choice(["PrimaryKey", "SecondaryKey", "Third"])
            if kind == "hub.limits.put":
                del payload["name"]
                payload["limits"] = {"installations": r.randint(-1, 5)}
            return payload
        if kind == "hub.catalog":
            return {"after": r.randint(0, 5)} if r.random() < 0.5 else {}
        if kind == "push.credentials.set":
            return {"remove": r.sample(["apple", "fcm", "browser"], r.randint(0, 2))}
        if kind == "installation.upsert":
            installation = {"installationId": f"fz-{r.randrange(10)}", "platform": "gcm", "pushChannel": "fz-channel",
                            "tags": r.sample(["fz-a", "fz-b", "fz-c", "fz-d"], r.randint(0, 3))}
            if installation["tags"] and r.random() < 0.03:
                installation["tags"].append(installation["tags"][0])
            if r.random() < 0.5:
                installation["templates"] = {"t": {"body": '{"m":"$(m)","n":"#(n)"}', "tags": ["fz-a"],
                                                   "headers": {"X-A": "1"}, "expiry": "$(e)"}}
            if r.random() < 0.3:
                installation["userId"] = "fz-user"
            if r.random() < 0.2:
                installation["expirationTime"] = FAR_FUTURE
            return {"installation": installation}
        if kind == "installation.patch":
            operation = r.choice([
                {"op": "add", "path": "/tags", "value": "fz-b"}, {"op": "replace", "path": "/tags", "value": ["fz-a", "fz-c"]},
                {"op": "remove", "path": "/userId"}, {"op": "add", "path": "/templates/u", "value": {"body": "{}"}},
                {"op": "replace", "path": "/pushChannel", "value": "fz-channel"}, {"op": "add", "path": "/tags/fz-d"}])
            return {"installationId": f"fz-{r.randrange(10)}", "operations": [operation]}
        if kind == "installation.get":
            return {"installationId": f"fz-{r.randrange(12)}"}
        if kind == "installation.byEndpoint":
            return {"endpoint": r.choice(["", "fz-endpoint", "x" * 200])}
        if kind == "installation.delete":
            return {"installationId": f"fz-gone-{r.randrange(100)}"}
        if kind == "installation.list":
            payload = {"limit": r.randint(1, 20)}
            if r.random() < 0.5:
                payload["tag"] = "fz-a"
            return payload
        if kind == "notification.send":
            target = r.choice([("tagExpression", "fz-nobody && !fz-a"), ("installationId", "fz-nobody"), ("userId", "fz-nobody")])
            if r.random() < 0.5:
                payload = {"format": "native", "body": '{"m":"fuzz"}'}
            else:
                payload = {"format": "template", "properties": {"m": "fuzz", "n": "7"}}
            payload[target[0]] = target[1]
            payload["timeToLive"] = 60
            if r.random() < 0.3:
                payload["idempotencyKey"] = f"fz-key-{r.randrange(50)}"
            if r.random() < 0.1:
                payload["scheduledAt"] = iso(6 * 86_400)
            return payload
        if kind in ("notification.cancel", "notification.outcome", "notification.test.results"):
            return {"notificationId": f"fz-none-{r.randrange(1000)}"}
        if kind == "notification.pending":
            return {"after": r.randint(0, 1000), "limit": r.randint(1, 5)}
        if kind == "rich.send":
            data = r.choice(self.rich_payloads)
            payload = {"message": "fuzz", "richType": "image", "contentType": "image/png",
                       "payload": base64.b64encode(data).decode(), "tagExpression": "fz-nobody", "timeToLive": 60}
            if r.random() < 0.5:
                payload["sha256"] = hashlib.sha256(data).hexdigest()
            return payload
        if kind == "rich.fetch":
            return {"richId": hashlib.sha256(r.choice(self.rich_payloads)).hexdigest(), "ticket": self.forged_user_token()}
        if kind == "user.post":
            payload = {"userId": "fz-user", "appNotificationId": f"fz-app-{r.randrange(20)}"}
            if r.random() < 0.7:
                payload["visual"] = {"title": "fuzz", "body": "body"}
            else:
                payload["raw"] = '{"k":1}'
            if r.random() < 0.3:
                payload["priority"] = r.choice(["low", "normal", "high"])
            if r.random() < 0.2:
                payload["expiresAt"] = iso(3600)
            return payload
        if kind == "user.changes":
            return {"cursor": 0, "limit": r.randint(1, 10)}
        if kind == "user.state":
            return {"id": f"fz-missing-{r.randrange(10)}", "readState": "read", "device": "fz-device"}
        if kind == "user.delete":
            return {"id": f"fz-missing-{r.randrange(10)}"}
        if kind == "user.credential":
            return {"userId": "fz-user", "lifetime": 3600}
        if kind == "user.token":
            return {"credential": self.tokens["credential"]}
        if kind == "agent.user.action":
            return {"id": "fz-missing", "action": r.choice(["read", "dismiss", "activate", "snooze", "delete"])}
        if kind == "agent.categories":
            return {"categories": r.sample(["fz-a", "fz-b", "fz-c"], r.randint(0, 2))}
        if kind == "agent.apps":
            return {}
        if kind == "agent.apps.remove":
            return {"app": f"org.example.Fz{r.randrange(10)}"}
        if kind == "user.key":
            return {"device": "fz-device"} if r.random() < 0.5 else {}
        if kind == "user.key.put":
            # Keys that are not points on the curve: refused, whatever else the store holds.
            return {"p256dh": "BAAA", "auth": "AAAAAAAAAAAAAAAAAAAAAA", "devices": [{"device": "fz-device", "publicKey": "BAAA"}],
                    "devicesSignature": "AA", "recovery": {"publicKey": "BAAA", "auth": "AA", "record": "AA"}}
        if kind == "user.pairing":
            return r.choice([{"step": "get", "code": f"0000-{r.randrange(10000):04d}"},
                             {"step": "open", "commitment": base64.urlsafe_b64encode(r.randbytes(32)).rstrip(b"=").decode()}])
        raise AssertionError(kind)

    def valid_auth(self, kind):
        if kind in SAS_RIGHTS:
            return self.tokens["full"]
        if kind in USER_TOKEN_TYPES:
            return self.tokens["user"]
        return None

    def some_auth(self, kind):
        r = self.rng.random()
        if r < 0.55:
            return self.valid_auth(kind)
        if r < 0.7:
            return self.tokens["listen"]
        if r < 0.85:
            return None
        return self.forged_sas()

    def envelope(self, kind, payload, auth, **extra):
        value = {"v": 1, "type": kind, "id": self.next_id(), "payload": payload}
        if auth is not None:
            value["auth"] = auth
        value.update(extra)
        return value

    def forged_sas(self):
        r = self.rng
        tokens = self.tokens
        choice = r.randrange(12)
        if choice == 0:
            return tokens["expired"]
        if choice == 1:
            return tokens["wrong_key"]
        if choice == 2:
            return tokens["unknown_name"]
        if choice == 3:
            return tokens["other_resource"]
        if choice == 4:
            return tokens["full"].replace("sig=", "sig=A")
        if choice == 5:
            return "SharedAccessSignature " + "&".join(r.sample(["sr=x", "sig=y", "se=1", "skn=z", "=", "&&", "sr"], 3))
        if choice == 6:
            return tokens["full"].replace("se=", "se=9")
        if choice == 7:
            return "SharedAccessSignature sr=" + "%" * r.randint(1, 5) + "&sig=%zz&se=-1&skn=" + FULL_KEY
        if choice == 8:
            return self.random_text(r.randint(0, 200))
        if choice == 9:
            return "Bearer " + tokens["user"]
        if choice == 10:
            return tokens["user"]
        return "SharedAccessSignature " + "a" * r.randint(1, 70_000)

    def forged_user_token(self):
        r = self.rng
        choice = r.randrange(7)
        token = self.tokens["user"]
        if choice == 0:
            return "nhu1.e30.c2ln"
        if choice == 1:
            head, body, signature = token.split(".")
            return f"{head}.{body}.{signature[:-4]}AAAA"
        if choice == 2:
            head, body, signature = token.split(".")
            claims = base64.urlsafe_b64encode(json.dumps({"u": "root", "k": "token", "exp": 9999999999, "n": "x"}).encode())
            return f"{head}.{claims.decode().rstrip('=')}.{signature}"
        if choice == 3:
            return self.tokens["expired_user"]
        if choice == 4:
            return "nhu1.." + "." * r.randint(0, 3)
        if choice == 5:
            return self.random_text(r.randint(0, 100))
        return self.tokens["full"]

    def random_text(self, length):
        r = self.rng
        alphabet = r.choice([
            "abcdefghijklmnopqrstuvwxyz0123456789", "!@#$%^&*()[]{}<>?/\\|'\"`~,.;: \t", "\u00e9\u4e2d\U0001f4a5\u202e\u0301",
            "\x00\x01\x1f\x7f", "fz-_.:@#"])
        return "".join(r.choices(alphabet, k=length))

    # Hostile values.

    def hostile_value(self):
        r = self.rng
        choice = r.randrange(24)
        return [
            lambda: r.choice([0, -1, 1, 123, -(1 << 31)]),
            lambda: r.choice([(1 << 63) - 1, 1 << 63, -(1 << 63) - 1, 1 << 64, 10 ** 30, -(10 ** 40)]),
            lambda: r.choice([1.5, -0.0, 1e308, 2.5e-300, 3.0]),
            lambda: r.choice([True, False]),
            lambda: None,
            lambda: "",
            lambda: "x" * r.choices([1, 200, 5000, 70_000], weights=[10, 10, 5, 1])[0],
            lambda: [],
            lambda: {},
            lambda: [1, "a", None, {"b": []}],
            lambda: {"zz": 1, "$(x)": [None]},
            lambda: deep(r.randint(2, 40), r.choice(["list", "dict"])),
            lambda: deep(r.randint(500, 530), r.choice(["list", "dict"])),
            lambda: "\u0000a\u0000",
            lambda: "\ud800" + r.choice(["", "x", "\udc00"]),
            lambda: "\U0001f4a5" * r.randint(1, 50),
            lambda: "\u202e\u0301\ufeff\uffff",
            lambda: self.random_text(r.randint(1, 40)),
            lambda: r.choice(["$(", "#(x) y", "{'a' +}", ".(a, 0)", "%(a, 1)", "$(a,b,c)", "{}", "((", "a b", "!"]),
            lambda: r.choice(["2026-13-40T25:61:61Z", "yesterday", "0000-00-00T00:00:00Z", "2026-01-31", "-1"]),
            lambda: r.choice(["native ", "NATIVE", "template\u0000", "read ", "dismissed"]),
            lambda: r.choice(["AQID", "====", "A", "AQI", "AQ==", "!!!!", "QQ==\n"]),
            lambda: [self.random_text(5) for _ in range(r.randint(0, 100))],
            lambda: {self.random_text(3): self.random_text(3) for _ in range(r.randint(0, 30))},
        ][choice]()

    @staticmethod
    def slots(value, path=()):
        """Every (container, key) in a payload, for replacing one value."""
        found = []
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, child in item.items():
                    found.append((item, key))
                    stack.append(child)
            elif isinstance(item, list):
                for index, child in enumerate(item):
                    found.append((item, index))
                    stack.append(child)
        return found

    def containers(self, value):
        found = [value] if isinstance(value, dict) else []
        for container, key in self.slots(value):
            if isinstance(container[key], dict):
                found.append(container[key])
        return found

    # Request-socket inputs.

    def pick(self, kinds):
        """A generator by weight, among those not left out (a health request when all are)."""
        allowed = [kind for kind in kinds if kind not in self.excluded]
        if not allowed:
            return "control"
        return self.rng.choices(allowed, weights=[kinds[kind] for kind in allowed])[0]

    def request_case(self, service, kinds, types):
        return getattr(self, "req_" + self.pick(kinds).replace("-", "_"))(service, types)

    def pick_type(self, types):
        return self.rng.choice(types)

    def req_random(self, service, types):
        r = self.rng
        length = r.choice([0, 1, 2, r.randint(3, 64), r.randint(64, 600), r.randint(600, 5000)])
        data = r.randbytes(length)
        if r.random() < 0.3 and data:
            data = b"{" + data
        return Case([b"", data], "random")

    def req_frames(self, service, types):
        r = self.rng
        body = dump(self.envelope("health", {}, None))
        choice = r.randrange(9)
        if choice == 0:
            frames = [b""]
        elif choice == 1:
            frames = [b"", b""]
        elif choice == 2:
            frames = [b"", body, body]
        elif choice == 3:
            frames = [b"", b"", body]
        elif choice == 4:
            frames = [b""] + [r.randbytes(r.randint(0, 8)) for _ in range(r.randint(2, 1000))]
        elif choice == 5:
            frames = [b"x", b"", body]
        elif choice == 6:
            frames = [body, b""]
        elif choice == 7:
            frames = [b"", body, b""]
        else:
            frames = [b"", b"\x00"] + [b""] * r.randint(1, 50)
        return Case(frames, "frames")

    def req_oversize(self, service, types):
        limit = PUBLISH_MAX_BYTES if service == "nh-publish" else MAX_MESSAGE_BYTES
        size = limit + self.rng.randint(1, 2000)
        head = dump(self.envelope("health", {"pad": ""}, None))[:-3]
        body = head + b"a" * (size - len(head) - 3) + b'"}}'
        return Case([b"", body], "oversize")

    def req_envelope(self, service, types):
        r = self.rng
        kind = self.pick_type(types)
        value = self.envelope(kind, self.base_payload(kind), self.some_auth(kind))
        choice = r.randrange(22)
        if choice == 0:
            del value["v"]
        elif choice == 1:
            value["v"] = r.choice(["1", True, None, [], {}, 1.5, 1e20, -1, 0, 2, 255, 1 << 63, 10 ** 30])
        elif choice == 2:
            del value["type"]
        elif choice == 3:
            value["type"] = r.choice(["", 1, None, [], {}, True])
        elif choice == 4:
            value["type"] = r.choice(["nope.type", "HEALTH", "health ", "health\u0000", "error", "ack", "agent.hello",
                                      "installation.reply", "user.changed", self.random_text(r.randint(1, 30))])
        elif choice == 5:
            value["type"] = r.choice(sorted(set(PAYLOADS) - SERVICE_TYPES[service]) or ["nope"])
        elif choice == 6:
            del value["id"]
        elif choice == 7:
            value["id"] = r.choice([1, None, [], {}, True, 1.5])
        elif choice == 8:
            value["auth"] = r.choice([1, [], {"sr": 1}, True, 0.5])
        elif choice == 9:
            del value["payload"]
        elif choice == 10:
            value["payload"] = r.choice([None, [], "x", 1, True, [{}]])
        elif choice == 11:
            value[r.choice(["extra", "V", "Type", "payload ", "\u0000", "auth2"])] = r.choice([1, "x", {}, [None]])
        elif choice == 12:
            return Case([b"", dump(r.choice([[], [value], "envelope", 1, None, True, [1, 2]]))], "envelope")
        elif choice == 13:
            value["id"] = self.random_text(r.randint(0, 300))
        elif choice == 14:
            value["id"] = "x" * r.choices([10_000, 200_000], weights=[9, 1])[0]
        elif choice == 15:
            value["v"] = r.choice([2, 0, -1, 1000])
            value["type"] = "nope.type"
        elif choice == 16:
            body = dump(value)
            return Case([b"", body.replace(b'"v":1', b'"v":1.0', 1)], "envelope")
        elif choice == 17:
            body = dump(value)
            return Case([b"", body.replace(b'"v":1', b'"v":1e0', 1)], "envelope")
        elif choice == 18:
            body = dump(value)
            return Case([b"", body[:-1] + b',"id":"dup"}'], "envelope")
        elif choice == 19:
            return Case([b"", dump(value, pretty=True)], "envelope")
        elif choice == 20:
            return Case([dump(value)], "envelope")  # no delimiter: the reply comes back without one
        else:
            value["auth"] = None
        return Case([b"", dump(value)], "envelope", dumped=True)

    def req_schema(self, service, types):
        r = self.rng
        kind = self.pick_type(types)
        payload = self.base_payload(kind)
        auth = self.valid_auth(kind) if r.random() < 0.8 else self.some_auth(kind)
        choice = r.randrange(10)
        slots = self.slots(payload)
        if choice < 5 and slots:
            container, key = r.choice(slots)
            container[key] = self.hostile_value()
        elif choice == 5 and slots:
            container, key = r.choice(slots)
            del container[key]
        elif choice == 6:
            target = r.choice(self.containers(payload))
            target[r.choice(["zz", "extra", "Format", "installationID", "\u00e9", ""])] = r.choice(
                [1, "x", None, [], {"a": 1}])
        elif choice == 7:
            payload = self.hostile_value()
        elif choice == 8:
            body = dump(self.envelope(kind, payload, auth))
            return Case([b"", self.inject_bad_utf8(body)], "schema")
        else:
            body = dump(self.envelope(kind, payload, auth))
            roll = r.random()
            depth = r.randint(100, 480) if roll < 0.5 else r.randint(520, 3000) if roll < 0.97 else r.randint(3000, 100_000)
            nested = deep_text(depth, r.choice(["list", "dict"])).encode()
            field = r.choice([b'"payload":', b'"auth":', b'"id":'])
            if field in body:
                index = body.index(field) + len(field)
                end = self.value_end(body, index)
                body = body[:index] + nested + body[end:]
            return Case([b"", body], "schema")
        return Case([b"", dump(self.envelope(kind, payload, auth), ascii_only=r.random() < 0.7)], "schema", dumped=True)

    @staticmethod
    def value_end(body, start):
        """Where the JSON value starting at `start` in a compact document ends, roughly."""
        depth = 0
        in_string = False
        index = start
        while index < len(body):
            c = body[index]
            if in_string:
                if c == 0x5C:
                    index += 1
                elif c == 0x22:
                    in_string = False
                    if depth == 0:
                        return index + 1
            elif c == 0x22:
                in_string = True
            elif c in b"[{":
                depth += 1
            elif c in b"]}":
                if depth == 0:
                    return index
                depth -= 1
                if depth == 0:
                    return index + 1
            elif c == 0x2C and depth == 0:
                return index
            index += 1
        return index

    def inject_bad_utf8(self, body):
        r = self.rng
        bad = r.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xfe\xfe"])
        quotes = [i for i, c in enumerate(body) if c == 0x22]
        if not quotes:
            return body + bad
        index = r.choice(quotes) + 1
        return body[:index] + bad + body[index:]

    def req_auth(self, service, types):
        r = self.rng
        kind = self.pick_type(types)
        payload = self.base_payload(kind)
        choice = r.randrange(6)
        if choice == 0:
            auth = None
        elif choice == 1:
            auth = ""
        elif choice == 2:
            auth = self.tokens["listen"]
        elif choice == 3:
            auth = self.forged_user_token()
        else:
            auth = self.forged_sas()
        if kind == "user.token":
            payload["credential"] = r.choice([self.forged_user_token(), self.tokens["user"], self.tokens["expired_credential"]])
        value = self.envelope(kind, payload, auth)
        if r.random() < 0.1:
            value.pop("auth", None)
        return Case([b"", dump(value)], "auth", dumped=True)

    def req_semantic(self, service, types):
        kind = self.pick_type(types)
        maker = getattr(self, "bad_" + kind.replace(".", "_"), None)
        if maker is None:
            return self.req_schema(service, types)
        payload, codes = maker()
        return Case([b"", dump(self.envelope(kind, payload, self.valid_auth(kind)))], "semantic", semantic=codes, dumped=True)

    def req_mutate(self, service, types):
        r = self.rng
        kind = self.pick_type(types)
        body = dump(self.envelope(kind, self.base_payload(kind), self.some_auth(kind)))
        other = None
        if r.random() < 0.2:
            other_kind = self.pick_type(types)
            other = dump(self.envelope(other_kind, self.base_payload(other_kind), self.some_auth(other_kind)))
        mutated = self.mutate(body, other)
        if deletes_seed(mutated):
            return self.req_schema(service, types)
        return Case([b"", mutated], "mutate", dumped=not self.repeats)

    def req_fixture(self, service, types):
        r = self.rng
        # A fixture of a type this socket is not sent (publish's user.post answers later, by id) stays out.
        fixtures = [(name, body) for name, body in self.fixtures
                    if name[:-5] in types or name[:-5] not in SERVICE_TYPES[service]]
        name, body = r.choice(fixtures)
        if r.random() < 0.5:
            value = json.loads(body)
            value["id"] = self.next_id()
            kind = value.get("type")
            value["auth"] = r.choice([self.valid_auth(kind), self.tokens["listen"], "token", None])
            body = dump(value)
        if r.random() < 0.8:
            body = self.mutate(body)
        if deletes_seed(body):
            return self.req_schema(service, types)
        return Case([b"", body], "fixture")

    def req_control(self, service, types):
        return Case([b"", dump(self.envelope("health", {}, None))], "control", control=True, dumped=True)

    def mutate(self, data, other=None):
        """Bit flips, byte changes, insertions, deletions, repeats, truncation and splices.
        `self.repeats` tells afterwards whether a name may now appear twice in an object."""
        r = self.rng
        self.repeats = False
        data = bytearray(data)
        for _ in range(r.choice([1, 1, 1, 2, 3, 8])):
            if not data:
                data = bytearray(b"{")
            choice = r.randrange(12)
            index = r.randrange(len(data))
            if choice < 3:
                data[index] ^= 1 << r.randrange(8)
            elif choice == 3:
                data[index] = r.randrange(256)
            elif choice == 4:
                data[index:index] = r.randbytes(r.randint(1, 8))
            elif choice == 5:
                del data[index:index + r.randint(1, 16)]
            elif choice == 6:
                self.repeats = True
                end = min(len(data), index + r.randint(1, 64))
                data[index:index] = data[index:end] * r.randint(1, 4)
            elif choice == 7:
                del data[index:]
            elif choice == 8 and other:
                self.repeats = True
                cut = r.randrange(len(other))
                data = data[:index] + bytearray(other[cut:])
            elif choice == 9:
                self.repeats = True
                token = r.choice([b"{", b"}", b"[", b"]", b",", b":", b'"', b"null", b"\\u0000", b"\\ud800", b"1e999",
                                  b"-", b"true", b'"v":1,', b"\\", b" "])
                data[index:index] = token
            elif choice == 10:
                other_index = r.randrange(len(data))
                data[index], data[other_index] = data[other_index], data[index]
            else:
                data[index] = r.choice(b'"{}[],:0123456789-+.eE\\ ')
        return bytes(data)

    # Directed inputs: sent first in every run, so that a short run covers them too.

    def directed(self, service, types):
        cases = []

        def add(kind, payload, codes, auth=None, raw_payload=None):
            value = self.envelope(kind, payload, auth if auth is not None else self.valid_auth(kind))
            body = dump(value)
            if raw_payload is not None:
                body = body.replace(dump(payload), raw_payload, 1)
            cases.append(Case([b"", body], "directed", semantic=codes))

        # A payload that is not an object, for a type without fields.
        for kind in ("health", "metrics"):
            add(kind, {}, {"invalid_payload"}, raw_payload=b"null")
            add(kind, {}, {"invalid_payload"}, raw_payload=b"[1]")
        body = dump(self.envelope("health", {}, None))
        cases.append(Case([b"", body[:-1] + b",}"], "directed"))
        if service == "nh-registry":
            add("registry.snapshot", {}, {"invalid_payload"}, raw_payload=b'"x"')
            # A tag given twice: stored once, or refused with a code, never an internal error.
            add("installation.upsert", {"installation": {"installationId": "fz-0", "platform": "gcm", "pushChannel": "fz-channel",
                                                         "tags": ["fz-a", "fz-a"]}}, None)
            add("installation.patch", {"installationId": "fz-1", "operations": [
                {"op": "replace", "path": "/tags", "value": ["fz-b", "fz-b"]}]}, None)
            add("installation.upsert", {"installation": {"installationId": "fz-0", "platform": "gcm", "pushChannel": "c",
                                                         "tags": ["fz-a"], "templates": {"t": {"body": "[" * 600 + "]" * 600}}}},
                {"invalid_template"})
        if service == "nh-sync":
            add("user.history", {}, {"invalid_payload"}, raw_payload=b"[]")
        if service == "nh-publish" and "notification.send" in types:
            for depth in (1_000, 100_000):
                add("notification.send", {"format": "native", "body": "{}", "tagExpression": "(" * depth + "a"},
                    {"invalid_expression"})
                add("notification.send", {"format": "native", "body": "{}", "tagExpression": "!" * depth + "fz-nobody"}, None)
            add("rich.send", {"message": "m", "richType": "image", "contentType": "image/png", "payload": "AQID",
                              "tagExpression": "(" * 100_000 + "a"}, {"invalid_expression"})
        if service == "nh-dispatch":
            add("notification.outcome", {"notificationId": "x" * 100_000}, {"not_found"})
        if service == "nh-agent":
            for categories in (["a b"], [""], ["caf\u00e9"]):
                add("agent.categories", {"categories": categories}, None)
        return cases

    def agent_directed(self):
        texts = [b"", b"hello", b"hello\n1\n" + b"x" * 500_000, b"ack\n" + b"n\n" * 200_000, b"hello\n1\nfuzz-agent",
                 b"hello\r\n1\r\nfuzz-agent", b"deliver\n" * 10, b"\xff\xfe"]
        return [Case([t], "directed") for t in texts] + [Case([b"", b"{}"], "directed"), Case([b"x"] * 1000, "directed")]

    # Semantically invalid requests: well-typed, fully authorized, and still wrong.

    def bad_notification_send(self):
        r = self.rng
        payload = {"format": "native", "body": '{"m":1}', "tagExpression": "fz-nobody", "timeToLive": 60}
        choice = r.randrange(16)
        if choice == 0:
            payload["tagExpression"] = r.choice([
                "(", ")", "a &&", "&& a", "a b", "a & b", "a | b", "a || || b", "!(", "()", "$Foo:x", "$InstallationId:",
                "a && b && c && d && e && f && g", " || ".join(f"t{i}" for i in range(21)), "a" * 121, "caf\u00e9",
                "a,b", "", " ", "\t", "(a || b", "a)"])
            return payload, {"invalid_expression"}
        if choice in (1, 2):
            # Deep nesting, now and then deep enough to take a recursive parser's stack.
            depth = r.randint(2000, 200_000) if r.random() < 0.02 else r.randint(10, 2000)
            if choice == 1:
                payload["tagExpression"] = "(" * depth + "a"
                return payload, {"invalid_expression"}
            payload["tagExpression"] = "!" * depth + "fz-nobody"
            return payload, None
        if choice == 3:
            payload["userId"] = "fz-nobody"
            return payload, {"invalid_argument"}
        if choice == 4:
            del payload["tagExpression"]
            payload[r.choice(["installationId", "userId"])] = r.choice(["", "a b", "x/y", "\u00e9", "a\u0000"])
            return payload, {"invalid_argument"}
        if choice == 5:
            payload["scheduledAt"] = r.choice([PAST, iso(-5), iso(8 * 86_400), FAR_FUTURE])
            return payload, {"invalid_argument"}
        if choice == 6:
            del payload["body"]
            return payload, {"invalid_payload"}
        if choice == 7:
            payload["properties"] = {"m": "x"}
            return payload, {"invalid_payload"}
        if choice == 8:
            payload["body"] = '{"m":"' + "x" * 70_000 + '"}'
            return payload, {"payload_too_large"}
        if choice == 9:
            payload["body"] = r.choice(["not json", "{", "", "{'a':1}", "[1,", "nul"])
            return payload, {"invalid_payload"}
        if choice == 10:
            payload = {"format": "template", "tagExpression": "fz-nobody"}
            return payload, {"invalid_payload"}
        if choice == 11:
            payload = {"format": "template", "properties": {"m": "x"}, "body": "{}", "tagExpression": "fz-nobody"}
            return payload, {"invalid_payload"}
        if choice == 12:
            payload = {"format": "template", "properties": {"m": "x" * 70_000}, "tagExpression": "fz-nobody"}
            return payload, {"payload_too_large"}
        if choice == 13:
            payload["timeToLive"] = r.choice([0, -1, 30 * 86_400 + 1, (1 << 63) - 1, -(1 << 63)])
            return payload, {"invalid_argument"}
        if choice == 14:
            payload["rich"] = {"richId": "x", "richType": "image", "message": "m", "contentType": "a/b", "size": 1}
            return payload, {"invalid_argument"}
        payload["installationId"] = "fz-nobody"
        return payload, {"invalid_argument"}

    def bad_rich_send(self):
        r = self.rng
        data = r.choice(self.rich_payloads)
        payload = {"message": "m", "richType": "image", "contentType": "image/png",
                   "payload": base64.b64encode(data).decode(), "tagExpression": "fz-nobody", "timeToLive": 60}
        choice = r.randrange(8)
        if choice == 0:
            payload["payload"] = ""
            return payload, {"invalid_payload"}
        if choice == 1:
            payload["contentType"] = r.choice(["png", "/png", "image/", "a/b/c", "", "x/" + "y" * 200])
            return payload, {"invalid_argument"}
        if choice == 2:
            payload["richType"] = r.choice(["", "x" * 33])
            return payload, {"invalid_argument"}
        if choice == 3:
            payload["message"] = r.choice(["", "x" * 1025])
            return payload, {"invalid_argument"}
        if choice == 4:
            payload["sha256"] = r.choice(["00" * 32, "nope", ""])
            return payload, {"invalid_argument"}
        if choice == 5:
            payload["timeToLive"] = r.choice([0, -5, 10 ** 9])
            return payload, {"invalid_argument"}
        if choice == 6:
            payload["tagExpression"] = r.choice(["((", "a &&", "!"])
            return payload, {"invalid_expression"}
        payload["userId"] = "fz-nobody"
        return payload, {"invalid_argument"}

    def bad_notification_cancel(self):
        return {"notificationId": f"fz-none-{self.rng.randrange(1000)}"}, {"not_found"}

    def bad_notification_outcome(self):
        return {"notificationId": self.rng.choice(["fz-none", "", "../x", "\u00e9" * 30])}, {"not_found"}

    def bad_installation_upsert(self):
        r = self.rng
        installation = {"installationId": f"fz-{r.randrange(10)}", "platform": "gcm", "pushChannel": "fz-channel",
                        "tags": ["fz-a"]}
        choice = r.randrange(15)
        if choice == 0:
            installation["installationId"] = r.choice(["", "a b", "x/y", "a" * 201, "\u00e9", "a\u0000"])
            return {"installation": installation}, {"invalid_argument"}
        if choice == 1:
            installation["platform"] = r.choice(["", "p" * 33, "fuzz", "ios"])
            return {"installation": installation}, {"invalid_argument"}
        if choice == 2:
            installation["pushChannel"] = r.choice(["", "c" * 1025])
            return {"installation": installation}, {"invalid_argument"}
        if choice == 3:
            installation["tags"] = r.choice([[""], ["a b"], ["t" * 121], ["\u00e9"], [f"t{i}" for i in range(61)], ["a", "(b)"]])
            return {"installation": installation}, {"invalid_tag"}
        if choice == 4:
            installation["userId"] = r.choice(["", "a b", "u" * 121])
            return {"installation": installation}, {"invalid_argument"}
        if choice == 5:
            installation["expirationTime"] = r.choice([PAST, iso(-10)])
            return {"installation": installation}, {"invalid_argument"}
        if choice == 6:
            installation["templates"] = {f"t{i}": {"body": "{}"} for i in range(21)}
            return {"installation": installation}, {"invalid_template"}
        if choice == 7:
            installation["templates"] = {r.choice(["", "a b", "n" * 65, "\u00e9"]): {"body": "{}"}}
            return {"installation": installation}, {"invalid_template"}
        if choice == 8:
            body = r.choice(["not json", "{", '{"a":"$(x"}', '{"a":"#(x) y"}', '{"a":"{\'a\' +}"}', '{"a":".(x, 0)"}',
                             '{"a":"%(x, 3)"}', '{"a":"$(x, -1)"}', '{"a":"$()"}', '{"a":"$(a,1,2)"}', '{"a":"{}"}',
                             '{"a":"{$(x) $(y)}"}', '{"a":"{\'open}"}', '[' * 600 + ']' * 600, '{"a":"$(x, 99999999999999999999)"}',
                             '{"a":"#(x, 2)"}', '{"a":"$(\'x)"}', '{"a":"{+}"}'])
            installation["templates"] = {"t": {"body": body}}
            return {"installation": installation}, {"invalid_template"}
        if choice == 9:
            installation["templates"] = {"t": {"body": "{}", "expiry": r.choice(["$(", "#(x) y", "{'a' +}", "$()"])}}
            return {"installation": installation}, {"invalid_template"}
        if choice == 10:
            installation["templates"] = {"t": {"body": "{}", "tags": r.choice([[""], ["a b"], ["t" * 121]])}}
            return {"installation": installation}, {"invalid_tag"}
        if choice == 11:
            depth = r.randint(20, 500)
            installation["templates"] = {"t": {"body": "[" * depth + '"$(' + "]" * depth}}
            return {"installation": installation}, {"invalid_template"}
        if choice == 12:
            installation["templates"] = {"t": {"body": '"' + "$(a)" * 10_000 + '$("'}}
            return {"installation": installation}, {"invalid_template"}
        if choice == 13:
            installation["templates"] = {"t": {"body": '"{' + "$(a) + " * 5000 + '}"'}}
            return {"installation": installation}, {"invalid_template"}
        installation["templates"] = {"t": {"body": '{"a":"' + "\\u0000" + '$("}'}}
        return {"installation": installation}, {"invalid_template"}

    def bad_installation_patch(self):
        r = self.rng
        existing = f"fz-{r.randrange(10)}"
        choice = r.randrange(11)
        if choice == 0:
            return {"installationId": "fz-missing", "operations": [{"op": "add", "path": "/tags", "value": "a"}]}, {"not_found"}
        if choice == 1:
            return {"installationId": existing, "operations": []}, {"invalid_argument"}
        if choice == 2:
            op = r.choice(["move", "copy", "test", "", "ADD", "add "])
            return {"installationId": existing, "operations": [{"op": op, "path": "/tags", "value": "a"}]}, {"invalid_argument"}
        if choice == 3:
            path = r.choice(["tags", "", "/", "/nope", "/tags/a/b", "/templates", "/templates/t/x/y", "/installationId",
                             "/platform", "/templates/u/nope"])
            codes = {"invalid_argument", "not_found"}
            return {"installationId": existing, "operations": [{"op": "add", "path": path, "value": "a"}]}, codes
        if choice == 4:
            value = r.choice([1, True, None, {}, [1], [None], {"a": "b"}])
            path = r.choice(["/tags", "/pushChannel", "/userId"])
            return {"installationId": existing, "operations": [{"op": "replace", "path": path, "value": value}]}, \
                {"invalid_argument"}
        if choice == 5:
            tag = r.choice(["a b", "", "t" * 121, "\u00e9"])
            return {"installationId": existing, "operations": [{"op": "add", "path": "/tags", "value": tag}]}, {"invalid_tag"}
        if choice == 6:
            return {"installationId": existing, "operations": [{"op": "remove", "path": "/tags/fz-never"}]}, {"not_found"}
        if choice == 7:
            return {"installationId": existing, "operations": [
                {"op": "add", "path": "/templates/x", "value": r.choice([1, "s", {}, {"body": 1}, {"body": "{}", "zz": 1}])}]}, \
                {"invalid_argument", "unknown_field"}
        if choice == 8:
            return {"installationId": existing, "operations": [
                {"op": "add", "path": "/templates/x", "value": {"body": r.choice(["{", '"$("', '"#(a) b"'])}}]}, {"invalid_template"}
        if choice == 9:
            return {"installationId": existing, "operations": [{"op": "remove", "path": "/templates/fz-never"}]}, {"not_found"}
        return {"installationId": existing, "operations": [
            {"op": "add", "path": "/tags", "value": [f"p{i}" for i in range(61)]}]}, {"invalid_tag"}

    def bad_installation_get(self):
        return {"installationId": self.rng.choice(["fz-missing", "", "a b", "\u00e9" * 10])}, {"not_found"}

    def bad_installation_delete(self):
        return {"installationId": self.rng.choice(["fz-missing", "", "a b"])}, {"not_found"}

    def bad_installation_list(self):
        return {"limit": self.rng.choice([0, -1, 1001, (1 << 63) - 1, -(1 << 63)])}, {"invalid_argument"}

    def bad_user_post(self):
        r = self.rng
        payload = {"userId": "fz-user", "appNotificationId": "fz-app-0", "visual": {"title": "t", "body": "b"}}
        choice = r.randrange(10)
        if choice == 9:
            # Encrypted content that is not one RFC 8291 record (or is beside visual content).
            record = base64.urlsafe_b64encode(bytes(16) + (4096).to_bytes(4, "big") + bytes([65, 4]) + bytes(64 + 17)).rstrip(b"=").decode()
            payload["encrypted"] = r.choice(["not base64!", "", "QUJD", record[:60], record])
            if payload["encrypted"] != record:
                del payload["visual"]
            return payload, {"invalid_payload"}
        if choice == 0:
            payload["userId"] = r.choice(["", "a b", "u" * 121, "\u00e9"])
            return payload, {"invalid_argument"}
        if choice == 1:
            payload["appNotificationId"] = r.choice(["", "a" * 201])
            return payload, {"invalid_argument"}
        if choice == 2:
            del payload["visual"]
            return payload, {"invalid_payload"}
        if choice == 3:
            payload["visual"] = {"title": "", "body": ""}
            return payload, {"invalid_payload"}
        if choice == 4:
            payload["raw"] = "x" * 70_000
            return payload, {"payload_too_large"}
        if choice == 5:
            payload["priority"] = r.choice(["urgent", "", "HIGH"])
            return payload, {"invalid_argument"}
        if choice == 6:
            payload["group"] = r.choice(["", "g" * 101])
            return payload, {"invalid_argument"}
        if choice == 7:
            payload["expiresAt"] = r.choice([PAST, iso(-5), iso(31 * 86_400), FAR_FUTURE])
            return payload, {"invalid_argument"}
        payload["visual"] = {"title": "t" * 40_000, "body": "b" * 30_000}
        return payload, {"payload_too_large"}

    def bad_user_changes(self):
        r = self.rng
        if r.random() < 0.5:
            return {"cursor": 0, "limit": r.choice([0, -1, 101, (1 << 63) - 1])}, {"invalid_argument"}
        # A cursor ahead of the user's history is one the store cannot have handed out in it.
        return {"cursor": r.choice([10 ** 12, (1 << 64) - 1])}, {"history_rewound"}

    def bad_user_state(self):
        r = self.rng
        if r.random() < 0.5:
            return {"id": "fz-missing"}, {"invalid_argument"}
        return {"id": r.choice(["fz-missing", "", "\u00e9"]), "userActionState": "dismissed"}, {"not_found"}

    def bad_user_delete(self):
        return {"id": self.rng.choice(["fz-missing", "", "x" * 300])}, {"not_found"}

    def bad_user_credential(self):
        r = self.rng
        if r.random() < 0.5:
            return {"userId": r.choice(["", "a b", "u" * 121, "\u00e9"])}, {"invalid_argument"}
        return {"userId": "fz-user", "lifetime": r.choice([0, 59, -1, 5 * 365 * 86_400 + 1, (1 << 63) - 1])}, {"invalid_argument"}

    def bad_user_token(self):
        r = self.rng
        return {"credential": r.choice([self.forged_user_token(), self.tokens["user"], self.tokens["expired_credential"]])}, \
            {"unauthorized"}

    def bad_agent_categories(self):
        r = self.rng
        categories = r.choice([[""], ["a b"], ["t" * 121], ["caf\u00e9"], ["ok", "(x)"], [f"c{i}" for i in range(61)],
                               ["x\ny"], ["$UserId:x"]])
        return {"categories": categories}, None

    # Agent-channel inputs.

    def agent_case(self, kinds):
        kind = self.pick(kinds)
        if kind == "control":
            return Case([b"hello\n1\nfz-nobody"], "control")
        return getattr(self, "agent_" + kind.replace("-", "_"))()

    def agent_random(self):
        r = self.rng
        length = r.choice([1, 2, r.randint(3, 64), r.randint(64, 2000)])
        data = r.randbytes(length)
        if r.random() < 0.5:
            data = r.choice([b"hello\n", b"ack\n", b"deliver\n", b"welcome\n"]) + data
        return Case([data], "random")

    def agent_frames(self):
        r = self.rng
        hello = b"hello\n1\nfz-nobody"
        choice = r.randrange(7)
        if choice == 0:
            frames = [b""]
        elif choice == 1:
            frames = [b"", dump(self.envelope("agent.hello", {"installationId": "fuzz-agent"}, None))]
        elif choice == 2:
            frames = [hello, hello]
        elif choice == 3:
            frames = [hello, b""]
        elif choice == 4:
            frames = [b"", b"", hello]
        elif choice == 5:
            frames = [r.randbytes(r.randint(0, 6)) for _ in range(r.randint(2, 300))]
            if frames[0] == b"":
                frames[0] = b"x"
        else:
            frames = [dump(self.envelope("agent.hello", {"installationId": "fuzz-agent"}, None))]
        return Case(frames, "frames")

    def agent_oversize(self):
        size = MAX_MESSAGE_BYTES + self.rng.randint(1, 4000)
        return Case([b"ack\n" + b"x" * (size - 4)], "oversize")

    def agent_hello(self):
        r = self.rng
        installation = r.choice(["fz-nobody", "fuzz-agent", "fz-1", "", "a\nb", "x" * 5000, "\u00e9", "fz-1\t"])
        version = r.choice(["1", "1", "1", "2", "", "01", " 1", "1.0", "\u0661"])
        layout = r.randrange(5)
        if layout == 0:
            text = f"hello\n{version}\n{installation}"
        elif layout == 1:
            text = f"hello\n{version}"
        elif layout == 2:
            text = "hello"
        elif layout == 3:
            text = f"hello\n{version}\n{installation}\n{installation}"
        else:
            text = f"hello\n\n{installation}"
        return Case([text.encode("utf-8")], "hello")

    def agent_ack(self):
        r = self.rng
        lines = []
        count = r.choice([0, 1, 3, 50, 5000])
        for _ in range(min(count, 50)):
            choice = r.randrange(5)
            if choice == 0:
                lines.append(f"n{r.randrange(100)}/fuzz-agent/default")
            elif choice == 1:
                lines.append(f"!n{r.randrange(100)}/x\treason {self.random_text(5)}")
            elif choice == 2:
                lines.append("!no-tab")
            elif choice == 3:
                lines.append("")
            else:
                lines.append(self.random_text(r.randint(0, 20)).replace("\r", ""))
        lines *= max(1, count // 50)
        return Case([("ack\n" + "\n".join(lines)).encode("utf-8", "surrogatepass")], "ack")

    def agent_verb(self):
        r = self.rng
        text = r.choice([
            "welcome\nfuzz-agent\n3", "welcome\nx\nthree", "welcome\nx", f"signal\nfz-user\n{r.choice([1, -1, 1 << 64, 'x'])}",
            "signal\nx", "error\nforbidden\nmessage", "error", "deliver\nd\nn\nt\n1800000000123\n\n\n{}",
            "deliver\nd\nn\nt\nsoon\n\n\n{}", "deliver\n\nn\nt\n1\n\n\n{}", "deliver\nd\nn", 
            'deliver\nd\nn\n\n1\n{"richId":"a","richType":"b","message":"c","contentType":"d","size":1}\nticket\n{}',
            'deliver\nd\nn\n\n1\n{"richId":1}\nticket\n{}', "deliver\nd\nn\n\n1\nnot json\nticket\n{}",
            "HELLO\n1\nx", "hello \n1\nx", " ack", "bye\n", "hello\r\n1\r\nx",
            "bye\nfz-nobody", "bye\nx\n", "bye\n\n", "bye", "bye\nfz-nobody\nextra"])
        return Case([text.encode("utf-8")], "verb")

    def agent_fixture(self):
        r = self.rng
        name, data = r.choice(self.wire_fixtures)
        return Case([self.mutate(data) if r.random() < 0.85 else data], "fixture")


# ---------------------------------------------------------------------------------------------
# HTTP inputs.

API = "api-version=2015-01"
XML_ERROR = re.compile(rb"^<Error><Code>(\d+)</Code><Detail>([a-z_]+): ", re.S)


class HttpCase:
    """A request over a raw socket (`raw`, judged on its status lines only) or a well-formed one
    (`method` …), whose answer must be the gateway's XML error with one of `codes`."""
    __slots__ = ("kind", "raw", "method", "target", "headers", "body", "codes", "via_requests", "may_wait", "control",
                 "responses", "may_accept", "matrix")

    def __init__(self, kind, raw=None, method=None, target=None, headers=None, body=b"", codes=None,
                 via_requests=False, may_wait=False, control=False, responses=1, may_accept=False, matrix=None):
        self.kind = kind
        # The Matrix push gateway's request: its answer is Matrix's, `{"rejected": […]}` listing every
        # one of these pushkeys (none is an endpoint of the hub's), or `{"errcode": …}` with one of `codes`.
        self.matrix = matrix
        # A well-formed request the gateway may carry out; it must not fail with an internal error.
        self.may_accept = may_accept
        self.responses = responses
        self.raw = raw
        self.method = method
        self.target = target
        self.headers = headers or {}
        self.body = body
        self.codes = codes
        self.via_requests = via_requests
        self.may_wait = may_wait
        self.control = control

    def bytes(self, host):
        if self.raw is not None:
            return self.raw
        lines = [f"{self.method} {self.target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + self.body


class HttpGenerator:
    def __init__(self, rng, tokens, host, excluded):
        self.rng = rng
        self.tokens = tokens
        self.host = host
        self.excluded = excluded

    def case(self):
        r = self.rng
        kinds = {"raw": 30, "auth": 15, "version": 6, "installation": 14, "patch": 6, "messages": 14, "users": 10,
                 "routes": 5, "matrix": 4, "control": 0.3}
        allowed = [kind for kind in kinds if kind not in self.excluded] or ["control"]
        kind = r.choices(allowed, weights=[kinds[k] for k in allowed])[0]
        case = getattr(self, "http_" + kind)()
        case.via_requests = case.raw is None and r.random() < 0.2
        return case

    def directed(self):
        tags = {"Authorization": self.tokens["full"], "ServiceBusNotification-Format": "template",
                "ServiceBusNotification-Tags": "(" * 20_000 + "a"}
        return [
            HttpCase("directed", method="POST", target=f"/hub/messages?{API}", headers=tags, body=b'{"m":"x"}',
                     codes={"invalid_expression"}),
            HttpCase("directed", method="PUT", target=f"/hub/installations/fz-h0?{API}",
                     headers={"Authorization": self.tokens["full"]}, body=b'{"installationId":"fz-h0",}',
                     codes={"invalid_payload"}),
            HttpCase("directed", method="PUT", target=f"/hub/installations/fz-hdup?{API}",
                     headers={"Authorization": self.tokens["full"]}, may_accept=True,
                     body=b'{"installationId":"fz-hdup","platform":"gcm","pushChannel":"fz-channel","tags":["fz-a","fz-a"]}'),
        ]

    def sas(self, right="full"):
        return self.tokens[right]

    def http_control(self):
        return HttpCase("control", method="GET", target="/metrics", control=True)

    def http_raw(self):
        r = self.rng
        host = self.host
        path = f"/hub/installations/fz-{r.randrange(10)}?{API}"
        choice = r.randrange(22)
        may_wait = False
        responses = 1
        if choice == 0:
            data = r.randbytes(r.randint(1, 400)) + b"\r\n\r\n"
            may_wait = True
        elif choice == 1:
            data = r.choice([b"GET\r\n\r\n", b"GET  HTTP/1.1\r\n\r\n", b"\r\n\r\nGET\r\n\r\n", b" / HTTP/1.1\r\n\r\n",
                             b"GET / HTTP/1.1 extra\r\nHost: h\r\n\r\n", b"GET / FOO/1.1\r\nHost: h\r\n\r\n",
                             b"GET /hub HTTP/9.9\r\nHost: h\r\n\r\n", b"GET /hub HTTP/1.1\r\n\r\n",
                             b"G\x00T /hub HTTP/1.1\r\nHost: h\r\n\r\n", b"GET /hub\x00x HTTP/1.1\r\nHost: h\r\n\r\n",
                             b"get /metrics HTTP/1.1\r\nHost: h\r\n\r\n", b"GET http://evil/hub/x HTTP/1.1\r\nHost: h\r\n\r\n",
                             b"GET hub/installations/x HTTP/1.1\r\nHost: h\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
                             + b"\r\n\r\n"])
        elif choice == 2:
            data = f"GET /hub/{'a' * r.choice([5000, 100_000])}?{API} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        elif choice == 3:
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {'x' * r.choice([10_000, 100_000])}\r\n\r\n".encode()
        elif choice == 4:
            headers = "".join(f"X-H{i}: {i}\r\n" for i in range(r.choice([100, 2000])))
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode()
        elif choice == 5:
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nBadHeader\r\n\r\n".encode()
        elif choice == 6:
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-A: a\x00b\r\n\r\n".encode()
        elif choice == 7:
            responses = 2
            length = r.choice(["-1", "abc", "99999999999999999999999", "1 2", "0x10", ""])
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n\r\n{{}}".encode()
        elif choice == 8:
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{{}}xyz".encode()
        elif choice == 9:
            data = (f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + r.choice(["zz\r\nab\r\n0\r\n\r\n", "-5\r\nab\r\n0\r\n\r\n", "ffffffffffffffffff\r\nab\r\n\r\n",
                                "2\r\nabcdef\r\n0\r\n\r\n"])).encode()
        elif choice == 10:
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGARBAGE\r\n\r\n".encode()
        elif choice == 11:
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {self.sas()}\r\nContent-Length: 5000\r\n\r\n{{\"a\":".encode()
            may_wait = True
        elif choice == 12:
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {self.sas()}\r\nContent-Length: 3\r\n\r\n{{\"installationId\":1}}".encode()
        elif choice == 13:
            data = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nnull".encode()
        elif choice == 14:
            data = f"GET {path} HTTP/1.0\r\n\r\n".encode()
        elif choice == 15:
            count = r.randint(2, 20)
            data = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n" * count).encode() + b"GARBAGE\r\n\r\n"
            responses = count + 1
        elif choice == 16:
            data = f"POST /hub/messages?{API} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {self.sas('listen')}\r\nContent-Length: 2\r\n\r\n{{}}".encode()
        elif choice == 17:
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: SharedAccessSignature sr=\xff\xfe&sig=\x80&se=1&skn=\xc0\r\n\r\n".encode("latin-1")
        elif choice == 18:
            data = f"GET {path}&api-version=2020-06&api-version=1999-01 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        elif choice == 19:
            data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode()
            may_wait = True
        elif choice == 20:
            data = f"GET {path} HTTP/1.1\r\n Host: {host}\r\n\tfolded\r\n\r\n".encode()
        else:
            data = f"DELETE /hub/installations/fz-1?{API} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {self.tokens['expired']}\r\n\r\n".encode()
        return HttpCase("raw", raw=data, may_wait=may_wait, responses=responses)

    def http_auth(self):
        r = self.rng
        target = r.choice([f"/hub/installations/fz-1?{API}", f"/hub/registrations?{API}", f"/hub/messages/x?{API}",
                           f"/hub/installations/fz-1?{API}"])
        method = "GET"
        token = r.choice(["", "Bearer x", self.tokens["expired"], self.tokens["wrong_key"], self.tokens["unknown_name"],
                          self.tokens["other_resource"], "SharedAccessSignature sr=&sig=&se=&skn=",
                          "SharedAccessSignature " + "&" * 50, self.tokens["full"].replace("sig=", "sig=%%"),
                          self.tokens["full"][:-5], "sharedaccesssignature " + self.tokens["full"][22:],
                          self.tokens["user"], "SharedAccessSignature sr=x&sig=y&se=99999999999999999999&skn=z"])
        headers = {"Authorization": token} if token else {}
        codes = {"unauthorized"}
        if r.random() < 0.3:
            method, target = "POST", f"/hub/messages?{API}"
            headers = {"Authorization": self.sas("listen"), "ServiceBusNotification-Format": "template"}
            codes = {"unauthorized"}
        elif r.random() < 0.2:
            target = f"/hub/registrations?{API}"
            headers = {"Authorization": self.sas("listen")}
            codes = {"unauthorized"}
        return HttpCase("auth", method=method, target=target, headers=headers, codes=codes)

    def http_version(self):
        r = self.rng
        version = r.choice(["", "api-version=", "api-version=2014-12", "api-version=2020-07", "api-version=abc",
                            "api-version=2015-13", "api-version=-1-1", "api-version=2015-00", "api-version=2015-01-01",
                            "api-version=99999999999999999999-01"])
        return HttpCase("version", method="GET", target=f"/hub/installations/fz-1?{version}",
                        headers={"Authorization": self.sas()}, codes={"invalid_argument"})

    def http_installation(self):
        r = self.rng
        ident = f"fz-h{r.randrange(10)}"
        good = {"installationId": ident, "platform": "gcm", "pushChannel": "fz-channel", "tags": ["fz-a"]}
        choice = r.randrange(12)
        if choice == 0:
            body, codes = r.choice([b"", b"{", b"not json", b"[]", b"null", b"1", b'"x"', b"{,}"]), {"invalid_payload"}
        elif choice == 1:
            bad = dict(good, extra=1)
            body, codes = json.dumps(bad).encode(), {"unknown_field"}
        elif choice == 2:
            bad = dict(good, templates={"t": {"body": "{}", "zz": 1}})
            body, codes = json.dumps(bad).encode(), {"unknown_field"}
        elif choice == 3:
            bad = dict(good)
            field = r.choice(["installationId", "pushChannel", "tags", "platform"])
            bad[field] = r.choice([1, None, {}, True, [1]] + ([] if field == "tags" else [[]]))
            body, codes = json.dumps(bad).encode(), {"invalid_payload", "invalid_argument"}
        elif choice == 4:
            bad = dict(good, installationId="fz-other")
            body, codes = json.dumps(bad).encode(), {"invalid_argument"}
        elif choice == 5:
            bad = dict(good, tags=r.choice([["a b"], [""], ["t" * 121]]))
            body, codes = json.dumps(bad).encode(), {"invalid_tag"}
        elif choice == 6:
            body, codes = b'{"installationId":' + b"[" * 600 + b"]" * 600 + b"}", {"invalid_payload"}
        elif choice == 7:
            body, codes = json.dumps(good).encode().replace(b"fz-channel", b"fz-ch\xffannel"), {"invalid_payload"}
        elif choice == 8:
            bad = dict(good, templates={"t": {"body": "{"}})
            body, codes = json.dumps(bad).encode(), {"invalid_template"}
        elif choice == 9:
            bad = dict(good, expirationTime=r.choice(["yesterday", 5, PAST]))
            body, codes = json.dumps(bad).encode(), {"invalid_payload", "invalid_argument"}
        elif choice == 10:
            # Past the gateway's body limit only now and then: each such request is megabytes.
            size = MAX_RICH_BYTES // 3 * 4 + 70_000 if r.random() < 0.02 else 70_000
            body, codes = b"x" * size, {"invalid_payload", "payload_too_large"}
        else:
            del good["pushChannel"]
            body, codes = json.dumps(good).encode(), {"invalid_payload"}
        return HttpCase("installation", method="PUT", target=f"/hub/installations/{ident}?{API}",
                        headers={"Authorization": self.sas(), "Content-Type": "application/json"}, body=body, codes=codes)

    def http_patch(self):
        r = self.rng
        choice = r.randrange(5)
        ident = f"fz-{r.randrange(10)}"
        if choice == 0:
            body, codes = r.choice([b"{}", b"[1]", b"[[]]", b"not json", b'{"op":"add"}', b"[null]"]), {"invalid_payload"}
        elif choice == 1:
            body, codes = b'[{"op":1,"path":"/tags"}]', {"invalid_payload"}
        elif choice == 2:
            body, codes = b'[{"op":"move","path":"/tags","value":"a"}]', {"invalid_argument"}
        elif choice == 3:
            body, codes = b'[{"op":"add","path":"/tags","value":"a"}]', {"not_found"}
            ident = "fz-missing"
        else:
            body, codes = b"[]", {"invalid_argument"}
        return HttpCase("patch", method="PATCH", target=f"/hub/installations/{ident}?{API}",
                        headers={"Authorization": self.sas(), "Content-Type": "application/json-patch+json"},
                        body=body, codes=codes)

    def http_messages(self):
        r = self.rng
        headers = {"Authorization": self.sas(), "Content-Type": "application/json",
                   "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "fz-nobody"}
        body = b'{"m":"x"}'
        target = f"/hub/messages?{API}"
        choice = r.randrange(13)
        if choice == 0:
            del headers["ServiceBusNotification-Format"]
            codes = {"invalid_argument"}
        elif choice == 1:
            # Formats the hub does not take; and native formats whose payload {"m":"x"} lacks what their push service needs.
            fmt = r.choice(["windowsphone", "", "TEMPLATE ", "native", "apns", "apple", "fcmv1", "adm"])
            headers["ServiceBusNotification-Format"] = fmt
            codes = {"invalid_payload"} if fmt in ("apple", "fcmv1", "adm") else {"invalid_argument"}
        elif choice == 2:
            headers["ServiceBusNotification-TimeToLive"] = r.choice(["abc", "1.5", "", "99999999999999999999"])
            codes = {"invalid_argument"}
        elif choice == 3:
            body = r.choice([b"[]", b"not json", b"", b'{"m":1}', b'{"m":null}', b'{"m":{"a":"b"}}'])
            codes = {"invalid_payload"}
        elif choice == 4:
            headers["ServiceBusNotification-Tags"] = r.choice(["((", "a &&", "a b", "$Nope:x", "(" * 3000 + "a"])
            codes = {"invalid_expression"}
        elif choice == 5:
            body = b'{"m":"' + b"x" * 70_000 + b'"}'
            codes = {"payload_too_large"}
        elif choice == 6:
            headers["ServiceBusNotification-Format"] = "linux"
            body = r.choice([b"not json", b"{", b"\xff"])
            codes = {"invalid_payload"}
        elif choice == 7:
            target = f"/hub/messages?direct&{API}"
            codes = {"invalid_argument"}
        elif choice == 8:
            target = f"/hub/messages?direct&{API}"
            headers["ServiceBusNotification-DeviceHandle"] = r.choice(["a b", "", "x/y"])
            codes = {"invalid_argument"}
        elif choice == 9:
            target = f"/hub/schedulednotifications?{API}"
            codes = {"invalid_argument"}
        elif choice == 10:
            target = f"/hub/schedulednotifications?{API}"
            headers["ServiceBusNotification-ScheduleTime"] = r.choice(["tomorrow", "2001-01-01T00:00:00Z", "2099-01-01T00:00:00Z", ""])
            codes = {"invalid_argument"}
        elif choice == 11:
            headers["ServiceBusNotification-TimeToLive"] = r.choice(["0", "-5", str(31 * 86_400)])
            codes = {"invalid_argument"}
        else:
            target = f"/hub/schedulednotifications/fz-none?{API}"
            return HttpCase("messages", method="DELETE", target=target, headers={"Authorization": self.sas()}, codes={"not_found"})
        return HttpCase("messages", method="POST", target=target, headers=headers, body=body, codes=codes)

    def http_users(self):
        r = self.rng
        choice = r.randrange(9)
        send = {"Authorization": self.sas(), "Content-Type": "application/json"}
        if choice == 0:
            return HttpCase("users", method="POST", target=f"/hub/users/tokens?{API}", body=r.choice(
                [b"", b"[]", b"{}", b'{"credential":1}', b"not json"]), codes={"invalid_payload"})
        if choice == 1:
            credential = r.choice([self.tokens["user"], self.tokens["expired_credential"], "nhu1.e30.c2ln", "x"])
            return HttpCase("users", method="POST", target=f"/hub/users/tokens?{API}",
                            body=json.dumps({"credential": credential}).encode(), codes={"unauthorized"})
        if choice == 2:
            auth = r.choice(["", "Bearer ", "Bearer x", "Bearer " + self.tokens["credential"], self.sas(),
                             "Bearer " + self.tokens["expired_user"]])
            return HttpCase("users", method="GET", target=f"/hub/users/me/notifications?{API}",
                            headers={"Authorization": auth} if auth else {}, codes={"unauthorized"})
        if choice == 3:
            query = r.choice(["limit=0", "limit=101", "limit=-1", "cursor=99999999999999"])
            return HttpCase("users", method="GET", target=f"/hub/users/me/notifications?{query}&{API}",
                            headers={"Authorization": "Bearer " + self.tokens["user"]},
                            codes={"history_rewound"} if query.startswith("cursor") else {"invalid_argument"})
        if choice == 4:
            body, codes = r.choice([(b"[]", {"invalid_payload"}), (b"x", {"invalid_payload"}),
                                    (b'{"zz":1}', {"unknown_field"}), (b'{"readState":"maybe"}', {"invalid_argument"}),
                                    (b'{"userActionState":"gone"}', {"invalid_argument"})])
            return HttpCase("users", method="PATCH", target=f"/hub/users/me/notifications/fz-missing?{API}",
                            headers={"Authorization": "Bearer " + self.tokens["user"]}, body=body, codes=codes)
        if choice == 5:
            return HttpCase("users", method="PATCH", target=f"/hub/users/me/notifications/fz-missing?{API}",
                            headers={"Authorization": "Bearer x"}, body=b'{"readState":"read"}', codes={"unauthorized"})
        if choice == 6:
            return HttpCase("users", method="DELETE", target=f"/hub/users/me/notifications/fz-missing?{API}",
                            headers={"Authorization": "Bearer " + self.tokens["user"]}, codes={"not_found"})
        if choice == 7:
            body, codes = r.choice([(b"not json", {"invalid_payload"}), (b"[]", {"invalid_payload"}),
                                    (b'{"appNotificationId":"a","visual":{"title":"t","body":"b"},"zz":1}', {"unknown_field"}),
                                    (b'{"appNotificationId":"a"}', {"invalid_payload"}),
                                    (b'{"appNotificationId":1}', {"invalid_payload"}),
                                    (b'{"appNotificationId":"a","raw":"r","priority":"urgent"}', {"invalid_argument"})])
            return HttpCase("users", method="POST", target=f"/hub/users/fz-user/notifications?{API}", headers=send,
                            body=body, codes=codes)
        return HttpCase("users", method="POST", target=f"/hub/users/{r.choice(['a%20b', '%C3%A9', 'x' * 130])}/notifications?{API}",
                        headers=send, body=b'{"appNotificationId":"a","raw":"r"}', codes={"invalid_argument"})

    def http_matrix(self):
        """The Matrix push gateway: bodies that are not JSON, not the API's shape, or notifications for
        pushkeys that are no endpoint of the hub's (another host's, a secret never given out)."""
        r = self.rng
        target = "/_matrix/push/v1/notify"
        keys = [r.choice([f"http://{self.host}/up/{r.randbytes(20).hex()}", "https://elsewhere.example/up/x", f"http://{self.host}/up/a/b",
                          f"http://{self.host}/hub/installations/x", "not a url", "x" * r.randint(1, 3000)])
                for _ in range(r.randint(1, 4))]
        notification = {"event_id": "$fz", "room_id": "!fz:hub.test", "prio": r.choice(["high", "low", 7, None]),
                        "content": {"body": "x" * r.choice([1, 5000])}, "devices": [{"app_id": "fz", "pushkey": k} for k in keys]}
        shape = r.choice(["good", "good", "not json", "array", "no devices", "bad device", "deep", "method"])
        if shape == "good":
            return HttpCase("matrix", method="POST", target=target, body=json.dumps({"notification": notification}).encode(),
                            matrix=keys, codes={"M_LIMIT_EXCEEDED"})
        if shape == "method":
            return HttpCase("matrix", method=r.choice(["PUT", "DELETE", "PATCH"]), target=target, matrix=[], codes={"M_UNRECOGNIZED"})
        body = {"not json": lambda: r.randbytes(r.randint(0, 200)).replace(b"{", b"(").replace(b"[", b"("),
                "array": lambda: b"[]",
                "no devices": lambda: json.dumps({"notification": {**notification, "devices": []}}).encode(),
                "bad device": lambda: json.dumps({"notification": {**notification, "devices": [{"pushkey": 7}]}}).encode(),
                "deep": lambda: b'{"notification":' * 300 + b"{}" + b"}" * 300}[shape]()
        return HttpCase("matrix", method="POST", target=target, body=body, matrix=[], codes={"M_NOT_JSON", "M_BAD_JSON"})

    def http_routes(self):
        r = self.rng
        method, target, codes = r.choice([
            ("GET", f"/hub/nope?{API}", {"not_found"}), ("GET", f"/otherhub/installations/x?{API}", {"not_found"}),
            ("DELETE", f"/hub/messages/x?{API}", {"invalid_argument"}), ("GET", "/nothing-here", {"not_found"}),
            ("POST", "/console", {"invalid_argument"}), ("GET", "/web/%2e%2e/keys.json", {"not_found"}),
            ("GET", "/web/../keys.json", {"not_found"}), ("DELETE", "/inbox", {"invalid_argument"}),
            ("FOO", f"/hub/installations/x?{API}", {"invalid_argument"}), ("GET", f"/hub/installations/%ff?{API}", {"not_found"}),
            ("GET", f"/hub/installations/%00?{API}", {"not_found", "invalid_argument"}), ("POST", "/metrics", {"not_found"}),
            ("GET", f"/hub/installations?{API}", {"invalid_argument"}), ("PUT", f"/hub/messages/x/y?{API}", {"invalid_argument"}),
            ("GET", f"/hub/users/me/notifications/history/x?{API}", {"invalid_argument"}),
            ("GET", "/metrics/x", {"not_found"}), ("GET", f"/hub/registrations/fz-missing?{API}", {"not_found"})])
        return HttpCase("routes", method=method, target=target, headers={"Authorization": self.sas()}, codes=codes)


# ---------------------------------------------------------------------------------------------
# Bookkeeping.

class Failures:
    """Failures grouped by target and kind, each group with a few reproducers."""

    def __init__(self, directory, examples=3, live=False):
        self.live = live
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.groups = collections.OrderedDict()
        self.directory = directory
        self.examples = examples
        self.total = 0
        self.files = 0

    def add(self, target, kind, detail, frames=None, raw=None, group_by=""):
        with self.lock:
            self.total += 1
            group = self.groups.setdefault((target, kind, group_by), {"count": 0, "examples": []})
            group["count"] += 1
            if self.live and group["count"] == 1:
                print(f"  {time.monotonic() - self.started:6.1f} s  new failure: [{target}] {kind}: {detail[:160]}",
                      file=sys.stderr, flush=True)
            if len(group["examples"]) < self.examples:
                group["examples"].append((detail, self.reproducer(target, frames, raw)))

    def reproducer(self, target, frames, raw):
        if frames is None and raw is None:
            return None
        if raw is not None:
            frames = [raw]
        total = sum(len(f) for f in frames)
        text = " | ".join(f.hex() if f else "(empty)" for f in frames)
        if total <= 2048:
            return f"{len(frames)} frame(s): {text}"
        self.files += 1
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"input-{self.files}-{target.replace(' ', '_').replace('/', '_')}.hex")
        with open(path, "w") as f:
            f.write("\n".join(fr.hex() for fr in frames) + "\n")
        head = frames[0][:96].hex() if frames[0] else "(empty)"
        return f"{len(frames)} frame(s), {total} bytes, first frame starts {head}…; every frame's hex, one a line, in {path}"


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.inputs = collections.Counter()
        self.kinds = collections.defaultdict(collections.Counter)
        self.codes = collections.defaultdict(collections.Counter)
        self.ok = collections.Counter()
        self.accepted = collections.defaultdict(collections.Counter)
        self.lost = collections.Counter()
        self.lenient = collections.Counter()
        self.unanswered = collections.Counter()
        self.busy = collections.Counter()


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def parse_reply(body):
    """(type, id, payload) of a reply envelope, or None when it is not one."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or value.get("v") != 1:
        return None
    kind, ident, payload = value.get("type"), value.get("id"), value.get("payload")
    if not isinstance(kind, str) or not isinstance(ident, str) or not isinstance(payload, dict):
        return None
    return kind, ident, payload


# ---------------------------------------------------------------------------------------------
# Channels: one socket each, many requests in flight, replies matched in order.

REQUEST_KINDS = {"random": 4, "frames": 5, "envelope": 14, "schema": 22, "auth": 10, "semantic": 16, "mutate": 24,
                 "fixture": 5, "control": 0.3}
AGENT_KINDS = {"random": 12, "frames": 10, "hello": 18, "ack": 14, "verb": 14, "fixture": 32}


class Channel:
    def __init__(self, fuzzer, name, service, window, quota):
        self.fuzzer = fuzzer
        self.name = name
        self.service = service
        self.window = window
        self.quota = quota
        self.sent = 0
        self.inflight = collections.deque()
        self.socket = None
        self.finished = None
        self.gen = fuzzer.generator(name)
        self.directed = [] if "directed" in self.gen.excluded else self.directed_cases()
        self.directed.reverse()
        self.open()

    def open(self):
        self.socket = self.make_socket()
        self.fuzzer.poller.register(self.socket, zmq.POLLIN)
        self.fuzzer.by_socket[self.socket] = self

    def close(self):
        if self.socket is not None:
            self.fuzzer.poller.unregister(self.socket)
            self.fuzzer.by_socket.pop(self.socket, None)
            self.socket.close(linger=0)
            self.socket = None

    def reset(self):
        """A new connection; what was in flight on the old one is counted as lost."""
        self.fuzzer.stats.lost[self.name] += len(self.inflight)
        for case, expectation, _ in self.inflight:
            # A request whose reply is lost may still have been carried out; the store checks allow for it.
            kind = getattr(expectation, "request_type", None)
            if kind in STORING_TYPES and expectation.kind != "error":
                self.fuzzer.lost_storing[STORING_TYPES[kind]] += 1
        self.inflight.clear()
        self.close()
        self.open()

    def paused(self):
        return self.fuzzer.down.get(self.service, False)

    def wants(self):
        return self.sent < self.quota and len(self.inflight) < self.window and not self.paused()

    def done(self):
        if self.sent >= self.quota and not self.inflight:
            if self.finished is None:
                self.finished = time.monotonic()
            return True
        return False

    def send_next(self):
        case = self.make_case()
        expectation = self.expect(case)
        try:
            self.socket.send_multipart(case.frames, flags=zmq.NOBLOCK, copy=len(case.frames) > 1 or case.size() < 65536)
        except zmq.Again:
            return False
        self.sent += 1
        stats = self.fuzzer.stats
        stats.inputs[self.name] += 1
        stats.kinds[self.name][case.kind] += 1
        self.inflight.append((case, expectation, time.monotonic()))
        return True

    def drain(self):
        while self.socket is not None:
            try:
                frames = self.socket.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if not self.inflight:
                self.fuzzer.failures.add(self.name, "reply to nothing", "a reply came with no request in flight", frames)
                continue
            case, expectation, _ = self.inflight.popleft()
            self.judge(case, expectation, frames)

    def check_timeout(self, now):
        if self.inflight and now - self.inflight[0][2] > self.fuzzer.args.reply_timeout and not self.paused():
            case = self.inflight[0][0]
            self.fuzzer.stats.unanswered[self.name] += 1
            self.fuzzer.failures.add(self.name, "no reply",
                                     f"no reply within {self.fuzzer.args.reply_timeout:.0f} s ({case.kind} input)", case.frames)
            self.inflight.popleft()
            self.reset()

    def fail(self, kind, detail, case, group_by=""):
        self.fuzzer.failures.add(self.name, kind, f"{detail} [{case.kind} input]", case.frames, group_by=group_by)


class RequestChannel(Channel):
    def __init__(self, fuzzer, name, service, window, quota, types):
        self.types = types
        self.endpoint = fuzzer.hub.endpoint(SECTIONS[service])
        super().__init__(fuzzer, name, service, window, quota)

    def make_socket(self):
        s = self.fuzzer.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        self.fuzzer.secure(s, self.service)
        s.connect(self.endpoint)
        return s

    def directed_cases(self):
        return self.gen.directed(self.service, self.types)

    def make_case(self):
        gen = self.gen
        if self.directed:
            return self.directed.pop()
        if self.sent % self.fuzzer.args.oversize_every == 0 and "oversize" not in gen.excluded:
            return gen.req_oversize(self.service, self.types)
        return gen.request_case(self.service, REQUEST_KINDS, self.types)

    def expect(self, case):
        verdict = request_verdict(self.service, case.frames, self.fuzzer.credentials, case.semantic, case.dumped)
        verdict.control = case.control
        return verdict

    def judge(self, case, verdict, frames):
        stats = self.fuzzer.stats
        body = frames[1:] if len(frames) > 1 and frames[0] == b"" else frames
        if len(body) != 1:
            self.fail("malformed reply", f"the reply has {len(body)} body frames", case)
            return
        reply = parse_reply(body[0])
        if reply is None:
            self.fail("malformed reply", f"the reply is not an envelope: {body[0][:120]!r}", case)
            return
        kind, ident, payload = reply
        if kind == "error":
            code, message = payload.get("code"), payload.get("message")
            if code not in ERROR_CODES or not isinstance(message, str):
                self.fail("error without a code", f"error reply {body[0][:160]!r}", case)
                return
            stats.codes[self.name][code] += 1
            busy = code in ("unavailable", "timeout")
            if verdict.expected_id is not None and ident != verdict.expected_id:
                self.fail("wrong correlation id", f"error reply id {ident[:40]!r}, expected {verdict.expected_id[:40]!r}", case)
                self.reset()
            elif verdict.control:
                self.fail("control refused", f"a valid request was refused: {code}: {message[:200]}", case)
            elif code == "internal":
                self.fail("internal error", f"{message[:300]} (the oracle expected {self.describe(verdict)})", case,
                          group_by=f"{verdict.request_type or 'request'}")
            elif busy and not verdict.forwarded:
                self.fail("unavailable", f"{code}: {message[:200]}", case)
            elif busy:
                stats.busy[self.name] += 1
            elif verdict.kind == "error" and verdict.codes is not None and code not in verdict.codes:
                self.fail("wrong error code", f"got {code} ({message[:200]}), expected {self.describe(verdict)}", case,
                          group_by=f"{verdict.reason}: {code}")
            return
        stats.ok[self.name] += 1
        if verdict.kind == "error":
            self.fail("accepted malformed input", f"replied {kind} to input the oracle says must get "
                      f"{self.describe(verdict)}", case, group_by=verdict.reason)
            return
        if verdict.kind == "lenient":
            # Taken by the services' lenient parser: what it stored is accounted for all the same.
            self.fuzzer.record_accepted(kind, payload)
            stats.lenient[self.name] += 1
            if self.fuzzer.args.strict_json:
                self.fail("accepted malformed JSON", f"replied {kind} to a body that is not strict JSON", case)
            else:
                self.fuzzer.note_lenient(self.name, case)
            return
        expected_type = REPLY_TYPES.get(verdict.request_type)
        if expected_type and kind != expected_type:
            self.fail("wrong reply type", f"replied {kind} to {verdict.request_type}", case)
            return
        if verdict.expected_id is not None and ident != verdict.expected_id:
            self.fail("wrong correlation id", f"reply id {ident[:40]!r}, expected {verdict.expected_id[:40]!r}", case)
            self.reset()
            return
        stats.accepted[self.name][kind] += 1
        self.fuzzer.record_accepted(kind, payload)
        if self.fuzzer.accepted_log is not None:
            self.fuzzer.accepted_log.write(json.dumps({
                "target": self.name, "generator": case.kind, "reason": verdict.reason, "reply": kind,
                "input": [f.decode("utf-8", "replace")[:2000] for f in case.frames]}) + "\n")

    @staticmethod
    def describe(verdict):
        if verdict.kind != "error":
            return f"any reply but internal ({verdict.reason or 'the input may be valid'})"
        codes = "an error" if verdict.codes is None else " or ".join(sorted(verdict.codes))
        return f"{codes} ({verdict.reason})"


class AgentChannel(Channel):
    """The dispatcher's agent socket, as a CURVE client whose key no installation is bound to."""

    def make_socket(self):
        s = self.fuzzer.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        public, secret = zmq.curve_keypair()
        s.curve_publickey = public
        s.curve_secretkey = secret
        s.curve_serverkey = self.fuzzer.agent_server_key
        s.connect(self.fuzzer.hub.endpoint("DISPATCH", "AGENTS"))
        return s

    def directed_cases(self):
        return self.gen.agent_directed()

    def make_case(self):
        if self.directed:
            return self.directed.pop()
        return self.gen.agent_case(AGENT_KINDS)

    def expect(self, case):
        return agent_verdict(case.frames)

    def judge(self, case, expectation, frames):
        form, codes = expectation
        stats = self.fuzzer.stats
        if len(frames) == 2 and frames[0] == b"":
            reply = parse_reply(frames[1])
            if reply is None or reply[0] != "error" or reply[2].get("code") not in ERROR_CODES:
                self.fail("malformed reply", f"the reply is not an error envelope: {frames[1][:160]!r}", case)
                return
            code = reply[2]["code"]
            got = "json"
        elif len(frames) == 1:
            verb, _, rest = frames[0].partition(b"\n")
            if verb != b"error":
                stats.ok[self.name] += 1
                self.fail("accepted malformed input", f"answered {frames[0][:160]!r} on a connection bound to no "
                          "installation", case)
                return
            code = rest.partition(b"\n")[0].decode("utf-8", "replace")
            if code not in ERROR_CODES:
                self.fail("error without a code", f"error frame {frames[0][:160]!r}", case)
                return
            got = "frame"
        else:
            self.fail("malformed reply", f"the reply has {len(frames)} frames", case)
            return
        stats.codes[self.name][code] += 1
        if code == "internal":
            self.fail("internal error", f"error frame {frames[-1][:200]!r}", case)
        elif got != form:
            self.fail("wrong error form", f"answered as {got}, expected as {form}", case)
        elif codes is not None and code not in codes:
            self.fail("wrong error code", f"got {code}, expected {' or '.join(sorted(codes))}", case)


# ---------------------------------------------------------------------------------------------
# HTTP.

STATUS_LINE = re.compile(rb"(?:^|\r\n)HTTP/\d\.\d (\d{3})")


class HttpClient:
    """A small keep-alive HTTP/1.1 client over a raw socket, and one-shot raw exchanges."""

    def __init__(self, port):
        self.port = port
        self.sock = None

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def exchange(self, data, timeout=15.0):
        """(status, headers, body) of one request on the kept connection."""
        for attempt in range(2):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
                self.sock.settimeout(timeout)
                self.sock.sendall(data)
                return self.read_response()
            except (ConnectionError, BrokenPipeError, EOFError) as e:
                self.close()
                if attempt == 1:
                    raise e
            except socket.timeout:
                self.close()
                raise
        raise EOFError("no response")

    def read_response(self):
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError("connection closed before a response")
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            if 100 <= status < 200:
                continue
            length = int(headers.get("content-length", "0") or 0)
            while len(buffer) < length:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError("connection closed inside a response body")
                buffer += chunk
            if headers.get("connection", "").lower() == "close":
                self.close()
            return status, headers, buffer[:length]

    @staticmethod
    def complete_responses(data):
        """How many whole final responses (not 1xx) `data` holds."""
        count, index = 0, 0
        while True:
            end = data.find(b"\r\n\r\n", index)
            if end < 0:
                return count
            head = data[index:end]
            match = re.search(rb"content-length:\s*(\d+)", head, re.I)
            length = int(match.group(1)) if match else 0
            if end + 4 + length > len(data):
                return count
            status = STATUS_LINE.search(head)
            if status and not head.startswith(b"HTTP/1.1 1") and not head.startswith(b"HTTP/1.0 1"):
                count += 1
            index = end + 4 + length

    def raw(self, data, idle, responses=1):
        """Every status line answered to `data` on a fresh connection, until it closes, is quiet for
        `idle` seconds, or has given `responses` whole responses."""
        received = b""
        closed = False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                try:
                    s.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                s.settimeout(idle)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    if received and self.complete_responses(received) >= responses:
                        break
                    if STATUS_LINE.search(received):
                        # Answered: whatever else comes follows at once.
                        s.settimeout(0.03)
                    try:
                        chunk = s.recv(65536)
                    except socket.timeout:
                        break
                    except ConnectionResetError:
                        closed = True
                        break
                    if not chunk:
                        closed = True
                        break
                    received += chunk
        except OSError:
            return None, False
        return [int(m) for m in STATUS_LINE.findall(received)], closed


class HttpWorker(threading.Thread):
    def __init__(self, fuzzer, quota, number):
        super().__init__(name=f"http-fuzz-{number}", daemon=True)
        self.fuzzer = fuzzer
        self.quota = quota
        self.number = number
        self.gen = fuzzer.http_generator(number)
        self.sent = 0
        self.client = HttpClient(fuzzer.hub.http_port)
        self.session = None
        self.error = None
        self.finished = None

    def run(self):
        import requests
        self.session = requests.Session()
        fuzzer = self.fuzzer
        directed = [] if "directed" in fuzzer.args.exclude or self.number else self.gen.directed()
        directed.reverse()
        try:
            while self.sent < self.quota and not fuzzer.stopping.is_set():
                if fuzzer.down.get("nh-gateway"):
                    time.sleep(0.1)
                    continue
                case = directed.pop() if directed else self.gen.case()
                fuzzer.recent_http.append(case)
                self.sent += 1
                with fuzzer.stats.lock:
                    fuzzer.stats.inputs["nh-gateway http"] += 1
                    fuzzer.stats.kinds["nh-gateway http"][case.kind] += 1
                self.execute(case)
        except Exception:
            self.error = traceback.format_exc()
        finally:
            self.finished = time.monotonic()
            self.client.close()
            self.session.close()

    def fail(self, kind, detail, case, data):
        self.fuzzer.failures.add("nh-gateway http", kind, f"{detail} [{case.kind} input]", raw=data)

    def execute(self, case):
        import requests
        fuzzer = self.fuzzer
        data = case.bytes(f"127.0.0.1:{fuzzer.hub.http_port}")
        if case.raw is not None:
            statuses, closed = self.client.raw(data, idle=0.1 if case.may_wait else 0.5, responses=case.responses)
            if statuses is None:
                if not fuzzer.down.get("nh-gateway") and fuzzer.alive("nh-gateway"):
                    self.fail("no connection", "the gateway refused the connection", case, data)
                return
            for status in statuses:
                with fuzzer.stats.lock:
                    fuzzer.stats.codes["nh-gateway http"][f"HTTP {status}"] += 1
                if status < 400 and not 100 <= status < 200:
                    self.fail("accepted malformed input", f"answered HTTP {status} to a malformed request", case, data)
            if not statuses:
                with fuzzer.stats.lock:
                    fuzzer.stats.unanswered["nh-gateway http"] += 1
            return
        try:
            if case.via_requests:
                try:
                    response = self.session.request(
                        case.method, f"{fuzzer.hub.base}{case.target}", headers=case.headers, data=case.body,
                        timeout=15, allow_redirects=False)
                    status, body = response.status_code, response.content
                except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL, ValueError):
                    status, _, body = self.client.exchange(data)
            else:
                status, _, body = self.client.exchange(data)
        except (OSError, EOFError, requests.RequestException) as e:
            if not fuzzer.down.get("nh-gateway") and fuzzer.alive("nh-gateway"):
                self.fail("no response", f"{type(e).__name__}: {e}", case, data)
            return
        with fuzzer.stats.lock:
            fuzzer.stats.codes["nh-gateway http"][f"HTTP {status}"] += 1
        if case.control:
            if status != 200:
                self.fail("control refused", f"GET /metrics answered {status}", case, data)
            return
        if case.matrix is not None:
            self.judge_matrix(case, data, status, body)
            return
        if status < 400:
            if case.may_accept:
                fuzzer.accepted_installations.add(case.target.split("/")[-1].split("?")[0])
            else:
                self.fail("accepted malformed input", f"answered HTTP {status}: {body[:200]!r}", case, data)
            return
        match = XML_ERROR.match(body)
        if not match or int(match.group(1)) != status:
            self.fail("error without a code", f"HTTP {status} without the XML error: {body[:200]!r}", case, data)
            return
        code = match.group(2).decode()
        with fuzzer.stats.lock:
            fuzzer.stats.codes["nh-gateway http"][code] += 1
        if code not in ERROR_CODES:
            self.fail("error without a code", f"unknown code {code}", case, data)
        elif code == "internal":
            self.fail("internal error", body[:300].decode("utf-8", "replace"), case, data)
        elif code in ("unavailable", "timeout"):
            with fuzzer.stats.lock:
                fuzzer.stats.busy["nh-gateway http"] += 1
        elif case.codes is not None and code not in case.codes:
            self.fail("wrong error code", f"got {code}, expected {' or '.join(sorted(case.codes))}: "
                      f"{body[:200].decode('utf-8', 'replace')}", case, data)

    def judge_matrix(self, case, data, status, body):
        """A Matrix answer: 200 rejecting every pushkey given (none is the hub's), or Matrix's error."""
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self.fail("error without a code", f"HTTP {status} without Matrix's JSON: {body[:200]!r}", case, data)
        elif status == 200:
            if "rejected" not in answer or sorted(answer["rejected"]) != sorted(case.matrix) or not case.matrix:
                self.fail("accepted malformed input", f"answered 200 {body[:200]!r} for pushkeys {case.matrix!r}"[:400], case, data)
        elif status == 503:
            with self.fuzzer.stats.lock:
                self.fuzzer.stats.busy["nh-gateway http"] += 1
        elif status >= 500:
            self.fail("internal error", body[:300].decode("utf-8", "replace"), case, data)
        elif answer.get("errcode") not in case.codes:
            self.fail("wrong error code", f"got HTTP {status} {answer.get('errcode')}, expected {' or '.join(sorted(case.codes))}", case, data)


# ---------------------------------------------------------------------------------------------
# The run.

WEIGHTS = {"nh-registry": 15, "nh-sync": 13, "nh-dispatch": 7, "nh-publish": 15, "nh-publish user.post": 3,
           "nh-gateway": 4, "nh-agent": 6, "nh-dispatch agents": 31, "nh-gateway http": 6}


class SetupError(Exception):
    pass


class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.stats = Stats()
        self.context = zmq.Context()
        self.poller = zmq.Poller()
        self.by_socket = {}
        self.down = {}
        self.stopping = threading.Event()
        self.restarts = collections.Counter()
        self.lost_storing = collections.Counter()
        self.crash_count = collections.Counter()
        self.crashed = set()
        self.accepted_notifications = set()
        self.accepted_installations = set()
        self.accepted_user_notifications = set()
        self.rich_ids = set()
        self.lenient_examples = []
        self.rss = {}
        self.health_rounds = 0
        self.hub = None
        self.start_args = {}
        self.health_sockets = {}
        self.channels = []
        self.accepted_log = open(args.accepted_log, "w") if args.accepted_log else None
        self.http = []
        self.recent_http = collections.deque(maxlen=8)

    # Services.

    def start(self):
        # A crash's backtrace is kept short: the crashed thread, its innermost frames.
        # The agent socket's rate limit is lifted, so that every input is read, not refused unread.
        env = {"NH_LOG_LEVEL": self.args.log_level, "NH_LIMITS_AGENT_MESSAGES_PER_SECOND": "100000000",
               "SWIFT_BACKTRACE": "enable=yes,interactive=no,threads=crashed,images=none,registers=none,limit=24,top=8"}
        self.hub = Hub(prefix="nh-fuzz-", settings=env, bin_dir=self.args.bin)
        self.failures = Failures(os.path.join(self.hub.data, "reproducers"), live=self.args.progress)
        missing = [name for name in SERVICES + ["nhctl"] if not os.access(os.path.join(self.hub.bin, name), os.X_OK)]
        if missing:
            raise SetupError(f"no executable {', '.join(missing)} in {self.hub.bin}; build first (swift build)")
        for name in Hub.SERVICES:
            self.start_args[name] = (None, None, None)
        agent_home = os.path.join(self.hub.data, "agent")
        self.start_args["nh-agent"] = (
            "nh-agent", {"NH_AGENT_HOME": agent_home, "NH_AGENT_INSTALLATION_ID": "fuzz-agent"},
            os.path.join(self.hub.data, "agent.jsonl"))
        if not self.hub.start_services(timeout=60):
            raise SetupError("the services did not come up")
        self.launch("nh-agent")
        for name in SERVICES:
            if not self.health(name, timeout=30):
                raise SetupError(f"{name} does not answer health")
        if not wait_until(lambda: self.health(name="nh-agent", timeout=5, details=True).get("registered") == "true", 30):
            raise SetupError("the agent did not register")
        self.agent_server_key = self.hub.bus_server_key()

    def secure(self, s, service):
        """Every bus socket is CURVE: a client with the full key's bus keys, to the hub's bus key, or
        to the agent's device key for its control socket."""
        public, secret = self.hub.bus_keys()
        if service == "nh-agent":
            device = os.path.join(self.hub.data, "agent", "device.pub")
            wait_until(lambda: os.path.exists(device), 30)
            with open(device) as f:
                server = f.read().strip().encode()
        else:
            server = self.hub.bus_server_key()
        s.curve_publickey, s.curve_secretkey, s.curve_serverkey = public, secret, server

    def launch(self, name):
        executable, env, stdout = self.start_args[name]
        out = open(stdout, "ab") if stdout else None
        self.hub.start(name, executable, env=env, stdout=out)

    def alive(self, name):
        process = self.hub.processes.get(name)
        return process is not None and process.poll() is None

    def health_socket(self, name):
        if name not in self.health_sockets:
            s = self.context.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            self.secure(s, name)
            s.connect(self.hub.endpoint(SECTIONS[name]))
            self.health_sockets[name] = s
        return self.health_sockets[name]

    def call(self, name, kind, payload, auth=None, timeout=10.0):
        """One request on the service's checking socket: (type, payload) of its reply, or None."""
        s = self.health_socket(name)
        ident = f"check-{time.monotonic_ns()}"
        value = {"v": 1, "type": kind, "id": ident, "payload": payload}
        if auth:
            value["auth"] = auth
        s.send_multipart([b"", json.dumps(value).encode()])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive(name):
            if not s.poll(min(200, max(1, int((deadline - time.monotonic()) * 1000)))):
                continue
            frames = s.recv_multipart()
            reply = parse_reply(frames[-1])
            if reply and reply[1] == ident:
                return reply[0], reply[2]
        # A late reply would answer the next question: start that one on a fresh connection.
        s.close(linger=0)
        self.health_sockets.pop(name, None)
        return None

    def health(self, name, timeout=10.0, details=False):
        reply = self.call(name, "health", {}, timeout=timeout)
        if reply is None or reply[0] != "health.reply" or reply[1].get("service") != name:
            return {} if details else False
        return (reply[1].get("details") or {}) if details else reply[1].get("status") == "ok"

    def rss_sample(self, phase):
        for name in SERVICES:
            process = self.hub.processes.get(name)
            if process is None:
                continue
            value = rss_kib(process.pid)
            if value is None:
                continue
            entry = self.rss.setdefault(name, {"start": value, "peak": value, "end": value, "pid": process.pid})
            if entry["pid"] != process.pid:
                entry.update(start=value, pid=process.pid, restarted=True)
            entry["peak"] = max(entry["peak"], value)
            entry[phase] = value

    # Setup.

    def prepare(self):
        hub = self.hub
        keys = hub.keys()
        ttl = 6 * 3600
        full = hub.token(FULL_KEY, ttl=ttl)
        listen = hub.token(LISTEN_KEY, ttl=ttl)
        resource = f"{hub.base}/hub"
        with open(os.path.join(hub.data, "user-token.key")) as f:
            secret = base64.b64decode(f.read().strip())
        self.credentials = Credentials(keys, secret, resource)
        with open(os.path.join(hub.data, "namespace-keys.json")) as f:
            root_key = next(k["key"] for k in json.load(f)["keys"] if k["name"] == "RootManageSharedAccessKey")
        tokens = {
            "full": full, "listen": listen,
            # The namespace's key, for the reads that span every hub (the store checks' pull).
            "root": sas_token(f"{hub.base}/", "RootManageSharedAccessKey", root_key, ttl=ttl),
            "expired": sas_token(resource, FULL_KEY, keys[FULL_KEY], expiry=int(time.time()) - 60),
            "wrong_key": sas_token(resource, FULL_KEY, "not-the-key", ttl=ttl),
            "unknown_name": sas_token(resource, "Nobody", keys[FULL_KEY], ttl=ttl),
            "other_resource": sas_token(f"{hub.base}/otherhub", FULL_KEY, keys[FULL_KEY], ttl=ttl),
        }
        reply = self.call("nh-sync", "user.credential", {"userId": "fz-user", "lifetime": 86_400}, full)
        if not reply or reply[0] != "user.credential.reply":
            raise SetupError(f"cannot issue a user credential: {reply}")
        tokens["credential"] = reply[1]["credential"]
        reply = self.call("nh-sync", "user.token", {"credential": tokens["credential"]})
        if not reply or reply[0] != "user.token.reply":
            raise SetupError(f"cannot get a user token: {reply}")
        tokens["user"] = reply[1]["token"]
        tokens["expired_credential"] = mint_user_token(secret, "fz-user", "credential", int(time.time()) - 100)
        tokens["expired_user"] = mint_user_token(secret, "fz-user", "token", int(time.time()) - 100)
        self.credentials.remember(full, KEY_RIGHTS[FULL_KEY])
        self.credentials.remember(listen, KEY_RIGHTS[LISTEN_KEY])
        self.credentials.remember(tokens["credential"], "credential")
        self.credentials.remember(tokens["user"], "token")
        self.credentials.remember(tokens["expired_credential"], "expired")
        self.credentials.remember(tokens["expired_user"], "expired")
        self.tokens = tokens

        # What the fuzzed requests build on: installations to patch, a user with notifications.
        controls = [("nh-registry", "installation.upsert", {"installation": {
            "installationId": f"fz-{i}", "platform": "gcm", "pushChannel": "fz-channel", "tags": ["fz-a"]}}, full)
            for i in range(10)]
        controls += [
            ("nh-publish", "notification.send", {"format": "native", "body": "{}", "tagExpression": "fz-nobody",
                                                 "timeToLive": 60}, full),
            ("nh-sync", "user.post", {"userId": "fz-user", "appNotificationId": "fz-app-0",
                                      "visual": {"title": "t", "body": "b"}}, full),
            ("nh-publish", "rich.send", {"message": "m", "richType": "image", "contentType": "image/png",
                                         "payload": "AQID", "tagExpression": "fz-nobody", "timeToLive": 60}, full),
        ]
        for service, kind, payload, auth in controls:
            reply = self.call(service, kind, payload, auth)
            if not reply or reply[0] != REPLY_TYPES[kind]:
                raise SetupError(f"{service} refused a valid {kind}: {reply}")
            self.record_accepted(reply[0], reply[1])

        fixtures_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "Tests", "HubProtocolTests", "Fixtures")
        fixtures = []
        for name in sorted(os.listdir(fixtures_dir)):
            if name.endswith(".json"):
                with open(os.path.join(fixtures_dir, name), "rb") as f:
                    fixtures.append((name, f.read().strip()))
        wire = []
        wire_dir = os.path.join(fixtures_dir, "agent-wire")
        for name in sorted(os.listdir(wire_dir)):
            with open(os.path.join(wire_dir, name), "rb") as f:
                wire.append((name, f.read()))
        if not fixtures or not wire:
            raise SetupError(f"no fixtures in {fixtures_dir}")
        excluded = set(self.args.exclude)
        self.generator_parts = (tokens, fixtures, wire, excluded)

    def http_generator(self, number):
        tokens, _, _, excluded = self.generator_parts
        return HttpGenerator(random.Random(f"{self.args.seed}/http/{number}"), tokens, f"127.0.0.1:{self.hub.http_port}",
                             excluded)

    def generator(self, target):
        """A generator of its own for each target, seeded from the run's seed and the target's name,
        so that a seed gives every target the same inputs whatever the timing of the replies."""
        tokens, fixtures, wire, excluded = self.generator_parts
        prefix = "".join(word[0] for word in target.replace("-", " ").replace(".", " ").split()) + "-"
        return Generator(random.Random(f"{self.args.seed}/{target}"), tokens, fixtures, wire, excluded, prefix=prefix)

    def record_accepted(self, kind, payload):
        try:
            if kind == "notification.accepted":
                self.accepted_notifications.add(payload["notificationId"])
            elif kind == "rich.accepted":
                self.accepted_notifications.add(payload["notificationId"])
                self.rich_ids.add(payload["richId"])
            elif kind == "installation.reply":
                self.accepted_installations.add(payload["installation"]["installationId"])
            elif kind == "user.notification":
                self.accepted_user_notifications.add(payload["notification"]["id"])
        except (KeyError, TypeError):
            pass

    def note_lenient(self, target, case):
        if len(self.lenient_examples) < 3:
            frames = case.frames
            self.lenient_examples.append((target, self.failures.reproducer(target, frames, None)))

    # Inputs past a socket's frame limit: the connection is dropped, and the service goes on.

    def socket_limits(self):
        """Sends every socket one frame past its limit at once, then checks that each service dropped
        the connection (or refused the frame) and still answers."""
        if "socket-limit" in self.args.exclude:
            return
        probes = []
        for name in SERVICES:
            limit = socket_limit(PUBLISH_MAX_BYTES if name == "nh-publish" else MAX_MESSAGE_BYTES)
            s = self.context.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            self.secure(s, name)
            s.connect(self.hub.endpoint(SECTIONS[name]))
            frames = [b"", b"x" * (limit + 1)]
            s.send_multipart(frames)
            probes.append((name, name, s, frames))
        s = self.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        public, secret = zmq.curve_keypair()
        s.curve_publickey, s.curve_secretkey, s.curve_serverkey = public, secret, self.agent_server_key
        s.connect(self.hub.endpoint("DISPATCH", "AGENTS"))
        frames = [b"ack\n" + b"x" * AGENT_SOCKET_LIMIT]
        s.send_multipart(frames)
        probes.append(("nh-dispatch agents", "nh-dispatch", s, frames))
        time.sleep(1.5)
        for target, service, s, frames in probes:
            self.stats.inputs[target] += 1
            self.stats.kinds[target]["socket-limit"] += 1
            if s.poll(0):
                text = s.recv_multipart()[-1]
                refused = (parse_reply(text) or ("",))[0] == "error" or text.startswith(b"error\n")
                if not refused:
                    self.failures.add(target, "accepted malformed input", "answered a frame past the socket's limit", frames)
            s.close(linger=0)
        for target, service, s, frames in probes:
            if not self.health(service, timeout=15):
                self.failures.add(target, "unhealthy", "no health reply after a frame past the socket's limit", frames)

    # The main loop.

    def run(self):
        args = self.args
        total = args.frames
        weights = dict(WEIGHTS)
        for name in args.skip_target:
            weights.pop(name, None)
        scale = sum(weights.values())
        quotas = {name: int(total * weight / scale) for name, weight in weights.items()}
        remainder = total - sum(quotas.values())
        if weights:
            quotas[max(weights, key=weights.get)] += remainder
        for name, service in [("nh-registry", "nh-registry"), ("nh-sync", "nh-sync"), ("nh-dispatch", "nh-dispatch"),
                              ("nh-publish", "nh-publish"), ("nh-gateway", "nh-gateway"), ("nh-agent", "nh-agent")]:
            if name in quotas:
                types = sorted(t for t in SERVICE_TYPES[service] if not (service == "nh-publish" and t == "user.post"))
                self.channels.append(RequestChannel(self, name, service, args.window, quotas[name], types))
        if "nh-publish user.post" in quotas:
            self.channels.append(RequestChannel(self, "nh-publish user.post", "nh-publish", 1, quotas["nh-publish user.post"],
                                                ["user.post"]))
        if "nh-dispatch agents" in quotas:
            self.channels.append(AgentChannel(self, "nh-dispatch agents", "nh-dispatch", args.window,
                                              quotas["nh-dispatch agents"]))
        if quotas.get("nh-gateway http"):
            workers = max(1, args.http_workers)
            for number in range(workers):
                quota = quotas["nh-gateway http"] // workers + (1 if number < quotas["nh-gateway http"] % workers else 0)
                self.http.append(HttpWorker(self, quota, number))
            for worker in self.http:
                worker.start()

        started = time.monotonic()
        self.started = started
        next_process_check = next_health = next_progress = started
        time_limit = started + args.time_limit if args.time_limit else None
        while True:
            for channel in self.channels:
                burst = 0
                while burst < 64 and channel.wants():
                    if not channel.send_next():
                        break
                    burst += 1
            for sock, _ in self.poller.poll(10):
                channel = self.by_socket.get(sock)
                if channel is not None:
                    channel.drain()
            now = time.monotonic()
            if now >= next_process_check:
                self.check_processes()
                next_process_check = now + 0.5
            if now >= next_health:
                self.check_health()
                next_health = time.monotonic() + args.check_interval
            for channel in self.channels:
                channel.check_timeout(now)
            if args.progress and now >= next_progress:
                self.progress(now - started)
                next_progress = now + 10
            if time_limit and now > time_limit:
                for channel in self.channels:
                    channel.quota = channel.sent
                for worker in self.http:
                    worker.quota = worker.sent
                time_limit = None
                self.timed_out = True
            if all(channel.done() for channel in self.channels):
                break
        for worker in self.http:
            worker.join(timeout=args.reply_timeout + 60)
            if worker.is_alive():
                self.failures.add("nh-gateway http", "no response", "the HTTP requests did not finish")
                self.stopping.set()
                worker.join(timeout=30)
            if worker.error:
                raise RuntimeError(f"the HTTP fuzzer failed:\n{worker.error}")
        self.elapsed = time.monotonic() - started

    def progress(self, elapsed):
        sent = sum(self.stats.inputs.values())
        print(f"  {elapsed:6.0f} s  {sent:9d} inputs  {sent / max(elapsed, 0.001):7.0f}/s  failures {self.failures.total}",
              file=sys.stderr, flush=True)

    def check_processes(self):
        for name in SERVICES:
            if self.down.get(name) or self.alive(name):
                continue
            self.on_crash(name)

    def check_health(self):
        self.health_rounds += 1
        for name in SERVICES:
            if self.down.get(name):
                continue
            if not self.alive(name):
                self.on_crash(name)
            elif not self.health(name, timeout=self.args.reply_timeout):
                if not self.alive(name):
                    self.on_crash(name)
                else:
                    self.failures.add(name, "unhealthy", f"no health reply within {self.args.reply_timeout:.0f} s")
        self.rss_sample("end")

    def log_tail(self, name, lines=12):
        """The end of a service's log; after a crash, where it crashed."""
        try:
            with open(os.path.join(self.hub.data, f"{name}.log"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 65536))
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        marks = [i for i, line in enumerate(text) if "*** Program crashed" in line or "Fatal error" in line]
        if marks:
            frames = [line.strip() for line in text[marks[-1]:] if ".swift:" in line]
            return "\n".join([text[marks[-1]].strip()] + frames[:8])
        return "\n".join(text[-lines:])

    def on_crash(self, name):
        process = self.hub.processes.get(name)
        code = process.poll() if process else None
        candidates = []
        for channel in self.channels:
            if channel.service == name:
                candidates += [(channel, case) for case, _, _ in channel.inflight]
        self.crashed.add(name)
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        recent = ""
        if self.recent_http:
            recent = "\n      recent requests to the gateway, which forwards to the services: " + "; ".join(
                f"{c.kind} {(c.method or 'raw')} {(c.target or '')[:60]}" for c in list(self.recent_http)[-4:])
        self.failures.add(name, "crash", f"{name} {how} with {len(candidates)} inputs in flight; log ends:\n"
                          + "\n".join("      " + line for line in self.log_tail(name).splitlines()) + recent)
        self.down[name] = True
        for channel in self.channels:
            if channel.service == name:
                channel.reset()
        if self.restarts[name] >= self.args.restarts or not self.restart(name):
            self.give_up(name)
            return
        self.crash_count[name] += 1
        if self.crash_count[name] > self.args.replays:
            return
        culprit = self.find_culprit(name, candidates[:self.args.replay_limit])
        if culprit is not None:
            channel, case = culprit
            self.failures.add(channel.name, "crash reproducer", f"this {case.kind} input alone makes {name} exit", case.frames)
            if self.restarts[name] >= self.args.restarts or not self.restart(name):
                self.give_up(name)

    def give_up(self, name):
        """No more restarts: what was left to send to the service is not sent."""
        self.failures.add(name, "stopped", f"{name} stays down after {self.restarts[name]} restarts; "
                          "the inputs left for it were not sent")
        for channel in self.channels:
            if channel.service == name:
                channel.quota = channel.sent
                channel.reset()
        if name == "nh-gateway":
            for worker in self.http:
                worker.quota = worker.sent

    def restart(self, name):
        self.restarts[name] += 1
        process = self.hub.processes.pop(name, None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=15)
        self.launch(name)
        self.health_sockets.pop(name, None)
        if not wait_until(lambda: self.health(name, timeout=2), 30):
            self.failures.add(name, "unhealthy", "no health reply after a restart")
            return False
        self.down[name] = False
        return True

    def find_culprit(self, name, candidates):
        """Sends the inputs that were in flight one at a time until one makes the service exit."""
        for channel, case in candidates:
            s = channel.make_socket()
            try:
                s.send_multipart(case.frames)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and self.alive(name):
                    if s.poll(50):
                        s.recv_multipart()
                        break
                time.sleep(0.2)
                if not self.alive(name):
                    return channel, case
            finally:
                s.close(linger=0)
        return None

    # The end.

    def final_checks(self):
        self.stopping.set()
        time.sleep(1)
        for name in SERVICES:
            if not self.alive(name):
                if not self.down.get(name):
                    self.on_crash(name)
                continue
            if not self.health(name, timeout=self.args.reply_timeout):
                self.failures.add(name, "unhealthy", "no health reply at the end")
        self.rss_sample("end")
        result = subprocess.run([os.path.join(self.hub.bin, "nhctl"), "health", "--json"], env=self.hub.env,
                                capture_output=True, text=True, timeout=60)
        self.nhctl_health = result.stdout.strip()
        if result.returncode != 0:
            self.failures.add("nhctl", "unhealthy", f"nhctl health exited {result.returncode}:\n{result.stdout}{result.stderr}")
        limit = self.args.rss_growth_mb * 1024
        for name, entry in self.rss.items():
            if entry["end"] - entry["start"] > limit:
                self.failures.add(name, "memory", f"resident memory grew from {entry['start'] // 1024} MiB to "
                                  f"{entry['end'] // 1024} MiB (bound: {self.args.rss_growth_mb} MiB)")
        self.store_checks()

    def store_checks(self):
        """Everything in the stores was accepted by a reply seen here, or by a request whose reply
        was lost when a connection was dropped (as at a crash)."""
        self.store_report = []
        full = self.tokens["full"]
        root = self.tokens["root"]

        def compare(store, found, accepted):
            unexpected = len(found - accepted) if isinstance(found, set) else max(0, found - len(accepted))
            total = len(found) if isinstance(found, set) else found
            allowance = self.lost_storing[store]
            line = f"{total} {store}, {len(accepted)} accepted by replies seen"
            if allowance:
                line += f", {allowance} requests that could store one lost with their connection"
            if unexpected > allowance:
                self.failures.add(store, "accepted without a reply",
                                  f"{unexpected} {store} in the store were never acknowledged to a sender"
                                  + (f", such as {sorted(found - accepted)[:3]}" if isinstance(found, set) else ""))
                line += f": {unexpected} unaccounted for"
            self.store_report.append(line)

        found, after = set(), 0
        for _ in range(10_000):
            reply = self.call("nh-publish", "notification.pending", {"after": after, "limit": 1000}, root, timeout=30)
            if not reply or reply[0] != "notification.pending.reply":
                self.failures.add("nh-publish", "store check", f"notification.pending failed: {reply}")
                break
            notifications = reply[1]["notifications"]
            if not notifications:
                break
            found.update(item["notificationId"] for item in notifications)
            after = max(item["sequence"] for item in notifications)
        compare("notifications", found, self.accepted_notifications)
        details = self.health("nh-publish", details=True)
        self.store_report.append(f"{details.get('richPayloads', '?')} rich payloads stored, {len(self.rich_ids)} accepted")
        if int(details.get("richPayloads", "0")) > len(self.rich_ids) + self.lost_storing["notifications"]:
            self.failures.add("nh-publish", "accepted without a reply", "more rich payloads stored than accepted")

        found, after = set(), None
        for _ in range(10_000):
            payload = {"limit": 1000}
            if after:
                payload["after"] = after
            reply = self.call("nh-registry", "installation.list", payload, full, timeout=30)
            if not reply or reply[0] != "installation.page":
                self.failures.add("nh-registry", "store check", f"installation.list failed: {reply}")
                break
            found.update(item["installationId"] for item in reply[1]["installations"])
            after = reply[1].get("next")
            if not after:
                break
        compare("installations", found, self.accepted_installations | {"fuzz-agent"})

        details = self.health("nh-sync", details=True)
        compare("user notifications", int(details.get("notifications", "0")), self.accepted_user_notifications)

    def stop(self):
        self.stopping.set()
        for channel in self.channels:
            channel.close()
        for s in self.health_sockets.values():
            s.close(linger=0)
        self.health_sockets.clear()
        if self.hub is not None:
            self.hub.stop_all()
        # Closes any socket still open (one being set up when a failure struck) instead of waiting for it.
        self.context.destroy(linger=0)

    def report(self):
        stats = self.stats
        out = []
        sent = sum(stats.inputs.values())
        elapsed = getattr(self, "elapsed", 0.0)
        out.append(f"nh fuzz: seed {self.args.seed}, {sent} inputs in {elapsed:.1f} s "
                   f"({sent / max(elapsed, 0.001):.0f}/s), executables in {self.hub.bin}")
        if getattr(self, "timed_out", False):
            out.append(f"  stopped at the time limit of {self.args.time_limit} s")
        out.append("")
        out.append(f"  {'target':24} {'inputs':>9} {'accepted':>9} {'refused':>9} {'lost':>6} {'done in':>8}  inputs by generator")
        names = list(stats.inputs)
        finished = {channel.name: channel.finished for channel in self.channels}
        if self.http and all(worker.finished for worker in self.http):
            finished["nh-gateway http"] = max(worker.finished for worker in self.http)
        for name in names:
            refused = sum(v for k, v in stats.codes[name].items() if not k.startswith("HTTP "))
            kinds = ", ".join(f"{k} {v}" for k, v in stats.kinds[name].most_common())
            took = f"{finished[name] - self.started:7.1f}s" if finished.get(name) else "       -"
            out.append(f"  {name:24} {stats.inputs[name]:9d} {stats.ok[name]:9d} {refused:9d} {stats.lost[name]:6d} {took}  {kinds}")
        out.append("")
        out.append("  replies by error code:")
        for name in names:
            if stats.codes[name]:
                codes = ", ".join(f"{k} {v}" for k, v in sorted(stats.codes[name].items(), key=lambda kv: (-kv[1], kv[0])))
                out.append(f"    {name}: {codes}")
        accepted = [(name, counter) for name, counter in stats.accepted.items() if counter]
        if accepted:
            out.append("  accepted, as the oracle allowed (valid or unjudgeable inputs):")
            for name, counter in accepted:
                out.append(f"    {name}: " + ", ".join(f"{k} {v}" for k, v in counter.most_common()))
        if stats.lenient:
            out.append("  accepted although not strict JSON (the services' JSON parser takes trailing commas and "
                       "UTF-16): " + ", ".join(f"{k} {v}" for k, v in stats.lenient.items()))
            for target, reproducer in self.lenient_examples[:2]:
                out.append(f"    e.g. {target}: {reproducer}")
        busy = ", ".join(f"{k} {v}" for k, v in stats.busy.items() if v)
        if busy:
            out.append(f"  answered unavailable or timeout by a busy dependency: {busy}")
        unanswered = stats.unanswered.get("nh-gateway http", 0)
        if unanswered:
            out.append(f"  raw HTTP inputs the gateway neither answered nor closed within the wait: {unanswered}")
        out.append("")
        out.append(f"  health: {self.health_rounds} rounds during the run and one at the end; nhctl health "
                   + ("answered by every service" if "nhctl" not in {key[0] for key in self.failures.groups} else "failed"))
        if self.restarts:
            out.append("  restarts after a crash: " + ", ".join(f"{k} {v}" for k, v in self.restarts.items()))
        out.append(f"  resident memory (MiB), bound on growth {self.args.rss_growth_mb}:")
        for name in SERVICES:
            entry = self.rss.get(name)
            if entry:
                note = " (restarted; from its restart)" if entry.get("restarted") else ""
                out.append(f"    {name:12} start {entry['start'] / 1024:7.1f}  end {entry['end'] / 1024:7.1f}  "
                           f"peak {entry['peak'] / 1024:7.1f}  growth {(entry['end'] - entry['start']) / 1024:+7.1f}{note}")
        for line in getattr(self, "store_report", []):
            out.append(f"  stores: {line}")
        out.append("")
        out.append(f"failures: {self.failures.total}")
        for (target, kind, group_by), group in self.failures.groups.items():
            out.append(f"  [{target}] {kind}{' — ' + group_by if group_by else ''}: {group['count']}")
            for detail, reproducer in group["examples"]:
                out.append(f"    - {detail}")
                if reproducer:
                    out.append(f"      input to {target}: {reproducer}")
        print("\n".join(out), flush=True)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description="Fuzz every socket of a hub started for the purpose.")
    parser.add_argument("--frames", type=int, default=100_000, help="inputs to send, over every target (default 100000)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    parser.add_argument("--window", type=int, default=256, help="requests in flight per socket (default 256)")
    parser.add_argument("--bin", default=BIN, help="folder of the executables (default NH_BIN_DIR or .build/debug)")
    parser.add_argument("--rss-growth-mb", type=int, default=200, help="fail when a service's RSS grows more (default 200)")
    parser.add_argument("--check-interval", type=float, default=5.0, help="seconds between health rounds (default 5)")
    parser.add_argument("--reply-timeout", type=float, default=20.0, help="seconds to wait for any reply (default 20)")
    parser.add_argument("--oversize-every", type=int, default=25_000,
                        help="send a frame over maxMessageBytes first and then every N inputs per socket")
    parser.add_argument("--restarts", type=int, default=30, help="restarts of a crashed service before giving up on it")
    parser.add_argument("--replays", type=int, default=2,
                        help="crashes of a service whose inputs in flight are replayed one by one to find the cause")
    parser.add_argument("--replay-limit", type=int, default=300, help="inputs in flight replayed to find a crash's cause")
    parser.add_argument("--time-limit", type=float, default=0, help="stop sending after this many seconds (0: none)")
    parser.add_argument("--exclude", type=lambda s: [x for x in s.split(",") if x], default=[],
                        help="generators to leave out, comma-separated: on request sockets " + ", ".join(REQUEST_KINDS)
                        + ", oversize; on the agent socket " + ", ".join(AGENT_KINDS) + "; over HTTP raw, auth, version, "
                        "installation, patch, messages, users, routes; and directed (the inputs every run begins with), "
                        "socket-limit (frames past a socket's limit)")
    parser.add_argument("--skip-target", type=lambda s: [x for x in s.split(",") if x], default=[],
                        help="targets to leave out, comma-separated: " + ", ".join(WEIGHTS))
    parser.add_argument("--strict-json", action="store_true",
                        help="count a body that is not strict JSON (a trailing comma, UTF-16) and is accepted as a failure")
    parser.add_argument("--http-workers", type=int, default=4, help="HTTP clients at once (default 4)")
    parser.add_argument("--accepted-log", help="write every accepted input to this file (JSON lines), to review the oracle")
    parser.add_argument("--log-level", default="warning", help="the services' log level (default warning)")
    parser.add_argument("--keep-data", action="store_true", help="keep the data folder even when nothing failed")
    parser.add_argument("--progress", action="store_true", help="print progress to standard error every 10 s")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 1_000_000_007
    return args


def main(argv=None):
    args = parse_arguments(argv)
    fuzzer = Fuzzer(args)

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    status = 2
    try:
        fuzzer.start()
        fuzzer.prepare()
        fuzzer.rss_sample("start")
        fuzzer.socket_limits()
        fuzzer.run()
        fuzzer.final_checks()
        fuzzer.report()
        status = 1 if fuzzer.failures.total else 0
    except SetupError as e:
        print(f"nh fuzz: cannot set up the hub: {e}", file=sys.stderr)
        if fuzzer.hub is not None:
            for name in SERVICES:
                tail = fuzzer.log_tail(name, 5) if os.path.isdir(fuzzer.hub.data) else ""
                if tail:
                    print(f"--- {name}.log\n{tail}", file=sys.stderr)
    except KeyboardInterrupt:
        print("nh fuzz: interrupted", file=sys.stderr)
        status = 130
    finally:
        fuzzer.stop()
        if fuzzer.hub is not None:
            if status == 0 and not args.keep_data:
                import shutil
                shutil.rmtree(fuzzer.hub.data, ignore_errors=True)
            else:
                print(f"data folder (logs, reproducers): {fuzzer.hub.data}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
