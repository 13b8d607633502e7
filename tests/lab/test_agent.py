"""The host agent on the lab's hypervisors: its liveness key and lease, the domains it
publishes, its self-fence when cut off, and its graceful stop. The agents run as
`yasco-lab up` and `boot` start them, against the lab's real etcd and libvirt."""

from __future__ import annotations

import json
import re
import time
import uuid

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import (
    render_domain_xml)
from yasco_lab.credentials import etcd_client
from yasco_lab import etcd as lab_etcd
from yasco_lab import hypervisor, layout, watchdog
from yasco_lab.lab import LabState

from .conftest import yasco_lab
from .lab_cluster import etcd_leader, wait_for

TTL, MARGIN = hypervisor.AGENT_TTL, hypervisor.AGENT_MARGIN
FENCE_LINE = re.compile(r"SELF-FENCE: .*destroyed HA domains: (.*); at (\d+\.\d+)")


def alive_key(host: str) -> str:
    return etcd_keys.alive_key(host, cluster=layout.CLUSTER_NAME)


def host_of(lab: dict, name: str) -> dict:
    return next(h for h in lab["hosts"] if h["name"] == name)


def layout_of(name: str):
    return next(h for h in LabState.load().layouts() if h.name == name)


def start_domain(uri: str, kind: str) -> str:
    """A small domain of `kind` that boots no OS (its firmware finds no disk)."""
    name = f"agent-{kind}-{uuid.uuid4().hex[:6]}"
    spec = {"vcpus": 1, "memory_mb": 32, "domain_type": "qemu", "kind": kind}
    conn = libvirt.open(uri)
    try:
        conn.defineXML(render_domain_xml(name, spec)).create()
    finally:
        conn.close()
    return name


def remove_domain(uri: str, name: str) -> None:
    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(name)
        if dom.isActive():
            dom.destroy()
        dom.undefine()
    finally:
        conn.close()


def is_running(uri: str, name: str) -> bool:
    conn = libvirt.open(uri)
    try:
        return bool(conn.lookupByName(name).isActive())
    finally:
        conn.close()


def fences_logged(host: str) -> list[tuple[list[str], float]]:
    """The self-fences in the host agent's log: (destroyed domains, wall time)."""
    text = hypervisor.agent_log_path(layout_of(host)).read_text(errors="replace")
    return [([d for d in m.group(1).split(", ") if d != "none"], float(m.group(2)))
            for m in FENCE_LINE.finditer(text)]


@pytest.fixture(name="etcd")
def fixture_etcd(lab):
    with etcd_client(lab["etcd_endpoints"]) as client:
        yield client


def test_every_host_holds_a_liveness_key_under_a_lease_of_the_ttl(lab, etcd):
    for host in lab["hosts"]:
        kv = wait_for(f"{host['name']} registered",
                      lambda h=host: etcd.get(alive_key(h["name"])), 15)
        value = json.loads(kv.value)
        assert value["address"] == host["address"]
        assert value["ceph_addrs"] == [host["address"]]
        assert value["boot_id"] and value["agent_version"] and value["ttl"] == TTL
        lease = etcd.lease_info(kv.lease)
        assert lease.granted_ttl == TTL and 0 < lease.ttl <= TTL
        assert kv.key in lease.keys


def test_running_domains_are_published_under_the_lease_and_unpublished(lab, etcd):
    hv = host_of(lab, "hv1")
    name = start_domain(hv["libvirt_uri"], "plain")
    key = etcd_keys.domain_key("hv1", name, cluster=layout.CLUSTER_NAME)
    try:
        # QEMU starts paused and then runs: each state is published as it comes.
        kv = wait_for("domain published as running", lambda: (
            etcd.get(key) if '"running"' in getattr(etcd.get(key), "value", "") else None), 10)
        assert json.loads(kv.value) == {"state": "running"}
        assert kv.lease == etcd.get(alive_key("hv1")).lease
    finally:
        remove_domain(hv["libvirt_uri"], name)
    wait_for("domain unpublished", lambda: etcd.get(key) is None, 10)


def test_a_crashed_host_loses_its_liveness_key_within_the_ttl(lab, etcd):
    wait_for("hv3 registered", lambda: etcd.get(alive_key("hv3")), 15)
    yasco_lab("crash", "hv3")
    crashed = time.monotonic()
    try:
        wait_for("hv3's key gone", lambda: etcd.get(alive_key("hv3")) is None, TTL + 3)
        print(f"\nliveness key gone {time.monotonic() - crashed:.2f} s after the crash "
              f"(ttl {TTL} s)")
    finally:
        yasco_lab("boot", "hv3")
    wait_for("hv3 registered again", lambda: etcd.get(alive_key("hv3")), 15)


def test_a_partitioned_host_self_fences_its_ha_domains_before_its_lease_expires(lab, etcd):
    hv = host_of(lab, "hv2")
    margins = []
    for run in range(3):
        wait_for("hv2 registered", lambda: etcd.get(alive_key("hv2")), 15)
        ha = start_domain(hv["libvirt_uri"], "ha")
        plain = start_domain(hv["libvirt_uri"], "plain")
        fences_before = len(fences_logged("hv2"))
        yasco_lab("partition", "hv2")
        try:
            wait_for("hv2's key gone", lambda: etcd.get(alive_key("hv2")) is None, TTL + 5,
                     every=0.02)
            expired = time.time()
        finally:
            yasco_lab("heal", "hv2")
        fences = fences_logged("hv2")[fences_before:]
        assert fences, "no self-fence logged"
        destroyed, fenced_at = fences[0]
        assert destroyed == [ha]
        margins.append(expired - fenced_at)
        # It destroyed an HA domain, so it stays away until the evacuation has
        # fenced it: here the test does what the evacuation would.
        time.sleep(3)
        assert etcd.get(alive_key("hv2")) is None
        fence = etcd_keys.fence_key("hv2", cluster=layout.CLUSTER_NAME)
        if run == 0:
            # A fence being lifted (a return home of an earlier failure, say) is not
            # this failure's: the agent goes on waiting.
            etcd.put(fence, json.dumps({"by": "test", "lifting": {"lease": 1}}))
            time.sleep(3)
            assert etcd.get(alive_key("hv2")) is None, "registered behind a lifted fence"
        etcd.put(fence, json.dumps({"by": "test"}))
        wait_for("hv2 registered again", lambda: etcd.get(alive_key("hv2")), 20)
        etcd.delete(fence)
        assert not is_running(hv["libvirt_uri"], ha)  # the agent starts nothing itself
        assert is_running(hv["libvirt_uri"], plain)
        for name in (ha, plain):
            remove_domain(hv["libvirt_uri"], name)
        del run
    print("\nself-fence before the lease was seen to expire, s: "
          + ", ".join(f"{m:.2f}" for m in margins))
    assert min(margins) >= 1.0, margins
    # Under hv2 until an HA watcher copies them into the history: both are read.
    events = cluster_events.recent(etcd, 1000, cluster=layout.CLUSTER_NAME)
    assert sum(e["kind"] == "self-fenced" and e["host"] == "hv2" for e in events) >= 3


def test_losing_the_etcd_leader_neither_fences_nor_drops_a_liveness_key(lab, etcd):
    before = {h["name"]: wait_for("registered", lambda h=h: etcd.get(alive_key(h["name"])), 15)
              for h in lab["hosts"]}
    fences_before = {h: len(fences_logged(h)) for h in before}
    leader = etcd_leader(lab)
    state = LabState.load()
    node = state.node(leader)
    node.run("pkill", "-KILL", "-x", "etcd")
    try:
        time.sleep(3 * TTL)
        for host, kv in before.items():
            now = etcd.get(alive_key(host))
            assert now is not None and now.lease == kv.lease, host
            assert len(fences_logged(host)) == fences_before[host], host
    finally:
        host = layout_of(leader)
        node.start_daemon(*lab_etcd.member_command(host, state.layouts()),
                          log=host.root / "log" / "etcd.log")
        lab_etcd.wait_healthy([host], timeout=30)


def test_a_graceful_stop_marks_maintenance_before_the_lease_goes(lab, etcd):
    hv = host_of(lab, "hv1")
    ha = start_domain(hv["libvirt_uri"], "ha")
    marker_key = etcd_keys.maintenance_key("hv1", cluster=layout.CLUSTER_NAME)
    wait_for("hv1 registered", lambda: etcd.get(alive_key("hv1")), 15)
    pid = json.loads(etcd.get(alive_key("hv1")).value)["pid"]
    fences_before = len(fences_logged("hv1"))
    state = LabState.load()
    # The agent's pid is in hv1's PID namespace: signal it from inside.
    state.node("hv1").run("kill", "-TERM", str(pid))
    try:
        wait_for("hv1's key gone", lambda: etcd.get(alive_key("hv1")) is None, 5)
        marker = etcd.get(marker_key)
        assert marker is not None and json.loads(marker.value)["by"] == "agent"
        assert is_running(hv["libvirt_uri"], ha)
        assert len(fences_logged("hv1")) == fences_before
    finally:
        host = layout_of("hv1")
        hypervisor.start_agent(state.node("hv1"), host, state.layouts())
    wait_for("hv1 registered again", lambda: etcd.get(alive_key("hv1")), 15)
    wait_for("marker cleared", lambda: etcd.get(marker_key) is None, 5)
    remove_domain(hv["libvirt_uri"], ha)


def test_a_hung_agent_is_reset_by_its_host_watchdog_before_its_lease_expires(lab, etcd):
    """The hardware watchdog, the layer under the self-fence: hv2's agent, armed with
    the host's emulated watchdog, is stopped dead (SIGSTOP) with an HA domain running;
    it renews nothing and fences nothing, and the watchdog resets the whole host while
    its lease still stands, so nothing can have started that VM elsewhere first."""
    hv = host_of(lab, "hv2")
    host = layout_of("hv2")
    state = LabState.load()
    node = state.node("hv2")
    node.run("sh", "-ec", hypervisor.agent_service_commands(host)["stop"], timeout=60)
    hypervisor.start_agent(node, host, state.layouts(), with_watchdog=True)
    kv = wait_for("hv2 registered with its watchdog", lambda: etcd.get(alive_key("hv2")) if (
        etcd.get(alive_key("hv2")) and json.loads(etcd.get(alive_key("hv2")).value)[
            "watchdog"] == watchdog.TIMEOUT) else None, 20)
    ha = start_domain(hv["libvirt_uri"], "ha")
    node.run("kill", "-STOP", str(json.loads(kv.value)["pid"]))
    stopped = time.monotonic()
    wait_for("hv2 reset by its watchdog", lambda: not node.alive(), TTL + 5)
    reset = time.monotonic()
    lease_left = etcd.lease_info(kv.lease, keys=False)
    wait_for("hv2's lease expired", lambda: etcd.get(alive_key("hv2")) is None, TTL + 5)
    expired = time.monotonic()
    print(f"\nhung at 0: reset at {reset - stopped:.2f} s, lease seen expired at "
          f"{expired - stopped:.2f} s")
    assert lease_left is not None, "the host was reset only after its lease expired"
    assert expired > reset
    log = (host.run / "node.log").read_text(errors="replace")
    assert f"hv2: WATCHDOG: not petted for {watchdog.TIMEOUT} s: resetting the host" in log
    yasco_lab("boot", "hv2")
    wait_for("hv2 registered again", lambda: etcd.get(alive_key("hv2")), 20)
    assert not is_running(hv["libvirt_uri"], ha)
    remove_domain(hv["libvirt_uri"], ha)
