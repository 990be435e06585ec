"""The packages on a clean Debian 12, as an operator uses them (make package-test).

Makes a Debian 12 root with debootstrap (kept in .build/package-root/base for the next run), copies
it, and in the copy:
  1. installs notification-hub and nh-agent with apt, which brings their Depends from Debian;
  2. checks what installing did: the nh user, /var/lib/nh, no unit enabled, nothing running;
  3. starts each service as its unit says (ExecStart, User), in a network namespace of its own, and
     the agent as its system unit says, with the keys nhctl keys prints in /etc/nh/agent.env;
  4. sends a first notification with the installed nhctl and sees the agent show it;
  5. installs the packages again over themselves (an upgrade): an edited conffile and the data stay;
  6. removes both (the data and conffiles stay), then purges both (they go).
Needs root, debootstrap, iproute2 and a Debian mirror (DEBIAN_MIRROR, default deb.debian.org).
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".build", "package-root")
SERVICES = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"]
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
AGENT_UID = 61_234  # what DynamicUser= would pick: a user with no name


def step(text):
    print(f"package-test: {text}", flush=True)


def run(argv, **kwargs):
    kwargs.setdefault("check", True)
    kwargs.setdefault("timeout", 900)
    return subprocess.run(argv, **kwargs)


class Root:
    """A copy of the cached Debian 12 root, with /proc, /dev and /sys mounted while it is used."""

    def __init__(self):
        base = os.path.join(CACHE, "base")
        if not os.path.exists(os.path.join(base, "etc/debian_version")):
            step(f"debootstrap bookworm from {MIRROR} (once; kept in {base})")
            shutil.rmtree(base + ".tmp", ignore_errors=True)
            run(["debootstrap", "--variant=minbase", "--include=systemd,ca-certificates", "bookworm", base + ".tmp", MIRROR],
                stdout=subprocess.DEVNULL)
            os.rename(base + ".tmp", base)
        self.path = os.path.join(CACHE, f"run-{os.getpid()}")
        shutil.rmtree(self.path, ignore_errors=True)
        run(["cp", "-a", base, self.path])
        self.mounts = []
        for kind, target in [("proc", "proc"), ("sysfs", "sys")]:
            run(["mount", "-t", kind, kind, os.path.join(self.path, target)])
            self.mounts.append(os.path.join(self.path, target))
        run(["mount", "--bind", "/dev", os.path.join(self.path, "dev")])
        self.mounts.append(os.path.join(self.path, "dev"))
        shutil.copy("/etc/resolv.conf", os.path.join(self.path, "etc/resolv.conf"))
        self.namespace = f"nhpkg{os.getpid() % 100000}"
        run(["ip", "netns", "add", self.namespace])
        run(["ip", "netns", "exec", self.namespace, "ip", "link", "set", "lo", "up"])
        self.processes = {}

    def file(self, path):
        return os.path.join(self.path, path.lstrip("/"))

    def chroot(self, argv, user=None, env=None, network=False, **kwargs):
        """argv inside the root; in the test's network namespace unless `network` (apt needs the host's)."""
        spec = ["--userspec", user] if user else []
        command = ["chroot", *spec, self.path, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                   *[f"{k}={v}" for k, v in (env or {}).items()], *argv]
        if not network:
            command = ["ip", "netns", "exec", self.namespace, *command]
        return command

    def run(self, argv, **kwargs):
        options = {k: kwargs.pop(k) for k in ("user", "env", "network") if k in kwargs}
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        result = run(self.chroot(argv, **options), check=False, **kwargs)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {result.returncode}: {result.stdout}{result.stderr}")
        return result.stdout

    def start(self, name, argv, user=None, env=None):
        log = open(self.file(f"/tmp/{name}.log"), "ab")
        process = subprocess.Popen(self.chroot(argv, user=user, env=env), stdout=log, stderr=subprocess.STDOUT)
        self.processes[name] = process
        return process

    def stop_all(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                assert process.wait(timeout=20) == 0, f"{name} exited {process.returncode} on SIGTERM"
            except subprocess.TimeoutExpired:
                process.kill()
                raise AssertionError(f"{name} did not stop on SIGTERM")
        self.processes.clear()

    def close(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        for mount in reversed(self.mounts):
            subprocess.run(["umount", "-l", mount], check=False)
        subprocess.run(["ip", "netns", "delete", self.namespace], check=False)
        if os.environ.get("NH_PACKAGE_KEEP") != "1":
            shutil.rmtree(self.path, ignore_errors=True)


def unit(root, name, user_unit=False):
    """ExecStart, User and environment of an installed unit, as systemd would read them."""
    folder = "/usr/lib/systemd/user" if user_unit else "/lib/systemd/system"
    settings = {}
    environment = {}
    for line in open(root.file(f"{folder}/{name}.service")):
        key, _, value = line.strip().partition("=")
        if key == "Environment":
            environment.update(dict([value.split("=", 1)]))
        elif key and not key.startswith("#"):
            settings[key] = value
    files = [settings.get("EnvironmentFile", "").lstrip("-")]
    for path in filter(None, files):
        if os.path.exists(root.file(path)):
            for line in open(root.file(path)):
                if "=" in line and not line.startswith("#"):
                    key, value = line.strip().split("=", 1)
                    environment[key] = value
    return shlex.split(settings["ExecStart"]), settings, environment


def wait_until(condition, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if condition():
                return True
        except AssertionError:
            pass
        time.sleep(0.2)
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debs", required=True, help="the folder make deb wrote the packages to")
    arguments = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("package-test: needs root (debootstrap, chroot, network namespaces)")
    debs = sorted(glob.glob(os.path.join(arguments.debs, "*.deb")))
    assert len(debs) == 2, f"expected two packages in {arguments.debs}, found {debs}"
    root = Root()
    try:
        for deb in debs:
            shutil.copy(deb, root.file("/tmp"))
        inside = [f"/tmp/{os.path.basename(deb)}" for deb in debs]
        step("apt-get install " + " ".join(os.path.basename(d) for d in debs))
        root.run(["apt-get", "update", "-qq"], network=True)
        root.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *inside], network=True,
                 env={"DEBIAN_FRONTEND": "noninteractive"})

        step("what installing did")
        passwd = root.run(["getent", "passwd", "nh"])
        assert passwd.split(":")[5] == "/var/lib/nh", passwd
        stat = os.stat(root.file("/var/lib/nh"))
        assert stat.st_mode & 0o777 == 0o750 and stat.st_uid == int(passwd.split(":")[2]), oct(stat.st_mode)
        for name in SERVICES + ["nh-agent"]:
            state = subprocess.run(root.chroot(["systemctl", "is-enabled", f"{name}.service"]), capture_output=True, text=True)
            assert state.stdout.strip() == "disabled", (name, state.stdout, state.stderr)
        assert json.load(open(root.file("/etc/nh/hub.json"))) == {"dataDir": "/var/lib/nh"}
        for name in SERVICES + ["nhctl", "nh-agent"]:
            assert re.match(rf"{name} \d", root.run([name, "--version"])), name

        step("start the services as their units say")
        for name in SERVICES:
            argv, settings, environment = unit(root, name)
            root.start(name, argv, user=f"{settings['User']}:{settings['Group']}", env=environment)
        assert wait_until(lambda: os.path.exists(root.file("/var/lib/nh/keys.json"))), "no keys were made"
        assert wait_until(lambda: root.run(["nhctl", "health"]) is not None, timeout=60), "nhctl health failed"
        health = root.run(["nhctl", "health"])
        assert all(re.search(rf"^{name}\s+ok\b", health, re.M) for name in SERVICES), health
        for name in SERVICES:
            assert root.processes[name].poll() is None, f"{name} stopped"

        step("the agent, as its system unit says, with the keys nhctl keys prints")
        keys = [json.loads(line) for line in root.run(["nhctl", "keys", "--json"]).splitlines()]
        listen = next(k["connectionString"] for k in keys if k["name"] == "DefaultListenSharedAccessSignature")
        server_key = next(k["serverKey"] for k in keys if k["name"] == "bus")
        with open(root.file("/etc/nh/agent.env"), "w") as env_file:
            env_file.write(f"NH_AGENT_CONNECTION_STRING={listen}\nNH_BUS_SERVER_KEY={server_key}\n")
        os.chmod(root.file("/etc/nh/agent.env"), 0o600)
        argv, settings, environment = unit(root, "nh-agent")
        assert settings.get("DynamicUser") == "yes" and settings.get("StateDirectory") == "nh-agent", settings
        home = environment["NH_AGENT_HOME"]
        os.makedirs(root.file(home), exist_ok=True)  # what StateDirectory= makes, owned by the dynamic user
        os.chown(root.file(home), AGENT_UID, AGENT_UID)
        agent_user = f"{AGENT_UID}:{AGENT_UID}"
        root.run(["nh-agent", "subscribe", "World", "--config", "/etc/nh/agent.json"], user=agent_user, env=environment)
        root.start("nh-agent", argv, user=agent_user, env=environment)
        installation = None

        def registered():
            nonlocal installation
            installation = root.run(["nh-agent", "id"], user=agent_user, env=environment).strip()
            shown = json.loads(root.run(["nhctl", "installations", "show", installation, "--json"]))
            return "World" in shown.get("tags", []) and shown.get("placement", {}).get("connected") is True
        assert wait_until(registered, timeout=60), "the agent did not register and connect"

        step("a first notification, sent with the installed nhctl")
        sent = json.loads(root.run(["nhctl", "send", "--tag", "World", "messageParam=Hello from the packages", "--json"]))
        notification = sent["notificationId"]

        def acknowledged():
            outcome = json.loads(root.run(["nhctl", "outcome", notification, "--json"]))
            return outcome.get("state") == "Completed" and outcome.get("acknowledged") == 1
        assert wait_until(acknowledged, timeout=60), root.run(["nhctl", "outcome", notification, "--json"])
        shown = open(root.file("/tmp/nh-agent.log")).read()
        assert "Hello from the packages" in shown, shown
        agent_health = root.run(["nh-agent", "health"], user=agent_user, env=environment)
        assert "registered: true" in agent_health, agent_health
        root.stop_all()

        step("install again over the installed packages (an upgrade): an edited conffile and the data stay")
        with open(root.file("/etc/nh/hub.json"), "w") as config:
            config.write('{"dataDir": "/var/lib/nh", "logLevel": "debug"}\n')
        keys_before = open(root.file("/var/lib/nh/keys.json")).read()
        root.run(["dpkg", "-i", "--force-confold", *inside], env={"DEBIAN_FRONTEND": "noninteractive"})
        assert json.load(open(root.file("/etc/nh/hub.json"))) == {"dataDir": "/var/lib/nh", "logLevel": "debug"}
        assert open(root.file("/var/lib/nh/keys.json")).read() == keys_before
        root.start("nh-registry", unit(root, "nh-registry")[0], user="nh:nh")
        assert wait_until(lambda: installation in root.run(["nhctl", "installations", "list", "--json"]), timeout=60)
        root.stop_all()

        step("remove: the executables go, the data and conffiles stay")
        root.run(["apt-get", "remove", "-y", "-qq", "notification-hub", "nh-agent"], env={"DEBIAN_FRONTEND": "noninteractive"})
        assert not os.path.exists(root.file("/usr/bin/nh-services")) and not os.path.exists(root.file("/usr/bin/nh-agent"))
        assert os.path.exists(root.file("/var/lib/nh/keys.json")) and os.path.exists(root.file("/etc/nh/hub.json"))
        assert os.path.exists(root.file(f"{home}/agent.db"))

        step("purge: the data and conffiles go")
        root.run(["apt-get", "purge", "-y", "-qq", "notification-hub", "nh-agent"], env={"DEBIAN_FRONTEND": "noninteractive"})
        for path in ["/var/lib/nh", home, "/etc/nh/hub.json", "/etc/nh/agent.json", "/lib/systemd/system/nh-dispatch.service"]:
            assert not os.path.exists(root.file(path)), f"{path} is still there after purge"
        step("passed")
    finally:
        root.stop_all() if root.processes else None
        root.close()


if __name__ == "__main__":
    main()
