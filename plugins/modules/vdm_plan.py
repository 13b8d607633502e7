#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# The work is done on the controller by the action plugin of the same name
# (plugins/action/vdm_plan.py); this file documents it.

DOCUMENTATION = r"""
---
module: vdm_plan
short_description: Plan the Virtual Distribution Map and write it into the inventory
version_added: 0.1.0
description:
  - Reads the hypervisors of O(group) and the VMs of C(yasco_vms) from the inventory,
    plans every VM's home and, for every set of up to C(yasco_failures_to_tolerate)
    failed hypervisors (and every whole failure domain when
    C(yasco_failure_domains_to_tolerate) is 1), where each HA VM goes and which
    preemptible VMs stop to make room.
  - Writes the map as C(yasco_vdm) to O(path), atomically. An infeasible or invalid
    input fails with a message naming the failure set, VM or host, and writes nothing.
  - A fast greedy search runs first; when it finds no plan, an exact search (CP-SAT)
    takes up to O(time_limit) seconds. The answer is a plan, V(infeasible) with a proof
    (a failure set and resource whose demand exceeds what survives, or the exact
    search's), or V(not_found) when the time ran out; the last two write nothing, so
    the current map stays.
  - Re-planning keeps the current homes unless a VM must move, and reports which VMs
    move; a re-plan that would move more than 5 % of the VMs is settled, within
    O(time_limit), until it moves fewer. When the inputs have not changed since the
    current map was planned, nothing changes.
  - Runs on the controller; the task's host does not matter.
  - The schema of the inputs and the invariants of the map are in the collection's
    C(docs/vdm.md).
author:
  - YASCO developers (@yasco)
options:
  group:
    description: The inventory group whose hosts are the hypervisors.
    type: str
    default: yasco_hypervisors
  path:
    description:
      - The file to write.
      - Defaults to C(group_vars/all/yasco_vdm.yml) in the directory of the first
        inventory source.
    type: path
  keep_homes:
    description:
      - Keep each VM's home from the current map unless it must move.
      - When no plan that keeps them is found in the first three quarters of
        O(time_limit), the map is planned afresh for the rest of it, and VMs of one
        size and kind trade places so that the most stay at home (RV(method) V(afresh)).
      - With V(false) the map is planned afresh, which may move many VMs; VMs of one
        size and kind then trade places so that the most stay at home.
    type: bool
    default: true
  rebalance_moves:
    description:
      - How many more VMs may move home, beyond those that must, to even out the
        hypervisors. Each move is a live migration when the map is applied.
    type: int
    default: 0
  time_limit:
    description:
      - How long, in seconds, the exact search may take when the greedy planner finds
        no plan, or, with O(objective=preemptions), looks for a plan that stops fewer
        preemptible VMs (C(yasco_plan_time_limit) in C(playbooks/plan.yml)).
      - A re-plan that moves more than 5 % of the VMs from their current homes then
        moves VMs back for what is left of it.
      - When it runs out the task fails with the answer V(not_found), what the greedy
        could not place and what would most likely help, and writes nothing.
    type: float
    default: 60
  objective:
    description:
      - What the plan does best once it holds every invariant
        (C(yasco_plan_objective) in C(playbooks/plan.yml)).
      - V(balance) keeps the greedy planner's plan, which spreads the spare evenly, and
        plans in a fraction of a second.
      - V(preemptions) then asks the exact search, started from that plan, for one that
        stops the fewest preemptible VMs summed over the failure sets, for up to
        O(time_limit) seconds; it keeps the greedy plan unless it finds one that stops
        fewer and moves no more VMs. Worth it when preemptible VMs fill the spare.
    type: str
    choices: [balance, preemptions]
    default: balance
  what_if:
    description:
      - Only answer, for the inventory as it is and for each scenario, whether it has a
        plan and how many more HA VMs of O(what_if_flavour) would fit on top (as
        Ganeti's hspace does), in a table. Writes nothing.
      - Scenarios separated by commas, each compared with the inventory as it is
        (C(yasco_what_if) in C(playbooks/plan.yml)) - V(add-host:VCPUS:MEMORY_MB) (a
        hypervisor joins), V(remove-host:NAME) (one leaves),
        V(add-vms:COUNT:VCPUS:MEMORY_MB[:ha|plain|preemptible]) (VMs join).
    type: str
  what_if_flavour:
    description:
      - The size of the HA VMs counted by O(what_if), as V(VCPUS:MEMORY_MB).
      - Defaults to the most common size of the inventory's HA VMs.
    type: str
  verify:
    description:
      - Only check that the map on file was planned from the inventory as it is now
        and holds every invariant; fail, naming what to do, if not. Writes nothing.
      - Playbooks that apply the map run this first.
    type: bool
    default: false
attributes:
  platform:
    platforms: all
extends_documentation_fragment:
  - yasco.cluster.attributes
requirements:
  - numpy
  - ortools (the exact search, when the greedy planner finds no plan)
  - jmespath (for VMs with C(placement))
notes:
  - The map is checked against every invariant by a checker independent of the
    planner before it is written.
  - The VDM schema and invariants, in C(docs/vdm.md) of the collection.
"""

EXAMPLES = r"""
- name: Plan the VDM for the current inventory
  yasco.cluster.vdm_plan:

- name: Plan, allowing up to five live migrations to rebalance
  yasco.cluster.vdm_plan:
    rebalance_moves: 5

- name: Plan, giving the exact search up to five minutes when the greedy one fails
  yasco.cluster.vdm_plan:
    time_limit: 300

- name: Plan so that failures stop as few preemptible VMs as possible
  yasco.cluster.vdm_plan:
    objective: preemptions
    time_limit: 30

- name: Ask how many more 4 vCPU, 8 GB HA VMs fit with one more host, or one fewer
  yasco.cluster.vdm_plan:
    what_if: add-host:64:262144,remove-host:hv3
    what_if_flavour: "4:8192"

- name: Plan into a file of one's choosing
  yasco.cluster.vdm_plan:
    path: /srv/inventory/group_vars/all/yasco_vdm.yml
"""

RETURN = r"""
path:
  description: The file the map is (or, in check mode, would be) written to.
  returned: success
  type: str
  sample: inventories/prod/group_vars/all/yasco_vdm.yml
version:
  description: The map's version; it increases whenever the map changes.
  returned: success
  type: int
  sample: 7
digest:
  description: A digest of the inputs the map was planned from.
  returned: changed
  type: str
home:
  description: Every VM's home hypervisor.
  returned: changed
  type: dict
  sample: {web1: hv1, db1: hv2}
reserve:
  description: The spare capacity each hypervisor keeps for failover.
  returned: changed
  type: dict
  sample: {hv3: {vcpus: 4, memory_mb: 8192}}
answer:
  description:
    - V(plan) when a map was planned; V(infeasible) when none can exist (the message
      holds the proof); V(not_found) when the exact search ran out of O(time_limit).
      Only a plan is written.
  returned: when the inputs were planned
  type: str
  sample: plan
method:
  description:
    - The search that found the plan, V(greedy), V(exact), V(repair) (the exact
      search over a few hosts at a time, from where the greedy search stopped),
      V(binding) (a re-plan of a cluster that tolerates two failures or more, by the
      exact search over the failure sets that bind, the others added as they fail), or
      V(afresh) (a re-plan for which no plan that keeps the current homes was found in
      time, planned afresh; O(keep_homes) says how).
  returned: changed
  type: str
  sample: greedy
preemptions:
  description:
    - How many preemptible VMs the plan stops, summed over the failure sets (a VM
      stopped under three failure sets counts three times).
  returned: changed
  type: int
  sample: 12
table:
  description: With O(what_if), the answer per scenario as the lines of a table.
  returned: with what_if
  type: list
  elements: str
what_if:
  description:
    - With O(what_if), per scenario - C(scenario), C(hosts), C(vms), C(answer) (plan,
      infeasible, not_found or invalid), C(fits) (more HA VMs of the flavour that fit),
      C(at_least) (a larger count was not settled in time) and C(detail).
  returned: with what_if
  type: list
  elements: dict
moved:
  description: The VMs whose home differs from the current map's.
  returned: success
  type: list
  elements: str
  sample: [web2]
problems:
  description: Every problem found in the inputs, each naming the VM or host and field.
  returned: when the inputs are invalid
  type: list
  elements: str
"""
