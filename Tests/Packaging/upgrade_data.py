"""A data folder written by one build and opened by another, as an upgrade does.

  upgrade_data.py write --bin DIR --data DIR   start that build's services and two agents on an empty
                                               folder, send, post, stop; the folder's expected.json
                                               says what it holds
  upgrade_data.py check --bin DIR --data DIR   start this build on a copy of such a folder and check
                                               that nothing was lost and nothing is shown twice

A check runs the services and agents at the time the folder was written (plus ten minutes) through libfaketime,
so that a folder kept in the repository (Tests/Packaging/upgrade-from-*) is never past its
notifications' lifetimes, whenever the check runs. Sends are checked by their outcomes, the agents'
identities and categories by the agents, a delivery waiting for an offline device by that device
receiving it after the upgrade, user notifications by their list, installations by the registry.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import Hub, free_port, json_lines, wait_until  # noqa: E402

TEMPLATE = '{"aps":{"alert":"$(messageParam)"}}'
AGENTS = {"online": "upgrade-online", "offline": "upgrade-offline"}
FAKETIME_LIBRARY = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
MONTH = str(30 * 86_400)


class Upgrade:
    def __init__(self, bin_dir, data, faketime=None):
        settings = {}
        if faketime is not None:
            # Only the wall clock moves back: timers run on the real monotonic clock.
            settings = {"LD_PRELOAD": FAKETIME_LIBRARY, "DONT_FAKE_MONOTONIC": "1",
                        "FAKETIME": "@" + datetime.datetime.fromtimestamp(faketime, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                        "TZ": "UTC"}
        self.hub = Hub(bin_dir=bin_dir, data=data, settings=settings)
        # Commands run on the real clock: under libfaketime, Swift's CommandLine.arguments is empty. A
        # token signed at the real time is still valid at the earlier time the services see.
        self.command_env = {k: v for k, v in self.hub.env.items() if k not in settings}
        # Two agents on one host: each its own control socket.
        self.control = {name: f"tcp://127.0.0.1:{free_port()}" for name in AGENTS}

    def ctl(self, *arguments):
        result = subprocess.run([os.path.join(self.hub.bin, "nhctl"), *arguments, "--json"], env=self.command_env,
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise AssertionError(f"nhctl {' '.join(arguments)}: {result.stderr.strip()}")
        try:
            return [json.loads(result.stdout)]  # one document, such as installations show
        except json.JSONDecodeError:
            return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]

    def agent_env(self, name):
        return {"NH_AGENT_HOME": os.path.join(self.hub.data, "agents", name), "NH_AGENT_INSTALLATION_ID": AGENTS[name],
                "NH_AGENT_TEMPLATE": TEMPLATE, "NH_AGENT_DESKTOP": "0", "NH_AGENT_UNIFIEDPUSH": "0",
                "NH_AGENT_REQUESTS": self.control[name]}

    def agent(self, name, *arguments):
        result = subprocess.run([os.path.join(self.hub.bin, "nh-agent"), *arguments], env={**self.command_env, **self.agent_env(name)},
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise AssertionError(f"nh-agent {' '.join(arguments)}: {result.stderr.strip()}")
        return result.stdout

    def output(self, name, run):
        return os.path.join(self.hub.data, f"agent-{name}-{run}.jsonl")

    def start_agent(self, name, run):
        self.hub.start(f"agent-{name}", "nh-agent", env=self.agent_env(name), stdout=open(self.output(name, run), "ab"))
        return wait_until(lambda: self.installation(AGENTS[name]) is not None and self.connected(AGENTS[name]), timeout=30)

    def installation(self, installation_id):
        try:
            return self.ctl("installations", "show", installation_id)[0]
        except AssertionError:
            return None

    def connected(self, installation_id):
        shown = self.installation(installation_id) or {}
        return shown.get("placement", {}).get("connected") is True

    def outcome(self, notification):
        try:
            return self.ctl("outcome", notification)[0]
        except AssertionError:
            return {}

    def shown(self, name, run):
        return [line.get("payload", {}).get("aps", {}).get("alert") for line in json_lines(self.output(name, run))]

    def send(self, message, *extra):
        return self.ctl("send", "--tag", "World", *extra, f"messageParam={message}")[0]["notificationId"]


def write(bin_dir, data, commit=None):
    os.makedirs(data, exist_ok=True)
    if os.listdir(data):
        raise SystemExit(f"{data} is not empty")
    run = Upgrade(bin_dir, data)
    written_at = time.time()
    try:
        assert run.hub.start_services(), "the services did not start"
        for name in AGENTS:
            run.agent(name, "subscribe", "World", "Sports")
            assert run.start_agent(name, "before"), f"agent {name} did not register"
        both = [run.send(f"before {n}", "--ttl", MONTH) for n in (1, 2)]
        for notification in both:
            assert wait_until(lambda: run.outcome(notification).get("acknowledged") == 2, timeout=30), run.outcome(notification)
        run.hub.stop("agent-offline")
        waiting = run.send("while offline", "--ttl", MONTH)
        assert wait_until(lambda: "while offline" in run.shown("online", "before"), timeout=30)
        assert wait_until(lambda: run.outcome(waiting).get("acknowledged") == 1, timeout=30), run.outcome(waiting)
        posts = []
        for n in (1, 2):
            run.ctl("user", "post", "alice", "--app-id", f"order-{n}", "--title", f"Order {n}", "--body", "Shipped", "--expires-in", MONTH)
            posts.append(f"order-{n}")
    finally:
        run.hub.stop_all()
    for name in os.listdir(data):
        if name.endswith(".log") or name.endswith(".jsonl"):
            os.remove(os.path.join(data, name))
    expected = {
        "writtenAt": written_at, "writtenBy": (commit or "") + " " + subprocess.run(
            [os.path.join(bin_dir, "nh-registry"), "--version"], capture_output=True, text=True).stdout.strip(),
        "delivered": both, "waitingForOffline": waiting, "userPosts": posts, "installations": list(AGENTS.values()),
        "keys": json.load(open(os.path.join(data, "keys.json"))),
    }
    with open(os.path.join(data, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    return expected


def check(bin_dir, folder):
    """Opens a copy of `folder` with the executables in `bin_dir`; raises AssertionError on a loss."""
    expected = json.load(open(os.path.join(folder, "expected.json")))
    data = tempfile.mkdtemp(prefix="nh-upgrade-")
    shutil.copytree(folder, data, dirs_exist_ok=True)
    run = Upgrade(bin_dir, data, faketime=expected["writtenAt"] + 600)
    try:
        assert run.hub.start_services(), "the services did not start on the old data folder"
        assert json.load(open(os.path.join(data, "keys.json"))) == expected["keys"], "keys.json changed"
        for installation in expected["installations"]:
            shown = run.installation(installation)
            assert shown is not None, f"installation {installation} is gone"
            assert {"World", "Sports"} <= set(shown.get("tags", [])), shown
        for notification in expected["delivered"]:
            outcome = run.outcome(notification)
            assert outcome.get("state") == "Completed" and outcome.get("acknowledged") == 2, (notification, outcome)
        assert run.outcome(expected["waitingForOffline"]).get("acknowledged") == 1
        listed = [n["appNotificationId"] for n in run.ctl("user", "list", "alice")]
        assert sorted(listed) == sorted(expected["userPosts"]), listed
        # The folder is now a namespace that holds one hub, the default, with everything it held;
        # the old full key still reaches it, and a second hub holds none of it.
        hubs = run.ctl("hub", "list")
        assert [(h["name"], h["isDefault"], h["installations"]) for h in hubs] == [("hub", True, len(expected["installations"]))], hubs
        full = next(k for k in expected["keys"]["keys"] if k["name"] == "DefaultFullSharedAccessSignature")
        old_key = f"Endpoint={run.hub.base}/;SharedAccessKeyName={full['name']};SharedAccessKey={full['key']}"
        for installation in expected["installations"]:
            assert run.ctl("--connection-string", old_key, "installations", "show", installation)[0]["installationId"] == installation
        run.ctl("hub", "create", "after-upgrade")

        def empty_second_hub():
            try:
                return run.ctl("--hub", "after-upgrade", "installations", "list") == []
            except AssertionError:
                return False  # until every service has read the hub catalog
        assert wait_until(empty_second_hub, timeout=10)

        for name, installation in AGENTS.items():
            assert run.agent(name, "id").strip() == installation
            assert set(run.agent(name, "categories").split()) >= {"World", "Sports"}
            assert run.start_agent(name, "after"), f"agent {name} did not come back"
        # The delivery that waited for the offline device through the upgrade reaches it once.
        waiting = expected["waitingForOffline"]
        assert wait_until(lambda: run.outcome(waiting).get("acknowledged") == 2, timeout=30), run.outcome(waiting)
        after = run.send("after the upgrade")
        assert wait_until(lambda: run.outcome(after).get("acknowledged") == 2, timeout=30), run.outcome(after)
        assert wait_until(lambda: "after the upgrade" in run.shown("online", "after") and "after the upgrade" in run.shown("offline", "after"))
        assert run.shown("online", "after") == ["after the upgrade"], run.shown("online", "after")
        assert sorted(run.shown("offline", "after")) == ["after the upgrade", "while offline"], run.shown("offline", "after")
    finally:
        run.hub.stop_all()
        shutil.rmtree(data, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["write", "check"])
    parser.add_argument("--bin", required=True, help="the build's executables")
    parser.add_argument("--data", required=True, help="the data folder")
    parser.add_argument("--commit", help="write: the commit the executables were built from, kept in expected.json")
    arguments = parser.parse_args()
    if arguments.action == "write":
        expected = write(os.path.abspath(arguments.bin), os.path.abspath(arguments.data), arguments.commit)
        print(f"written by {expected['writtenBy']}: {arguments.data}")
    else:
        check(os.path.abspath(arguments.bin), os.path.abspath(arguments.data))
        print(f"{arguments.data}: opened by {arguments.bin}, nothing lost")


if __name__ == "__main__":
    main()
