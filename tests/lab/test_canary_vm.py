"""A canary VM on RBD writes through the lab's real storage, and survives live migration."""

from __future__ import annotations

import time
import uuid

import libvirt
import pytest

from yasco_lab import storage
from yasco_lab.domain import canary_domain_xml, remove_everywhere

from .conftest import yasco_lab

BOOT_TIMEOUT = 120  # a guest kernel under TCG on a loaded 2-core machine


def wait_for_records(image: str, at_least: int, timeout: float = BOOT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = storage.canary_records(image)
        if len(records) >= at_least:
            return records
        time.sleep(0.5)
    raise AssertionError(f"canary {image} wrote fewer than {at_least} records in {timeout} s")


def assert_one_unbroken_writer(records):
    seqs = [r.seq for r in records]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a write went missing"
    assert len({r.writer for r in records}) == 1, "two copies wrote to one disk"
    stamps = [r.timestamp for r in records]
    assert stamps == sorted(stamps)


def connect(lab) -> dict[str, libvirt.virConnect]:
    return {h["name"]: libvirt.open(h["libvirt_uri"]) for h in lab["hosts"]}


@pytest.fixture
def canary(lab):
    """A canary VM defined and started on hv1, removed afterwards."""
    name = f"canary-{uuid.uuid4().hex[:8]}"  # an image a crashed test left busy is no obstacle
    storage.create_image(name)
    conns = connect(lab)
    boot = lab["canary"]
    xml = canary_domain_xml(name, kernel=boot["kernel"], initrd=boot["initrd"],
                            cmdline=boot["cmdline"], virt_type=lab["virt_type"])
    conns["hv1"].defineXML(xml).create()
    left_busy: list[str] = []  # a test that crashes the canary's host appends its name
    yield name, conns, left_busy
    # Fresh connections: the test may have crashed a host under the old ones.
    remove_everywhere(connect(lab).values(), name)
    # A crashed QEMU's watch and lock on the image outlive it until Ceph times them out
    # (or a fence breaks them); such an image is left to `down` rather than waited for.
    if not left_busy:
        storage.remove_image(name)


def test_canary_writes_increasing_sequence_numbers_to_its_rbd_disk(canary):
    name, dummy, dummy = canary
    first = wait_for_records(name, at_least=3)
    later = wait_for_records(name, at_least=len(first) + 5, timeout=30)
    assert later[-1].seq > first[-1].seq
    assert later[0].seq == 1
    assert_one_unbroken_writer(later)


def test_live_migration_keeps_the_canary_writing(canary):
    name, conns, dummy = canary
    before = wait_for_records(name, at_least=3)
    dom = conns["hv1"].lookupByName(name)
    flags = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
             | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE)
    # The guest's memory never crosses the network in clear: plain migration is refused.
    with pytest.raises(libvirt.libvirtError, match="only with VIR_MIGRATE_TLS"):
        dom.migrate(conns["hv2"], flags, None, None, 0)
    dom.migrate(conns["hv2"], flags | libvirt.VIR_MIGRATE_TLS, None, None, 0)
    assert [d.name() for d in conns["hv1"].listAllDomains()] == []
    moved = conns["hv2"].lookupByName(name)
    assert moved.isActive() and moved.isPersistent()
    after = wait_for_records(name, at_least=len(before) + 10, timeout=30)
    # The same guest boot goes on writing: no gap, no second writer, no restart.
    try:
        assert_one_unbroken_writer(after)
    except AssertionError as err:
        # Where each boot began; what the guest said is in the report (conftest.py).
        firsts = {}
        for record in after:
            firsts.setdefault(record.writer, record)
        raise AssertionError(f"{err}; {len(before)} records before the migration; first "
                             f"records of each boot: {list(firsts.values())}") from None
    assert after[-1].writer == before[-1].writer


def test_crash_stops_the_canary_and_boot_keeps_it_defined_but_not_running(lab, canary):
    name, dummy, left_busy = canary
    wait_for_records(name, at_least=3)
    left_busy.append(name)
    yasco_lab("crash", "hv1")
    try:
        time.sleep(1)  # a write in flight at the crash may still land
        frozen = storage.canary_records(name)[-1].seq
        time.sleep(2)
        assert storage.canary_records(name)[-1].seq == frozen, "QEMU outlived its host"
    finally:
        yasco_lab("boot", "hv1")
    conn = libvirt.open(lab["hosts"][0]["libvirt_uri"])
    try:
        dom = conn.lookupByName(name)
        assert dom.isPersistent() and not dom.isActive()
    finally:
        conn.close()
