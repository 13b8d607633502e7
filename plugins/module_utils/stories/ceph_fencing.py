# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fence a host's or a client's storage access, lift a fence, or list fences.

Fencing is the step that makes starting a VM elsewhere safe, so its order is fixed:
blocklist the addresses, wait until this client has the OSD map that carries the
entries (from then on, every OSD it or a new QEMU reaches enforces them), and only
then break the images' locks. It reports exactly what it added and broke, so the
caller can record it and undo it.
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    FENCE_LIFT_MARK, fence_lift_mark, fence_stands, fence_unmarked, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import ReadOnlyRun
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

# A host's fence is two things changed together: its entries in Ceph's blocklist and
# its record in etcd (fences/<host>). Ceph knows nothing of etcd's revisions, so a run
# that lifts a fence it read a while ago (a watcher deposed mid-return, say) could
# take out the entries of a newer fence, and the VMs of that newer evacuation would
# share their disks with the host. The lift therefore marks the record first, by
# compare-and-swap, under a lease of LIFT_TTL seconds that nothing renews; it removes
# the entries only while that lease is surely alive, with LIFT_MARGIN to spare, and
# then deletes the record by compare-and-swap. A fence waits while a live lift mark
# stands, blocklists, and then writes its record by compare-and-swap; if the record
# changed in between, it starts over. So a lift and a fence of one host never
# overlap: the fence's entries are added after any lift that could remove them has
# ended or can no longer act. A lift also goes ahead only while the host is alive (its
# liveness key exists, compared in the same transaction as the mark): a host that
# failed again after the lift read its fence is being evacuated, and keeps its fence.
# A fence records when it was written (`since`), so a lift that read an earlier fence
# of the same host finds the record changed; a rerun of the same fence, its entries in
# place, leaves the record as it is.
LIFT_TTL = 30
LIFT_MARGIN = 10
# How often a fence reads a record under a live lift mark again, and how many times it
# starts over when its compare-and-swap loses.
LIFT_POLL = 0.5
FENCE_ROUNDS = 5


class FenceRun:
    """One run of the ceph_fence module."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        self.params = params
        self.check_mode = check_mode
        self.actions: list[str] = []

    def _do(self, action: str, fn, *args) -> None:
        self.actions.append(action)
        if not self.check_mode:
            fn(*args)

    def run(self) -> dict[str, Any]:
        p = self.params
        entries = ceph.fence_addresses(p["addresses"])
        images = [ceph.split_image(spec, "images") for spec in p["images"]]
        if p["state"] != "present" and images:
            raise CephError("images: locks are only broken when fencing (state=present)")
        with ceph.connect(p) as cluster:
            before = cluster.blocklist()
            result: dict[str, Any] = {"blocklisted": [], "unblocklisted": [], "locks_broken": [],
                                      "locks_kept": [], "images_missing": []}
            if p["state"] == "present":
                cluster.fencing()
                self.fence(cluster, entries, images, before, result)
            else:
                for entry in entries:
                    if entry in before:
                        self._do(f"unblocklist {entry}", cluster.blocklist_remove, entry)
                        result["unblocklisted"].append(entry)
            after = before if self.check_mode else cluster.blocklist()
        return {"changed": bool(self.actions), "actions": self.actions, "entries": after,
                "diff": {"before": "".join(f"{e}\n" for e in sorted(before)),
                         "after": "".join(f"{e}\n" for e in sorted(
                             (set(before) | set(result["blocklisted"]))
                             - set(result["unblocklisted"])))},
                **result}

    def fence(self, cluster, entries: list[str], images: list[tuple], before: dict[str, str],
              result: dict[str, Any]) -> None:
        """Blocklist the addresses in one round; once the OSDs that serve the images
        enforce it, break the images' locks that fenced clients hold. A lock held by a
        client the fence does not cover is kept: that client is alive elsewhere (a VM
        started by a concurrent run), and breaking its lock would hand its disk to a
        second writer. An image that does not exist has no lock to break; it is
        reported, not an error, so that one lost disk does not keep the other VMs
        from starting."""
        adding = [entry for entry in entries if entry not in before]
        for entry in adding:
            self.actions.append(f"blocklist {entry}")
        result["blocklisted"] = adding
        if not self.check_mode and entries:
            cluster.blocklist_add_all(adding, self.params["expire"])
            # Present is not enough: the OSDs must have the map that lists it.
            cluster.wait_for_latest_map()
        self.break_locks(cluster, entries, images, before, result)

    def break_locks(self, cluster, entries: list[str], images: list[tuple],
                    before: dict[str, str], result: dict[str, Any]) -> None:
        """Break the locks of `images` held by clients that `entries` or the blocklist
        as it was (`before`) cover; keep the others, as fence() says."""
        fenced = set(entries) | set(before)
        for pool, name, dummy in images:
            with cluster.opened(pool, name) as (dummy2, image):
                if image is None:
                    result["images_missing"].append(f"{pool}/{name}")
                    continue
                locks = ceph.image_locks(image)
                doomed = [lock for lock in locks
                          if ceph.blocklisted(ceph.lock_address(lock), fenced)]
                if doomed:
                    self._do(f"break locks of {pool}/{name}", ceph.break_locks, image, doomed)
            result["locks_broken"] += [{"image": f"{pool}/{name}", **lock} for lock in doomed]
            result["locks_kept"] += [{"image": f"{pool}/{name}", **lock}
                                     for lock in locks if lock not in doomed]


class FenceInfo(ReadOnlyRun):
    """One run of the ceph_fence_info module: list blocklist entries, change nothing."""

    def run(self) -> dict[str, Any]:
        p = self.params
        wanted = set(ceph.fence_addresses(p["addresses"]))
        with ceph.connect(p) as cluster:
            entries = cluster.blocklist()
        if wanted:
            entries = {a: until for a, until in entries.items() if a in wanted}
        return {"changed": False, "entries": entries,
                "fenced": sorted(wanted & set(entries)) if wanted else sorted(entries),
                "not_fenced": sorted(wanted - set(entries))}


def _same_fence(found: KeyValue | None, value: Any) -> bool:
    """Whether the record `found` is the fence `value` describes, written before."""
    held = found.json() if found else None
    return (fence_stands(held) and isinstance(value, dict)
            and {k: v for k, v in held.items() if k != "since"}
            == {k: v for k, v in fence_unmarked(value).items() if k != "since"})


def _addresses(record: Any) -> list[str]:
    return list((record or {}).get("ceph_addrs") or []) if isinstance(record, dict) else []


def _listed(cluster, record: Any) -> list[str]:
    """The blocklist entries of the fence `record` that Ceph has now."""
    listed = cluster.blocklist()
    return [e for e in ceph.fence_addresses(_addresses(record)) if e in listed]


class HostFenceRun(FenceRun):
    """One run of the host_fence module: hosts' fences, blocklist and etcd record
    together (see LIFT_TTL for the protocol)."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        super().__init__(params, check_mode)
        self.waited = 0.0

    def run(self) -> dict[str, Any]:
        p = self.params
        records = []
        for index, record in enumerate(p["records"]):
            where = f"records[{index}]"
            if not isinstance(record, dict) or not record.get("key"):
                raise CephError(f"{where}: expected a mapping with key and value")
            if not _addresses(record.get("value")):
                raise CephError(f"{where} ({record['key']}): its value names no ceph_addrs "
                                "to fence or unfence")
            if p["state"] != "present" and not record.get("alive"):
                raise CephError(f"{where} ({record['key']}): a lift needs the host's "
                                "liveness key (alive), which must exist for it to go ahead")
            records.append({"key": record["key"], "value": record["value"],
                            "alive": record.get("alive")})
        if p["state"] != "present" and p["ceph_timeout"] > LIFT_TTL - LIFT_MARGIN - 5:
            raise CephError(f"ceph_timeout: a lift needs it at most {LIFT_TTL - LIFT_MARGIN - 5} "
                            f"s, so that a removal lands within the lift's lease; got "
                            f"{p['ceph_timeout']:g}")
        images = [ceph.split_image(spec, "images") for spec in p["images"]]
        result: dict[str, Any] = {"blocklisted": [], "unblocklisted": [], "locks_broken": [],
                                  "locks_kept": [], "images_missing": [], "records": []}
        refused = []
        with ceph.connect(p) as cluster, etcd.connect(p) as store:
            before = cluster.blocklist()
            if images:
                cluster.fencing()
            if p["state"] == "present":
                self.fence_hosts(store, cluster, records, images, result)
            else:
                for record in records:
                    try:
                        self.lift_host(store, cluster, record, images, result)
                    except CephError as err:  # the other hosts' lifts go on
                        refused.append(str(err))
            after = cluster.blocklist()
        if refused:
            raise CephError("; ".join(refused))
        if self.check_mode:
            after = {e: v for e, v in {**before, **dict.fromkeys(result["blocklisted"], "")}
                     .items() if e not in result["unblocklisted"]}
        return {"changed": bool(self.actions), "actions": self.actions, "entries": after,
                "waited": round(self.waited, 1),
                "diff": {"before": "".join(f"{e}\n" for e in sorted(before)),
                         "after": "".join(f"{e}\n" for e in sorted(after))}, **result}

    # -- fencing --------------------------------------------------------------------

    def settled(self, store: EtcdClient, key: str) -> KeyValue | None:
        """The record at `key` once no live lift mark stands on it: a lift under way
        may still remove entries, so a fence waits for it. A lift acts only within
        LIFT_TTL of its mark by its own clock, so a mark seen unchanged that long is
        over too, though etcd extends a lease when its leader changes."""
        started = time.monotonic()
        seen: dict[int, float] = {}  # mark's revision -> when first seen
        while True:
            found = store.get(key)
            mark = fence_lift_mark(found.json()) if found else None
            lease = mark.get("lease") if mark else None
            first = seen.setdefault(found.mod_revision, time.monotonic()) if found else 0.0
            if (not lease or time.monotonic() - first > LIFT_TTL
                    or store.lease_info(int(lease), keys=False) is None):
                self.waited += time.monotonic() - started
                return found
            time.sleep(LIFT_POLL)

    def fence_hosts(self, store: EtcdClient, cluster, records: list[dict[str, Any]],
                    images: list[tuple], result: dict[str, Any]) -> None:
        """Blocklist every record's addresses and write the records, each by
        compare-and-swap against the record as read once no lift stood on it; then
        break the images' locks that fenced clients hold."""
        entries = ceph.fence_addresses(sorted({a for r in records
                                               for a in _addresses(r["value"])}))
        stamp = cluster_events.timestamp()
        for dummy in range(FENCE_ROUNDS):
            found = {r["key"]: self.settled(store, r["key"]) for r in records}
            listed = set(cluster.blocklist())
            self.blocklist(cluster, entries, result)
            # A record of this very fence, its entries in place, stays as it is: a rerun
            # changes nothing. Any other is written anew, with when; it keeps the
            # addresses of the fence it replaces, so that a lift takes them out too.
            fresh = [r for r in records if not _same_fence(found[r["key"]], r["value"])
                     or not set(ceph.fence_addresses(_addresses(r["value"]))) <= listed]
            if self.check_mode:
                self.actions += [f"record {r['key']}" for r in fresh]
                break
            lost = []
            for r in fresh:
                old = found[r["key"]]
                kept = [a for a in _addresses(old.json() if old else None)
                        if a not in _addresses(r["value"])]
                value = {**fence_unmarked(r["value"]), "since": stamp}
                if kept:
                    value["ceph_addrs"] = _addresses(r["value"]) + kept
                if store.put_if(r["key"], to_json(value),
                                mod_revision=old.mod_revision if old else 0).succeeded:
                    self.actions.append(f"record {r['key']}")
                    result["records"].append(r["key"])
                else:
                    lost.append(r["key"])
            if not lost:
                break
            records = [r for r in records if r["key"] in lost]
        else:
            raise CephError(f"{', '.join(r['key'] for r in records)}: the fence record kept "
                            f"changing while this fenced ({FENCE_ROUNDS} tries); the "
                            "blocklist entries stand, run this again")
        if not self.check_mode:
            # A lift that lost its lease mid-way cannot have taken entries out since (see
            # LIFT_MARGIN); this puts back any that are gone all the same. The OSDs must
            # have the map that lists them before a lock is broken, even on a rerun that
            # added nothing.
            self.blocklist(cluster, entries, result)
            cluster.wait_for_latest_map()
        self.break_locks(cluster, entries, images, cluster.blocklist(), result)

    def blocklist(self, cluster, entries: list[str], result: dict[str, Any]) -> None:
        """Add the entries the blocklist lacks, and wait until the OSDs have the map."""
        missing = [e for e in entries if e not in cluster.blocklist()]
        self.actions += [f"blocklist {e}" for e in missing]
        result["blocklisted"] += [e for e in missing if e not in result["blocklisted"]]
        if missing and not self.check_mode:
            cluster.blocklist_add_all(missing, self.params["expire"])
            cluster.wait_for_latest_map()

    # -- lifting --------------------------------------------------------------------

    def lift_host(self, store: EtcdClient, cluster, record: dict[str, Any],
                  images: list[tuple], result: dict[str, Any]) -> None:
        """Lift the fence `record` holds, if the record still says what it did when
        read (`record["value"]`) and the host is alive, marked as lifted while the
        entries go. First, under the mark, the locks of `images` that fenced clients
        still hold are broken: a QEMU killed while fenced could not release its own."""
        key = record["key"]
        found = store.get(key)
        if found is None:
            return  # lifted already
        held = found.json()
        mark = fence_lift_mark(held)
        if mark and mark.get("lease") and store.lease_info(
                int(mark["lease"]), keys=False) is not None:
            raise CephError(f"{key}: another run is lifting this fence (since "
                            f"{mark.get('since')}); nothing was lifted")
        if fence_unmarked(held) != fence_unmarked(record["value"]):
            raise CephError(f"{key}: the fence changed since it was read (it now says "
                            f"{to_json(fence_unmarked(held))}): a newer fence stands, and "
                            "nothing was lifted")
        if self.check_mode:
            entries = _listed(cluster, held)
            self.break_locks(cluster, entries, images, cluster.blocklist(), result)
            self.actions += [f"unblocklist {e}" for e in entries] + [f"delete {key}"]
            result["unblocklisted"] += entries
            return
        started = time.monotonic()
        lease = store.grant_lease(LIFT_TTL)
        marked = store.put_if(key, to_json({**fence_unmarked(held), FENCE_LIFT_MARK: {
            "lease": lease.id, "since": cluster_events.timestamp()}}),
            mod_revision=found.mod_revision, while_exists=record["alive"])
        if not marked.succeeded:
            store.revoke_lease(lease.id)
            if store.get(record["alive"]) is None:
                raise CephError(f"{key}: the host is not alive any more ({record['alive']} "
                                "is gone): it may have failed again, and nothing was lifted")
            raise CephError(f"{key}: the fence changed as this went to lift it; a newer "
                            "fence stands, and nothing was lifted")
        self.actions.append(f"mark {key}")
        # The last removal must land while the lease surely lives, LIFT_MARGIN before
        # its end: a Ceph command may take up to ceph_timeout.
        deadline = started + lease.granted_ttl - LIFT_MARGIN - self.params["ceph_timeout"]
        removed: list[str] = []
        tried: list[str] = []  # a removal that failed may still land
        try:
            entries = _listed(cluster, held)
            if images:
                cluster.wait_for_latest_map()
                self.break_locks(cluster, entries, images, cluster.blocklist(), result)
            for entry in entries:
                self.removing(entry)
                if time.monotonic() >= deadline:
                    raise CephError(f"{key}: lifting took longer than the lease allows, so "
                                    "a newer fence could have come")
                tried.append(entry)
                cluster.blocklist_remove(entry)
                removed.append(entry)
                self.actions.append(f"unblocklist {entry}")
        except CephError as err:
            self.restore(store, cluster, key, held, marked.revision, tried, lease.id)
            raise CephError(f"{err}: the fence stands again as it was; run this again") \
                from err
        result["unblocklisted"] += removed
        deleted = store.delete_if(key, mod_revision=marked.revision)
        store.revoke_lease(lease.id)
        if not deleted.succeeded:
            current = deleted.current.json() if deleted.current else None
            if isinstance(current, dict) and not fence_lift_mark(current):
                # A newer fence, recorded against the lease (by hand, say): its entries
                # go back, whatever this removed.
                self.blocklist(cluster, ceph.fence_addresses(_addresses(current)), result)
                raise CephError(f"{key}: a newer fence was recorded while this lifted the "
                                "old one; its blocklist entries are back, and the host stays "
                                "fenced")
            raise CephError(f"{key}: the record changed while this lifted the fence (now "
                            f"{deleted.current.value if deleted.current else 'gone'}); "
                            "whoever changed it owns the fence now")
        self.actions.append(f"delete {key}")
        result["records"].append(key)

    def removing(self, entry: str) -> None:
        """Called before each entry is removed; a test stalls a lift here."""

    def restore(self, store: EtcdClient, cluster, key: str, held: Any, revision: int,
                tried: list[str], lease: int) -> None:
        """Put back a lift that could not finish: its record unmarked and, if that
        write wins, the entries it tried to remove (removals that all landed while its
        lease lived, so before any newer fence). Then end its lease."""
        if store.put_if(key, to_json(fence_unmarked(held)), mod_revision=revision).succeeded \
                and tried:
            cluster.blocklist_add_all(tried, self.params["expire"])
            cluster.wait_for_latest_map()
        store.revoke_lease(lease)
