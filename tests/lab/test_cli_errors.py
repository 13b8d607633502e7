"""Bad input gets one clear line and a non-zero exit, and changes nothing."""

from __future__ import annotations

import os
import pwd

import pytest

from .conftest import yasco_lab


def assert_one_line_error(result, *phrases):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("yasco-lab: error: ")
    for phrase in phrases:
        assert phrase in lines[0]


@pytest.mark.parametrize("verb", ["crash", "boot", "partition", "heal"])
def test_unknown_host_is_named_with_the_hosts_that_exist(lab, verb):
    assert_one_line_error(yasco_lab(verb, "hv9", check=False), "'hv9'", "hv1, hv2, hv3")


def test_up_twice_says_the_lab_is_up(lab):
    assert_one_line_error(yasco_lab("up", check=False), "already up", "yasco-lab down")


def test_verbs_that_make_no_sense_for_the_host_state(lab):
    assert_one_line_error(yasco_lab("boot", "hv1", check=False), "hv1 is running")
    assert_one_line_error(yasco_lab("heal", "hv1", check=False), "not partitioned")


def test_bad_host_count(lab):
    assert_one_line_error(yasco_lab("up", "--hosts", "0", check=False), "--hosts")


def test_missing_privileges():
    nobody = pwd.getpwnam("nobody")

    def drop_root():
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    result = yasco_lab("status", check=False, preexec_fn=drop_root,
                       env={**os.environ, "YASCO_LAB_DIR": "/nonexistent/yasco-lab"})
    assert_one_line_error(result, "needs root")


def test_missing_packages():
    result = yasco_lab("up", check=False, env={**os.environ, "PATH": "/nonexistent"})
    assert_one_line_error(result, "missing packages", "make setup")
