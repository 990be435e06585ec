"""The agent on GNOME Shell 43, as a person uses it: device 1 of a user runs GNOME Shell (X11, on
its own Xvfb display, session bus and an empty system bus, with software GL), device 2 runs dunst,
with nh-agent on each against one hub. GNOME Shell draws its banners inside its own stage, so a
person's clicks are real pointer events (xdotool) at screen coordinates found on a screenshot of
the whole screen (Tests/Support/desktop.py says where, and what the shell sends for each):

- a posted notification is shown as a banner, and `nh-agent health` names GNOME Shell;
- the person closes the banner (its ×, or its Dismiss button): the notification is dismissed in the
  store and device 2's popup is withdrawn;
- the person clicks the banner (the default action): it is activated and read;
- the person presses Snooze on the banner: it is snoozed;
- the person dismisses it on device 2: the agent withdraws the banner, which leaves the screen;
- the shell is killed by its process id and started again on the same display and bus: its new
  helper takes org.freedesktop.Notifications before it answers there, the agent asks until it
  does, and shows again what is still unread.

GNOME Shell is too heavy for `make test`: these run in `make test-gnome`, which sets
NH_TEST_GNOME=1, and are skipped without it, or where GNOME Shell, gjs, Xvfb, dbus-daemon, dunst,
xdotool, ImageMagick or jeepney cannot be had."""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

import desktop as desktops  # noqa: E402
from hubharness import Hub, wait_until  # noqa: E402
from userdevices import UserDevices  # noqa: E402

ABSENT = sorted(set(desktops.missing() + desktops.missing("gnome-shell", pointer=True)))
pytestmark = [
    pytest.mark.skipif(os.environ.get("NH_TEST_GNOME") != "1",
                       reason="GNOME Shell is tested by `make test-gnome` (NH_TEST_GNOME=1), not by `make test`"),
    pytest.mark.skipif(bool(ABSENT), reason=f"cannot run GNOME Shell here: missing {', '.join(ABSENT)}"),
]

USER = "gwen"
ACTIONS = {"default": "Open", "dismiss": "Dismiss", "snooze": "Snooze"}


@pytest.fixture(scope="module")
def hub():
    hub = Hub(prefix="nh-gnome-")
    try:
        assert hub.start_services()
        yield hub
    finally:
        hub.stop_all()


class Devices(UserDevices):
    """A user's two devices: device 1 with GNOME Shell, device 2 with dunst."""

    def __init__(self, hub):
        super().__init__(hub, USER, [desktops.Desktop("gnome-1", server="gnome-shell"), desktops.Desktop("gnome-2")], "gnome")

    def popup(self, desktop, title, server=None):
        """The last Notify with this summary on a desktop, once answered (by `server` when given)."""
        shown = [p for p in desktop.popups() if p["summary"] == title and p["id"] is not None and server in (None, p["server"])]
        return shown[-1] if shown else None

    def withdrawn(self, desktop, popup_id, since=0):
        """Whether the agent called CloseNotification for the popup of this id (since `since`: ids
        start again at 1 on a restarted shell)."""
        return any(m["type"] == "method_call" and m["member"] == "CloseNotification" and list(m["body"]) == [popup_id]
                   and m["at"] >= since and m["destination"] not in desktop.inner for m in desktop.monitor.snapshot())

    def closed(self, popup):
        """The reasons of the NotificationClosed that GNOME Shell's helper sent for this popup."""
        return [body[1] for body, _ in self.desktops[0].signals("NotificationClosed", sender=popup["server"]) if body[0] == popup["id"]]

    def invoked(self, popup):
        """The actions of the ActionInvoked that GNOME Shell's helper sent for this popup."""
        return [body[1] for body, _ in self.desktops[0].signals("ActionInvoked", sender=popup["server"]) if body[0] == popup["id"]]

    def show(self, app_id, title):
        """Posts a notification while the person is idle (so that GNOME Shell's banner waits for
        them), waits until both devices show it, and rests the pointer on the banner, as when
        reading it: it expands, with its × and its buttons. Returns the notification's id and the
        popups (Notify records) on device 1 and device 2."""
        one, two = self.desktops
        one.rest()
        notification = self.post_and_point(app_id, title)
        return notification, self.popup(one, title), self.popup(two, title)


    def asks(self, since):
        """The agent's GetServerInformation calls on device 1 since `since`: (the name asked, what
        came back: "method_return" or the error's text, or None while unanswered), in order."""
        messages = [m for m in self.desktops[0].monitor.snapshot() if m["at"] >= since]
        replies = {(m["destination"], m["reply_serial"]): m for m in messages if m["type"] in ("method_return", "error")}
        agent = {p["sender"] for p in self.desktops[0].popups()}
        found = []
        for m in messages:
            if m["type"] == "method_call" and m["member"] == "GetServerInformation" and m["sender"] in agent:
                reply = replies.get((m["sender"], m["serial"]))
                answer = None if reply is None else "method_return" if reply["type"] == "method_return" else str(reply["body"])
                found.append((m["destination"], answer))
        return found



@pytest.fixture(scope="module")
def devices(hub):
    devices = Devices(hub)
    try:
        yield devices
    finally:
        devices.stop()


def test_a_notification_is_shown_as_a_gnome_banner(devices):
    one, two = devices.desktops
    health = devices.health(devices.agents[0])
    assert health["desktop"] == "ready"
    assert health["desktopServer"].startswith("gnome-shell ") and health["desktopServer"].endswith("(GNOME)"), health["desktopServer"]
    assert "actions" in health["desktopCapabilities"].split(",")
    devices.clear()
    _, popup, _ = devices.show("shown-1", "Build failed")
    # Answered with an id by the helper that owns the name for the shell.
    assert popup["id"] > 0 and popup["server"] == one.owner()
    assert popup["actions"] == ACTIONS
    assert popup["icon"] == "nh-agent" and popup["timeout"] == -1
    banner = one.popup_window("Build failed")
    assert banner["width"] > 300 and banner["height"] > 50, banner
    devices.clear()


@pytest.mark.parametrize("how", ["×", "Dismiss"])
def test_a_close_on_the_banner_dismisses_it_everywhere(devices, how):
    one, two = devices.desktops
    devices.clear()
    notification, popup, other = devices.show(f"close-{how}", f"Deploy finished ({how})")
    if how == "×":
        one.click_close(popup["summary"])
    else:
        one.click_action("Dismiss", popup["summary"])
        assert wait_until(lambda: devices.invoked(popup) == ["dismiss"], timeout=10), devices.invoked(popup)
    # GNOME Shell reports both as the person's (reason 2).
    assert wait_until(lambda: devices.closed(popup), timeout=10), "the server reports the close"
    assert devices.closed(popup) == [2]
    assert wait_until(lambda: devices.stored(notification) == ("unread", "dismissed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other["id"]), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: two.displayed() == 0 and one.displayed() == 0, timeout=10)


def test_a_click_on_the_banner_activates_it(devices):
    one, two = devices.desktops
    devices.clear()
    notification, popup, other = devices.show("default-1", "Review requested")
    one.click_default("Review requested")
    assert wait_until(lambda: devices.invoked(popup) == ["default"], timeout=10), devices.invoked(popup)
    assert wait_until(lambda: devices.stored(notification) == ("read", "activated"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other["id"]), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: one.displayed() == 0 and two.displayed() == 0, timeout=10)
    # GNOME Shell closes an activated banner with reason 2, as a person's close: that is no dismissal.
    assert wait_until(lambda: devices.closed(popup), timeout=10) and devices.closed(popup) == [2]
    time.sleep(0.5)
    assert devices.stored(notification) == ("read", "activated")


def test_a_click_on_snooze_snoozes_it(devices):
    one, two = devices.desktops
    devices.clear()
    notification, popup, other = devices.show("snooze-1", "Standup in 5 minutes")
    one.click_action("Snooze", "Standup in 5 minutes")
    assert wait_until(lambda: devices.invoked(popup) == ["snooze"], timeout=10), devices.invoked(popup)
    assert wait_until(lambda: devices.stored(notification) == ("unread", "snoozed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other["id"]), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: one.displayed() == 0 and two.displayed() == 0, timeout=10)


def test_a_dismissal_on_device_2_takes_the_banner_off_device_1s_screen(devices):
    one, two = devices.desktops
    devices.clear()
    notification, popup, other = devices.show("withdraw-1", "Lunch menu")
    assert one.displayed() == 1
    two.dunstctl("close")  # a person's click on device 2's popup
    assert wait_until(lambda: devices.stored(notification) == ("unread", "dismissed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(one, popup["id"]), timeout=20), "the agent withdraws device 1's banner"
    # Closed by the call (3), and off the screen, though the pointer rests where it was.
    assert wait_until(lambda: devices.closed(popup), timeout=10) and devices.closed(popup) == [3], devices.closed(popup)
    assert wait_until(lambda: one.displayed() == 0, timeout=10), one.popup_windows()
    one.move_away()


def test_a_shell_restart_shows_what_is_unread_again(devices):
    """The shell is killed by its process id (its helper quits with it) and started again on the
    same display and bus. The new helper owns org.freedesktop.Notifications before it answers
    there: the agent asks until it does, then shows again what is unread and not acted on, and
    nothing that was."""
    one, two = devices.desktops
    agent = devices.agents[0]
    devices.clear()
    _, before, other = devices.show("restart-1", "Still unread")
    one.move_away()
    old_owner = before["server"]
    one.stop_server(kill=True)
    assert wait_until(lambda: one.owner() is None, timeout=10), "the helper quits with the shell"
    assert wait_until(lambda: (devices.health(agent) or {}).get("desktop") not in (None, "ready"), timeout=10), devices.health(agent)
    since = time.time()
    new_owner = one.start_server()
    assert new_owner != old_owner
    assert wait_until(lambda: devices.ready(agent), timeout=30), devices.health(agent)
    health = devices.health(agent)
    assert health["desktopServer"].startswith("gnome-shell "), health
    # Asked the new helper until it answered: every ask that failed was followed by another.
    asks = [(name, answer) for name, answer in devices.asks(since) if name in (new_owner, desktops.NOTIFICATIONS)]
    assert asks and asks[-1][1] == "method_return", asks
    # What is unread is shown again, on the new server, and on device 2 it is left as it was.
    assert wait_until(lambda: devices.popup(one, "Still unread", server=new_owner), timeout=20), one.popups()[-3:]
    again = devices.popup(one, "Still unread", server=new_owner)
    assert again["replaces"] == 0 and again["actions"] == ACTIONS
    shown_after = [p["summary"] for p in one.popups() if p["server"] == new_owner]
    assert shown_after == ["Still unread"], shown_after
    assert not devices.withdrawn(two, other["id"])
    # The new server's id is the one the agent now uses: a dismissal on device 2 closes it there.
    two.dunstctl("close")
    assert wait_until(lambda: devices.withdrawn(one, again["id"], since), timeout=20), "the agent withdraws the banner on the new server"
    assert wait_until(lambda: devices.closed(again) == [3], timeout=10), devices.closed(again)
