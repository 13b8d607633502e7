# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster looks like right now, from etcd and from libvirt on every host,
and where the two disagree.

The disagreements are the point: a VM running somewhere etcd does not say, a VM
running on two hosts at once (the one outcome YASCO exists to prevent), a VM etcd
records as running that runs nowhere.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import from_json
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import VdmView


def _running_domains(name: str, uri: str, timeout: float) -> tuple[dict[str, str] | None, str]:
    """Domain name -> state on one host, or None and why when it cannot be asked."""
    try:
        conn = lv.connect(uri, timeout)
    except lv.LibvirtAdapterError as err:
        return None, str(err)
    try:
        return {dom.name(): lv.domain_state(dom) for dom in conn.listAllDomains()}, ""
    except lv.libvirt.libvirtError as err:
        return None, f"{name}: {err.get_error_message()}"
    finally:
        conn.close()


def _ask_libvirt(hypervisors: dict[str, str], timeout: float
                 ) -> dict[str, tuple[dict[str, str] | None, str]]:
    """_running_domains of every host, all asked at once (each over a connection of
    its own): a host that does not answer costs one connect timeout, not one each."""
    with ThreadPoolExecutor(max(1, min(len(hypervisors), 16))) as pool:
        futures = {name: pool.submit(_running_domains, name, uri, timeout)
                   for name, uri in hypervisors.items()}
    return {name: future.result() for name, future in futures.items()}


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def declared_problem(params: dict[str, Any]) -> str | None:
    """What is wrong with the option `ceph_addrs`, if anything: each hypervisor's
    addresses must be plain IP addresses (ceph.host_addresses), for hypervisors the
    task names; an empty list declares none (an evacuation of that host is refused)."""
    problems = []
    for name, addresses in sorted((params.get("ceph_addrs") or {}).items()):
        if name not in params["hypervisors"]:
            problems.append(f"ceph_addrs.{name}: not one of the hypervisors")
            continue
        if addresses == []:
            continue
        try:
            ceph.host_addresses(addresses, f"ceph_addrs.{name}")
        except ValueError as err:
            problems.append(str(err))
    return "; ".join(problems) or None


def cluster_status(etcd: EtcdClient, params: dict[str, Any], check_mode: bool
                   ) -> dict[str, Any]:
    del check_mode  # reading only
    cluster = params["cluster"]
    vdm = VdmView(params["vdm"])
    kinds = vdm.kinds("")
    problems: list[str] = []
    hosts = []
    seen: dict[str, list[tuple[str, str]]] = {}
    asked = {} if params["domains_from"] == "agents" else _ask_libvirt(
        params["hypervisors"], params["connect_timeout"])
    # One transaction: every record as of one revision, consistent with each other.
    snapshot = etcd.get_prefixes([etcd_keys.hosts_prefix(cluster=cluster),
                                  etcd_keys.vms_prefix(cluster=cluster),
                                  etcd_keys.requested_prefix(cluster=cluster),
                                  etcd_keys.fences_prefix(cluster=cluster),
                                  etcd_keys.disarmed_key(cluster=cluster)])
    stored = {kv.key: kv for kvs in snapshot.values() for kv in kvs}
    declared = params.get("ceph_addrs") or {}
    for name, uri in sorted(params["hypervisors"].items()):
        alive = stored.get(etcd_keys.alive_key(name, cluster=cluster))
        ttl = None
        if alive is not None and alive.lease and params.get("leases", True):
            lease = etcd.lease_info(alive.lease, keys=False)
            ttl = lease.ttl if lease else None
        marker = stored.get(etcd_keys.maintenance_key(name, cluster=cluster))
        maintenance = marker is not None
        if params["domains_from"] == "agents":
            published = etcd_keys.domains_prefix(name, cluster=cluster)
            domains = {key[len(published):]: (from_json(kv.value, key) or {}).get(
                "state", "running") for key, kv in stored.items() if key.startswith(published)}
            reachable = "published" if alive is not None else "not alive"
        else:
            domains, why = asked[name]
            reachable = "reachable" if domains is not None else "unreachable"
            if domains is None:
                problems.append(f"{name}: libvirt cannot be reached ({why})")
        for dom, state in (domains or {}).items():
            seen.setdefault(dom, []).append((name, state))
        registered = stored.get(etcd_keys.registered_key(name, cluster=cluster))
        fence = stored.get(etcd_keys.fence_key(name, cluster=cluster))
        beat = (from_json(alive.value, alive.key) or {}) if alive is not None else {}
        hosts.append({
            "name": name,
            "uri": uri,
            # As the inventory declares them: what a fence of the host blocklists, never
            # what its agent registered.
            "ceph_addrs": (ceph.host_addresses(declared[name], f"ceph_addrs.{name}")
                           if declared.get(name) else []),
            # This registration's boot: a return home tells a reboot from a reconnect.
            "boot_id": beat.get("boot_id"),
            # The agent's hardware watchdog: its timeout while armed, else null.
            "watchdog": beat.get("watchdog"),
            "registered": from_json(registered.value, registered.key) if registered else None,
            "alive": alive is not None,
            # What its agent's storage probe says: ok, lost (cut off from Ceph), or
            # null when it does not probe.
            "storage": beat.get("storage"),
            "lease_ttl": ttl,
            "fenced": fence is not None,
            "fence": from_json(fence.value, fence.key) if fence else None,
            "maintenance": maintenance,
            # Who marked it (a drain, the agent's graceful stop, an emergency shutdown).
            "maintenance_marker": from_json(marker.value, marker.key) if marker else None,
            "libvirt": reachable,
            "domains": sorted(domains or {}),
        })
    records = {kv.key.rsplit("/", 1)[-1]: from_json(kv.value, kv.key)
               for kv in snapshot[etcd_keys.vms_prefix(cluster=cluster)]}
    revisions = {kv.key.rsplit("/", 1)[-1]: kv.mod_revision
                 for kv in snapshot[etcd_keys.vms_prefix(cluster=cluster)]}
    requested = {kv.key.rsplit("/", 1)[-1]: (from_json(kv.value, kv.key) or {}).get("state")
                 for kv in snapshot[etcd_keys.requested_prefix(cluster=cluster)]}
    vms = []
    for name in sorted(set(vdm.homes) | set(records) | set(seen)):
        record = records.get(name) or {}
        running = sorted(h for h, state in seen.get(name, []) if state in ("running", "paused"))
        if len(running) > 1:
            problems.append(f"{name}: RUNNING TWICE, on {' and '.join(running)}")
        elif running and record.get("host") not in (None, running[0]):
            problems.append(f"{name}: runs on {running[0]} but etcd records "
                            f"{record.get('host')}")
        elif running and not record:
            problems.append(f"{name}: runs on {running[0]} but etcd has no record of it")
        if record.get("state") == "running" and not running:
            problems.append(f"{name}: etcd records it running on {record.get('host')} but "
                            "it runs nowhere")
        vms.append({"name": name, "home": vdm.home(name),
                    "recorded_host": record.get("host"), "recorded_state": record.get("state"),
                    "running_on": running, "kind": kinds.get(name, ""),
                    # What HA is asked to keep true (playbooks/vm_state.yml).
                    "requested": requested.get(name, "started" if kinds.get(name) == "ha"
                                               else None),
                    "record": records.get(name),
                    # What a change to the record compares (module_utils/cluster/vm_records.py).
                    "record_revision": revisions.get(name, 0)})
    host_table = _table([[h["name"], "yes" if h["alive"] else "NO",
                          "-" if h["lease_ttl"] is None else h["lease_ttl"],
                          "-" if not h["alive"] else f"{h['watchdog']} s" if h["watchdog"]
                          else "none",
                          "yes" if h["fenced"] else "no", "yes" if h["maintenance"] else "no",
                          h["libvirt"], len(h["domains"])] for h in hosts],
                        ["hypervisor", "alive", "lease ttl", "watchdog", "fenced",
                         "maintenance", "libvirt", "domains"])
    vm_table = _table([[v["name"], v["kind"], v["home"] or "-", v["recorded_host"] or "-",
                        v["recorded_state"] or "-", ",".join(v["running_on"]) or "-",
                        v["requested"] or "-"]
                       for v in vms],
                      ["vm", "kind", "home", "etcd host", "etcd state", "running on",
                       "requested"])
    # With the agents' events still waiting under their hosts, as of the snapshot,
    # which was read before the history is.
    events = cluster_events.recent(etcd, params["events"], cluster=cluster,
                                   hosts_read=snapshot[etcd_keys.hosts_prefix(cluster=cluster)])
    tables = [host_table, vm_table]
    flag = stored.get(etcd_keys.disarmed_key(cluster=cluster))
    disarmed = None if flag is None else (from_json(flag.value, flag.key) or {})
    if disarmed is not None:
        frozen = disarmed.get("mode") == "freeze"
        tables.insert(0, f"HA DISARMED{' (FROZEN)' if frozen else ''} by "
                         f"{disarmed.get('by', '?')} since {disarmed.get('since', '?')}: "
                         f"{disarmed.get('reason', '-')}; no failure is evacuated"
                         f"{', and no agent self-fences,' if frozen else ''} until it is "
                         "re-armed (playbooks/disarm.yml -e yasco_ha_disarmed=false)")
    if events:
        # An agent's event the HA watcher has not copied into the history yet says so.
        tables.append(_table([[e["at"], e["kind"], e.get("host", "-"), e.get("vm", "-"),
                               f"{e.get('by', '-')}{' (waiting)' if e.get('waiting') else ''}"]
                              for e in events],
                             ["event at", "kind", "host", "vm", "by"]))
    return {"changed": False, "hypervisors": hosts, "vms": vms, "problems": problems,
            "requested": {n: s for n, s in requested.items() if s},
            "events": events, "ha_disarmed": disarmed, "table": "\n\n".join(tables) + "\n",
            "summary": json.dumps({"problems": len(problems), "vms": len(vms)})}
