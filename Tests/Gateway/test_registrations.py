"""The registrations API's reads: $filter finds one registration out of many and a filter the
gateway does not understand is refused (never ignored: a backend deleting what comes back would
delete everyone), $top, and continuation tokens in the header or the query."""
import json
import re
import urllib.parse

import pytest
import requests

API = "api-version=2015-01"


@pytest.fixture(scope="module")
def devices(hub):
    ids = []
    for index in range(12):
        device = f"reg-{index:02d}"
        body = {"installationId": device, "platform": "gcm", "pushChannel": f"handle-{index:02d}",
                "tags": ["RegAll", f"Reg{index % 3}"]}
        r = requests.put(f"{hub.base}/hub/installations/{device}?{API}", data=json.dumps(body),
                         headers={"Authorization": hub.token(), "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        ids.append(device)
    body = {"installationId": "reg-quote", "platform": "gcm", "pushChannel": "it's", "tags": ["RegAll"]}
    assert requests.put(f"{hub.base}/hub/installations/reg-quote?{API}", data=json.dumps(body),
                        headers={"Authorization": hub.token(), "Content-Type": "application/json"}).status_code == 200
    return ids


def registrations(hub, query, headers=None, path="registrations"):
    r = requests.get(f"{hub.base}/hub/{path}?{API}&{query}", headers={"Authorization": hub.token(), **(headers or {})})
    return r, re.findall(r"<RegistrationId>([^<]*)</RegistrationId>", r.text)


@pytest.mark.parametrize("field", ["DeviceToken", "ChannelUri", "GcmRegistrationId", "FcmV1RegistrationId", "devicetoken"])
def test_a_filter_returns_the_one_registration_out_of_many(hub, devices, field):
    r, ids = registrations(hub, "$filter=" + urllib.parse.quote(f"{field} eq 'handle-07'"))
    assert r.status_code == 200, r.text
    assert ids == ["reg-07"]


def test_filters_by_registration_id_and_quoted_values(hub, devices):
    assert registrations(hub, "$filter=" + urllib.parse.quote("RegistrationId eq 'reg-03'"))[1] == ["reg-03"]
    assert registrations(hub, "$filter=" + urllib.parse.quote("RegistrationId eq 'reg-missing'"))[1] == []
    assert registrations(hub, "$filter=" + urllib.parse.quote("ChannelUri eq 'it''s'"))[1] == ["reg-quote"]
    assert registrations(hub, "$filter=" + urllib.parse.quote("ChannelUri eq 'nobody'"))[1] == []
    # With a tag: only that tag's registrations.
    _, ids = registrations(hub, "$filter=" + urllib.parse.quote("DeviceToken eq 'handle-04'"), path="tags/Reg1/registrations")
    assert ids == ["reg-04"]
    _, ids = registrations(hub, "$filter=" + urllib.parse.quote("DeviceToken eq 'handle-04'"), path="tags/Reg2/registrations")
    assert ids == []


@pytest.mark.parametrize("text", [
    "Tags eq 'RegAll'", "DeviceToken ne 'handle-01'", "DeviceToken eq handle-01", "DeviceToken eq 'a' and ChannelUri eq 'b'",
    "startswith(DeviceToken, 'h')", "", "DeviceToken eq ''", "DeviceToken eq 'it's'", "Unknown eq 'x'",
])
def test_a_filter_not_understood_is_refused_never_ignored(hub, devices, text):
    r, ids = registrations(hub, "$filter=" + urllib.parse.quote(text))
    assert r.status_code == 400, r.text
    assert "$filter" in r.text and ids == []


def test_top_and_continuation_in_header_or_query(hub, devices):
    seen, token = [], None
    for _ in range(10):
        headers = {"X-MS-ContinuationToken": token} if token else {}
        r, ids = registrations(hub, "$top=5", headers=headers, path="tags/RegAll/registrations")
        assert r.status_code == 200 and len(ids) <= 5
        seen += ids
        token = r.headers.get("X-MS-ContinuationToken")
        if not token:
            break
    assert sorted(seen) == sorted(devices + ["reg-quote"])
    r, first = registrations(hub, "$top=5", path="tags/RegAll/registrations")
    _, second = registrations(hub, "$top=5&ContinuationToken=" + urllib.parse.quote(r.headers["X-MS-ContinuationToken"]),
                              path="tags/RegAll/registrations")
    assert second and not set(first) & set(second) and second[0] > first[-1]
    for bad in ["$top=0", "$top=1001", "$top=x"]:
        assert registrations(hub, bad)[0].status_code == 400
