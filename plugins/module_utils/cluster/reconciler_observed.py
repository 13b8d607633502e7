# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the HA reconciler reads: one consistent read of the cluster in etcd, made into
`observed` (observe), and the views of it that the reconciler and the watcher share
(the usable hosts, where each VM runs, the HA VMs' standing, the failures still
tolerated). Pure Python, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

REQUESTED_STATES = ("started", "stopped", "disabled", "ignored")
DEFAULT_REQUESTED = "started"


def usable_hosts(observed: dict[str, Any]) -> set[str]:
    """Hosts a VM may be started on (etcd_keys.takes_vms)."""
    return {name for name, host in observed["hosts"].items() if etcd_keys.takes_vms(host)}


def failures_tolerated(observed: dict[str, Any]) -> int | None:
    """How many more hypervisors may fail, whichever they are, with every HA VM still
    given a planned spare slot, the hosts out now (down, in maintenance or fenced)
    counted against the map's failures_to_tolerate: X - out while out <= X; 0 while
    more are out but all in one failure domain the map plans for; -1 beyond the plan
    (an HA VM may find no slot). None when the map in etcd does not say its X."""
    view = observed["vdm"]
    planned = view.get("failures_to_tolerate")
    if not isinstance(planned, int) or isinstance(planned, bool):
        return None
    hosts = view.get("hosts", {})
    out = set(hosts) - usable_hosts(observed)
    if len(out) <= planned:
        return planned - len(out)
    domains = {(hosts[h] or {}).get("failure_domain") for h in out}
    return 0 if view.get("failure_domains_to_tolerate") and len(domains) == 1 \
        and None not in domains else -1


def where_running(observed: dict[str, Any]) -> dict[str, list[str]]:
    """VM -> hosts whose agent publishes a domain of it (any state: a paused or
    starting QEMU holds the disk too)."""
    on: dict[str, list[str]] = {}
    for host, domains in sorted(observed["domains"].items()):
        if observed["hosts"].get(host, {}).get("alive"):
            for vm in domains:
                on.setdefault(vm, []).append(host)
    return on


def ha_vms(observed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each provisioned HA VM of the map as the metrics show it: its requested state,
    its record's state and host, the hosts it runs on, and whether it is down (meant to run,
    running nowhere alive)."""
    on = where_running(observed)
    view = {}
    for vm, entry in sorted(observed["vdm"].get("vms", {}).items()):
        found = observed["records"].get(vm)
        if entry.get("kind") != "ha" or found is None:
            continue
        requested = observed["requested"].get(vm, DEFAULT_REQUESTED)
        view[vm] = {"requested": requested, "record": found[0].get("state", "unknown"),
                    "host": found[0].get("host") or "", "on": on.get(vm, []), "down": requested == "started" and not on.get(vm)}
    return view


def observe(kvs: list[Any], parse) -> dict[str, Any]:
    """`observed` for decide() from one read of the cluster's keys (etcd KeyValues:
    hosts/, vms/, requested/, fences/, vdm/ha and ha/disarmed), `parse` being
    etcd_keys.parse_key bound to the cluster."""
    observed: dict[str, Any] = {"hosts": {}, "domains": {}, "records": {}, "requested": {},
                                "restarts": {}, "vdm": {}, "disarmed": False}

    def value(kv) -> Any:
        try:
            return json.loads(kv.value)
        except (TypeError, ValueError):
            return None

    for kv in kvs:
        parsed = parse(kv.key)
        if parsed is None:
            continue
        if parsed.kind == "registered":
            # Kept as the agent wrote it: `stopped` once it stopped cleanly.
            observed["hosts"].setdefault(parsed.host, {})["registered"] = value(kv)
        elif parsed.kind in ("alive", "maintenance"):
            observed["hosts"].setdefault(parsed.host, {})[parsed.kind] = True
            data = value(kv)
            if not isinstance(data, dict):
                continue
            if parsed.kind == "alive":
                if data.get("storage"):  # what its agent's storage probe says
                    observed["hosts"][parsed.host]["storage"] = data["storage"]
            elif data.get("by") == "agent" and isinstance(data.get("off"), list):
                # The HA VMs its agent shut down to fail them over as the host went
                # down: known off, though the host no longer answers.
                observed["hosts"][parsed.host]["off"] = list(data["off"])
        elif parsed.kind == "domain":
            data = value(kv)
            observed["domains"].setdefault(parsed.host, {})[parsed.vm] = (
                data.get("state", "running") if isinstance(data, dict) else "running")
        elif parsed.kind == "restart":
            data = value(kv)
            # Its revision even when its value is no record: a relocation's claim
            # compares it (reconciler.py, agent_restart).
            observed["restarts"].setdefault(parsed.vm, {})[parsed.host] = {
                **(data if isinstance(data, dict) else {}), "mod_revision": kv.mod_revision}
        elif parsed.kind == "fence":
            observed["hosts"].setdefault(parsed.host, {})["fenced"] = True
        elif parsed.kind == "vm":
            data = value(kv)
            if isinstance(data, dict):
                observed["records"][parsed.vm] = (data, kv.mod_revision)
        elif parsed.kind == "requested":
            data = value(kv)
            state = data.get("state") if isinstance(data, dict) else data
            if state in REQUESTED_STATES:
                observed["requested"][parsed.vm] = state
        elif parsed.kind == "disarmed":
            observed["disarmed"] = True
        elif parsed.kind == "vdm_ha":
            data = value(kv)
            observed["vdm"] = data if isinstance(data, dict) else {}
    for host in observed["vdm"].get("hosts", {}):
        observed["hosts"].setdefault(host, {})
    return observed
