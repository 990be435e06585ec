"""The dispatcher's connections to a push service that is slow or stuck, against the APNs stand-in:

- a service that allows few streams and answers slowly gets every request once: a request waits
  in the dispatcher until a stream is free, so its timeout runs from when it goes out, and more
  connections are opened (up to push.connectionsPerHost) as streams fill;
- a connection that stops answering is closed after push.stallMs, and its requests go out again
  on a new one, each delivered once: on HTTP/2 (APNs) and on HTTP/1.1 (WNS), where a connection
  carries one request at a time."""
import collections
import os
import subprocess

import pytest

from conftest import Hub, wait_until
from test_push import (APPLE_TEMPLATE, WNS_HEADERS, WNS_TEMPLATE, dispatcher, platform_counts, push_config, register, send, token,
                       wait_indexed, write_config)


@pytest.fixture(scope="module")
def standins():
    from pushstandins import StandIns
    with StandIns() as running:
        yield running


@pytest.fixture(scope="module")
def hub(standins):
    hub = Hub(prefix="nh-pushconn-")
    hub.env["NH_CONFIG"] = write_config(hub, push_config(
        standins, connectionsPerHost=4, streamsPerConnection=10, timeoutMs=5_000, stallMs=2_000))
    assert hub.start_services()
    yield hub
    hub.stop_all()


def apple_answers(standins, tokens):
    """How many answers each device got, by status."""
    counts = collections.defaultdict(collections.Counter)
    for record in standins.apple.records():
        if record["token"] in tokens:
            counts[record["token"]][record["status"]] += 1
    return counts


def test_a_slow_service_with_few_streams_gets_each_request_once(hub, standins):
    # Ten streams a connection, half a second an answer: one connection answers 20 a second, so 120
    # requests sent at once would wait up to 6 s for theirs, past the 5 s timeout.
    standins.apple.slow(max_streams=10, answer_delay=0.5)
    devices = [token(1000 + i) for i in range(120)]
    before = int(dispatcher(hub).get("installations", 0))
    connections = standins.apple.stats()["connections"]
    for i, device in enumerate(devices):
        register(hub, f"slow-{i}", "apns", device, APPLE_TEMPLATE, ["Slow"])
    wait_indexed(hub, before, len(devices))
    response = send(hub, "Slow", {"message": "slowly"})
    assert wait_until(lambda: platform_counts(hub, response, "apns").get("Success", 0) == len(devices), timeout=60), \
        platform_counts(hub, response, "apns")
    answers = apple_answers(standins, set(devices))
    sent_twice = {device: dict(c) for device, c in answers.items() if sum(c.values()) != 1}
    assert not sent_twice, f"{len(sent_twice)} devices got their notification more than once: {list(sent_twice.items())[:3]}"
    assert all(answers[device][200] == 1 for device in devices)
    # More connections were opened as the streams of the first filled, up to the setting.
    opened = standins.apple.stats()["connections"] - connections
    assert 2 <= opened <= 4, opened
    standins.apple.slow()


def test_a_connection_that_stops_answering_is_replaced(hub, standins):
    devices = [token(2000 + i) for i in range(5)]
    before = int(dispatcher(hub).get("installations", 0))
    for i, device in enumerate(devices):
        register(hub, f"stuck-{i}", "apns", device, APPLE_TEMPLATE, ["Stuck"])
    wait_indexed(hub, before, len(devices))
    first = send(hub, "Stuck", {"message": "before"})
    assert wait_until(lambda: platform_counts(hub, first, "apns").get("Success", 0) == len(devices), timeout=30)
    # The connections open now read every request and answer none.
    standins.apple.hang()
    stalls = int(dispatcher(hub).get("pushStalls", 0))
    connections = standins.apple.stats()["connections"]
    response = send(hub, "Stuck", {"message": "after"})
    # The requests on the stuck connection get no answer; after stallMs (before their timeout) it is
    # shut down and they go out again on a new connection.
    assert wait_until(lambda: platform_counts(hub, response, "apns").get("Success", 0) == len(devices), timeout=25), \
        (platform_counts(hub, response, "apns"), standins.apple.stats())
    assert standins.apple.stats()["connections"] > connections
    assert int(dispatcher(hub).get("pushStalls", 0)) > stalls
    answered = [r for r in standins.apple.records() if r["token"] in set(devices) and r["status"] == 200]
    # Each device answered once for each send; the stuck connection recorded nothing it answered.
    assert collections.Counter(r["token"] for r in answered) == {device: 2 for device in devices}


def test_a_wns_connection_that_stops_answering_is_replaced(hub, standins):
    """WNS speaks HTTP/1.1: each connection carries one request at a time, and the requests past the
    connections wait in the dispatcher, their timeouts not yet running."""
    channels = [standins.wns.channel() for _ in range(6)]
    before = int(dispatcher(hub).get("installations", 0))
    for i, channel in enumerate(channels):
        register(hub, f"stuck-windows-{i}", "wns", channel, WNS_TEMPLATE, ["StuckWindows"], template_headers=WNS_HEADERS)
    wait_indexed(hub, before, len(channels))
    first = send(hub, "StuckWindows", {"message": "before"})
    assert wait_until(lambda: platform_counts(hub, first, "wns").get("Success", 0) == len(channels), timeout=30), \
        platform_counts(hub, first, "wns")
    assert all(r["http"] == "HTTP/1.1" for r in standins.wns.records() if r["kind"] == "send")
    standins.wns.hang()
    stalls = int(dispatcher(hub).get("pushStalls", 0))
    connections = standins.wns.stats()["connections"]
    response = send(hub, "StuckWindows", {"message": "after"})
    assert wait_until(lambda: platform_counts(hub, response, "wns").get("Success", 0) == len(channels), timeout=25), \
        (platform_counts(hub, response, "wns"), standins.wns.stats())
    assert standins.wns.stats()["connections"] > connections
    assert int(dispatcher(hub).get("pushStalls", 0)) > stalls
    answered = collections.Counter(r["channel"] for r in standins.wns.records() if r["kind"] == "send" and r["status"] == 200)
    assert answered == {channel: 2 for channel in channels}, answered

