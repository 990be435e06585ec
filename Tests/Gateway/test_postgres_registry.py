"""The registry's store on PostgreSQL, shared by two registry processes: an agent registers through
one, the dispatcher follows the other's change stream, and a broadcast reaches the agent. Runs on
the server NH_TEST_POSTGRES names (`make test` starts a throwaway one); skipped without it."""
import json
import os
import subprocess

import pytest
import requests

from conftest import BIN, free_port, json_lines, needs_postgres, shared_store_hub, wait_until

API = "api-version=2015-01"
pytestmark = needs_postgres


@pytest.fixture(scope="module")
def hub():
    yield from shared_store_hub("nh-registry", "REGISTRY")


def headers(hub, **extra):
    return {"Authorization": hub.token(), "Content-Type": "application/json", **extra}


def dispatcher_installations(hub):
    try:
        r = requests.get(f"{hub.base}/hub/health", headers={"Authorization": hub.token()}, timeout=5)
        return int(next(s["details"] for s in r.json()["services"] if s["service"] == "nh-dispatch")["installations"])
    except (requests.RequestException, StopIteration, KeyError, ValueError):
        return -1


def test_an_agent_registered_through_one_registry_is_known_through_the_other(hub):
    # The agent registers through the second registry; the dispatcher and the gateway use the first.
    output = os.path.join(hub.data, "agent.jsonl")
    env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "pg-device", **hub.second}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "Shared"], env={**hub.env, **env}, check=True, capture_output=True)
    hub.start("agent", "nh-agent", env=env, stdout=open(output, "ab"))
    assert wait_until(lambda: requests.get(f"{hub.base}/hub/installations/pg-device?{API}", headers=headers(hub)).status_code == 200,
                      timeout=20)
    # The first registry published the second's change: the dispatcher, which follows the first, knows it.
    assert wait_until(lambda: dispatcher_installations(hub) >= 1, timeout=20)

    r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"messageParam": "from a shared store"}),
                      headers=headers(hub, **{"ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "Shared"}))
    assert r.status_code == 201, r.text
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == "from a shared store" for l in json_lines(output)), timeout=20)


def test_changes_through_either_registry_keep_one_sequence(hub):
    """Installations written through both processes, alternately, through two gateways: the store
    numbers every change, so their versions only go up, and each process reads what the other wrote."""
    port = free_port()
    hub.start("nh-gateway-2", "nh-gateway", env={**hub.second, "NH_GATEWAY_LISTEN": f"127.0.0.1:{port}",
                                                  "NH_GATEWAY_REQUESTS": f"tcp://127.0.0.1:{free_port()}"})
    bases = [hub.base, f"http://127.0.0.1:{port}"]

    def signed(base):
        return {"Authorization": hub.token(resource=f"{base}/hub"), "Content-Type": "application/json"}
    def answers():
        try:
            return requests.get(f"{bases[1]}/hub/installations/none?{API}", headers=signed(bases[1]), timeout=2).status_code == 404
        except requests.RequestException:
            return False

    assert wait_until(answers)
    versions = []
    for i in range(12):
        body = {"installationId": f"pg-both-{i}", "platform": "gcm", "pushChannel": f"channel-{i}", "tags": ["Both"]}
        r = requests.put(f"{bases[i % 2]}/hub/installations/pg-both-{i}?{API}", headers=signed(bases[i % 2]), json=body)
        assert r.status_code == 200, r.text
        other = requests.get(f"{bases[(i + 1) % 2]}/hub/installations/pg-both-{i}?{API}", headers=signed(bases[(i + 1) % 2]))
        assert other.status_code == 200 and other.json()["tags"] == ["Both"]
        versions.append(other.json()["version"])
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
