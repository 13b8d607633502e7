# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HA reconciler's decisions: pure Python, no I/O and no clock of its own.

Every HA VM has a requested state (requested/<vm> in etcd, set by
playbooks/vm_state.yml; `started` when absent):

    started    HA keeps it running: restarted where it was, else relocated
    stopped    HA keeps it off, and stops it where it runs
    disabled   HA does nothing for it, and says so
    ignored    HA forgets it until it is set back

`decide(observed, memory, policy, now)` compares each HA VM's requested state with
what etcd shows (its record, and the domains the agents publish for their hosts) and
returns the steps that make them agree, each with its reason; the rulebook carries
them out with playbooks/recover_vm.yml. It is level-triggered: an event only says
"look again", and the leading watcher also calls it every few seconds, so a lost or
repeated event changes nothing. A step goes out once for a record's revision; the
playbook's first write (a compare-and-swap on that record) changes the revision, so
two runs never both start a VM, and a step that changed nothing within
`action_timeout` is decided afresh.

A failed host is not its business: a VM whose record names a host that is not alive
is left to the evacuation, which moves a failed host's HA VMs to their planned slots
in one batch. What it handles is everything after that: a VM that died on a live
host, a start that failed or never finished, VMs left down because more hosts failed
than planned (started as soon as a host has room), and requested states.

`memory` is the reconciler's own state between calls (when each VM was first seen
down, where it was tried), kept by the leading watcher; it and the policy are in
reconciler_pacing. What decide() reads of etcd is made by reconciler_observed, and
where a VM may start is worked out in reconciler_placement.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    DEFAULT_REQUESTED, usable_hosts, where_running)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_placement import (
    first_room, host_loads, take)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import (
    ACTIVE, FAILED, MIGRATING, RUNNING, STARTING)

# What the reconciler's steps ask recover_vm.yml to do.
STEP_ACTIONS = ("restart", "relocate", "stop", "fail", "confirm")


def decide(observed: dict[str, Any], memory: Memory, policy: Policy, now: float
           ) -> dict[str, Any]:
    """The steps that bring every HA VM to its requested state, highest priority
    first; when to look again at the latest (`wake`, None when nothing waits); each
    VM's standing (`standing`: VM -> why nothing is done for it now); and the failed
    hosts whose evacuation is overdue (`evacuate`: an HA VM still recorded there
    `evacuation_timeout` after the failure was seen), for the caller to ask for again.

    `observed` is one consistent read of etcd: `hosts` (name -> alive, maintenance,
    fenced), `domains` (host -> VM -> state, as its agent publishes them), `records`
    (VM -> (record, mod_revision)), `requested` (VM -> state), `restarts` (VM -> host
    -> what that host's agent says of its restarts in place of the VM: `state`
    restarting, restarted or declined, `count` within its window, and the key's
    `mod_revision`, which a restart's or relocation's claim compares), `vdm` (the applied
    VDM's HA view: `vms` with kind, priority, home, chain and sizes, `hosts` with
    capacities) and `disarmed` (bool).
    """
    steps: list[dict[str, Any]] = []
    standing: dict[str, str] = {}
    wake: list[float] = []
    evacuate: set[str] = set()
    if observed.get("disarmed"):
        return {"steps": [], "wake": None, "standing": {}, "evacuate": []}
    vms = observed["vdm"].get("vms", {})
    usable = usable_hosts(observed)
    on = where_running(observed)
    alive = {h for h, host in observed["hosts"].items() if host.get("alive")}
    if memory.alive is not None:
        back = alive - memory.alive
        for vm, (record, dummy) in observed["records"].items():
            if record.get("host") in back:
                memory.attempts.pop(vm, None)
                memory.returning.add(vm)
    memory.alive = alive
    free, preemptible, labels = host_loads(observed, on)
    order = sorted((n for n, e in vms.items() if e.get("kind") == "ha"),
                   key=lambda n: (-int(vms[n].get("priority", 0)), n))
    for vm in order:
        requested = observed["requested"].get(vm, DEFAULT_REQUESTED)
        found = observed["records"].get(vm)
        if requested == "ignored" or found is None:
            memory.forget(vm)
            continue
        if requested == "disabled":
            standing[vm] = "disabled: HA does nothing for it"
            memory.forget(vm)
            continue
        record, revision = found
        asked = memory.asked.get(vm)
        if asked is not None and asked[1] == revision and now < asked[0] + policy.action_timeout:
            standing[vm] = "a step for it is under way"
            wake.append(asked[0] + policy.action_timeout)
            continue
        memory.asked.pop(vm, None)
        state, host = record.get("state"), record.get("host")
        running = on.get(vm, [])
        if requested == "stopped":
            memory.forget(vm)
            on_failed_host = host in observed["hosts"] and not observed["hosts"][host].get(
                "alive")
            if running or (state in ACTIVE and not on_failed_host):
                steps.append(_step("stop", vm, record, revision, host=host, hosts=running,
                                   reason="requested stopped"))
            elif state in ACTIVE:
                # The evacuation fences that host and records the VM stopped; two
                # writers of one record would fail one of them.
                standing[vm] = f"requested stopped; {host} failed: the evacuation's"
            continue
        if running:
            memory.returning.discard(vm)
            memory.down_since.pop(vm, None)
            memory.stranded_since.pop(vm, None)
            landed = state == MIGRATING and running == [record.get("to")]
            if (state == STARTING and running == [host]) or landed:
                # Started where it was claimed, or landed at its live migration's
                # destination (a migration under way runs on both hosts), but the run
                # that did it died (or lost etcd, or went with the source host) before
                # recording it: recorded running there once that run is surely over,
                # as an unfinished start is given up.
                first = memory.starting_since.get(vm)
                if first is None or first[0] != revision:
                    first = memory.starting_since[vm] = (revision, now)
                if now < first[1] + policy.start_timeout:
                    wake.append(first[1] + policy.start_timeout)
                else:
                    steps.append(_step(
                        "confirm", vm, record, revision, host=host, hosts=running,
                        to=running[0] if landed else None,
                        reason=(f"runs on {running[0]}, where its live migration from "
                                f"{host} went" if landed
                                else f"runs on {host}, where its start was claimed")
                        + f", unrecorded after {policy.start_timeout:g} s"))
                continue
            memory.starting_since.pop(vm, None)
            if state == FAILED or (state != MIGRATING and host not in running):
                standing[vm] = f"runs on {', '.join(running)}; its record says {state} on {host}"
            continue
        if state == MIGRATING and observed["hosts"].get(host, {}).get("alive"):
            standing[vm] = "a live migration owns it"
            continue
        if state in ACTIVE and host not in observed["hosts"]:
            standing[vm] = f"recorded on {host}, which is not a known hypervisor"
            continue
        here = observed["hosts"][host]
        shut_down = vm in here.get("off", [])
        if state in ACTIVE and not here.get("alive") and not shut_down:
            died = etcd_keys.died_in_maintenance(here)
            if here.get("maintenance") and not died:
                standing[vm] = (f"{host} stopped in maintenance: it starts again there "
                                "once the host is back")
                continue
            standing[vm] = f"{host} failed: the evacuation's"
            # A host that went down in maintenance sent no host_down (a planned stop
            # would look the same to the watcher): the evacuation is asked for at once.
            since = memory.stranded_since.setdefault(
                vm, now - policy.evacuation_timeout if died else now)
            if now >= since + policy.evacuation_timeout:
                evacuate.add(host)
                memory.stranded_since[vm] = now  # asked again: give it the time
                standing[vm] += (", down in maintenance without its agent's clean stop"
                                 if died else
                                 f", overdue after {policy.evacuation_timeout:g} s")
            wake.append(memory.stranded_since[vm] + policy.evacuation_timeout)
            continue
        memory.stranded_since.pop(vm, None)
        # Its host's agent restarts it in place (agent_restart.py): its restarts count
        # against max_restart, and it is given start_timeout to finish one.
        agents = observed.get("restarts", {}).get(vm, {})
        by_agent = agents.get(host) or {}
        if state == RUNNING and by_agent.get("state") == "restarting":
            since = memory.down_since.setdefault(vm, now)
            if now < since + policy.start_timeout:
                standing[vm] = f"{host}'s agent restarts it in place"
                wake.append(since + policy.start_timeout)
                continue
        reason = None
        if state == RUNNING:
            since = memory.down_since.setdefault(vm, now)
            if now < since + policy.grace:
                wake.append(since + policy.grace)
                continue
            reason = (f"shut down by {host}'s agent as it went down" if shut_down
                      else f"not running on {host}, which is alive")
        elif state == STARTING:
            first = memory.starting_since.get(vm)
            if first is None or first[0] != revision:
                first = memory.starting_since[vm] = (revision, now)
            if now < first[1] + policy.start_timeout:
                wake.append(first[1] + policy.start_timeout)
                continue
            reason = f"its start on {host} did not finish within {policy.start_timeout:g} s"
        elif state == FAILED:
            when, hosts_then = memory.failed.get(vm, (now, frozenset(usable)))
            memory.failed[vm] = (when, hosts_then)
            if frozenset(usable) <= hosts_then and now < when + policy.retry_after:
                standing[vm] = f"failed: {record.get('reason', 'no reason recorded')}"
                wake.append(when + policy.retry_after)
                continue
            grown = not frozenset(usable) <= hosts_then
            reason = "retried: " + ("a host became usable" if grown
                                    else f"{policy.retry_after:g} s since it failed")
            memory.attempts.pop(vm, None)
        else:  # down, stopped, preempted, or no state: meant to run, and does not
            reason = f"recorded {state or 'without a state'}" + (
                f": {record['reason']}" if record.get("reason") else "")
        returning = vm in memory.returning
        step = _recover(vm, vms[vm], record, revision, reason, usable, free, preemptible,
                        labels, vms, memory, policy, now, _said(by_agent, "count"),
                        {h for h, said in agents.items() if _said(said, "count")})
        if step["action"] in ("restart", "relocate"):
            # The agent's word on its restart in place of the VM, as read: the start's
            # claim holds only while it is unchanged, and the agent's restart only
            # while the record is (agent_restart.py), so one of the two starts it.
            step["agent_restart"] = {"host": host, "revision": _said(by_agent, "mod_revision")}
        steps.append(step)
        memory.returning.discard(vm)
        if step["action"] in ("restart", "relocate"):
            if not (returning and step["action"] == "restart"):
                memory.attempts.setdefault(vm, []).append((now, step["to"], step["action"]))
            # What it takes now counts for the VMs after it (a lower priority).
            take(vm, step["to"], free, preemptible, vms, step["preempt"])
            labels[step["to"]] |= set(vms[vm].get("anti_affinity", []))
        elif step["action"] == "fail":
            memory.failed[vm] = (now, frozenset(usable))
    for step in steps:
        memory.asked[step["vm"]] = (now, step["revision"])
    return {"steps": steps, "wake": min(wake) if wake else None, "standing": standing,
            "evacuate": sorted(evacuate)}


def _said(by_agent: dict[str, Any], field: str) -> int:
    """A whole number the agent's restarts/ key holds (`count`, or the `mod_revision`
    it was read at), 0 when it holds none."""
    value = by_agent.get(field, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _recover(vm, entry, record, revision, reason, usable, free, preemptible, labels, vms,
             memory: Memory, policy: Policy, now: float, by_agent: int = 0,
             restarted_on: set[str] | None = None) -> dict[str, Any]:
    """Restart in place, relocate, or fail: the next step for a VM meant to run (a
    restart on a host that just came back counts for nothing: `memory.returning`;
    `by_agent` restarts in place by its host's agent count as the reconciler's own,
    and the hosts whose agents restarted it, `restarted_on`, are tried hosts)."""
    host = record.get("host")
    tried = [(h, kind) for when, h, kind in memory.attempts.get(vm, [])
             if when > now - policy.window]
    restarts = by_agent + sum(1 for h, kind in tried if kind == "restart")
    relocations = sum(1 for h, kind in tried if kind == "relocate")
    if (record.get("state") == RUNNING and host in usable and restarts < policy.max_restart
            and host in free):
        return _step("restart", vm, record, revision, host=host, to=host,
                     reason=f"{reason}: restarted in place " + (
                         f"as {host} is back (counted against no restart limit)"
                         if vm in memory.returning
                         else f"({restarts + 1} of {policy.max_restart})"))
    if relocations >= policy.max_relocate:
        return _step("fail", vm, record, revision, host=host,
                     reason=f"{reason}; tried {', '.join(h for h, dummy in tried)} within "
                            f"{policy.window:g} s: given up until a host becomes usable")
    # A host it failed on is not tried again within the window; neither is the one
    # it just died on, unless it was only ever down (a failure beyond the plan).
    exclude = {h for h, dummy in tried} | (restarted_on or set())
    if record.get("state") in (RUNNING, STARTING):
        exclude.add(host)
    room = first_room(vm, entry, usable, free, preemptible, labels, vms, exclude)
    if room:
        target, preempt = room
        return _step("relocate", vm, record, revision, host=host, to=target, preempt=preempt,
                     reason=f"{reason}: started on {target}" + (
                         f" (relocation {relocations + 1} of {policy.max_relocate})"
                         if record.get("state") in (RUNNING, STARTING) else ""))
    return _step("fail", vm, record, revision, host=host,
                 reason=f"{reason}; no usable host it is allowed on has room"
                        + (f" (tried {', '.join(sorted(exclude))})" if exclude - {None} else ""))


def _step(action: str, vm: str, record: dict[str, Any], revision: int, host: str | None,
          to: str | None = None, hosts: list[str] | None = None,
          preempt: list[str] | None = None, reason: str = "") -> dict[str, Any]:
    return {"action": action, "vm": vm, "from": host, "to": to, "hosts": hosts or [],
            "preempt": preempt or [], "record": record, "revision": revision,
            "reason": reason}
