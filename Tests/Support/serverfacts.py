"""What each notification server does, found by trying it: one Desktop (Tests/Support/desktop.py)
per server, driven with jeepney and a real pointer (xdotool), printing one JSON line per finding.

    python3 Tests/Support/serverfacts.py [SERVER ...] [--shots FOLDER]

SERVER is one of desktop.SERVERS (default: xfce4-notifyd, notification-daemon, mate). With
--shots, a screenshot of each popup looked at is kept there. A run takes about a minute a server:
the expiries are waited for.

Findings, each {"server", "fact", ...}:
  information, capabilities   GetServerInformation, GetCapabilities
  window                      the X class and geometry of a popup with three actions, where its ×
                              and its buttons were found on its image
  close-click, body-click, body-click-without-default, button-click
                              the signals a person's click sends (ActionInvoked, NotificationClosed)
  close-call                  the signals after CloseNotification, and whether the popup left the screen
  expiry                      for expire_timeout -1, 3000 and 3000 with the hint transient: when the
                              popup left the screen and which signals came, in seconds after Notify
  hover                       with the pointer resting on a popup of 3000 ms: still there after 5 s?
                              and with the pointer moving over it?
  replace                     Notify with replaces_id: the id answered and whether the window is the same
  icon                        whether the popup with app_icon "nh-agent" (installed in the session's
                              hicolor theme, as `make install` does) differs from one with an icon
                              name no theme has
  stale-after-close           (notification-daemon) the bubble after CloseNotification, and the next
                              popup; then each way tried to remove it: what is on screen after it,
                              and the signals
  close-early                 (MATE) a × click 1.5 s into a popup of 10000 ms: the reason, and when
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import desktop as desktops  # noqa: E402

ACTIONS = ["default", "Open", "dismiss", "Dismiss", "snooze", "Snooze"]


def report(server, fact, **details):
    print(json.dumps({"server": server, "fact": fact, **details}, default=str), flush=True)


class Probe:
    def __init__(self, server, shots=None):
        self.server = server
        self.shots = shots
        self.desktop = desktops.Desktop(f"facts-{server}", server=server)
        self.desktop.move_away()

    def signals_since(self, since):
        """ActionInvoked and NotificationClosed since `since`: (seconds after it, member, body)."""
        d = self.desktop
        found = [(round(at - since, 2), "ActionInvoked", list(body)) for body, at in d.signals("ActionInvoked") if at >= since]
        found += [(round(at - since, 2), "NotificationClosed", list(body)) for body, at in d.signals("NotificationClosed") if at >= since]
        return sorted(found)

    def shot(self, name, window=None):
        if self.shots:
            return self.desktop.screenshot(os.path.join(self.shots, f"{self.server}-{name}.png"), window)
        return None

    def show(self, summary, actions=ACTIONS, timeout=0, **kw):
        popup = self.desktop.notify(summary, "body text", actions, timeout=timeout, **kw)
        return popup, self.desktop.popup_window(summary)

    def settle(self, seconds=0.8):
        time.sleep(seconds)

    def clear(self, limit=20):
        """Closes what is on screen with CloseNotification, and by a person's close for what stays."""
        d = self.desktop
        for popup in d.open_popups():
            try:
                d.close(popup["id"])
            except RuntimeError:
                pass
        deadline = time.time() + limit
        while d.popup_windows() and time.time() < deadline:
            try:
                d.click_close(0)
            except LookupError:
                pass
            time.sleep(0.3)

    def when_gone(self, window, limit, start=None):
        """Seconds from `start` (now) until `window` is no longer on the screen (None: still there
        after `limit`)."""
        start = start or time.time()
        while time.time() - start < limit:
            if window["id"] not in {w["id"] for w in self.desktop.popup_windows()}:
                return round(time.time() - start, 2)
            time.sleep(0.1)
        return None

    def run(self):
        d, server = self.desktop, self.server
        report(server, "information", value=d.call("GetServerInformation"))
        report(server, "capabilities", value=d.call("GetCapabilities")[0])

        popup, window = self.show("Three actions")
        labels = [ACTIONS[i + 1] for i in range(0, len(ACTIONS), 2) if ACTIONS[i] not in (d.spec["buttons_skip"] or ())]
        image = d._wait_layout(window, lambda i: i, "the popup")
        report(server, "window", window_class=d.spec["window"], geometry=window, corner=image.corner(),
               buttons=dict(zip(labels, image.buttons(len(labels)) or [])), screenshot=self.shot("three-actions", window))

        since = time.time()
        d.click_close("Three actions")
        self.settle()
        report(server, "close-click", how=d.spec["close"], signals=self.signals_since(since), on_screen=len(d.popup_windows()))

        for name, actions in [("body-click", ACTIONS), ("body-click-without-default", ["dismiss", "Dismiss"])]:
            self.show(name, actions)
            window = d.popup_window(name)
            since = time.time()
            d.click(window["x"] + window["width"] // 3, window["y"] + min(30, window["height"] // 3))
            self.settle()
            report(server, name, signals=self.signals_since(since), on_screen=len(d.popup_windows()))
            self.clear()

        self.show("Buttons")
        since = time.time()
        d.click_action("Dismiss", "Buttons")
        self.settle()
        report(server, "button-click", label="Dismiss", signals=self.signals_since(since), on_screen=len(d.popup_windows()))
        self.clear()

        popup, window = self.show("Closed by a call")
        since = time.time()
        d.close(popup)
        self.settle(1.5)
        report(server, "close-call", signals=self.signals_since(since), window_still_there=self.when_gone(window, 0.2) is None)
        self.clear()

        for timeout, hints in [(-1, {}), (3000, {}), (3000, {"transient": ("b", True)})]:
            summary = f"Expiry {timeout}{' transient' if hints else ''}"
            since = time.time()
            popup, window = self.show(summary, [], timeout=timeout, hints=hints)
            gone = self.when_gone(window, 15, start=since)
            self.settle(0.5)
            report(server, "expiry", expire_timeout=timeout, hints=list(hints), window_gone_after=gone, signals=self.signals_since(since))
            self.clear()

        popup, window = self.show("Hover", [], timeout=3000)
        d.point_at("Hover")
        time.sleep(5)
        resting = window["id"] in {w["id"] for w in d.popup_windows()}
        d.move_away()
        self.clear()
        popup, window = self.show("Hover moving", [], timeout=3000)
        for i in range(10):
            d.point_at("Hover moving", dx=(i % 2) * 4) if d.popup_windows() else None
            time.sleep(0.5)
        moving = window["id"] in {w["id"] for w in d.popup_windows()}
        d.move_away()
        report(server, "hover", timeout=3000, there_after_5s_pointer_resting=resting, there_after_5s_pointer_moving=moving)
        self.clear()

        popup, window = self.show("Order placed", ["default", "Open"])
        again = d.notify("Order shipped", "replaced", ["default", "Open"], timeout=0, replaces=popup)
        self.settle()
        windows = d.popup_windows()
        report(server, "replace", first_id=popup, replaced_id=again, same_window=[w["id"] for w in windows] == [window["id"]],
               windows=len(windows), screenshot=self.shot("replaced", windows[0] if windows else None))
        self.clear()

        images = {}
        for icon in ("nh-agent", "no-such-icon-anywhere"):
            popup, window = self.show("Icon", [], icon=icon)
            self.settle(0.5)
            images[icon] = d._image(d.popup_window("Icon")).data
            self.shot(f"icon-{icon}", d.popup_window("Icon"))
            self.clear()
        report(server, "icon", app_icon_drawn=images["nh-agent"] != images["no-such-icon-anywhere"])

        if server == "notification-daemon":
            self.stale()
        if server == "mate":
            since = time.time()
            popup, window = self.show("Close early", timeout=10000)
            time.sleep(1.5)
            d.click_close("Close early")
            self.settle()
            report(server, "close-early", expire_timeout=10000, signals=self.signals_since(since))
            self.clear()

    def stale(self):
        """notification-daemon 3.20 leaves a bubble on screen after CloseNotification (nd-queue.c:
        "FIXME: withdraw currently showing bubbles") and shows one bubble at a time."""
        d, server = self.desktop, self.server
        tries = {
            "close": lambda a: d.close(a),
            "close, then Notify replaces_id=id expire_timeout=1": lambda a: (d.close(a), d.notify("Stale", "", [], timeout=1, replaces=a)),
            "Notify replaces_id=id with an empty summary and body, then close": lambda a: (d.notify("", "", [], timeout=-1, replaces=a), d.close(a)),
            "Notify replaces_id=id expire_timeout=1, then close": lambda a: (d.notify("Stale", "body text", [], timeout=1, replaces=a), d.close(a)),
            "Notify replaces_id=id expire_timeout=1 hint transient": lambda a: d.notify("Stale", "body text", [], timeout=1, replaces=a,
                                                                                   hints={"transient": ("b", True)}),
        }
        for number, (name, withdraw) in enumerate(tries.items(), 1):
            stale, window = self.show("Stale", timeout=-1)
            self.desktop.notify("Next", "body text", ["default", "Open"], timeout=0)
            since = time.time()
            answers = withdraw(stale)
            self.settle(1.0)
            windows = d.popup_windows()
            report(server, "stale-after-close", sequence=name, answers=answers, stale_window_still_there=window["id"] in {w["id"] for w in windows},
                   windows=len(windows), next_shown=any(w["id"] != window["id"] for w in windows), signals=self.signals_since(since),
                   screenshot=self.shot(f"stale-{number}", windows[0] if windows else None))
            if name == "close":
                # The × of the bubble left behind: a second NotificationClosed, reason 2, for an id closed already.
                since = time.time()
                d.click_close(0)
                self.settle()
                report(server, "stale-after-close-click", signals=self.signals_since(since))
            self.clear()

    def stop(self):
        self.desktop.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("servers", nargs="*", default=["xfce4-notifyd", "notification-daemon", "mate"])
    parser.add_argument("--shots", help="a folder for screenshots of the popups looked at")
    arguments = parser.parse_args()
    if arguments.shots:
        os.makedirs(arguments.shots, exist_ok=True)
    for server in arguments.servers:
        absent = desktops.missing(server, pointer=True)
        if absent:
            report(server, "skipped", missing=absent)
            continue
        probe = Probe(server, arguments.shots or tempfile.mkdtemp(prefix=f"nh-facts-{server}-"))
        try:
            probe.run()
        finally:
            probe.stop()


if __name__ == "__main__":
    main()
