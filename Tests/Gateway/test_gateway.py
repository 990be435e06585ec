"""The Notification Hubs REST API against the running gateway, with tokens signed as the REST
reference describes, using the requests library as a backend written for Azure would."""
import datetime
import json
import os
import subprocess
import time

import pytest
import requests

from conftest import BIN, json_lines, sas_token, wait_until

API = "api-version=2015-01"



@pytest.fixture(scope="module")
def agent(hub):
    output = os.path.join(hub.data, "agent.jsonl")
    env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "py-device"}
    hub.start("agent", "nh-agent", env=env, stdout=open(output, "ab"))

    def registered():
        r = requests.get(f"{hub.base}/hub/installations/py-device?{API}", headers={"Authorization": hub.token()})
        return r.status_code == 200

    assert wait_until(registered)
    return output


def headers(hub, **extra):
    return {"Authorization": hub.token(), "Content-Type": "application/json", **extra}


def outcome(hub, location):
    r = requests.get(location, headers={"Authorization": hub.token(), "Accept": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


def counts(details):
    return {item["name"]: item["count"] for item in details["outcomeCounts"]}


def test_breaking_news_over_rest(hub, agent):
    # 1. Replace the installation with a tag and a template. The agent is connected under this id,
    #    and a linux installation's push channel is the agent's device key, which the backend keeps.
    key = requests.get(f"{hub.base}/hub/installations/py-device?{API}", headers=headers(hub)).json()["pushChannel"]
    installation = {
        "installationId": "py-device", "platform": "linux", "pushChannel": key, "tags": ["World"],
        "templates": {"news": {"body": '{"aps":{"alert":"$(messageParam)"}}'}},
    }
    r = requests.put(f"{hub.base}/hub/installations/py-device?{API}", headers=headers(hub), data=json.dumps(installation))
    assert r.status_code == 200, r.text

    # 2. Patch its tags.
    patch = [{"op": "add", "path": "/tags", "value": "Sports"}, {"op": "remove", "path": "/tags/World"}]
    r = requests.patch(f"{hub.base}/hub/installations/py-device?{API}", data=json.dumps(patch),
                       headers=headers(hub, **{"Content-Type": "application/json-patch+json"}))
    assert r.status_code == 200, r.text  # as the service answers and the SDKs require
    assert requests.get(f"{hub.base}/hub/installations/py-device?{API}", headers=headers(hub)).json()["tags"] == ["Sports"]

    # 3. Send a template notification to an expression.
    r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"messageParam": "Breaking Sports News!"}),
                      headers=headers(hub, **{"ServiceBusNotification-Format": "template",
                                             "ServiceBusNotification-Tags": "Sports && !World"}))
    assert r.status_code == 201, r.text
    location = r.headers["Location"]

    # 4. The agent receives it, rendered from its template.
    assert wait_until(lambda: any(l.get("payload", {}).get("aps", {}).get("alert") == "Breaking Sports News!"
                                  for l in json_lines(agent)))

    # 5. The outcome becomes Completed with one success.
    assert wait_until(lambda: outcome(hub, location)["state"] == "Completed" and counts(outcome(hub, location))["Success"] == 1)


def test_scheduled_cancel_and_fire(hub, agent):
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    native = {"ServiceBusNotification-Format": "linux"}
    # 6. Schedule a send and cancel it.
    r = requests.post(f"{hub.base}/hub/schedulednotifications?{API}", data=json.dumps({"message": "never"}),
                      headers=headers(hub, **native, **{"ServiceBusNotification-ScheduleTime": later,
                                                         "ServiceBusNotification-Tags": "Sports"}))
    assert r.status_code == 201, r.text
    cancelled = r.headers["Location"].split("/")[-1].split("?")[0]
    r = requests.delete(f"{hub.base}/hub/schedulednotifications/{cancelled}?{API}", headers=headers(hub))
    assert r.status_code == 200, r.text
    assert outcome(hub, f"{hub.base}/hub/messages/{cancelled}?{API}")["state"] == "Canceled"
    assert requests.delete(f"{hub.base}/hub/schedulednotifications/{cancelled}?{API}", headers=headers(hub)).status_code == 409

    # 7. Schedule a send that fires, once.
    r = requests.post(f"{hub.base}/hub/schedulednotifications?{API}", data=json.dumps({"message": "on time"}),
                      headers=headers(hub, **native, **{"ServiceBusNotification-ScheduleTime": soon,
                                                         "ServiceBusNotification-Tags": "Sports"}))
    assert r.status_code == 201, r.text
    fired = r.headers["Location"].split("/")[-1].split("?")[0]
    assert outcome(hub, f"{hub.base}/hub/messages/{fired}?{API}")["state"] == "Scheduled"
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == "on time" for l in json_lines(agent)), timeout=15)
    assert wait_until(lambda: outcome(hub, f"{hub.base}/hub/messages/{fired}?{API}")["state"] == "Completed")
    time.sleep(1.5)
    assert sum(1 for l in json_lines(agent) if l.get("payload", {}).get("message") == "on time") == 1
    assert not any(l.get("payload", {}).get("message") == "never" for l in json_lines(agent))


def test_direct_send_registrations_and_delete(hub, agent):
    # 8. A direct send to the agent's handle.
    r = requests.post(f"{hub.base}/hub/messages?direct&{API}", data=json.dumps({"message": "direct"}),
                      headers=headers(hub, **{"ServiceBusNotification-Format": "linux",
                                             "ServiceBusNotification-DeviceHandle": "py-device"}))
    assert r.status_code == 201, r.text
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == "direct" for l in json_lines(agent)))

    # 9. List registrations, as an Atom feed, a page at a time.
    r = requests.get(f"{hub.base}/hub/registrations?$top=10&{API}", headers=headers(hub))
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/atom+xml")
    assert "<RegistrationId>py-device</RegistrationId>" in r.text
    assert requests.get(f"{hub.base}/hub/registrations/py-device?{API}", headers=headers(hub)).status_code == 200

    # 10. Delete.
    requests.put(f"{hub.base}/hub/installations/gone?{API}", headers=headers(hub),
                 data=json.dumps({"installationId": "gone", "platform": "linux", "pushChannel": "gone"}))
    assert requests.delete(f"{hub.base}/hub/installations/gone?{API}", headers=headers(hub)).status_code == 204
    assert requests.get(f"{hub.base}/hub/installations/gone?{API}", headers=headers(hub)).status_code == 404


def test_user_notifications_and_metrics(hub):
    r = requests.post(f"{hub.base}/hub/users/alice/notifications?{API}", headers=headers(hub),
                      data=json.dumps({"appNotificationId": "order-1", "visual": {"title": "Shipped", "body": "Friday"}}))
    assert r.status_code == 201, r.text
    assert r.json()["notification"]["userId"] == "alice"
    metrics = requests.get(f"{hub.base}/metrics").text
    for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"]:
        assert f'nh_up{{service="{service}"}} 1' in metrics
        assert f'nh_requests_total{{service="{service}",type="health"}}' in metrics or f'service="{service}"' in metrics
    assert 'nh_http_requests_total{service="nh-gateway"' in metrics
    assert 'nh_installations{service="nh-dispatch"}' in metrics


@pytest.mark.parametrize("case", ["expired", "wrong signature", "unknown key", "other resource", "missing"])
def test_401(hub, case):
    keys = hub.keys()
    full = "DefaultFullSharedAccessSignature"
    token = {
        "expired": sas_token(f"{hub.base}/hub", full, keys[full], expiry=int(time.time()) - 10),
        "wrong signature": sas_token(f"{hub.base}/hub", full, "not-the-key"),
        "unknown key": sas_token(f"{hub.base}/hub", "Nobody", keys[full]),
        "other resource": sas_token(f"{hub.base}/otherhub", full, keys[full]),
        "missing": None,
    }[case]
    r = requests.get(f"{hub.base}/hub/installations/py-device?{API}", headers={"Authorization": token} if token else {})
    assert r.status_code == 401
    assert "<Detail>" in r.text and "unauthorized" in r.text


def test_namespace_and_hub_wide_tokens(hub):
    namespace = sas_token(f"{hub.base}/", "DefaultFullSharedAccessSignature", hub.keys()["DefaultFullSharedAccessSignature"])
    assert requests.get(f"{hub.base}/hub/registrations?{API}", headers={"Authorization": namespace}).status_code == 200


def test_401_for_a_missing_claim_404_413(hub):
    listen = hub.token("DefaultListenSharedAccessSignature")
    r = requests.post(f"{hub.base}/hub/messages?{API}", data="{}", headers={
        "Authorization": listen, "ServiceBusNotification-Format": "template"})
    assert r.status_code == 401
    assert requests.get(f"{hub.base}/hub/installations/nobody?{API}", headers=headers(hub)).status_code == 404
    assert requests.get(f"{hub.base}/otherhub/installations/x?{API}", headers=headers(hub)).status_code == 404
    big = json.dumps({"message": "x" * (65 * 1024)})
    r = requests.post(f"{hub.base}/hub/messages?{API}", data=big, headers=headers(hub, **{"ServiceBusNotification-Format": "linux"}))
    assert r.status_code == 413


@pytest.mark.parametrize("case", ["malformed json", "invalid patch", "unknown format", "schedule past",
                                  "schedule too far", "non-string property", "api-version"])
def test_400(hub, case):
    now = datetime.datetime.now(datetime.timezone.utc)
    template = {"ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "Sports"}
    before = requests.get(f"{hub.base}/metrics").text.count("scheduled")
    if case == "malformed json":
        r = requests.put(f"{hub.base}/hub/installations/bad?{API}", data="{not json", headers=headers(hub))
    elif case == "invalid patch":
        r = requests.patch(f"{hub.base}/hub/installations/py-device?{API}", headers=headers(hub),
                           data=json.dumps([{"op": "move", "path": "/tags"}]))
    elif case == "unknown format":
        r = requests.post(f"{hub.base}/hub/messages?{API}", data="{}", headers=headers(hub, **{"ServiceBusNotification-Format": "windows"}))
    elif case in ("schedule past", "schedule too far"):
        when = now - datetime.timedelta(minutes=5) if case == "schedule past" else now + datetime.timedelta(days=8)
        r = requests.post(f"{hub.base}/hub/schedulednotifications?{API}", data=json.dumps({"messageParam": "x"}),
                          headers=headers(hub, **template, **{"ServiceBusNotification-ScheduleTime": when.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    elif case == "non-string property":
        r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"messageParam": 5}), headers=headers(hub, **template))
    else:
        r = requests.get(f"{hub.base}/hub/installations/py-device?api-version=2030-01", headers=headers(hub))
    assert r.status_code == 400, r.text
    assert "<Detail>" in r.text


def test_https_with_a_self_signed_certificate(hub, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    from conftest import free_port
    port = free_port()
    hub.start("nh-gateway-tls", "nh-gateway", env={
        "NH_GATEWAY_LISTEN": f"127.0.0.1:{port}", "NH_GATEWAY_CERTIFICATE": str(cert), "NH_GATEWAY_KEY": str(key),
        "NH_GATEWAY_REQUESTS": f"tcp://127.0.0.1:{free_port()}"})
    base = f"https://127.0.0.1:{port}"

    def answers():
        try:
            return requests.get(f"{base}/metrics", verify=str(cert), timeout=1).status_code == 200
        except requests.RequestException:
            return False

    assert wait_until(answers)
    # An sb:// connection string becomes https://, and its token is signed for that resource.
    token = sas_token(f"sb://127.0.0.1:{port}/hub", "DefaultFullSharedAccessSignature", hub.keys()["DefaultFullSharedAccessSignature"])
    r = requests.get(f"{base}/hub/installations/py-device?{API}", headers={"Authorization": token}, verify=str(cert))
    assert r.status_code == 200, r.text
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{base}/metrics", verify=True, timeout=2)
    assert hub.stop("nh-gateway-tls") == 0


def test_user_rest_with_tokens(hub):
    credential = subprocess.run([os.path.join(BIN, "nhctl"), "user", "credential", "dave"], env=hub.env,
                                capture_output=True, text=True, check=True).stdout.strip()
    r = requests.post(f"{hub.base}/hub/users/dave/notifications?{API}", headers=headers(hub),
                      data=json.dumps({"appNotificationId": "d-1", "visual": {"title": "Hi", "body": "Dave"}}))
    assert r.status_code == 201, r.text
    notification = r.json()["notification"]["id"]
    token = requests.post(f"{hub.base}/hub/users/tokens?{API}", data=json.dumps({"credential": credential})).json()["token"]
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    changes = requests.get(f"{hub.base}/hub/users/me/notifications?cursor=0&limit=100&{API}", headers=bearer).json()
    assert [c["id"] for c in changes["changes"]] == [notification] and changes["cursor"] >= 1
    r = requests.patch(f"{hub.base}/hub/users/me/notifications/{notification}?{API}", headers=bearer,
                       data=json.dumps({"userActionState": "dismissed"}))
    assert r.status_code == 200 and r.json()["notification"]["userActionState"] == "dismissed"
    assert requests.patch(f"{hub.base}/hub/users/me/notifications/{notification}?{API}", headers=bearer,
                          data=json.dumps({"userActionState": "archived"})).status_code == 400
    history = requests.get(f"{hub.base}/hub/users/me/notifications/history?{API}", headers=bearer).json()
    assert history["notifications"][0]["userActionState"] == "dismissed"
    assert requests.delete(f"{hub.base}/hub/users/me/notifications/{notification}?{API}", headers=bearer).status_code == 204
    assert requests.get(f"{hub.base}/hub/users/me/notifications/history?{API}", headers=bearer).json()["notifications"] == []
    assert requests.get(f"{hub.base}/hub/users/me/notifications?{API}").status_code == 401
    assert requests.get(f"{hub.base}/hub/users/me/notifications?{API}", headers={"Authorization": "Bearer forged"}).status_code == 401
