"""The real executables on free loopback ports with a data folder of their own, for the Python
tests (Tests/Gateway), the soak and the fuzzer (Tests/Hardening). Standard library and requests only."""
import base64
import hashlib
import hmac
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("NH_BIN_DIR", os.path.join(ROOT, ".build", "debug"))

FULL_KEY = "DefaultFullSharedAccessSignature"
LISTEN_KEY = "DefaultListenSharedAccessSignature"

_taken = set()
_taken_lock = threading.Lock()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port that is free now, below the kernel's ephemeral range when there is room.
    A port from the ephemeral range can be taken by an outgoing connection while the service that
    owns it is down (a client reconnecting to it may even connect to itself), so a service that
    is restarted could not bind it again."""
    low = _ephemeral_low()
    if low > 12_000:
        for _ in range(200):
            port = random.randrange(10_000, low)
            with _taken_lock:
                if port in _taken:
                    continue
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            with _taken_lock:
                _taken.add(port)
            return port
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
    """The services of one hub: their environment (every endpoint on a free loopback port), their
    data folder, and the processes started, by name."""
    SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"]

    def __init__(self, prefix="nh-gateway-", settings=None, bin_dir=None, data=None):
        self.bin = bin_dir or BIN
        self.data = data or tempfile.mkdtemp(prefix=prefix)
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
        self.env.update(settings or {})
        self.processes = {}
        self.base = f"http://127.0.0.1:{self.http_port}"

    def start(self, name, executable=None, env=None, stdout=None):
        """Starts an executable under `name`; its standard error (and standard output unless given)
        goes to NAME.log in the data folder."""
        with open(os.path.join(self.data, f"{name}.log"), "ab") as log:
            process = subprocess.Popen([os.path.join(self.bin, executable or name)], env={**self.env, **(env or {})},
                                       stdout=stdout or log, stderr=log)
        self.processes[name] = process
        return process

    def describe(self, name, lines=30):
        """What became of the process started under `name`: running or its exit status, and the
        last lines of its log; for a failed assertion to say why a process did not come up."""
        process = self.processes.get(name)
        state = "not started" if process is None else ("running" if process.poll() is None else f"exited with status {process.returncode}")
        try:
            with open(os.path.join(self.data, f"{name}.log"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 65536))
                tail = f.read().decode(errors="replace").splitlines()[-lines:]
        except OSError as error:
            tail = [f"(no log: {error})"]
        return f"{name} {state}; the last lines of its log:\n" + "\n".join(tail)

    def endpoint(self, section, key="REQUESTS"):
        """A bound endpoint, such as endpoint("DISPATCH", "AGENTS")."""
        return self.env[f"NH_{section}_{key}"]

    def start_services(self, timeout=30.0):
        """Starts every service and waits until the key files exist and the gateway answers."""
        for name in Hub.SERVICES:
            self.start(name)
        return (wait_until(lambda: os.path.exists(os.path.join(self.data, "keys.json")), timeout)
                and wait_until(lambda: answers(self), timeout))

    def stop(self, name):
        process = self.processes.pop(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        return process.wait(timeout=15)

    def kill(self, name):
        """SIGKILL to the process started under `name`, by its pid; returns the pid."""
        process = self.processes.pop(name)
        process.kill()
        process.wait(timeout=15)
        return process.pid

    def stop_all(self, timeout=15):
        """SIGTERM to every process started here, then SIGKILL to any that has not exited in time."""
        processes = list(self.processes.items())
        self.processes.clear()
        for _, process in processes:
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + timeout
        for _, process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def bus_keys(self, name=FULL_KEY):
        """(public, secret) of the bus key pair derived from an access key, as the services derive
        it: the secret is HMAC-SHA256 of "nh-bus-client-v1\\n" + the key's name under the key, in Z85."""
        import zmq
        from zmq.utils import z85
        secret = z85.encode(hmac.new(self.keys()[name].encode(), f"nh-bus-client-v1\n{name}".encode(), hashlib.sha256).digest())
        return zmq.curve_public(secret), secret

    def bus_server_key(self):
        """The hub's bus public key, from the data folder."""
        with open(os.path.join(self.data, "bus.key")) as f:
            return json.load(f)["publicKey"].encode()

    def keys(self):
        return {k["name"]: k["key"] for k in json.load(open(os.path.join(self.data, "keys.json")))["keys"]}

    def token(self, name=FULL_KEY, resource=None, **kwargs):
        return sas_token(resource or f"{self.base}/hub", name, self.keys()[name], **kwargs)

    def connection_string(self, name=FULL_KEY):
        return f"Endpoint={self.base}/;SharedAccessKeyName={name};SharedAccessKey={self.keys()[name]}"


POSTGRES = os.environ.get("NH_TEST_POSTGRES")


def postgres_database(prefix):
    """A new database on the server NH_TEST_POSTGRES names (`make test` starts a throwaway one); its URL."""
    name = f"{prefix}_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    subprocess.run(["psql", POSTGRES, "-qc", f"CREATE DATABASE {name}"], check=True, capture_output=True)
    parts = urllib.parse.urlsplit(POSTGRES)
    return f"{parts.scheme}://{parts.netloc}/{name}" + (f"?{parts.query}" if parts.query else "")


def json_lines(path):
    """The objects of a file of JSON lines, such as an agent's output."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def health_row(output, service):
    """The row of `service` in what `nhctl --json health` printed; {} when there is none."""
    for line in output.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("service") == service:
            return row
    return {}


def agent_health(env, timeout=10):
    """What `nh-agent health` prints for the agent of `env` (the hub's and the agent's settings),
    as a dict; None when it does not answer in time or fails."""
    try:
        done = subprocess.run([os.path.join(BIN, "nh-agent"), "health"], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)


def dispatcher_sessions(hub):
    """How many agents the hub's dispatcher holds sessions with, as `nhctl health` says."""
    done = subprocess.run([os.path.join(BIN, "nhctl"), "--json", "health"], env=hub.env, capture_output=True, text=True, timeout=30)
    return int(health_row(done.stdout, "nh-dispatch").get("details", {}).get("agents", 0))


def stopped(pid):
    """Whether the process is stopped (SIGSTOP: state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


def wait_until(condition, timeout=20.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def answers(hub):
    """The gateway answers a request that needs no other service."""
    try:
        return requests.get(f"{hub.base}/hub/registrations?api-version=2015-01", timeout=2).status_code == 401
    except requests.RequestException:
        return False

