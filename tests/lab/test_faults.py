"""crash, boot, partition and heal do what they say, to every part of a host."""

from __future__ import annotations

import socket
import time

import libvirt
import pytest

from yasco_lab import etcd
from yasco_lab import lab as lab_verbs
from yasco_lab import layout

from .conftest import yasco_lab


def host(lab, name):
    return next(h for h in lab["hosts"] if h["name"] == name)


def states(lab_status=None):
    return {h["name"]: h["state"] for h in (lab_status or lab_verbs.status())["hosts"]}


def reaches(name: str, address: str, port: int) -> bool:
    """Can host `name` open a TCP connection to address:port (from inside its namespaces)?"""
    probe = f"import socket; socket.create_connection(('{address}', {port}), timeout=2)"
    return lab_verbs.run_on_host(name, "python3", "-c", probe, timeout=20).returncode == 0


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


def host_processes(name: str) -> set[str]:
    """Names of the processes running inside host `name`'s PID namespace."""
    state = lab_verbs.LabState.load()
    init = state.node(name).init_pid
    result = lab_verbs.run_on_host(name, "ps", "-e", "-o", "comm=")
    assert init > 0 and result.returncode == 0
    return set(result.stdout.split())


def test_crash_kills_every_process_of_the_host_and_boot_brings_it_back(lab):
    hv3 = host(lab, "hv3")
    assert {"etcd", "libvirtd", "virtlogd", "sshd"} <= host_processes("hv3")
    node = lab_verbs.LabState.load().node("hv3")
    yasco_lab("crash", "hv3")
    try:
        assert not node.alive()
        assert states()["hv3"] == "crashed"
        assert not etcd.endpoint_health(hv3["etcd_client_url"])
        # Nothing answers at its address any more: not sshd, so not libvirt either.
        with pytest.raises(OSError):
            socket.create_connection((hv3["address"], 22), timeout=2).close()
        # The other two members keep quorum.
        wait_until(lambda: etcd.endpoint_health(host(lab, "hv1")["etcd_client_url"]), 15,
                   "hv1's etcd member healthy without hv3")
    finally:
        yasco_lab("boot", "hv3")
    assert states()["hv3"] == "running"
    assert etcd.endpoint_health(hv3["etcd_client_url"])
    conn = libvirt.open(hv3["libvirt_uri"])
    try:
        # The disk was kept: the Ceph secret defined at `up` is still there.
        assert conn.secretLookupByUUIDString(layout.CEPH_SECRET_UUID) is not None
    finally:
        conn.close()


def test_partition_cuts_the_host_off_from_etcd_and_ceph_and_heal_restores_it(lab):
    before = host_processes("hv2")
    assert reaches("hv2", layout.ceph_address(), layout.CEPH_MON_PORT)
    assert reaches("hv2", host(lab, "hv1")["address"], layout.ETCD_CLIENT_PORT)
    yasco_lab("partition", "hv2")
    try:
        assert states()["hv2"] == "partitioned"
        assert not reaches("hv2", layout.ceph_address(), layout.CEPH_MON_PORT)
        assert not reaches("hv2", host(lab, "hv1")["address"], layout.ETCD_CLIENT_PORT)
        assert not etcd.endpoint_health(host(lab, "hv2")["etcd_client_url"])
        # Everything on it keeps running.
        assert host_processes("hv2") >= before
    finally:
        yasco_lab("heal", "hv2")
    assert states()["hv2"] == "running"
    # The port is up at once; on a loaded machine the first connection may take longer
    # than the probe's 2 s (neighbour resolution after the cut).
    wait_until(lambda: reaches("hv2", layout.ceph_address(), layout.CEPH_MON_PORT), 15,
               "hv2 reaching Ceph's monitor again")
    wait_until(lambda: reaches("hv2", host(lab, "hv1")["address"], layout.ETCD_CLIENT_PORT),
               15, "hv2 reaching hv1's etcd again")
    wait_until(lambda: etcd.endpoint_health(host(lab, "hv2")["etcd_client_url"]), 15,
               "hv2's etcd member healthy again")


def test_partition_from_etcd_cuts_the_host_off_from_the_other_members_and_not_from_ceph(lab):
    yasco_lab("partition", "hv2", "--from", "etcd")
    try:
        assert states()["hv2"] == "cut from etcd"
        assert not reaches("hv2", host(lab, "hv1")["address"], layout.ETCD_CLIENT_PORT)
        assert not reaches("hv2", host(lab, "hv3")["address"], layout.ETCD_PEER_PORT)
        assert reaches("hv2", layout.ceph_address(), layout.CEPH_MON_PORT)
        # Its own member, cut off from the others, has no quorum.
        wait_until(lambda: not etcd.endpoint_health(host(lab, "hv2")["etcd_client_url"]),
                   15, "hv2's etcd member without quorum")
    finally:
        yasco_lab("heal", "hv2")
    assert states()["hv2"] == "running"
    wait_until(lambda: reaches("hv2", host(lab, "hv1")["address"], layout.ETCD_CLIENT_PORT),
               15, "hv2 reaching hv1's etcd again")
    wait_until(lambda: etcd.endpoint_health(host(lab, "hv2")["etcd_client_url"]), 30,
               "hv2's etcd member healthy again")
