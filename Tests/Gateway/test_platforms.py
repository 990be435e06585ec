"""Every platform's installations and every native format, as Azure takes them: payloads checked
as each push service would, sends targeted at that platform's installations, and a delivery to a
platform the hub has no path to yet counted as failed (PnsUnavailable) per platform in the outcome,
never as delivered; the outcome as Azure's <NotificationDetails> XML, or JSON when asked."""
import json
import re
import time

import pytest
import requests

from conftest import wait_until

API = "api-version=2015-01"
ENDPOINT = "https://push.example.org/wpush/v2/abc"
P256DH = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
AUTH = "BTBZMqHH6r4Tts7J_aSIgg"
TEMPLATE = {"body": '{"aps":{"alert":"$(message)"}}'}

DEVICES = {
    "plat-apns": ("APNS", "A1B2C3D4E5F6", {"apple": TEMPLATE}),
    "plat-gcm": ("gcm", "gcm-token-1", {"t": {"body": '{"data":{"m":"$(message)"}}'}}),
    "plat-fcmv1": ("fcmV1", "fcm-token-1", {"t": {"body": '{"message":{"notification":{"body":"$(message)"}}}'}}),
    "plat-wns": ("wns", "https://db5.notify.windows.com/?token=1",
                 {"t": {"body": "<toast><visual><binding template=\"ToastText01\"><text id=\"1\">$(message)</text></binding></visual></toast>",
                        "headers": {"X-WNS-Type": "wns/toast"}}}),
    "plat-adm": ("adm", "adm-id-1", {}),
    "plat-baidu": ("baidu", "user-1-channel-1", {}),
    "plat-browser": ("browser", {"endpoint": ENDPOINT, "p256dh": P256DH, "auth": AUTH}, {}),
}


def put(hub, device, body):
    return requests.put(f"{hub.base}/hub/installations/{device}?{API}", data=json.dumps(body),
                        headers={"Authorization": hub.token(), "Content-Type": "application/json"})


@pytest.fixture(scope="module")
def devices(hub):
    for device, (platform, channel, templates) in DEVICES.items():
        r = put(hub, device, {"installationId": device, "platform": platform, "pushChannel": channel, "tags": ["Plat"],
                              "templates": templates})
        assert r.status_code == 200, r.text
    return DEVICES


def send(hub, fmt, body, tags="Plat", query="", **headers):
    all_headers = {"Authorization": hub.token(), "ServiceBusNotification-Format": fmt, **headers}
    if tags:
        all_headers["ServiceBusNotification-Tags"] = tags
    return requests.post(f"{hub.base}/hub/messages?{API}{query}", data=body.encode() if isinstance(body, str) else body,
                         headers=all_headers)


def outcome(hub, response, accept="application/json"):
    r = requests.get(response.headers["Location"], headers={"Authorization": hub.token(), "Accept": accept})
    assert r.status_code == 200, r.text
    return r


def settled(hub, response):
    result = {}

    def done():
        result["o"] = outcome(hub, response).json()
        return result["o"]["state"] in ("Completed", "NoTargetFound")
    assert wait_until(done, timeout=15), result
    return result["o"]


def test_platforms_are_normalized_and_browser_channels_kept_as_json(hub, devices):
    apns = requests.get(f"{hub.base}/hub/installations/plat-apns?{API}", headers={"Authorization": hub.token()}).json()
    assert apns["platform"] == "apns"
    assert requests.get(f"{hub.base}/hub/installations/plat-fcmv1?{API}", headers={"Authorization": hub.token()}).json()["platform"] == "fcmv1"
    # Written as an object (the REST reference, the JS SDK's BrowserPushChannel): read back as one.
    browser = requests.get(f"{hub.base}/hub/installations/plat-browser?{API}", headers={"Authorization": hub.token()}).json()
    assert browser["pushChannel"] == {"endpoint": ENDPOINT, "p256dh": P256DH, "auth": AUTH}
    assert "pushChannelObject" not in browser
    # The .NET and Java SDKs send the subscription as a JSON string: the same installation, read back as a string.
    as_string = {"installationId": "plat-browser-2", "platform": "browser", "tags": ["Other"],
                 "pushChannel": json.dumps({"auth": AUTH, "p256dh": P256DH, "endpoint": ENDPOINT + "2"})}
    assert put(hub, "plat-browser-2", as_string).status_code == 200
    read = requests.get(f"{hub.base}/hub/installations/plat-browser-2?{API}", headers={"Authorization": hub.token()}).json()
    assert isinstance(read["pushChannel"], str) and json.loads(read["pushChannel"])["endpoint"] == ENDPOINT + "2"
    for bad in [{"endpoint": "http://insecure.example.org/x", "p256dh": P256DH, "auth": AUTH},
                {"endpoint": ENDPOINT, "p256dh": P256DH}, {"endpoint": ENDPOINT, "p256dh": "a b", "auth": AUTH},
                {"endpoint": ENDPOINT, "p256dh": P256DH, "auth": AUTH, "extra": 1}, "not a subscription"]:
        r = put(hub, "plat-bad", {"installationId": "plat-bad", "platform": "browser", "pushChannel": bad})
        assert r.status_code == 400, (bad, r.text)
    r = put(hub, "plat-bad", {"installationId": "plat-bad", "platform": "ios", "pushChannel": "x"})
    assert r.status_code == 400 and "apns" in r.text
    patch = [{"op": "replace", "path": "/pushChannel", "value": {"endpoint": ENDPOINT + "3", "p256dh": P256DH, "auth": AUTH}}]
    r = requests.patch(f"{hub.base}/hub/installations/plat-browser-2?{API}", data=json.dumps(patch),
                       headers={"Authorization": hub.token(), "Content-Type": "application/json-patch+json"})
    assert r.status_code == 200, r.text
    # Patched in as an object, it is read back as one; patched as a string, as a string again.
    browser = requests.get(f"{hub.base}/hub/installations/plat-browser-2?{API}", headers={"Authorization": hub.token()}).json()
    assert browser["pushChannel"]["endpoint"] == ENDPOINT + "3"
    patch = [{"op": "replace", "path": "/pushChannel", "value": json.dumps({"endpoint": ENDPOINT + "4", "p256dh": P256DH, "auth": AUTH})}]
    r = requests.patch(f"{hub.base}/hub/installations/plat-browser-2?{API}", data=json.dumps(patch),
                       headers={"Authorization": hub.token(), "Content-Type": "application/json-patch+json"})
    assert r.status_code == 200, r.text
    browser = requests.get(f"{hub.base}/hub/installations/plat-browser-2?{API}", headers={"Authorization": hub.token()}).json()
    assert json.loads(browser["pushChannel"])["endpoint"] == ENDPOINT + "4"


def test_a_template_given_as_a_json_string_in_a_patch(hub, devices):
    template = json.dumps({"body": '{"data":{"alt":"$(message)"}}', "tags": ["AltOnly"]})
    patch = [{"op": "add", "path": "/templates/alt", "value": template}]
    r = requests.patch(f"{hub.base}/hub/installations/plat-gcm?{API}", data=json.dumps(patch),
                       headers={"Authorization": hub.token(), "Content-Type": "application/json-patch+json"})
    assert r.status_code == 200, r.text
    got = requests.get(f"{hub.base}/hub/installations/plat-gcm?{API}", headers={"Authorization": hub.token()}).json()
    assert got["templates"]["alt"] == {"body": '{"data":{"alt":"$(message)"}}', "tags": ["AltOnly"]}


NATIVE = [
    ("apple", "apns", '{"aps":{"alert":"hi"}}', {"apns-push-type": "alert", "apns-priority": "10"}),
    ("gcm", "gcm", '{"data":{"m":"hi"}}', {}),
    ("fcmv1", "fcmv1", '{"message":{"notification":{"body":"hi"}}}', {}),
    ("windows", "wns", '<toast><visual><binding template="ToastText01"><text id="1">hi</text></binding></visual></toast>',
     {"X-WNS-Type": "wns/toast"}),
    ("windows", "wns", "raw bytes", {"X-WNS-Type": "wns/raw"}),
    ("adm", "adm", '{"data":{"m":"hi"}}', {}),
    ("baidu", "baidu", '{"title":"hi","description":"there"}', {}),
    ("browser", "browser", '{"title":"hi"}', {}),
]


@pytest.mark.parametrize("fmt,platform,body,headers", NATIVE)
def test_each_native_format_reaches_its_platform_and_counts_as_failed(hub, devices, fmt, platform, body, headers):
    r = send(hub, fmt, body, **headers)
    assert r.status_code == 201, r.text
    assert re.search(r"/hub/messages/[^/?]+\?api-version=", r.headers["Location"])
    result = settled(hub, r)
    assert result["state"] == "Completed"
    assert result["platforms"] == {platform: {"Targets": 1, "PnsUnavailable": 1}}
    counts = {c["name"]: c["count"] for c in result["outcomeCounts"]}
    assert counts["Targets"] == 1 and counts["Failed"] == 1 and counts["Delivered"] == 0 and counts["Success"] == 0

    details = outcome(hub, r, accept="*/*")
    assert details.headers["Content-Type"].startswith("application/xml")
    xml = details.text
    assert '<NotificationDetails xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"' in xml
    assert "<State>Completed</State>" in xml and f"<TargetPlatforms>{fmt}</TargetPlatforms>" in xml
    assert "<Outcome><Name>PnsUnavailable</Name><Count>1</Count></Outcome>" in xml
    order = [xml.index(f"<{name}>") for name in ["NotificationId", "Location", "State", "EnqueueTime", "StartTime", "EndTime", "TargetPlatforms"]]
    assert order == sorted(order)


def test_a_template_send_reaches_every_platform_with_a_template(hub, devices):
    r = send(hub, "template", json.dumps({"message": "to everyone"}))
    assert r.status_code == 201, r.text
    result = settled(hub, r)
    platforms = result["platforms"]
    # Every installation with a template; adm, baidu and the browser have none.
    assert set(platforms) == {"apns", "gcm", "fcmv1", "wns"}
    assert all(counts["PnsUnavailable"] == counts["Targets"] for counts in platforms.values())
    assert platforms["apns"]["Targets"] == 1
    xml = outcome(hub, r, accept="application/xml").text
    apns, wns, gcm, fcm = (xml.index(e) for e in ["<ApnsOutcomeCounts>", "<WnsOutcomeCounts>", "<GcmOutcomeCounts>", "<FcmV1OutcomeCounts>"])
    assert apns < wns < gcm < fcm


def test_no_installation_of_the_platform_is_no_target(hub, devices):
    r = send(hub, "apple", '{"aps":{"alert":"nobody"}}', tags="NoSuchTagHere")
    assert r.status_code == 201
    assert settled(hub, r)["state"] == "NoTargetFound"


def test_direct_sends_find_the_installation_by_its_handle(hub, devices):
    r = send(hub, "apple", '{"aps":{"alert":"direct"}}', tags=None, query="&direct",
             **{"ServiceBusNotification-DeviceHandle": "A1B2C3D4E5F6"})
    assert r.status_code == 201, r.text
    assert settled(hub, r)["platforms"] == {"apns": {"Targets": 1, "PnsUnavailable": 1}}
    r = send(hub, "browser", '{"title":"direct"}', tags=None, query="&direct",
             **{"ServiceBusNotification-DeviceHandle": ENDPOINT, "P256DH": P256DH, "Auth": AUTH})
    assert r.status_code == 201, r.text
    assert settled(hub, r)["platforms"] == {"browser": {"Targets": 1, "PnsUnavailable": 1}}
    r = send(hub, "gcm", '{"data":{}}', tags=None, query="&direct", **{"ServiceBusNotification-DeviceHandle": "unknown:handle/1"})
    assert r.status_code == 201, r.text
    assert settled(hub, r)["state"] == "NoTargetFound"


@pytest.mark.parametrize("fmt,body,headers,status,words", [
    ("apple", '{"alert":"no aps"}', {}, 400, "'aps'"),
    ("apple", "not json", {}, 400, "JSON object"),
    ("apple", '{"aps":{"alert":"' + "x" * 4100 + '"}}', {}, 413, "4096"),
    ("apple", '{"aps":{}}', {"apns-push-type": "shout"}, 400, "apns-push-type"),
    ("apple", '{"aps":{}}', {"apns-priority": "7"}, 400, "apns-priority"),
    ("fcmv1", '{"data":{}}', {}, 400, "'message'"),
    ("adm", '{"m":1}', {}, 400, "'data'"),
    ("windows", "<toast/>", {}, 400, "X-WNS-Type"),
    ("windows", "<toast/>", {"X-WNS-Type": "wns/popup"}, 400, "X-WNS-Type"),
    ("windows", '{"not":"xml"}', {"X-WNS-Type": "wns/tile"}, 400, "<tile>"),
    ("gcm", "", {}, 400, "needs a body"),
    ("windowsphone", "<x/>", {}, 400, "fcmv1"),
    ("nosuch", "{}", {}, 400, "template, linux, apple"),
])
def test_a_payload_its_push_service_would_refuse_is_refused(hub, devices, fmt, body, headers, status, words):
    r = send(hub, fmt, body, **headers)
    assert r.status_code == status, r.text
    assert words in r.text.replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">"), r.text


# ---- ?test: the NotificationOutcome document ----

NH_NS = "{http://schemas.microsoft.com/netservices/2010/10/servicebus/connect}"


def parse_outcome(text):
    import xml.etree.ElementTree as ET
    root = ET.fromstring(text)
    assert root.tag == f"{NH_NS}NotificationOutcome"
    results = [{child.tag.replace(NH_NS, ""): child.text for child in result}
                for result in root.iter(f"{NH_NS}RegistrationResult")]
    return int(root.find(f"{NH_NS}Success").text), int(root.find(f"{NH_NS}Failure").text), results, root


@pytest.fixture(scope="module")
def test_agent(hub):
    import os
    import subprocess
    from conftest import BIN
    env = {"NH_AGENT_HOME": os.path.join(hub.data, "test-send-agent"), "NH_AGENT_INSTALLATION_ID": "test-send-device"}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "TestSendTag"], env={**hub.env, **env}, check=True, capture_output=True)
    hub.start("test-send-agent", "nh-agent", env=env)
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/test-send-device?{API}",
                                           headers={"Authorization": hub.token()}).status_code == 200)
    assert wait_until(lambda: 'nh_agents{service="nh-dispatch"}' in requests.get(f"{hub.base}/metrics").text
                      and re.search(r'nh_agents\{service="nh-dispatch"\} [1-9]', requests.get(f"{hub.base}/metrics").text))
    return "test-send-device"


def test_a_test_send_reports_each_target(hub, devices, test_agent):
    r = send(hub, "template", json.dumps({"message": "test send"}), tags="Plat || TestSendTag", query="&test",
             **{"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    assert r.headers["Content-Type"].startswith("application/xml") and r.headers["Location"]
    success, failure, results, _ = parse_outcome(r.text)
    by_id = {result["RegistrationId"]: result for result in results}
    # The Linux agent (with its default template) acknowledges; each other platform's installation fails.
    assert success == 1 and failure == len(results) - 1 >= 4
    assert by_id[test_agent]["Outcome"] == "The Notification was successfully sent to the Push Notification System"
    assert by_id["plat-apns"]["ApplicationPlatform"] == "apple" and by_id["plat-apns"]["PnsHandle"] == "A1B2C3D4E5F6"
    assert by_id["plat-apns"]["Outcome"].startswith("PnsUnavailable")

    native = send(hub, "linux", '{"message":"for the agent"}', tags="TestSendTag", query="&test")
    assert native.status_code == 201, native.text
    success, failure, results, _ = parse_outcome(native.text)
    assert (success, failure) == (1, 0)
    assert results == [{"ApplicationPlatform": "linux", "PnsHandle": results[0]["PnsHandle"], "RegistrationId": test_agent,
                        "Outcome": "The Notification was successfully sent to the Push Notification System"}]


def test_a_test_send_to_no_one(hub, devices):
    r = send(hub, "apple", '{"aps":{"alert":"x"}}', tags="NobodyAtAll", query="&test")
    assert r.status_code == 201, r.text
    success, failure, results, root = parse_outcome(r.text)
    assert (success, failure, results) == (0, 0, [])
    assert root.find(f"{NH_NS}Results").get("{http://www.w3.org/2001/XMLSchema-instance}nil") == "true"


# ---- $batch?direct: multipart bodies as the .NET, Java and JS SDKs and the REST reference write them ----

def batch(hub, body, content_type, fmt="gcm", query="?direct"):
    return requests.post(f"{hub.base}/hub/messages/$batch{query}&{API}" if query else f"{hub.base}/hub/messages/$batch?{API}",
                         data=body.encode(), headers={"Authorization": hub.token(), "ServiceBusNotification-Format": fmt,
                                                      "Content-Type": content_type})


def dotnet_batch(payload, devices):
    return ("--nh-batch-multipart-boundary\r\nContent-Type: application/json; charset=utf-8\r\n"
            "Content-Disposition: inline; name=notification\r\n\r\n" + payload + "\r\n"
            "--nh-batch-multipart-boundary\r\nContent-Type: application/json; charset=utf-8\r\n"
            "Content-Disposition: inline; name=devices\r\n\r\n" + devices + "\r\n--nh-batch-multipart-boundary--\r\n")


def test_batch_direct_sends_reach_each_handle(hub, devices):
    r = batch(hub, dotnet_batch('{"data":{"m":"batch"}}', json.dumps(["gcm-token-1", "unknown-handle-9"])),
              'multipart/mixed; boundary="nh-batch-multipart-boundary"')
    assert r.status_code == 201, r.text
    assert re.search(r"/hub/messages/[^/$?]+\?api-version=", r.headers["Location"])
    result = settled(hub, r)
    assert result["platforms"] == {"gcm": {"Targets": 1, "PnsUnavailable": 1}}

    # The JS SDK: spaces around =, Content-type, LF only, nothing after the closing boundary.
    js = ("--nh-boundary-1\nContent-type: application/json\nContent-Disposition: inline; name=notification\n\n"
          '{"aps":{"alert":"js"}}\n--nh-boundary-1\nContent-type: application/json\nContent-Disposition: inline; name=devices\n\n'
          '["A1B2C3D4E5F6"]\n--nh-boundary-1--')
    r = batch(hub, js, 'multipart/mixed; boundary = "nh-boundary-1"', fmt="apple")
    assert r.status_code == 201, r.text
    assert settled(hub, r)["platforms"] == {"apns": {"Targets": 1, "PnsUnavailable": 1}}

    # The REST reference's example quotes handles with '.
    r = batch(hub, dotnet_batch('{"message":{"notification":{"body":"doc"}}}', "['fcm-token-1', 'nobody']"),
              "multipart/mixed; boundary=nh-batch-multipart-boundary", fmt="fcmv1")
    assert r.status_code == 201, r.text
    assert settled(hub, r)["platforms"] == {"fcmv1": {"Targets": 1, "PnsUnavailable": 1}}


@pytest.mark.parametrize("body,content_type,query,words", [
    (dotnet_batch('{"data":{}}', "[]"), "multipart/mixed; boundary=nh-batch-multipart-boundary", "?direct", "1 to 1,000"),
    (dotnet_batch('{"data":{}}', json.dumps([f"h{i}" for i in range(1001)])), "multipart/mixed; boundary=nh-batch-multipart-boundary",
     "?direct", "1 to 1,000"),
    (dotnet_batch('{"data":{}}', "not a list"), "multipart/mixed; boundary=nh-batch-multipart-boundary", "?direct", "JSON array"),
    (dotnet_batch('{"data":{}}', '["a"]').replace("name=devices", "name=other"), "multipart/mixed; boundary=nh-batch-multipart-boundary",
     "?direct", "no part named devices"),
    (dotnet_batch('{"data":{}}', '["a"]'), "application/json", "?direct", "multipart/mixed"),
    (dotnet_batch('{"data":{}}', '["a"]'), "multipart/mixed", "?direct", "boundary"),
    (dotnet_batch('{"data":{}}', '["a"]'), "multipart/mixed; boundary=nh-batch-multipart-boundary", "", "$batch?direct"),
    (dotnet_batch("not json", '["a"]'), "multipart/mixed; boundary=nh-batch-multipart-boundary", "?direct", "JSON object"),
])
def test_a_batch_the_hub_cannot_read_is_refused(hub, devices, body, content_type, query, words):
    r = batch(hub, body, content_type, query=query)
    assert r.status_code == 400, r.text
    assert words in r.text, r.text


def test_test_sends_waiting_at_once_are_bounded(hub, devices):
    """A test send to an agent that is not connected waits its 10 s; beyond a quarter of the
    gateway's workers, further test sends are refused with 429 instead of holding them all."""
    import threading
    body = {"installationId": "plat-absent-agent", "platform": "linux", "pushChannel": "legacy-channel-absent", "tags": ["AbsentOnly"]}
    assert put(hub, "plat-absent-agent", body).status_code == 200
    statuses = []

    def waiting():
        statuses.append(send(hub, "linux", '{"m":"wait"}', tags="AbsentOnly", query="&test").status_code)
    threads = [threading.Thread(target=waiting) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    refused = send(hub, "linux", '{"m":"one more"}', tags="AbsentOnly", query="&test")
    assert refused.status_code == 429 and "test sends are waiting" in refused.text
    assert send(hub, "linux", '{"m":"plain"}', tags="AbsentOnly").status_code == 201
    for thread in threads:
        thread.join(timeout=30)
    assert statuses == [201, 201]
