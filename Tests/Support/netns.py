"""Hosts for tests, as Linux network namespaces joined by veth links to a bridge in a namespace
of its own: each "host" has one address on 10.77.N.0/24 and nothing else, so services on
different hosts talk over a real (virtual) network whose links a test can cut and restore.
Needs root and iproute2; standard library only.

    with Network(["db", "core", "agents1", "agents2"]) as net:
        net.address("db")                        # 10.77.N.1
        net.popen("core", [binary, ...], env=…)  # a process on that host
        net.cut("agents2"); net.restore("agents2")
"""
import os
import shutil
import subprocess

_next_subnet = [0]


class NamespacesUnavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


def _ip(*args, check=True):
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NamespacesUnavailable(f"ip {' '.join(args)}: {(done.stderr or done.stdout).strip()}")
    return done


class Network:
    """Namespaces named nh<pid>-<host>, each with a veth link to a bridge in nh<pid>-sw."""

    def __init__(self, hosts, subnet=None):
        if len(hosts) > 200:
            raise ValueError("at most 200 hosts")
        self.hosts = list(hosts)
        self.prefix = f"nh{os.getpid() % 100000}"
        _next_subnet[0] += 1
        self.subnet = subnet or f"10.77.{(os.getpid() + _next_subnet[0]) % 250 + 1}"
        self.switch = f"{self.prefix}-sw"
        self.made = []

    @staticmethod
    def check():
        """Raises NamespacesUnavailable unless this process can make namespaces."""
        if os.geteuid() != 0:
            raise NamespacesUnavailable("network namespaces need root")
        if not shutil.which("ip"):
            raise NamespacesUnavailable("no ip command (Debian: apt-get install iproute2)")
        probe = f"nhprobe{os.getpid() % 100000}"
        _ip("netns", "add", probe)
        _ip("netns", "del", probe, check=False)

    def namespace(self, host):
        return f"{self.prefix}-{host}"

    def address(self, host):
        return f"{self.subnet}.{self.hosts.index(host) + 1}"

    def _link(self, index, side):
        # Interface names are at most 15 characters.
        return f"{self.prefix}{side}{index}"[:15]

    def create(self):
        self.check()
        try:
            _ip("netns", "add", self.switch)
            self.made.append(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for index, host in enumerate(self.hosts):
                namespace = self.namespace(host)
                _ip("netns", "add", namespace)
                self.made.append(namespace)
                inner, outer = self._link(index, "h"), self._link(index, "s")
                _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
                _ip("link", "set", inner, "netns", namespace)
                _ip("link", "set", outer, "netns", self.switch)
                _ip("-n", self.switch, "link", "set", outer, "master", "br0")
                _ip("-n", self.switch, "link", "set", outer, "up")
                _ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", inner)
                _ip("-n", namespace, "link", "set", inner, "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def command(self, host, argv):
        """`argv` run on `host`."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def popen(self, host, argv, **kwargs):
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def run(self, host, argv, **kwargs):
        return subprocess.run(self.command(host, argv), **kwargs)

    def cut(self, host):
        """Takes the host's link to the switch down: it keeps its address but reaches nobody."""
        _ip("-n", self.switch, "link", "set", self._link(self.hosts.index(host), "s"), "down")

    def restore(self, host):
        _ip("-n", self.switch, "link", "set", self._link(self.hosts.index(host), "s"), "up")

    def destroy(self):
        """Deletes every namespace made (their links go with them)."""
        for namespace in reversed(self.made):
            _ip("netns", "del", namespace, check=False)
        self.made.clear()

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc):
        self.destroy()
