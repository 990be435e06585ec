"""A running hub for the gateway tests: the real executables on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import (  # noqa: E402,F401
    BIN, POSTGRES, ROOT, Hub, answers, free_port, json_lines, postgres_database, sas_token, wait_until)

# For the tests of the PostgreSQL store: they run on the server NH_TEST_POSTGRES names.
needs_postgres = pytest.mark.skipif(not POSTGRES, reason="NH_TEST_POSTGRES is not set: run under Tests/Support/pgserver.py run -- …")


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


def postgres_hub(service):
    """A hub on a new PostgreSQL database, every service started, and a second process of `service`
    ("registry", "publish") on the same store with endpoints of its own, whose settings are in
    `hub.second`; for module fixtures, which stop it."""
    hub = Hub(prefix=f"nh-pg-{service}-", settings={"NH_STORE": postgres_database(f"nh_{service}")})
    section = service.upper()
    hub.second = {f"NH_{section}_REQUESTS": f"tcp://127.0.0.1:{free_port()}", f"NH_{section}_EVENTS": f"tcp://127.0.0.1:{free_port()}"}
    assert hub.start_services()
    hub.start(f"nh-{service}-2", f"nh-{service}", env=hub.second)
    return hub


@pytest.fixture(scope="module")
def standins():
    """Stand-in APNs, FCM and Web Push services on loopback (Tests/Support/pushstandins.py)."""
    from pushstandins import StandIns
    with StandIns() as running:
        yield running
