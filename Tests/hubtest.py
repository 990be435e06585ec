"""A running hub for the Python tests and tools: the real executables on free loopback ports,
with a temporary data folder. Shared by Tests/Gateway (through its conftest) and Tests/Hardening."""
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

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("NH_BIN_DIR", os.path.join(ROOT, ".build", "debug"))

FULL_KEY = "DefaultFullSharedAccessSignature"
LISTEN_KEY = "DefaultListenSharedAccessSignature"


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
    """The services of one hub. Every process it starts is kept by name and ended by its pid."""
    SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"]

    def __init__(self, prefix="nh-gateway-", env=None, bin_dir=None):
        self.bin = bin_dir or BIN
        self.data = tempfile.mkdtemp(prefix=prefix)
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
        self.env.update(env or {})
        self.processes = {}
        self.base = f"http://127.0.0.1:{self.http_port}"

    def endpoint(self, section, key="REQUESTS"):
        """A bound endpoint, such as endpoint("DISPATCH", "AGENTS")."""
        return self.env[f"NH_{section}_{key}"]

    def start(self, name, executable=None, env=None, stdout=None):
        log = open(os.path.join(self.data, f"{name}.log"), "ab")
        process = subprocess.Popen([os.path.join(self.bin, executable or name)], env={**self.env, **(env or {})},
                                   stdout=stdout or log, stderr=log)
        self.processes[name] = process
        return process

    def start_services(self, timeout=30.0):
        """Starts every service and waits until the key file exists and the gateway answers."""
        for name in Hub.SERVICES:
            self.start(name)
        return (wait_until(lambda: os.path.exists(os.path.join(self.data, "keys.json")), timeout)
                and wait_until(self.up, timeout))

    def up(self):
        try:
            return requests.get(f"{self.base}/metrics", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, name):
        process = self.processes.pop(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        return process.wait(timeout=15)

    def stop_all(self):
        for name in list(self.processes):
            process = self.processes[name]
            try:
                self.stop(name)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)

    def keys(self):
        return {k["name"]: k["key"] for k in json.load(open(os.path.join(self.data, "keys.json")))["keys"]}

    def token(self, name=FULL_KEY, resource=None, **kwargs):
        return sas_token(resource or f"{self.base}/hub", name, self.keys()[name], **kwargs)

    def connection_string(self, name=FULL_KEY):
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
