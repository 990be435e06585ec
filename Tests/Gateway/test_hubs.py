"""Many hubs in one namespace, as a backend and an operator meet them: hubs made, listed, rotated
and deleted over REST and with nhctl, with a namespace key; and two hubs with the same installation
ids, tags and user names, sealed from each other over REST, over the bus and at the agents."""
import json
import os
import subprocess
import time

import pytest
import requests

from conftest import BIN, free_port, json_lines, running_hub, sas_token, wait_until

API = "api-version=2015-01"
OTHER = "news-b"
FULL = "DefaultFullSharedAccessSignature"
LISTEN = "DefaultListenSharedAccessSignature"


@pytest.fixture(scope="module")
def hub():
    yield from running_hub("nh-hubs-")


def root_token(hub):
    """A token of the namespace's root key, for the whole namespace."""
    with open(os.path.join(hub.data, "namespace-keys.json")) as f:
        key = next(k["key"] for k in json.load(f)["keys"] if k["name"] == "RootManageSharedAccessKey")
    return sas_token(f"{hub.base}/", "RootManageSharedAccessKey", key)


def namespace(hub, method, path, token=None, body=None):
    """A request to the namespace's hubs, signed with the root key unless `token` says otherwise ("" for none)."""
    token = root_token(hub) if token is None else token
    headers = {"Content-Type": "application/json", **({"Authorization": token} if token else {})}
    return requests.request(method, f"{hub.base}/$namespace/notificationHubs{path}", headers=headers,
                            data=json.dumps(body) if body is not None else None, timeout=10)


def list_keys(hub, name, rule=FULL):
    r = namespace(hub, "POST", f"/{name}/authorizationRules/{rule}/listKeys")
    assert r.status_code == 200, r.text
    return r.json()


def token_of(hub, name, keys, which="primaryKey"):
    return sas_token(f"{hub.base}/{name}", keys["keyName"], keys[which])


def nhctl(hub, *arguments, env=None):
    return subprocess.run([os.path.join(BIN, "nhctl"), *arguments], env={**hub.env, **(env or {})}, capture_output=True, text=True,
                          timeout=30)


def known_to_gateway(hub, name, token):
    """The gateway has read the hub from the catalog: a request for it reaches the registry."""
    r = requests.get(f"{hub.base}/{name}/installations/nobody?{API}", headers={"Authorization": token}, timeout=10)
    return r.status_code == 404 and "no hub" not in r.text


@pytest.fixture(scope="module")
def other(hub):
    """The second hub, made over REST, with its full and listen keys."""
    r = namespace(hub, "PUT", f"/{OTHER}")
    assert r.status_code == 201, r.text
    full, listen = list_keys(hub, OTHER), list_keys(hub, OTHER, LISTEN)
    assert wait_until(lambda: known_to_gateway(hub, OTHER, token_of(hub, OTHER, full)))
    return {"full": full, "listen": listen}


def start_agent(hub, name, env):
    """An agent subscribed to World with installation id "dup", in a home of its own; its output file."""
    home = os.path.join(hub.data, name)
    env = {"NH_AGENT_HOME": home, "NH_AGENT_INSTALLATION_ID": "dup", "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", **env}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "World"], env={**hub.env, **env}, check=True, capture_output=True)
    output = os.path.join(hub.data, f"{name}.jsonl")
    hub.start(name, "nh-agent", env=env, stdout=open(output, "ab"))
    return output


@pytest.fixture(scope="module")
def agents(hub, other):
    """An agent of each hub, both installation "dup" with the tag World, both connected."""
    home = start_agent(hub, "agent-home", {})
    theirs = start_agent(hub, "agent-other", {"NH_AGENT_CONNECTION_STRING": other["listen"]["primaryConnectionString"]})
    for name, token in [("hub", hub.token()), (OTHER, token_of(hub, OTHER, other["full"]))]:
        assert wait_until(lambda: requests.get(f"{hub.base}/{name}/installations/dup?{API}", headers={"Authorization": token}).status_code == 200,
                          timeout=30), hub.describe("agent-other")
    assert wait_until(lambda: 'nh_agents{service="nh-dispatch"} 2' in requests.get(f"{hub.base}/metrics").text)
    return {"hub": home, OTHER: theirs}


def send(hub, name, token, text, tags="World"):
    return requests.post(f"{hub.base}/{name}/messages?{API}", data=json.dumps({"messageParam": text}), timeout=10,
                         headers={"Authorization": token, "Content-Type": "application/json",
                                  "ServiceBusNotification-Format": "template", "ServiceBusNotification-Tags": tags})


def messages(output):
    return [line.get("payload", {}).get("message") for line in json_lines(output)]


def test_hub_management_over_rest(hub):
    assert namespace(hub, "PUT", "/made-here", token="").status_code == 401
    # A hub's own key, even its full key, does not manage hubs.
    r = namespace(hub, "PUT", "/made-here", token=sas_token(f"{hub.base}/", FULL, hub.keys()[FULL]))
    assert r.status_code == 401 and "namespace" in r.text, r.text
    r = namespace(hub, "PUT", "/-made")
    assert r.status_code == 400 and "start and end" in r.text, r.text
    r = namespace(hub, "PUT", "/made-here")
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["name"] == "made-here" and made["type"] == "Microsoft.NotificationHubs/namespaces/notificationHubs"
    assert sorted(rule["keyName"] for rule in made["properties"]["authorizationRules"]) == [FULL, LISTEN]
    assert namespace(hub, "PUT", "/made-here").status_code == 200
    names = [item["name"] for item in namespace(hub, "GET", "").json()["value"]]
    assert names[0] == "hub" and "made-here" in names
    keys = list_keys(hub, "made-here")
    assert keys["primaryKey"] != keys["secondaryKey"] and keys["primaryConnectionString"].endswith(";EntityPath=made-here")
    r = namespace(hub, "PUT", "/made-here/authorizationRules/Backend", body={"properties": {"rights": ["Send"]}})
    assert r.status_code == 200 and r.json()["properties"]["rights"] == ["Send"], r.text
    rules = namespace(hub, "GET", "/made-here/authorizationRules").json()["value"]
    assert sorted(rule["name"] for rule in rules) == ["Backend", FULL, LISTEN]
    assert namespace(hub, "DELETE", "/made-here/authorizationRules/Backend").status_code == 200
    r = requests.get(f"{hub.base}/nope/installations/x?{API}", headers={"Authorization": hub.token()}, timeout=10)
    assert r.status_code == 404 and "no hub 'nope'" in r.text, r.text
    assert namespace(hub, "DELETE", "/hub").status_code == 400
    assert namespace(hub, "DELETE", "/made-here").status_code == 200
    assert namespace(hub, "GET", "/made-here").status_code == 404


def test_a_broadcast_reaches_its_own_hubs_agents_alone(hub, other, agents):
    theirs = token_of(hub, OTHER, other["full"])
    r = send(hub, OTHER, theirs, "to-other")
    assert r.status_code == 201, r.text
    assert send(hub, "hub", hub.token(), "to-home").status_code == 201
    assert wait_until(lambda: "to-other" in messages(agents[OTHER]) and "to-home" in messages(agents["hub"]))
    time.sleep(1)
    assert "to-home" not in messages(agents[OTHER]) and "to-other" not in messages(agents["hub"])
    # The outcome is read in its own hub; the other hub does not know the notification.
    location = r.headers["Location"]
    def state():
        r = requests.get(location, headers={"Authorization": theirs, "Accept": "application/json"}, timeout=10)
        return r.json().get("state") if r.status_code == 200 else r.status_code

    assert wait_until(lambda: state() == "Completed"), state()
    notification = location.rsplit("/", 1)[1].split("?")[0]
    assert requests.get(f"{hub.base}/hub/messages/{notification}?{API}", headers={"Authorization": hub.token()}).status_code == 404
    # Each service counts the requests it answered by hub.
    metrics = requests.get(f"{hub.base}/metrics").text
    assert f'nh_hub_requests_total{{service="nh-publish",hub="{OTHER}"}}' in metrics, metrics
    assert 'nh_hub_requests_total{service="nh-publish",hub="hub"}' in metrics


def test_a_key_of_one_hub_is_refused_by_the_other(hub, other, agents):
    theirs = token_of(hub, OTHER, other["full"])
    assert send(hub, OTHER, hub.token(resource=f"{hub.base}/{OTHER}"), "x").status_code == 401
    assert send(hub, "hub", theirs, "x").status_code == 401
    # The other hub's key signing for this hub's address is unknown here too.
    forged = sas_token(f"{hub.base}/hub", FULL, other["full"]["primaryKey"])
    assert send(hub, "hub", forged, "x").status_code == 401
    listen = token_of(hub, OTHER, other["listen"])
    assert requests.get(f"{hub.base}/hub/installations/dup?{API}", headers={"Authorization": listen}).status_code == 401
    body = {"installationId": "dup", "platform": "apns", "pushChannel": "AB", "tags": ["Stolen"]}
    r = requests.put(f"{hub.base}/hub/installations/dup?{API}", data=json.dumps(body),
                     headers={"Authorization": sas_token(f"{hub.base}/hub", LISTEN, other["listen"]["primaryKey"]), "Content-Type": "application/json"})
    assert r.status_code == 401
    # Each hub's "dup" is its own.
    mine = requests.get(f"{hub.base}/hub/installations/dup?{API}", headers={"Authorization": hub.token()}).json()
    yours = requests.get(f"{hub.base}/{OTHER}/installations/dup?{API}", headers={"Authorization": theirs}).json()
    assert mine["pushChannel"] != yours["pushChannel"] and mine["tags"] == yours["tags"] == ["World"]


def test_users_of_the_same_name_are_different_users(hub, other, agents):
    def credential(*hub_option):
        issued = nhctl(hub, "--json", *hub_option, "user", "credential", "alice")
        assert issued.returncode == 0, issued.stderr
        return json.loads(issued.stdout)["credential"]

    def token(name, credential):
        r = requests.post(f"{hub.base}/{name}/users/tokens?{API}", data=json.dumps({"credential": credential}), timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["token"]

    theirs_credential, mine_credential = credential("--hub", OTHER), credential()
    r = requests.post(f"{hub.base}/{OTHER}/users/alice/notifications?{API}", data=json.dumps({"appNotificationId": "b-1", "raw": "for B's alice"}),
                      headers={"Authorization": token_of(hub, OTHER, other["full"]), "Content-Type": "application/json"}, timeout=10)
    assert r.status_code in (200, 201), r.text
    theirs, mine = token(OTHER, theirs_credential), token("hub", mine_credential)

    def notifications(name, token):
        return requests.get(f"{hub.base}/{name}/users/me/notifications?{API}", headers={"Authorization": f"Bearer {token}"}, timeout=10)

    assert [n["notification"]["raw"] for n in notifications(OTHER, theirs).json()["changes"]] == ["for B's alice"]
    assert notifications("hub", mine).json()["changes"] == []
    # A user token, or credential, of one hub's alice is refused at the other hub, its stream too.
    assert notifications("hub", theirs).status_code == 401
    r = requests.get(f"{hub.base}/hub/users/me/notifications/stream?{API}&access_token={theirs}", stream=True, timeout=10)
    assert r.status_code == 401, r.status_code
    r.close()
    r = requests.post(f"{hub.base}/hub/users/tokens?{API}", data=json.dumps({"credential": theirs_credential}), timeout=10)
    assert r.status_code == 401, r.text


def test_each_hub_has_its_own_push_credentials(hub, other, agents):
    theirs = token_of(hub, OTHER, other["full"])
    body = json.dumps({"subject": "mailto:ops@example.org"})
    r = requests.put(f"{hub.base}/{OTHER}/pns/browser?{API}", data=body, headers={"Authorization": theirs, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert requests.get(f"{hub.base}/hub/pns/browser/key?{API}", headers={"Authorization": hub.token()}).status_code == 404
    r = requests.put(f"{hub.base}/hub/pns/browser?{API}", data=body, headers={"Authorization": hub.token(), "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    keys = [requests.get(f"{hub.base}/{name}/pns/browser/key?{API}", headers={"Authorization": token}).json()["publicKey"]
            for name, token in [("hub", hub.token()), (OTHER, theirs)]]
    assert keys[0] != keys[1]
    # One hub's key neither reads nor sets the other's.
    assert requests.get(f"{hub.base}/hub/pns?{API}", headers={"Authorization": sas_token(f"{hub.base}/hub", FULL, other["full"]["primaryKey"])}).status_code == 401
    assert requests.delete(f"{hub.base}/hub/pns/browser?{API}", headers={"Authorization": hub.token()}).status_code == 200
    assert requests.get(f"{hub.base}/{OTHER}/pns/browser/key?{API}", headers={"Authorization": theirs}).status_code == 200


def test_a_regenerated_key_is_refused_and_the_other_keeps_working(hub, other, agents):
    keys = other["full"]
    old, secondary = token_of(hub, OTHER, keys), token_of(hub, OTHER, keys, "secondaryKey")
    url = f"{hub.base}/{OTHER}/installations/dup?{API}"
    assert requests.get(url, headers={"Authorization": old}).status_code == 200
    r = namespace(hub, "POST", f"/{OTHER}/authorizationRules/{FULL}/regenerateKeys", body={"policyKey": "PrimaryKey"})
    assert r.status_code == 200, r.text
    fresh = r.json()
    assert fresh["primaryKey"] != keys["primaryKey"] and fresh["secondaryKey"] == keys["secondaryKey"]
    assert wait_until(lambda: requests.get(url, headers={"Authorization": old}).status_code == 401)
    assert requests.get(url, headers={"Authorization": secondary}).status_code == 200
    assert requests.get(url, headers={"Authorization": token_of(hub, OTHER, fresh)}).status_code == 200
    other["full"] = fresh


def test_a_hub_made_or_a_key_regenerated_holds_at_once_for_every_service(hub):
    """Once the namespace answers, every service has read the change to the hub catalog: the next
    request finds the hub, or is refused with the old key, whichever service it reaches, with no
    waiting on the caller's side. Made over REST and with nhctl."""
    def first_requests(name, token):
        headers = {"Authorization": token, "Content-Type": "application/json"}
        posted = requests.post(f"{hub.base}/{name}/users/ann/notifications?{API}", headers=headers, timeout=10,
                               data=json.dumps({"appNotificationId": "first", "visual": {"title": "t", "body": "b"}}))
        assert posted.status_code == 201, posted.text                     # gateway, publish, sync
        installed = requests.put(f"{hub.base}/{name}/installations/first?{API}", headers=headers, timeout=10,
                                 data=json.dumps({"installationId": "first", "platform": "linux", "pushChannel": "first"}))
        assert installed.status_code == 200, installed.text               # registry
        sent = send(hub, name, token, "first")
        assert sent.status_code == 201, sent.text                         # publish
        outcome = requests.get(sent.headers["Location"], headers=headers, timeout=10)
        assert outcome.status_code == 200, outcome.text                   # dispatch
        return headers

    for round_ in range(3):
        name = f"at-once-{round_}"
        assert namespace(hub, "PUT", f"/{name}").status_code == 201
        keys = list_keys(hub, name)
        first_requests(name, token_of(hub, name, keys))
        r = namespace(hub, "POST", f"/{name}/authorizationRules/{FULL}/regenerateKeys", body={"policyKey": "PrimaryKey"})
        assert r.status_code == 200, r.text
        old = requests.get(f"{hub.base}/{name}/installations/first?{API}", headers={"Authorization": token_of(hub, name, keys)}, timeout=10)
        assert old.status_code == 401, old.text
        first_requests(name, token_of(hub, name, r.json()))

        made = nhctl(hub, "hub", "create", f"ctl-{name}")
        assert made.returncode == 0, made.stderr
        strings = {json.loads(line)["keyName"]: json.loads(line) for line in nhctl(hub, "--json", "hub", "keys", f"ctl-{name}").stdout.splitlines()}
        first_requests(f"ctl-{name}", token_of(hub, f"ctl-{name}", strings[FULL]))


def test_nhctl_makes_lists_and_deletes_hubs(hub):
    made = nhctl(hub, "hub", "create", "ctl-made")
    assert made.returncode == 0 and "EntityPath=ctl-made" in made.stdout, made.stderr
    assert nhctl(hub, "hub", "create", "bad/name").returncode != 0
    listed = nhctl(hub, "--json", "hub", "list")
    assert {json.loads(line)["name"] for line in listed.stdout.splitlines()} >= {"hub", "ctl-made"}
    keys = nhctl(hub, "--json", "hub", "keys", "ctl-made")
    assert {json.loads(line)["keyName"] for line in keys.stdout.splitlines()} == {FULL, LISTEN}
    regenerated = nhctl(hub, "hub", "regenerate", "ctl-made", FULL, "secondary")
    assert regenerated.returncode == 0, regenerated.stderr
    # Deleting asks first; without a terminal it needs --yes.
    refused = nhctl(hub, "hub", "delete", "ctl-made")
    assert refused.returncode != 0 and "--yes" in refused.stderr
    assert nhctl(hub, "hub", "delete", "ctl-made", "--yes").returncode == 0
    assert "ctl-made" not in nhctl(hub, "hub", "list").stdout


def test_deleting_a_hub_deletes_what_it_holds(hub, other, agents):
    import sqlite3

    def users_of_other():
        with sqlite3.connect(os.path.join(hub.data, "sync.db")) as db:
            return db.execute("SELECT count(*) FROM users WHERE user_id LIKE ?", (f"{OTHER}/%",)).fetchone()[0]

    assert users_of_other() == 1
    r = namespace(hub, "DELETE", f"/{OTHER}")
    assert r.status_code == 200, r.text
    assert wait_until(lambda: users_of_other() == 0, timeout=10)
    assert wait_until(lambda: requests.get(f"{hub.base}/{OTHER}/installations/dup?{API}",
                                           headers={"Authorization": hub.token()}).status_code == 404)
    assert requests.get(f"{hub.base}/hub/installations/dup?{API}", headers={"Authorization": hub.token()}).status_code == 200
    listed = nhctl(hub, "--json", "hub", "list")
    assert OTHER not in listed.stdout
    # Made again under the same name, it is a new hub: nothing of the old one, nor its old keys.
    assert namespace(hub, "PUT", f"/{OTHER}").status_code == 201
    fresh = list_keys(hub, OTHER)
    assert wait_until(lambda: known_to_gateway(hub, OTHER, token_of(hub, OTHER, fresh)))
    assert requests.get(f"{hub.base}/{OTHER}/installations/dup?{API}", headers={"Authorization": token_of(hub, OTHER, fresh)}).status_code == 404
    assert requests.get(f"{hub.base}/{OTHER}/installations/dup?{API}", headers={"Authorization": token_of(hub, OTHER, other["full"])}).status_code == 401
