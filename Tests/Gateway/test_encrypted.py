"""User notifications encrypted end to end. A backend fetches the user's public key from the hub
and encrypts each post for it with a Web Push library (http_ece, RFC 8291 aes128gcm), not the hub's
code; the user's devices hold the private key, which they hand each other by pairing, and read the
post. The hub checks the record's framing and key id and keeps it as it came.

- two paired devices show the plaintext; a dismiss on one reaches the other; nhctl shows
  "(encrypted)"; no database file or log of the hub holds the plaintext;
- pairing: the confirmation strings match; a key swapped in the middle (by the store itself, with
  SQLite triggers, as a hostile hub would) is refused, or makes the strings differ;
- recovery with the recovery key; rotation with a revoked device: the revoked one gets nothing
  new, the others take the new key, and notifications from before stay readable;
- refusals: a record that is not RFC 8291, a wrong or missing key id, a user without a key, and
  plaintext to a user who refuses it."""
import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import tempfile

import pytest
import requests

import agentprompt  # noqa: E402  (Tests/Support, on the path conftest sets)
from conftest import BIN, free_port, json_lines, running_hub, wait_until

API = "api-version=2015-01"
SECRET = "the launch code is 0000 über"
AFTER = "the launch moved to noon ünd"


@pytest.fixture(scope="module")
def hub():
    yield from running_hub(prefix="nh-encrypted-")


@pytest.fixture(scope="module")
def devices():
    """Each device's home and output live outside the hub's data folder: a device reads plaintext."""
    return tempfile.mkdtemp(prefix="nh-encrypted-devices-")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encrypt(key, plaintext):
    """What a backend posts: http_ece's aes128gcm record for the user's key as the hub hands it out."""
    import http_ece
    from cryptography.hazmat.primitives.asymmetric import ec
    sender = ec.generate_private_key(ec.SECP256R1())
    return b64url(http_ece.encrypt(plaintext, private_key=sender, dh=unb64url(key["p256dh"]), auth_secret=unb64url(key["auth"]),
                                   version="aes128gcm"))


def post(hub, user, document):
    return requests.post(f"{hub.base}/hub/users/{user}/notifications?{API}", data=json.dumps(document),
                         headers={"Authorization": hub.token(), "Content-Type": "application/json"}, timeout=30)


def user_key(hub, user):
    return requests.get(f"{hub.base}/hub/users/{user}/key?{API}", headers={"Authorization": hub.token()}, timeout=30)


def content(text, body=None):
    return json.dumps({"visual": {"title": "Launch", "body": body or text}}).encode()


class Device:
    """One of the user's devices: an agent home, its one-shot commands, and its daemon."""

    def __init__(self, hub, root, user, name, credential):
        self.hub, self.user, self.name = hub, user, name
        self.home = os.path.join(root, name)
        self.output = os.path.join(root, f"{name}.jsonl")
        self.env = {**hub.env, "NH_AGENT_HOME": self.home, "NH_AGENT_INSTALLATION_ID": name, "NH_AGENT_USER_CREDENTIAL": credential,
                    "NH_AGENT_DESKTOP": "0", "NH_AGENT_UNIFIEDPUSH": "0", "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}

    def run(self, *arguments, stdin=None):
        return subprocess.run([os.path.join(BIN, "nh-agent"), *arguments], env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=60)

    def spawn(self, *arguments):
        return agentprompt.spawn(self.env, *arguments)

    def start(self):
        self.hub.start(self.name, "nh-agent", env=self.env, stdout=open(self.output, "ab"))

    def lines(self, event, notification_id):
        return [line for line in json_lines(self.output) if line.get("event") == event and line.get("id") == notification_id]

    def shown(self, notification_id):
        """The notification as the device's line showed it when it came."""
        assert wait_until(lambda: self.lines("user.created", notification_id), timeout=30), json_lines(self.output)[-3:]
        return self.lines("user.created", notification_id)[0]["notification"]


def credential(hub, user):
    return subprocess.run([os.path.join(BIN, "nhctl"), "user", "credential", user], env=hub.env, capture_output=True, text=True,
                          check=True).stdout.strip()


def pair(new, holder, answer_new="y", answer_holder="y"):
    """Pairs `new` with `holder` as a person does: the code from one typed into the other, the
    confirmation strings compared. Returns both strings and both processes' results."""
    joining = new.spawn("pair")
    code = agentprompt.after(joining, "Pairing code:")
    accepting = holder.spawn("pair", "accept", code)
    seen_new = agentprompt.after(joining, "Confirmation:")
    lines = []
    seen_holder = None
    for line in accepting.stdout:
        lines.append(line)
        if line.startswith("Confirmation:"):
            seen_holder = line[len("Confirmation:"):].strip()
            break
        if line.startswith("Pairing refused"):
            break
    if seen_holder is not None:
        agentprompt.answer(accepting, answer_holder)
    agentprompt.answer(joining, answer_new)
    out_holder, err_holder = accepting.communicate(timeout=60)
    out_new, err_new = joining.communicate(timeout=60)
    return {"code": code, "new": seen_new, "holder": seen_holder, "new_rc": joining.returncode, "holder_rc": accepting.returncode,
            "new_out": out_new + err_new, "holder_out": "".join(lines) + out_holder + err_holder}


state = {}


def test_two_paired_devices_show_the_plaintext_and_the_hub_keeps_none(hub, devices):
    erin = credential(hub, "erin")
    laptop = Device(hub, devices, "erin", "erin-laptop", erin)
    phone = Device(hub, devices, "erin", "erin-phone", erin)
    assert user_key(hub, "erin").status_code == 404
    made = laptop.run("keys", "init")
    assert made.returncode == 0, made.stderr
    recovery = [line.strip() for line in made.stdout.splitlines() if line.count("-") == 12]
    assert len(recovery) == 1, made.stdout
    state["recovery"] = recovery[0]
    again = phone.run("keys", "init")
    assert again.returncode != 0 and "has a key already" in again.stderr

    paired = pair(phone, laptop)
    assert paired["new_rc"] == 0 and paired["holder_rc"] == 0, paired
    assert paired["new"] == paired["holder"] and len(paired["new"]) == 7, paired
    listed = laptop.run("keys")
    assert "erin-phone" in listed.stdout and "erin-laptop" in listed.stdout, listed.stdout

    # The backend: the user's public key from the hub, a record made with http_ece, posted with its key id.
    key = user_key(hub, "erin").json()
    assert set(key) >= {"keyId", "p256dh", "auth"} and "devices" not in key and "recovery" not in key, key
    state["key"] = key
    record = encrypt(key, content(SECRET))
    r = post(hub, "erin", {"appNotificationId": "launch-1", "encrypted": record, "keyId": key["keyId"], "priority": "high"})
    assert r.status_code == 201, r.text
    stored = r.json()["notification"]
    assert stored["encrypted"] == record and "visual" not in stored and stored["keyId"] == key["keyId"]
    state["first"] = stored["id"]

    for device in (laptop, phone):
        device.start()
    for device in (laptop, phone):
        shown = device.shown(stored["id"])
        assert shown["visual"] == {"title": "Launch", "body": SECRET}, shown
    listed = subprocess.run([os.path.join(BIN, "nhctl"), "user", "list", "erin"], env=hub.env, capture_output=True, text=True,
                            check=True).stdout
    assert "(encrypted)" in listed and SECRET not in listed

    # The headline still holds: a dismiss on one device reaches the other.
    done = laptop.run("dismiss", stored["id"])
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: any(line["notification"]["userActionState"] == "dismissed"
                                  for line in phone.lines("user.updated", stored["id"])), timeout=30)

    # Nothing the hub wrote holds the plaintext: every database file and every log of the run.
    needles = [SECRET.encode(), SECRET.encode("utf-16-le"), b64url(SECRET.encode()).encode()]
    for folder, _, files in os.walk(hub.data):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data = f.read()
            assert not any(needle in data for needle in needles), f"{path} holds the plaintext"
    state["devices"] = {"laptop": laptop, "phone": phone}


def hostile_store(hub, commitment):
    """Triggers in the sync store's SQLite file that swap the new device's revealed key for one of
    the store's own (and, with `commitment`, the commitment too, so that it matches): what a hub
    in the middle would do. Returns a function that takes them out again."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    own = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    swapped, committed = b64url(own), b64url(hashlib.sha256(own).digest())
    database = sqlite3.connect(os.path.join(hub.data, "sync.db"), timeout=30)
    database.execute(f"""CREATE TRIGGER hostile_reveal AFTER UPDATE ON user_vault
        WHEN new.name LIKE 'pairing/%' AND json_extract(new.value, '$.revealKey') IS NOT NULL
             AND json_extract(new.value, '$.revealKey') != '{swapped}'
        BEGIN UPDATE user_vault SET value = json_set(value, '$.revealKey', '{swapped}') WHERE user_id = new.user_id AND name = new.name; END""")
    if commitment:
        database.execute(f"""CREATE TRIGGER hostile_commitment AFTER INSERT ON user_vault WHEN new.name LIKE 'pairing/%'
            BEGIN UPDATE user_vault SET value = json_set(value, '$.commitment', '{committed}') WHERE user_id = new.user_id AND name = new.name; END""")
    database.commit()

    def remove():
        database.execute("DROP TRIGGER IF EXISTS hostile_reveal")
        database.execute("DROP TRIGGER IF EXISTS hostile_commitment")
        database.commit()
        database.close()
    return remove


@pytest.mark.parametrize("commitment", [False, True], ids=["key swapped", "key and commitment swapped"])
def test_a_key_swapped_in_the_middle_is_caught(hub, devices, commitment):
    laptop = state["devices"]["laptop"]
    tablet = Device(hub, devices, "erin", f"erin-tablet-{int(commitment)}", laptop.env["NH_AGENT_USER_CREDENTIAL"])
    remove = hostile_store(hub, commitment)
    try:
        # The person compares the strings, and says no when they differ.
        paired = pair(tablet, laptop, answer_new="n", answer_holder="n")
    finally:
        remove()
    assert paired["new_rc"] != 0 and paired["holder_rc"] != 0, paired
    if commitment:
        # The swap passes the commitment, so the strings are what catches it.
        assert paired["holder"] and paired["new"] and paired["holder"] != paired["new"], paired
        assert "nothing was sent" in paired["holder_out"], paired
    else:
        # The commitment the holder read catches it before any string is shown.
        assert paired["holder"] is None and "Pairing refused" in paired["holder_out"], paired
    assert "holds" not in tablet.run("keys").stdout.split("\n")[-2] or "does not hold" in tablet.run("keys").stdout
    database = sqlite3.connect(os.path.join(hub.data, "sync.db"))
    rows = database.execute("SELECT value FROM user_vault WHERE name = ?", (f"pairing/{paired['code']}",)).fetchall()
    database.close()
    assert rows and "sealed" not in json.loads(rows[0][0]), rows


def test_recovery_rotation_and_revocation(hub, devices):
    laptop, phone = state["devices"]["laptop"], state["devices"]["phone"]
    old_key = state["key"]
    # A device with no other device at hand: the recovery key restores the keyring.
    desktop = Device(hub, devices, "erin", "erin-desktop", laptop.env["NH_AGENT_USER_CREDENTIAL"])
    wrong = desktop.run("keys", "recover", "A" * 52)
    assert wrong.returncode != 0
    recovered = desktop.run("keys", "recover", state["recovery"])
    assert recovered.returncode == 0, recovered.stderr
    assert SECRET in desktop.run("history").stdout

    # The phone is revoked; the laptop rotates. Backends get the new key; the old one is refused.
    rotated = laptop.run("keys", "rotate", "--revoke", "erin-phone")
    assert rotated.returncode == 0, rotated.stderr
    key = user_key(hub, "erin").json()
    assert key["keyId"] != old_key["keyId"]
    stale = post(hub, "erin", {"appNotificationId": "launch-stale", "encrypted": encrypt(old_key, content(AFTER)), "keyId": old_key["keyId"]})
    assert stale.status_code == 412 and "precondition_failed" in stale.text and key["keyId"] in stale.text, stale.text
    r = post(hub, "erin", {"appNotificationId": "launch-2", "encrypted": encrypt(key, content(AFTER)), "keyId": key["keyId"]})
    assert r.status_code == 201, r.text
    second = r.json()["notification"]["id"]

    # The laptop reads it; the desktop takes the rotation the hub keeps sealed for it, and reads
    # both; the revoked phone cannot read the new one, and still reads the old.
    assert laptop.shown(second)["visual"]["body"] == AFTER
    listed = desktop.run("history").stdout
    assert AFTER in listed and SECRET in listed, listed
    shown = phone.shown(second)
    assert "visual" not in shown and shown["encrypted"], shown
    assert phone.shown(state["first"])["visual"]["body"] == SECRET
    missing = requests.get(f"{hub.base}/hub/users/me/key?device=erin-phone&{API}", headers={"Authorization": "Bearer " + user_token(hub, laptop)},
                           timeout=30).json()
    assert "envelope" not in missing and all(d["device"] != "erin-phone" for d in missing["devices"]), missing


def user_token(hub, device):
    r = requests.post(f"{hub.base}/hub/users/tokens?{API}", json={"credential": device.env["NH_AGENT_USER_CREDENTIAL"]}, timeout=30)
    return r.json()["token"]


def test_posts_that_do_not_fit_the_key_are_refused(hub, devices):
    laptop = state["devices"]["laptop"]
    key = user_key(hub, "erin").json()
    record = encrypt(key, content("x"))
    missing = post(hub, "erin", {"appNotificationId": "no-key-id", "encrypted": record})
    assert missing.status_code == 400 and "keyId" in missing.text, missing.text
    wrong = post(hub, "erin", {"appNotificationId": "wrong-key-id", "encrypted": record, "keyId": "AAAAAAAAAAAAAAAA"})
    assert wrong.status_code == 412 and key["keyId"] in wrong.text, wrong.text
    nobody = post(hub, "frank", {"appNotificationId": "no-key", "encrypted": record, "keyId": key["keyId"]})
    assert nobody.status_code == 412 and "no encryption key" in nobody.text, nobody.text
    assert user_key(hub, "frank").status_code == 404
    # The user asks for encrypted posts alone.
    assert post(hub, "erin", {"appNotificationId": "plain-1", "visual": {"title": "t", "body": "b"}}).status_code == 201
    refused = laptop.run("keys", "rotate", "--plaintext", "refuse")
    assert refused.returncode == 0, refused.stderr
    key = user_key(hub, "erin").json()
    assert key["refusePlaintext"] is True
    plain = post(hub, "erin", {"appNotificationId": "plain-2", "visual": {"title": "t", "body": "b"}})
    assert plain.status_code == 412 and "only notifications encrypted" in plain.text, plain.text
    assert post(hub, "erin", {"appNotificationId": "enc-3", "encrypted": encrypt(key, content("y")), "keyId": key["keyId"]}).status_code == 201


def test_a_rich_payload_encrypted_for_the_user_is_stored_sealed_and_opened_by_the_device(hub, devices):
    """A rich send to the user whose payload is one RFC 8291 record: the hub stores and hands back
    the record, and the device writes the file it seals."""
    laptop = state["devices"]["laptop"]
    key = user_key(hub, "erin").json()
    picture = b"\x89PNG\r\n\x1a\n" + "a picture of the launch pad, ünd".encode() * 20
    import http_ece
    from cryptography.hazmat.primitives.asymmetric import ec
    record = http_ece.encrypt(picture, private_key=ec.generate_private_key(ec.SECP256R1()), dh=unb64url(key["p256dh"]),
                              auth_secret=unb64url(key["auth"]), version="aes128gcm")
    path = os.path.join(devices, "picture.sealed")
    with open(path, "wb") as f:
        f.write(record)
    nhctl = [os.path.join(BIN, "nhctl"), "send", "--rich", path, "--message", "New picture", "--rich-type", "image",
             "--content-type", "image/png"]
    wrong = subprocess.run(nhctl + ["--tag", "World", "--encrypted-for", key["keyId"]], env=hub.env, capture_output=True, text=True)
    assert wrong.returncode != 0 and "for one user" in wrong.stderr, wrong.stderr
    sent = subprocess.run(nhctl + ["--user", "erin", "--encrypted-for", key["keyId"], "--json"], env=hub.env, capture_output=True, text=True)
    assert sent.returncode == 0, sent.stderr
    notification = json.loads(sent.stdout)["notificationId"]

    def fetched():
        return [line for line in json_lines(laptop.output)
                if line.get("notificationId") == notification and (line.get("rich") or {}).get("path")]
    assert wait_until(fetched, timeout=30), json_lines(laptop.output)[-3:]
    rich = fetched()[0]["rich"]
    assert rich["keyId"] == key["keyId"]
    with open(rich["path"], "rb") as f:
        assert f.read() == picture
    needle = "a picture of the launch pad".encode()
    for folder, _, files in os.walk(hub.data):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                assert needle not in f.read(), f"{name} holds the plaintext"
    # A payload that claims encryption but is not a record is refused, saying so.
    with open(os.path.join(devices, "picture.png"), "wb") as f:
        f.write(picture)
    plain = subprocess.run(nhctl[:3] + [os.path.join(devices, "picture.png")] + nhctl[4:] + ["--user", "erin", "--encrypted-for", key["keyId"]],
                           env=hub.env, capture_output=True, text=True)
    assert plain.returncode != 0 and "invalid_payload" in plain.stderr and "rich payload" in plain.stderr, plain.stderr


@pytest.mark.parametrize("case", ["base64", "short", "keyid", "two records", "beside visual", "oversize"])
def test_a_record_that_is_not_rfc_8291_is_refused(hub, case):
    key = {"p256dh": b64url(state_key()), "auth": b64url(os.urandom(16))}
    good = unb64url(encrypt(key, b'{"visual":{"title":"t","body":"b"}}'))
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


def state_key():
    """A P-256 public point (the framing checks come before the key's)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    return ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
