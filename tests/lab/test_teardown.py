"""`down` leaves nothing behind: no processes, mounts, namespaces, bridges or links."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from yasco_lab import lab as lab_verbs
from yasco_lab import layout, node

from . import conftest
from .conftest import NAMESPACES_BEFORE_LAB, network_namespaces, yasco_lab
from .test_cli_errors import assert_one_line_error


def lab_links() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("yasco-")]


def lab_mounts() -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if "yasco-lab" in line or str(layout.state_dir()) in line]


@pytest.mark.teardown
def test_down_leaves_nothing_behind(lab):
    assert len(network_namespaces() - NAMESPACES_BEFORE_LAB) >= 4  # ceph, three hypervisors
    yasco_lab("down")
    assert node.find_stale() == []
    assert lab_links() == []
    assert lab_mounts() == []
    assert network_namespaces() - NAMESPACES_BEFORE_LAB == set()
    for command in ("etcd", "ceph-mon", "ceph-osd", "libvirtd", "qemu-system-x86_64"):
        assert subprocess.run(["pgrep", "-x", command], capture_output=True,
                              check=False).returncode == 1, f"{command} still running"
    assert not (layout.inventory_dir() / "hosts.yml").exists()
    assert_one_line_error(yasco_lab("down", check=False), "not up")


@pytest.mark.teardown
def test_up_after_an_interrupted_up_cleans_up_and_succeeds(tmp_path):
    """A controller that dies in the middle of `up` leaves a half-built lab behind."""
    cli = conftest.CLI
    log = (tmp_path / "up.log").open("w")
    interrupted = subprocess.Popen([cli, "up"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    # Kill it once the hypervisors are being started: Ceph runs, the hosts half exist.
    while "starting hypervisors" not in (tmp_path / "up.log").read_text():
        assert interrupted.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    interrupted.kill()
    interrupted.wait()
    assert node.find_stale() != []  # the half-built lab is still there
    yasco_lab("up")
    try:
        assert all(h["state"] == "running" and h["etcd"] == "healthy"
                   for h in lab_verbs.status()["hosts"])
    finally:
        yasco_lab("down")
    assert node.find_stale() == []
    assert lab_links() == []
