"""The REST resources behind the web pages, without a browser: the pages themselves, health, the
tag-expression check, recent notifications, registrations by tag, and the user's event stream as
`curl -N` would read it (resuming from a cursor, refusals, and the end of a client that left)."""
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest
import requests

from conftest import BIN, wait_until

API = "api-version=2015-01"


def test_pages_are_served_with_a_strict_policy(hub):
    page = requests.get(f"{hub.base}/console")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["Content-Security-Policy"] and page.headers["X-Frame-Options"] == "DENY"
    assert 'data-hub="hub"' in page.text and "{{hub}}" not in page.text
    assert requests.get(f"{hub.base}/console", headers={"If-None-Match": page.headers["ETag"]}).status_code == 304
    inbox = requests.get(f"{hub.base}/inbox/")
    assert inbox.status_code == 200 and "inbox.js" in inbox.text
    script = requests.get(f"{hub.base}/web/console.js")
    assert script.status_code == 200 and script.headers["Content-Type"].startswith("text/javascript")
    assert requests.get(f"{hub.base}/", allow_redirects=False).headers["Location"] == "/console"
    missing = requests.get(f"{hub.base}/web/nothing.js")
    assert missing.status_code == 404 and "no page at /web/nothing.js" in missing.text
    assert requests.post(f"{hub.base}/console").status_code == 400
    # The icon the pages name, also where a browser asks for one by itself.
    for path in ("/web/favicon.svg", "/favicon.ico"):
        icon = requests.get(f"{hub.base}{path}")
        assert icon.status_code == 200 and icon.headers["Content-Type"] == "image/svg+xml" and icon.text.startswith("<svg"), path
    assert '<link rel="icon" href="/web/favicon.svg"' in page.text and '<link rel="icon" href="/web/favicon.svg"' in inbox.text


def test_health_reports_every_service(hub):
    assert requests.get(f"{hub.base}/hub/health").status_code == 401
    # Pids, versions and queue depths are for operators: a device's Listen key gets 401.
    assert requests.get(f"{hub.base}/hub/health", headers={"Authorization": hub.token("DefaultListenSharedAccessSignature")}).status_code == 401
    listen = {"Authorization": hub.token()}
    # The services may still be starting: the gateway answers first.
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/health", headers=listen).json()["status"] == "ok")
    r = requests.get(f"{hub.base}/hub/health", headers=listen)
    assert r.status_code == 200, r.text
    services = {s["service"]: s for s in r.json()["services"]}
    assert set(services) == {"nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"}
    assert all(s["up"] and s["uptimeSeconds"] >= 0 and s["version"] and s["pid"] > 0 for s in services.values())
    assert "inFlight" in services["nh-dispatch"]["details"]
    hub.stop("nh-sync")
    down = requests.get(f"{hub.base}/hub/health", headers=listen).json()
    assert down["status"] == "degraded" and [s for s in down["services"] if s["service"] == "nh-sync"][0] == {
        "service": "nh-sync", "up": False, "status": "down"}
    hub.start("nh-sync")
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/health", headers=listen).json()["status"] == "ok")


@pytest.mark.parametrize("expression,valid,position", [
    ("World && !Sports", True, None), ("", False, 0), ("World && (Sports", False, 9), ("World & Sports", False, 6),
    ("World || bad tag", False, 13), ("(" * 40 + "A" + ")" * 40, False, 32),
])
def test_expression_check_names_the_error_and_its_position(hub, expression, valid, position):
    r = requests.get(f"{hub.base}/hub/expressions/check", params={"expression": expression}, headers={"Authorization": hub.token()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["valid"] is valid
    if valid:
        assert body["tags"] == ["Sports", "World"]
    else:
        assert body["code"] == "invalid_expression" and body["message"] and body.get("position") == position


def test_expression_check_needs_send_rights_and_an_expression(hub):
    listen = hub.token("DefaultListenSharedAccessSignature")
    assert requests.get(f"{hub.base}/hub/expressions/check?expression=A", headers={"Authorization": listen}).status_code in (401, 403)
    r = requests.get(f"{hub.base}/hub/expressions/check", headers={"Authorization": hub.token()})
    assert r.status_code == 400 and "?expression=" in r.text
    long = requests.get(f"{hub.base}/hub/expressions/check", params={"expression": "A" * 5000}, headers={"Authorization": hub.token()}).json()
    assert long["valid"] is False and "limits.expressionBytes" in long["message"]


def test_recent_messages_newest_first_and_registrations_by_tag(hub):
    ids = []
    for tag in ["ConsoleA", "ConsoleB"]:
        r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"m": tag}), headers={
            "Authorization": hub.token(), "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": tag})
        assert r.status_code == 201, r.text
        ids.append(r.headers["TrackingId"])
    listed = requests.get(f"{hub.base}/hub/messages?$top=2&{API}", headers={"Authorization": hub.token()}).json()["messages"]
    assert [m["notificationId"] for m in listed] == ids[::-1]
    assert listed[0]["tags"] == "ConsoleB" and listed[0]["format"] == "template" and listed[0]["state"]

    for device, tags in [("tagged-1", ["Console", "Extra"]), ("tagged-2", ["Console"]), ("other-1", ["Elsewhere"])]:
        body = {"installationId": device, "platform": "linux", "pushChannel": f"channel-{device}", "tags": tags}
        r = requests.put(f"{hub.base}/hub/installations/{device}?{API}", data=json.dumps(body),
                         headers={"Authorization": hub.token(), "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
    feed = requests.get(f"{hub.base}/hub/tags/Console/registrations?{API}", headers={"Authorization": hub.token()})
    assert feed.status_code == 200 and feed.headers["Content-Type"].startswith("application/atom+xml")
    assert "tagged-1" in feed.text and "tagged-2" in feed.text and "other-1" not in feed.text
    page = requests.get(f"{hub.base}/hub/tags/Console/registrations?{API}&$top=1", headers={"Authorization": hub.token()})
    assert page.text.count("<entry") == 1 and page.headers.get("X-MS-ContinuationToken")
    listen = hub.token("DefaultListenSharedAccessSignature")
    assert requests.get(f"{hub.base}/hub/tags/Console/registrations?{API}", headers={"Authorization": listen}).status_code in (401, 403)


def user_token(hub, user):
    credential = subprocess.run([os.path.join(BIN, "nhctl"), "user", "credential", user], env=hub.env,
                                capture_output=True, text=True, check=True).stdout.strip()
    # The user endpoints need no api-version.
    r = requests.post(f"{hub.base}/hub/users/tokens", data=json.dumps({"credential": credential}))
    assert r.status_code == 200, r.text
    return r.json()["token"]


def post(hub, user, app_id):
    r = requests.post(f"{hub.base}/hub/users/{user}/notifications?{API}", headers={"Authorization": hub.token()},
                      data=json.dumps({"appNotificationId": app_id, "visual": {"title": app_id, "body": "b"}}))
    assert r.status_code == 201, r.text
    return r.json()["notification"]["id"]


class EventReader:
    """Reads a server-sent event stream on a thread over a plain socket, as `curl -N` shows it;
    `close` shuts the socket at once, as a client that leaves does."""

    def __init__(self, url, headers):
        parts = urllib.parse.urlsplit(url)
        self.events = []
        self.socket = socket.create_connection((parts.hostname, parts.port), timeout=30)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept: text/event-stream"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.socket.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.file = self.socket.makefile("rb")
        self.status = int(self.file.readline().split()[1])
        self.headers = {}
        while (line := self.file.readline().decode().strip()):
            name, value = line.split(":", 1)
            self.headers[name.lower()] = value.strip()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def chunks(self):
        """The body, undoing chunked transfer coding."""
        while True:
            size = int(self.file.readline().strip() or b"0", 16)
            if size == 0:
                return
            yield self.file.read(size)
            self.file.readline()

    def read(self):
        buffer, event = "", {}
        try:
            for chunk in self.chunks():
                buffer += chunk.decode()
                while "\n" in buffer:
                    line, buffer = buffer.split("\n", 1)
                    if line == "":
                        if "event" in event:
                            self.events.append(event)
                        event = {}
                    elif not line.startswith(":") and ":" in line:
                        field, value = line.split(":", 1)
                        event[field] = value[1:] if value.startswith(" ") else value
        except (OSError, ValueError):
            pass

    def named(self, name):
        return [e for e in self.events if e.get("event") == name]

    def close(self):
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.socket.close()


def test_event_stream_from_now_from_a_cursor_and_after_a_reconnect(hub):
    token = user_token(hub, "sse-user")
    bearer = {"Authorization": f"Bearer {token}"}
    first = post(hub, "sse-user", "one")
    live = EventReader(f"{hub.base}/hub/users/me/notifications/stream", bearer)
    assert live.status == 200 and live.headers["content-type"].startswith("text/event-stream")
    assert live.headers["cache-control"] == "no-cache" and live.headers["transfer-encoding"] == "chunked"
    assert wait_until(lambda: live.named("ready"))
    assert live.named("ready")[0]["id"] == "1"  # from now: the cursor the user stands at
    second = post(hub, "sse-user", "two")
    assert wait_until(lambda: live.named("created"))
    created = json.loads(live.named("created")[0]["data"])
    assert created["id"] == second and created["notification"]["visual"]["title"] == "two" and live.named("created")[0]["id"] == "2"
    r = requests.patch(f"{hub.base}/hub/users/me/notifications/{first}", headers=bearer, data=json.dumps({"readState": "read"}))
    assert r.status_code == 200
    assert wait_until(lambda: live.named("updated"))
    assert json.loads(live.named("updated")[0]["data"])["notification"]["readState"] == "read"
    live.close()

    # A client that comes back with Last-Event-ID gets what it missed, and only that.
    assert requests.delete(f"{hub.base}/hub/users/me/notifications/{second}", headers=bearer).status_code == 204
    resumed = EventReader(f"{hub.base}/hub/users/me/notifications/stream", {**bearer, "Last-Event-ID": "3"})
    assert wait_until(lambda: resumed.named("deleted"))
    assert [e["event"] for e in resumed.events] == ["ready", "deleted"] and json.loads(resumed.named("deleted")[0]["data"])["id"] == second
    resumed.close()

    # From cursor 0 (with the token in the query, for clients that cannot set headers): everything kept.
    everything = EventReader(f"{hub.base}/hub/users/me/notifications/stream?cursor=0&access_token={token}", {})
    assert wait_until(lambda: len(everything.events) >= 3)
    assert [e["event"] for e in everything.events[:3]] == ["ready", "created", "deleted"]
    everything.close()


def test_event_stream_refusals_and_a_client_that_leaves(hub):
    token = user_token(hub, "sse-other")
    bearer = {"Authorization": f"Bearer {token}"}
    assert requests.get(f"{hub.base}/hub/users/me/notifications/stream").status_code == 401
    assert requests.get(f"{hub.base}/hub/users/me/notifications/stream", headers={"Authorization": "Bearer nhu1.x.y"}).status_code == 401
    ahead = requests.get(f"{hub.base}/hub/users/me/notifications/stream?cursor=50", headers=bearer)
    assert ahead.status_code == 410 and "history_rewound" in ahead.text and "ahead of this user's latest change" in ahead.text
    bad = requests.get(f"{hub.base}/hub/users/me/notifications/stream?cursor=abc", headers=bearer)
    assert bad.status_code == 400 and "whole number" in bad.text
    assert requests.get(f"{hub.base}/hub/users/me/notifications/stream?api-version=1999-01", headers=bearer).status_code == 400

    def streams():
        health = requests.get(f"{hub.base}/hub/health", headers={"Authorization": hub.token()}).json()
        return int(next(s for s in health["services"] if s["service"] == "nh-gateway")["details"]["userStreams"])

    base = streams()
    reader = EventReader(f"{hub.base}/hub/users/me/notifications/stream", bearer)
    assert wait_until(lambda: reader.named("ready")) and streams() == base + 1
    reader.close()
    # Writes find the connection gone (the first draws the peer's reset, the next fails), and the
    # stream is let go; with no writes, the keep-alive every 15 s does the same.
    for index in range(5):
        post(hub, "sse-other", f"after-close-{index}")
        if wait_until(lambda: streams() == base, timeout=1):
            break
    assert streams() == base


def test_pages_from_web_root_and_a_clear_404_without_them(hub, tmp_path):
    from conftest import free_port
    pages = tmp_path / "web"
    pages.mkdir()
    (pages / "console.html").write_text("<p>console of {{hub}}</p>")
    for name, root in [("gw-webroot", str(pages)), ("gw-noweb", str(tmp_path / "missing"))]:
        port = free_port()
        hub.start(name, "nh-gateway", env={"NH_WEB_ROOT": root, "NH_GATEWAY_LISTEN": f"127.0.0.1:{port}",
                                           "NH_GATEWAY_REQUESTS": f"tcp://127.0.0.1:{free_port()}"})
        assert wait_until(lambda: _answers(port))
        console = requests.get(f"http://127.0.0.1:{port}/console")
        if name == "gw-webroot":
            assert console.status_code == 200 and console.text == "<p>console of hub</p>"
            assert requests.get(f"http://127.0.0.1:{port}/inbox").status_code == 404
        else:
            assert console.status_code == 404 and "the web pages are not installed" in console.text and "webRoot" in console.text
        assert hub.stop(name) == 0


def _answers(port):
    try:
        return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_one_user_may_hold_only_so_many_streams(hub):
    token = user_token(hub, "sse-many")
    readers = [EventReader(f"{hub.base}/hub/users/me/notifications/stream", {"Authorization": f"Bearer {token}"}) for _ in range(16)]
    try:
        assert all(reader.status == 200 for reader in readers)
        refused = requests.get(f"{hub.base}/hub/users/me/notifications/stream", headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 429 and "16 streams" in refused.text
        other = EventReader(f"{hub.base}/hub/users/me/notifications/stream",
                            {"Authorization": f"Bearer {user_token(hub, 'sse-else')}"})
        assert other.status == 200
        other.close()
    finally:
        for reader in readers:
            reader.close()
    # Closed streams are let go once a write finds them gone, and the user may open again.
    for index in range(5):
        post(hub, "sse-many", f"wake-{index}")
        time.sleep(0.2)
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/users/me/notifications/stream?cursor=0",
                                           headers={"Authorization": f"Bearer {token}"}, stream=True, timeout=5).status_code == 200,
                      timeout=20)


def test_the_gateway_signs_for_a_page_that_cannot(hub):
    """POST /{hub}/signatures: for the right key, a token that the gateway then accepts for that
    key's rights at the address asked; a wrong key, an unknown key or a bad body is refused."""
    url = f"{hub.base}/hub/signatures?{API}"
    keys = hub.keys()
    signed = requests.post(url, json={"keyName": "DefaultFullSharedAccessSignature", "key": keys["DefaultFullSharedAccessSignature"]})
    assert signed.status_code == 200 and signed.headers["Cache-Control"] == "no-store", signed.text
    token = signed.json()["token"]
    assert token.startswith("SharedAccessSignature ") and "skn=DefaultFullSharedAccessSignature" in token
    assert requests.get(f"{hub.base}/hub/health?{API}", headers={"Authorization": token}).status_code == 200
    # A Listen key's token has Listen's rights only.
    listen = requests.post(url, json={"keyName": "DefaultListenSharedAccessSignature", "key": keys["DefaultListenSharedAccessSignature"]})
    assert requests.get(f"{hub.base}/hub/health?{API}", headers={"Authorization": listen.json()["token"]}).status_code == 401
    for body, status, words in [
        ({"keyName": "DefaultFullSharedAccessSignature", "key": keys["DefaultListenSharedAccessSignature"]}, 401, "nhctl keys"),
        ({"keyName": "nobody", "key": "x"}, 401, "no key named 'nobody'"),
        ({"keyName": "DefaultFullSharedAccessSignature"}, 400, "key"),
        ({"keyName": "a", "key": "b", "extra": 1}, 400, "extra"),
    ]:
        refused = requests.post(url, json=body)
        assert refused.status_code == status and words in refused.text, (body, refused.status_code, refused.text)
    assert requests.post(url, data=b"not json").status_code == 400
