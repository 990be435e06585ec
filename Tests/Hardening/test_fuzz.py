"""A short run of the fuzzer (fuzz.py beside this file) against the built executables: every
service stays up, answers health and keeps its memory bounded, and every malformed input on every
socket is refused with an error that has a stable code. `make fuzz` runs the long version."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMES = int(os.environ.get("NH_FUZZ_FRAMES", "20000"))
SEED = os.environ.get("NH_FUZZ_SEED", "1")


def test_short_fuzz_run_finds_nothing():
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "fuzz.py"), "--frames", str(FRAMES), "--seed", SEED],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or "failures: 0" not in result.stdout:
        pytest.fail(f"the fuzzer exited {result.returncode}:\n{result.stdout}{result.stderr}", pytrace=False)
