"""The throwaway PostgreSQL server (Tests/Support/pgserver.py): it starts, serves psql, stops and
leaves nothing behind; `run --` passes the variable and the exit status through; `serve` prints
its URL and stops at SIGTERM or at the end of its input."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "Tests", "Support"))

import pgserver  # noqa: E402

SCRIPT = os.path.join(ROOT, "Tests", "Support", "pgserver.py")

try:
    BIN = pgserver.find_bin_dir()
except pgserver.PostgresUnavailable as error:
    BIN = None
    REASON = str(error)

needs_postgres = pytest.mark.skipif(BIN is None, reason=f"PostgreSQL is not installed: {REASON if BIN is None else ''}")


def psql(url, sql):
    done = subprocess.run(
        [os.path.join(BIN, "psql"), url, "-X", "-At", "-c", sql], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def server_alive(folder):
    return any(name.startswith(".s.PGSQL.") for name in os.listdir(folder))


@needs_postgres
def test_server_serves_psql_then_stops_and_removes_its_folder():
    with pgserver.PostgresServer() as server:
        folder = server.folder
        assert server.url().startswith(f"postgresql:///nh?host={folder}&port={server.port}&user=nh")
        assert psql(server.url(), "SELECT current_user || ' ' || current_database()") == "nh nh"
        assert psql(server.url(), "SHOW fsync") == "off"
        assert psql(server.url(), "SHOW listen_addresses") == ""
        server.create_database("other")
        assert psql(server.url("other"), "SELECT current_database()") == "other"
        assert server_alive(folder)
    assert not os.path.exists(folder)


@needs_postgres
def test_server_on_tcp_when_asked():
    with pgserver.PostgresServer(listen="127.0.0.1") as server:
        assert psql(server.tcp_url(), "SELECT inet_server_addr()") == "127.0.0.1"


@needs_postgres
def test_given_folder_is_kept():
    import tempfile
    with tempfile.TemporaryDirectory(prefix="nh-pg-given-") as folder:
        with pgserver.PostgresServer(folder=folder) as server:
            assert psql(server.url(), "SELECT 1") == "1"
        assert os.path.isdir(os.path.join(folder, "data"))
        assert not server_alive(folder)


@needs_postgres
def test_run_sets_the_variable_and_passes_the_status_through():
    command = 'test -n "$NH_TEST_POSTGRES" && psql "$NH_TEST_POSTGRES" -XAtc "SELECT current_database()" && exit 7'
    done = subprocess.run(
        [sys.executable, SCRIPT, "run", "--require", "--", "sh", "-c", command],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"]))
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip() == "nh"
    folder = done.stderr.split("host=")[1].split("&")[0]
    assert not os.path.exists(folder)


def test_run_without_postgres_runs_the_command_without_the_variable():
    env = dict(os.environ, NH_POSTGRES_BIN="/nonexistent", NH_TEST_POSTGRES="stale")
    command = 'test -z "$NH_TEST_POSTGRES" && exit 3'
    done = subprocess.run(
        [sys.executable, SCRIPT, "run", "--", "sh", "-c", command], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 3
    assert "running without NH_TEST_POSTGRES" in done.stderr

    required = subprocess.run(
        [sys.executable, SCRIPT, "run", "--require", "--", "sh", "-c", "exit 0"],
        capture_output=True, text=True, timeout=60, env=env)
    assert required.returncode != 0
    assert "required" in required.stderr


def serve():
    """`serve` as a child with a pipe for its input; returns the process and the URL it printed."""
    child = subprocess.Popen(
        [sys.executable, SCRIPT, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = child.stdout.readline().strip()
    assert url.startswith("postgresql:///nh?host="), child.stderr.read()
    return child, url


@needs_postgres
@pytest.mark.parametrize("stop", ["SIGTERM", "end of input"])
def test_serve_prints_its_url_and_stops_when_told(stop):
    child, url = serve()
    assert psql(url, "SELECT current_database()") == "nh"
    if stop == "SIGTERM":
        child.send_signal(signal.SIGTERM)
    else:
        child.stdin.close()
    assert child.wait(timeout=60) == 0
    folder = url.split("host=")[1].split("&")[0]
    assert not os.path.exists(folder)


def test_serve_without_postgres_says_why_and_exits_3():
    done = subprocess.run(
        [sys.executable, SCRIPT, "serve"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, NH_POSTGRES_BIN="/nonexistent"))
    assert done.returncode == 3
    assert done.stdout == ""
    assert "/nonexistent" in done.stderr
