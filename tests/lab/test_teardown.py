"""`down` leaves nothing behind: no processes, mounts, namespaces, bridges or links."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from yasco_lab import layout, node

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
