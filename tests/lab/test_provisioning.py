"""playbooks/provision.yml, status.yml and remove_vm.yml on the lab: libvirt on every
host, RBD and etcd agree with the VDM, a rerun changes nothing, and status flags what
disagrees."""

from __future__ import annotations

import threading
import time
import uuid

import libvirt
import pytest
import rbd
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.stories.config_drive import read_iso
from yasco_lab.credentials import etcd_client
from yasco_lab import layout, storage

from .lab_cluster import history, make_inventory, playbook, records, running, vdm_of


@pytest.fixture(name="cluster", scope="module")
def fixture_cluster(lab, tmp_path_factory):
    """An inventory of the lab with a mixed set of VMs (unique names), planned and
    provisioned once for this file's tests; removed with their disks afterwards."""
    suffix = uuid.uuid4().hex[:6]
    names = {kind: f"{kind}-{suffix}" for kind in ("ha1", "ha2", "plain", "batch", "cidata")}
    vms = {names["ha1"]: {"ha": True}, names["ha2"]: {"ha": True, "priority": 5},
           names["plain"]: {}, names["batch"]: {"preemptible": True},
           names["cidata"]: {"ha": True, "cloud_init": {
               "user_data": {"runcmd": ["echo provisioned"]}}}}
    inventory = make_inventory(lab, tmp_path_factory.mktemp("provisioning") / "inventory",
                               vms)
    rc, dummy = playbook("plan", inventory)
    assert rc == 0
    rc, dummy = playbook("provision", inventory)
    assert rc == 0
    yield inventory, names
    for name in names.values():
        playbook("remove_vm", inventory, vm=name, delete_disk=name)


def test_provision_agrees_everywhere_and_a_rerun_changes_nothing(lab, cluster):
    inventory, names = cluster
    vdm = vdm_of(inventory)
    where = running(lab)
    stored = records(lab)
    with storage.pool() as ioctx:
        images = set(rbd.RBD().list(ioctx))
    for name in names.values():
        assert where.get(name) == [vdm["home"][name]], name
        assert stored[name] == {"host": vdm["home"][name], "state": "running"}
        assert name in images
    assert f"{names['cidata']}-cidata" in images
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        applied = etcd.get(etcd_keys.vdm_version_key(cluster=layout.CLUSTER_NAME))
    assert applied is not None and int(applied.value) == vdm["version"]
    with storage.pool() as ioctx, rbd.Image(ioctx, f"{names['cidata']}-cidata") as image:
        drive = read_iso(image.read(0, image.size()))
    assert drive["user-data"] == b"#cloud-config\nruncmd:\n- echo provisioned\n"
    started = {e["vm"]: e["host"] for e in history(lab, "started", names.values())}
    assert started == {name: vdm["home"][name] for name in names.values()}

    rc, again = playbook("provision", inventory)
    assert rc == 0
    assert [r for r in again if r.get("changed")] == []
    assert len(history(lab, "started", names.values())) == len(started)  # a rerun starts nothing


def test_check_mode_reports_a_new_vm_and_creates_nothing(lab, cluster):
    inventory, names = cluster
    vms_file = inventory / "group_vars" / "all" / "vms.yml"
    vdm_file = inventory / "group_vars" / "all" / "yasco_vdm.yml"
    original, original_vdm = vms_file.read_text(), vdm_file.read_text()
    vms = yaml.safe_load(original)
    new = f"new-{uuid.uuid4().hex[:6]}"
    vms["yasco_vms"][new] = {"ha": True}
    vms_file.write_text(yaml.safe_dump(vms))
    try:
        rc, dummy = playbook("plan", inventory)
        assert rc == 0
        rc, results = playbook("provision", inventory, "--check", "--diff")
    finally:
        vms_file.write_text(original)
        vdm_file.write_text(original_vdm)
    assert rc == 0
    items = [item for r in results for item in r.get("results", [r])]
    started = [i["name"] for i in items if i.get("actions") == ["define", "start"]]
    assert started == [new]
    assert new not in running(lab) and new not in records(lab)
    with storage.pool() as ioctx:
        assert new not in rbd.RBD().list(ioctx)


def test_status_flags_a_vm_started_by_hand_on_a_wrong_host(lab, cluster):
    inventory, names = cluster
    rc, (status, *dummy) = playbook("status", inventory)
    assert rc == 0 and status["problems"] == []
    victim = names["plain"]
    home = vdm_of(inventory)["home"][victim]
    stray_host = next(h for h in lab["hosts"] if h["name"] != home)
    # A copy by hand on a wrong host, on a scratch disk: the same name running twice.
    scratch = f"{victim}-stray"
    storage.create_image(scratch)
    xml_conn = libvirt.open(next(h["libvirt_uri"] for h in lab["hosts"] if h["name"] == home))
    xml = xml_conn.lookupByName(victim).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    xml = xml.replace(f"{layout.CEPH_POOL}/{victim}'", f"{layout.CEPH_POOL}/{scratch}'")
    conn = libvirt.open(stray_host["libvirt_uri"])
    conn.createXML(xml, 0)  # transient: gone once destroyed
    try:
        rc, (status, *dummy) = playbook("status", inventory)
        assert rc != 0
        assert f"{victim}: RUNNING TWICE, on " in " ".join(status["problems"])
    finally:
        conn.lookupByName(victim).destroy()
        storage.remove_image(scratch)


def test_a_vdm_older_than_the_vms_stops_provisioning_before_anything_changes(lab, cluster):
    inventory, names = cluster
    vms_file = inventory / "group_vars" / "all" / "vms.yml"
    vms = yaml.safe_load(vms_file.read_text())
    late = f"late-{uuid.uuid4().hex[:6]}"
    vms["yasco_vms"][late] = {"ha": True}
    original = vms_file.read_text()
    vms_file.write_text(yaml.safe_dump(vms))
    try:
        rc, (verify, *dummy) = playbook("provision", inventory)
    finally:
        vms_file.write_text(original)
    assert rc != 0
    assert "planned from other inputs than the inventory holds now" in verify["msg"]
    assert "plan again" in verify["msg"]
    assert late not in running(lab)
    with storage.pool() as ioctx:
        assert late not in rbd.RBD().list(ioctx)


def test_rebalance_moves_vms_to_new_homes_within_capacity(lab, cluster):
    inventory, names = cluster
    vms_file = inventory / "group_vars" / "all" / "vms.yml"
    vms = yaml.safe_load(vms_file.read_text())
    before = vdm_of(inventory)["home"]
    hosts = [h["name"] for h in lab["hosts"]]
    moved = {names["ha2"]: hosts[(hosts.index(before[names["ha2"]]) + 1) % 3],
             names["plain"]: hosts[(hosts.index(before[names["plain"]]) + 1) % 3]}
    for name, host in moved.items():
        vms["yasco_vms"][name]["home"] = host
    vms_file.write_text(yaml.safe_dump(vms))
    rc, (planned, *dummy) = playbook("plan", inventory)
    assert rc == 0, planned.get("msg")
    rc, results = playbook("rebalance", inventory, "--check")
    listed = next(r["msg"] for r in results if "moves in" in str(r.get("msg", "")))
    assert rc == 0 and listed.startswith("2 moves in ")
    assert running(lab)[names["ha2"]] == [before[names["ha2"]]]  # check mode moved nothing

    capacity = {h: 1024 - 128 for h in hosts}  # the lab's capacity minus reserved, MiB
    peaks = {h: 0 for h in hosts}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for host in lab["hosts"]:
                conn = libvirt.open(host["libvirt_uri"])
                used = sum(d.info()[2] // 1024 for d in conn.listAllDomains(
                    libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE))
                conn.close()
                peaks[host["name"]] = max(peaks[host["name"]], used)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        rc, results = playbook("rebalance", inventory)
    finally:
        stop.set()
        watcher.join()
    assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
    where, stored = running(lab), records(lab)
    for name, host in moved.items():
        assert where[name] == [host] and stored[name] == {"host": host, "state": "running"}
    assert all(peaks[h] <= capacity[h] for h in hosts), peaks
    events = history(lab, "migrated", moved)
    migrated = [(e["vm"], e["details"]["from"], e["host"]) for e in events]
    assert sorted(migrated) == sorted((n, before[n], h) for n, h in moved.items())
    # Each with its figures, under the lab's yasco_migration (auto_converge on).
    for event in events:
        figures = event["details"]
        assert figures["total_ms"] > 0 and "downtime_ms" in figures, event
        assert "throttle_percent" in figures and figures["post_copy"] is False, event
    rc, results = playbook("rebalance", inventory)
    assert rc == 0 and any("0 moves in 0 waves" in str(r.get("msg", "")) for r in results)


def test_remove_vm_keeps_the_disk_unless_confirmed(lab, cluster):
    inventory, names = cluster
    name = names["ha1"]
    requested = etcd_keys.requested_key(name, cluster=layout.CLUSTER_NAME)
    rc, results = playbook("remove_vm", inventory, vm=name)
    assert rc == 0
    assert name not in running(lab) and name not in records(lab)
    # HA was asked to leave it alone before it was powered off, so its agent did not
    # restart it, and the request went with the record.
    tasks = [r["_task"] for r in results if r.get("changed")]
    assert tasks.index("Ask HA to leave the VM alone while it is removed") < tasks.index(
        "Power off and undefine the VM on every hypervisor"), tasks
    assert not history(lab, "vm_restarted", [name])
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        assert etcd.get(requested) is None
    with storage.pool() as ioctx:
        assert name in rbd.RBD().list(ioctx)
    assert [(e["vm"], e["details"]) for e in history(lab, "removed", [name])] == [
        (name, {"disk_deleted": False})]
    rc, dummy = playbook("remove_vm", inventory, vm=name, delete_disk=name)
    assert rc == 0
    with storage.pool() as ioctx:
        assert name not in rbd.RBD().list(ioctx)
