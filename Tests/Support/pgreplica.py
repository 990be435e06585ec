"""A PostgreSQL primary and a streaming replica on loopback, for tests of the store's failover:
the replica is made with pg_basebackup -R and follows the primary, synchronously or not. The test
can hold the replica behind (the primary's WAL sender stopped with SIGSTOP, so that asynchronous
commits go on without it), kill the primary as a lost machine dies (SIGKILL to the postmaster and
every child), promote the replica, or start the primary again. Standard library only; every
process is ended by its pid.

    with ReplicatedPostgres(synchronous=True) as pair:
        url = pair.url()     # postgresql://nh@127.0.0.1:P1,127.0.0.1:P2/nh?target_session_attrs=read-write
"""
import os
import signal
import subprocess
import time

from pgserver import PostgresServer, PostgresUnavailable, free_port

STANDBY = "standby1"


class ReplicatedPostgres:
    def __init__(self, synchronous):
        self.synchronous = synchronous
        settings = {"synchronous_commit": "on", "wal_level": "replica", "max_wal_senders": 5, "wal_sender_timeout": "5s",
                    "wal_receiver_status_interval": "1s"}
        self.primary = PostgresServer(listen="127.0.0.1", settings=settings)
        self.standby_folder = None
        self.standby_port = free_port()
        self.standby_running = False
        self.held = []

    def start(self):
        self.primary.start()
        try:
            self._make_standby()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def standby_data(self):
        return os.path.join(self.standby_folder, "data")

    def _make_standby(self):
        import tempfile
        self.standby_folder = tempfile.mkdtemp(prefix="nh-pg-standby-")
        if self.primary.as_user:
            os.chown(self.standby_folder, self.primary.as_user.pw_uid, self.primary.as_user.pw_gid)
        done = self.primary._server_side([
            self.primary._tool("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "nh",
            "-D", self.standby_data, "-R", "-X", "stream", "-c", "fast"], timeout=120)
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_basebackup failed: {done.stderr.strip()}")
        with open(os.path.join(self.standby_data, "postgresql.conf"), "a") as conf:
            conf.write(f"port = '{self.standby_port}'\nunix_socket_directories = '{self.standby_folder}'\n"
                       f"cluster_name = '{STANDBY}'\nhot_standby = on\n")
        self._standby_ctl("start", "-l", os.path.join(self.standby_folder, "server.log"), "-w", "-t", "60")
        self.standby_running = True
        if self.synchronous:
            # Commits wait until the standby has the WAL (one standby of one is ANY 1); set once it
            # streams, since a commit meanwhile would wait for it.
            self.primary_sql(f"ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 ({STANDBY})'")
            self.primary_sql("SELECT pg_reload_conf()")
        # The standby streams, and when synchronous, is the one commits wait for.
        wanted = "quorum" if self.synchronous else "async"
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.primary_sql("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'") == wanted:
                return
            time.sleep(0.2)
        raise PostgresUnavailable(f"the standby did not stream ({wanted}) within 30 s")

    def _standby_ctl(self, *args):
        done = self.primary._server_side([self.primary._tool("pg_ctl"), "-D", self.standby_data, *args], timeout=90)
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl {args[0]} on the standby failed: {(done.stderr or done.stdout).strip()}")
        return done

    def url(self):
        """Both servers, the services reaching whichever is the primary."""
        return (f"postgresql://nh@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby_port}/nh"
                "?target_session_attrs=read-write&connect_timeout=2")

    def sql(self, port, statement, database="nh"):
        done = subprocess.run(["psql", f"postgresql://nh@127.0.0.1:{port}/{database}", "-qtAXc", statement],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"psql on {port}: {done.stderr.strip()}")
        return done.stdout.strip()

    def primary_sql(self, statement):
        return self.sql(self.primary.port, statement)

    def standby_sql(self, statement):
        return self.sql(self.standby_port, statement)

    def current_sql(self, statement):
        """On whichever server is the primary now."""
        for port in (self.primary.port, self.standby_port):
            try:
                if self.sql(port, "SELECT pg_is_in_recovery()") == "f":
                    return self.sql(port, statement)
            except (RuntimeError, subprocess.TimeoutExpired):
                continue
        raise RuntimeError("no primary answers")

    def _postmaster(self, data):
        with open(os.path.join(data, "postmaster.pid")) as f:
            return int(f.readline())

    def _children(self, pid):
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        children.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
        return children

    def hold_standby_behind(self):
        """Stops the primary's WAL sender (SIGSTOP): the asynchronous standby gets nothing more, and
        the primary commits on without it. Returns the WAL sender's pid."""
        pid = int(self.primary_sql("SELECT pid FROM pg_stat_replication LIMIT 1"))
        os.kill(pid, signal.SIGSTOP)
        self.held.append(pid)
        return pid

    def pause_standby(self):
        """SIGSTOP to the standby's postmaster and every child: it answers nothing, and a commit
        that waits for it waits."""
        postmaster = self._postmaster(self.standby_data)
        self.paused = [postmaster] + self._children(postmaster)
        for pid in self.paused:
            os.kill(pid, signal.SIGSTOP)

    def resume_standby(self):
        for pid in getattr(self, "paused", []):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.paused = []

    def standby_lag_bytes(self):
        return int(self.primary_sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication") or 0)

    def kill_primary(self):
        """SIGKILL to the primary's postmaster and every child, as when its machine is lost."""
        postmaster = self._postmaster(self.primary.data)
        victims = [postmaster] + self._children(postmaster)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and any(os.path.exists(f"/proc/{pid}") and not self._zombie(pid) for pid in victims):
            time.sleep(0.05)
        self.held = []
        self.primary.running = False

    @staticmethod
    def _zombie(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    def restart_primary(self):
        """Starts the killed primary again (crash recovery on the same timeline)."""
        # The killed postmaster may linger as a zombie where nothing reaps orphans (pid 1 of a
        # container), and its lock files would name a pid that still exists.
        for lock in (os.path.join(self.primary.data, "postmaster.pid"), os.path.join(self.primary.folder, f".s.PGSQL.{self.primary.port}.lock")):
            if os.path.exists(lock):
                os.remove(lock)
        done = self.primary._server_side([self.primary._tool("pg_ctl"), "-D", self.primary.data, "-l", self.primary.log,
                                          "-w", "-t", "60", "start"], timeout=90)
        if done.returncode != 0:
            raise PostgresUnavailable(f"the primary did not start again: {done.stderr.strip() or done.stdout.strip()}")
        self.primary.running = True

    def promote(self):
        self._standby_ctl("promote", "-w", "-t", "60")

    def stop(self):
        self.resume_standby()
        for pid in self.held:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if self.standby_running:
            done = self.primary._server_side([self.primary._tool("pg_ctl"), "-D", self.standby_data, "-m", "immediate", "stop"])
            if done.returncode != 0:
                try:
                    os.kill(self._postmaster(self.standby_data), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            self.standby_running = False
        self.primary.stop()
        if self.standby_folder:
            import shutil
            shutil.rmtree(self.standby_folder, ignore_errors=True)
            self.standby_folder = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
