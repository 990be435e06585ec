#!/usr/bin/env python3
"""A UnifiedPush app's connector on the session bus, for the tests and the benchmark: it owns its
service name, serves org.unifiedpush.Connector2 (or Connector1 with --v1) at
/org/unifiedpush/Connector, can register with the distributor, and writes every event as one JSON
line to --out (flushed at once), so a test reads exactly what the app was given:

    {"event": "ready", "unique": ":1.7"}
    {"event": "registered", "success": "REGISTRATION_SUCCEEDED", ...}
    {"event": "NewEndpoint", "token": "...", "endpoint": "http://..."}
    {"event": "Message", "token": "...", "message": "<base64>", "id": "...", "at": 1733.2}
    {"event": "Unregistered", "token": "..."}

Started by a test, or by dbus-daemon through a .service file (D-Bus activation). --exit-idle N ends
it after N seconds without a call, as an activated app does."""
import base64
import os
import sys
import time

from jeepney import DBusAddress, MessageType, new_error, new_method_call, new_method_return
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

import connectorcli



def main():
    parser = connectorcli.parser()
    parser.add_argument("--v1", action="store_true")
    args = parser.parse_args()
    log = connectorcli.event_log(args.out)

    connection = open_dbus_connection(bus=os.environ["DBUS_SESSION_BUS_ADDRESS"])
    # A call queued for an activated app arrives as soon as it owns the name, maybe before the
    # answer to RequestName: what comes meanwhile is kept, not dropped.
    early = []
    serial = next(connection.outgoing_serial)
    connection.send(message_bus.RequestName(args.service, 4), serial=serial)
    while True:
        reply = connection.receive(timeout=20)
        if reply.header.fields.get(5) == serial:
            break
        early.append(reply)
    if reply.body[0] not in (1, 4):
        log("name-taken")
        return 1
    log("ready", unique=connection.unique_name)
    interface = "org.unifiedpush.Connector1" if args.v1 else "org.unifiedpush.Connector2"
    distributor = DBusAddress("/org/unifiedpush/Distributor", bus_name=args.distributor,
                              interface="org.unifiedpush.Distributor1" if args.v1 else "org.unifiedpush.Distributor2")
    waiting = {}
    app = args.app or args.service
    if args.register:
        if args.v1:
            call = new_method_call(distributor, "Register", "sss", (app, args.register, args.description))
        else:
            fields = {"service": ("s", app), "token": ("s", args.register)}
            if args.description:
                fields["description"] = ("s", args.description)
            if args.vapid:
                fields["vapid"] = ("s", args.vapid)
            call = new_method_call(distributor, "Register", "a{sv}", (fields,))
        serial = next(connection.outgoing_serial)
        connection.send(call, serial=serial)
        waiting[serial] = "registered"
    if args.unregister:
        call = (new_method_call(distributor, "Unregister", "s", (args.unregister,)) if args.v1
                else new_method_call(distributor, "Unregister", "a{sv}", ({"token": ("s", args.unregister)},)))
        serial = next(connection.outgoing_serial)
        connection.send(call, serial=serial)
        waiting[serial] = "unregister-reply"

    last = time.time()
    while True:
        try:
            message = early.pop(0) if early else connection.receive(timeout=0.2)
        except TimeoutError:
            if args.exit_idle and time.time() - last > args.exit_idle:
                log("exit")
                return 0
            continue
        header = message.header
        kind = header.message_type
        if kind in (MessageType.method_return, MessageType.error):
            serial = header.fields.get(5)  # reply_serial
            name = waiting.pop(serial, None)
            if name:
                if kind == MessageType.error:
                    log(name, error=str(header.fields.get(4)), body=list(message.body))
                elif args.v1 and name == "registered":
                    log(name, success=message.body[0], reason=message.body[1])
                elif name == "registered":
                    log(name, **{k: v[1] for k, v in message.body[0].items()})
                else:
                    log(name)
                if args.exit_after_register and name == "registered":
                    return 0
            continue
        if kind != MessageType.method_call:
            continue
        last = time.time()
        member = header.fields.get(3)
        called = header.fields.get(2)
        if called == "org.freedesktop.DBus.Peer" and member == "Ping":
            # As every D-Bus library answers it (libdbus, GDBus, sd-bus).
            connection.send(new_method_return(message))
            continue
        if header.fields.get(1) != "/org/unifiedpush/Connector" or called != interface:
            connection.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod"))
            continue
        if args.v1:
            body = message.body
            fields = {"Message": lambda: {"token": body[0], "message": base64.b64encode(bytes(body[1])).decode(), "id": body[2]},
                      "NewEndpoint": lambda: {"token": body[0], "endpoint": body[1]},
                      "Unregistered": lambda: {"token": body[0]}}[member]()
            log(member, **fields)
        else:
            values = {k: v[1] for k, v in message.body[0].items()}
            if "message" in values:
                values["message"] = base64.b64encode(bytes(values["message"])).decode()
            log(member, **values)
            answer = {"id": ("s", values["id"])} if member == "Message" and "id" in values else {}
            connection.send(new_method_return(message, "a{sv}", (answer,)))


if __name__ == "__main__":
    sys.exit(main())
