"""The dispatcher's counters after an agent's connection is lost with deliveries in flight: what the
agent gets again on its next connection counts as resent, not as sent a second time, so that
sentTotal matches what was acknowledged."""
import json
import os
import signal
import subprocess

from conftest import BIN, Hub, wait_until
from hubharness import health_row


def counters(hub):
    done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "health"], env=hub.env, capture_output=True, text=True, timeout=30)
    details = health_row(done.stdout, "nh-dispatch").get("details", {})
    return {name: int(details.get(name, 0)) for name in ("sentTotal", "resentTotal", "ackedTotal", "agents")}


def test_deliveries_sent_again_after_a_lost_connection_count_as_resent():
    hub = Hub(prefix="nh-counters-")
    try:
        assert hub.start_services()
        env = {"NH_AGENT_HOME": os.path.join(hub.data, "agent"), "NH_AGENT_INSTALLATION_ID": "counted",
               "NH_AGENT_TEMPLATE": '{"aps":{"alert":"$(messageParam)"}}'}
        subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "News"], env={**hub.env, **env}, check=True, capture_output=True)
        output = os.path.join(hub.data, "agent.jsonl")
        agent = hub.start("agent", "nh-agent", env=env, stdout=open(output, "ab"))
        assert wait_until(lambda: counters(hub)["agents"] == 1)
        before = counters(hub)
        # The agent stops answering: the dispatcher sends, and nothing is acknowledged.
        agent.send_signal(signal.SIGSTOP)
        sends = 5
        for i in range(sends):
            done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "send", "--tag", "News", f"messageParam=n{i}"],
                                  env=hub.env, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
        assert wait_until(lambda: counters(hub)["sentTotal"] - before["sentTotal"] == sends)
        # The connection is lost with them in flight; the agent comes back and gets them again.
        hub.kill("agent")
        hub.start("agent", "nh-agent", env=env, stdout=open(output, "ab"))
        assert wait_until(lambda: counters(hub)["ackedTotal"] - before["ackedTotal"] == sends, timeout=30), counters(hub)
        after = counters(hub)
        assert after["sentTotal"] - before["sentTotal"] == sends, after
        assert after["resentTotal"] - before["resentTotal"] >= sends, after
        shown = [json.loads(line)["payload"]["aps"]["alert"] for line in open(output) if line.strip()]
        assert sorted(shown) == [f"n{i}" for i in range(sends)]
    finally:
        hub.stop_all()
