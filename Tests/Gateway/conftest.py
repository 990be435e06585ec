"""A running hub for the gateway tests: the real executables on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, ROOT, Hub, answers, free_port, fresh_database, json_lines, sas_token, wait_until  # noqa: E402,F401

# The PostgreSQL server of the tests of a shared store (`make test` starts a throwaway one).
POSTGRES = os.environ.get("NH_TEST_POSTGRES")
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


def shared_store_hub(service, section):
    """Every service started on a new PostgreSQL database, and a second `service` process on the
    same store with endpoints of its own (NH_<section>_REQUESTS and _EVENTS, in hub.second), until
    the generator is closed; for module fixtures."""
    name = service.replace("nh-", "")
    hub = Hub(prefix=f"nh-pg-{name}-", settings={"NH_STORE": fresh_database(POSTGRES, f"nh_{name}")})
    hub.second = {f"NH_{section}_REQUESTS": f"tcp://127.0.0.1:{free_port()}", f"NH_{section}_EVENTS": f"tcp://127.0.0.1:{free_port()}"}
    assert hub.start_services()
    hub.start(f"{service}-2", service, env=hub.second)
    yield hub
    hub.stop_all()
