"""User notifications encrypted end to end: a backend encrypts a post for the user's key with a Web
Push library (http_ece, RFC 8291 aes128gcm), not the hub's code. The hub checks the record's framing
and keeps it as it came: the sync store, the publish store, the logs, nhctl and the agent's line
hold the record, never the plaintext, and the user's key (here, the test's) reads it back.

- a post with `encrypted` is stored and synced as posted; decrypted with the user's key it is the
  plaintext; the agent's line carries the record; nhctl shows "(encrypted)";
- no database file or log of the run holds the plaintext;
- refusals: not base64url, too short, a key id that is not a public key, two records, encrypted
  beside visual content."""
import base64
import json
import os
import subprocess

import pytest
import requests

from conftest import BIN, json_lines, running_hub, wait_until

API = "api-version=2015-01"
SECRET = "the launch code is 0000 über"


@pytest.fixture(scope="module")
def hub():
    yield from running_hub(prefix="nh-encrypted-")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class UserKey:
    """The user's key pair and auth secret, shaped as a Web Push subscription's."""

    def __init__(self):
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.public = self.private.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        self.auth = os.urandom(16)

    def encrypt(self, plaintext):
        """What a backend posts: http_ece's aes128gcm record for this key, base64url."""
        import http_ece
        from cryptography.hazmat.primitives.asymmetric import ec
        sender = ec.generate_private_key(ec.SECP256R1())
        return b64url(http_ece.encrypt(plaintext, private_key=sender, dh=self.public, auth_secret=self.auth, version="aes128gcm"))

    def decrypt(self, record):
        import http_ece
        return http_ece.decrypt(base64.urlsafe_b64decode(record + "=" * (-len(record) % 4)), private_key=self.private,
                                auth_secret=self.auth, version="aes128gcm")


def post(hub, user, document):
    return requests.post(f"{hub.base}/hub/users/{user}/notifications?{API}", data=json.dumps(document),
                         headers={"Authorization": hub.token(), "Content-Type": "application/json"}, timeout=30)


def test_an_encrypted_post_is_kept_and_synced_as_posted(hub):
    key = UserKey()
    credential = subprocess.run([os.path.join(BIN, "nhctl"), "user", "credential", "erin"], env=hub.env,
                                capture_output=True, text=True, check=True).stdout.strip()
    output = os.path.join(hub.data, "erin.jsonl")
    hub.start("erin-agent", "nh-agent", env={"NH_AGENT_HOME": os.path.join(hub.data, "erin-agent"),
                                             "NH_AGENT_INSTALLATION_ID": "erin-laptop", "NH_AGENT_USER_CREDENTIAL": credential,
                                             "NH_AGENT_DESKTOP": "0", "NH_AGENT_UNIFIEDPUSH": "0"},
              stdout=open(output, "ab"))
    plaintext = json.dumps({"visual": {"title": "Launch", "body": SECRET}}).encode()
    record = key.encrypt(plaintext)
    r = post(hub, "erin", {"appNotificationId": "launch-1", "encrypted": record, "priority": "high"})
    assert r.status_code == 201, r.text
    stored = r.json()["notification"]
    assert stored["encrypted"] == record and "visual" not in stored and stored["priority"] == "high"
    assert key.decrypt(stored["encrypted"]) == plaintext

    # The device's line carries the record as posted, and the state syncs as for any notification.
    def created():
        return [line for line in json_lines(output) if line.get("event") == "user.created" and line.get("id") == stored["id"]]
    assert wait_until(created, timeout=30), json_lines(output)[-3:]
    assert created()[0]["notification"]["encrypted"] == record
    listed = subprocess.run([os.path.join(BIN, "nhctl"), "user", "list", "erin"], env=hub.env, capture_output=True, text=True,
                            check=True).stdout
    assert "(encrypted)" in listed and SECRET not in listed
    done = subprocess.run([os.path.join(BIN, "nh-agent"), "dismiss", stored["id"]],
                          env={**hub.env, "NH_AGENT_HOME": os.path.join(hub.data, "erin-agent")}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: "dismissed" in subprocess.run([os.path.join(BIN, "nhctl"), "user", "list", "erin"], env=hub.env,
                                                            capture_output=True, text=True).stdout, timeout=20)

    # Nothing the hub wrote holds the plaintext: every database file and every log of the run.
    needles = [SECRET.encode(), SECRET.encode("utf-16-le"), b64url(SECRET.encode()).encode()]
    for folder, _, files in os.walk(hub.data):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                content = f.read()
            assert not any(needle in content for needle in needles), f"{path} holds the plaintext"


@pytest.mark.parametrize("case", ["base64", "short", "keyid", "two records", "beside visual", "oversize"])
def test_a_record_that_is_not_rfc_8291_is_refused(hub, case):
    key = UserKey()
    good = base64.urlsafe_b64decode(key.encrypt(b'{"visual":{"title":"t","body":"b"}}') + "==")
    record = {
        "base64": "not base64!",
        "short": b64url(good[:90]),
        "keyid": b64url(good[:20] + bytes([16]) + good[21:]),
        "two records": b64url(good[:16] + (18).to_bytes(4, "big") + good[20:]),
        "beside visual": b64url(good),
        "oversize": "A" * 90_000,
    }[case]
    document = {"appNotificationId": f"bad-{case}", "encrypted": record}
    if case == "beside visual":
        document["visual"] = {"title": "in the clear", "body": "too"}
    r = post(hub, "erin", document)
    assert r.status_code in (400, 413), r.text
    code = "payload_too_large" if case == "oversize" else "invalid_payload"
    assert code in r.text and "encrypted" in r.text, r.text
