"""The registrations API's reads: $filter finds one registration out of many and a filter the
gateway does not understand is refused (never ignored: a backend deleting what comes back would
delete everyone), $top, and continuation tokens in the header or the query."""
import json
import re
import time
import urllib.parse

import pytest
import requests

from conftest import wait_until

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


def test_the_js_sdks_joined_filters_for_browsers_and_baidu(hub):
    browser = {"installationId": "reg-browser", "platform": "browser", "tags": ["RegJs"],
               "pushChannel": {"endpoint": "https://push.example.org/js/1", "p256dh": "BCVxP", "auth": "BTBZA"}}
    baidu = {"installationId": "reg-baidu", "platform": "baidu", "tags": ["RegJs"], "pushChannel": "user7-chan9"}
    for body in (browser, baidu):
        r = requests.put(f"{hub.base}/hub/installations/{body['installationId']}?{API}", data=json.dumps(body),
                         headers={"Authorization": hub.token(), "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
    endpoint = urllib.parse.quote("https://push.example.org/js/1", safe="")  # encodeURIComponent, as the JS SDK does
    _, ids = registrations(hub, "$filter=" + urllib.parse.quote(f"Endpoint eq '{endpoint}' and P256DH eq 'BCVxP' and Auth eq 'BTBZA'"))
    assert ids == ["reg-browser"]
    # The JS SDK's Baidu filter, with the opening quote it leaves out.
    _, ids = registrations(hub, "$filter=" + urllib.parse.quote("BaiduChannelId eq chan9' and BaiduUserId eq 'user7'"))
    assert ids == ["reg-baidu"]


@pytest.mark.parametrize("text", [
    "Tags eq 'RegAll'", "DeviceToken ne 'handle-01'", "DeviceToken eq handle-01", "DeviceToken eq 'a' and ChannelUri eq 'b'",
    "Endpoint eq 'https://x' and P256DH eq 'a'", "DeviceToken eq 'a' and DeviceToken eq 'a'",
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


# ---- Writing registrations, with bodies shaped as the REST reference and the SDKs shape them ----

SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
ATOM_ENTRY = {"Content-Type": "application/atom+xml;type=entry;charset=utf-8"}


def entry(description):
    return ('<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom">'
            f'<content type="application/xml">{description}</content></entry>')


def write(hub, method, path, body, **headers):
    return requests.request(method, f"{hub.base}/hub/{path}?{API}", data=body.encode(),
                            headers={"Authorization": hub.token(), **ATOM_ENTRY, **headers})


def installation(hub, ident):
    return requests.get(f"{hub.base}/hub/installations/{ident}?{API}", headers={"Authorization": hub.token()})


def test_create_a_registration_as_the_rest_reference_shows(hub):
    body = entry(f'<AppleRegistrationDescription xmlns:i="{XSI}" xmlns="{SB}"><Tags>myTag, myOtherTag</Tags>'
                 '<DeviceToken>62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA</DeviceToken></AppleRegistrationDescription>')
    r = write(hub, "POST", "registrations", body)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/atom+xml") and re.fullmatch(r'W/"\d+"', r.headers["ETag"])
    ident = re.search(r"<RegistrationId>([^<]+)</RegistrationId>", r.text).group(1)
    assert re.fullmatch(r"\d+-\d+-1", ident) and r.headers["Content-Location"].endswith(f"/registrations/{ident}?api-version=2020-06")
    assert "<AppleRegistrationDescription" in r.text and "<Tags>myTag,myOtherTag</Tags>" in r.text
    assert f'a:etag="W/&quot;{r.headers["ETag"][3:-1]}&quot;"' in r.text and f"<ETag>{r.headers['ETag'][3:-1]}</ETag>" in r.text
    seen = installation(hub, ident).json()
    assert seen["platform"] == "apns" and seen["tags"] == ["myTag", "myOtherTag"]
    assert seen["pushChannel"] == "62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA"
    # Read back, one and by its channel.
    got = requests.get(f"{hub.base}/hub/registrations/{ident}?{API}", headers={"Authorization": hub.token()})
    assert got.status_code == 200 and got.headers["ETag"] == r.headers["ETag"]
    _, ids = registrations(hub, "$filter=" + urllib.parse.quote("ChannelUri eq '62BCD3484834B7E2DC56733AC5509259230CC1BA82BA1AE7D06E91908A05A8FA'"))
    assert ids == [ident]


def test_the_dotnet_base_type_form_with_nil_members(hub):
    body = entry(f'<RegistrationDescription xmlns:i="{XSI}" i:type="AppleTemplateRegistrationDescription" xmlns="{SB}">'
                 '<RegistrationId i:nil="true"/><Tags>tag1</Tags><DeviceToken>AABBCC</DeviceToken>'
                 '<BodyTemplate><![CDATA[{"aps":{"alert":"$(msg)"}}]]></BodyTemplate><Expiry i:nil="true"/><TemplateName i:nil="true"/>'
                 '<ApnsHeaders/></RegistrationDescription>')
    r = write(hub, "POST", "registrations", body)
    assert r.status_code == 200, r.text
    ident = re.search(r"<RegistrationId>([^<]+)</RegistrationId>", r.text).group(1)
    assert "<AppleTemplateRegistrationDescription" in r.text
    assert '<BodyTemplate><![CDATA[{"aps":{"alert":"$(msg)"}}]]></BodyTemplate><TemplateName>template</TemplateName><ApnsHeaders></ApnsHeaders>' in r.text
    assert installation(hub, ident).json()["templates"] == {"template": {"body": '{"aps":{"alert":"$(msg)"}}'}}


def test_registration_id_then_create_or_update_with_etags(hub):
    r = requests.post(f"{hub.base}/hub/registrationIDs?{API}", headers={"Authorization": hub.token()})
    assert r.status_code == 201, r.text
    match = re.fullmatch(r"https?://[^/]+/hub/registrationids/([^?]+)\?api-version=.*", r.headers["Location"])
    assert match, r.headers["Location"]
    ident = match.group(1)
    toast = '<toast><visual><binding template="ToastText01"><text id="1">$(message)</text></binding></visual></toast>'
    body = entry(f'<WindowsTemplateRegistrationDescription xmlns:i="{XSI}" xmlns="{SB}"><Tags>RegWns</Tags>'
                 f'<ChannelUri>https://db5.notify.windows.com/?token=reg</ChannelUri><BodyTemplate><![CDATA[{toast}]]></BodyTemplate>'
                 '<TemplateName>Template Name</TemplateName>'
                 '<WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders>'
                 '</WindowsTemplateRegistrationDescription>')
    created = write(hub, "PUT", f"registrations/{ident}", body)
    assert created.status_code == 200, created.text
    text = created.text
    order = [text.index(e) for e in ["<ETag>", "<RegistrationId>", "<Tags>", "<ChannelUri>", "<BodyTemplate>", "<WnsHeaders>", "<TemplateName>"]]
    assert order == sorted(order), text
    assert "<TemplateName>Template_Name</TemplateName>" in text
    assert "<WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader>" in text
    etag = created.headers["ETag"]

    time.sleep(0.01)
    updated = write(hub, "PUT", f"registrations/{ident}", body.replace("RegWns", "RegWns,Extra"), **{"If-Match": etag})
    assert updated.status_code == 200, updated.text
    assert updated.headers["ETag"] != etag and "<Tags>RegWns,Extra</Tags>" in updated.text
    stale = write(hub, "PUT", f"registrations/{ident}", body, **{"If-Match": etag})
    assert stale.status_code == 412, stale.text
    fresh_quoted = updated.headers["ETag"][2:]  # "n", as .NET sends it
    assert write(hub, "PUT", f"registrations/{ident}", body, **{"If-Match": fresh_quoted}).status_code == 200
    assert write(hub, "PUT", f"registrations/{ident}", body, **{"If-Match": "*"}).status_code == 200
    assert write(hub, "PUT", "registrations/reg-never-made", body, **{"If-Match": "*"}).status_code == 404

    # A template send reaches the registration's template, counted for WNS.
    sent = requests.post(f"{hub.base}/hub/messages?{API}", data=json.dumps({"message": "hello <you>"}), headers={
        "Authorization": hub.token(), "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": "RegWns"})
    assert sent.status_code == 201
    assert wait_until(lambda: requests.get(sent.headers["Location"], headers={"Authorization": hub.token(), "Accept": "application/json"})
                      .json().get("platforms") == {"wns": {"Targets": 1, "PnsUnavailable": 1}})

    current = requests.get(f"{hub.base}/hub/registrations/{ident}?{API}", headers={"Authorization": hub.token()}).headers["ETag"]
    assert requests.delete(f"{hub.base}/hub/registrations/{ident}?{API}",
                           headers={"Authorization": hub.token(), "If-Match": etag}).status_code == 412
    assert requests.delete(f"{hub.base}/hub/registrations/{ident}?{API}",
                           headers={"Authorization": hub.token(), "If-Match": current}).status_code == 200
    assert requests.get(f"{hub.base}/hub/registrations/{ident}?{API}", headers={"Authorization": hub.token()}).status_code == 404


def test_every_platform_as_a_registration(hub):
    cases = [
        ("GcmRegistrationDescription", "<GcmRegistrationId>gcm-r</GcmRegistrationId>", "gcm", "gcm-r"),
        ("FcmV1RegistrationDescription", "<FcmV1RegistrationId>fcm-r</FcmV1RegistrationId>", "fcmv1", "fcm-r"),
        ("AdmRegistrationDescription", "<AdmRegistrationId>adm-r</AdmRegistrationId>", "adm", "adm-r"),
        ("BaiduRegistrationDescription", "<BaiduChannelId>chan</BaiduChannelId><BaiduUserId>user</BaiduUserId>", "baidu", "user-chan"),
        ("BrowserRegistrationDescription",
         "<Endpoint>https://push.example.org/x</Endpoint><P256DH>BCVx</P256DH><Auth>BTBZ</Auth>", "browser",
         '{"auth":"BTBZ","endpoint":"https://push.example.org/x","p256dh":"BCVx"}'),
        ("FcmV1TemplateRegistrationDescription",
         '<FcmV1RegistrationId>fcm-t</FcmV1RegistrationId><BodyTemplate><![CDATA[{"message":{"notification":{"body":"$(m)"}}}]]></BodyTemplate>',
         "fcmv1", "fcm-t"),
    ]
    for element, members, platform, channel in cases:
        r = write(hub, "POST", "registrations", entry(f'<{element} xmlns:i="{XSI}" xmlns="{SB}"><Tags>RegEvery</Tags>{members}</{element}>'))
        assert r.status_code == 200, (element, r.text)
        assert f"<{element} " in r.text
        ident = re.search(r"<RegistrationId>([^<]+)</RegistrationId>", r.text).group(1)
        seen = installation(hub, ident).json()
        assert (seen["platform"], seen["pushChannel"]) == (platform, channel), element


@pytest.mark.parametrize("body,status,words", [
    (entry(f'<MpnsRegistrationDescription xmlns="{SB}"><ChannelUri>https://x</ChannelUri></MpnsRegistrationDescription>'), 400, "not a registration this hub takes"),
    (entry(f'<AppleRegistrationDescription xmlns="{SB}"><Tags>a</Tags></AppleRegistrationDescription>'), 400, "needs <DeviceToken>"),
    (entry(f'<WindowsRegistrationDescription xmlns="{SB}"><ChannelUri>https://hub.attacker.example/w</ChannelUri></WindowsRegistrationDescription>'),
     400, ".notify.windows.com/"),
    (entry(f'<WindowsTemplateRegistrationDescription xmlns="{SB}"><ChannelUri>https://db5.notify.windows.com/?token=x</ChannelUri><BodyTemplate>not xml</BodyTemplate>'
           '<WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders></WindowsTemplateRegistrationDescription>'), 400, "must be XML"),
    (entry(f'<AppleTemplateRegistrationDescription xmlns="{SB}"><DeviceToken>AA</DeviceToken></AppleTemplateRegistrationDescription>'), 400, "needs <BodyTemplate>"),
    (entry(f'<AppleRegistrationDescription xmlns="{SB}"><Tags>bad tag</Tags><DeviceToken>AA</DeviceToken></AppleRegistrationDescription>'), 400, "tag"),
    ("not xml at all", 400, "not XML"),
    ('<entry xmlns="http://www.w3.org/2005/Atom"><title>no content</title></entry>', 400, "registration description"),
    (entry('<Something xmlns="x"/>'), 400, "not a registration description"),
])
def test_a_registration_the_hub_cannot_take_is_refused(hub, body, status, words):
    r = write(hub, "POST", "registrations", body)
    assert r.status_code == status, r.text
    assert words in r.text.replace("&lt;", "<").replace("&gt;", ">"), r.text


def test_a_listen_key_may_register_but_not_list(hub):
    listen = hub.token("DefaultListenSharedAccessSignature")
    body = entry(f'<GcmRegistrationDescription xmlns="{SB}"><GcmRegistrationId>listen-r</GcmRegistrationId></GcmRegistrationDescription>')
    r = requests.post(f"{hub.base}/hub/registrations?{API}", data=body, headers={"Authorization": listen, **ATOM_ENTRY})
    assert r.status_code == 200, r.text
    assert requests.get(f"{hub.base}/hub/registrations?{API}", headers={"Authorization": listen}).status_code == 401
