"""Simulated Linux desktops for the tests and the benchmark, made of real parts from Debian: an
Xvfb display, a private session bus (dbus-daemon) and a real notification server (dunst by default;
xfce4-notifyd, notification-daemon, MATE's or GNOME Shell on request), each started here and ended
by its process id. GNOME Shell runs as the display's window manager and compositor (X11, software
GL), with a private system bus of its own too. A monitor on the bus (jeepney, BecomeMonitor)
records every call to and signal from org.freedesktop.Notifications, so a test reads the popups
exactly as the server was asked to show them.

    desktop = Desktop("device-1")   # display, bus and dunst
    env = desktop.env               # DISPLAY and DBUS_SESSION_BUS_ADDRESS for an agent
    desktop.popups()                # every Notify: its arguments and the id it got
    desktop.dunstctl("close")       # what a person's click does
    desktop.stop()

    desktop = Desktop("device-1", server="notification-daemon")
    desktop.popup_windows()         # the popups on the screen (X windows), top to bottom
    desktop.click_close()           # a person's pointer on the popup's × (or where that server closes)
    desktop.click_default()         # ... on the popup itself, or the button of the default action
    desktop.click_action("Snooze")  # ... on an action's button

A person's clicks are real pointer events (xdotool) at places found on a screenshot of the popup
(ImageMagick's import); what each server does with them, and what it reports, is in SERVERS.
GNOME Shell draws its banners inside its own stage, not as windows of their own: there a popup's
"window" is the banner's box on a screenshot of the whole screen.

    desktop = Desktop("device-1", server="gnome-shell")
    desktop.rest()                  # the person idle, so that the next banner waits for them
    desktop.restart_server()        # the shell killed by its pid and started again
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

NOTIFICATIONS = "org.freedesktop.Notifications"
PACKAGES = {"Xvfb": "xvfb", "dbus-daemon": "dbus-daemon", "dunst": "dunst", "dunstctl": "dunst"}
POINTER_PACKAGES = {"xdotool": "xdotool", "import": "imagemagick"}

# What each notification server is, as Debian ships it, and what a person's pointer does there.
#   executable  what is started (dunst: its options are added), from package
#   service     the package's D-Bus activation file: the server is started through the bus with a
#               copy of it, so that the bus starts it again after it quits on its own (MATE's does
#               after 30 s without a popup)
#   window      the X class of its popup windows (one window per popup, but dunst's one for all;
#               None: GNOME Shell's banners are drawn in its own stage)
#   close       where a person closes a popup: "corner" (the × at the top right), "body" (a click
#               on the popup: xfce4-notifyd has no ×), "dunst" (a left click, per DUNST_CONFIG) or
#               "banner" (the × GNOME Shell shows at the banner's top right under the pointer)
#   close_reason  the NotificationClosed reason that close sends (MATE's × says 1, expired)
#   default     how a person takes the default action: "body" (a click on the popup, which sends
#               ActionInvoked "default" even for a popup without one), "button" (xfce4-notifyd
#               shows "default" as a button with its label), "dunst" (a right click, do_action) or
#               "banner" (a click on GNOME Shell's banner, above its title)
#   buttons_skip  actions with no button of their own
#   expire_default  what expire_timeout -1 means there, in ms (dunst: 0, per DUNST_CONFIG; None:
#               never closed by a timer)
#   requires    the executables it needs, with their packages, where they are more than `executable`
#   helper      (GNOME Shell) the activation file of the process that owns org.freedesktop.Notifications
#               for the shell: the shell has the bus start it
#   inner       names the server calls on the same interface itself (GNOME Shell's helper passes every
#               call on to the shell, org.gnome.Shell, at its unique name): not a client's calls
#
# GNOME Shell 43 shows one banner at a time, at the top centre of the screen below its top bar, and
# queues the rest. A banner shown while the person is idle stays until they are active; then it
# goes 2 to 4 s later unless the pointer rests on it, and its notification stays in the shell's list
# without a NotificationClosed. The pointer on a banner expands it: its × (top right) and its action
# buttons (every action but "default", side by side across its bottom) appear. A click on the × closes
# it (reason 2); a click on the banner sends ActionInvoked "default" (where the popup has that action)
# and closes it with reason 2, as a button does after its ActionInvoked. The helper forwards each
# signal to the program whose popup it is (the shell itself broadcasts them too, from its own name).
SERVERS = {
    "dunst": {"executable": "dunst", "package": "dunst", "window": "Dunst", "close": "dunst", "close_reason": 2,
              "default": "dunst", "buttons_skip": None, "expire_default": 0},
    "xfce4-notifyd": {"executable": "/usr/lib/x86_64-linux-gnu/xfce4/notifyd/xfce4-notifyd", "package": "xfce4-notifyd",
                      "service": "/usr/share/dbus-1/services/org.xfce.xfce4-notifyd.Notifications.service",
                      "window": "xfce4-notifyd", "close": "body", "close_reason": 2, "default": "button", "buttons_skip": (),
                      "expire_default": 10000},
    "notification-daemon": {"executable": "/usr/lib/notification-daemon/notification-daemon", "package": "notification-daemon",
                            "window": "notification-daemon", "close": "corner", "close_reason": 2, "default": "body",
                            "buttons_skip": ("default",), "expire_default": 5000},
    "mate": {"executable": "/usr/lib/mate-notification-daemon/mate-notification-daemon", "package": "mate-notification-daemon",
             "service": "/usr/share/dbus-1/services/org.freedesktop.mate.Notifications.service",
             "window": "mate-notification-daemon", "close": "corner", "close_reason": 1, "default": "body",
             "buttons_skip": ("default",), "expire_default": 7000},
    "gnome-shell": {"executable": "gnome-shell", "package": "gnome-shell", "requires": {"gnome-shell": "gnome-shell", "gjs": "gjs"},
                    "helper": "/usr/share/dbus-1/services/org.gnome.Shell.Notifications.service", "inner": ("org.gnome.Shell",),
                    "window": None, "close": "banner", "close_reason": 2, "default": "banner", "buttons_skip": ("default",),
                    "expire_default": None},
}


def missing(server="dunst", pointer=False):
    """What cannot run here: the executables (and the Python library) a desktop with this server
    needs; with pointer, those a person's clicks need too (xdotool, ImageMagick)."""
    if server not in SERVERS:
        raise ValueError(f"unknown notification server {server!r}: one of {', '.join(SERVERS)}")
    needed = {name: package for name, package in PACKAGES.items() if server == "dunst" or not name.startswith("dunst")}
    if server != "dunst":
        spec = SERVERS[server]
        needed.update(spec.get("requires") or {_executable(spec): spec["package"]})
    if pointer:
        needed.update(POINTER_PACKAGES)
    absent = [f"{name} (Debian package {package})" for name, package in needed.items()
              if not (shutil.which(name) if "/" not in name else os.access(name, os.X_OK))]
    try:
        import jeepney  # noqa: F401
    except ImportError:
        absent.append("jeepney (PyPI)")
    return absent


def _executable(spec):
    """The server's executable: the Exec= of the package's activation file where it has one (the
    folder under /usr/lib differs between architectures), else the one in SERVERS."""
    try:
        with open(spec["service"]) as f:
            return next(line.split("=", 1)[1].strip() for line in f if line.startswith("Exec="))
    except (KeyError, OSError, StopIteration):
        return spec["executable"]


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

SCREEN = (1024, 768)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# dunst's configuration as the Debian package installs it (popups time out, no limit on screen).
DEBIAN_DUNSTRC = "/etc/xdg/dunst/dunstrc"

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


# GNOME Shell's settings (GSettings' keyfile backend, in the session's own folder): a plain wallpaper of
# one colour, so that a banner is told from it on a screenshot by its red channel (the wallpaper's,
# and its shadow's on it, stay near 0), and no animations, so that a banner is where it will stay as
# soon as it is drawn.
GNOME_WALLPAPER = (2, 60, 136)
GNOME_SETTINGS = """[org/gnome/desktop/background]
picture-uri=''
picture-uri-dark=''
picture-options='none'
primary-color='#{:02x}{:02x}{:02x}'
color-shading-type='solid'

[org/gnome/desktop/interface]
enable-animations=false
""".format(*GNOME_WALLPAPER)
# How long the person must have left pointer and keyboard alone for GNOME Shell to count them idle
# (its IDLE_TIME is 1 s), with a margin: a banner shown then waits for them.
GNOME_IDLE = 1.3


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

    def __init__(self, name, root=None, server="dunst", dunst_config=None):
        """server: one of SERVERS; dunst_config: a dunstrc to use instead of DUNST_CONFIG."""
        if server not in SERVERS:
            raise ValueError(f"unknown notification server {server!r}: one of {', '.join(SERVERS)}")
        self.name = name
        self.server = server
        self.spec = SERVERS[server]
        self.dunst_config = dunst_config
        self.dir = tempfile.mkdtemp(prefix=f"nh-desktop-{name}-", dir=root)
        self.processes = {}
        self.activated = {}  # the servers the bus started: process id -> its start time
        self.monitor = None
        self.last_input = 0.0  # when the pointer or keyboard was last used here (time.time())
        self.inner = set()  # the unique names of the spec's "inner" names, as each server started had them
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        self.display = _free_display()
        self.start_process("xvfb", ["Xvfb", f":{self.display}", "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"])
        deadline = time.time() + 20
        while not os.path.exists(f"/tmp/.X11-unix/X{self.display}"):
            if time.time() > deadline:
                raise RuntimeError(f"Xvfb :{self.display} did not start")
            time.sleep(0.05)
        self.socket = os.path.join(self.dir, "bus")
        self.services = os.path.join(self.dir, "services")
        os.makedirs(self.services)
        config = os.path.join(self.dir, "bus.conf")
        with open(config, "w") as f:
            f.write(BUS_CONFIG.replace("<auth>EXTERNAL</auth>", "<auth>EXTERNAL</auth>\n  <servicedir>{services}</servicedir>")
                    .format(path=self.socket, services=self.services))
        self.address = f"unix:path={self.socket}"
        self.bus_config = config
        self.env = {"DISPLAY": f":{self.display}", "DBUS_SESSION_BUS_ADDRESS": self.address}
        # The session's own folders, so that no server reads or writes the user's settings; GTK
        # without the accessibility bus; GSettings in memory (MATE's settings are its defaults).
        self.session_env = {"NO_AT_BRIDGE": "1", "GSETTINGS_BACKEND": "memory"}
        for key, folder in [("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"), ("XDG_DATA_HOME", "data"),
                            ("XDG_RUNTIME_DIR", "runtime")]:
            self.session_env[key] = os.path.join(self.dir, folder)
            os.makedirs(self.session_env[key], mode=0o700)
        self._install_icon()
        if self.server == "gnome-shell":
            self._prepare_gnome()
        self.start_bus()
        self.dmenu = os.path.join(self.dir, "dmenu")
        with open(self.dmenu, "w") as f:
            f.write("#!/bin/sh\ngrep -m1 -i snooze\n")
        os.chmod(self.dmenu, 0o755)
        self.dunstrc = self.dunst_config or os.path.join(self.dir, "dunstrc")
        if not self.dunst_config:
            with open(self.dunstrc, "w") as f:
                f.write(DUNST_CONFIG.format(dmenu=self.dmenu))
        self.connect_monitor()
        self.start_server()

    def _install_icon(self):
        """The agent's icon where `make install` puts it (hicolor), in this session's data folder,
        so that a server finds the app_icon "nh-agent" by name."""
        icon = os.path.join(ROOT, "deploy", "desktop", "nh-agent.svg")
        if os.path.exists(icon):
            folder = os.path.join(self.session_env["XDG_DATA_HOME"], "icons", "hicolor", "scalable", "apps")
            os.makedirs(folder)
            shutil.copy(icon, folder)

    def _prepare_gnome(self):
        """What GNOME Shell needs besides the display and the session bus: a home and settings of its
        own (GNOME_SETTINGS), the activation file of its notification helper on the session bus, and
        an empty system bus (its services, such as logind, accounts or NetworkManager, are simply
        absent there, as the shell allows)."""
        home = os.path.join(self.dir, "home")
        os.makedirs(home, mode=0o700)
        settings = os.path.join(self.session_env["XDG_CONFIG_HOME"], "glib-2.0", "settings")
        os.makedirs(settings)
        with open(os.path.join(settings, "keyfile"), "w") as f:
            f.write(GNOME_SETTINGS)
        shutil.copy(self.spec["helper"], self.services)
        self.system_socket = os.path.join(self.dir, "system-bus")
        config = os.path.join(self.dir, "system-bus.conf")
        with open(config, "w") as f:
            f.write(BUS_CONFIG.replace("<type>session</type>", "<type>system</type>").format(path=self.system_socket))
        self.session_env.update({
            "HOME": home, "GSETTINGS_BACKEND": "keyfile", "XDG_SESSION_TYPE": "x11", "XDG_CURRENT_DESKTOP": "GNOME",
            "LIBGL_ALWAYS_SOFTWARE": "1", "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={self.system_socket}"})
        self.start_process("system-dbus", ["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile"])
        deadline = time.time() + 20
        while not os.path.exists(self.system_socket):
            if time.time() > deadline:
                raise RuntimeError("the system bus (dbus-daemon) did not start")
            time.sleep(0.05)

    def start_process(self, key, argv):
        log = open(os.path.join(self.dir, f"{key}.log"), "ab")
        outside = ("DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "WAYLAND_DISPLAY", "SESSION_MANAGER")
        env = {**{k: v for k, v in os.environ.items() if k not in outside},
               **getattr(self, "session_env", {}), **getattr(self, "env", {})}
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
        # SIGKILL reaches a server stopped with SIGSTOP too, which then shows nothing more.
        self.stop_server(kill=True)
        process = self.processes.pop("dbus")
        process.terminate()
        process.wait(timeout=10)
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.start_bus()
        self.connect_monitor()
        return self.start_server()

    def connect_monitor(self):
        deadline = time.time() + 20
        while self.monitor is None:
            try:
                self.monitor = Monitor(self.address)
            except ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def start_server(self):
        """Starts the notification server and waits until it owns org.freedesktop.Notifications;
        returns its unique name. A server with an activation file is started through the bus (and
        the bus starts it again whenever it is called while the server is gone)."""
        log_start = 0
        if self.server == "dunst":
            self.start_process("server", ["dunst", "-config", self.dunstrc])
        elif self.server == "gnome-shell":
            # The window manager and compositor of the display; it has the bus start its helper.
            log = os.path.join(self.dir, "server.log")
            log_start = os.path.getsize(log) if os.path.exists(log) else 0
            self.start_process("server", ["gnome-shell", "--x11", "--replace", "--sm-disable"])
        elif self.spec.get("service"):
            with open(self.spec["service"]) as f:
                text = f.read()
            # The package's own file, without the systemd unit this private bus has no way to start.
            text = "".join(line for line in text.splitlines(True) if not line.startswith("SystemdService="))
            with open(os.path.join(self.services, os.path.basename(self.spec["service"])), "w") as f:
                f.write(text)
            self._bus_call("ReloadConfig")
            self._bus_call("StartServiceByName", "su", (NOTIFICATIONS, 0))
        else:
            self.start_process("server", [_executable(self.spec)])
        deadline = time.time() + 20
        while time.time() < deadline:
            owner = self.owner()
            if owner:
                if "server" not in self.processes or self.spec.get("helper"):
                    self.server_pid()
                if self.server == "gnome-shell":
                    self._gnome_ready(log_start, time.time() + 60)
                for name in self.spec.get("inner", ()):
                    self.inner.add(self._bus_call("GetNameOwner", "s", (name,))[0])
                return owner
            process = self.processes.get("server")
            if process is not None and process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.server} did not take {NOTIFICATIONS}")

    def restart_server(self):
        """Kills the notification server by its process id (GNOME Shell: the shell, whose helper
        then quits) and starts it again on the same display and bus; returns the new owner's unique
        name."""
        self.stop_server(kill=True)
        return self.start_server()

    def _gnome_ready(self, log_start, deadline):
        """Waits until GNOME Shell is ready for a person: its helper answers (it owns the name
        before it has exported its object), the shell says it has started, the person has left the
        overview it starts in (Escape), and the banners it shows at its start ("Logged in as a
        privileged user" when run as root, "Screen Lock disabled" in a new home) have gone: the
        pointer moves in the bottom left corner until no banner has been up for 1.5 s."""
        while True:
            try:
                self.call("GetServerInformation")
                break
            except RuntimeError:
                pass  # org.freedesktop.DBus.Error.UnknownMethod: not exported yet
            if time.time() > deadline:
                raise RuntimeError("GNOME Shell's notification helper does not answer")
            time.sleep(0.05)
        log = os.path.join(self.dir, "server.log")
        while True:
            with open(log, "rb") as f:
                f.seek(log_start)
                if b"GNOME Shell started at" in f.read():
                    break
            if self.processes["server"].poll() is not None or time.time() > deadline:
                raise RuntimeError(f"GNOME Shell did not start (see {log})")
            time.sleep(0.1)
        quiet_since = None
        corner = 0
        while True:
            image = self._screen()
            if not image.desktop():
                quiet_since = None
                self.key("Escape")
            elif image.banner() is not None:
                quiet_since = None
                corner = 1 - corner
                self.point(2 + 6 * corner, SCREEN[1] - 2 - 6 * corner)
            elif quiet_since is None:
                quiet_since = time.time()
            elif time.time() - quiet_since >= 1.5:
                break
            if time.time() > deadline:
                path = self.screenshot(os.path.join(self.dir, f"not-ready-{int(time.time() * 1000)}.png"))
                raise RuntimeError(f"GNOME Shell is not ready for a person (see {path})")
            time.sleep(0.25)
        self.move_away()

    def server_pid(self):
        """The process id of the server that owns org.freedesktop.Notifications now (GNOME Shell:
        its helper), or None."""
        try:
            pid = self._bus_call("GetConnectionUnixProcessID", "s", (NOTIFICATIONS,))[0]
        except Exception:
            return None
        if ("server" not in self.processes or self.spec.get("helper")) and pid not in self.activated:
            self.activated[pid] = _started(pid)
        return pid

    def _bus_call(self, member, signature=None, body=()):
        from jeepney import DBusAddress, MessageType, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
        with open_dbus_connection(bus=self.address) as connection:
            reply = connection.send_and_get_reply(new_method_call(bus, member, signature, body), timeout=10)
        if reply.header.message_type == MessageType.error:
            raise RuntimeError(f"{member}: {reply.body}")
        return reply.body

    def _server_pids(self):
        """The server processes of this desktop that run: the one started here, or those the bus
        started (each asked for by its process id, and known by its start time too, so that an id
        taken again by another process is left alone)."""
        pids = []
        process = self.processes.get("server")
        if process is not None and process.poll() is None:
            pids.append(process.pid)
        if "server" not in self.processes:
            self.server_pid()
        pids += [pid for pid, started in self.activated.items() if _alive(pid, started)]
        return pids

    def stop_server(self, kill=False):
        """Ends the notification server (SIGTERM, or SIGKILL with kill) and waits until it is gone;
        a server started through the bus is removed from it first, so that the bus does not start
        it again."""
        if self.spec.get("service"):
            if "server" not in self.processes and "dbus" in self.processes:
                self.server_pid()  # the one the bus started last
            path = os.path.join(getattr(self, "services", self.dir), os.path.basename(self.spec["service"]))
            if os.path.exists(path):
                os.unlink(path)
                try:
                    self._bus_call("ReloadConfig")
                except Exception:
                    pass
        process = self.processes.pop("server", None)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill() if kill else process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self.spec.get("helper"):
            # GNOME Shell's helper quits on its own once the shell has left the bus.
            deadline = time.time() + 5
            while any(_alive(pid, started) for pid, started in self.activated.items()) and time.time() < deadline:
                time.sleep(0.05)
        for pid, started in list(self.activated.items()):
            if _alive(pid, started):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
                deadline = time.time() + 10
                while _alive(pid, started) and time.time() < deadline:
                    time.sleep(0.05)
                if _alive(pid, started):
                    os.kill(pid, signal.SIGKILL)
            del self.activated[pid]

    def pause_server(self):
        for pid in self._server_pids():
            os.kill(pid, signal.SIGSTOP)

    def resume_server(self):
        for pid in self._server_pids():
            os.kill(pid, signal.SIGCONT)

    # The names the dunst tests know.
    def start_dunst(self):
        """Starts dunst and waits until it owns org.freedesktop.Notifications; returns its unique name."""
        return self.start_server()

    def stop_dunst(self):
        self.stop_server()

    def pause_dunst(self):
        self.pause_server()

    def resume_dunst(self):
        self.resume_server()

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

    def call(self, member, signature=None, body=()):
        """A call to the notification server, on a connection of its own; the reply's body (an
        error raises RuntimeError with the error's name and text)."""
        from jeepney import DBusAddress, MessageType, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        server = DBusAddress("/org/freedesktop/Notifications", bus_name=NOTIFICATIONS, interface=NOTIFICATIONS)
        with open_dbus_connection(bus=self.address) as connection:
            reply = connection.send_and_get_reply(new_method_call(server, member, signature, body), timeout=10)
        if reply.header.message_type == MessageType.error:
            from jeepney import HeaderFields
            raise RuntimeError(f"{reply.header.fields.get(HeaderFields.error_name)}: {reply.body}")
        return reply.body

    def notify(self, summary, body="", actions=(), timeout=0, replaces=0, icon="", hints=None, app="other-app"):
        """A popup from another program, on a connection of its own; the id the server gave it.
        actions is a flat list (key, label, ...), hints a dict of jeepney variants ("b", True)."""
        return self.call("Notify", "susssasa{sv}i", (app, replaces, icon, summary, body, list(actions), hints or {}, timeout))[0]

    def close(self, popup_id):
        """CloseNotification, as another program calls it."""
        return self.call("CloseNotification", "u", (popup_id,))

    def displayed(self):
        """How many popups the server shows now (dunst: as dunstctl counts them; the others: their
        windows on the screen)."""
        if self.server == "dunst":
            return int(self.dunstctl("count", "displayed") or 0)
        return len(self.popup_windows())

    def popups(self):
        """Every Notify call, in order: app_name, replaces_id, icon, summary, body, actions (a dict),
        hints, expire_timeout, when it was called and answered, and the id the server answered with
        (None while unanswered) and the unique name it answered from (server)."""
        messages = self.monitor.snapshot()
        replies = {(m["destination"], m["reply_serial"]): m for m in messages if m["type"] in ("method_return", "error")}
        popups = []
        for m in messages:
            if m["type"] != "method_call" or m["member"] != "Notify" or m["destination"] in self.inner:
                continue
            app, replaces, icon, summary, body, actions, hints, timeout = m["body"]
            reply = replies.get((m["sender"], m["serial"]))
            popups.append({
                "app": app, "replaces": replaces, "icon": icon, "summary": summary, "body": body,
                "actions": dict(zip(actions[::2], actions[1::2])), "hints": {k: v[1] for k, v in hints.items()},
                "timeout": timeout, "sender": m["sender"], "at": m["at"], "answered": reply["at"] if reply else None,
                "id": reply["body"][0] if reply and reply["type"] == "method_return" else None,
                "server": reply["sender"] if reply else None})
        return popups

    def calls(self, member):
        """The bodies of every call of `member`, such as CloseNotification, in order."""
        return [m["body"] for m in self.monitor.snapshot()
                if m["type"] == "method_call" and m["member"] == member and m["destination"] not in self.inner]

    def signals(self, member, sender=None):
        """(body, time) of every signal `member`, such as NotificationClosed; with sender, only
        those from that unique name (GNOME Shell sends each twice: from the shell to everyone, and
        from its helper to the program whose popup it is)."""
        return [(m["body"], m["at"]) for m in self.monitor.snapshot()
                if m["type"] == "signal" and m["member"] == member and sender in (None, m["sender"])]

    def open_popups(self):
        """The popups the server has not reported closed, by the monitor: the last Notify of each id,
        in the order the ids were first given."""
        closed = {body[0] for body, _ in self.signals("NotificationClosed")}
        latest = {}
        for popup in self.popups():
            if popup["id"] is not None:
                latest[popup["id"]] = popup
        return [p for i, p in latest.items() if i not in closed]

    # A person's pointer.

    def xdotool(self, *arguments, check=True):
        result = subprocess.run(["xdotool", *map(str, arguments)], env={**os.environ, **self.env}, capture_output=True,
                                text=True, timeout=10)
        if check and result.returncode != 0:
            raise RuntimeError(f"xdotool {' '.join(map(str, arguments))}: {result.stderr.strip()}")
        return result.stdout

    def popup_windows(self):
        """The popups on the screen now: their X windows (id, x, y, width, height), top to bottom.
        dunst draws all its popups in one window; GNOME Shell's banner (one at most) is no window of
        its own, but its box on a screenshot, with id 0."""
        if self.spec["window"] is None:
            banner = self._screen().banner()
            return [banner] if banner else []
        found = self.xdotool("search", "--onlyvisible", "--class", f"^{self.spec['window']}$", check=False).split()
        windows = []
        for window in found:
            shell = self.xdotool("getwindowgeometry", "--shell", window, check=False)
            values = dict(line.split("=", 1) for line in shell.split() if "=" in line)
            if not all(key in values for key in ("X", "Y", "WIDTH", "HEIGHT")):
                continue  # gone meanwhile
            geometry = {"id": int(window), "x": int(values["X"]), "y": int(values["Y"]),
                        "width": int(values["WIDTH"]), "height": int(values["HEIGHT"])}
            if geometry["width"] > 1 and geometry["height"] > 1:
                windows.append(geometry)
        return sorted(windows, key=lambda w: (w["y"], w["x"]))

    def popup_window(self, which=None, timeout=10):
        """The window of one popup: which is None (the only one on the screen), an index into
        popup_windows(), or a summary. A summary is matched through the monitor: the popups still
        open, in the order their ids were given, against the windows in the order they were made
        (a server makes one window per popup, and its X ids grow); one window alone is taken when
        an open popup has that summary. Waits until the window is there."""
        deadline = time.time() + timeout
        while True:
            windows = self.popup_windows()
            chosen = self._choose(windows, which)
            if chosen is not None:
                return chosen
            if time.time() > deadline:
                raise LookupError(f"{self.name} ({self.server}): no popup window for {which!r} among {windows}; "
                                  f"open: {[p['summary'] for p in self.open_popups()]}")
            time.sleep(0.1)

    def _choose(self, windows, which):
        if not windows:
            return None
        if which is None:
            return windows[0] if len(windows) == 1 else None
        if isinstance(which, int):
            return windows[which] if -len(windows) <= which < len(windows) else None
        open_popups = self.open_popups()
        if not any(p["summary"] == which for p in open_popups):
            return None
        if len(windows) == 1:
            return windows[0]
        made = sorted(windows, key=lambda w: w["id"])
        if len(made) != len(open_popups):
            return None
        return made[[p["summary"] for p in open_popups].index(which)]

    def _popup_for(self, which):
        """The Notify record of the popup `which` names (a summary), or the newest still open."""
        open_popups = self.open_popups()
        if isinstance(which, str):
            matches = [p for p in open_popups if p["summary"] == which]
        else:
            matches = open_popups
        return matches[-1] if matches else None

    def screenshot(self, path, window=None):
        """The screen, or one window of it, as an image file (PNG by its name)."""
        argv = ["import", "-window", "root"]
        if window is not None:
            argv += ["-crop", f"{window['width']}x{window['height']}+{window['x']}+{window['y']}", "+repage"]
        subprocess.run(argv + [path], env={**os.environ, **self.env}, check=True, capture_output=True, timeout=20)
        return path

    def _screen(self):
        """A screenshot of the whole screen, as an _Image."""
        done = subprocess.run(["import", "-window", "root", "-depth", "8", "ppm:-"], env={**os.environ, **self.env},
                              capture_output=True, timeout=20, check=True)
        return _Image(done.stdout)

    def _image(self, window):
        done = subprocess.run(["import", "-window", "root", "-depth", "8", "-crop", f"{window['width']}x{window['height']}+{window['x']}+{window['y']}",
                               "+repage", "ppm:-"], env={**os.environ, **self.env}, capture_output=True, timeout=20, check=True)
        return _Image(done.stdout)

    def point(self, x, y):
        """Moves the pointer to (x, y) on the screen, as a person's hand does."""
        here = dict(line.split(":", 1) for line in self.xdotool("getmouselocation").split() if ":" in line)
        if (int(here.get("x", -1)), int(here.get("y", -1))) != (x, y):
            self.xdotool("mousemove", "--sync", x, y)
            self.last_input = time.time()

    def key(self, name):
        """A person's key press, such as Escape."""
        self.xdotool("key", name)
        self.last_input = time.time()

    def rest(self, seconds=GNOME_IDLE):
        """Waits until pointer and keyboard have been left alone for `seconds`: GNOME Shell then
        counts the person idle, and a banner it shows stays until they are active again (shown
        while they are active, it goes 4 s later unless the pointer rests on it)."""
        wait = self.last_input + seconds - time.time()
        if wait > 0:
            time.sleep(wait)

    def point_at(self, which=None, dx=0):
        """Rests the pointer on a popup (its middle, moved dx to the side), as a person reading it."""
        window = self.popup_window(which)
        self.point(window["x"] + window["width"] // 2 + dx, window["y"] + window["height"] // 2)
        return window

    def move_away(self):
        """The pointer to the bottom left corner, away from every popup (they are at the top right)."""
        self.point(2, SCREEN[1] - 2)

    def click(self, x, y, button=1):
        """A person's click at (x, y) on the screen; the pointer is moved away after it."""
        self.point(x, y)
        self.xdotool("click", button)
        self.last_input = time.time()
        time.sleep(0.05)
        self.move_away()

    def click_close(self, which=None):
        """Closes a popup as a person does on this server: its × (notification-daemon, MATE), a click
        on it (xfce4-notifyd, which has no ×) or a left click (dunst, per DUNST_CONFIG). Returns the
        point clicked."""
        window = self.popup_window(which)
        if self.spec["close"] == "banner":
            x, y = self._banner_layout(window, lambda image, box: image.banner_close(box), "the ×")
            self.click(x, y)
            return x, y
        if self.spec["close"] == "corner":
            x, y = self._wait_layout(window, lambda layout: layout.corner(), "the ×")
        elif self.spec["close"] == "body":
            # Above the summary: the popup itself, not a label that takes the click or a button.
            x, y = window["width"] // 2, 6
        else:
            x, y = self._dunst_popup_point(window, which)
        self.click(window["x"] + x, window["y"] + y)
        return window["x"] + x, window["y"] + y

    def click_default(self, which=None):
        """Takes a popup's default action as a person does on this server: a click on the popup
        (notification-daemon, MATE), the button with the default action's label (xfce4-notifyd) or a
        right click (dunst, do_action per DUNST_CONFIG)."""
        if self.spec["default"] == "button":
            self.popup_window(which)
            popup = self._popup_for(which)
            if popup is None or "default" not in popup["actions"]:
                raise LookupError(f"no open popup {which!r} with a default action")
            return self.click_action(popup["actions"]["default"], which)
        window = self.popup_window(which)
        if self.spec["default"] == "banner":
            # The banner itself, above its title: clear of its icon, its × and its buttons.
            x, y = window["width"] // 2, min(14, window["height"] // 4)
            self.click(window["x"] + x, window["y"] + y)
            return window["x"] + x, window["y"] + y
        if self.spec["default"] == "body":
            x, y = window["width"] // 3, min(30, window["height"] // 3)
            self.click(window["x"] + x, window["y"] + y)
        else:
            x, y = self._dunst_popup_point(window, which)
            self.click(window["x"] + x, window["y"] + y, button=3)
        return window["x"] + x, window["y"] + y

    def click_action(self, label, which=None):
        """Presses the button labelled `label` on a popup. The popup's buttons are found on a
        screenshot of its window (the lowest band of it with anything drawn, split where nothing
        is), in the order of its actions less those this server gives no button."""
        if self.spec["buttons_skip"] is None:
            raise NotImplementedError(f"{self.server} shows no buttons: its actions are in a menu")
        window = self.popup_window(which)
        popup = self._popup_for(which)
        if popup is None:
            raise LookupError(f"no open popup {which!r}")
        labels = [text for key, text in popup["actions"].items() if key not in self.spec["buttons_skip"]]
        if label not in labels:
            raise LookupError(f"no button {label!r} on {popup['summary']!r}: {labels}")
        if self.spec["window"] is None:
            buttons = self._banner_layout(window, lambda image, box: image.banner_buttons(box, len(labels)),
                                          f"{len(labels)} buttons")
            x0, x1, y0, y1 = buttons[labels.index(label)]
            self.click((x0 + x1) // 2, (y0 + y1) // 2)
            return (x0 + x1) // 2, (y0 + y1) // 2
        buttons = self._wait_layout(window, lambda layout: layout.buttons(len(labels)), f"{len(labels)} buttons")
        x0, x1, y0, y1 = buttons[labels.index(label)]
        x, y = (x0 + x1) // 2, (y0 + y1) // 2
        self.click(window["x"] + x, window["y"] + y)
        return window["x"] + x, window["y"] + y

    def _wait_layout(self, window, find, what, timeout=5):
        """What `find` finds on the window's image, once the server has drawn it."""
        deadline = time.time() + timeout
        while True:
            found = find(self._image(window))
            if found:
                return found
            if time.time() > deadline:
                path = self.screenshot(os.path.join(self.dir, f"not-found-{int(time.time() * 1000)}.png"), window)
                raise LookupError(f"{self.server}: {what} not found on the popup (see {path})")
            time.sleep(0.2)

    def _banner_layout(self, window, find, what, timeout=5):
        """What `find` finds on GNOME Shell's banner, in screen coordinates, once the pointer rests
        on the banner: it expands then, and shows its × and its buttons."""
        self.point(window["x"] + window["width"] // 2, window["y"] + min(30, window["height"] // 3))
        deadline = time.time() + timeout
        while True:
            image = self._screen()
            box = image.banner()
            found = find(image, box) if box else None
            if found:
                return found
            if time.time() > deadline:
                path = self.screenshot(os.path.join(self.dir, f"not-found-{int(time.time() * 1000)}.png"))
                raise LookupError(f"{self.server}: {what} not found on the banner {box} (see {path})")
            time.sleep(0.1)

    def _dunst_popup_point(self, window, which):
        """A point on one of dunst's popups: they are stacked in its one window, newest first."""
        count = max(1, self.displayed())
        index = 0 if not isinstance(which, int) else which
        height = window["height"] // count
        return window["width"] // 2, height * index + height // 2

    def stop(self):
        if self.monitor:
            self.monitor.stop()
            self.monitor = None
        self.stop_server()
        for key in ["dbus", "system-dbus", "xvfb"]:
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


def _stat(pid):
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _started(pid):
    """When the process started, in clock ticks after boot (None when it is gone)."""
    fields = _stat(pid)
    return fields[19] if fields else None


def _alive(pid, started=None):
    """Whether the process with this id (and start time, when given) runs; a zombie does not."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and (started is None or fields[19] == started)


class _Image:
    """A screenshot of one popup window (PPM from ImageMagick), and where its parts are."""
    INK = 12  # how far a channel must be from its row's background to count as something drawn

    def __init__(self, ppm):
        header = re.match(rb"P6\s+(\d+)\s+(\d+)\s+255\s", ppm)
        if header is None:
            raise ValueError("not an 8-bit PPM")
        self.width, self.height = int(header.group(1)), int(header.group(2))
        self.data = ppm[header.end():header.end() + self.width * self.height * 3]

    def pixel(self, x, y):
        i = (y * self.width + x) * 3
        return self.data[i], self.data[i + 1], self.data[i + 2]

    def ink(self, x0, x1, y0, y1):
        """Which pixels of the box differ from the popup's background in their row: rows of
        booleans. The background of a row is its colour near the window's right edge, inside the
        border (a theme's gradient changes it from row to row; buttons, icons and side bars stop
        short of that edge)."""
        rows = []
        for y in range(y0, y1):
            edge = [self.pixel(x, y) for x in range(max(0, self.width - 12), max(1, self.width - 8))]
            background = max(set(edge), key=edge.count)
            rows.append([max(abs(a - b) for a, b in zip(self.pixel(x, y), background)) > self.INK for x in range(x0, x1)])
        return rows

    @staticmethod
    def runs(marks, gap=1):
        """(start, end) of the runs of True, joined across fewer than `gap` False between them."""
        runs = []
        for i, mark in enumerate(marks):
            if not mark:
                continue
            if runs and i - runs[-1][1] <= gap:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
        return [tuple(r) for r in runs]

    def corner(self):
        """The middle of what is drawn at the top right corner (a ×), or None."""
        # Clear of the window's rounded corner (notification-daemon's has a radius of about 12).
        x0, x1, y0, y1 = max(0, self.width - 60), self.width - 10, 8, min(self.height - 8, 52)
        rows = self.ink(x0, x1, y0, y1)
        columns = [any(row[i] for row in rows) for i in range(x1 - x0)]
        clusters = self.runs(columns, gap=4)
        if not clusters:
            return None
        start, end = clusters[-1]
        ys = [y for y, row in enumerate(rows) if any(row[start:end])]
        ys = self.runs([y in ys for y in range(len(rows))], gap=2)[0]
        return x0 + (start + end) // 2, y0 + (ys[0] + ys[1]) // 2

    def buttons(self, count):
        """The boxes (x0, x1, y0, y1) of the `count` rightmost things drawn in the popup's lowest
        band with anything drawn (its buttons), left to right; None when there are fewer."""
        margin = 7
        x0, x1, y0, y1 = margin, self.width - margin, margin, self.height - margin
        rows = self.ink(x0, x1, y0, y1)
        # Borders and side bars are drawn in (nearly) every row or column: not content.
        columns_full = [sum(row[i] for row in rows) > 0.8 * len(rows) for i in range(x1 - x0)]
        rows = [[mark and not columns_full[i] for i, mark in enumerate(row)] for row in rows]
        # The band: from the right two thirds, where no icon is, the lowest run of rows with ink.
        right = (x1 - x0) // 3
        bands = self.runs([any(row[right:]) for row in rows], gap=2)
        if not bands:
            return None
        top, bottom = bands[-1]
        columns = [any(rows[y][i] for y in range(top, bottom)) for i in range(x1 - x0)]
        # Words of one label are closer together than two buttons (or their frames) are.
        clusters = self.runs(columns, gap=5)
        if len(clusters) < count:
            return None
        return [(x0 + a, x0 + b, y0 + top, y0 + bottom) for a, b in clusters[-count:]]

    # GNOME Shell's screen: a plain wallpaper (GNOME_WALLPAPER), its top bar, and at most one banner.
    # The wallpaper, and the banner's shadow on it, have a red channel near 0; the top bar is black;
    # the banner, its text, its × and its buttons are grey or white.
    BANNER_RED = bytes(1 if value >= 40 else 0 for value in range(256))

    def wallpaper(self, x, y):
        """Whether the wallpaper shows at (x, y) (or its banner's shadow)."""
        r, g, b = self.pixel(x, y)
        return r < 20 and b > 80

    def desktop(self):
        """Whether the desktop shows, not the overview GNOME Shell starts in (whose background at
        the screen's left edge is dark grey)."""
        return self.wallpaper(2, self.height // 2)

    def banner(self):
        """The box of the banner below the top bar ({"id": 0, "x", "y", "width", "height"}), or
        None when there is none (or the overview shows)."""
        if not self.desktop():
            return None
        top = next((y for y in range(self.height // 2) if self.wallpaper(2, y)), None)
        if top is None:
            return None
        run = []
        for y in range(top, self.height * 2 // 3):
            start = y * self.width * 3
            marks = self.data[start:start + self.width * 3:3].translate(self.BANNER_RED)
            first = marks.find(1)
            if first < 0:
                if run and y - run[-1][0] > 2:
                    break
                continue
            run.append((y, first, marks.rfind(1)))
        if not run:
            return None
        x0, x1 = min(r[1] for r in run), max(r[2] for r in run)
        y0, y1 = run[0][0], run[-1][0]
        if x1 - x0 < 100 or y1 - y0 < 30:
            return None
        return {"id": 0, "x": x0, "y": y0, "width": x1 - x0 + 1, "height": y1 - y0 + 1}

    def banner_close(self, box):
        """The middle of the banner's × (white, at its top right, drawn while the pointer is on the
        banner), in screen coordinates, or None."""
        x0, x1 = box["x"] + box["width"] - 40, box["x"] + box["width"] - 8
        y0, y1 = box["y"] + 6, box["y"] + min(44, box["height"])
        white = [(x, y) for y in range(y0, y1) for x in range(x0, x1) if min(self.pixel(x, y)) >= 200]
        if len(white) < 6:
            return None
        xs, ys = [x for x, _ in white], [y for _, y in white]
        return (min(xs) + max(xs)) // 2, (min(ys) + max(ys)) // 2

    def banner_buttons(self, box, count):
        """The boxes (x0, x1, y0, y1), in screen coordinates, of the `count` buttons across the
        bottom of an expanded banner, left to right (each as wide as the others); None while the
        banner is not expanded. The band of the buttons is where the banner's left edge, inside its
        rounding, has a colour other than the banner's own."""
        x = box["x"] + 14
        background = self.pixel(box["x"] + 8, box["y"] + box["height"] // 3)
        bottom = box["y"] + box["height"] - 4
        y = bottom
        while y > box["y"] and max(abs(a - b) for a, b in zip(self.pixel(x, y), background)) > 6:
            y -= 1
        top = y + 1
        if bottom - top < 20 or top < box["y"] + box["height"] // 3:
            return None
        width = box["width"] / count
        return [(box["x"] + int(i * width), box["x"] + int((i + 1) * width) - 1, top, bottom) for i in range(count)]
