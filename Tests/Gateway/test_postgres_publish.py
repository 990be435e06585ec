"""The publish service's store on PostgreSQL, shared by two publish processes: the dispatcher
follows the first and pulls from it, a second gateway sends through the second, and every send
reaches the agent once, scheduled sends too, whichever process fires them. Runs on the server
NH_TEST_POSTGRES names (`make test` starts a throwaway one); skipped without it."""
import datetime
import json
import os
import subprocess
import time

import pytest
import requests

from conftest import BIN, free_port, json_lines, needs_postgres, postgres_hub, wait_until

API = "api-version=2015-01"
pytestmark = needs_postgres


@pytest.fixture(scope="module")
def hub():
    # A second publish process on the same store, with endpoints of its own, and a gateway that
    # sends through it; the dispatcher follows and pulls from the first alone.
    hub = postgres_hub("publish")
    port = free_port()
    hub.start("nh-gateway-2", "nh-gateway", env={**hub.second, "NH_GATEWAY_LISTEN": f"127.0.0.1:{port}",
                                                  "NH_GATEWAY_REQUESTS": f"tcp://127.0.0.1:{free_port()}"})
    hub.bases = [hub.base, f"http://127.0.0.1:{port}"]
    assert wait_until(lambda: publish_latest(hub, 1) == 0)
    yield hub
    hub.stop_all()


def signed(hub, base, **extra):
    # The token's resource is the gateway's own URL.
    return {"Authorization": hub.token(resource=f"{base}/hub"), "Content-Type": "application/json", **extra}


def publish_latest(hub, which):
    """The latest sequence the publish process behind gateway `which` has announced; -1 when it does not answer."""
    try:
        r = requests.get(f"{hub.bases[which]}/hub/health", headers={"Authorization": hub.token(resource=f"{hub.bases[which]}/hub")},
                         timeout=5)
        return int(next(s["details"] for s in r.json()["services"] if s["service"] == "nh-publish")["latest"])
    except (requests.RequestException, StopIteration, KeyError, ValueError, TypeError):
        return -1


def outcome(hub, base, notification_id):
    r = requests.get(f"{base}/hub/messages/{notification_id}?{API}", headers={**signed(hub, base), "Accept": "application/json"})
    return r.json() if r.status_code == 200 else {}


def succeeded(result):
    return result.get("state") == "Completed" and {c["name"]: c["count"] for c in result.get("outcomeCounts", [])}.get("Success") == 1


def send(hub, base, message, **extra):
    r = requests.post(f"{base}/hub/messages?{API}", data=json.dumps({"message": message}),
                      headers=signed(hub, base, **{"ServiceBusNotification-Format": "linux", "ServiceBusNotification-Tags": "Shared"},
                                     **extra))
    assert r.status_code == 201, r.text
    return r.headers["Location"].split("/")[-1].split("?")[0]


def messages(output, text):
    """How many times the agent showed `text`."""
    return sum(1 for l in json_lines(output) if l.get("payload", {}).get("message") == text)


@pytest.fixture(scope="module")
def agent(hub):
    output = os.path.join(hub.data, "agent.jsonl")
    env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "pg-publish-device"}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "Shared"], env={**hub.env, **env}, check=True, capture_output=True)
    hub.start("agent", "nh-agent", env=env, stdout=open(output, "ab"))

    def tagged():
        r = requests.get(f"{hub.base}/hub/installations/pg-publish-device?{API}", headers=signed(hub, hub.base))
        return r.status_code == 200 and "Shared" in r.json().get("tags", [])

    assert wait_until(tagged, timeout=20)
    # The dispatcher has the installation before the first send goes out.
    assert wait_until(lambda: send_probe(hub, output), timeout=30)
    return output


def send_probe(hub, output):
    if messages(output, "probe") == 0:
        send(hub, hub.base, "probe")
        return wait_until(lambda: messages(output, "probe") > 0, timeout=3)
    return True


def test_sends_through_either_publish_reach_the_agent_once_each(hub, agent):
    ids = {}
    for i in range(10):
        which = i % 2
        ids[f"both-{i}"] = (which, send(hub, hub.bases[which], f"both-{i}"))
    # Either process announces every accept: the first, which the dispatcher follows, has announced
    # the second's, and the second the first's.
    latest = [publish_latest(hub, 0), publish_latest(hub, 1)]
    assert wait_until(lambda: publish_latest(hub, 0) == publish_latest(hub, 1) >= 11), latest
    for text, (which, notification_id) in ids.items():
        assert wait_until(lambda: messages(agent, text) >= 1, timeout=20), text
        assert wait_until(lambda: succeeded(outcome(hub, hub.bases[which], notification_id))), (text, outcome(hub, hub.bases[which], notification_id))
    time.sleep(1)
    assert {text: messages(agent, text) for text in ids} == {text: 1 for text in ids}


def test_a_repeated_idempotency_key_through_the_other_process_is_the_same_send(hub, agent):
    key = {"ServiceBusNotification-IdempotencyKey": "pg-once"}
    r = [requests.post(f"{base}/hub/messages?{API}", data=json.dumps({"message": "keyed"}),
                       headers=signed(hub, base, **{"ServiceBusNotification-Format": "linux",
                                                    "ServiceBusNotification-Tags": "Shared"}, **key))
         for base in hub.bases]
    assert [x.status_code for x in r] == [201, 201], [x.text for x in r]
    assert len({x.headers["Location"].split("/")[-1].split("?")[0] for x in r}) == 1
    assert wait_until(lambda: messages(agent, "keyed") == 1, timeout=20)
    time.sleep(1)
    assert messages(agent, "keyed") == 1


def test_scheduled_sends_fire_once_with_two_processes_and_cancel_through_either(hub, agent):
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def schedule(base, message, when):
        r = requests.post(f"{base}/hub/schedulednotifications?{API}", data=json.dumps({"message": message}),
                          headers=signed(hub, base, **{"ServiceBusNotification-Format": "linux", "ServiceBusNotification-Tags": "Shared",
                                                       "ServiceBusNotification-ScheduleTime": when}))
        assert r.status_code == 201, r.text
        return r.headers["Location"].split("/")[-1].split("?")[0]

    # Scheduled through the second, canceled through the first: the processes share the schedule.
    never = schedule(hub.bases[1], "pg-never", later)
    assert outcome(hub, hub.bases[0], never)["state"] == "Scheduled"
    r = requests.delete(f"{hub.bases[0]}/hub/schedulednotifications/{never}?{API}", headers=signed(hub, hub.bases[0]))
    assert r.status_code == 200, r.text
    assert outcome(hub, hub.bases[1], never)["state"] == "Canceled"
    assert requests.delete(f"{hub.bases[1]}/hub/schedulednotifications/{never}?{API}",
                           headers=signed(hub, hub.bases[1])).status_code == 409

    # Both processes fire due sends every half second: each fires once.
    fired = {f"pg-on-time-{i}": schedule(hub.bases[i % 2], f"pg-on-time-{i}", soon) for i in range(6)}
    for text, notification_id in fired.items():
        assert wait_until(lambda: messages(agent, text) >= 1, timeout=20), text
        assert wait_until(lambda: succeeded(outcome(hub, hub.bases[0], notification_id))), outcome(hub, hub.bases[0], notification_id)
    time.sleep(1.5)
    assert {text: messages(agent, text) for text in fired} == {text: 1 for text in fired}
    assert messages(agent, "pg-never") == 0


def test_a_rich_payload_stored_through_one_process_is_fetched_through_the_other(hub, agent, tmp_path):
    # nhctl sends through the second process; the agent fetches through the first.
    payload = tmp_path / "picture.bin"
    payload.write_bytes(os.urandom(50_000))
    sent = subprocess.run([os.path.join(BIN, "nhctl"), "send", "--rich", str(payload), "--message", "pg-rich", "--tag", "Shared"],
                          env={**hub.env, **hub.second}, capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr

    def shown():
        return [l["rich"] for l in json_lines(agent) if (l.get("rich") or {}).get("message") == "pg-rich" and l["rich"].get("path")]

    assert wait_until(lambda: shown(), timeout=30), [l for l in json_lines(agent) if "rich" in json.dumps(l)]
    with open(shown()[0]["path"], "rb") as f:
        assert f.read() == payload.read_bytes()
