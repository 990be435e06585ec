#!/usr/bin/python3
"""A UnifiedPush app's connector written with GLib's GDBus (python3-gi, Debian's Python), as a
GTK or GNOME app's would be: the same command line and JSON lines as upconnector.py (jeepney), so
the tests run each UnifiedPush rule through a second D-Bus stack. It owns its service name, serves
org.unifiedpush.Connector2 at /org/unifiedpush/Connector, may register with the distributor, and
writes each event as one JSON line to --out:

    {"event": "ready", "unique": ":1.7", "pid": 123, "stack": "gdbus"}
    {"event": "registered", "success": "REGISTRATION_SUCCEEDED", ...}
    {"event": "NewEndpoint", "token": "...", "endpoint": "http://..."}
    {"event": "Message", "token": "...", "message": "<base64>", "id": "..."}
    {"event": "Unregistered", "token": "..."}

Run it with /usr/bin/python3, whose python3-gi GLib is Debian's."""
import base64
import json
import sys
import time

from gi.repository import Gio, GLib

import connectorcli

CONNECTOR_XML = """
<node>
  <interface name="org.unifiedpush.Connector2">
    <method name="Message"><arg name="args" type="a{sv}" direction="in"/><arg name="res" type="a{sv}" direction="out"/></method>
    <method name="NewEndpoint"><arg name="args" type="a{sv}" direction="in"/><arg name="res" type="a{sv}" direction="out"/></method>
    <method name="Unregistered"><arg name="args" type="a{sv}" direction="in"/><arg name="res" type="a{sv}" direction="out"/></method>
  </interface>
</node>
"""


def main():
    parser = connectorcli.parser()
    parser.add_argument("--raw", metavar="JSON", help="Register with these a{sv} fields as given (name: [signature, value])")
    args = parser.parse_args()
    log = connectorcli.event_log(args.out, stack="gdbus")

    loop = GLib.MainLoop()
    connection = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    last = [time.time()]

    def called(_connection, _sender, _path, _interface, member, parameters, invocation):
        last[0] = time.time()
        values = dict(parameters.unpack()[0])
        if "message" in values:
            values["message"] = base64.b64encode(bytes(values["message"])).decode()
        log(member, **values)
        answer = {"id": GLib.Variant("s", values["id"])} if member == "Message" and "id" in values else {}
        invocation.return_value(GLib.Variant("(a{sv})", (answer,)))

    node = Gio.DBusNodeInfo.new_for_xml(CONNECTOR_XML)
    connection.register_object("/org/unifiedpush/Connector", node.interfaces[0], called, None, None)
    owned = connection.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
                                 GLib.Variant("(su)", (args.service, 4)), GLib.VariantType("(u)"), Gio.DBusCallFlags.NONE, 20000, None)
    if owned.unpack()[0] not in (1, 4):
        log("name-taken")
        return 1
    log("ready", unique=connection.get_unique_name())

    def distributor_call(member, fields, event):
        def done(source, result):
            try:
                reply = source.call_finish(result)
                log(event, **{k: v for k, v in reply.unpack()[0].items()})
            except GLib.Error as error:
                log(event, error=Gio.DBusError.get_remote_error(error) or error.message, message=error.message)
            if args.exit_after_register and event == "registered":
                loop.quit()
        connection.call(args.distributor, "/org/unifiedpush/Distributor", "org.unifiedpush.Distributor2", member,
                        GLib.Variant("(a{sv})", (fields,)), GLib.VariantType("(a{sv})"), Gio.DBusCallFlags.NONE, 60000, None, done)

    if args.raw:
        fields = {name: GLib.Variant(signature, value) for name, (signature, value) in json.loads(args.raw).items()}
        distributor_call("Register", fields, "registered")
    elif args.register:
        fields = {"service": GLib.Variant("s", args.app or args.service), "token": GLib.Variant("s", args.register)}
        if args.description:
            fields["description"] = GLib.Variant("s", args.description)
        if args.vapid:
            fields["vapid"] = GLib.Variant("s", args.vapid)
        distributor_call("Register", fields, "registered")
    if args.unregister:
        distributor_call("Unregister", {"token": GLib.Variant("s", args.unregister)}, "unregister-reply")

    def idle():
        if args.exit_idle and time.time() - last[0] > args.exit_idle:
            log("exit")
            loop.quit()
            return False
        return True

    GLib.timeout_add(200, idle)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
