"""The worked three-host example in deploy/three-hosts/ is one config file per host: each passes
--check-config of every executable that runs on that host, so an operator who copies them starts
from files the hub takes."""
import json
import os
import subprocess

import pytest

from hubharness import BIN

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy", "three-hosts")
HOSTS = {
    "host-a.json": ["nh-registry", "nh-sync"],
    "host-b.json": ["nh-dispatch", "nh-publish", "nh-gateway"],
    "host-c.json": ["nh-dispatch", "nh-publish", "nh-gateway"],
    "agent.json": ["nh-agent"],
}


@pytest.mark.parametrize("host,executable", [(host, executable) for host, executables in HOSTS.items() for executable in executables])
def test_each_host_file_passes_check_config(host, executable, tmp_path):
    path = os.path.join(FOLDER, host)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NH_")}
    env["NH_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([os.path.join(BIN, executable), "--config", path, "--check-config"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{executable} --config {host}: {done.stdout}{done.stderr}"


def test_the_hosts_agree():
    """One namespace and one store everywhere; each host binds its own services, and the agents
    are given both dispatchers."""
    files = {host: json.load(open(os.path.join(FOLDER, host))) for host in HOSTS}
    assert len({f["namespace"] for f in files.values()}) == 1
    assert len({f.get("store") for host, f in files.items() if host != "agent.json"}) == 1
    assert files["host-b.json"]["dispatch"]["advertise"] != files["host-c.json"]["dispatch"]["advertise"]
    assert set(files["agent.json"]["dispatch"]["agents"].split(",")) == {
        files["host-b.json"]["dispatch"]["advertise"], files["host-c.json"]["dispatch"]["advertise"]}
    # Each host's gateway and nhctl read outcomes from the other dispatcher when their own is down.
    assert files["host-b.json"]["dispatch"]["peers"] == files["host-c.json"]["dispatch"]["requests"]
    assert files["host-c.json"]["dispatch"]["peers"] == files["host-b.json"]["dispatch"]["requests"]
    for f in files.values():
        assert f["registry"] == files["host-a.json"]["registry"] and f["sync"] == files["host-a.json"]["sync"]


def test_make_run_keeps_its_data_where_nh_data_dir_says():
    """`make run` uses an exported NH_DATA_DIR, as nhctl in another terminal then does; DATA_DIR=
    still wins, and without either it is ./data."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def planned(**env):
        result = subprocess.run(["make", "-n", "-C", root, "run"], env={"PATH": os.environ["PATH"], **env},
                                capture_output=True, text=True, timeout=60)
        return next(line for line in result.stdout.splitlines() if "run-local.sh" in line)

    assert 'NH_DATA_DIR="/srv/hub-data"' in planned(NH_DATA_DIR="/srv/hub-data")
    assert 'NH_DATA_DIR="/srv/other"' in planned(NH_DATA_DIR="/srv/hub-data", DATA_DIR="/srv/other")
    assert f'NH_DATA_DIR="{root}/data"' in planned()
