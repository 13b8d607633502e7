# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VDM as written to inventory (`yasco_vdm`): built from a plan, and read back.

Reading is what the evacuation path does at failure time, so it computes nothing
that could fail: a planned failure set is a lookup, and a set beyond what was
planned gets a best-effort answer from the chains the map already implies.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    DEFAULT_OBJECTIVE, RESOURCES, Plan, Problem, amount, failure_set_key, problem_digest)

# Everything but the version: a map whose content changes gets a new version.
CONTENT_KEYS = ("digest", "objective", "failures_to_tolerate", "failure_domains_to_tolerate",
                "hosts", "vms", "home", "failover", "preempt", "reserve")


def objective_of(vdm: dict[str, Any]) -> str:
    """What the map was planned to do best (vdm_model.OBJECTIVES)."""
    return vdm.get("objective", DEFAULT_OBJECTIVE)


def build(problem: Problem, plan: Plan, previous: dict[str, Any] | None) -> dict[str, Any]:
    """The yasco_vdm document for `plan`, versioned after `previous`.

    Besides the plan it records what failure time needs and must not compute from
    the inventory: each host's usable capacity and each VM's kind, priority, size,
    anti-affinity labels and (when restricted) allowed hosts.
    """
    all_hosts = frozenset(problem.hosts)
    hosts = {}
    for name, host in sorted(problem.hosts.items()):
        entry = {r: amount(getattr(host, r)) for r in RESOURCES if getattr(host, r) is not None}
        if host.failure_domain is not None:
            entry["failure_domain"] = host.failure_domain
        hosts[name] = entry
    vms = {}
    for name, vm in sorted(problem.vms.items()):
        entry = {"kind": vm.kind,
                 "priority": vm.priority,
                 **{r: amount(vm.demand(r)) for r in RESOURCES if vm.demand(r)}}
        if vm.anti_affinity:
            entry["anti_affinity"] = sorted(vm.anti_affinity)
        if vm.allowed != all_hosts:
            entry["allowed"] = sorted(vm.allowed)
        vms[name] = entry
    document = {
        "version": 1,
        "digest": problem_digest(problem),
        # Written only when not the default, so that maps planned before it stay as they are.
        **({"objective": plan.objective} if plan.objective != DEFAULT_OBJECTIVE else {}),
        "failures_to_tolerate": problem.failures_to_tolerate,
        "failure_domains_to_tolerate": problem.failure_domains_to_tolerate,
        "hosts": hosts,
        "vms": vms,
        "home": dict(plan.home),
        "failover": {key: dict(sorted(moves.items())) for key, moves in plan.failover.items()},
        "preempt": dict(plan.preempt),
        "reserve": dict(sorted(plan.reserve.items())),
    }
    if previous:
        version = previous.get("version", 0)
        version = version if isinstance(version, int) else 0
        same = all(previous.get(k) == document.get(k) for k in CONTENT_KEYS)
        document["version"] = version if same else version + 1
    return document


def failover_for(vdm: dict[str, Any], failed: list[str] | set[str]) -> dict[str, Any]:
    """What to do when the hosts `failed` are down.

    For a planned failure set, the plan itself. For any other set (more failures
    than planned), a best effort: HA VMs by priority, highest first, each on the first
    surviving host with room, trying its planned targets before the roomiest other
    hosts it is allowed on, and never beside a VM sharing an anti-affinity label.
    Preemptible VMs stop where room is needed, lowest priority first. HA VMs that find
    no room stay down.
    """
    failed = set(failed)
    key = failure_set_key(failed)
    failover = vdm.get("failover", {})
    if key in failover:
        return {"failed": key, "planned": True, "targets": dict(failover[key]),
                "preempt": list(vdm.get("preempt", {}).get(key, [])), "down": []}
    return _best_effort(vdm, failed, key)


def failover_chain(failover: dict[str, dict[str, str]], home: str, name: str) -> list[str]:
    """VM `name`'s planned targets in order: where it goes when its home fails, where
    from there when that target fails too, and so on as far as the plan goes."""
    chain: list[str] = []
    failed = {home}
    while (step := failover.get(failure_set_key(failed), {}).get(name)) is not None:
        chain.append(step)
        failed.add(step)
    return chain


def ha_view(vdm: dict[str, Any]) -> dict[str, Any]:
    """What the HA reconciler needs of a VDM, small enough for one etcd key: host
    capacities, each VM's kind, priority, size, placement rules, home and (HA VMs)
    failover chain, and the failures the map tolerates. The failover map of every
    failure set stays in the inventory."""
    failover, home = vdm.get("failover", {}), vdm.get("home", {})
    vms = {}
    for name, entry in sorted(vdm.get("vms", {}).items()):
        vms[name] = {**entry, "home": home.get(name)}
        if entry.get("kind") == "ha" and home.get(name):
            vms[name]["chain"] = failover_chain(failover, home[name], name)
    return {"version": vdm.get("version"), "hosts": dict(vdm.get("hosts", {})), "vms": vms,
            # For the watcher's count of the failures still covered (its metrics).
            "failures_to_tolerate": vdm.get("failures_to_tolerate"),
            "failure_domains_to_tolerate": vdm.get("failure_domains_to_tolerate", 0)}


def size(entry: dict[str, Any]) -> dict[str, float]:
    """A VM's size from its entry in the map's `vms`: each resource, 0 where not given."""
    return {r: float(entry.get(r) or 0) for r in RESOURCES}


def capacity(entry: dict[str, Any]) -> dict[str, float]:
    """A host's usable capacity from its entry in the map's `hosts`: each resource,
    unbounded where not given."""
    return {r: float(entry.get(r, float("inf"))) for r in RESOURCES}


def _best_effort(vdm: dict[str, Any], failed: set[str], key: str) -> dict[str, Any]:
    home, vms, hosts = vdm.get("home", {}), vdm.get("vms", {}), vdm.get("hosts", {})
    survivors = sorted(set(hosts) - failed)
    # What stays running on each survivor, preemptible VMs kept apart: they may stop.
    free = {h: capacity(hosts[h]) for h in survivors}
    labels: dict[str, set[str]] = {h: set() for h in survivors}
    preemptible: dict[str, list[str]] = {h: [] for h in survivors}
    for name, host in home.items():
        if host not in free:
            continue
        entry = vms.get(name, {})
        if entry.get("kind") == "preemptible":
            preemptible[host].append(name)
            continue
        for r, used in size(entry).items():
            free[host][r] -= used
        labels[host] |= set(entry.get("anti_affinity", []))
    displaced = sorted((n for n, h in home.items()
                        if h in failed and vms.get(n, {}).get("kind") == "ha"),
                       key=lambda n: (-int(vms[n].get("priority", 0)), n))
    targets: dict[str, str] = {}
    down: list[str] = []
    incoming_labels: dict[str, set[str]] = {h: set() for h in survivors}
    for name in displaced:
        entry = vms[name]
        need = size(entry)
        mine = set(entry.get("anti_affinity", []))
        allowed = set(entry.get("allowed", survivors))
        for host in _candidates(vdm.get("failover", {}), home[name], name, free):
            if host not in free or host not in allowed or mine & (labels[host]
                                                                  | incoming_labels[host]):
                continue
            if all(free[host][r] >= need[r] for r in RESOURCES):
                for r in RESOURCES:
                    free[host][r] -= need[r]
                incoming_labels[host] |= mine
                targets[name] = host
                break
        else:
            down.append(name)
    stopped = _stopped(vms, preemptible, free, incoming_labels)
    return {"failed": key, "planned": False, "targets": targets, "preempt": stopped,
            "down": down}


def _candidates(failover: dict[str, dict[str, str]], home: str, name: str,
                free: dict[str, dict[str, float]]) -> list[str]:
    """VM `name`'s planned targets in chain order, then every other host, roomiest first."""
    chain = failover_chain(failover, home, name)
    others = sorted(set(free) - set(chain),
                    key=lambda h: (-free[h]["memory_mb"], -free[h]["vcpus"], h))
    return chain + others


def _stopped(vms: dict[str, Any], preemptible: dict[str, list[str]],
             free: dict[str, dict[str, float]], incoming_labels: dict[str, set[str]]
             ) -> list[str]:
    """Preemptible VMs to stop: those sharing a label with an arriving VM, then the
    lowest priority (largest first) until what arrives fits beside the rest."""
    stopped = []
    for host, names in preemptible.items():
        order = sorted(names, key=lambda n: (int(vms[n].get("priority", 0)),
                                             -float(vms[n].get("memory_mb", 0)), n))
        over = dict(free[host])
        for name in order:
            for r, used in size(vms[name]).items():
                over[r] -= used
        for name in order:
            clash = set(vms[name].get("anti_affinity", [])) & incoming_labels[host]
            if not clash and all(v >= -1e-9 for v in over.values()):
                continue
            stopped.append(name)
            for r, used in size(vms[name]).items():
                over[r] += used
    return sorted(stopped)


class VdmView:
    """A VDM document (`yasco_vdm`) as the stories, the status, the report and the
    reconciler read it: the one reader of its fields. Each reads as empty where the
    document lacks it; `planned` says whether there is a map at all."""

    def __init__(self, doc: Any) -> None:
        self.doc: dict[str, Any] = doc if isinstance(doc, dict) else {}

    @property
    def planned(self) -> bool:
        """Whether the document is a planned map (plan.yml writes one)."""
        return "home" in self.doc

    @property
    def version(self) -> Any:
        return self.doc.get("version")

    @property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Each host's usable capacity, as planned."""
        return self.doc.get("hosts") or {}

    @property
    def vms(self) -> dict[str, dict[str, Any]]:
        """Each VM's kind, priority, size and placement rules."""
        return self.doc.get("vms") or {}

    @property
    def homes(self) -> dict[str, str]:
        return self.doc.get("home") or {}

    @property
    def failover(self) -> dict[str, dict[str, str]]:
        """Each planned failure set's targets, by failure_set_key."""
        return self.doc.get("failover") or {}

    @property
    def reserve(self) -> dict[str, Any]:
        return self.doc.get("reserve") or {}

    def home(self, vm: str) -> str | None:
        return self.homes.get(vm)

    def homed_on(self, host: str) -> set[str]:
        """The VMs whose home is `host`."""
        return {name for name, home in self.homes.items() if home == host}

    def kind(self, vm: str, default: str | None = None) -> str | None:
        return self.vms.get(vm, {}).get("kind", default)

    def kinds(self, default: str | None = None) -> dict[str, str | None]:
        return {name: entry.get("kind", default) for name, entry in self.vms.items()}

    def size(self, vm: str) -> dict[str, float]:
        return size(self.vms.get(vm, {}))

    def sizes(self) -> dict[str, dict[str, float]]:
        return {name: size(entry) for name, entry in self.vms.items()}

    def failover_for(self, failed: list[str] | set[str]) -> dict[str, Any]:
        """What to do when the hosts `failed` are down (`failover_for`)."""
        return failover_for(self.doc, failed)
