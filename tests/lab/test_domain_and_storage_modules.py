"""libvirt_domain, rbd_image and ceph_fence on the lab's real libvirtd + QEMU and
Ceph, run through ansible-playbook from the controller as an operator runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from yasco_lab import layout, storage
from yasco_lab.credentials import etcd_client

from ..ansible_run import ROOT, local_play, run_playbook
from .test_canary_vm import assert_one_unbroken_writer, wait_for_records


def ceph_user(client: str) -> dict:
    """The Ceph options of the lab's cephx user `client`."""
    return {"conf": str(layout.ceph_conf_path()),
            "keyring": str(layout.ceph_keyring_path(client)), "client": client}


def spec(lab, image: str) -> dict:
    boot = lab["canary"]
    return {"vcpus": 1, "memory_mb": 128, "domain_type": lab["virt_type"],
            "kernel": boot["kernel"], "initrd": boot["initrd"], "cmdline": boot["cmdline"],
            "disks": [{"rbd": f"{layout.CEPH_POOL}/{image}",
                       "monitors": [f"{layout.ceph_address()}:{layout.CEPH_MON_PORT}"],
                       "auth_user": layout.CEPH_HYPERVISOR_CLIENT,
                       "secret_uuid": layout.CEPH_SECRET_UUID}],
            "serial_log": f"/var/log/libvirt/qemu/{image}.console"}


def uris(lab) -> dict[str, str]:
    return {h["name"]: h["libvirt_uri"] for h in lab["hosts"]}


def play(tmp_path, *tasks, check=False):
    # As the playbooks run them: images as the provisioning user, fences as the fencer.
    rc, results = run_playbook(local_play(*tasks, check=check, module_defaults={
        "group/yasco.cluster.ceph": ceph_user(layout.CEPH_PROVISION_CLIENT),
        "yasco.cluster.ceph_fence": ceph_user(layout.CEPH_FENCE_CLIENT),
        "yasco.cluster.ceph_fence_info": ceph_user(layout.CEPH_FENCE_CLIENT)}),
        tmp_path=tmp_path)
    return rc, results


def domain(name: str, uri: str, **options) -> dict:
    return {"name": f"domain {name}", "yasco.cluster.libvirt_domain": {
        "name": name, "uri": uri, **options}}


@pytest.fixture(name="image")
def fixture_image(lab):
    """A fresh canary image name; whatever runs on it is cleaned up afterwards."""
    name = f"canary-{uuid.uuid4().hex[:8]}"
    yield name
    for uri in uris(lab).values():
        conn = libvirt.open(uri)
        for dom in conn.listAllDomains():
            if dom.name().startswith(name):
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
        conn.close()


def test_a_canary_is_defined_started_and_live_migrated_idempotently(lab, image, tmp_path):
    storage.create_image(image)
    hosts = uris(lab)
    rc, (defined, again) = play(
        tmp_path, domain(image, hosts["hv1"], state="running", spec=spec(lab, image)),
        domain(image, hosts["hv1"], state="running", spec=spec(lab, image)))
    assert rc == 0
    assert defined["changed"] and defined["actions"] == ["define", "start"]
    assert not again["changed"] and again["state"] == "running"
    before = wait_for_records(image, at_least=3)

    # As yasco_migration sets it: each setting reaches QEMU, and the figures come back.
    migrate = domain(image, hosts["hv1"], target_uri=hosts["hv2"], state="running",
                     spec=spec(lab, image), timeout=120, migration={
                         "bandwidth": 64, "max_downtime": 500, "auto_converge": True,
                         "compressed": True})
    rc, (moved, rerun) = play(tmp_path, migrate, migrate)
    assert rc == 0
    assert moved["changed"] and moved["actions"] == ["migrate live"]
    assert moved["uri"] == hosts["hv2"] and moved["state"] == "running"
    figures = moved["migration"]
    assert figures["total_ms"] > 0 and 0 <= figures["downtime_ms"] < figures["total_ms"]
    assert figures["memory_bytes"] > 0 and figures["post_copy"] is False, figures
    assert not rerun["changed"] and rerun["migration"] == {}

    # Post-copy, capped: switched after a second, and back over the plain path.
    there_and_back = (
        domain(image, hosts["hv2"], target_uri=hosts["hv1"], state="running",
               spec=spec(lab, image), timeout=120,
               migration={"bandwidth": 4, "post_copy_after": 1.0}),
        domain(image, hosts["hv1"], target_uri=hosts["hv2"], state="running",
               spec=spec(lab, image), timeout=120))
    rc, (post_copied, plain) = play(tmp_path, *there_and_back)
    assert rc == 0 and post_copied["uri"] == hosts["hv1"] and plain["uri"] == hosts["hv2"]
    assert post_copied["migration"]["post_copy"] is True, post_copied["migration"]
    assert plain["migration"]["post_copy"] is False
    after = wait_for_records(image, at_least=len(before) + 5, timeout=60)
    assert_one_unbroken_writer(after)
    assert after[-1].writer == before[-1].writer

    # Powered off on hv2, then moved back offline: defined on hv1 only, not running.
    rc, (off, back) = play(
        tmp_path, domain(image, hosts["hv2"], state="destroyed"),
        domain(image, hosts["hv2"], target_uri=hosts["hv1"], state="destroyed"))
    assert rc == 0 and off["actions"] == ["destroy"]
    assert back["actions"] == ["move definition"] and back["state"] == "shutoff"
    rc, (gone,) = play(tmp_path, domain(image, hosts["hv1"], state="absent"))
    assert rc == 0 and gone["actions"] == ["undefine"]
    assert storage.remove_image(image)


def test_rbd_image_life_cycle(lab, tmp_path):
    name = f"disk-{uuid.uuid4().hex[:8]}"
    base = {"pool": layout.CEPH_POOL, "name": name}

    def image(**options):
        return {"name": "image", "yasco.cluster.rbd_image": {**base, **options},
                "ignore_errors": True}

    rc, results = play(
        tmp_path, image(size="32M"), image(size="32M"), image(size="64M"),
        image(size="32M"), image(snapshot="base"), image(snapshot="base"),
        image(name=f"{name}-clone", clone_from=f"{layout.CEPH_POOL}/{name}@base"),
        {"name": "info", "yasco.cluster.rbd_image_info": base}, image(state="absent"),
        image(name=f"{name}-clone", state="absent"), image(state="absent", force=True),
        image(state="absent"))
    (created, same, grown, shrink, snap, snap_again, clone, info, refused, clone_gone,
     forced, gone) = results
    assert created["changed"] and created["image"]["size"] == 32 * 2 ** 20
    assert not same["changed"]
    assert grown["actions"] == ["resize"] and grown["image"]["size"] == 64 * 2 ** 20
    assert shrink["failed"] and "shrinking it to 33554432 loses" in shrink["msg"]
    assert snap["actions"] == ["snapshot base"] and not snap_again["changed"]
    assert clone["image"]["parent"] == f"{layout.CEPH_POOL}/{name}@base"
    assert info["exists"] and info["image"]["watchers"] == [] and not info["changed"]
    assert [s["name"] for s in info["image"]["snapshots"]] == ["base"]
    assert refused["failed"] and "has snapshots base" in refused["msg"]
    assert clone_gone["actions"] == ["remove"]
    assert forced["actions"] == ["unprotect base", "remove snapshot base", "remove"]
    assert not gone["changed"]


def test_rbd_image_check_mode_and_bad_input(lab, tmp_path):
    name = f"disk-{uuid.uuid4().hex[:8]}"
    task = {"name": "image", "ignore_errors": True, "yasco.cluster.rbd_image": {
        "pool": layout.CEPH_POOL, "name": name, "size": "16M"}}
    rc, (checked,) = play(tmp_path, task, check=True)
    assert checked["changed"] and checked["actions"] == ["create"]
    bad = [{"name": "image", "ignore_errors": True, "yasco.cluster.rbd_image": options}
           for options in ({"pool": "nopool", "name": name, "size": "1G"},
                           {"pool": layout.CEPH_POOL, "name": name, "size": "lots"},
                           {"pool": layout.CEPH_POOL, "name": name})]
    missing = {"name": "info", "yasco.cluster.rbd_image_info": {
        "pool": layout.CEPH_POOL, "name": name}}
    rc, results = play(tmp_path, *bad, missing)
    messages = [r.get("msg") for r in results]
    assert "pool nopool does not exist" in messages[0]
    assert "size: 'lots' is not a size" in messages[1]
    assert f"image {layout.CEPH_POOL}/{name} does not exist: give size" in messages[2]
    assert results[3]["exists"] is False and results[3]["image"] == {}
    with storage.pool() as ioctx:
        import rbd
        assert name not in rbd.RBD().list(ioctx)


def test_fencing_stops_a_running_guest_and_the_disk_carries_on_elsewhere(lab, image, tmp_path):
    """A QEMU on hv1 keeps running but is fenced; the same disk opened by a new QEMU on
    hv2 carries on, and the fenced one never writes again."""
    storage.create_image(image)
    hosts = uris(lab)
    rc, dummy = play(tmp_path, domain(image, hosts["hv1"], state="running",
                                      spec=spec(lab, image)))
    assert rc == 0
    wait_for_records(image, at_least=3)
    info_task = {"name": "info", "yasco.cluster.rbd_image_info": {
        "pool": layout.CEPH_POOL, "name": image}}
    rc, (info,) = play(tmp_path, info_task)
    (watcher,) = info["image"]["watchers"]
    assert watcher["address"].startswith(lab["hosts"][0]["address"] + ":")
    assert info["image"]["locks"], "the running QEMU holds the exclusive lock"

    fence = {"name": "fence", "yasco.cluster.ceph_fence": {
        "addresses": [watcher["address"]], "images": [f"{layout.CEPH_POOL}/{image}"],
        "expire": 600}}
    rc, (fenced,) = play(tmp_path, fence)
    assert rc == 0, fenced.get("msg")
    assert fenced["blocklisted"] == [watcher["address"]]
    assert fenced["locks_broken"] and fenced["locks_broken"][0]["image"].endswith(image)
    at_fence = storage.canary_records(image)
    old_writer = at_fence[-1].writer
    written_by_old = {(r.seq, r.writer) for r in at_fence if r.writer == old_writer}
    time.sleep(5)
    assert [r for r in storage.canary_records(image) if r.writer == old_writer
            and (r.seq, r.writer) not in written_by_old] == [], "the fenced guest wrote"

    second = f"{image}-b"
    rc, (started,) = play(tmp_path, domain(second, hosts["hv2"], state="running",
                                           spec={**spec(lab, image), "serial_log": None}))
    assert rc == 0 and started["state"] == "running"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        records = storage.canary_records(image)
        if sum(1 for r in records if r.writer != old_writer) >= 5:
            break
        time.sleep(1)
    else:
        raise AssertionError("the guest on hv2 did not write to the fenced disk's image")
    assert [r for r in records if r.writer == old_writer
            and (r.seq, r.writer) not in written_by_old] == [], "the fenced guest wrote"
    assert libvirt.open(hosts["hv1"]).lookupByName(image).isActive(), \
        "the fenced QEMU is still running: only its storage was cut"

    rc, (again, lifted, lifted_again) = play(
        tmp_path, {**fence, "name": "again"},
        {"name": "unfence", "yasco.cluster.ceph_fence": {
            "state": "absent", "addresses": [watcher["address"]]}},
        {"name": "unfence again", "yasco.cluster.ceph_fence": {
            "state": "absent", "addresses": [watcher["address"]]}})
    assert rc == 0
    assert not again["changed"] or again["actions"][0].startswith("break locks"), again
    assert again["blocklisted"] == []
    assert lifted["unblocklisted"] == [watcher["address"]]
    assert watcher["address"] not in lifted["entries"]
    assert not lifted_again["changed"]


def test_fence_check_mode_and_bad_input(lab, tmp_path):
    rc, results = play(tmp_path, *[
        {"name": "fence", "ignore_errors": True, "yasco.cluster.ceph_fence": options}
        for options in ({"addresses": ["10.213.0.250"]},
                        {"addresses": ["not-an-address"]},
                        {"addresses": ["10.0.0.0/8"]},
                        {"state": "absent", "addresses": ["10.213.0.250"],
                         "images": ["yasco/x"]})], check=True)
    checked, bad_address, too_wide, images_unfence = results
    assert checked["changed"] and checked["blocklisted"] == ["10.213.0.250:0/0"]
    assert "10.213.0.250:0/0" not in checked["entries"]
    assert "not a client address" in bad_address["msg"]
    assert "16777216 addresses" in too_wide["msg"]
    assert "only broken when fencing" in images_unfence["msg"]


def test_a_host_fence_covers_every_client_on_it_until_lifted(lab, tmp_path):
    host = lab["hosts"][2]["address"]  # hv3, running nothing here
    fence = {"yasco.cluster.ceph_fence": {"addresses": [host], "expire": 600}}
    info = {"yasco.cluster.ceph_fence_info": {"addresses": [host]}}
    rc, (fenced, seen, lifted, gone) = play(
        tmp_path, {"name": "fence", **fence}, {"name": "info", **info},
        {"name": "lift",
         "yasco.cluster.ceph_fence": {"state": "absent", "addresses": [host]}},
        {"name": "info again", **info})
    assert rc == 0
    assert fenced["blocklisted"] == [f"{host}:0/0"]
    assert seen["fenced"] == [f"{host}:0/0"] and seen["not_fenced"] == []
    assert lifted["unblocklisted"] == [f"{host}:0/0"]
    assert gone["fenced"] == [] and gone["not_fenced"] == [f"{host}:0/0"]


def test_a_recorded_fence_ceph_does_not_enforce_or_will_let_lapse_is_named(lab, tmp_path):
    """An evacuation's fence lasts until it is lifted (ten years); Ceph keeps an
    entry's first expiry, so it cannot be renewed in place. playbooks/fence_check.yml
    passes while every fence etcd records is blocklisted for long enough, and fails
    naming one lifted by hand or lapsing soon, adding nothing back."""
    kept, short, lifted = "10.213.0.247", "10.213.0.246", "10.213.0.245"
    records = {etcd_keys.fence_key(host, cluster=layout.CLUSTER_NAME): address
               for host, address in (("ghost1", kept), ("ghost2", short),
                                     ("ghost3", lifted))}
    check = ROOT / "playbooks" / "fence_check.yml"
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        try:
            rc, (fenced, again, brief) = play(
                tmp_path, {"name": "fence", "yasco.cluster.ceph_fence": {
                    "addresses": [kept]}},
                {"name": "again", "yasco.cluster.ceph_fence": {
                    "addresses": [kept], "expire": 600}},
                {"name": "brief", "yasco.cluster.ceph_fence": {
                    "addresses": [short], "expire": 3600}})
            assert rc == 0
            until = fenced["entries"][f"{kept}:0/0"]
            assert until[:4] >= str(time.gmtime().tm_year + 9), until  # ten years
            assert not again["changed"] and again["entries"][f"{kept}:0/0"] == until

            first = next(iter(records))
            etcd.put(first, json.dumps({"by": "test", "ceph_addrs": [kept]}))
            rc, results = run_playbook(check, lab["inventory"])
            assert rc == 0, [r.get("msg") for r in results if r.get("failed")]

            for key, address in records.items():
                etcd.put(key, json.dumps({"by": "test", "ceph_addrs": [address]}))
            rc, results = run_playbook(check, lab["inventory"])
            assert rc != 0
            failed, = [r for r in results if r.get("failed")]
            assert f"does not blocklist {lifted}:0/0" in failed["msg"], failed["msg"]
            assert f"lets {short}:0/0 lapse within 15.0 days" in failed["msg"]
            assert kept not in failed["msg"]
            rc, (info,) = play(tmp_path, {"name": "info", "yasco.cluster.ceph_fence_info": {
                "addresses": [kept, short, lifted]}})
            assert info["not_fenced"] == [f"{lifted}:0/0"], "the check added an entry"
        finally:
            for key in records:
                etcd.delete(key)
            play(tmp_path, {"name": "lift", "yasco.cluster.ceph_fence": {
                "state": "absent", "addresses": [kept, short]}})


HOLDER = """
import sys, time, rados, rbd
cluster = rados.Rados(conffile=sys.argv[1], name="client.admin")
cluster.connect(timeout=10)
image = rbd.Image(cluster.open_ioctx(sys.argv[2]), sys.argv[3])
image.write(b"held", 0)  # takes the exclusive lock
print(cluster.get_addrs(), flush=True)
time.sleep(600)
"""


def test_a_lock_held_by_a_client_the_fence_does_not_cover_is_kept(lab, image, tmp_path):
    """A concurrent evacuation may have started the VM elsewhere already: its lock
    holder is alive, and breaking the lock would give the disk a second writer. A
    missing image is reported beside it, and stops nothing."""
    storage.create_image(image)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(layout.ceph_conf_path()),
                               layout.CEPH_POOL, image], stdout=subprocess.PIPE, text=True)
    other = lab["hosts"][2]["address"]  # hv3, which holds nothing of it
    try:
        assert holder.stdout.readline(), "the holder did not open the image"
        fence = {"name": "fence", "yasco.cluster.ceph_fence": {
            "addresses": [other], "expire": 600,
            "images": [f"{layout.CEPH_POOL}/gone-{image}", f"{layout.CEPH_POOL}/{image}"]}}
        info = {"name": "info", "yasco.cluster.rbd_image_info": {
            "pool": layout.CEPH_POOL, "name": image}}
        rc, (fenced, after) = play(tmp_path, fence, info)
        assert rc == 0, fenced.get("msg")
        assert fenced["blocklisted"] == [f"{other}:0/0"]
        assert fenced["locks_broken"] == []
        assert fenced["images_missing"] == [f"{layout.CEPH_POOL}/gone-{image}"]
        owners = {lock["owner"] for lock in fenced["locks_kept"]}
        assert owners and not any(owner in fenced["entries"] for owner in owners)
        assert after["image"]["locks"], "the holder's lock is gone"
    finally:
        holder.kill()
        holder.wait()
        play(tmp_path, {"name": "lift", "yasco.cluster.ceph_fence": {
            "state": "absent", "addresses": [other]}})


def test_rollback_happens_only_when_the_image_differs_from_its_snapshot(lab, tmp_path):
    import rbd
    name = f"disk-{uuid.uuid4().hex[:8]}"
    base = {"pool": layout.CEPH_POOL, "name": name}
    task = {"name": "image", "yasco.cluster.rbd_image": base}
    rollback = {"name": "rollback", "yasco.cluster.rbd_image": {
        **base, "snapshot": "clean", "snapshot_state": "rollback"}}
    create = {**base, "size": "16M", "snapshot": "clean"}
    rc, dummy = play(tmp_path, {**task, "yasco.cluster.rbd_image": create})
    assert rc == 0
    rc, (unchanged,) = play(tmp_path, rollback)
    assert rc == 0 and not unchanged["changed"]
    with storage.pool() as ioctx, rbd.Image(ioctx, name) as image:
        image.write(b"scribbled", 4096)
    rc, (rolled, again) = play(tmp_path, rollback, rollback)
    assert rc == 0 and rolled["actions"] == ["rollback to clean"] and not again["changed"]
    with storage.pool() as ioctx, rbd.Image(ioctx, name) as image:
        assert image.read(4096, 9) == bytes(9)
    rc, dummy = play(tmp_path, {**task, "yasco.cluster.rbd_image": {
        **base, "state": "absent", "force": True}})
    assert rc == 0
