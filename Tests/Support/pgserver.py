"""A throwaway PostgreSQL server for tests: initdb into a temporary folder, a server that listens
on a Unix socket in that folder (and on TCP only when asked), stopped and removed afterwards.
Standard library only.

    with PostgresServer() as server:
        url = server.url()            # postgresql:///nh?host=FOLDER&port=P&user=nh

    python3 Tests/Support/pgserver.py run [--require] -- COMMAND ARGS...

`run` starts a server, creates the database nh, runs COMMAND with NH_TEST_POSTGRES set to its URL,
stops the server and exits with COMMAND's status. Where PostgreSQL cannot be found or started it
says why and runs COMMAND without the variable (its PostgreSQL tests then skip), unless --require
is given. NH_POSTGRES_BIN names the folder of initdb and pg_ctl when they are elsewhere.

    python3 Tests/Support/pgserver.py serve

`serve` starts a server, creates the database nh, prints its URL on a line of its own, and stops the
server when told to (SIGTERM or SIGINT) or when its standard input closes, as it does when the
process that started it ends. Where PostgreSQL cannot be found or started it says why and exits 3.

PostgreSQL refuses to run as root: as root, initdb and the server run as the user postgres, which
owns the folder; root still reaches the socket in it.
"""
import argparse
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

SERVER_USER = "postgres"


class PostgresUnavailable(Exception):
    """PostgreSQL is not installed here, or would not start; the message says which."""


def find_bin_dir():
    """The folder with initdb, pg_ctl and createdb: NH_POSTGRES_BIN, else the newest
    /usr/lib/postgresql/*/bin, else the folder of an initdb on PATH."""
    wanted = os.environ.get("NH_POSTGRES_BIN")
    candidates = [wanted] if wanted else []
    if not wanted:
        def version(path):
            return [int(part) for part in re.findall(r"\d+", path)]
        candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
        on_path = shutil.which("initdb")
        if on_path:
            candidates.append(os.path.dirname(on_path))
    for folder in candidates:
        if all(os.access(os.path.join(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl", "createdb")):
            return folder
    where = wanted or "/usr/lib/postgresql/*/bin or PATH"
    raise PostgresUnavailable(f"no initdb, pg_ctl and createdb in {where} (Debian: apt-get install postgresql)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One PostgreSQL server in `folder` (a new temporary one by default, removed on stop).
    `listen` is listen_addresses: '' for the Unix socket alone, '127.0.0.1' to take TCP as well,
    on `tcp_port` (a free port by default; the socket's name carries the same number)."""

    def __init__(self, folder=None, tcp_port=None, listen="", wrap=None, trust=None, settings=None):
        """`wrap` runs the server under a command prefix, such as ["ip", "netns", "exec", NS] to
        start it in a network namespace; `trust` is a network (such as 10.77.3.0/24) whose
        clients may connect over TCP without a password, as local ones may; `settings` are written
        to postgresql.conf after the ones made for speed, which they may override."""
        self.wrap = wrap
        self.trust = trust
        self.settings = settings or {}
        self.bin = find_bin_dir()
        self.given_folder = folder
        self.folder = None
        self.port = tcp_port or free_port()
        self.listen = listen
        self.running = False
        self.as_user = None
        if os.geteuid() == 0:
            try:
                self.as_user = pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise PostgresUnavailable(
                    f"running as root, and PostgreSQL will not: there is no user {SERVER_USER} to run it as") from None

    @property
    def data(self):
        return os.path.join(self.folder, "data")

    @property
    def log(self):
        return os.path.join(self.folder, "server.log")

    def _tool(self, name):
        return os.path.join(self.bin, name)

    def _server_side(self, args, timeout=60):
        """Runs initdb or pg_ctl, as the user postgres when this is root."""
        extra = {}
        if self.as_user:
            extra = dict(user=self.as_user.pw_uid, group=self.as_user.pw_gid, extra_groups=[])
        return subprocess.run(args, cwd=self.folder, capture_output=True, text=True, timeout=timeout, **extra)

    def start(self):
        """initdb, settings for speed, pg_ctl start; returns once the server takes connections
        and the database nh exists."""
        self.folder = self.given_folder or tempfile.mkdtemp(prefix="nh-pg-")
        os.makedirs(self.folder, exist_ok=True)
        try:
            if self.as_user:
                os.chown(self.folder, self.as_user.pw_uid, self.as_user.pw_gid)
            done = self._server_side([
                self._tool("initdb"), "-D", self.data, "--auth=trust", "-U", "nh", "-E", "UTF8",
                "--locale=C", "--no-sync", "--no-instructions"])
            if done.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {(done.stderr or done.stdout).strip()}")
            settings = {
                "listen_addresses": self.listen, "port": self.port, "unix_socket_directories": self.folder,
                "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                "shared_buffers": "16MB", "max_connections": 100, "log_min_messages": "warning",
                **self.settings,
            }
            with open(os.path.join(self.data, "postgresql.conf"), "a") as conf:
                for key, value in settings.items():
                    conf.write(f"{key} = '{value}'\n")
            if self.trust:
                with open(os.path.join(self.data, "pg_hba.conf"), "a") as hba:
                    hba.write(f"host all all {self.trust} trust\n")
            start = [self._tool("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "start"]
            if self.wrap:
                # Root runs the prefix (entering a namespace needs it), then drops to the server's user.
                switch = ["runuser", "-u", SERVER_USER, "--"] if self.as_user else []
                done = subprocess.run(self.wrap + switch + start, cwd=self.folder, capture_output=True, text=True, timeout=90)
            else:
                done = self._server_side(start, timeout=90)
            if done.returncode != 0:
                raise PostgresUnavailable(f"the server did not start: {self._log_tail() or done.stdout.strip()}")
            self.running = True
            self.create_database("nh")
        except BaseException:
            self.stop()
            raise
        return self

    def _log_tail(self):
        try:
            with open(self.log) as f:
                return " / ".join(f.read().strip().splitlines()[-5:])
        except OSError:
            return ""

    def url(self, database="nh"):
        host = urllib.parse.quote(self.folder, safe="/")
        return f"postgresql:///{urllib.parse.quote(database)}?host={host}&port={self.port}&user=nh"

    def tcp_url(self, database="nh", host="127.0.0.1"):
        """The URL over TCP, for a server started with listen set."""
        return f"postgresql://nh@{host}:{self.port}/{urllib.parse.quote(database)}"

    def create_database(self, name):
        done = subprocess.run(
            [self._tool("createdb"), "-h", self.folder, "-p", str(self.port), "-U", "nh", name],
            capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise PostgresUnavailable(f"createdb {name} failed: {done.stderr.strip()}")

    def stop(self):
        """Stops the server (fast shutdown: sessions are ended) and removes the folder it made."""
        if self.running:
            done = self._server_side([self._tool("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "-t", "30", "stop"])
            if done.returncode != 0:
                self._kill()
            self.running = False
        if self.folder and not self.given_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _kill(self):
        """SIGKILL to the postmaster named in postmaster.pid, when pg_ctl could not stop it."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                os.kill(int(f.readline()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def run(command, require):
    """Runs `command` beside a fresh server; returns its exit status. SIGTERM and SIGINT go on to
    the command once it runs (the server stops when it has ended), and end the start before that."""
    env = dict(os.environ)
    env.pop("NH_TEST_POSTGRES", None)
    server = None
    child = None

    def end(signum, frame):
        if child is None:
            raise SystemExit(128 + signum)
        child.send_signal(signum)

    previous = {number: signal.signal(number, end) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        started = time.monotonic()
        try:
            server = PostgresServer()
            server.start()
            env["NH_TEST_POSTGRES"] = server.url()
            print(f"pgserver: PostgreSQL ready in {time.monotonic() - started:.1f} s: {server.url()}", file=sys.stderr)
        except PostgresUnavailable as error:
            if require:
                print(f"pgserver: PostgreSQL is required and unavailable: {error}", file=sys.stderr)
                return 1
            print(f"pgserver: {error}; running without NH_TEST_POSTGRES (PostgreSQL tests skip)", file=sys.stderr)
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            print(f"pgserver: cannot run {command[0]}: {error.strerror}", file=sys.stderr)
            return 127
        status = child.wait()
        return 128 - status if status < 0 else status
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if server:
            server.stop()


SERVE_UNAVAILABLE = 3


def serve():
    """Starts a server, prints its URL, and runs until SIGTERM, SIGINT or the end of standard input;
    returns the exit status (SERVE_UNAVAILABLE when there is no server to serve)."""
    def end(signum, frame):
        raise SystemExit(0)

    previous = {number: signal.signal(number, end) for number in (signal.SIGTERM, signal.SIGINT)}
    server = None
    try:
        try:
            server = PostgresServer().start()
        except PostgresUnavailable as error:
            print(f"pgserver: {error}", file=sys.stderr)
            return SERVE_UNAVAILABLE
        print(server.url(), flush=True)
        # Returns at end of input; a signal ends it through SystemExit.
        while sys.stdin.buffer.read(4096):
            pass
        return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if server:
            server.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="action", required=True)
    runner = commands.add_parser("run", help="run COMMAND beside a server, with NH_TEST_POSTGRES set")
    runner.add_argument("--require", action="store_true", help="fail when PostgreSQL cannot be found or started")
    runner.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    commands.add_parser("serve", help="print a new server's URL, and stop it at SIGTERM or the end of standard input")
    args = parser.parse_args(argv)
    if args.action == "serve":
        return serve()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a command after --")
    return run(command, args.require)


if __name__ == "__main__":
    sys.exit(main())
