"""A notification server that owns org.freedesktop.Notifications at once but answers as one only
SECONDS after it is first asked, as GNOME Shell's notification helper does at a shell restart:
until then every call gets org.freedesktop.DBus.Error.UnknownMethod. Each call refused and each
Notify taken is printed as a JSON line.

    python3 lateserver.py SECONDS [ACTION_FILE [MAX]]    (on the bus DBUS_SESSION_BUS_ADDRESS names)

With MAX, it shows at most that many popups at once, as notification-daemon and MATE show 20: a
Notify beyond them gets org.freedesktop.Notifications.MaxNotificationsExceeded.

With ACTION_FILE, a person's click is made by writing an action key ("dismiss") into that file:
the server emits ActionInvoked for the last popup it showed, as a person's click on a button makes
it do, and, unlike most servers, leaves the popup up: closing it is the client's to do. Writing
"expire" closes the last popup with reason 1, as a server does when it times out (and MATE's does
for the person's ×).
"""
import os
import threading
import json
import sys
import time

from jeepney import DBusAddress, HeaderFields, MessageType, new_error, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

NAME = "org.freedesktop.Notifications"


def main():
    delay = float(sys.argv[1])
    ready_at = None
    connection = open_dbus_connection(bus="SESSION")
    reply = connection.send_and_get_reply(message_bus.RequestName(NAME, 4))
    if reply.body[0] != 1:
        raise SystemExit(f"could not take {NAME}: {reply.body}")
    print(json.dumps({"event": "owned"}), flush=True)
    next_id = 1
    shown = []
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
    if len(sys.argv) > 2:
        threading.Thread(target=clicks, args=(connection, sys.argv[2], shown), daemon=True).start()
    while True:
        message = connection.receive()
        if message.header.message_type != MessageType.method_call:
            continue
        member = message.header.fields.get(HeaderFields.member)
        if ready_at is None:
            ready_at = time.monotonic() + delay
        if time.monotonic() < ready_at:
            connection.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"no {member} yet",)))
            print(json.dumps({"event": "refused", "member": member}), flush=True)
            continue
        if member == "GetServerInformation":
            connection.send(new_method_return(message, "ssss", ("late-server", "nh-tests", "1.0", "1.2")))
        elif member == "GetCapabilities":
            connection.send(new_method_return(message, "as", (["body", "actions"],)))
        elif member == "Notify" and limit is not None and message.body[1] == 0 and len(shown) >= limit:
            connection.send(new_error(message, "org.freedesktop.Notifications.MaxNotificationsExceeded", "s", ("too many",)))
            print(json.dumps({"event": "full", "summary": message.body[3]}), flush=True)
        elif member == "Notify":
            connection.send(new_method_return(message, "u", (next_id,)))
            print(json.dumps({"event": "notify", "id": next_id, "summary": message.body[3], "body": message.body[4],
                              "actions": list(message.body[5])}), flush=True)
            shown.append(next_id)
            next_id += 1
        elif member == "CloseNotification":
            connection.send(new_method_return(message))
            if message.body[0] in shown:
                shown.remove(message.body[0])
            print(json.dumps({"event": "close", "id": message.body[0]}), flush=True)
        else:
            connection.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"no {member}",)))


def clicks(connection, path, shown):
    """Emits ActionInvoked for the last popup shown whenever an action key is written to `path`."""
    emitter = DBusAddress("/org/freedesktop/Notifications", interface=NAME)
    while True:
        time.sleep(0.05)
        try:
            with open(path) as f:
                action = f.read().strip()
            os.remove(path)
        except FileNotFoundError:
            continue
        if action == "expire" and shown:
            expired = shown.pop()
            connection.send(new_signal(emitter, "NotificationClosed", "uu", (expired, 1)))
            print(json.dumps({"event": "expired", "id": expired}), flush=True)
        elif action and shown:
            connection.send(new_signal(emitter, "ActionInvoked", "us", (shown[-1], action)))
            print(json.dumps({"event": "clicked", "id": shown[-1], "action": action}), flush=True)


if __name__ == "__main__":
    main()
