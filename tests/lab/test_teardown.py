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


def lab_processes() -> list[str]:
    """The lab's daemons still running: they live in the nodes' PID namespaces, which
    tells them from an etcd or libvirtd the machine (or another test) runs itself."""
    names = {n[:15] for n in ("etcd", "ceph-mon", "ceph-osd", "libvirtd", "virtlogd", "sshd",
                              "qemu-system-x86_64")}  # /proc/PID/comm keeps 15 characters
    own = Path("/proc/self/ns/pid").readlink()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc / "comm").read_text().strip() in names and \
                    (proc / "ns" / "pid").readlink() != own:
                found.append(f"{proc.name} {(proc / 'comm').read_text().strip()}")
        except OSError:
            continue
    return found


@pytest.mark.teardown
def test_down_leaves_nothing_behind(lab):
    assert len(network_namespaces() - NAMESPACES_BEFORE_LAB) >= 4  # ceph, three hypervisors
    assert any(p.endswith(" etcd") for p in lab_processes())  # the check can see them
    yasco_lab("down")
    assert node.find_stale() == []
    assert lab_links() == []
    assert lab_mounts() == []
    assert network_namespaces() - NAMESPACES_BEFORE_LAB == set()
    assert lab_processes() == []
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
