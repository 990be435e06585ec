"""A service whose data folder holds a key file it cannot read stops at start with exit 2 and
what went wrong, before it binds anything: making new keys in its place would refuse every
client holding the real ones."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import BIN, Hub

KEY_FILES = ["keys.json", "user-token.key", "bus.key"]


@pytest.mark.parametrize("service", Hub.SERVICES)
@pytest.mark.parametrize("file, words", [
    ("keys.json", "cannot load the hub's keys"),
    ("user-token.key", "cannot load the user-token secret"),
    ("bus.key", "cannot load the hub's bus key"),
])
def test_an_unreadable_key_file_stops_the_service_with_exit_2(service, file, words):
    hub = Hub(prefix="nh-keyfile-")
    try:
        # Key files as a first start makes them, then one of them damaged.
        started = hub.start("nh-registry")
        try:
            deadline = time.monotonic() + 30
            while not all(os.path.exists(os.path.join(hub.data, name)) for name in KEY_FILES):
                assert time.monotonic() < deadline, "the registry made no key files"
                time.sleep(0.05)
        finally:
            started.terminate()
            started.wait(timeout=30)
        path = os.path.join(hub.data, file)
        original = open(path, "rb").read()
        with open(path, "wb") as damaged:
            damaged.write(b"not a key file")
        result = subprocess.run([os.path.join(BIN, service)], env=hub.env, capture_output=True, text=True, timeout=60)
        log = result.stderr + result.stdout
        assert result.returncode == 2, (service, log[-2000:])
        assert words in log and "config error" in log, log[-2000:]
        # Nothing was made in its place.
        assert open(path, "rb").read() == b"not a key file"
        assert original != b"not a key file"
    finally:
        hub.stop_all()
        shutil.rmtree(hub.data, ignore_errors=True)
