"""Delivery to phones, browsers and Windows, Amazon and Baidu devices through their push services:
the dispatcher against stand-in APNs, FCM, Web Push, WNS, ADM and Baidu services on loopback
(Tests/Support/pushstandins.py), which check every token, signature and encryption and record what
they got. The real executables, a real agent."""
import xml.etree.ElementTree as ElementTree
import json
import os
import stat
import subprocess
import time

import pytest
import requests

from conftest import BIN, Hub, json_lines, wait_until

API = "api-version=2015-01"
MESSAGE = 'Breaking: "quotes", a \\ backslash, <tags> & ünïcödé'


def push_config(standins, **overrides):
    """The hub's `push` settings for the stand-ins."""
    config = standins.config()
    wns, adm, baidu = config["wns"], config["adm"], config["baidu"]
    push = {
        "caFile": config["caFile"],
        "apple": {key: config["apple"][key] for key in ["keyFile", "keyId", "teamId", "bundleId", "endpoint"]},
        "fcm": {"serviceAccountFile": config["fcm"]["serviceAccountFile"], "endpoint": config["fcm"]["endpoint"]},
        "browser": {"subject": "mailto:ops@example.com"},
        # The newer form of WNS credentials, a Microsoft Entra application; the classic one is set over REST below.
        "wns": {"tenantId": wns["tenantId"], "clientId": wns["clientId"], "secret": wns["secret"], "tokenEndpoint": wns["entraTokenEndpoint"]},
        "wnsChannelDomain": wns["channelDomain"],
        "adm": {key: adm[key] for key in ["clientId", "clientSecret", "endpoint", "tokenEndpoint"]},
        "baidu": {key: baidu[key] for key in ["apiKey", "secretKey", "endpoint"]},
    }
    push.update(overrides)
    return push


def write_config(hub, push, name="hub.json"):
    path = os.path.join(hub.data, name)
    with open(path, "w") as f:
        json.dump({"push": push}, f)
    return path


@pytest.fixture(scope="module")
def hub(standins):
    hub = Hub(prefix="nh-push-")
    hub.env["NH_CONFIG"] = write_config(hub, push_config(standins))
    # The agent of this host, on the same tag as the phones and browsers.
    agent_env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "push-linux"}
    assert hub.start_services()
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "Everywhere", "World"], env={**hub.env, **agent_env}, check=True,
                   capture_output=True)
    hub.agent_output = os.path.join(hub.data, "agent.jsonl")
    hub.start("agent", "nh-agent", env=agent_env, stdout=open(hub.agent_output, "ab"))
    assert wait_until(lambda: dispatcher(hub).get("agents") == "1", timeout=30)
    yield hub
    hub.stop_all()


def headers(hub, **extra):
    return {"Authorization": hub.token(), "Content-Type": "application/json", **extra}


def dispatcher(hub):
    """The dispatcher's health figures, through the gateway."""
    try:
        r = requests.get(f"{hub.base}/hub/health", headers={"Authorization": hub.token()}, timeout=5)
        return next(s["details"] for s in r.json()["services"] if s["service"] == "nh-dispatch")
    except (requests.RequestException, StopIteration, KeyError, ValueError):
        return {}


def register(hub, installation_id, platform, channel, template, tags, template_headers=None):
    if isinstance(channel, dict):
        channel = {k: channel[k] for k in ["endpoint", "p256dh", "auth"]}
    body = {"installationId": installation_id, "platform": platform, "pushChannel": channel, "tags": tags,
            "templates": {"t": {"body": template, **({"headers": template_headers} if template_headers else {})}}}
    r = requests.put(f"{hub.base}/hub/installations/{installation_id}?{API}", headers=headers(hub), json=body)
    assert r.status_code == 200, r.text
    # The dispatcher knows it once the registry's change stream has reached it.
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/{installation_id}?{API}",
                                           headers=headers(hub)).status_code == 200)
    return body


def wait_indexed(hub, count_before, added):
    assert wait_until(lambda: int(dispatcher(hub).get("installations", 0)) >= count_before + added, timeout=15)


def send(hub, tags, properties=None, native=None, fmt="template", query="", **extra):
    body = json.dumps(properties) if native is None else native
    r = requests.post(f"{hub.base}/hub/messages?{API}{query}",
                      headers=headers(hub, **{"ServiceBusNotification-Format": fmt, "ServiceBusNotification-Tags": tags, **extra}),
                      data=body.encode())
    assert r.status_code == 201, r.text
    return r


def outcome(hub, response):
    r = requests.get(response.headers["Location"], headers={"Authorization": hub.token(), "Accept": "application/json"})
    return r.json() if r.status_code == 200 else {}


def platform_counts(hub, response, platform):
    return (outcome(hub, response).get("platforms") or {}).get(platform, {})


def settled(hub, response, platform, name, count=1, timeout=20):
    assert wait_until(lambda: platform_counts(hub, response, platform).get(name, 0) >= count, timeout=timeout), \
        outcome(hub, response)


def rendered(template, message):
    """A JSON template with $(message) filled in, as the hub renders it: compact, keys in order."""
    filled = json.loads(template.replace("$(message)", json.dumps(message, ensure_ascii=False)[1:-1]))
    return json.dumps(filled, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def token(n):
    return f"{n:064x}"


APPLE_TEMPLATE = '{"aps":{"alert":"$(message)","sound":"default"}}'
FCM_TEMPLATE = '{"message":{"notification":{"title":"News","body":"$(message)"}}}'
BROWSER_TEMPLATE = '{"title":"News","body":"$(message)"}'


def test_a_template_send_reaches_every_platform_in_its_own_payload(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    subscription = standins.webpush.subscribe()
    register(hub, "iphone-1", "apns", token(1), APPLE_TEMPLATE, ["Everywhere"])
    register(hub, "android-1", "fcmv1", "fcm-registration-1", FCM_TEMPLATE, ["Everywhere"])
    register(hub, "browser-1", "browser", subscription, BROWSER_TEMPLATE, ["Everywhere"])
    wait_indexed(hub, before, 3)

    response = send(hub, "Everywhere", {"messageParam": MESSAGE, "message": MESSAGE, "title": "News"},
                    **{"ServiceBusNotification-TimeToLive": "600"})
    apple = standins.apple.wait_for(lambda r: r["token"] == token(1), timeout=15)
    fcm = standins.fcm.wait_for(lambda r: r["token"] == "fcm-registration-1" and r["kind"] == "send", timeout=15)
    browser = standins.webpush.wait_for(lambda r: r["subscription"] == subscription["id"], timeout=15)
    assert apple and fcm and browser, (apple, fcm, browser)

    # APNs: the rendered template byte for byte, with the token the stand-in verified.
    record = apple[0]
    assert record["verified"], record["problem"]
    assert record["body"] == rendered(APPLE_TEMPLATE, MESSAGE)
    assert record["payload"]["aps"]["alert"] == MESSAGE
    assert record["http"] == "HTTP/2"
    assert record["apns"]["apns-topic"] == standins.apple.bundle_id
    assert record["apns"]["apns-push-type"] == "alert" and record["apns"]["apns-priority"] == "10"
    assert abs(int(record["apns"]["apns-expiration"]) - (time.time() + 600)) < 60
    assert record["jwt_claims"]["iss"] == standins.apple.team_id

    # FCM: the message with the device's registration token added, after a token exchange.
    record = fcm[0]
    assert record["verified"], record["problem"]
    assert record["message"] == {"notification": {"title": "News", "body": MESSAGE}, "token": "fcm-registration-1"}
    assert standins.fcm.token_requests >= 1

    # Web Push: decrypted by the stand-in with the subscription's key, signed with the hub's VAPID key.
    record = browser[0]
    assert record["verified"], record["problem"]
    assert record["plaintext"] == rendered(BROWSER_TEMPLATE, MESSAGE)
    assert 540 <= int(record["ttl"]) <= 600
    vapid = requests.get(f"{hub.base}/hub/pns/browser/key", headers={"Authorization": hub.token("DefaultListenSharedAccessSignature")})
    assert vapid.status_code == 200 and vapid.json()["publicKey"] == record["vapid_key"]

    # The Linux agent shows it too.
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == MESSAGE for l in json_lines(hub.agent_output)), timeout=15)

    for platform in ["apns", "fcmv1", "browser", "linux"]:
        settled(hub, response, platform, "Success")
    details = outcome(hub, response)
    assert details["platforms"]["apns"] == {"Targets": 1, "Success": 1}
    assert details["platforms"]["linux"]["Success"] == 1
    counts = {item["name"]: item["count"] for item in details["outcomeCounts"]}
    assert counts["Success"] == 4 and counts["Failed"] == 0
    xml = requests.get(response.headers["Location"], headers={"Authorization": hub.token()}).text
    assert "<ApnsOutcomeCounts><Outcome><Name>Success</Name><Count>1</Count></Outcome>" in xml.replace("\n", "").replace(" ", ""), xml
    figures = dispatcher(hub)
    assert int(figures["pushApnsDeliveredTotal"]) >= 1 and int(figures["pushBrowserDeliveredTotal"]) >= 1
    metrics = requests.get(f"{hub.base}/metrics").text
    for platform in ["apns", "fcmv1", "browser"]:
        assert f'nh_push_{platform}_delivered_total{{service="nh-dispatch"}}' in metrics, metrics


def test_native_sends_carry_their_platform_headers(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "iphone-native", "apns", token(2), APPLE_TEMPLATE, ["NativeApple"])
    subscription = standins.webpush.subscribe()
    register(hub, "browser-native", "browser", subscription, BROWSER_TEMPLATE, ["NativeBrowser"])
    wait_indexed(hub, before, 2)
    body = '{"aps":{"content-available":1},"score":"3-1"}'
    send(hub, "NativeApple", native=body, fmt="apple",
         **{"apns-collapse-id": "score", "apns-push-type": "background", "apns-priority": "5"})
    record = standins.apple.wait_for(lambda r: r["token"] == token(2), timeout=15)[0]
    assert record["verified"], record["problem"]
    assert record["body"] == body.encode()
    assert record["apns"]["apns-collapse-id"] == "score" and record["apns"]["apns-push-type"] == "background"
    assert record["apns"]["apns-priority"] == "5"

    send(hub, "NativeBrowser", native='{"title":"urgent"}', fmt="browser", Urgency="high", Topic="scores")
    record = standins.webpush.wait_for(lambda r: r["subscription"] == subscription["id"], timeout=15)[0]
    assert record["verified"], record["problem"]
    assert record["plaintext"] == b'{"title":"urgent"}' and record["urgency"] == "high" and record["topic"] == "scores"


@pytest.mark.parametrize("platform", ["apns", "fcmv1", "browser"])
def test_an_expired_channel_removes_its_installation(hub, standins, platform):
    before = int(dispatcher(hub).get("installations", 0))
    installation = f"gone-{platform}"
    if platform == "apns":
        channel, template = token(3), APPLE_TEMPLATE
        standins.apple.unregister(channel)
    elif platform == "fcmv1":
        channel, template = "fcm-registration-gone", FCM_TEMPLATE
        standins.fcm.unregister(channel)
    else:
        subscription = standins.webpush.subscribe()
        channel, template = subscription, BROWSER_TEMPLATE
        standins.webpush.unregister(subscription["id"])
    register(hub, installation, platform, channel, template, [f"Gone{platform}"])
    wait_indexed(hub, before, 1)
    response = send(hub, f"Gone{platform}", {"message": "to a device that left"})
    settled(hub, response, platform, "ExpiredChannel")
    name = {"apns": "Apns", "fcmv1": "Fcmv1", "browser": "Browser"}[platform]
    code = {"apns": "Unregistered", "fcmv1": "Unregistered", "browser": "410"}[platform]
    assert int(dispatcher(hub).get(f"push{name}Error{code}Total", 0)) >= 1, dispatcher(hub)
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/{installation}?{API}",
                                           headers=headers(hub)).status_code == 404, timeout=15)
    details = outcome(hub, response)
    assert {item["name"]: item["count"] for item in details["outcomeCounts"]}["Failed"] == 1


def test_an_expired_channel_does_not_remove_a_device_that_registered_again(hub, standins):
    """The channel that expired is not the installation's any more: it stays."""
    before = int(dispatcher(hub).get("installations", 0))
    standins.apple.down(True)
    try:
        register(hub, "iphone-moved", "apns", token(4), APPLE_TEMPLATE, ["Moved"])
        wait_indexed(hub, before, 1)
        response = send(hub, "Moved", {"message": "held back"})
        assert standins.apple.wait_for(lambda r: r["token"] == token(4), timeout=15)
        standins.apple.unregister(token(4))
        register(hub, "iphone-moved", "apns", token(5), APPLE_TEMPLATE, ["Moved"])
        assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/iphone-moved?{API}",
                                               headers=headers(hub)).json().get("pushChannel") == token(5))
    finally:
        standins.apple.down(False)
    settled(hub, response, "apns", "ExpiredChannel")
    time.sleep(1)
    r = requests.get(f"{hub.base}/hub/installations/iphone-moved?{API}", headers=headers(hub))
    assert r.status_code == 200 and r.json()["pushChannel"] == token(5)


def test_a_throttled_delivery_is_sent_again_after_retry_after(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "iphone-throttled", "apns", token(6), APPLE_TEMPLATE, ["Throttled"])
    wait_indexed(hub, before, 1)
    standins.apple.script(token(6), 429, {"reason": "TooManyRequests"}, headers={"Retry-After": "2"})
    response = send(hub, "Throttled", {"message": "after a pause"})
    records = standins.apple.wait_for(lambda r: r["token"] == token(6), count=2, timeout=20)
    assert [r["status"] for r in records] == [429, 200]
    # Not before the service said: the second attempt comes at least Retry-After later.
    assert records[1]["received_at"] - records[0]["received_at"] >= 1.9
    settled(hub, response, "apns", "Success")
    assert int(dispatcher(hub)["pushApnsRetriedTotal"]) >= 1


def test_a_push_service_that_is_down_costs_retries_never_a_loss(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    subscription = standins.webpush.subscribe()
    register(hub, "browser-patient", "browser", subscription, BROWSER_TEMPLATE, ["Patient"])
    wait_indexed(hub, before, 1)
    standins.webpush.down(True)
    try:
        response = send(hub, "Patient", {"message": "when you are back"})
        refused = standins.webpush.wait_for(lambda r: r["subscription"] == subscription["id"], count=3, timeout=30)
        assert len(refused) >= 3 and all(r["status"] == 503 for r in refused)
        assert platform_counts(hub, response, "browser").get("Success", 0) == 0
        # Not done while the push service has not answered: a sender polling for Completed waits.
        assert outcome(hub, response)["state"] == "Processing", outcome(hub, response)
    finally:
        standins.webpush.down(False)
    settled(hub, response, "browser", "Success", timeout=40)
    assert wait_until(lambda: outcome(hub, response)["state"] == "Completed"), outcome(hub, response)
    taken = [r for r in standins.webpush.records() if r["subscription"] == subscription["id"] and r["status"] == 201]
    assert len(taken) == 1 and taken[0]["plaintext"] == rendered(BROWSER_TEMPLATE, "when you are back")


def test_after_its_time_to_live_the_outcome_says_expired(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "iphone-late", "apns", token(7), APPLE_TEMPLATE, ["Late"])
    wait_indexed(hub, before, 1)
    standins.apple.script(token(7), 503, {"reason": "ServiceUnavailable"}, times=100)
    response = send(hub, "Late", {"message": "too late"}, **{"ServiceBusNotification-TimeToLive": "3"})
    settled(hub, response, "apns", "Expired", timeout=30)
    counts = {item["name"]: item["count"] for item in outcome(hub, response)["outcomeCounts"]}
    assert counts["Expired"] == 1 and counts["Success"] == 0
    assert all(r["status"] == 503 for r in standins.apple.records() if r["token"] == token(7))


def test_a_dispatcher_restart_loses_nothing_held_for_a_push_service(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "android-restart", "fcmv1", "fcm-registration-restart", FCM_TEMPLATE, ["Restart"])
    wait_indexed(hub, before, 1)
    standins.fcm.down(True)
    try:
        response = send(hub, "Restart", {"message": "across a restart"})
        assert standins.fcm.wait_for(lambda r: r["token"] == "fcm-registration-restart", timeout=15)
        time.sleep(0.3)  # the dispatcher's group of writes is committed every 50 ms
        hub.kill("nh-dispatch")
        hub.start("nh-dispatch")
    finally:
        standins.fcm.down(False)
    settled(hub, response, "fcmv1", "Success", timeout=40)
    taken = [r for r in standins.fcm.records() if r["token"] == "fcm-registration-restart" and r["status"] == 200]
    assert len(taken) == 1
    assert wait_until(lambda: dispatcher(hub).get("agents") == "1", timeout=30)


def test_a_refused_access_token_is_renewed(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "android-renew", "fcmv1", "fcm-registration-renew", FCM_TEMPLATE, ["Renew"])
    wait_indexed(hub, before, 1)
    exchanges = standins.fcm.token_requests
    seen = len(standins.fcm.records())
    standins.fcm.revoke_access_tokens()
    response = send(hub, "Renew", {"message": "with a new token"})
    settled(hub, response, "fcmv1", "Success")
    assert standins.fcm.token_requests > exchanges
    # Refused with the old token (the stand-in reads no further), then taken with a new one.
    statuses = [(r["kind"], r["status"]) for r in standins.fcm.records()[seen:]]
    assert statuses == [("send", 401), ("token", 200), ("send", 200)], statuses


def test_a_test_send_reports_what_each_push_service_said(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "iphone-test-ok", "apns", token(8), APPLE_TEMPLATE, ["TestSend"])
    register(hub, "iphone-test-gone", "apns", token(9), APPLE_TEMPLATE, ["TestSend"])
    standins.apple.unregister(token(9))
    wait_indexed(hub, before, 2)
    r = send(hub, "TestSend", {"message": "test"}, query="&test")
    assert r.headers["Content-Type"].startswith("application/xml")
    assert "<Success>1</Success>" in r.text and "<Failure>1</Failure>" in r.text, r.text
    assert "The Notification was successfully sent to the Push Notification System" in r.text
    assert "The Push Notification System handle for the registration is invalid" in r.text


# MARK: Credentials


def test_pns_show_names_each_service_and_never_a_secret(hub, standins):
    r = requests.get(f"{hub.base}/hub/pns", headers={"Authorization": hub.token()})
    assert r.status_code == 200
    services = {s["service"]: s for s in r.json()["services"]}
    assert set(services) == {"apple", "fcm", "browser", "wns", "adm", "baidu"}
    assert services["wns"]["settings"] == {"tenantId": standins.wns.tenant_id, "clientId": standins.wns.client_id,
                                           "tokenEndpoint": standins.config()["wns"]["entraTokenEndpoint"], "channelDomain": "localhost"}
    assert services["adm"]["settings"]["clientId"] == standins.adm.client_id and services["baidu"]["settings"] == {"apiKey": standins.baidu.api_key}
    for secret in [standins.wns.secret, standins.adm.client_secret, standins.baidu.secret_key]:
        assert secret not in r.text
    assert services["apple"]["settings"] == {"keyId": standins.apple.key_id, "teamId": standins.apple.team_id,
                                             "bundleId": standins.apple.bundle_id}
    assert services["fcm"]["settings"]["projectId"] == "nh-test" and services["apple"]["source"] == "config"
    assert len(services["browser"]["publicKey"]) == 87
    assert "PRIVATE" not in r.text
    listen = requests.get(f"{hub.base}/hub/pns", headers={"Authorization": hub.token("DefaultListenSharedAccessSignature")})
    assert listen.status_code == 401

    out = subprocess.run([os.path.join(BIN, "nhctl"), "pns", "show"], env=hub.env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "apple  apns" in out.stdout and f"keyId={standins.apple.key_id}" in out.stdout and "applicationServerKey=" in out.stdout
    assert "PRIVATE" not in out.stdout
    key_text = open(standins.config()["apple"]["keyFile"]).read().split("\n")[1]
    assert key_text not in out.stdout and key_text not in r.text


@pytest.mark.parametrize("body,words", [
    ({"key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "keyId": "ABC123DEFG", "teamId": "TEAM123456",
      "bundleId": "com.example.app"}, ".p8"),
    ({"key": "KEY", "keyId": "abc", "teamId": "TEAM123456", "bundleId": "com.example.app"}, "push.apple.keyId 'abc' must be the 10 characters"),
    ({"key": "KEY", "keyId": "ABC123DEFG", "teamId": "TEAM123456", "bundleId": "com.example.app", "endpoint": "http://127.0.0.1:1"},
     "must be an https:// URL"),
    ({"keyId": "ABC123DEFG", "teamId": "TEAM123456", "bundleId": "com.example.app"}, "'key'"),
    ({"key": "KEY", "keyId": "ABC123DEFG", "teamId": "TEAM123456", "bundleId": "com.example.app", "colour": "red"}, "colour"),
])
def test_bad_apple_credentials_are_refused_with_what_to_fix(hub, standins, body, words):
    if body.get("key") == "KEY":
        body = {**body, "key": open(standins.config()["apple"]["keyFile"]).read()}
    r = requests.put(f"{hub.base}/hub/pns/apple", headers=headers(hub), json=body)
    assert r.status_code == 400 and words in r.text, r.text
    assert requests.get(f"{hub.base}/hub/pns", headers=headers(hub)).json()["services"][0]["source"] == "config"


def test_credentials_set_over_rest_are_checked_kept_0600_and_used(hub, standins):
    config = standins.config()
    account = json.load(open(config["fcm"]["serviceAccountFile"]))
    # No endpoint in the body: the configured one (the stand-in's) stays in force.
    r = requests.put(f"{hub.base}/hub/pns/fcm", headers=headers(hub), json={"serviceAccount": account})
    assert r.status_code == 200, r.text
    assert {s["service"]: s["source"] for s in r.json()["services"]}["fcm"] == "set"
    assert {s["service"]: s["endpoint"] for s in r.json()["services"]}["fcm"] == config["fcm"]["endpoint"], r.text
    saved = os.path.join(hub.data, "push-credentials.json")
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    assert json.loads(json.load(open(saved))["fcm"]["serviceAccount"])["private_key"] == account["private_key"]

    bad = requests.put(f"{hub.base}/hub/pns/fcm", headers=headers(hub), json={"serviceAccount": {**account, "private_key": "garbage"}})
    assert bad.status_code == 400 and "does not load" in bad.text
    assert requests.put(f"{hub.base}/hub/pns/nokia", headers=headers(hub), json={}).status_code == 404

    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "android-set", "fcmv1", "fcm-registration-set", FCM_TEMPLATE, ["SetCredentials"])
    wait_indexed(hub, before, 1)
    response = send(hub, "SetCredentials", {"message": "with credentials set over REST"})
    settled(hub, response, "fcmv1", "Success")

    r = requests.delete(f"{hub.base}/hub/pns/fcm", headers=headers(hub))
    assert r.status_code == 200 and {s["service"]: s["source"] for s in r.json()["services"]}["fcm"] == "config"


def test_nhctl_pns_set_reads_the_key_file_and_refuses_a_bad_one(hub, standins, tmp_path):
    config = standins.config()
    apple = config["apple"]
    ok = subprocess.run([os.path.join(BIN, "nhctl"), "pns", "set", "apple", "--key-file", apple["keyFile"], "--key-id", apple["keyId"],
                         "--team-id", apple["teamId"], "--bundle-id", apple["bundleId"], "--endpoint", apple["endpoint"]],
                        env=hub.env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert "(set)" in ok.stdout and "PRIVATE" not in ok.stdout
    garbage = tmp_path / "AuthKey_BAD.p8"
    garbage.write_text("not a key")
    bad = subprocess.run([os.path.join(BIN, "nhctl"), "pns", "set", "apple", "--key-file", str(garbage), "--key-id", apple["keyId"],
                          "--team-id", apple["teamId"], "--bundle-id", apple["bundleId"]], env=hub.env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and ".p8" in bad.stderr, bad.stderr
    missing = subprocess.run([os.path.join(BIN, "nhctl"), "pns", "set", "apple", "--key-id", "X"], env=hub.env, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "--key-file" in missing.stderr
    removed = subprocess.run([os.path.join(BIN, "nhctl"), "pns", "remove", "apple"], env=hub.env, capture_output=True, text=True, timeout=30)
    assert removed.returncode == 0 and "(config)" in removed.stdout


@pytest.mark.parametrize("change,words", [
    (lambda push: push["apple"].update(keyFile="/nonexistent/AuthKey.p8"), "/nonexistent/AuthKey.p8"),
    (lambda push: push["apple"].update(endpoint="http://127.0.0.1:1"), "push.apple.endpoint 'http://127.0.0.1:1' must be an https:// URL"),
    (lambda push: push["apple"].update(keyId="lower"), "push.apple.keyId 'lower'"),
    (lambda push: push["fcm"].update(endpoint="ftp://x"), "push.fcm.endpoint"),
    (lambda push: push["browser"].update(subject="ops@example.com"), "push.browser.subject"),
    (lambda push: push.update(caFile="/nonexistent/ca.pem"), "push.caFile"),
    (lambda push: push["apple"].update(colour="red"), "unknown setting 'push.apple.colour'"),
])
def test_a_bad_push_configuration_stops_the_dispatcher_with_what_to_fix(standins, change, words):
    """Refused alike by --check-config and by a real start: exit 2, with what to fix."""
    hub = Hub(prefix="nh-push-config-")
    try:
        push = push_config(standins)
        change(push)
        path = write_config(hub, push)
        for check in ([], ["--check-config"]):
            result = subprocess.run([os.path.join(BIN, "nh-dispatch"), "--config", path, *check], env=hub.env, capture_output=True,
                                    text=True, timeout=30)
            assert result.returncode == 2, (check, result.stderr)
            assert words in result.stderr, (check, result.stderr)
    finally:
        hub.stop_all()


def test_check_config_passes_good_push_credentials_and_writes_nothing(standins):
    hub = Hub(prefix="nh-push-config-")
    try:
        path = write_config(hub, push_config(standins))
        before = sorted(os.listdir(hub.data))
        result = subprocess.run([os.path.join(BIN, "nh-dispatch"), "--config", path, "--check-config"], env=hub.env, capture_output=True,
                                text=True, timeout=30)
        assert result.returncode == 0 and "config ok" in result.stdout, result.stderr
        assert sorted(os.listdir(hub.data)) == before, "a check makes no key file"
    finally:
        hub.stop_all()


def test_a_malformed_key_file_stops_the_dispatcher(standins, tmp_path):
    hub = Hub(prefix="nh-push-config-")
    try:
        garbage = tmp_path / "AuthKey_GARBAGE.p8"
        garbage.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
        push = push_config(standins)
        push["apple"] = {**push["apple"], "keyFile": str(garbage)}
        account = tmp_path / "service-account.json"
        account.write_text('{"type": "service_account"}')
        for check in ([], ["--check-config"]):
            result = subprocess.run([os.path.join(BIN, "nh-dispatch"), "--config", write_config(hub, push), *check], env=hub.env,
                                    capture_output=True, text=True, timeout=30)
            assert result.returncode == 2 and "AuthKey_GARBAGE.p8" in result.stderr and ".p8" in result.stderr, (check, result.stderr)
        push = push_config(standins)
        push["fcm"] = {"serviceAccountFile": str(account)}
        result = subprocess.run([os.path.join(BIN, "nh-dispatch"), "--config", write_config(hub, push, "hub2.json")], env=hub.env,
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and "has no 'project_id'" in result.stderr, result.stderr
    finally:
        hub.stop_all()


# MARK: Windows, Amazon and Baidu


WNS_TEMPLATE = '<toast><visual><binding template="ToastGeneric"><text>News</text><text>$(message)</text></binding></visual></toast>'
WNS_HEADERS = {"X-WNS-Type": "wns/toast"}
ADM_TEMPLATE = '{"data":{"message":"$(message)"}}'
BAIDU_TEMPLATE = '{"title":"News","description":"$(message)"}'


def register_windows(hub, standins, name, tags, channel=None):
    channel = channel or standins.wns.channel()
    register(hub, name, "wns", channel, WNS_TEMPLATE, tags, template_headers=WNS_HEADERS)
    return channel


def channel_token(channel):
    return channel.split("token=", 1)[1]


def test_breaking_news_reaches_windows_amazon_and_baidu_beside_apple_google_and_linux(hub, standins):
    """The documents' flow: one template send to the category World reaches a subscriber on every
    platform, each in its own format, each counted in its platform's outcome."""
    before = int(dispatcher(hub).get("installations", 0))
    register(hub, "world-iphone", "apns", token(100), APPLE_TEMPLATE, ["World"])
    register(hub, "world-android", "fcmv1", "fcm-world", FCM_TEMPLATE, ["World"])
    windows = register_windows(hub, standins, "world-windows", ["World"])
    kindle = "amzn1.adm-registration.v3.Y29tLmFtYXpvbi5EZXZpY2VNZXNzYWdpbmcuUmVnaXN0cmF0aW9uSWRFbmNyeXB0aW9uS2V5IQ"
    register(hub, "world-kindle", "adm", kindle, ADM_TEMPLATE, ["World"])
    baidu = standins.baidu.channel()
    register(hub, "world-baidu", "baidu", baidu, BAIDU_TEMPLATE, ["World"])
    wait_indexed(hub, before, 5)

    response = send(hub, "World", {"messageParam": MESSAGE, "message": MESSAGE, "title": "News"},
                    **{"ServiceBusNotification-TimeToLive": "600"})
    for platform in ["apns", "fcmv1", "wns", "adm", "baidu", "linux"]:
        settled(hub, response, platform, "Success")

    # WNS: over HTTP/1.1 to the channel URI, with an Entra token, the toast's XML escaped around the message.
    record = standins.wns.wait_for(lambda r: r["kind"] == "send" and r["channel"] == windows, timeout=5)[0]
    assert record["verified"], record["problem"]
    assert record["http"] == "HTTP/1.1" and record["type"] == "wns/toast" and record["headers"]["content-type"] == "text/xml"
    assert [t.text for t in ElementTree.fromstring(record["body"]).iter("text")] == ["News", MESSAGE]
    assert 540 <= int(record["wns"]["x-wns-ttl"]) <= 600
    assert any(r["kind"] == "token" and r["form"]["scope"] == "https://wns.windows.com/.default" for r in standins.wns.records())
    # ADM: the data as strings, with how long to keep it for a device that is off.
    record = standins.adm.wait_for(lambda r: r["registration"] == kindle, timeout=5)[0]
    assert record["verified"], record["problem"]
    assert record["message"]["data"] == {"message": MESSAGE} and 540 <= record["message"]["expiresAfter"] <= 600
    # Baidu: a signed request the stand-in verified, the notification as msg.
    record = standins.baidu.wait_for(lambda r: r["channel"] == baidu.split("-", 1)[1], timeout=5)[0]
    assert record["verified"], record["problem"]
    assert record["msg"] == {"title": "News", "description": MESSAGE} and record["params"]["msg_type"] == "1"
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == MESSAGE for l in json_lines(hub.agent_output)), timeout=15)

    details = outcome(hub, response)
    for platform in ["apns", "fcmv1", "wns", "adm", "baidu"]:
        assert details["platforms"][platform] == {"Targets": 1, "Success": 1}, (platform, details["platforms"])
    counts = {item["name"]: item["count"] for item in details["outcomeCounts"]}
    assert counts["Success"] == 6 and counts["Failed"] == 0, counts
    xml = requests.get(response.headers["Location"], headers={"Authorization": hub.token()}).text.replace("\n", "").replace(" ", "")
    for element in ["WnsOutcomeCounts", "AdmOutcomeCounts", "BaiduOutcomeCounts"]:
        assert f"<{element}><Outcome><Name>Success</Name><Count>1</Count></Outcome></{element}>" in xml, xml
    figures = dispatcher(hub)
    assert int(figures["pushWnsDeliveredTotal"]) >= 1 and int(figures["pushAdmDeliveredTotal"]) >= 1
    assert int(figures["pushBaiduDeliveredTotal"]) >= 1 and int(figures["pushWnsAnswerStatusReceivedTotal"]) >= 1


def test_a_windows_channel_elsewhere_than_wns_is_refused_at_registration(hub):
    body = {"installationId": "windows-elsewhere", "platform": "wns", "pushChannel": "https://hub.attacker.example/w/?token=1",
            "tags": ["World"], "templates": {"t": {"body": WNS_TEMPLATE, "headers": WNS_HEADERS}}}
    r = requests.put(f"{hub.base}/hub/installations/windows-elsewhere?{API}", headers=headers(hub), json=body)
    assert r.status_code == 400 and "the channel URI Windows handed the app" in r.text and ".localhost/" in r.text, r.text


@pytest.mark.parametrize("platform,outcome_name", [("wns", "ExpiredChannel"), ("adm", "ExpiredChannel"), ("baidu", "BadChannel")])
def test_a_gone_channel_removes_its_installation_and_is_never_tried_again(hub, standins, platform, outcome_name):
    before = int(dispatcher(hub).get("installations", 0))
    installation = f"gone-{platform}"
    if platform == "wns":
        channel = register_windows(hub, standins, installation, [f"Gone{platform}"])
        target, service = channel_token(channel), standins.wns
    elif platform == "adm":
        channel = target = "amzn1.adm-registration.v3.gone"
        register(hub, installation, "adm", channel, ADM_TEMPLATE, [f"Gone{platform}"])
        service = standins.adm
    else:
        channel = standins.baidu.channel()
        target, service = channel.split("-", 1)[1], standins.baidu
        register(hub, installation, "baidu", channel, BAIDU_TEMPLATE, [f"Gone{platform}"])
    service.unregister(target)
    wait_indexed(hub, before, 1)
    response = send(hub, f"Gone{platform}", {"message": "to a device that left"})
    settled(hub, response, platform, outcome_name)
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/{installation}?{API}",
                                           headers=headers(hub)).status_code == 404, timeout=15)
    tried = len([r for r in service.records() if r.get("status") and target in json.dumps(r.get("channel") or r.get("registration"))])
    assert tried == 1
    again = send(hub, f"Gone{platform}", {"message": "once more"})
    assert wait_until(lambda: outcome(hub, again).get("state") in ("Completed", "NoTargetFound"), timeout=15), outcome(hub, again)
    assert len([r for r in service.records() if target in json.dumps(r.get("channel") or r.get("registration"))]) == tried


@pytest.mark.parametrize("platform", ["wns", "adm"])
def test_a_throttled_delivery_is_sent_once_more_after_the_wait(hub, standins, platform):
    before = int(dispatcher(hub).get("installations", 0))
    if platform == "wns":
        channel = register_windows(hub, standins, "windows-throttled", ["ThrottledWns"])
        target, service, status = channel_token(channel), standins.wns, 406
    else:
        channel = target = "amzn1.adm-registration.v3.throttled"
        register(hub, "kindle-throttled", "adm", channel, ADM_TEMPLATE, ["ThrottledAdm"])
        service, status = standins.adm, 429
    wait_indexed(hub, before, 1)
    service.script(target, status, {"reason": "MaxRateExceeded"} if platform == "adm" else b"", headers={"Retry-After": "2"})
    response = send(hub, f"Throttled{platform.capitalize()}", {"message": "after a pause"})
    settled(hub, response, platform, "Success")
    records = [r for r in service.records() if r.get("kind") == "send" and target in json.dumps(r.get("channel") or r.get("registration"))]
    assert [r["status"] for r in records] == [status, 200]
    assert records[1]["received_at"] - records[0]["received_at"] >= 1.9


@pytest.mark.parametrize("platform", ["wns", "adm"])
def test_an_expired_access_token_is_fetched_again_once(hub, standins, platform):
    before = int(dispatcher(hub).get("installations", 0))
    if platform == "wns":
        service = standins.wns
        register_windows(hub, standins, "windows-renew", ["RenewWns"])
    else:
        service = standins.adm
        register(hub, "kindle-renew", "adm", "amzn1.adm-registration.v3.renew", ADM_TEMPLATE, ["RenewAdm"])
    wait_indexed(hub, before, 1)
    seen = len(service.records())
    service.revoke_access_tokens()
    response = send(hub, f"Renew{platform.capitalize()}", {"message": "with a new token"})
    settled(hub, response, platform, "Success")
    statuses = [(r["kind"], r["status"]) for r in service.records()[seen:]]
    assert statuses == [("send", 401), ("token", 200), ("send", 200)], statuses


def test_a_windows_channel_of_another_app_is_wrong_token_kept_and_costs_no_token(hub, standins):
    """WNS 403: the channel belongs to another app than the credentials'. A new token cannot help:
    none is fetched, the delivery counts as WrongToken, and the installation stays."""
    before = int(dispatcher(hub).get("installations", 0))
    channel = register_windows(hub, standins, "windows-other-app", ["OtherApp"])
    wait_indexed(hub, before, 1)
    seen = len(standins.wns.records())
    standins.wns.script(channel_token(channel), 403, b"", headers={"X-WNS-Error-Description": "channel of another app"})
    response = send(hub, "OtherApp", {"message": "not for this app"})
    settled(hub, response, "wns", "WrongToken")
    assert [(r["kind"], r["status"]) for r in standins.wns.records()[seen:]] == [("send", 403)]
    assert requests.get(f"{hub.base}/hub/installations/windows-other-app?{API}", headers=headers(hub)).status_code == 200


def test_an_unknown_windows_channel_is_a_bad_channel_and_its_installation_goes(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    channel = register_windows(hub, standins, "windows-unknown", ["UnknownChannel"])
    wait_indexed(hub, before, 1)
    standins.wns.script(channel_token(channel), 404, b"")
    response = send(hub, "UnknownChannel", {"message": "to a channel WNS never made"})
    settled(hub, response, "wns", "BadChannel")
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/windows-unknown?{API}",
                                           headers=headers(hub)).status_code == 404, timeout=15)


def test_a_windows_template_with_an_xml_declaration_and_no_type_goes_as_its_root_says(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    template = '<?xml version="1.0" encoding="utf-8"?>\n<!-- the morning tile --><tile><visual><binding template="TileMedium"><text>$(message)</text></binding></visual></tile>'
    channel = standins.wns.channel()
    register(hub, "windows-declared", "wns", channel, template, ["Declared"])
    wait_indexed(hub, before, 1)
    response = send(hub, "Declared", {"message": "Markets <up> & away"})
    settled(hub, response, "wns", "Success")
    record = standins.wns.wait_for(lambda r: r["kind"] == "send" and r["channel"] == channel, timeout=5)[0]
    assert record["verified"] and record["type"] == "wns/tile" and record["xml_root"] == "tile", record
    assert [t.text for t in ElementTree.fromstring(record["body"]).iter("text")] == ["Markets <up> & away"]


def test_a_header_with_a_line_break_is_refused_at_registration_and_at_send(hub):
    body = {"installationId": "windows-injected", "platform": "wns", "pushChannel": "https://db5.wns.localhost/w/?token=x",
            "tags": ["World"], "templates": {"t": {"body": WNS_TEMPLATE, "headers": {**WNS_HEADERS, "X-WNS-Tag": "a\r\nX-Injected: 1"}}}}
    r = requests.put(f"{hub.base}/hub/installations/windows-injected?{API}", headers=headers(hub), json=body)
    assert r.status_code == 400 and "control character" in r.text and "X-WNS-Tag" in r.text, r.text
    assert requests.get(f"{hub.base}/hub/installations/windows-injected?{API}", headers=headers(hub)).status_code == 404


def test_an_amazon_notification_message_needs_no_data(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    registration = "amzn1.adm-registration.v3.shown"
    register(hub, "kindle-shown", "adm", registration, '{"notification":{"title":"News","body":"$(message)"}}', ["Shown"])
    wait_indexed(hub, before, 1)
    response = send(hub, "Shown", {"message": "shown by ADM"})
    settled(hub, response, "adm", "Success")
    record = standins.adm.wait_for(lambda r: r["registration"] == registration, timeout=5)[0]
    assert record["verified"] and record["message"]["notification"] == {"title": "News", "body": "shown by ADM"}, record


def test_adm_names_a_device_anew_and_its_installation_follows(hub, standins):
    before = int(dispatcher(hub).get("installations", 0))
    old, new = "amzn1.adm-registration.v3.old", "amzn1.adm-registration.v3.canonical"
    register(hub, "kindle-moved", "adm", old, ADM_TEMPLATE, ["Canonical"])
    wait_indexed(hub, before, 1)
    standins.adm.canonical[old] = new
    response = send(hub, "Canonical", {"message": "to the new id"})
    settled(hub, response, "adm", "Success")
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/kindle-moved?{API}", headers=headers(hub))
                      .json().get("pushChannel") == new, timeout=15)
    again = send(hub, "Canonical", {"message": "again"})
    settled(hub, again, "adm", "Success")
    assert standins.adm.wait_for(lambda r: r["registration"] == new and r["status"] == 200, timeout=5)


def test_classic_windows_credentials_set_over_rest_are_used_and_kept(hub, standins):
    config = standins.config()["wns"]
    r = requests.put(f"{hub.base}/hub/pns/wns", headers=headers(hub), json={
        "packageSid": config["packageSid"], "secret": config["secret"], "tokenEndpoint": config["classicTokenEndpoint"]})
    assert r.status_code == 200, r.text
    assert {s["service"]: s["settings"].get("packageSid") for s in r.json()["services"]}["wns"] == config["packageSid"]
    bad = requests.put(f"{hub.base}/hub/pns/wns", headers=headers(hub), json={"packageSid": "S-1-15-2-1", "secret": "x"})
    assert bad.status_code == 400 and "ms-app://" in bad.text, bad.text
    try:
        before = int(dispatcher(hub).get("installations", 0))
        channel = register_windows(hub, standins, "windows-classic", ["Classic"])
        wait_indexed(hub, before, 1)
        seen = len(standins.wns.records())
        response = send(hub, "Classic", {"message": "with the Package SID"})
        settled(hub, response, "wns", "Success")
        tokens = [r for r in standins.wns.records()[seen:] if r["kind"] == "token"]
        assert [t["form"]["scope"] for t in tokens] == ["notify.windows.com"] and tokens[0]["status"] == 200
        assert standins.wns.wait_for(lambda r: r["channel"] == channel and r["status"] == 200, timeout=5)
        # Switched to an Entra application without an endpoint: its tenant's, never the classic one kept.
        r = requests.put(f"{hub.base}/hub/pns/wns", headers=headers(hub), json={
            "tenantId": config["tenantId"], "clientId": config["clientId"], "secret": config["secret"]})
        assert r.status_code == 200, r.text
        wns = {s["service"]: s for s in r.json()["services"]}["wns"]
        assert wns["settings"]["tokenEndpoint"] == f"https://login.microsoftonline.com/{config['tenantId']}/oauth2/v2.0/token", wns
    finally:
        assert requests.delete(f"{hub.base}/hub/pns/wns", headers=headers(hub)).status_code == 200


def test_nhctl_pns_sets_windows_amazon_and_baidu_from_secret_files(hub, standins):
    config = standins.config()
    nhctl = os.path.join(BIN, "nhctl")
    for arguments in (["wns", "--tenant-id", config["wns"]["tenantId"], "--client-id", config["wns"]["clientId"],
                       "--secret-file", config["wns"]["secretFile"], "--token-endpoint", config["wns"]["entraTokenEndpoint"]],
                      ["adm", "--client-id", config["adm"]["clientId"], "--secret-file", config["adm"]["secretFile"]],
                      ["baidu", "--api-key", config["baidu"]["apiKey"], "--secret-file", config["baidu"]["secretFile"]]):
        done = subprocess.run([nhctl, "pns", "set", *arguments], env=hub.env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    shown = subprocess.run([nhctl, "pns", "show"], env=hub.env, capture_output=True, text=True, timeout=30).stdout
    assert "wns  wns" in shown and "adm  adm" in shown and "baidu  baidu" in shown and "(set)" in shown, shown
    for secret in [config["wns"]["secret"], config["adm"]["clientSecret"], config["baidu"]["secretKey"]]:
        assert secret not in shown
    # Endpoints left out keep the configured ones.
    services = {s["service"]: s for s in requests.get(f"{hub.base}/hub/pns", headers=headers(hub)).json()["services"]}
    assert services["adm"]["endpoint"] == config["adm"]["endpoint"] and services["baidu"]["endpoint"] == config["baidu"]["endpoint"]
    missing = subprocess.run([nhctl, "pns", "set", "baidu", "--api-key", "k"], env=hub.env, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "--secret-file" in missing.stderr
    for name in ["wns", "adm", "baidu"]:
        assert subprocess.run([nhctl, "pns", "remove", name], env=hub.env, capture_output=True, timeout=30).returncode == 0

