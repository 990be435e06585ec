"""A data folder written by an earlier build, opened by this one: every installation, send outcome,
user notification and key is still there, the agents keep their identities and categories, a
delivery that waited for an offline device through the upgrade reaches it once, and nothing is
shown twice. The folders are in Tests/Packaging/upgrade-from-*, each written by
`upgrade_data.py write` with the build its name gives (make upgrade-test writes one from any commit)."""
import glob
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import upgrade_data  # noqa: E402
from hubharness import BIN, ROOT  # noqa: E402  (upgrade_data puts Tests/Support on the path)

FOLDERS = sorted(glob.glob(os.path.join(ROOT, "Tests/Packaging/upgrade-from-*")))


def test_there_is_a_folder_from_an_earlier_build():
    assert FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=[os.path.basename(f) for f in FOLDERS])
def test_this_build_opens_a_folder_written_by_an_earlier_one(folder):
    assert os.path.exists(upgrade_data.FAKETIME_LIBRARY), "libfaketime is missing: make deps installs the faketime package"
    upgrade_data.check(BIN, folder)
