"""UnifiedPush apps for the tests and the benchmark: a private session bus (dbus-daemon from
Debian, with a folder of .service files for D-Bus activation) and app connectors on it
(upconnector.py), each started here and ended by its process id.

    bus = SessionBus()                       # dbus-daemon at a private address
    app = bus.app("org.example.Chat")        # a connector process, not registered yet
    app.register("token-1", vapid=key)       # Register; the endpoint comes by NewEndpoint
    app.wait_for("NewEndpoint")["endpoint"]
    bus.activatable("org.example.Later")     # started by the bus when a call comes for it
    bus.stop()
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import desktop

HERE = os.path.dirname(os.path.abspath(__file__))
CONNECTOR = os.path.join(HERE, "upconnector.py")
# The second D-Bus stack: GLib's GDBus, as GTK and GNOME apps use it, on Debian's own Python.
GDBUS_PYTHON = "/usr/bin/python3"
GDBUS_CONNECTOR = os.path.join(HERE, "gdbusconnector.py")


def connector(stack):
    """The command that runs a connector of this D-Bus stack: "jeepney" or "gdbus"."""
    return [GDBUS_PYTHON, GDBUS_CONNECTOR] if stack == "gdbus" else [sys.executable, CONNECTOR]


def gdbus_missing():
    """Why the GDBus connector cannot run here, or None."""
    try:
        subprocess.run([GDBUS_PYTHON, "-c", "from gi.repository import Gio, GLib"], check=True, capture_output=True, timeout=30)
        return None
    except (OSError, subprocess.SubprocessError):
        return "python3-gi (Debian package python3-gi) for Debian's /usr/bin/python3"

# The desktops' bus, with a folder of .service files for D-Bus activation.
BUS_CONFIG = desktop.BUS_CONFIG.replace("<auth>EXTERNAL</auth>", "<auth>EXTERNAL</auth>\n  <servicedir>{services}</servicedir>")


def missing():
    absent = [] if shutil.which("dbus-daemon") else ["dbus-daemon (Debian package dbus-daemon)"]
    for module, package in [("jeepney", "jeepney"), ("pywebpush", "pywebpush"), ("http_ece", "http-ece")]:
        try:
            __import__(module)
        except ImportError:
            absent.append(f"{package} (PyPI)")
    return absent


def read_events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


class SessionBus:
    def __init__(self, root=None):
        self.dir = tempfile.mkdtemp(prefix="nh-up-bus-", dir=root)
        self.services = os.path.join(self.dir, "services")
        os.makedirs(self.services)
        self.socket = os.path.join(self.dir, "bus")
        self.config = os.path.join(self.dir, "bus.conf")
        with open(self.config, "w") as f:
            f.write(BUS_CONFIG.format(path=self.socket, services=self.services))
        self.address = f"unix:path={self.socket}"
        self.env = {"DBUS_SESSION_BUS_ADDRESS": self.address}
        self.apps = []
        self.process = None
        self.start()

    def start(self):
        log = open(os.path.join(self.dir, "dbus.log"), "ab")
        self.process = subprocess.Popen(["dbus-daemon", f"--config-file={self.config}", "--nofork", "--nopidfile"],
                                        stdout=log, stderr=log)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if time.time() > deadline:
                raise RuntimeError("dbus-daemon did not start")
            time.sleep(0.05)

    def app(self, service, v1=False, out=None, stack="jeepney"):
        """An app whose connector runs now (not registered yet), written with `stack`'s D-Bus library."""
        app = App(self, service, v1=v1, out=out, stack=stack)
        app.start()
        self.apps.append(app)
        return app

    def activatable(self, service, v1=False, exit_idle=2.0, stack="jeepney"):
        """An app that is not running; the bus starts its connector when a call comes for it."""
        app = App(self, service, v1=v1, stack=stack)
        argv = [*connector(stack), "--service", service, "--out", app.out, "--exit-idle", str(exit_idle)]
        if v1:
            argv.append("--v1")
        with open(os.path.join(self.services, f"{service}.service"), "w") as f:
            f.write(f"[D-BUS Service]\nName={service}\nExec={' '.join(argv)}\n")
        self.apps.append(app)
        return app

    def stop(self):
        for app in self.apps:
            app.stop()
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class App:
    def __init__(self, bus, service, v1=False, out=None, stack="jeepney"):
        assert not (v1 and stack == "gdbus"), "the GDBus connector speaks Connector2"
        self.stack = stack
        self.bus = bus
        self.service = service
        self.v1 = v1
        self.out = out or os.path.join(bus.dir, f"{service}.jsonl")
        self.process = None
        self.helpers = []

    def _run(self, *extra, background=True):
        argv = [*connector(self.stack), "--service", self.service, "--out", self.out, *extra]
        if self.v1:
            argv.append("--v1")
        env = {**os.environ, **self.bus.env}
        log = open(os.path.join(self.bus.dir, f"{self.service}.log"), "ab")
        return subprocess.Popen(argv, env=env, stdout=log, stderr=log)

    def start(self):
        """Runs the connector (its name owned, serving calls) until stop()."""
        self.process = self._run()
        deadline = time.time() + 20
        while not any(e["event"] == "ready" and e["pid"] == self.process.pid for e in self.events()):
            if time.time() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"connector {self.service} did not start")
            time.sleep(0.05)

    def register(self, token, vapid=None, description=None):
        """Calls Register from a second connection of the app (the running connector receives
        NewEndpoint); returns the answer's fields."""
        extra = ["--register", token]
        if vapid:
            extra += ["--vapid", vapid]
        if description:
            extra += ["--description", description]
        return self._answer(extra)

    def register_raw(self, fields):
        """Register with these a{sv} fields as given, {name: [signature, value]} (GDBus's connector)."""
        assert self.stack == "gdbus"
        return self._answer(["--raw", json.dumps(fields)])

    def _answer(self, extra):
        before = len([e for e in self.events() if e["event"] == "registered"])
        helper = self._run_helper([*extra, "--exit-after-register", "--distributor", "org.unifiedpush.Distributor.nh"])
        helper.wait(timeout=60)
        answers = [e for e in self.events() if e["event"] == "registered"]
        assert len(answers) > before, f"no answer to Register for {self.service}"
        return answers[-1]

    def unregister(self, token):
        helper = self._run_helper(["--unregister", token, "--exit-idle", "1"])
        helper.wait(timeout=60)

    def _run_helper(self, extra):
        # A helper owns no name: a second connection of the app, as a library's would be.
        argv = [*connector(self.stack), "--service", f"{self.service}.Helper{len(self.helpers)}", "--app", self.service,
                "--out", self.out, *extra]
        if self.v1:
            argv.append("--v1")
        log = open(os.path.join(self.bus.dir, f"{self.service}.log"), "ab")
        helper = subprocess.Popen(argv, env={**os.environ, **self.bus.env}, stdout=log, stderr=log)
        self.helpers.append(helper)
        return helper

    def events(self, name=None):
        return [e for e in read_events(self.out) if name is None or e["event"] == name]

    def messages(self):
        return [base64.b64decode(e["message"]) for e in self.events("Message")]

    def wait_for(self, name, count=1, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.events(name)
            if len(found) >= count:
                return found[count - 1]
            time.sleep(0.05)
        raise AssertionError(f"{self.service}: no {count}× {name} in {timeout} s; events: {self.events()[-5:]}")

    def stop(self):
        for process in [self.process, *self.helpers]:
            if process and process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.process = None
