"""The registry's store on PostgreSQL, shared by two registry processes: an agent registers through
one, the dispatcher follows the other's change stream, and a broadcast reaches the agent. Runs on
the server NH_TEST_POSTGRES names (`make test` starts a throwaway one); skipped without it."""
import json
import os
import subprocess

import pytest
import requests

from conftest import BIN, free_port, json_lines, needs_postgres, postgres_hub, wait_until

API = "api-version=2015-01"
pytestmark = needs_postgres


@pytest.fixture(scope="module")
def hub():
    # A second registry process on the same store, with endpoints of its own.
    hub = postgres_hub("registry")
    yield hub
    hub.stop_all()


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


def test_an_import_job_is_taken_over_by_the_other_registry_process_and_applies_each_line_once(hub):
    """One registry process runs the job under a lease its batches renew; killed in the middle,
    the other process sharing the store takes the job over once the lease has run out, and every
    good line is applied once, every bad one reported once."""
    import signal
    from test_jobs import import_file, read_job
    source = os.path.join(hub.data, "import.txt")
    bad, good = import_file(source)
    first, second = hub.processes["nh-registry"], hub.processes["nh-registry-2"]
    env = {**hub.env, **hub.second}

    def nhctl(*arguments, environment=env):
        done = subprocess.run([os.path.join(BIN, "nhctl"), "job", *arguments, "--json"], env=environment, capture_output=True, text=True,
                              timeout=60)
        return json.loads(done.stdout) if done.stdout.strip() else None

    # The first process is stopped: the second, through which the job is made, takes it up.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        job = nhctl("import", source, "--no-wait")
        assert job and job["status"] in ("Started", "Running"), job
        assert wait_until(lambda: (nhctl("show", job["jobId"]) or {}).get("processed", 0) >= 1_000, timeout=60)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    hub.kill("nh-registry-2")
    assert second.poll() is not None

    def state():
        r = requests.get(f"{hub.base}/hub/jobs/{job['jobId']}?{API}", headers={"Authorization": hub.token()}, timeout=10)
        return read_job(r.text) if r.status_code == 200 else {"Status": r.text}

    assert wait_until(lambda: state()["Status"] == "Completed", timeout=120), state()
    done = state()["OutputProperties"]
    assert (int(done["AppliedLines"]), int(done["FailedLines"])) == (len(good), len(bad))
    with open(done["FailedFilePath"].removeprefix("file://")) as f:
        assert [(row["line"], row["code"]) for row in map(json.loads, f)] == sorted(bad.items())
    # Each process ran part of it.
    for name in ("nh-registry", "nh-registry-2"):
        with open(os.path.join(hub.data, f"{name}.log")) as f:
            assert f"msg=\"job running\" job={job['jobId']}" in f.read(), name
    assert wait_until(lambda: dispatcher_installations(hub) >= len(good), timeout=60)
