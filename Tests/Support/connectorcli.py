"""What the tests' UnifiedPush connectors share, whichever D-Bus library they are written with
(upconnector.py with jeepney, gdbusconnector.py with GLib's GDBus): the command line, and the log
of events, one JSON line each, that a test reads."""
import argparse
import json
import os
import time

DISTRIBUTOR = "org.unifiedpush.Distributor.nh"


def parser():
    """The options every connector takes; a connector adds its own."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--app", help="the service name to register (default: --service)")
    parser.add_argument("--register", metavar="TOKEN")
    parser.add_argument("--unregister", metavar="TOKEN")
    parser.add_argument("--vapid")
    parser.add_argument("--description", default="")
    parser.add_argument("--distributor", default=DISTRIBUTOR)
    parser.add_argument("--exit-idle", type=float, default=0)
    parser.add_argument("--exit-after-register", action="store_true")
    return parser


def event_log(path, **always):
    """log(event, **fields): appends {"event", "at", "pid", **always, **fields} to `path`, flushed at once."""
    out = open(path, "a")

    def log(event, **fields):
        out.write(json.dumps({"event": event, "at": time.time(), "pid": os.getpid(), **always, **fields}) + "\n")
        out.flush()
    return log
