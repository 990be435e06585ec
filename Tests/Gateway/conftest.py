"""A running hub for the gateway tests: the real executables on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hubtest import BIN, Hub, free_port, json_lines, sas_token, wait_until  # noqa: E402,F401


@pytest.fixture(scope="module")
def hub():
    hub = Hub()
    try:
        assert hub.start_services()
        yield hub
    finally:
        hub.stop_all()
