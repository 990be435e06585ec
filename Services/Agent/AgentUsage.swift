/// What `nh-agent` says it does.
enum AgentUsage {
    /// The whole usage: `nh-agent help`, `nh-agent --help` and `nh-agent run --help` all print it.
    static let text = """
        nh-agent: the client agent on a Linux host

        Usage:
          nh-agent [run] [--config FILE] [--check-config] [--version]
                                               receive notifications (the daemon)
          nh-agent subscribe CATEGORY...       choose the categories to receive, such as World Sports
          nh-agent unsubscribe CATEGORY...     stop receiving categories
          nh-agent categories                  show the chosen categories
          nh-agent id                          show this agent's installation id
          nh-agent login CREDENTIAL            sign in as a user, with a credential from nhctl user credential
          nh-agent list                        this user's notifications as this agent has them, with states
          nh-agent history                     the user's notifications in the store, dismissed ones included
          nh-agent keys                        the user's encryption key and the devices that hold it
          nh-agent keys init [--plaintext refuse]
                                               make the user's key on this device; prints the recovery key once
          nh-agent keys rotate [--revoke DEVICE,...] [--plaintext refuse|accept]
                                               a new key for every device but the revoked ones
          nh-agent keys recover [RECOVERY-KEY] restore the key on this device with the recovery key
          nh-agent pair                        get the key from a device that holds it: shows a code
          nh-agent pair accept CODE            hand the key to the device that shows CODE
          nh-agent read|dismiss|activate|snooze|delete ID
                                               change a notification for the user on every device
          nh-agent health                      whether the running agent is up, registered, and reaches
                                               the desktop's notification server (which one, and what it can do)
          nh-agent apps                        the apps registered for push (UnifiedPush), with their endpoints
          nh-agent apps remove APP             unregister an app (its service name, or an endpoint): its
                                               endpoints answer 410 from then on
          nh-agent help | --help | -h          this text

        Each notification is written to standard output as one JSON line, passed to the command in
        NH_AGENT_HOOK (on standard input and as NH_* variables), and shown as a popup through the
        desktop's notification server (org.freedesktop.Notifications) on the session bus. Closing a
        user's notification's popup dismisses it on every device; clicking it (or Open) activates it;
        Snooze snoozes it.

        The agent is also a UnifiedPush distributor on the session bus (org.unifiedpush.Distributor.nh):
        an app registers there and is given an endpoint URL at the hub's gateway; what its server posts
        to that URL is handed to the app's connector, acknowledged once the app has it, and kept for an
        app that is not running until it registers again or the message's TTL ends.

        Environment:
          NH_AGENT_HOME               the agent's folder: its store, device key and rich-payload cache
                                      (default: DATA_DIR/agent)
          NH_AGENT_CONNECTION_STRING  the listen key's connection string (default: the listen key in
                                      the data folder's keys.json, on a host that runs the services)
          NH_BUS_SERVER_KEY           the hub's CURVE public key, from nhctl keys (default: read from
                                      the data folder)
          NH_AGENT_USER_CREDENTIAL    a user credential, instead of nh-agent login
          NH_AGENT_TEMPLATE           the template registered (default:
                                      {"title":"$(title)","message":"$(messageParam)"})
          NH_AGENT_HOOK               a command run for each notification
          NH_AGENT_INSTALLATION_ID    the installation id (default: one made at the first start and kept)
          NH_AGENT_RICH_ATTEMPTS      tries to fetch a rich payload before it is reported failed (default: 8)
          NH_AGENT_DESKTOP            0: no popups
          NH_AGENT_POPUP_BURST        popups shown on their own within 10 s before the rest of a burst
                                      are counted in one summary popup (default 3; 0: never grouped)
          NH_AGENT_UNIFIEDPUSH        0: no UnifiedPush distributor (with NH_AGENT_DESKTOP=0 too, the
                                      session bus is never contacted)
          NH_AGENT_UNIFIEDPUSH_NAME   the distributor's bus name (default: org.unifiedpush.Distributor.nh)
          NH_AGENT_POWER_SUPPLY       where the power supplies are read, for the urgency push messages
                                      need (default: /sys/class/power_supply)
          DBUS_SESSION_BUS_ADDRESS    the desktop session's bus (default: $XDG_RUNTIME_DIR/bus when it
                                      exists); with neither, there are no popups. A bus is never started.

        Settings come from their defaults, then the JSON config file (--config or NH_CONFIG; installed,
        /etc/nh/agent.json without either), then NH_* environment variables, as for every service:
        NH_DATA_DIR, NH_AGENT_REQUESTS (the local control socket: by default ipc://AGENT_HOME/control.sock,
        a Unix socket in the agent's home that only its user can reach; a tcp:// endpoint lets any
        local user who holds the listen key in), NH_REGISTRY_REQUESTS, NH_DISPATCH_AGENTS,
        NH_SYNC_REQUESTS and the rest.
        Exit codes: 0 success (the daemon: after SIGINT or SIGTERM), 1 a runtime failure, 2 bad
        arguments or config, or a command that was refused.
        """
}
