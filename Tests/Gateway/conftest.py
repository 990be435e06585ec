"""A running hub for the gateway tests: the real executables on free loopback ports."""
import base64
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("NH_BIN_DIR", os.path.join(ROOT, ".build", "debug"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sas_token(uri, key_name, key, ttl=3600, expiry=None):
    """A SharedAccessSignature exactly as the Notification Hubs REST reference describes it."""
    expiry = expiry if expiry is not None else int(time.time() + ttl)
    encoded = urllib.parse.quote_plus(uri.lower())
    signature = base64.b64encode(hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()).decode()
    return f"SharedAccessSignature sr={encoded}&sig={urllib.parse.quote_plus(signature)}&se={expiry}&skn={key_name}"


class Hub:
    SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"]

    def __init__(self):
        self.data = tempfile.mkdtemp(prefix="nh-gateway-")
        self.http_port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NH_")}
        self.env.update({
            "NH_DATA_DIR": self.data, "NH_LOG_LEVEL": "debug", "NH_HEARTBEAT_MS": "200",
            "NH_GATEWAY_LISTEN": f"127.0.0.1:{self.http_port}", "NH_NAMESPACE": f"http://127.0.0.1:{self.http_port}/",
        })
        for section, keys in [("REGISTRY", ["REQUESTS", "EVENTS"]), ("PUBLISH", ["REQUESTS", "EVENTS"]),
                              ("DISPATCH", ["REQUESTS", "AGENTS"]), ("SYNC", ["REQUESTS", "EVENTS"]),
                              ("AGENT", ["REQUESTS"]), ("GATEWAY", ["REQUESTS"])]:
            for key in keys:
                self.env[f"NH_{section}_{key}"] = f"tcp://127.0.0.1:{free_port()}"
        self.processes = {}
        self.base = f"http://127.0.0.1:{self.http_port}"

    def start(self, name, executable=None, env=None, stdout=None):
        log = open(os.path.join(self.data, f"{name}.log"), "ab")
        process = subprocess.Popen([os.path.join(BIN, executable or name)], env={**self.env, **(env or {})},
                                   stdout=stdout or log, stderr=log)
        self.processes[name] = process
        return process

    def stop(self, name):
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=15)

    def stop_all(self):
        for name in list(self.processes):
            try:
                self.stop(name)
            except subprocess.TimeoutExpired:
                self.processes.get(name) and self.processes[name].kill()

    def keys(self):
        return {k["name"]: k["key"] for k in json.load(open(os.path.join(self.data, "keys.json")))["keys"]}

    def token(self, name="DefaultFullSharedAccessSignature", resource=None, **kwargs):
        return sas_token(resource or f"{self.base}/hub", name, self.keys()[name], **kwargs)

    def connection_string(self, name="DefaultFullSharedAccessSignature"):
        return f"Endpoint={self.base}/;SharedAccessKeyName={name};SharedAccessKey={self.keys()[name]}"


def json_lines(path):
    """The objects of a file of JSON lines, such as an agent's output."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_until(condition, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def hub():
    hub = Hub()
    for name in Hub.SERVICES:
        hub.start(name)
    assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")))
    assert wait_until(lambda: answers(hub))
    yield hub
    hub.stop_all()


def answers(hub):
    """The gateway answers a request that needs no other service."""
    try:
        return requests.get(f"{hub.base}/hub/registrations?api-version=2015-01", timeout=2).status_code == 401
    except requests.RequestException:
        return False
