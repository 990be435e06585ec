"""The dispatcher's store on PostgreSQL (beside the registry's): a delivery acknowledged before its
group of turns is written leaves no row, writes that fail while the store is locked lose nothing
and count nothing twice, breaking news reaches an agent and a phone, the outcome is
Completed, and a dispatcher killed and started again loses nothing: what it
had sent is not sent again, what came while it was down goes out, an agent that was away gets its
backlog, and a push the service had not taken goes to it. Runs on the server NH_TEST_POSTGRES names
(`make test` starts a throwaway one); skipped without it."""
import json
import os
import subprocess
import time

import pytest
import requests

from conftest import BIN, Hub, json_lines, needs_postgres, postgres_database, wait_until
from test_push import APPLE_TEMPLATE, dispatcher, push_config, register, settled, token, write_config

API = "api-version=2015-01"
pytestmark = needs_postgres


@pytest.fixture(scope="module")
def hub(standins):
    hub = Hub(prefix="nh-pg-dispatch-", settings={"NH_STORE": postgres_database("nh_dispatch")})
    hub.env["NH_CONFIG"] = write_config(hub, push_config(standins))
    hub.agent_env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "pg-agent"}
    hub.agent_output = os.path.join(hub.data, "agent.jsonl")
    assert hub.start_services()
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "Breaking"], env={**hub.env, **hub.agent_env}, check=True, capture_output=True)
    start_agent(hub)
    yield hub
    hub.stop_all()


def start_agent(hub):
    hub.start("agent", "nh-agent", env=hub.agent_env, stdout=open(hub.agent_output, "ab"))
    assert wait_until(lambda: dispatcher(hub).get("agents") == "1", timeout=30)


def send(hub, message):
    r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"messageParam": message, "message": message}),
                      headers={"Authorization": hub.token(), "Content-Type": "application/json",
                               "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "Breaking"})
    assert r.status_code == 201, r.text
    return r


def shown(hub, message):
    """How many times the agent showed `message`."""
    return sum(1 for line in json_lines(hub.agent_output) if line.get("payload", {}).get("message") == message)


def query(hub, sql):
    return subprocess.run(["psql", hub.env["NH_STORE"], "-tAc", sql], check=True, capture_output=True, text=True).stdout.strip()


def test_an_agents_delivery_acknowledged_within_its_group_is_never_written(hub):
    """The dispatcher gathers its turns in memory and writes them as one: a delivery the agent
    acknowledges before that write leaves no row, and is counted all the same."""
    before = int(dispatcher(hub).get("acknowledgedUnwrittenTotal", 0))
    response = send(hub, "Acknowledged before the write")
    assert wait_until(lambda: shown(hub, "Acknowledged before the write") == 1)
    # Health does not wait for the gathered turns, so reading it leaves the group as it is.
    assert wait_until(lambda: int(dispatcher(hub).get("acknowledgedUnwrittenTotal", 0)) > before), dispatcher(hub)
    settled(hub, response, "linux", "Success")
    notification = response.headers["Location"].rstrip("/").split("/")[-1].split("?")[0]
    assert query(hub, f"SELECT count(*) FROM dispatch.deliveries WHERE notification_id = '{notification}'") == "0"
    assert query(hub, f"SELECT targets, delivered, acknowledged FROM dispatch.outcomes WHERE notification_id = '{notification}'") == "1|1|1"


def test_writes_that_fail_while_the_store_is_locked_lose_nothing_and_count_nothing_twice(hub):
    """Another session holds the dispatcher's outcome and lease tables longer than the dispatcher's
    lock timeout, so its writes fail, and so does a reading of its leases while they are still
    current. What it had gathered is planned again from the store's cursors once the lock goes:
    every notification is shown once, and counted once, with none left behind."""
    log = os.path.join(hub.data, "nh-dispatch.log")
    def failures():
        with open(log, errors="replace") as f:
            return f.read().count("dispatch commit failed")
    before = failures()
    # The lock is held until a write has failed on it (the dispatcher waits 1 s for a lock), so
    # how the writes fall against the lock's window is not left to chance.
    locker = subprocess.Popen(["psql", "-qX", "-v", "ON_ERROR_STOP=1", hub.env["NH_STORE"]], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    locked = lambda: query(hub, "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                "WHERE c.relname = 'leases' AND l.mode = 'AccessExclusiveLock' AND l.granted") == "1"
    responses = []

    def post(i):
        r = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"messageParam": f"Locked {i}", "message": f"Locked {i}"}),
                          headers={"Authorization": hub.token(), "Content-Type": "application/json",
                                   "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "$InstallationId:pg-agent"})
        assert r.status_code == 201, r.text
        responses.append(r.headers["Location"].rstrip("/").split("/")[-1].split("?")[0])
        time.sleep(0.1)

    try:
        for i in range(8):
            post(i)
        locker.stdin.write("BEGIN; LOCK TABLE dispatch.outcomes, dispatch.leases IN ACCESS EXCLUSIVE MODE;\n")
        locker.stdin.flush()
        assert wait_until(locked, timeout=15), "the lock was not taken"
        deadline = time.monotonic() + 30
        while len(responses) < 22 or (failures() == before and time.monotonic() < deadline):
            post(len(responses))
        held = len(responses)
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        assert locker.wait(timeout=30) == 0, locker.stderr.read()
    finally:
        if locker.poll() is None:
            locker.kill()
            locker.wait()
    assert failures() > before, "no write failed: the lock did not reach the dispatcher"
    for i in range(held, held + 8):
        post(i)
    total = len(responses)
    for i in range(total):
        assert wait_until(lambda: shown(hub, f"Locked {i}") >= 1, timeout=30), f"Locked {i}"
    ids = ",".join(f"'{n}'" for n in responses)
    counted = lambda: query(hub, f"SELECT count(*) FROM dispatch.outcomes WHERE notification_id IN ({ids}) AND targets = 1 AND acknowledged = 1")
    assert wait_until(lambda: counted() == str(total), timeout=30), query(
        hub, f"SELECT notification_id, targets, delivered, acknowledged FROM dispatch.outcomes WHERE notification_id IN ({ids})")
    assert all(shown(hub, f"Locked {i}") == 1 for i in range(total))
    assert query(hub, f"SELECT count(*) FROM dispatch.deliveries WHERE notification_id IN ({ids})") == "0"


def test_breaking_news_reaches_an_agent_and_a_phone_from_the_shared_store(hub, standins):
    register(hub, "pg-phone", "apns", token(7), APPLE_TEMPLATE, ["Breaking"])
    assert wait_until(lambda: int(dispatcher(hub).get("installations", 0)) >= 2, timeout=15)
    response = send(hub, "Breaking: stored in PostgreSQL")
    assert wait_until(lambda: shown(hub, "Breaking: stored in PostgreSQL") == 1)
    assert standins.apple.wait_for(lambda r: r["token"] == token(7) and r["status"] == 200, timeout=15)
    settled(hub, response, "linux", "Success")
    settled(hub, response, "apns", "Success")
    r = requests.get(response.headers["Location"], headers={"Authorization": hub.token(), "Accept": "application/json"})
    assert r.json()["state"] == "Completed"
    assert r.json()["platforms"]["apns"] == {"Targets": 1, "Success": 1}
    # The dispatcher keeps nothing of its own: its state is in the schema dispatch.
    assert not os.path.exists(os.path.join(hub.data, "dispatch.db"))
    assert int(query(hub, "SELECT count(*) FROM dispatch.outcomes")) >= 1
    # On a shared store a dispatcher works by shards, all 64 when it is alone, each with its cursor.
    assert dispatcher(hub)["shards"] == "64"
    assert int(query(hub, "SELECT count(*) FROM dispatch.shard_cursors")) == 64
    assert int(query(hub, "SELECT min(after) FROM dispatch.shard_cursors")) == int(dispatcher(hub)["cursor"]) >= 1


def test_a_dispatcher_killed_and_started_again_loses_nothing(hub, standins):
    before = send(hub, "Before the restart")
    assert wait_until(lambda: shown(hub, "Before the restart") == 1)
    settled(hub, before, "linux", "Success")
    settled(hub, before, "apns", "Success")
    cursor = int(dispatcher(hub)["cursor"])

    # The phone's push service is down: the push stays in the store, unanswered.
    standins.apple.down()
    stuck = send(hub, "Pushed after the restart")
    assert standins.apple.wait_for(lambda r: r["token"] == token(7) and r["status"] == 503, timeout=15)
    assert wait_until(lambda: shown(hub, "Pushed after the restart") == 1)
    hub.stop("agent")
    hub.kill("nh-dispatch")

    # While the dispatcher and the agent are away.
    missed = [send(hub, f"While away {i}") for i in range(3)]
    standins.apple.down(False)
    hub.start("nh-dispatch")
    start_agent(hub)

    for i in range(3):
        assert wait_until(lambda: shown(hub, f"While away {i}") == 1, timeout=30), f"While away {i}"
    settled(hub, stuck, "apns", "Success", timeout=30)
    for response in missed:
        settled(hub, response, "linux", "Success", timeout=30)
        settled(hub, response, "apns", "Success", timeout=30)
    assert int(dispatcher(hub)["cursor"]) == cursor + 4
    # What went out before the kill does not go out again.
    assert shown(hub, "Before the restart") == 1 and shown(hub, "Pushed after the restart") == 1
    assert len(standins.apple.wait_for(lambda r: r["token"] == token(7) and r["status"] == 200, count=99, timeout=1)) == 6
    details = requests.get(stuck.headers["Location"], headers={"Authorization": hub.token(), "Accept": "application/json"}).json()
    assert details["state"] == "Completed" and details["platforms"]["apns"] == {"Targets": 1, "Success": 1}
