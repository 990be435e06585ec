"""A user's devices against one hub, for the desktop tests: each device a desktop (desktop.py) and
an nh-agent signed in as the user, both started here. The tests post to the user over REST, read
the store's states with nhctl, and find the popups each desktop was asked to show.

    devices = UserDevices(hub, "alice", [Desktop("device-1"), Desktop("device-2")], "device")
    notification = devices.post("order-1", "Order shipped")
    devices.popup(devices.desktops[0], "Order shipped")   # its Notify, once answered
    devices.stored(notification)                          # ("unread", "noInteraction")
    devices.stop()                                        # the agents and the desktops
"""
import datetime
import json
import os
import subprocess
import time

import requests

from hubharness import BIN, agent_health, dispatcher_sessions, free_port, wait_until

API = "api-version=2015-01"


class UserDevices:
    """`user`'s devices on `desktops`, with agents named `name-1`, `name-2`…, each started with
    `extra` settings (the tests show every popup on its own unless they say otherwise)."""

    def __init__(self, hub, user, desktops, name, extra=None):
        self.hub, self.user = hub, user
        self.credential = self.nhctl("user", "credential", user).stdout.strip()
        self.desktops, self.agents = desktops, []
        for i, desktop in enumerate(desktops, 1):
            self.agents.append(self.start_agent(f"{name}-{i}", desktop.env, {"NH_AGENT_POPUP_BURST": "0", **(extra or {})}))
        assert wait_until(lambda: self.sessions() == len(self.agents), timeout=60), "every agent reaches the dispatcher"
        assert wait_until(lambda: all(self.ready(a) for a in self.agents), timeout=30), [self.health(a) for a in self.agents]

    def start_agent(self, name, desktop_env, extra=None, credential=None):
        """An agent on a desktop, subscribed to News, signed in as the user (or by `credential`)."""
        env = {"NH_AGENT_HOME": os.path.join(self.hub.data, name), "NH_AGENT_INSTALLATION_ID": name,
               "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", "NH_AGENT_USER_CREDENTIAL": credential or self.credential,
               **desktop_env, **(extra or {})}
        done = subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "News"], env={**self.hub.env, **env},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        output = os.path.join(self.hub.data, f"{name}.jsonl")
        self.hub.start(name, "nh-agent", env=env, stdout=open(output, "ab"))
        return {"name": name, "env": {**self.hub.env, **env}, "output": output, "log": os.path.join(self.hub.data, f"{name}.log")}

    def nhctl(self, *arguments):
        done = subprocess.run([os.path.join(BIN, "nhctl"), *arguments], env=self.hub.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done

    def health(self, agent, timeout=10):
        """What `nh-agent health` prints, as a dict; None when it does not answer in time."""
        return agent_health(agent["env"], timeout=timeout)

    def ready(self, agent):
        return (self.health(agent) or {}).get("desktop") == "ready"

    def sessions(self):
        return dispatcher_sessions(self.hub)

    def post(self, app_id, title, body="", priority=None, hours=2.0, session=None, user=None):
        """Posts a notification to the user (or `user`) over REST; its id."""
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=hours)
        document = {"appNotificationId": app_id, "visual": {"title": title, "body": body or title},
                    "expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"}
        if priority:
            document["priority"] = priority
        r = (session or requests).post(f"{self.hub.base}/hub/users/{user or self.user}/notifications?{API}",
                                       headers={"Authorization": self.hub.token()}, data=json.dumps(document), timeout=30)
        assert r.status_code == 201, r.text
        return r.json()["notification"]["id"]

    def stored(self, notification, user=None):
        """(readState, userActionState) in the store."""
        for line in self.nhctl("user", "list", user or self.user).stdout.splitlines():
            fields = line.split()
            if fields and fields[0] == notification:
                return fields[1], fields[2]
        return None

    def popup(self, desktop, title):
        """The last Notify with this summary on a desktop, once answered."""
        shown = [p for p in desktop.popups() if p["summary"] == title and p["id"] is not None]
        return shown[-1] if shown else None

    def post_and_point(self, app_id, title):
        """For a real server on device 1 and dunst on device 2: posts a notification, waits until
        both devices show it, and rests the person's pointer on device 1's popup, as when reading it.
        Returns the notification's id."""
        one, two = self.desktops
        notification = self.post(app_id, title)
        assert wait_until(lambda: self.popup(one, title) and self.popup(two, title), timeout=20), (one.popups()[-3:], two.popups()[-3:])
        one.point_at(title)
        assert wait_until(lambda: two.displayed() == 1, timeout=10)
        return notification

    def clear(self):
        """For a real server on device 1 and dunst on device 2: closes what is left on either
        screen as a person would (device 1's × clicked, dunst's popups closed), and waits until it
        is gone."""
        one, two = self.desktops
        deadline = time.time() + 20
        while one.popup_windows() and time.time() < deadline:
            try:
                one.click_close(0)
            except LookupError:
                pass
            time.sleep(0.3)
        two.dunstctl("close-all")
        assert wait_until(lambda: one.displayed() == 0 and two.displayed() == 0, timeout=20), (one.popup_windows(), two.displayed())
        one.move_away()

    def stop(self):
        for agent in self.agents:
            if agent["name"] in self.hub.processes:
                self.hub.stop(agent["name"])
        for desktop in self.desktops:
            desktop.stop()
