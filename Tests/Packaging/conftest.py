"""The packaging tests: the Debian packages, make install, and data folders across an upgrade."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import BIN, ROOT, free_port, wait_until  # noqa: E402,F401
