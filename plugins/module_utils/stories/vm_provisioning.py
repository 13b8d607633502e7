# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What provisioning does for each VM, worked out from yasco_vms and the VDM.

For every VM: its home and that host's libvirt URI, its disk (blank, or a clone of a
base image), its config drive, and the libvirt spec to define it with. Everything a
VM needs lives in Ceph (disk and config drive alike) so that it can start on any host
its failover plan names. Pure Python, no I/O; invalid settings are reported all at
once, each naming the VM and the field.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import json_or_none
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import ON_CRASH
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    problems_text, vm_field)

# The VM fields provisioning reads (the planner's fields are checked by vdm_inventory).
BOOT_KEYS = {"image", "disk_gb", "kernel", "initrd", "cmdline", "networks", "cloud_init",
             "autostart_on_home", "guest_agent", "on_crash", "watchdog"}
CLOUD_INIT_KEYS = {"user_data", "meta_data", "network_config"}
CLUSTER_KEYS = ("pool", "monitors", "ceph_user", "secret_uuid", "virt_type")


class ProvisioningError(Exception):
    """The inventory cannot be provisioned as it is; `problems` says where."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems_text("cannot provision", problems))
        self.problems = problems


def config_drive_name(vm: str) -> str:
    return f"{vm}-cidata"


def _networks(name: str, value: Any, problems: list[str]) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{vm_field(name, 'networks')}: must be a list, got {value!r}")
        return []
    nics = []
    for index, item in enumerate(value):
        where = f"{vm_field(name, 'networks')}[{index}]"
        if isinstance(item, str):
            nics.append({"network": item})
        elif isinstance(item, dict) and len({"network", "bridge"} & set(item)) == 1 \
                and set(item) <= {"network", "bridge", "mac", "model"}:
            nics.append(dict(item))
        else:
            problems.append(f"{where}: give a libvirt network name, or a mapping with one "
                            f"of network or bridge (and optionally mac, model); got {item!r}")
    return nics


def _cloud_init(name: str, value: Any, problems: list[str]) -> dict[str, Any] | None:
    if value is None:
        return None
    where = vm_field(name, "cloud_init")
    if not isinstance(value, dict) or "user_data" not in value \
            or set(value) - CLOUD_INIT_KEYS:
        problems.append(f"{where}: must be a mapping with user_data (and optionally "
                        f"meta_data, network_config); got {value!r}")
        return None
    return {"user_data": value["user_data"],
            "meta_data": value.get("meta_data") or {"instance-id": name,
                                                    "local-hostname": name},
            "network_config": value.get("network_config")}


def _disk_size(name: str, spec: dict[str, Any], problems: list[str]) -> str | None:
    size = spec.get("disk_gb")
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        problems.append(f"{vm_field(name, 'disk_gb')}: must be a positive number of GB, "
                        f"got {size!r}")
        return None
    return f"{int(size * 1024)}M"


def _base_image(name: str, image: Any, pool: str, problems: list[str]) -> str | None:
    """`image` as pool/image@snapshot: a bare name is <pool>/<name>@base."""
    if image is None:
        return None
    if not isinstance(image, str) or not image:
        problems.append(f"{vm_field(name, 'image')}: must be a base image name, "
                        f"got {image!r}")
        return None
    if "/" not in image:
        image = f"{pool}/{image}"
    return image if "@" in image else f"{image}@base"


def provisioning_items(vms: dict[str, Any], vdm: dict[str, Any], defaults: dict[str, Any],
                       cluster: dict[str, Any], uris: dict[str, str]) -> list[dict[str, Any]]:
    """Per VM, in name order, what to provision and where."""
    problems: list[str] = []
    missing = [k for k in CLUSTER_KEYS if not cluster.get(k)]
    if missing:
        raise ProvisioningError([f"cluster settings missing: {', '.join(missing)} (set "
                                 "yasco_ceph_pool, yasco_ceph_monitors, "
                                 "yasco_ceph_hypervisor_client, yasco_ceph_secret_uuid and "
                                 "yasco_virt_type)"])
    home = (vdm or {}).get("home") or {}
    for name in sorted(set(vms) - set(home)):
        problems.append(f"{vm_field(name)}: not in the VDM; plan again (playbooks/plan.yml)")
    for name in sorted(set(home) - set(vms)):
        problems.append(f"VM {name}: in the VDM but not in yasco_vms; plan again "
                        "(playbooks/plan.yml)")
    items = []
    for name in sorted(vms):
        spec = {**(defaults or {}), **(vms[name] or {})}
        host = home.get(name)
        if host is not None and host not in uris:
            problems.append(f"{vm_field(name)}: its home {host} has no yasco_libvirt_uri; "
                            f"set it in {host}'s host variables")
        kind = "ha" if spec.get("ha") else "preemptible" if spec.get("preemptible") else "plain"
        drive = _cloud_init(name, spec.get("cloud_init"), problems)
        disk = {"pool": cluster["pool"], "name": name,
                "size": _disk_size(name, spec, problems),
                "clone_from": _base_image(name, spec.get("image"), cluster["pool"], problems)}
        if disk["size"] is None and disk["clone_from"] is None:
            problems.append(f"{vm_field(name)}: give disk_gb (a blank disk) or image (a base "
                            "image to clone)")
        rbd = {"monitors": list(cluster["monitors"]), "auth_user": cluster["ceph_user"],
               "secret_uuid": cluster["secret_uuid"]}
        disks = [{"rbd": f"{cluster['pool']}/{name}", **rbd}]
        if drive is not None:
            disks.append({"rbd": f"{cluster['pool']}/{config_drive_name(name)}",
                          "device": "cdrom", **rbd})
        domain = {"vcpus": spec.get("vcpus"), "memory_mb": spec.get("memory_mb"),
                  "kind": kind,
                  "domain_type": cluster["virt_type"], "disks": disks,
                  "nics": _networks(name, spec.get("networks"), problems)}
        for key in ("kernel", "initrd", "cmdline"):
            if spec.get(key):
                domain[key] = spec[key]
        for flag in ("guest_agent", "watchdog"):
            if not isinstance(spec.get(flag, False), bool):
                problems.append(f"{vm_field(name, flag)}: must be true or false, got "
                                f"{spec[flag]!r}")
            elif spec.get(flag):
                domain[flag] = True
        if spec.get("on_crash") not in (None, *ON_CRASH):
            problems.append(f"{vm_field(name, 'on_crash')}: must be one of "
                            f"{', '.join(ON_CRASH)}, "
                            f"got {spec['on_crash']!r}")
        elif spec.get("on_crash"):
            domain["on_crash"] = spec["on_crash"]
        autostart = spec.get("autostart_on_home", True)
        if not isinstance(autostart, bool):
            problems.append(f"{vm_field(name, 'autostart_on_home')}: must be true or false, "
                            f"got {autostart!r}")
        items.append({"name": name, "home": host, "uri": uris.get(host), "kind": kind,
                      "record_key": etcd_keys.vm_key(
                          name, cluster=cluster.get("name") or etcd_keys.DEFAULT_CLUSTER),
                      "priority": spec.get("priority", 0), "disk": disk,
                      "config_drive": None if drive is None else {
                          "pool": cluster["pool"], "name": config_drive_name(name), **drive},
                      "domain": {"name": name, "spec": domain},
                      "autostart_on_home": kind == "plain" and autostart is True})
    if problems:
        raise ProvisioningError(problems)
    return items


def by_record(items: list[dict[str, Any]], kvs: list[dict[str, Any]], host: str,
              cluster: str = etcd_keys.DEFAULT_CLUSTER) -> dict[str, Any]:
    """Host `host`'s provisioning items sorted by what etcd records of each VM (`kvs`:
    etcd_key_info's read of the VM records):
    - `new`: no record yet; each is claimed (`claims`: only where still no record is,
      so of two concurrent runs one starts it), then started;
    - `here`: the new ones and those recorded here running or starting (a run that
      stopped before recording it), started (libvirt makes that a no-op where it runs)
      and recorded running (`records`, each only if its record is still as read);
    - `elsewhere`: recorded on another host, left alone (a rebalance moves them);
    - `held`: recorded here stopped, down, failed, preempted or migrating: HA, an
      operator's request or a live migration decides those, not provisioning."""
    found = {kv["key"].rsplit("/", 1)[-1]: kv for kv in kvs or []}
    out: dict[str, Any] = {"new": [], "here": [], "elsewhere": [], "held": [], "claims": [],
                           "records": []}
    recorded_here = []
    for item in items:
        kv = found.get(item["name"])
        record = json_or_none(kv["value"]) if kv else None
        vm = {"name": item["name"], "record": record if isinstance(record, dict) else None,
              "record_revision": kv["mod_revision"] if kv else 0}
        state = vm_records.state_of(vm)
        if kv is None:
            claimed = vm_records.claim(vm, vm_records.STARTING, host, cluster)
            out["new"].append(item)
            out["claims"].append(claimed)
            out["records"].append(vm_records.complete(claimed, vm_records.RUNNING, host))
        elif (vm["record"] or {}).get("host") != host:
            out["elsewhere"].append(item["name"])
        elif state in (vm_records.RUNNING, vm_records.STARTING):
            recorded_here.append(item)
            out["records"].append(vm_records.change(vm, vm_records.RUNNING, host, cluster))
        else:
            out["held"].append({"vm": item["name"], "state": state or "unreadable"})
    out["here"] = out["new"] + recorded_here
    return out
