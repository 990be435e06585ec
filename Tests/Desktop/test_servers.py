"""The agent on notification servers other than dunst, as a person uses them: device 1 of a user
runs the server under test (xfce4-notifyd, notification-daemon, mate-notification-daemon), device 2 runs dunst, each on its
own Xvfb display and session bus, with nh-agent on each against one hub. A person's clicks are
real pointer events (xdotool) on the popup's window, at places found on its screenshot:

- a posted notification is shown on both devices, with the agent's icon and buttons;
- the person closes the popup on device 1 (the × of notification-daemon and MATE, a click on
  xfce4-notifyd's popup, which has no ×): the notification is dismissed in the store and device
  2's popup is withdrawn, though MATE reports its × as an expiry;
- the person takes the default action on device 1 (a click on notification-daemon's popup,
  xfce4-notifyd's "Open" button): it is activated and read, and withdrawn on device 2;
- the person presses Snooze on device 1: it is snoozed, and withdrawn on device 2;
- the person dismisses it on device 2 while reading it on device 1 (the pointer moving over the
  popup): device 1's popup leaves the screen, and the next notification is shown there.

Skipped, with the reason, where a server's package (or Xvfb, dbus-daemon, dunst, xdotool,
ImageMagick or jeepney) cannot be had. What each server does with a click, and what it reports,
is in Tests/Support/desktop.py (SERVERS) and comes from Tests/Support/serverfacts.py."""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

import desktop as desktops  # noqa: E402
from hubharness import Hub, wait_until  # noqa: E402
from userdevices import UserDevices  # noqa: E402

pytestmark = pytest.mark.skipif(bool(desktops.missing()), reason=f"cannot run a desktop here: missing {', '.join(desktops.missing())}")

# Each server's devices belong to a user of their own, so that nothing of one run is current on the other's.
SERVERS = {"xfce4-notifyd": ("xavier", "Xfce Notify Daemon"), "notification-daemon": ("nadia", "Notification Daemon"),
           "mate": ("mateo", "Notification Daemon")}


@pytest.fixture(scope="module")
def hub():
    hub = Hub(prefix="nh-servers-")
    try:
        assert hub.start_services()
        yield hub
    finally:
        hub.stop_all()


class Devices(UserDevices):
    """A user's two devices: device 1 with the server under test, device 2 with dunst."""

    def __init__(self, hub, server):
        self.server = server
        user, self.server_name = SERVERS[server]
        super().__init__(hub, user, [desktops.Desktop(f"{server}-1", server=server), desktops.Desktop(f"{server}-2")], server)

    def withdrawn(self, desktop, popup_id):
        """Whether the agent withdrew the popup of this id: CloseNotification, or on a server that
        leaves closed bubbles on screen (notification-daemon) a replacement that expires at once."""
        return ([popup_id] in [list(body) for body in desktop.calls("CloseNotification")]
                or any(p["replaces"] == popup_id and p["timeout"] == 1 for p in desktop.popups()))

    def closed(self, desktop, popup_id):
        """The reasons of the server's NotificationClosed for this id."""
        return [body[1] for body, _ in desktop.signals("NotificationClosed") if body[0] == popup_id]

    def on_screen(self, desktop, popup_id):
        """Whether the popup of this id has a window on device 1's screen."""
        try:
            desktop.popup_window(next(p["summary"] for p in desktop.popups() if p["id"] == popup_id), timeout=0)
            return True
        except (LookupError, StopIteration):
            return False

    def show(self, app_id, title):
        """Posts a notification and waits until both devices show it; the person's pointer then
        rests on device 1's popup, as when reading it (notification-daemon takes a popup off the
        screen 5 s after the pointer last moved on it, xfce4-notifyd keeps it while the pointer is
        there). Returns the notification's id and the popup ids on device 1 and device 2."""
        one, two = self.desktops
        notification = self.post_and_point(app_id, title)
        return notification, self.popup(one, title)["id"], self.popup(two, title)["id"]




@pytest.fixture(scope="module", params=list(SERVERS))
def devices(request, hub):
    absent = desktops.missing(request.param, pointer=True)
    if absent:
        pytest.skip(f"cannot run {request.param} here: missing {', '.join(absent)}")
    devices = Devices(hub, request.param)
    try:
        yield devices
    finally:
        devices.stop()


def test_a_notification_is_shown_on_both_devices(devices):
    one, two = devices.desktops
    health = devices.health(devices.agents[0])
    assert health["desktop"] == "ready"
    assert health["desktopServer"].startswith(devices.server_name), health["desktopServer"]
    assert "actions" in health["desktopCapabilities"].split(",")
    devices.clear()
    _, first, _ = devices.show("shown-1", "Build failed")
    popup = devices.popup(one, "Build failed")
    assert popup["actions"] == {"default": "Open", "dismiss": "Dismiss", "snooze": "Snooze"}
    # MATE's popups ask for its own 7 s, so that its × (reported as an expiry) is told from one.
    assert popup["icon"] == "nh-agent" and popup["timeout"] == (7000 if devices.server == "mate" else -1)
    window = one.popup_window("Build failed")
    assert window["width"] > 100 and window["height"] > 40, window
    assert devices.on_screen(one, first)
    devices.clear()


def test_a_close_click_on_device_1_dismisses_it_everywhere(devices):
    one, two = devices.desktops
    devices.clear()
    notification, first, other = devices.show("close-1", "Deploy finished")
    one.click_close("Deploy finished")
    assert wait_until(lambda: devices.closed(one, first), timeout=10), "the server reports the close"
    # mate-notification-daemon 1.26 reports its × as an expiry (1); the agent takes one that soon as the person's close.
    # (notification-daemon may report a transient popup closed by its × as expired too, later.)
    assert devices.closed(one, first)[0] == desktops.SERVERS[devices.server]["close_reason"], "closed by the person"
    assert wait_until(lambda: devices.stored(notification) == ("unread", "dismissed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: two.displayed() == 0 and one.displayed() == 0, timeout=10)


def test_a_click_on_the_default_action_activates_it(devices):
    one, two = devices.desktops
    devices.clear()
    notification, first, other = devices.show("default-1", "Review requested")
    one.click_default("Review requested")
    assert wait_until(lambda: [list(body) for body, _ in one.signals("ActionInvoked")].count([first, "default"]) == 1, timeout=10)
    assert wait_until(lambda: devices.stored(notification) == ("read", "activated"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: one.displayed() == 0 and two.displayed() == 0, timeout=10)
    # The close that follows the action (reason 2 on both servers) is not a dismissal.
    time.sleep(0.5)
    assert devices.stored(notification) == ("read", "activated")


def test_a_click_on_snooze_snoozes_it(devices):
    one, two = devices.desktops
    devices.clear()
    notification, first, other = devices.show("snooze-1", "Standup in 5 minutes")
    one.click_action("Snooze", "Standup in 5 minutes")
    assert wait_until(lambda: [first, "snooze"] in [list(body) for body, _ in one.signals("ActionInvoked")], timeout=10)
    assert wait_until(lambda: devices.stored(notification) == ("unread", "snoozed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(two, other), timeout=20), "device 2's popup is withdrawn"
    assert wait_until(lambda: one.displayed() == 0 and two.displayed() == 0, timeout=10)


def test_a_dismissal_on_device_2_takes_the_popup_off_device_1s_screen(devices):
    """The person reads the popup on device 1, the pointer moving over it, and dismisses the
    notification on device 2: device 1's popup leaves the screen at once, and the next
    notification is shown there. (notification-daemon 3.20 answers CloseNotification with
    NotificationClosed reason 3 but leaves the bubble on screen until its own timeout, which the
    pointer's moves put off, and shows nothing else meanwhile: there the agent replaces the popup
    with one that expires at once.)"""
    one, two = devices.desktops
    devices.clear()
    notification, first, other = devices.show("withdraw-1", "Lunch menu")
    window = one.popup_window("Lunch menu")

    def reading(condition):
        """condition(), with the pointer moving on the popup, as long as its window is there."""
        def check():
            if window["id"] in {w["id"] for w in one.popup_windows()}:
                one.point(window["x"] + window["width"] // 2 + int(time.time() * 10) % 2 * 4, window["y"] + window["height"] // 2)
            return condition()
        return check
    two.dunstctl("close")  # a person's click on device 2's popup
    assert wait_until(lambda: devices.stored(notification) == ("unread", "dismissed"), timeout=20), devices.stored(notification)
    assert wait_until(lambda: devices.withdrawn(one, first), timeout=20), "the agent withdraws device 1's popup"
    # Closed by the call (3), or, where it was replaced by one that expires at once, expired (1).
    expected = 1 if devices.server == "notification-daemon" else 3
    assert wait_until(lambda: devices.closed(one, first), timeout=10) and devices.closed(one, first) == [expected], devices.closed(one, first)
    assert wait_until(reading(lambda: window["id"] not in {w["id"] for w in one.popup_windows()}), timeout=8, interval=0.25), \
        f"device 1's popup is still on the screen after the agent withdrew it: {one.popup_windows()}"
    devices.post("withdraw-2", "Next on the list")
    assert wait_until(reading(lambda: devices.popup(one, "Next on the list")), timeout=20)
    # A window of its own (each popup of these servers has one), while the pointer is still where the first was.
    assert wait_until(reading(lambda: any(w["id"] != window["id"] for w in one.popup_windows())), timeout=8, interval=0.25), \
        f"the next popup is not shown on device 1: {one.popup_windows()}"
    one.move_away()
    devices.clear()
