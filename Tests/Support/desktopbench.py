"""The desktop figures of `make bench` (nh-bench runs this script): two devices of one user, each
with its own Xvfb display, session bus and dunst, and an nh-agent on each, against one hub. The
agents show every popup on its own (NH_AGENT_POPUP_BURST=0), so the figures are of popups, not of
a burst's summary.

- popups/s: device 1's agent is stopped (SIGSTOP) while N notifications are posted, then let go;
  from its first Notify until dunst has answered the N-th, through the agent's own D-Bus connection.
  Beside it, notify-send run once per notification against the same dunst, one after another,
  and the server's own pace: Notify called from a plain D-Bus client, one after another.
- a burst of N posts from 8 clients at once: from the first post until both desktops have shown all N.
- close → withdrawn: a person closes the popup on device 1 (dunstctl close); from dunst's
  NotificationClosed there until device 2's popup is closed, p50 and p99 over --tries.

Prints one JSON object per figure (name, unit, count, seconds, value, baseline, note), for
nh-bench; --help lists the settings."""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import desktop as desktops  # noqa: E402
from hubharness import Hub, free_port, wait_until  # noqa: E402

USER = "bench"


def emit(**figure):
    print(json.dumps(figure), flush=True)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Bench:
    def __init__(self, bin_dir):
        self.bin = bin_dir
        self.hub = Hub(prefix="nh-desktop-bench-", settings={"NH_LOG_LEVEL": "notice"}, bin_dir=bin_dir)
        self.desktops = []
        self.agents = []

    def nh(self, executable, *arguments, env=None):
        done = subprocess.run([os.path.join(self.bin, executable), *arguments], env={**self.hub.env, **(env or {})},
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{executable} {' '.join(arguments)}: {done.stderr.strip()}")
        return done.stdout

    def start(self):
        if not self.hub.start_services():
            raise RuntimeError("the services did not start")
        credential = self.nh("nhctl", "user", "credential", USER).strip()
        for i in (1, 2):
            desktop = desktops.Desktop(f"bench-{i}")
            self.desktops.append(desktop)
            env = {"NH_AGENT_HOME": os.path.join(self.hub.data, f"device-{i}"), "NH_AGENT_INSTALLATION_ID": f"device-{i}",
                   "NH_AGENT_REQUESTS": f"tcp://127.0.0.1:{free_port()}", "NH_AGENT_USER_CREDENTIAL": credential, "NH_AGENT_POPUP_BURST": "0", **desktop.env}
            self.hub.start(f"device-{i}", "nh-agent", env=env, stdout=subprocess.DEVNULL)
            self.agents.append(env)
        for env in self.agents:
            if not wait_until(lambda: "desktop: ready" in self.health(env), timeout=60):
                raise RuntimeError(f"an agent did not reach its desktop: {self.health(env)}")

    def health(self, env):
        try:
            return subprocess.run([os.path.join(self.bin, "nh-agent"), "health"], env={**self.hub.env, **env},
                                  capture_output=True, text=True, timeout=10).stdout
        except subprocess.TimeoutExpired:
            return ""

    def post(self, session, app_id, title):
        r = session.post(f"{self.hub.base}/hub/users/{USER}/notifications?api-version=2015-01",
                         headers={"Authorization": self.token}, data=json.dumps({"appNotificationId": app_id,
                                                                                "visual": {"title": title, "body": title}}), timeout=30)
        r.raise_for_status()

    def answered(self, desktop, prefix):
        return sum(1 for p in desktop.popups() if p["summary"].startswith(prefix) and p["id"] is not None)

    def clear(self):
        for desktop in self.desktops:
            desktop.dunstctl("close-all")
        wait_until(lambda: all(d.displayed() == 0 for d in self.desktops), timeout=30)
        time.sleep(0.5)
        for desktop in self.desktops:
            desktop.dunstctl("close-all")

    def show_rate(self, n):
        import requests
        session = requests.Session()
        one = self.desktops[0]
        agent = self.hub.processes["device-1"]
        agent.send_signal(signal.SIGSTOP)
        try:
            for i in range(n):
                self.post(session, f"rate-{i}", f"Rate {i}")
            # Device 2 shows them meanwhile; device 1's agent has them waiting in the store.
            wait_until(lambda: self.answered(self.desktops[1], "Rate ") == n, timeout=120)
        finally:
            agent.send_signal(signal.SIGCONT)
        if not wait_until(lambda: self.answered(one, "Rate ") == n, timeout=120, interval=0.01):
            raise RuntimeError(f"device 1 showed {self.answered(one, 'Rate ')} of {n}")
        rate = [p for p in one.popups() if p["summary"].startswith("Rate ")]
        agent_seconds = max(0.001, max(p["answered"] for p in rate) - min(p["at"] for p in rate))
        self.clear()
        env = {**os.environ, **one.env}
        started = time.time()
        for i in range(n):
            subprocess.run(["notify-send", "--app-name=bench", f"Serial {i}", "body"], env=env, check=True, timeout=30)
        serial_seconds = time.time() - started
        self.clear()
        started = time.time()
        for i in range(n):
            one.notify(f"Direct {i}", "body")
        direct_seconds = time.time() - started
        self.clear()
        emit(name="desktop popups: the server's own pace (Notify from one D-Bus client, one after another)", unit="popups/s",
             count=n, seconds=direct_seconds, note="jeepney, one connection per call, against the same dunst")
        emit(name="desktop popups: notify-send per notification", unit="popups/s", count=n, seconds=serial_seconds,
             note="one process per popup, one after another, against the same dunst")
        emit(name="desktop popups: nh-agent's own D-Bus connection", unit="popups/s", count=n, seconds=agent_seconds,
             baseline="desktop popups: notify-send per notification",
             note=f"{n} user notifications waiting for the agent (SIGSTOP, then SIGCONT); from its first Notify to the last answer")

    def burst(self, n, posters=8):
        import requests
        from concurrent.futures import ThreadPoolExecutor
        sessions = [requests.Session() for _ in range(posters)]
        started = time.time()
        with ThreadPoolExecutor(posters) as pool:
            list(pool.map(lambda i: self.post(sessions[i % posters], f"burst-{i}", f"Burst {i}"), range(n)))
        posted = time.time() - started
        if not wait_until(lambda: all(self.answered(d, "Burst ") == n for d in self.desktops), timeout=120, interval=0.01):
            raise RuntimeError("the burst was not shown on both desktops")
        shown = max(p["at"] for d in self.desktops for p in d.popups() if p["summary"].startswith("Burst ")) - started
        self.clear()
        emit(name=f"desktop: a burst of {n} posts shown on two desktops", unit="s", count=n, seconds=shown, value=round(shown, 3),
             note=f"posted by {posters} clients at once; from the first POST until dunst answered the last Notify on both; "
                  f"posting alone took {posted:.2f} s")

    def close_latency(self, tries):
        import requests
        session = requests.Session()
        one, two = self.desktops
        latencies = []
        for i in range(tries):
            title = f"Close {i}"
            self.post(session, f"close-{i}", title)
            if not wait_until(lambda: self.answered(one, title) and self.answered(two, title), timeout=30, interval=0.005):
                raise RuntimeError(f"{title} was not shown on both desktops")
            wait_until(lambda: one.displayed() == 1, timeout=10, interval=0.005)
            popup_one = [p for p in one.popups() if p["summary"] == title][-1]["id"]
            popup_two = [p for p in two.popups() if p["summary"] == title][-1]["id"]
            one.dunstctl("close")

            def closed(desktop, popup):
                return [at for body, at in desktop.signals("NotificationClosed") if body[0] == popup]
            if not wait_until(lambda: closed(one, popup_one) and closed(two, popup_two), timeout=30, interval=0.002):
                raise RuntimeError(f"{title}: closed on device 1 but not withdrawn on device 2")
            latencies.append(closed(two, popup_two)[0] - closed(one, popup_one)[0])
        ms = [x * 1000 for x in latencies]
        for p in (50, 99):
            emit(name=f"desktop: close on device 1 → popup withdrawn on device 2, p{p}", unit="ms", count=tries, seconds=0,
                 value=round(percentile(ms, p), 2),
                 note=f"{tries} tries; from dunst's NotificationClosed(2) on device 1 to NotificationClosed on device 2; goal p99 < 250 ms")

    def stop(self):
        self.hub.stop_all()
        for desktop in self.desktops:
            desktop.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the folder of the nh-* executables")
    parser.add_argument("--popups", type=int, default=200, help="notifications for the popup rate and the burst (200)")
    parser.add_argument("--tries", type=int, default=100, help="closes timed for the latency (100)")
    options = parser.parse_args()
    absent = desktops.missing()
    if absent:
        print(f"missing: {', '.join(absent)}", file=sys.stderr)
        return 3
    bench = Bench(options.bin)
    try:
        bench.start()
        bench.token = bench.hub.token()
        bench.show_rate(options.popups)
        bench.burst(options.popups)
        bench.close_latency(options.tries)
    finally:
        bench.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
