# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A consistent snapshot of every disk of a VM, and retention of the older ones.

The guest's filesystems are frozen through its QEMU guest agent, every disk is
snapshotted, and they are thawed, in one process: everything that can be slow
(connecting to Ceph and libvirt, opening the images) happens before the freeze, so
the guest is frozen for the snapshots alone. A guest without an agent that answers
gets a crash-consistent snapshot (what a power cut would leave on its disks, which
a journaling filesystem recovers from), and the result says so. The snapshots of
all disks are taken while the guest is frozen, or back to back, so they are of one
moment either way.

Retention removes this module's older snapshots (those named with the prefix) beyond
a count and older than an age, never the one just taken, and never one with clones.
"""

from __future__ import annotations

import datetime
import time
from contextlib import ExitStack, closing
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.resources import libvirt_guest


class SnapshotError(Exception):
    """What the operator must know: the message names the VM, disk or snapshot."""


def snapshot_name(prefix: str, at: datetime.datetime) -> str:
    """The name of a snapshot taken at `at`: sorts by time, and says when."""
    return f"{prefix}{at.astimezone(datetime.timezone.utc):%Y%m%dT%H%M%SZ}"


def parse_age(value: Any) -> float | None:
    """Seconds from 90, '90s', '30m', '12h', '7d' or '2w'; None for no limit."""
    if value in (None, "", 0, "0"):
        return None
    text = str(value).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        if text[-1] in units:
            seconds = float(text[:-1]) * units[text[-1]]
        else:
            seconds = float(text)
    except (ValueError, IndexError):
        raise SnapshotError(f"max_age: {value!r} is not an age; write it like 90s, 30m, 12h, "
                            "7d or 2w") from None
    if seconds <= 0:
        raise SnapshotError(f"max_age: must be positive, got {value!r}")
    return seconds


def doomed(snaps: list[dict[str, Any]], prefix: str, keep: int | None, max_age: float | None,
           now: datetime.datetime, spare: str) -> list[str]:
    """The snapshots retention removes, of `snaps` ({name, timestamp, protected}): of
    those named with `prefix`, all but the newest `keep`, and those older than
    `max_age` seconds; never `spare` or a protected one."""
    ours = sorted((s for s in snaps if s["name"].startswith(prefix) and s["name"] != spare),
                  key=lambda s: (s["timestamp"], s["name"]), reverse=True)
    out = []
    # `spare` is the newest and counts towards `keep`.
    for index, snap in enumerate(ours, start=1):
        too_many = keep is not None and index + 1 > keep
        too_old = max_age is not None and (now - snap["timestamp"]).total_seconds() > max_age
        if (too_many or too_old) and not snap["protected"]:
            out.append(snap["name"])
    return out


class SnapshotRun:
    """One run of the vm_snapshot module."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        self.params = params
        self.check_mode = check_mode
        self.where = f"VM {params['name']}"

    def run(self) -> dict[str, Any]:
        p = self.params
        if not p["images"]:
            raise SnapshotError(f"{self.where}: images: name at least one disk (pool/image)")
        specs = [ceph.split_image(spec, "images")[:2] for spec in p["images"]]
        max_age = parse_age(p["max_age"])
        if p["keep"] is not None and p["keep"] < 1:
            raise SnapshotError(f"keep: at least 1 (the snapshot just taken), got {p['keep']}")
        now = datetime.datetime.now(datetime.timezone.utc)
        name = p["snapshot"] or snapshot_name(p["prefix"], now)
        with ceph.connect(p) as cluster, ExitStack() as stack:
            images = {}
            for pool, image_name in specs:
                ioctx = stack.enter_context(closing(cluster.open_pool(pool)))
                image = cluster.image(ioctx, image_name)
                if image is None:
                    raise SnapshotError(f"{self.where}: disk {pool}/{image_name} does not exist")
                images[f"{pool}/{image_name}"] = stack.enter_context(closing(image))
            have = {spec: {s["name"] for s in image.list_snaps()}
                    for spec, image in images.items()}
            partial = sorted(spec for spec in images if name not in have[spec])
            result: dict[str, Any] = {"snapshot": name, "images": sorted(images),
                                      "consistency": None, "why": "", "frozen_filesystems": 0,
                                      "frozen_seconds": 0.0, "removed": [], "kept_protected": []}
            if partial and len(partial) < len(images):
                raise SnapshotError(
                    f"{self.where}: snapshot {name} exists on some disks only (missing on "
                    f"{', '.join(partial)}): it is not of one moment; remove it from every "
                    "disk (yasco.cluster.rbd_image snapshot_state=absent) and take it again")
            changed = bool(partial)
            if partial:
                result.update(self.take(images, name))
            else:
                result["consistency"] = "existing"
                result["why"] = f"snapshot {name} exists already on every disk"
            for spec, image in images.items():
                removed, protected = self.retain(image, spec, name, now, max_age)
                result["removed"] += removed
                result["kept_protected"] += protected
        changed = changed or bool(result["removed"])
        return {"changed": changed, **result}

    def take(self, images: dict[str, Any], name: str) -> dict[str, Any]:
        """Freeze when the guest agent answers, snapshot every disk, thaw."""
        p = self.params
        with lv.Connections(p["connect_timeout"]) as connections:
            dom = lv.find_domain(connections.get(p["uri"]), p["name"])
            if dom is None:
                raise SnapshotError(f"{self.where}: no such domain at {p['uri']}: give the uri "
                                    "of the host it runs on")
            agent = "off" if p["quiesce"] == "never" else libvirt_guest.agent_state(dom)
            if p["quiesce"] == "required" and agent != "ready":
                raise SnapshotError(
                    f"{self.where}: quiesce=required, but its guest agent is {agent} "
                    "(see yasco.cluster.libvirt_domain spec.guest_agent); nothing was done")
            if self.check_mode:
                return {"consistency": "filesystem-frozen" if agent == "ready"
                        else _without_freeze(agent), "why": _why(agent)}
            if agent != "ready":
                self.snapshot_all(images, name)
                return {"consistency": _without_freeze(agent), "why": _why(agent)}
            started = time.monotonic()
            frozen = libvirt_guest.freeze(dom)
            try:
                self.snapshot_all(images, name)
            finally:
                libvirt_guest.thaw(dom)
            return {"consistency": "filesystem-frozen", "why": "", "frozen_filesystems": frozen,
                    "frozen_seconds": round(time.monotonic() - started, 3)}

    def snapshot_all(self, images: dict[str, Any], name: str) -> None:
        for spec, image in images.items():
            try:
                image.create_snap(name)
            except ceph.rbd.Error as err:
                raise CephError(f"{self.where}: snapshot {name} of {spec} failed: {err}") from err

    def retain(self, image, spec: str, spare: str, now, max_age) -> tuple[list, list]:
        p = self.params
        if p["keep"] is None and max_age is None:
            return [], []
        snaps = []
        for snap in image.list_snaps():
            if not snap["name"].startswith(p["prefix"]):
                continue
            stamp = image.get_snap_timestamp(snap["id"])
            # Ceph 16's binding returns UTC without saying so.
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=datetime.timezone.utc)
            snaps.append({"name": snap["name"], "protected": image.is_protected_snap(snap["name"]),
                          "timestamp": stamp.astimezone(datetime.timezone.utc)})
        removed = doomed(snaps, p["prefix"], p["keep"], max_age, now, spare)
        for name in removed:
            if not self.check_mode:
                try:
                    image.remove_snap(name)
                except ceph.rbd.Error as err:
                    raise CephError(f"{self.where}: removing snapshot {name} of {spec} "
                                    f"failed: {err}") from err
        protected = [{"image": spec, "snapshot": s["name"]} for s in snaps
                     if s["protected"] and s["name"] != spare]
        return [{"image": spec, "snapshot": n} for n in removed], protected


def _without_freeze(agent: str) -> str:
    return "at-rest" if agent == "not_running" else "crash-consistent"


def _why(agent: str) -> str:
    return {"off": "quiesce=never",
            "no_channel": "the VM has no guest agent channel (spec.guest_agent)",
            "not_answering": "its guest agent does not answer",
            "not_running": "the VM is not running, so its disks are at rest"}.get(agent, agent)
