"""A running hub for the gateway tests: the real executables on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, ROOT, Hub, answers, free_port, json_lines, sas_token, wait_until  # noqa: E402,F401


def running_hub(prefix="nh-gateway-"):
    """Every service started, until the generator is closed; for module fixtures."""
    hub = Hub(prefix=prefix)
    for name in Hub.SERVICES:
        hub.start(name)
    assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")))
    assert wait_until(lambda: answers(hub))
    yield hub
    hub.stop_all()


@pytest.fixture(scope="module")
def hub():
    yield from running_hub()
