# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backups of a VM's RBD disks to a filesystem, and restores from them.

A backup is a set: a directory per snapshot under DIRECTORY/VM/, with one file per
disk and a manifest. The first set of a VM is full (`rbd export`, a raw image);
each later one holds only what changed since the set before (`rbd export-diff`),
as long as that set's snapshot is still on every disk. The files are Ceph's own
formats, so a restore also works by hand: `rbd import` of the full set, a snapshot
named as it, then `rbd import-diff` of each later set in order. Every file's SHA-256
is in the manifest, and a restore checks them all before it changes anything.

Each file is written under a temporary name and renamed once complete, and the
manifest is written last: a set without a manifest is an interrupted backup, never
used as a base or restored from.

A restore imports into a new image first. Restoring in place then renames the disk
it replaces aside (NAME.before-restore-TIME), so nothing is lost; a disk that a
client has open is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.atomic_file import replace
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView

MANIFEST = "manifest.json"
FORMAT = 1


class BackupError(Exception):
    """What the operator must know: the message names the VM, set, file or disk."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_name(image: str, kind: str) -> str:
    pool, name, dummy = ceph.split_image(image, "images")
    return f"{pool}.{name}.{'raw' if kind == 'full' else 'diff'}"


def read_sets(directory: Path, vm: str) -> list[dict[str, Any]]:
    """The VM's complete backup sets (with a manifest), oldest first."""
    root = directory / vm
    sets = []
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            manifest = entry / MANIFEST
            if manifest.is_file():
                try:
                    data = json.loads(manifest.read_text())
                except (OSError, ValueError) as err:
                    raise BackupError(f"{manifest}: unreadable manifest ({err}): move the set "
                                      "aside") from err
                sets.append({**data, "path": str(entry)})
    return sorted(sets, key=lambda s: (s.get("taken_at", ""), s["snapshot"]))


def chain(sets: list[dict[str, Any]], snapshot: str | None) -> list[dict[str, Any]]:
    """The sets a restore to `snapshot` (the newest when None) applies: the full set it
    grows from, then each incremental one, in order."""
    if not sets:
        raise BackupError("no complete backup set to restore from")
    by_snapshot = {s["snapshot"]: s for s in sets}
    if snapshot is None:
        snapshot = sets[-1]["snapshot"]
    if snapshot not in by_snapshot:
        raise BackupError(f"no backup set {snapshot}; there are {', '.join(by_snapshot)}")
    out = [by_snapshot[snapshot]]
    while out[0]["kind"] != "full":
        base = out[0].get("base")
        if base not in by_snapshot:
            raise BackupError(f"set {out[0]['snapshot']} is incremental from {base}, which "
                              "is not in the backup: it cannot be restored")
        out.insert(0, by_snapshot[base])
    return out


class Rbd:
    """The `rbd` command line, as the module's Ceph user."""

    def __init__(self, params: dict[str, Any], run: Callable[..., tuple[int, str, str]]) -> None:
        self.base = ["rbd", "--conf", params["conf"], "--id", params["client"]]
        if params.get("keyring"):
            self.base += ["--keyring", params["keyring"]]
        self.run_command = run

    def __call__(self, *args: str) -> str:
        rc, out, err = self.run_command(self.base + list(args))
        if rc != 0:
            raise CephError(f"rbd {' '.join(args)} failed ({rc}): {err.strip() or out.strip()}")
        return out


class _RbdRun:
    """A module run that drives the `rbd` command through `run` (run_command), on the
    backup sets in `directory`. What the file system refuses fails the run, saying
    what it was doing with them (`doing`) and what to check (`advice`)."""

    doing = ""
    advice = ""

    def __init__(self, params: dict[str, Any], check_mode: bool,
                 run: Callable[..., tuple[int, str, str]]) -> None:
        self.params = params
        self.check_mode = check_mode
        self.rbd = Rbd(params, run)

    @classmethod
    def through(cls, module: Any) -> Callable[[dict[str, Any], bool], _RbdRun]:
        """The run as module_run.run_module makes it, `rbd` run by `module`'s
        run_command."""
        return lambda params, check_mode: cls(params, check_mode, module.run_command)

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        except OSError as err:
            raise BackupError(f"{self.params['directory']}: cannot {self.doing} the backup "
                              f"({err.strerror}: {err.filename}){self.advice}") from err

    def _run(self) -> dict[str, Any]:
        raise NotImplementedError


class BackupRun(_RbdRun):
    """One run of the vm_backup module."""

    doing = "write"
    advice = "; check the directory's permissions and free space"

    def _run(self) -> dict[str, Any]:
        p = self.params
        directory = Path(p["directory"])
        if not directory.is_dir():
            raise BackupError(f"directory {directory} does not exist: create it (a filesystem "
                              "with room for the VM's disks)")
        sets = read_sets(directory, p["vm"])
        target = directory / p["vm"] / p["snapshot"]
        if (target / MANIFEST).is_file():
            done = next(s for s in sets if s["snapshot"] == p["snapshot"])
            return {"changed": False, "set": str(target), "kind": done["kind"],
                    "base": done.get("base"), "files": done["disks"], "manifest": done}
        base = None if p["full"] else self.base_of(sets)
        kind = "full" if base is None else "incremental"
        disks = [{"image": image, "file": file_name(image, kind),
                  "kind": kind, "from": base} for image in p["images"]]
        if self.check_mode:
            return {"changed": True, "set": str(target), "kind": kind, "base": base,
                    "files": disks, "manifest": {}}
        target.mkdir(parents=True, exist_ok=True)
        for disk in disks:
            final = target / disk["file"]
            partial = target / (disk["file"] + ".partial")
            partial.unlink(missing_ok=True)
            source = f"{disk['image']}@{p['snapshot']}"
            if kind == "full":
                self.rbd("export", "--no-progress", source, str(partial))
            else:
                self.rbd("export-diff", "--no-progress", "--from-snap", base, source,
                         str(partial))
            os.replace(partial, final)
            disk["bytes"] = final.stat().st_size
            disk["sha256"] = _sha256(final)
        manifest = {"format": FORMAT, "vm": p["vm"], "snapshot": p["snapshot"], "kind": kind,
                    "base": base, "consistency": p["consistency"],
                    "taken_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "disks": disks}
        replace(str(target / MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
        return {"changed": True, "set": str(target), "kind": kind, "base": base,
                "files": disks, "manifest": manifest}

    def base_of(self, sets: list[dict[str, Any]]) -> str | None:
        """The newest set whose snapshot every disk still has, with every disk in it;
        None (a full backup) when there is none."""
        if not sets:
            return None
        newest = sets[-1]
        if sorted(d["image"] for d in newest["disks"]) != sorted(self.params["images"]):
            return None  # the VM's disks changed: start a new chain
        with ceph.connect(self.params) as cluster:
            for image in self.params["images"]:
                pool, name, dummy = ceph.split_image(image, "images")
                with cluster.opened(pool, name) as (dummy2, handle):
                    if handle is None:
                        raise BackupError(f"disk {image} does not exist")
                    if newest["snapshot"] not in {s["name"] for s in handle.list_snaps()}:
                        return None
        return newest["snapshot"]


class RestoreRun(_RbdRun):
    """One run of the vm_restore module."""

    doing = "read"

    def _run(self) -> dict[str, Any]:
        p = self.params
        sets = chain(read_sets(Path(p["directory"]), p["vm"]), p["snapshot"])
        images = [d["image"] for d in sets[-1]["disks"]]
        for backup_set in sets:  # every file intact, before anything changes
            for disk in backup_set["disks"]:
                path = Path(backup_set["path"]) / disk["file"]
                if not path.is_file():
                    raise BackupError(f"set {backup_set['snapshot']}: {path} is missing")
                if _sha256(path) != disk["sha256"]:
                    raise BackupError(f"set {backup_set['snapshot']}: {path} does not match its "
                                      "checksum: the backup is damaged; restore an older set")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        plan = []
        with ceph.connect(p) as cluster:
            for image in images:
                pool, name, dummy = ceph.split_image(image, "images")
                restored = name if p["in_place"] else f"{name}{p['suffix']}"
                with cluster.opened(pool, restored) as (dummy2, handle):
                    # Opening it to look registers a watch of our own: not a user.
                    watchers = ceph.watchers(handle, cluster.rados.get_instance_id()) \
                        if handle is not None else []
                    exists = handle is not None
                if exists and not p["in_place"]:
                    raise BackupError(f"{pool}/{restored} exists already: choose another "
                                      "suffix, or remove it")
                if watchers:
                    raise BackupError(
                        f"{pool}/{restored} is open by {', '.join(w['address'] for w in watchers)}"
                        f": stop the VM {p['vm']} before restoring its disks in place")
                plan.append({"image": image, "pool": pool, "restored": f"{pool}/{restored}",
                             "staging": f"{pool}/{name}.restoring-{stamp}",
                             "aside": f"{pool}/{name}.before-restore-{stamp}" if exists
                             else None})
        result = {"changed": True, "snapshot": sets[-1]["snapshot"],
                  "sets": [s["snapshot"] for s in sets], "images": plan}
        if self.check_mode:
            return result
        # Every disk imported before any is swapped in: a failed import leaves the VM
        # with its disks as they were, never half old and half restored.
        imported = []
        try:
            for step in plan:
                imported.append(step["staging"])
                self.import_chain(step, sets)
        except CephError:
            for staging in imported:  # of no use: gone, so a rerun starts clean
                self.discard(staging)
            raise
        for step in plan:
            if step["aside"]:
                self.rbd("rename", step["restored"], step["aside"])
            self.rbd("rename", step["staging"], step["restored"])
        return result

    def import_chain(self, step: dict[str, Any], sets: list[dict[str, Any]]) -> None:
        """Import a disk's chain of sets into its staging image."""
        staging = step["staging"]
        for backup_set in sets:
            disk = next(d for d in backup_set["disks"] if d["image"] == step["image"])
            path = str(Path(backup_set["path"]) / disk["file"])
            if backup_set["kind"] == "full":
                self.rbd("import", "--no-progress", path, staging)
                # What the next diff starts from, as rbd import-diff checks.
                self.rbd("snap", "create", f"{staging}@{backup_set['snapshot']}")
            else:
                self.rbd("import-diff", "--no-progress", path, staging)

    def discard(self, staging: str) -> None:
        for args in (("snap", "purge", staging), ("rm", "--no-progress", staging)):
            try:
                self.rbd(*args)
            except CephError:
                pass  # not created, or gone already


def selected_vms(status: dict[str, Any], items: list[dict[str, Any]],
                 selected: Any) -> list[dict[str, Any]]:
    """The VMs named in `selected` (a list, or names separated by commas), each with its
    disks and the host it runs on (or, when it runs nowhere, the one etcd records,
    else its home) and that host's libvirt URI."""
    if isinstance(selected, str):
        selected = [s.strip() for s in selected.split(",") if s.strip()]
    if not selected or not isinstance(selected, list):
        raise BackupError("name the VMs: -e '{\"yasco_vms_selected\": [web1, db1]}' (or "
                          "-e yasco_vms_selected=web1,db1)")
    by_name = {item["name"]: item for item in items}
    unknown = sorted(set(selected) - set(by_name))
    if unknown:
        raise BackupError(f"{', '.join(unknown)}: not in yasco_vms (known: "
                          f"{', '.join(sorted(by_name)) or 'none'})")
    uris = ClusterView(status).uris
    vms = ClusterView(status).vms
    out = []
    for name in dict.fromkeys(selected):
        vm = vms.get(name, {})
        running = vm.get("running_on") or []
        host = running[0] if running else vm.get("recorded_host") or by_name[name]["home"]
        out.append({"vm": name, "host": host, "uri": uris.get(host), "running": bool(running),
                    "images": [d["rbd"] for d in by_name[name]["domain"]["spec"].get("disks", [])
                               if d.get("rbd")]})
    return out
