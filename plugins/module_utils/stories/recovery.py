# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How playbooks/recover_vm.yml carries out the reconciler's steps (reconciler.py):
restart a VM in place, relocate it, stop it, or record it failed. Pure Python, no
I/O; the playbook does each step with the modules.

A VM is started only when all of this holds:
- its record is still the revision the reconciler decided on: the claim is a
  compare-and-swap on that revision (module_utils/cluster/vm_records.py), so of two runs
  only one starts the VM;
- libvirt on the host it ran on, asked directly, says it runs there no more: the
  agent's word is not enough to start a second copy;
- its target still has room for it, beside what runs there and what etcd records
  as claimed or running there now: a step decided before another run took that room
  (an evacuation claiming a slot) is left alone, to be decided again;
- no client holds its disk but dead ones, on that host or on a fenced one: a QEMU
  that died keeps its exclusive lock (its watch lingers in the OSDs for half a
  minute), and a hypervisor's cephx user may not take it over. The fencer blocklists
  that one client instance (ip:port/nonce: the other VMs on the host carry on) and
  breaks its lock. A lock held from anywhere else is a live client: the VM is not
  started, and the run says who holds it.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import STEP_ACTIONS
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    REQUESTED_STATES)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_placement import (
    host_loads, take)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import ha_view
from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import (
    ceph_addrs, images_of, preempt_step)


class RecoveryError(Exception):
    """The steps cannot be carried out as given; the message says why."""


def requested_record(vm: str, state: str, vdm: dict[str, Any], cluster: str, by: str,
                     reason: str, at: str) -> dict[str, Any]:
    """The etcd_key spec that sets VM `vm`'s requested state, after checking both
    names; `started` deletes the key (it is the default)."""
    known = sorted((vdm or {}).get("vms", {}))
    if vm not in known:
        near = get_close_matches(str(vm), known, n=1)
        raise RecoveryError(
            f"vm {vm!r} is not in the VDM" + (f"; did you mean {near[0]!r}?" if near else "")
            + (f" Known VMs: {', '.join(known[:20])}{' ...' if len(known) > 20 else ''}"
               if known else " (the VDM has no VMs: plan one with playbooks/plan.yml)"))
    if state not in REQUESTED_STATES:
        raise RecoveryError(f"state {state!r} for {vm}: must be one of "
                            f"{', '.join(REQUESTED_STATES)}")
    key = etcd_keys.requested_key(vm, cluster=cluster)
    if state == "started":
        return {"key": key, "state": "absent"}
    return {"key": key, "value": {"state": state, "by": by, "since": at, "reason": reason}}


def plan(steps: list[dict[str, Any]], status: dict[str, Any], items: list[dict[str, Any]],
         cluster: str = etcd_keys.DEFAULT_CLUSTER, vdm: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    """What to do for the reconciler's `steps`, checked against the cluster as it is
    now (cluster_status), each VM's provisioning item and the VDM's capacities and
    sizes (none checked without `vdm`)."""
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise RecoveryError("yasco_recover: must be a list of the reconciler's steps "
                            "(each a mapping with action and vm)")
    hosts = ClusterView(status).hosts
    vms = ClusterView(status).vms
    by_name = {item["name"]: item for item in items}
    # A client on a fenced host is cut off from the disks for good: its locks are
    # dead, wherever the VM was recorded (a VM moved by hand, then its host failed).
    fenced = sorted({a for h in hosts.values() if h.get("fenced") for a in _cut_off(h)})
    out: dict[str, Any] = {"start": [], "stop": [], "fail": [], "preempt": [], "stale": [],
                           "confirm": [], "crowded": [], "events": []}
    # The VMs to start or stop are counted where their steps leave them.
    room = Room(status, vdm, {step.get("vm") for step in steps
                              if step.get("action") in ("restart", "relocate", "stop")})
    for step in steps:
        action, name = step.get("action"), step.get("vm")
        if action not in STEP_ACTIONS:
            raise RecoveryError(f"{name}: action {action!r}: must be one of "
                                f"{', '.join(STEP_ACTIONS)}")
        if name not in vms or name not in by_name:
            raise RecoveryError(f"{name}: not a VM of this inventory (yasco_vms) and etcd")
        vm, record = vms[name], vms[name].get("record") or {}
        if vm_records.revision_of(vm) != step.get("revision"):
            out["stale"].append({"vm": name, "decided_on": step.get("record"),
                                 "now": vm.get("record")})
            continue
        event = {"vm": name, "host": step.get("to") or step.get("from"),
                 "details": {"action": action, "reason": step.get("reason", "")}}
        if action == "stop":
            out["stop"].append({
                "vm": name,
                "domains": [{"name": name, "uri": hosts[h]["uri"]}
                            for h in step.get("hosts", []) if h in hosts],
                "record": vm_records.change(vm, vm_records.STOPPED, record.get("host"),
                                            cluster)})
            out["events"].append({**event, "kind": "stopped"})
        elif action == "confirm":
            # Where it runs: the host of its claim, or a migration's destination.
            out["confirm"].append({"vm": name, "record": vm_records.change(
                vm, vm_records.RUNNING, step.get("to") or record.get("host"), cluster)})
            out["events"].append({**event, "kind": "confirmed"})
        elif action == "fail":
            out["fail"].append({"vm": name, "record": vm_records.change(
                vm, vm_records.FAILED, record.get("host"), cluster,
                reason=step.get("reason", ""))})
            out["events"].append({**event, "kind": "failed"})
        elif (not room.take(name, step.get("to"), step.get("preempt", []))
              and action == "relocate"):
            # A restart in place goes back into the room it had.
            out["crowded"].append({"vm": name, "to": step.get("to")})
        else:
            out["start"].append(_start(step, vm, by_name[name], hosts, cluster, fenced))
            out["preempt"] += [preempt_step(p, vms.get(p, {}), hosts, cluster)
                               for p in step.get("preempt", [])
                               if vms.get(p, {}).get("running_on")]
    out["sources"] = [{"name": s["vm"], "uri": s["source_uri"]}
                      for s in out["start"] if s["source_uri"]]
    out["images"] = sorted({i for s in out["start"] for i in s["images"]})
    return out


def _cut_off(host: dict[str, Any]) -> list[str]:
    """A fenced host's addresses whose clients are cut off: those the inventory
    declares for it that its fence record names (all of them, for a record that names
    none). A record may name more, from before fences came from the inventory, or
    kept from a fence it replaced: those may be another host's, whose clients live."""
    recorded = (host.get("fence") or {}).get("ceph_addrs") or []
    return [a for a in ceph_addrs(host) if not recorded or a in recorded]


class Room:
    """Each host's room now, from what runs there and what etcd records as claimed or
    running there (reconciler_placement's count), less the VMs of the steps: each
    is counted where its step starts it, once taken."""

    def __init__(self, status: dict[str, Any], vdm: dict[str, Any] | None,
                 moving: set[str]) -> None:
        sizes = ha_view(vdm) if vdm else {}
        self.vms = sizes.get("vms", {})
        others = {n: vm for n, vm in ClusterView(status).vms.items() if n not in moving}
        observed = {"vdm": sizes,
                    "records": {n: (vm.get("record") or {}, vm_records.revision_of(vm))
                                for n, vm in others.items()}}
        self.free, self.preemptible, dummy = host_loads(
            observed, {n: list(vm.get("running_on") or []) for n, vm in others.items()})

    def take(self, vm: str, host: str | None, preempt: list[str]) -> bool:
        """Whether `vm` fits on `host` once `preempt` stop there; its room is then
        taken for the steps after it."""
        return take(vm, host or "", self.free, self.preemptible, self.vms, preempt)


def _start(step: dict[str, Any], vm: dict[str, Any], item: dict[str, Any],
           hosts: dict[str, Any], cluster: str, fenced: list[str]) -> dict[str, Any]:
    target, source = step["to"], step.get("from")
    uri = hosts.get(target, {}).get("uri") or item["uri"]
    claimed = vm_records.claim(vm, vm_records.STARTING, target, cluster, **{"from": source})
    # Only while the agent of the host it ran on has not written a word on restarting
    # it in place since the step was decided: the agent's restart holds only while
    # the record is unchanged, so one etcd transaction or the other wins, never both.
    agent = step.get("agent_restart")
    if isinstance(agent, dict) and agent.get("host") in hosts:
        claimed["if_unchanged"] = {
            etcd_keys.restart_key(agent["host"], item["name"], cluster=cluster):
                _revision(agent.get("revision"))}
    # The host it ran on, when alive: asked whether it still runs it, and its dead
    # clients' locks are the ones that may be broken.
    alive = source in hosts and hosts[source].get("alive")
    return {
        "vm": item["name"], "action": step["action"], "from": source, "to": target,
        "reason": step.get("reason", ""), "priority": item.get("priority", 0),
        "images": images_of(item), "domain": {**item["domain"], "uri": uri},
        "source_uri": hosts[source]["uri"] if alive else None,
        # Whose locks are dead: the clients on the host it ran on, which libvirt there
        # says runs it no more, and those on fenced hosts.
        "source_addresses": sorted(set(ceph_addrs(hosts[source]) if alive else [])
                                   | set(fenced)),
        "claim": claimed,
        "record": vm_records.complete(claimed, vm_records.RUNNING, target),
        "failed_record": vm_records.complete(claimed, vm_records.DOWN, target,
                                             reason=f"start on {target} failed"),
        "event": {"kind": "restarted" if step["action"] == "restart" else "relocated",
                  "vm": item["name"], "host": target,
                  "details": {"from": source, "reason": step.get("reason", "")}},
    }


def after_source_check(recovery: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The recovery less the VMs that libvirt on their host says still run there
    (libvirt_domain_info's result): the agent's view was behind, and nothing is to
    be done. A host that cannot be asked keeps its VMs from starting elsewhere."""
    states = {d["name"]: d.get("state") for d in (info or {}).get("domains") or []}
    asked = {s["name"] for s in recovery["sources"]}
    if asked and not info.get("domains"):
        still = [{"vm": s["vm"], "state": "unknown: libvirt did not answer"}
                 for s in recovery["start"] if s["vm"] in asked]
    else:
        still = [{"vm": s["vm"], "state": states.get(s["vm"])} for s in recovery["start"]
                 if s["vm"] in asked and states.get(s["vm"]) not in (
                     "shutoff", "undefined", "crashed", None)]
    names = {s["vm"] for s in still}
    start = [s for s in recovery["start"] if s["vm"] not in names]
    return {**recovery, "start": start, "still_running": still,
            "images": sorted({i for s in start for i in s["images"]})}


def after_lock_check(recovery: dict[str, Any], disks: dict[str, Any]) -> dict[str, Any]:
    """From a loop of rbd_image_info results over the recovery's images: the dead
    clients to fence (holders on the host the VM died on, which libvirt says runs it
    no more), their images, and the VMs not to start because a client elsewhere holds
    a disk (`held`) or a disk is missing (`missing`)."""
    found = {}
    for result in (disks or {}).get("results") or []:
        image = result.get("image") or {}
        if result.get("exists") and image:
            found[f"{image['pool']}/{image['name']}"] = image
        elif result.get("item"):
            found.setdefault(result["item"], None)
    dead: list[str] = []
    fence_images: list[str] = []
    held, missing, start = [], [], []
    for step in recovery["start"]:
        mine = set(step["source_addresses"])
        holders: dict[str, str] = {}
        gone = [i for i in step["images"] if found.get(i) is None]
        for name in step["images"]:
            for lock in (found.get(name) or {}).get("locks") or []:
                holders[name] = ceph.lock_address(lock)
        foreign = {i: a for i, a in holders.items() if a.split(":")[0] not in mine}
        if gone:
            missing.append({"vm": step["vm"], "images": gone})
        elif foreign:
            held.append({"vm": step["vm"], "images": foreign})
        else:
            start.append(step)
            for name, address in holders.items():
                if address not in dead:
                    dead.append(address)
                fence_images.append(name)
    return {**recovery, "start": start, "held": held, "missing": missing,
            "dead_clients": dead, "locked_images": sorted(set(fence_images))}


def outcome(recovery: dict[str, Any], started: list[str], errors: list[str]
            ) -> dict[str, Any]:
    """The records and history events of the starts, from libvirt_domain's batch."""
    done = [s for s in recovery["start"] if s["vm"] in started]
    failed = [s for s in recovery["start"] if s["vm"] not in started]
    return {
        "records": [s["record"] for s in done],
        "failed_records": [{**s["failed_record"], "value": {
            **s["failed_record"]["value"],
            "reason": "; ".join(e for e in errors if s["vm"] in e)
            or s["failed_record"]["value"]["reason"]}} for s in failed],
        "events": [s["event"] for s in done] + [
            {"kind": "start-failed", "vm": s["vm"], "host": s["to"],
             "details": {"reason": s["reason"]}} for s in failed],
        "started": [f"{s['vm']} on {s['to']} ({s['action']})" for s in done],
        "done": [{k: s[k] for k in ("vm", "action", "from", "to")} for s in done],
        "not_started": [s["vm"] for s in failed],
    }


def _revision(value: Any) -> int:
    """A mod_revision as a step gives it (0: the key was absent)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecoveryError(f"agent_restart: revision must be 0 or a mod_revision, got {value!r}")
    return value
