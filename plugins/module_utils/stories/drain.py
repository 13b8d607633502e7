# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What draining a hypervisor for maintenance does, worked out from the cluster as it
is now (cluster_status, with libvirt asked) and the VDM. Pure Python, no I/O;
playbooks/drain.yml carries it out, and playbooks/undrain.yml brings the VMs back as
a return home does.

Every VM running on the host leaves it live: an HA VM for the spare slot the VDM
plans for that host's failure (the preemptible VMs the plan stops for it stop
first), any other VM for the host with the most room left that its placement rules
allow (its allowed hosts, and no VM sharing an anti-affinity label). A preemptible VM that
finds no room stops, as a failure would stop it; a plain VM that finds none makes
the drain refuse before anything changes. The moves go in waves that overload no
host even with a whole wave in flight.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.untrusted import inert_text
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import ACTIVE
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import VdmView
from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import preempt_step
from ansible_collections.yasco.cluster.plugins.module_utils.stories.rebalance import (
    NOTHING, fits, hypervisors_of, loads, room, wave_steps, waves)


class DrainError(Exception):
    """The host cannot be drained as things are; the message says why and what to do."""


def plan(status: dict[str, Any], vdm: dict[str, Any], host: str,
         cluster: str = etcd_keys.DEFAULT_CLUSTER, concurrency: int = 2,
         per_host: int = 0) -> dict[str, Any]:
    """The drain of `host`, in waves of at most `concurrency` migrations and `per_host`
    on any one host; DrainError before anything changes when it cannot be."""
    hosts = hypervisors_of(status, vdm, host, DrainError)
    here = hosts[host]
    if here.get("libvirt") != "reachable":
        raise DrainError(f"{host}: libvirt cannot be reached at {here.get('uri')}: check "
                         "the host, then run this again")
    others = sorted(h for h, entry in hosts.items() if h != host and etcd_keys.takes_vms(entry)
                    and entry.get("libvirt") == "reachable")
    if not others:
        raise DrainError(f"no other hypervisor is up to take {host}'s VMs")
    vms = ClusterView(status).vms
    busy = sorted(name for name, vm in vms.items() if (vm.get("record") or {}).get("state")
                  in ("migrating", "starting"))
    if busy:
        raise DrainError(f"{', '.join(busy)} are being moved or started: wait for that to "
                         "finish, then run this again")
    view = VdmView(vdm)
    kinds, sizes, capacity = view.kinds(), view.sizes(), view.hosts
    failover = view.failover_for([host])

    current = {name: vm["running_on"][0] for name, vm in vms.items()
               if len(vm.get("running_on") or []) == 1}
    preempt = [preempt_step(name, vms[name], hosts, cluster) for name in failover["preempt"]
               if name in current and current[name] != host]
    for step in preempt:
        del current[step["vm"]]
    load = loads(current, sizes, capacity)
    rules = view.vms
    labels: dict[str, set[str]] = {h: set() for h in hosts}
    for name, where in current.items():
        labels.setdefault(where, set()).update(rules.get(name, {}).get("anti_affinity", []))

    leaving = sorted((name for name, where in current.items() if where == host),
                     key=lambda n: (kinds.get(n) != "ha", -sum(sizes.get(n, {}).values()), n))
    moves, stop, unplaced = [], [], []
    for name in leaving:
        record = vms[name].get("record") or {}
        if record.get("host") != host or record.get("state") not in ACTIVE:
            raise DrainError(f"{name} runs on {host} but etcd records "
                             f"{record or 'nothing'}: settle that first")
        size = sizes.get(name, NOTHING)
        target = failover["targets"].get(name) if kinds.get(name) == "ha" else None
        # The placement rules hold wherever it goes: the hosts it is allowed on, and
        # never beside a VM sharing an anti-affinity label.
        allowed = set(rules.get(name, {}).get("allowed") or others)
        mine = set(rules.get(name, {}).get("anti_affinity", []))
        if target not in others or not fits(load[target], size, capacity[target]):
            roomy = [h for h in others if h in allowed and not mine & labels[h]
                     and fits(load[h], size, capacity[h])]
            target = max(roomy, key=lambda h: room(load[h], capacity[h])) if roomy else None
        if target is None:
            if kinds.get(name) == "preemptible":
                stop.append(preempt_step(name, vms[name], hosts, cluster))
            else:
                unplaced.append(name)
            continue
        for r, amount in size.items():
            load[target][r] += amount
        labels[target] |= mine
        moves.append({"vm": name, "from": host, "to": target})
    if unplaced:
        raise DrainError(f"no room on {', '.join(others)} for {', '.join(unplaced)} (on the "
                         "hosts each is allowed on, beside no VM sharing an anti-affinity "
                         "label): free capacity, or stop them by hand, then drain "
                         f"{host} again")
    for step in stop:
        del current[step["vm"]]
    grouped = waves(moves, current, vdm, max(1, int(concurrency)), int(per_host))
    return {
        "host": host,
        "marker": {"key": etcd_keys.maintenance_key(host, cluster=cluster)},
        # Its own agent, stopping as the host goes down, asked for this drain.
        "asked_by_agent": etcd_keys.asks_migration(here.get("maintenance_marker")),
        # Why, as the marker says: written by whoever may write it, the host's own
        # agent among them, so shown as text that nothing renders.
        "reason": marker_reason(here.get("maintenance_marker")),
        "preempt": preempt + stop,
        "waves": wave_steps(grouped, vms, cluster),
        "events": [{"kind": "preempted", "vm": p["vm"], "host": p["host"]}
                   for p in preempt + stop],
    }


def marker_reason(marker: Any) -> str | None:
    """The reason a maintenance marker gives, as inert text (cluster/untrusted.py)."""
    reason = marker.get("reason") if isinstance(marker, dict) else None
    return inert_text(str(reason)) if reason not in (None, "") else None
