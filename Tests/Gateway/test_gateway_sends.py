"""Sends over REST are answered by the gateway's loop, without a worker thread: a send is accepted
while the only worker waits on a service that does not answer, many connections at once get every
send accepted once, and a send the publish service does not answer gets 503, and its retry with
the same idempotency key gets the same notification."""
import concurrent.futures
import json
import os
import threading

import pytest
import requests

from conftest import Hub, answers, wait_until

API = "api-version=2015-01"


@pytest.fixture(scope="module")
def hub():
    # One worker thread, and no dispatcher: a request a worker answers by asking the dispatcher
    # holds the only worker for the whole request timeout.
    hub = Hub(prefix="nh-gateway-sends-", settings={"NH_LIMITS_HTTP_THREADS": "1", "NH_REQUEST_TIMEOUT_MS": "6000"})
    for name in ["nh-registry", "nh-sync", "nh-publish", "nh-gateway"]:
        hub.start(name)
    assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")))
    assert wait_until(lambda: answers(hub)), hub.describe("nh-gateway")
    assert wait_until(lambda: send(hub, "warm").status_code == 201), hub.describe("nh-publish")
    yield hub
    hub.stop_all()


def send(hub, text, key=None, session=requests):
    headers = {"Authorization": hub.token(), "Content-Type": "application/json",
               "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "Sends"}
    if key:
        headers["ServiceBusNotification-IdempotencyKey"] = key
    return session.post(f"{hub.base}/hub/messages?{API}", headers=headers, data=json.dumps({"message": text}), timeout=30)


def test_a_send_is_answered_while_the_only_worker_waits(hub):
    waiting = {}

    def ask_dispatcher():
        waiting["status"] = requests.get(f"{hub.base}/hub/pns?{API}", headers={"Authorization": hub.token()}, timeout=30).status_code

    worker = threading.Thread(target=ask_dispatcher)
    worker.start()
    # The dispatcher never answers, so the request holds the worker for the request timeout (6 s).
    worker.join(0.5)
    assert worker.is_alive()
    r = send(hub, "while the worker waits")
    assert r.status_code == 201, r.text
    assert r.headers["Location"].startswith(f"{hub.base}/hub/messages/")
    # Answered before the worker's request: the send did not queue behind it.
    assert worker.is_alive(), "the send was answered only after the worker's request"
    worker.join(30)
    assert waiting["status"] == 503


def test_many_connections_at_once_get_every_send_accepted_once(hub):
    def connection(index):
        with requests.Session() as session:
            return [send(hub, f"connection {index} send {n}", session=session) for n in range(20)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        answers_ = [r for rs in pool.map(connection, range(32)) for r in rs]
    assert [r.status_code for r in answers_] == [201] * 640, {r.status_code: r.text for r in answers_ if r.status_code != 201}
    ids = {r.headers["TrackingId"] for r in answers_}
    assert len(ids) == 640


def test_bad_sends_are_answered_at_once_with_what_to_fix(hub):
    headers = {"Authorization": hub.token(), "Content-Type": "application/json", "ServiceBusNotification-Format": "template"}
    r = requests.post(f"{hub.base}/hub/messages?{API}", headers=headers, data='{"message": 1}', timeout=10)
    assert r.status_code == 400 and "must be a string" in r.text, r.text
    r = requests.post(f"{hub.base}/hub/messages?{API}", headers=headers, data="[]", timeout=10)
    assert r.status_code == 400 and "JSON object" in r.text, r.text
    r = requests.post(f"{hub.base}/hub/messages?{API}", headers={**headers, "Authorization": "SharedAccessSignature sr=x"},
                      data="{}", timeout=10)
    assert r.status_code == 401, r.text
    r = requests.post(f"{hub.base}/hub/messages?api-version=1999-01", headers=headers, data="{}", timeout=10)
    assert r.status_code == 400 and "api-version" in r.text, r.text
    r = requests.post(f"{hub.base}/hub/messages?{API}", headers={**headers, "ServiceBusNotification-Tags": "(a && "},
                      data='{"message": "x"}', timeout=10)
    assert r.status_code == 400, r.text


def test_a_send_the_publish_service_does_not_answer_gets_503_and_its_retry_gets_the_same_notification(hub):
    hub.stop("nh-publish")
    r = send(hub, "while publish is down", key="retry-once")
    assert r.status_code == 503, r.text
    assert r.headers.get("Retry-After") == "1"
    assert "no reply" in r.text
    hub.start("nh-publish")
    assert wait_until(lambda: send(hub, "while publish is down", key="retry-once").status_code == 201, timeout=30), \
        hub.describe("nh-publish")
    first = send(hub, "while publish is down", key="retry-once")
    again = send(hub, "while publish is down", key="retry-once")
    assert first.status_code == again.status_code == 201
    assert first.headers["TrackingId"] == again.headers["TrackingId"]
