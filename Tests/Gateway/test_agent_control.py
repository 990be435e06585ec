"""The agent's control socket, as a host with several users needs it: by default a Unix socket in
the agent's home, which only the agent's user can open (home 0700), reach (socket 0600) and connect
to (libzmq checks the peer's uid with SO_PEERCRED), so that another local user who holds the listen
key and the device key still cannot change the agent's categories. TCP stays an explicit option."""
import os
import stat
import subprocess

import pytest

from conftest import BIN, Hub, wait_until
from hubharness import LISTEN_KEY, free_port, health_row

NOBODY = 65534


@pytest.fixture(scope="module")
def hub():
    hub = Hub(prefix="nh-control-")
    # The harness gives every process a TCP control endpoint; here the agent uses the default.
    del hub.env["NH_AGENT_REQUESTS"]
    assert hub.start_services()
    yield hub
    hub.stop_all()


def agent(hub, env, *arguments):
    return subprocess.run([os.path.join(BIN, "nh-agent"), *arguments], env={**hub.env, **env}, capture_output=True, text=True, timeout=30)


def test_the_control_socket_is_a_unix_socket_only_the_agents_user_reaches(hub):
    home = os.path.join(hub.data, "private-agent")
    env = {"NH_AGENT_HOME": home, "NH_AGENT_INSTALLATION_ID": "private-agent"}
    hub.start("private-agent", "nh-agent", env=env)
    socket_path = os.path.join(home, "control.sock")
    assert wait_until(lambda: os.path.exists(socket_path) and "registered: true" in agent(hub, env, "health").stdout, timeout=30)
    assert stat.S_ISSOCK(os.stat(socket_path).st_mode)
    assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    # The agent's user changes the categories through it, and nhctl health finds it there.
    assert agent(hub, env, "subscribe", "World").returncode == 0
    assert agent(hub, env, "categories").stdout.split() == ["World"]
    health = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "health", "--agent"], env={**hub.env, **env},
                            capture_output=True, text=True)
    assert health.returncode == 0 and health_row(health.stdout, "nh-agent")["endpoint"] == f"ipc://{socket_path}", health.stdout

    # A client with the listen key's bus keys and the device key, as any holder of the listen key
    # could make: the agent's own user gets an answer; another user, even with the file modes
    # opened up, is refused by the peer-credential check before a byte is read.
    public, secret = hub.bus_keys(LISTEN_KEY)
    device = open(os.path.join(home, "device.pub")).read().strip()
    probe = PROBE.format(public=public.decode(), secret=secret.decode(), device=device, endpoint=f"ipc://{socket_path}")
    assert run_probe(probe) == "answered"
    if os.geteuid() != 0:
        pytest.skip("changing to another user needs root")
    os.chmod(home, 0o755)
    os.chmod(socket_path, 0o666)
    try:
        assert run_probe(probe, user=NOBODY) == "no answer"
        assert run_probe(probe) == "answered"
    finally:
        os.chmod(home, 0o700)
        os.chmod(socket_path, 0o600)


# A health request on the control socket, as a CURVE client: prints whether it was answered.
PROBE = """
import json, zmq
s = zmq.Context().socket(zmq.DEALER)
s.linger = 0
s.curve_publickey, s.curve_secretkey, s.curve_serverkey = b"{public}", b"{secret}", b"{device}"
s.connect("{endpoint}")
s.send_multipart([b"", json.dumps({{"v": 1, "type": "health", "id": "probe", "payload": {{}}}}).encode()])
print("answered" if s.poll(3000) else "no answer")
"""


# Debian's Python with Debian's pyzmq (python3-zmq, from make deps): another user can run it.
PROBE_PYTHON = "/usr/bin/python3"


def run_probe(script, user=None):
    done = subprocess.run([PROBE_PYTHON, "-c", script], capture_output=True, text=True, timeout=30, user=user, group=user, cwd="/")
    assert "No module named 'zmq'" not in done.stderr, "python3-zmq is missing: make deps installs it"
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_tcp_stays_an_explicit_option(hub):
    home = os.path.join(hub.data, "tcp-agent")
    env = {"NH_AGENT_HOME": home, "NH_AGENT_INSTALLATION_ID": "tcp-agent", "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}
    hub.start("tcp-agent", "nh-agent", env=env)
    assert wait_until(lambda: "registered: true" in agent(hub, env, "health").stdout, timeout=30)
    assert not os.path.exists(os.path.join(home, "control.sock"))
    assert agent(hub, env, "subscribe", "Sports").returncode == 0
