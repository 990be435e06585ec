"""deploy/bench-chart.py: draws nh-bench --output's JSON as a PNG, and refuses a malformed file
with a message that names it and what is wrong."""
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import BIN, ROOT

SCRIPT = os.path.join(ROOT, "deploy", "bench-chart.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

DOCUMENT = {
    "machine": {"cores": 2, "date": "2026-01-31T12:00:00Z", "host": "bench-host", "os": "Debian 12"},
    "settings": {"messages": 1000, "roundTrips": 100, "size": 200},
    "results": [
        {"name": "raw libzmq PUSH/PULL", "unit": "msg/s", "rate": 1338897, "count": 499999, "seconds": 0.37},
        {"name": "Bus PUSH/PULL", "unit": "msg/s", "rate": 1453325, "baseline": "raw libzmq PUSH/PULL", "ratio": 1.09},
        {"name": "fan-out N=1000: connect all agents", "unit": "s", "rate": 0.9, "value": 0.9,
         "baseline": "Mosquitto N=1000: connect all"},
        {"name": "Mosquitto N=1000: connect all", "unit": "s", "rate": 0.21, "value": 0.21},
        {"name": "Mosquitto QoS 0, pub → broker → sub", "unit": "msg/s", "rate": 0, "baseline": "raw libzmq PUSH/PULL",
         "note": "skipped: no mosquitto"},
        {"name": "user posts, durable", "unit": "post/s", "rate": 480, "note": "user with 3 devices"},
    ],
}


def chart(tmp_path, document, *extra):
    results = tmp_path / "results.json"
    results.write_text(document if isinstance(document, str) else json.dumps(document))
    output = tmp_path / "chart.png"
    run = subprocess.run([sys.executable, SCRIPT, str(results), str(output), *extra], capture_output=True, text=True,
                         timeout=120)
    return run, output


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_draws_each_figure_beside_its_reference(tmp_path):
    pytest.importorskip("matplotlib")
    run, output = chart(tmp_path, DOCUMENT)
    assert run.returncode == 0, run.stderr
    # Two pairs; the skipped Mosquitto figure and the user posts, which have no reference, are listed.
    assert "2 figures beside their reference, 2 listed" in run.stdout
    assert output.stat().st_size > 10_000
    width, height = png_size(output)
    assert width >= 600 and height >= 300


def test_draws_what_nh_bench_writes(tmp_path):
    pytest.importorskip("matplotlib")
    results = tmp_path / "bench.json"
    bench = subprocess.run([os.path.join(BIN, "nh-bench"), "--no-services", "--no-fanout", "--no-mosquitto",
                            "--messages", "2000", "--round-trips", "200", "--output", str(results)],
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(results.read_text())["machine"]["cores"] >= 1
    output = tmp_path / "bench.png"
    run = subprocess.run([sys.executable, SCRIPT, str(results), str(output)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "5 figures beside their reference" in run.stdout
    assert output.read_bytes()[:8] == PNG_SIGNATURE and output.stat().st_size > 10_000


@pytest.mark.parametrize("document, message", [
    ("{not json", "not JSON"),
    ([1, 2], "not a JSON object"),
    ({"machine": {"cores": 2}}, 'no "results" list'),
    ({"results": []}, '"results" is empty'),
    ({"results": [{"unit": "msg/s", "rate": 1}]}, 'results[0] has no "name"'),
    ({"results": [{"name": "Bus PUSH/PULL", "unit": "msg/s", "rate": "fast"}]},
     'results[0] (Bus PUSH/PULL): "rate" must be a number, not "fast"'),
    ({"results": [{"name": "a", "unit": "msg/s", "rate": 1}, {"name": "b", "rate": 2}]}, 'results[1] (b) has no "unit"'),
    ({"results": [{"name": "a", "unit": "msg/s", "rate": 1, "baseline": 3}]}, '"baseline" must be a string'),
])
def test_refuses_a_malformed_file(tmp_path, document, message):
    run, output = chart(tmp_path, document)
    assert run.returncode == 2
    assert run.stderr.startswith(f"bench-chart: {tmp_path / 'results.json'}: ")
    assert message in run.stderr, run.stderr
    assert not output.exists()


def test_refuses_a_missing_file(tmp_path):
    run = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "none.json"), str(tmp_path / "chart.png")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "cannot read it" in run.stderr
