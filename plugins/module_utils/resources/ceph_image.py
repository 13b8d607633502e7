# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bring one RBD image to a declared state: created (blank or cloned), grown, with
its features and a snapshot as asked, or removed; or just describe it.

What would change is worked out before anything changes, so check mode is exact.
Anything that loses data (shrinking, removing an image in use or with snapshots,
rolling back an image in use) needs `force`.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CephRun
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import ReadOnlyRun

# Features librbd can switch on an existing image; the rest are fixed at creation.
DYNAMIC_FEATURES = {"exclusive-lock", "object-map", "fast-diff", "journaling"}


def describe(image, pool: str, name: str, ourselves: int | None = None) -> dict[str, Any]:
    """What an operator wants to know of an image."""
    try:
        parent = image.get_parent_image_spec()
        parent_spec = f"{parent['pool_name']}/{parent['image_name']}@{parent['snap_name']}"
    except ceph.rbd.ImageNotFound:
        parent_spec = None
    snapshots = [{"name": s["name"], "size": s["size"],
                  "protected": image.is_protected_snap(s["name"])}
                 for s in image.list_snaps()]
    return {
        "pool": pool, "name": name, "size": image.size(),
        "features": sorted(ceph.rbd.RBD().features_to_string(image.features()).split(",")),
        "parent": parent_spec, "snapshots": snapshots,
        "watchers": ceph.watchers(image, ourselves), "locks": ceph.image_locks(image),
    }


def _text(state: dict[str, Any] | None) -> str:
    if state is None:
        return ""
    shown = {k: v for k, v in state.items() if k not in ("watchers", "locks")}
    return json.dumps(shown, indent=2, sort_keys=True) + "\n"


class ImageRun(CephRun):
    """One run of the rbd_image module."""

    def __init__(self, params: dict[str, Any], check_mode: bool,
                 session: ceph.Cluster | None = None) -> None:
        super().__init__(params, check_mode, session)
        self.actions: list[str] = []
        self.pool, self.name = params["pool"], params["name"]
        self.where = f"image {self.pool}/{self.name}"
        self.ourselves: int | None = None  # our own watch on an image we open

    def _do(self, action: str, fn, *args):
        self.actions.append(action)
        return None if self.check_mode else fn(*args)

    def run(self) -> dict[str, Any]:
        p = self.params
        size = ceph.parse_size(p["size"], "size") if p.get("size") is not None else None
        with self.connected() as cluster, \
                cluster.opened(self.pool, self.name) as (ioctx, image):
            self.ourselves = cluster.rados.get_instance_id()
            before = describe(image, self.pool, self.name, self.ourselves) if image else None
            if p["state"] == "absent":
                self.remove(cluster, ioctx, image, before)
                return self.result(before, None)
            if image is not None:
                self.reconcile(image, before, size)
                return self.result(before, describe(image, self.pool, self.name,
                                                    self.ourselves))
            self.create(cluster, ioctx, size)
            if self.check_mode:
                return self.result(before, self.predicted(size))
            created = cluster.image(ioctx, self.name)
            try:
                self.reconcile(created, None, size)
                return self.result(before, describe(created, self.pool, self.name,
                                                    self.ourselves))
            finally:
                created.close()

    def result(self, before, after) -> dict[str, Any]:
        return {"changed": bool(self.actions), "actions": self.actions,
                "image": after or {}, "diff": {"before": _text(before), "after": _text(after)}}

    def predicted(self, size: int | None) -> dict[str, Any]:
        """What a check-mode run would have created."""
        return {"pool": self.pool, "name": self.name, "size": size,
                "features": sorted(self.params.get("features") or []),
                "parent": self.params.get("clone_from"), "snapshots": [], "watchers": [],
                "locks": []}

    # -- steps -------------------------------------------------------------------

    def create(self, cluster, ioctx, size: int | None) -> None:
        features = self.params.get("features")
        mask = ceph.rbd.RBD().features_from_string(",".join(features)) if features else None
        source = self.params.get("clone_from")
        if source:
            self._do(f"clone from {source}", self._clone, cluster, ioctx, source, mask)
            if size is not None:
                self.actions.append("resize")  # done by reconcile once it exists
            return
        if size is None:
            raise CephError(f"{self.where} does not exist: give size (or clone_from) to "
                            "create it")
        self._do("create", ceph.rbd.RBD().create, ioctx, self.name, size, None, False, mask)

    def _clone(self, cluster, ioctx, source: str, mask) -> None:
        pool, name, snap = ceph.split_image(source, "clone_from")
        if snap is None:
            raise CephError(f"clone_from {source!r}: name the snapshot to clone, "
                            "pool/image@snapshot")
        parent_ioctx = cluster.open_pool(pool)
        try:
            parent = cluster.image(parent_ioctx, name)
            if parent is None:
                raise CephError(f"clone_from {source}: image {pool}/{name} does not exist")
            try:
                if not parent.snap_exists(snap):
                    raise CephError(f"clone_from {source}: image {pool}/{name} has no "
                                    f"snapshot {snap}")
                if not parent.is_protected_snap(snap):
                    parent.protect_snap(snap)  # clone format 1 needs it; harmless for 2
            finally:
                parent.close()
            ceph.rbd.RBD().clone(parent_ioctx, name, snap, ioctx, self.name, features=mask)
        finally:
            parent_ioctx.close()

    def reconcile(self, image, before: dict[str, Any] | None, size: int | None) -> None:
        current = before or describe(image, self.pool, self.name, self.ourselves)
        if size is not None and size != current["size"]:
            if size < current["size"] and not self.params["force"]:
                raise CephError(
                    f"{self.where} is {current['size']} bytes; shrinking it to {size} loses "
                    "everything past the new end: set force to do it")
            if "resize" not in self.actions:
                self.actions.append("resize")
            if not self.check_mode:
                image.resize(size, allow_shrink=True)
        self.reconcile_features(image, current)
        self.reconcile_snapshot(image, current)

    def reconcile_features(self, image, current: dict[str, Any]) -> None:
        wanted = self.params.get("features")
        if wanted is None:
            return
        have, want = set(current["features"]), set(wanted)
        fixed = (have ^ want) - DYNAMIC_FEATURES
        if fixed:
            raise CephError(f"{self.where}: features {', '.join(sorted(fixed))} can only be "
                            "chosen when an image is created")
        # One call for each direction: librbd orders the dependencies (fast-diff needs
        # object-map needs exclusive-lock) within a call, not across calls.
        rbd_ = ceph.rbd.RBD()
        for switch, features in ((False, have - want), (True, want - have)):
            if features:
                self._do(f"{'enable' if switch else 'disable'} {','.join(sorted(features))}",
                         image.update_features,
                         rbd_.features_from_string(",".join(sorted(features))), switch)

    def reconcile_snapshot(self, image, current: dict[str, Any]) -> None:
        snap = self.params.get("snapshot")
        if not snap:
            return
        state = self.params["snapshot_state"]
        exists = any(s["name"] == snap for s in current["snapshots"])
        if state == "present" and not exists:
            self._do(f"snapshot {snap}", image.create_snap, snap)
        elif state == "absent" and exists:
            if image.is_protected_snap(snap):
                children = list(image.list_children2()) if hasattr(image, "list_children2") \
                    else []
                if children:
                    raise CephError(f"{self.where}: snapshot {snap} has clones; flatten or "
                                    "remove them first")
                self._do(f"unprotect {snap}", image.unprotect_snap, snap)
            self._do(f"remove snapshot {snap}", image.remove_snap, snap)
        elif state == "rollback":
            if not exists:
                raise CephError(f"{self.where} has no snapshot {snap} to roll back to")
            if current["watchers"] and not self.params["force"]:
                raise CephError(
                    f"{self.where} is in use by {len(current['watchers'])} client(s) "
                    f"({', '.join(w['address'] for w in current['watchers'])}): rolling back "
                    "under a running VM corrupts it; stop it first, or set force")
            if self._differs_from(image, snap):
                self._do(f"rollback to {snap}", image.rollback_to_snap, snap)

    @staticmethod
    def _differs_from(image, snap: str) -> bool:
        """Whether the image has changed since `snap` (so a rollback would change it)."""
        sizes = {s["name"]: s["size"] for s in image.list_snaps()}
        if sizes[snap] != image.size():
            return True
        extents: list[tuple] = []
        image.diff_iterate(0, image.size(), snap, lambda *extent: extents.append(extent))
        return bool(extents)

    def remove(self, cluster, ioctx, image, before: dict[str, Any] | None) -> None:
        if image is None:
            return
        force = self.params["force"]
        if before["watchers"] and not force:
            addresses = ", ".join(w["address"] for w in before["watchers"])
            raise CephError(f"{self.where} is in use by {addresses}: stop the VM using it (or "
                            "fence that client) before removing it, or set force")
        if before["snapshots"] and not force:
            raise CephError(f"{self.where} has snapshots "
                            f"{', '.join(s['name'] for s in before['snapshots'])}: remove them "
                            "first, or set force")
        for snap in before["snapshots"]:
            if snap["protected"]:
                self._do(f"unprotect {snap['name']}", image.unprotect_snap, snap["name"])
            self._do(f"remove snapshot {snap['name']}", image.remove_snap, snap["name"])
        image.close()
        try:
            self._do("remove", ceph.rbd.RBD().remove, ioctx, self.name)
        except ceph.rbd.ImageBusy as err:
            raise CephError(f"{self.where} is still in use (a live or stale watcher): stop "
                            "or fence its client, then try again") from err


class ImageInfo(ReadOnlyRun):
    """One run of the rbd_image_info module: describe an image, change nothing."""

    def run(self) -> dict[str, Any]:
        p = self.params
        # Not read-only: librbd lists lock owners only to a writable handle.
        with ceph.connect(p) as cluster, cluster.opened(p["pool"], p["name"]) as (dummy, image):
            if image is None:
                return {"changed": False, "exists": False, "image": {}}
            return {"changed": False, "exists": True,
                    "image": describe(image, p["pool"], p["name"],
                                      cluster.rados.get_instance_id())}
