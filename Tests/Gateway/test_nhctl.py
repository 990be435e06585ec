"""The same flow as the REST tests, through nhctl: send to an expression, the agent receives it,
outcome, schedule and cancel, a scheduled send that fires, direct send, list, delete, user posts."""
import datetime
import glob
import json
import os
import re
import subprocess
import tempfile

import pytest
import requests

from conftest import BIN, ROOT, free_port, json_lines, wait_until


def nhctl(hub, *arguments):
    result = subprocess.run([os.path.join(BIN, "nhctl"), *arguments, "--json"], env=hub.env, capture_output=True,
                            text=True, timeout=30)
    return result


def swift_sources(folder):
    """The text of every Swift file of a folder under Services/."""
    return "".join(open(path).read() for path in sorted(glob.glob(os.path.join(ROOT, "Services", folder, "*.swift"))))


@pytest.fixture(scope="module")
def agent(hub):
    output = os.path.join(hub.data, "ctl-agent.jsonl")
    home = os.path.join(hub.data, "ctl-agent")
    env = {"NH_AGENT_HOME": home, "NH_AGENT_INSTALLATION_ID": "ctl-device",
           "NH_AGENT_TEMPLATE": '{"aps":{"alert":"$(messageParam)"}}'}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "World"], env={**hub.env, **env}, check=True, capture_output=True)
    hub.start("ctl-agent", "nh-agent", env=env, stdout=open(output, "ab"))
    assert wait_until(lambda: nhctl(hub, "installations", "show", "ctl-device").returncode == 0)
    assert wait_until(lambda: 'nh_agents{service="nh-dispatch"} 1' in requests.get(f"{hub.base}/metrics").text)
    return output


def shard_of(installation):
    """The shard of an installation id, as the dispatchers compute it: FNV-1a (64-bit) modulo 64."""
    value = 0xcbf29ce484222325
    for byte in installation.encode():
        value = ((value ^ byte) * 0x100000001b3) % (1 << 64)
    return value % 64


def outcome(hub, notification):
    result = nhctl(hub, "outcome", notification)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def test_send_outcome_schedule_direct_list_delete(hub, agent):
    sent = nhctl(hub, "send", "--tag", "World && !Sports", "messageParam=Breaking World News!")
    assert sent.returncode == 0, sent.stderr
    notification = json.loads(sent.stdout)["notificationId"]
    assert wait_until(lambda: any(l.get("payload", {}).get("aps", {}).get("alert") == "Breaking World News!" for l in json_lines(agent)))
    assert wait_until(lambda: outcome(hub, notification).get("state") == "Completed"
                      and outcome(hub, notification).get("acknowledged") == 1)

    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    scheduled = json.loads(nhctl(hub, "send", "--tag", "World", "--schedule", later, "messageParam=never").stdout)
    assert scheduled["state"] == "Scheduled"
    assert nhctl(hub, "cancel", scheduled["notificationId"]).returncode == 0
    assert outcome(hub, scheduled["notificationId"])["state"] == "Canceled"
    assert nhctl(hub, "cancel", scheduled["notificationId"]).returncode == 1

    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fires = json.loads(nhctl(hub, "send", "--tag", "World", "--schedule", soon, "messageParam=on schedule").stdout)
    assert wait_until(lambda: any(l.get("payload", {}).get("aps", {}).get("alert") == "on schedule" for l in json_lines(agent)), timeout=15)
    assert wait_until(lambda: outcome(hub, fires["notificationId"]).get("state") == "Completed")

    direct = nhctl(hub, "send", "--direct", "ctl-device", "--native", '{"message":"just you"}')
    assert direct.returncode == 0, direct.stderr
    assert wait_until(lambda: any(l.get("payload", {}).get("message") == "just you" for l in json_lines(agent)))

    # Where it is served: its shard (FNV-1a of the id, modulo 64) and the dispatcher, in nhctl and in the agent's health.
    shown = json.loads(nhctl(hub, "installations", "show", "ctl-device").stdout)
    assert shown["tags"] == ["World"] or "World" in shown["tags"]
    assert shown["placement"] == {"installationId": "ctl-device", "shard": shard_of("ctl-device"), "connected": True,
                                  "servedBy": hub.env["NH_DISPATCH_AGENTS"], "askedDispatcher": hub.env["NH_DISPATCH_AGENTS"]}
    health = subprocess.run([os.path.join(BIN, "nh-agent"), "health"], env={**hub.env, "NH_AGENT_HOME": os.path.join(hub.data, "ctl-agent")},
                            capture_output=True, text=True, timeout=30)
    details = dict(line.split(": ", 1) for line in health.stdout.splitlines() if ": " in line)
    assert details.get("shard") == str(shard_of("ctl-device")) and details.get("dispatcher") == hub.env["NH_DISPATCH_AGENTS"], health.stdout

    listed = [json.loads(line) for line in nhctl(hub, "installations", "list", "--tag", "World").stdout.splitlines()]
    assert [i["installationId"] for i in listed] == ["ctl-device"]
    assert nhctl(hub, "installations", "delete", "ctl-device").returncode == 0
    assert nhctl(hub, "installations", "show", "ctl-device").returncode == 1


def test_user_post_and_list(hub):
    posted = nhctl(hub, "user", "post", "carol", "--app-id", "a-1", "--title", "Hello", "--body", "Carol")
    assert posted.returncode == 0, posted.stderr
    listed = [json.loads(line) for line in nhctl(hub, "user", "list", "carol").stdout.splitlines()]
    assert [n["appNotificationId"] for n in listed] == ["a-1"]
    assert listed[0]["readState"] == "unread"


def health(hub, *arguments, env=None):
    result = subprocess.run([os.path.join(BIN, "nhctl"), "health", *arguments], env={**hub.env, **(env or {})},
                            capture_output=True, text=True, timeout=30)
    return result.returncode, result.stdout


def test_health_reports_an_absent_agent_and_fails_on_it_only_when_asked(hub, agent, tmp_path):
    never = {"NH_AGENT_HOME": str(tmp_path / "never")}
    code, text = health(hub, env=never)
    assert code == 0, text
    line = next(l for l in text.splitlines() if l.startswith("nh-agent"))
    assert "no local agent has run" in line and "start one with nh-agent" in line
    assert health(hub, "--agent", env=never)[0] == 1
    code, text = health(hub, "--json", env=never)
    lines = {l["service"]: l for l in map(json.loads, text.splitlines())}
    assert code == 0 and lines["nh-agent"]["status"] == "none"
    assert all(l["status"] == "ok" for name, l in lines.items() if name != "nh-agent")

    # An agent ran with this home once (its device key is there), but none answers now.
    import zmq
    ran = tmp_path / "ran"
    ran.mkdir()
    (ran / "device.pub").write_text(zmq.curve_keypair()[0].decode() + "\n")
    gone = {"NH_AGENT_HOME": str(ran), "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}"}
    code, text = health(hub, "--timeout", "300", env=gone)
    assert code == 0 and "no local agent answers" in text and "start one with nh-agent" in text
    assert health(hub, "--timeout", "300", "--agent", env=gone)[0] == 1

    running = {"NH_AGENT_HOME": os.path.join(hub.data, "ctl-agent")}
    code, text = health(hub, "--agent", env=running)
    assert code == 0, text
    assert re.search(r"^nh-agent\s+ok\b", text, re.M), text


def test_a_data_folder_without_keys_says_what_to_set_and_writes_nothing(tmp_path):
    """nhctl run where no hub keeps its data (another terminal, NH_DATA_DIR unset) names the
    setting to fix, and leaves the folder as it was."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    result = subprocess.run([os.path.join(BIN, "nhctl"), "health"], env={"PATH": os.environ["PATH"], "NH_DATA_DIR": str(folder)},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "NH_DATA_DIR" in result.stderr and "--connection-string" in result.stderr and "cannot write" not in result.stderr, result.stderr
    assert list(folder.iterdir()) == []


def test_errors_and_help(hub):
    bad = nhctl(hub, "send", "--tag", "World &&", "messageParam=x")
    assert bad.returncode == 1 and "invalid_expression" in bad.stderr
    assert nhctl(hub, "frobnicate").returncode == 2
    empty = nhctl(hub, "send", "--tag", "World", "title=ok", "=x")
    assert empty.returncode == 2 and "'=x' has an empty property name" in empty.stderr, empty.stderr
    assert nhctl(hub, "send", "--tag", "World", "=").returncode == 2
    help_text = subprocess.run([os.path.join(BIN, "nhctl"), "send", "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and "--schedule" in help_text.stdout


def test_agent_help_is_the_whole_usage():
    """nh-agent help, --help, -h and run --help print the same text, and it names every command
    and every NH_* variable the agent's sources read."""
    agent = os.path.join(BIN, "nh-agent")
    runs = [subprocess.run([agent, *arguments], capture_output=True, text=True, timeout=10)
            for arguments in (["help"], ["--help"], ["-h"], ["run", "--help"], ["subscribe", "--help"])]
    assert [run.returncode for run in runs] == [0] * len(runs)
    assert len({run.stdout for run in runs}) == 1, [run.stdout[:200] for run in runs]
    text = runs[0].stdout
    sources = swift_sources("Agent")
    commands = {name for group in re.findall(r'case ((?:"[a-z]+"(?:, )?)+):', sources) for name in re.findall(r'"([a-z]+)"', group)}
    assert {"subscribe", "categories", "login", "history"} <= commands
    for command in sorted(commands) + ["run"]:
        assert re.search(rf"nh-agent \[?{command}\b", text), f"nh-agent {command} is not in the usage"
    assert "nh-agent read|dismiss|activate|snooze|delete ID" in text
    for option in ["--config", "--check-config", "--version"]:
        assert option in text
    variables = set(re.findall(r'environment\["(NH_[A-Z_]+)"\]', sources)) | {"NH_BUS_SERVER_KEY", "NH_CONFIG"}
    assert {"NH_AGENT_HOME", "NH_AGENT_RICH_ATTEMPTS", "NH_AGENT_DESKTOP"} <= variables
    assert [name for name in sorted(variables) if name not in text] == []


def test_help_names_every_option():
    """Every option nhctl's sources read (parsed[option: "…"], has("…")) or declare appears in
    nhctl --help as --name, so an option added without help text fails here."""
    sources = swift_sources("Ctl")
    read = set(re.findall(r'option: "([a-z][a-z-]*)"', sources)) | set(re.findall(r'\bhas\("([a-z][a-z-]*)"\)', sources))
    declared = re.search(r"valuedOptions: Set<String> = \[(.*?)\]", sources, re.S)
    assert declared, "Ctl.valuedOptions not found"
    read |= set(re.findall(r'"([a-z][a-z-]*)"', declared.group(1)))
    assert {"lifetime", "agent", "json", "tag", "app-id", "help"} <= read
    result = subprocess.run([os.path.join(BIN, "nhctl"), "--help"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0
    named = set(re.findall(r"--([a-z][a-z-]*)", result.stdout))
    assert sorted(read - named) == []


def test_platform_sends_test_sends_and_channels_through_nhctl(hub, agent):
    body = {"installationId": "ctl-apns", "platform": "apns", "pushChannel": "CTL0TOKEN", "tags": ["CtlPlat"]}
    r = requests.put(f"{hub.base}/hub/installations/ctl-apns?api-version=2015-01", data=json.dumps(body),
                     headers={"Authorization": hub.token(), "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    listed = nhctl(hub, "installations", "list", "--channel", "CTL0TOKEN")
    assert listed.returncode == 0 and [json.loads(l)["installationId"] for l in listed.stdout.splitlines()] == ["ctl-apns"]

    sent = nhctl(hub, "send", "--tag", "CtlPlat", "--platform", "apple", "--native", '{"aps":{"alert":"hi"}}',
                 "--headers", "apns-push-type=alert;apns-priority=10", "--test")
    assert sent.returncode == 0, sent.stderr
    result = json.loads(sent.stdout)
    assert (result["state"], result["success"], result["failure"]) == ("Completed", 0, 1)
    assert result["results"][0]["installationId"] == "ctl-apns" and result["results"][0]["outcome"].startswith("PnsUnavailable")
    assert outcome(hub, result["notificationId"])["platforms"] == {"apns": {"Targets": 1, "PnsUnavailable": 1}}

    bad = nhctl(hub, "send", "--tag", "CtlPlat", "--platform", "apple", "--native", '{"alert":"no aps"}')
    assert bad.returncode == 1 and "'aps'" in bad.stderr
    assert nhctl(hub, "send", "--platform", "ios", "--native", "{}").returncode == 2
    assert nhctl(hub, "send", "--platform", "apns", "m=x").returncode == 2
    assert nhctl(hub, "send", "--native", "{}", "--headers", "novalue").returncode == 2


def test_the_documented_defaults_are_the_defaults():
    """deploy/hub.defaults.json names every setting with its default: it is what nhctl config
    --defaults prints, and it loads as a config."""
    import subprocess
    from conftest import BIN, ROOT
    printed = subprocess.run([os.path.join(BIN, "nhctl"), "config", "--defaults"], capture_output=True, text=True, timeout=30)
    assert printed.returncode == 0, printed.stderr
    path = os.path.join(ROOT, "deploy", "hub.defaults.json")
    assert json.loads(printed.stdout) == json.load(open(path)), "deploy/hub.defaults.json differs from nhctl config --defaults"
    checked = subprocess.run([os.path.join(BIN, "nh-registry"), "--check-config", "--config", path], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "tcp://127.0.0.1:7722" in printed.stdout and '"store" : null' in printed.stdout


def test_a_list_where_one_endpoint_goes_stops_check_and_start_with_the_setting_named():
    """dispatch.requests takes one endpoint: a comma list (as dispatch.agents takes) fails
    --check-config and a real start alike, with exit 2 and the setting named."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NH_")},
           "NH_DISPATCH_REQUESTS": "tcp://127.0.0.1:7721,tcp://127.0.0.1:7723",
           "NH_DATA_DIR": tempfile.mkdtemp(prefix="nh-check-")}
    for arguments in (["--check-config"], []):
        done = subprocess.run([os.path.join(BIN, "nh-gateway"), *arguments], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, (arguments, done.returncode, done.stderr)
        assert "dispatch.requests (NH_DISPATCH_REQUESTS)" in done.stderr and "is a list" in done.stderr, done.stderr
