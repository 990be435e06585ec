"""A running hub for the gateway tests: the real executables on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, ROOT, Hub, answers, free_port, json_lines, sas_token, wait_until  # noqa: E402,F401


@pytest.fixture(scope="module")
def hub():
    hub = Hub()
    for name in Hub.SERVICES:
        hub.start(name)
    assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")))
    assert wait_until(lambda: answers(hub))
    yield hub
    hub.stop_all()
