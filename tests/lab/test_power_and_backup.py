"""Day-2 operations on the lab, over four canary VMs: an emergency shutdown, through
the UPS trigger, while the HA watcher runs, evacuates nothing and leaves every VM off
within its deadline; the cold start brings each home, highest tier first, and re-arms
HA. Snapshots and backups of a running canary restore it: after its disk is wiped,
a restore from the full backup and one from the incremental backup each make it
carry on from the sequence number that backup holds."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import rbd

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from yasco_lab import layout, storage
from yasco_lab.canary import RECORD_SIZE, RING_RECORDS, parse_records
from yasco_lab.credentials import etcd_client
from yasco_lab.hypervisor import AGENT_TTL

from ..ansible_run import BIN, ROOT, local_play, run_playbook
from .lab_cluster import (history, make_inventory, playbook, records, running, start_watcher,
                          stop_watcher, wait_for, wait_until_one_leads, writers)

BOOT = 180  # seconds for canary guests to boot under TCG on a loaded 2-core machine
DEADLINE = 40  # the emergency shutdown's, in seconds: four tiers of guests that ignore ACPI
TRIGGER = ROOT / "docs" / "examples" / "yasco_emergency_trigger"


def keys(lab, prefix: str) -> dict[str, dict]:
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        return {kv.key: json.loads(kv.value) for kv in etcd.get_prefix(prefix)}


def start_agents(lab, inventory: Path) -> None:
    """Power the hosts' agents on again, where none runs (what a boot does)."""
    alive = keys(lab, etcd_keys.hosts_prefix(cluster=layout.CLUSTER_NAME))
    down = [h["name"] for h in lab["hosts"]
            if etcd_keys.alive_key(h["name"], cluster=layout.CLUSTER_NAME) not in alive]
    if down:
        play = [{"name": "agents", "hosts": ",".join(down), "gather_facts": False,
                 "tasks": [{"ansible.builtin.command": {
                     "argv": ["/bin/sh", "-c", "{{ yasco_agent_start_command }}"]}}]}]
        rc, dummy = run_playbook(play, str(inventory), tmp_path=inventory.parent)
        assert rc == 0


def seq_at(image: str, snapshot: str) -> int:
    """The canary's last sequence number in a snapshot of its disk."""
    with storage.pool() as ioctx, rbd.Image(ioctx, image, snapshot=snapshot,
                                            read_only=True) as handle:
        return parse_records(handle.read(0, RECORD_SIZE * RING_RECORDS))[-1].seq


def wipe(image: str) -> None:
    """Destroy what the canary wrote: its ring, zeroed."""
    with storage.pool() as ioctx, rbd.Image(ioctx, image) as handle:
        handle.write(b"\0" * (RECORD_SIZE * RING_RECORDS), 0)


def remove_with_snapshots(prefix: str) -> None:
    with storage.pool() as ioctx:
        for name in rbd.RBD().list(ioctx):
            if name.startswith(prefix):
                with rbd.Image(ioctx, name) as handle:
                    for snap in list(handle.list_snaps()):
                        handle.remove_snap(snap["name"])
                storage.remove_image(name)


def domain_task(vdm: dict, lab, name: str, state: str) -> dict:
    uri = next(h["libvirt_uri"] for h in lab["hosts"] if h["name"] == vdm["home"][name])
    return {"name": state,
            "yasco.cluster.libvirt_domain": {"uri": uri, "name": name, "state": state}}


@pytest.fixture(name="day2", scope="module")
def fixture_day2(lab, tmp_path_factory):
    """An HA canary of priority 5 on hv1, one of priority 1 and a preemptible one on
    hv2, a plain one on hv3, provisioned and writing. Put back afterwards: agents
    running, HA armed, no marker, the VMs and their disks gone."""
    scratch = tmp_path_factory.mktemp("day2")
    suffix = uuid.uuid4().hex[:6]
    names = {kind: f"{kind}-{suffix}" for kind in ("hi", "lo", "plain", "batch")}
    vms = {names["hi"]: {"ha": True, "home": "hv1", "priority": 5},
           names["lo"]: {"ha": True, "home": "hv2", "priority": 1},
           names["plain"]: {"home": "hv3"},
           names["batch"]: {"preemptible": True, "home": "hv2"}}
    inventory = make_inventory(lab, scratch / "inventory", vms)
    assert playbook("plan", inventory)[0] == 0
    rc, results = playbook("provision", inventory)
    assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
    for name in names.values():
        wait_for(f"{name} writing", lambda n=name: len(storage.canary_records(n)) >= 3, BOOT,
                 every=1)
    state = {"inventory": inventory, "names": names, "scratch": scratch, "watcher": None,
             "vdm": {"home": {n: v["home"] for n, v in vms.items()}}}
    yield state
    if state["watcher"] is not None:
        stop_watcher(state["watcher"])
    start_agents(lab, inventory)
    playbook("disarm", inventory, yasco_ha_disarmed=False)
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        for host in lab["hosts"]:
            etcd.delete(etcd_keys.maintenance_key(host["name"], cluster=layout.CLUSTER_NAME))
    for name in names.values():
        playbook("remove_vm", inventory, vm=name, delete_disk=name)
        remove_with_snapshots(name)


def test_an_emergency_shutdown_evacuates_nothing_and_a_cold_start_brings_all_home(lab, day2):
    names, inventory, scratch = day2["names"], day2["inventory"], day2["scratch"]
    order = [names["batch"], names["plain"], names["lo"], names["hi"]]  # lowest tier first
    day2["watcher"] = start_watcher(inventory, scratch / "watcher.log")
    wait_until_one_leads(lab, [day2["watcher"]])
    # Nothing fenced, started, drained or moved: neither evacuated nor "rescued".
    untouched = ("fenced", "started", "drained", "migrated", "preempted")
    before = {kind: len(history(lab, kind)) for kind in untouched}

    log = scratch / "emergency.log"
    done = subprocess.run([str(TRIGGER)], capture_output=True, text=True, timeout=DEADLINE + 90,
                          check=False, env={
                              **os.environ, "YASCO_DIR": str(ROOT),
                              "YASCO_INVENTORY": str(inventory),
                              "YASCO_EMERGENCY_DEADLINE": str(DEADLINE),
                              "YASCO_ANSIBLE_PLAYBOOK": str(BIN / "ansible-playbook"),
                              "YASCO_EMERGENCY_LOG": str(log),
                              "YASCO_EMERGENCY_LOCK": str(scratch / "emergency.lock"),
                              "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    output = log.read_text()
    # The playbook fails when a VM is not off, or when it overran its deadline.
    assert done.returncode == 0, output[-4000:]
    for name in order:
        home = day2["vdm"]["home"][name]
        # The canaries ignore ACPI: each is powered off once its tier's time is up.
        assert f"{name} on {home}: destroyed" in output, output[-3000:]
    # Each tier went down after the one below it: the canaries' last writes say when.
    last = [storage.canary_records(n)[-1].timestamp for n in order]
    assert last == sorted(last), dict(zip(order, last))

    def off_and_untouched() -> None:
        assert not set(running(lab)) & set(order)
        stored = records(lab)
        for name in order:
            assert stored[name] == {"host": day2["vdm"]["home"][name], "state": "stopped",
                                    "by": "emergency_shutdown"}
        assert keys(lab, etcd_keys.fences_prefix(cluster=layout.CLUSTER_NAME)) == {}
        assert {kind: len(history(lab, kind)) for kind in untouched} == before
        hosts = keys(lab, etcd_keys.hosts_prefix(cluster=layout.CLUSTER_NAME))
        for host in lab["hosts"]:
            assert etcd_keys.alive_key(host["name"], cluster=layout.CLUSTER_NAME) not in hosts
            marker = hosts[etcd_keys.maintenance_key(host["name"], cluster=layout.CLUSTER_NAME)]
            assert marker["by"] == "emergency_shutdown"

    off_and_untouched()
    time.sleep(AGENT_TTL + 4)  # any lease left would have expired: still nothing happens
    off_and_untouched()
    assert day2["watcher"].poll() is None
    disarmed = keys(lab, etcd_keys.disarmed_key(cluster=layout.CLUSTER_NAME))
    assert [v["by"] for v in disarmed.values()] == ["emergency_shutdown"]

    # Power returns: the cold start waits for the hypervisors' agents, then starts.
    with ThreadPoolExecutor(1) as pool:
        # Each tier waits for its guest agents; the canaries have none, and say so.
        cold = pool.submit(playbook, "cold_start", inventory, yasco_cold_start_gate="guest_agent")
        time.sleep(10)
        assert not cold.done(), "the cold start did not wait for the hypervisors"
        start_agents(lab, inventory)
        rc, results = cold.result(timeout=600)
    assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
    assert sum("no QEMU guest agent" in str(r.get("msg")) for r in results) == 4
    homes = day2["vdm"]["home"]
    assert {n: running(lab).get(n) for n in order} == {n: [homes[n]] for n in order}
    assert {n: records(lab)[n] for n in order} == {
        n: {"host": homes[n], "state": "running"} for n in order}
    started = [e["vm"] for e in history(lab, "started", order) if e.get("by") == "cold_start"]
    assert started == list(reversed(order))  # highest tier first
    assert keys(lab, etcd_keys.disarmed_key(cluster=layout.CLUSTER_NAME)) == {}
    hosts = keys(lab, etcd_keys.hosts_prefix(cluster=layout.CLUSTER_NAME))
    assert not [k for k in hosts if k.endswith("/maintenance")]
    # Each canary carries on from its last write.
    for name in (names["hi"], names["lo"]):
        wait_for(f"{name} writing again", lambda n=name: len(writers(n)) >= 2, BOOT, every=1)
        runs = writers(name)
        assert runs[-1][1] == runs[-2][2] + 1, runs
    assert keys(lab, etcd_keys.fences_prefix(cluster=layout.CLUSTER_NAME)) == {}
    stop_watcher(day2["watcher"])
    day2["watcher"] = None


def test_a_wiped_canary_resumes_from_its_full_and_then_its_incremental_backup(lab, day2):
    name, inventory = day2["names"]["hi"], day2["inventory"]
    backups = day2["scratch"] / "backups"
    backups.mkdir()
    wait_for(f"{name} writing", lambda: len(storage.canary_records(name)) >= 3, BOOT, every=1)

    rc, results = playbook("snapshot", inventory, yasco_vms_selected=[name], yasco_snapshot_keep=2)
    assert rc == 0
    taken = [r for r in results if r.get("results") and "consistency" in r["results"][0]][0]
    snap = taken["results"][0]
    # The canary has no guest agent: crash-consistent, and the run says so.
    assert snap["consistency"] == "crash-consistent" and "guest agent" in snap["why"]

    def back_up() -> dict:
        rc, results = playbook("backup", inventory, yasco_vms_selected=[name],
                               yasco_backup_dir=str(backups))
        assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
        return next(r for r in results if r.get("results") and "kind" in r["results"][0])[
            "results"][0]

    full = back_up()
    assert full["kind"] == "full" and full["base"] is None
    seq_full = seq_at(name, Path(full["set"]).name)
    wait_for("more writes", lambda: storage.canary_records(name)[-1].seq > seq_full + 10,
             60, every=1)
    diff = back_up()
    assert diff["kind"] == "incremental" and diff["base"] == Path(full["set"]).name
    seq_diff = seq_at(name, Path(diff["set"]).name)
    assert seq_diff > seq_full
    manifest = json.loads((Path(diff["set"]) / "manifest.json").read_text())
    assert manifest["disks"][0]["sha256"] and manifest["consistency"] == "crash-consistent"

    # Its disks must not change under a running VM.
    rc, results = playbook("restore", inventory, yasco_vm=name, yasco_backup_dir=str(backups),
                           yasco_restore_in_place=True)
    assert rc != 0 and any(f"{name} runs on hv1" in r.get("msg", "") for r in results)

    # An HA VM is requested stopped first, as the docs say: its agent would restart
    # it at once otherwise (and the HA watcher, when one runs).
    rc, dummy = playbook("vm_state", inventory, vm=name, state="stopped")
    assert rc == 0
    vdm = day2["vdm"]
    for backup, seq in ((full, seq_full), (diff, seq_diff)):
        rc, dummy = run_playbook(local_play(domain_task(vdm, lab, name, "destroyed")),
                                 str(inventory), tmp_path=inventory.parent)
        assert rc == 0
        wipe(name)
        assert storage.canary_records(name) == []
        rc, results = playbook("restore", inventory, yasco_vm=name,
                               yasco_backup_dir=str(backups), yasco_restore_in_place=True,
                               yasco_backup_snapshot=Path(backup["set"]).name)
        assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
        writers_before = len(writers(name))
        rc, dummy = run_playbook(local_play(domain_task(vdm, lab, name, "running")),
                                 str(inventory), tmp_path=inventory.parent)
        assert rc == 0
        wait_for(f"{name} writing after the restore",
                 lambda n=writers_before: len(writers(name)) > n, BOOT, every=1)
        # It resumes right after the last write the backup holds.
        assert writers(name)[-1][1] == seq + 1, (writers(name), seq)
    rc, dummy = playbook("vm_state", inventory, vm=name, state="started")
    assert rc == 0
    with storage.pool() as ioctx:
        aside = [i for i in rbd.RBD().list(ioctx) if i.startswith(f"{name}.before-restore-")]
    assert len(aside) == 2  # the wiped disks, kept

    # A damaged backup file is found before anything changes.
    diff_file = Path(diff["set"]) / diff["files"][0]["file"]
    data = bytearray(diff_file.read_bytes())
    data[-2] ^= 0xFF
    diff_file.write_bytes(bytes(data))
    rc, results = playbook("restore", inventory, yasco_vm=name, yasco_backup_dir=str(backups))
    assert rc != 0 and any("does not match its checksum" in r.get("msg", "") for r in results)
    with storage.pool() as ioctx:
        assert f"{name}-restored" not in rbd.RBD().list(ioctx)
