"""A notification server that owns org.freedesktop.Notifications at once but answers as one only
SECONDS after it is first asked, as GNOME Shell's notification helper does at a shell restart:
until then every call gets org.freedesktop.DBus.Error.UnknownMethod. Each call refused and each
Notify taken is printed as a JSON line.

    python3 lateserver.py SECONDS    (on the bus DBUS_SESSION_BUS_ADDRESS names)
"""
import json
import sys
import time

from jeepney import HeaderFields, MessageType, new_error, new_method_return
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
        elif member == "Notify":
            connection.send(new_method_return(message, "u", (next_id,)))
            print(json.dumps({"event": "notify", "id": next_id, "summary": message.body[3], "body": message.body[4]}), flush=True)
            next_id += 1
        elif member == "CloseNotification":
            connection.send(new_method_return(message))
        else:
            connection.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"no {member}",)))


if __name__ == "__main__":
    main()
