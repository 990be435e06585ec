"""A short soak (about a minute): the whole hub under mixed load while services and agents are
killed and started again; nothing accepted may be lost, shown twice or shown to the wrong agent,
and every device of a user must agree with the sync store. `make soak` runs the long one."""
import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_short_soak(tmp_path):
    seconds = float(os.environ.get("NH_SOAK_SECONDS", "60"))
    summary_path = tmp_path / "summary.json"
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "soak.py"), "--seconds", str(seconds),
                                "--summary", str(summary_path)])
    try:
        status = process.wait(timeout=seconds + 600)
    except subprocess.TimeoutExpired:
        # The soak ends every process it started when it is stopped.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise
    assert summary_path.exists(), f"the soak wrote no summary (exit status {status})"
    summary = json.loads(summary_path.read_text())
    assert status != 2, f"the hub did not start: {summary}"
    details = summary["details"]
    assert summary["lost"] == 0, details["lost"]
    assert summary["duplicated"] == 0, details["duplicated"]
    assert summary["misdelivered"] == 0, details["misdelivered"]
    assert summary["devicesAgree"], details["disagreements"]
    assert summary["storeAgrees"], details["stateErrors"]
    assert not summary["crashes"], summary["crashes"]
    assert status == 0 and summary["ok"]
