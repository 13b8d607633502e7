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

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.ceph import CephError


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


class FenceInfo:
    """One run of the ceph_fence_info module: list blocklist entries, change nothing."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        del check_mode  # reading is the same either way
        self.params = params

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
