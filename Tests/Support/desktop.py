"""Simulated Linux desktops for the tests and the benchmark, made of real parts from Debian: an
Xvfb display, a private session bus (dbus-daemon) and a real notification server (dunst), each
started here and ended by its process id. A monitor on the bus (jeepney, BecomeMonitor) records
every call to and signal from org.freedesktop.Notifications, so a test reads the popups exactly as
the server was asked to show them.

    desktop = Desktop("device-1")   # display, bus and dunst
    env = desktop.env               # DISPLAY and DBUS_SESSION_BUS_ADDRESS for an agent
    desktop.popups()                # every Notify: its arguments and the id it got
    desktop.dunstctl("close")       # what a person's click does
    desktop.stop()
"""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

NOTIFICATIONS = "org.freedesktop.Notifications"
PACKAGES = {"Xvfb": "xvfb", "dbus-daemon": "dbus-daemon", "dunst": "dunst", "dunstctl": "dunst"}


def missing():
    """What cannot run here: the executables (and the Python library) a desktop needs."""
    absent = [f"{name} (Debian package {package})" for name, package in PACKAGES.items() if not shutil.which(name)]
    try:
        import jeepney  # noqa: F401
    except ImportError:
        absent.append("jeepney (PyPI)")
    return absent


BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""

# Popups stay until acted on, whatever the urgency, so a test decides when each goes; the context
# menu (dunstctl context) picks the Snooze button through a stand-in for dmenu.
DUNST_CONFIG = """[global]
    monitor = 0
    follow = none
    notification_limit = 20
    idle_threshold = 0
    sticky_history = yes
    history_length = 1000
    dmenu = {dmenu}
    mouse_left_click = close_current
    mouse_right_click = do_action
[urgency_low]
    timeout = 0
[urgency_normal]
    timeout = 0
[urgency_critical]
    timeout = 0
"""


def _free_display():
    for number in range(90, 400):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            return number
    raise RuntimeError("no free X display number")


class Monitor(threading.Thread):
    """Everything said to and by org.freedesktop.Notifications on one bus, in order."""

    def __init__(self, address):
        super().__init__(daemon=True)
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        self.connection = open_dbus_connection(bus=address)
        bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus.Monitoring")
        rules = [f"type='method_call',interface='{NOTIFICATIONS}'", f"type='signal',interface='{NOTIFICATIONS}'",
                 "type='method_return'", "type='error'"]
        self.connection.send_and_get_reply(new_method_call(bus, "BecomeMonitor", "asu", (rules, 0)))
        self.messages = []
        self.lock = threading.Lock()
        self.running = True
        self.start()

    def run(self):
        while self.running:
            try:
                message = self.connection.receive(timeout=0.2)
            except TimeoutError:
                continue
            except Exception:
                return
            header = message.header
            fields = {key.name: value for key, value in header.fields.items()}
            with self.lock:
                self.messages.append({
                    "type": header.message_type.name, "serial": header.serial, "sender": fields.get("sender"),
                    "destination": fields.get("destination"), "member": fields.get("member"),
                    "interface": fields.get("interface"), "reply_serial": fields.get("reply_serial"),
                    "body": message.body, "at": time.time()})

    def snapshot(self):
        with self.lock:
            return list(self.messages)

    def stop(self):
        self.running = False
        self.join(timeout=2)
        self.connection.close()


class Desktop:
    """One device's desktop: a display, a session bus, a notification server and a monitor."""

    def __init__(self, name, root=None):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"nh-desktop-{name}-", dir=root)
        self.processes = {}
        self.monitor = None
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        self.display = _free_display()
        self.start_process("xvfb", ["Xvfb", f":{self.display}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"])
        deadline = time.time() + 20
        while not os.path.exists(f"/tmp/.X11-unix/X{self.display}"):
            if time.time() > deadline:
                raise RuntimeError(f"Xvfb :{self.display} did not start")
            time.sleep(0.05)
        self.socket = os.path.join(self.dir, "bus")
        config = os.path.join(self.dir, "bus.conf")
        with open(config, "w") as f:
            f.write(BUS_CONFIG.format(path=self.socket))
        self.address = f"unix:path={self.socket}"
        self.bus_config = config
        self.env = {"DISPLAY": f":{self.display}", "DBUS_SESSION_BUS_ADDRESS": self.address}
        self.start_bus()
        self.dmenu = os.path.join(self.dir, "dmenu")
        with open(self.dmenu, "w") as f:
            f.write("#!/bin/sh\ngrep -m1 -i snooze\n")
        os.chmod(self.dmenu, 0o755)
        self.dunstrc = os.path.join(self.dir, "dunstrc")
        with open(self.dunstrc, "w") as f:
            f.write(DUNST_CONFIG.format(dmenu=self.dmenu))
        self.connect_monitor()
        self.start_dunst()

    def start_process(self, key, argv):
        log = open(os.path.join(self.dir, f"{key}.log"), "ab")
        env = {**{k: v for k, v in os.environ.items() if k not in ("DISPLAY", "DBUS_SESSION_BUS_ADDRESS")},
               **getattr(self, "env", {})}
        self.processes[key] = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        return self.processes[key]

    def start_bus(self):
        """Starts the session bus (dbus-daemon) at this desktop's address, and waits for it."""
        self.start_process("dbus", ["dbus-daemon", f"--config-file={self.bus_config}", "--nofork", "--nopidfile"])
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if time.time() > deadline:
                raise RuntimeError("dbus-daemon did not start")
            time.sleep(0.05)

    def restart_session(self):
        """Ends the session bus with its notification server, as when a person logs out, then starts
        both again (a new monitor with them); returns the new server's unique name."""
        self.monitor.stop()
        self.monitor = None
        for key in ("dunst", "dbus"):
            process = self.processes.pop(key)
            # SIGKILL reaches a server stopped with SIGSTOP too, which then shows nothing more.
            process.kill() if key == "dunst" else process.terminate()
            process.wait(timeout=10)
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.start_bus()
        self.connect_monitor()
        return self.start_dunst()

    def connect_monitor(self):
        deadline = time.time() + 20
        while self.monitor is None:
            try:
                self.monitor = Monitor(self.address)
            except ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def start_dunst(self):
        """Starts dunst and waits until it owns org.freedesktop.Notifications; returns its unique name."""
        self.start_process("dunst", ["dunst", "-config", self.dunstrc])
        deadline = time.time() + 20
        while time.time() < deadline:
            owner = self.owner()
            if owner:
                return owner
            time.sleep(0.05)
        raise RuntimeError("dunst did not take org.freedesktop.Notifications")

    def stop_dunst(self):
        process = self.processes.pop("dunst")
        process.terminate()
        process.wait(timeout=10)

    def pause_dunst(self):
        self.processes["dunst"].send_signal(signal.SIGSTOP)

    def resume_dunst(self):
        self.processes["dunst"].send_signal(signal.SIGCONT)

    def owner(self):
        """The unique name owning org.freedesktop.Notifications, or None."""
        result = subprocess.run(
            ["dbus-send", f"--bus={self.address}", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
             "org.freedesktop.DBus.GetNameOwner", f"string:{NOTIFICATIONS}"], capture_output=True, text=True, timeout=10)
        if result.returncode != 0:
            return None
        return result.stdout.strip().split('"')[1]

    def dunstctl(self, *arguments):
        result = subprocess.run(["dunstctl", *arguments], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=10)
        return result.stdout.strip()

    def notify(self, summary, body=""):
        """A popup from another program, on a connection of its own; the id the server gave it."""
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        server = DBusAddress("/org/freedesktop/Notifications", bus_name=NOTIFICATIONS, interface=NOTIFICATIONS)
        with open_dbus_connection(bus=self.address) as connection:
            reply = connection.send_and_get_reply(
                new_method_call(server, "Notify", "susssasa{sv}i", ("other-app", 0, "", summary, body, [], {}, 0)), timeout=10)
        return reply.body[0]

    def displayed(self):
        """How many popups dunst shows now."""
        return int(self.dunstctl("count", "displayed") or 0)

    def popups(self):
        """Every Notify call, in order: app_name, replaces_id, icon, summary, body, actions (a dict),
        hints, expire_timeout, when it was called and answered, and the id the server answered with
        (None while unanswered)."""
        messages = self.monitor.snapshot()
        replies = {(m["destination"], m["reply_serial"]): m for m in messages if m["type"] in ("method_return", "error")}
        popups = []
        for m in messages:
            if m["type"] != "method_call" or m["member"] != "Notify":
                continue
            app, replaces, icon, summary, body, actions, hints, timeout = m["body"]
            reply = replies.get((m["sender"], m["serial"]))
            popups.append({
                "app": app, "replaces": replaces, "icon": icon, "summary": summary, "body": body,
                "actions": dict(zip(actions[::2], actions[1::2])), "hints": {k: v[1] for k, v in hints.items()},
                "timeout": timeout, "sender": m["sender"], "at": m["at"], "answered": reply["at"] if reply else None,
                "id": reply["body"][0] if reply and reply["type"] == "method_return" else None})
        return popups

    def calls(self, member):
        """The bodies of every call of `member`, such as CloseNotification, in order."""
        return [m["body"] for m in self.monitor.snapshot() if m["type"] == "method_call" and m["member"] == member]

    def signals(self, member):
        """(body, time) of every signal `member`, such as NotificationClosed."""
        return [(m["body"], m["at"]) for m in self.monitor.snapshot() if m["type"] == "signal" and m["member"] == member]

    def stop(self):
        if self.monitor:
            self.monitor.stop()
        for key in ["dunst", "dbus", "xvfb"]:
            process = self.processes.pop(key, None)
            if process is None:
                continue
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
