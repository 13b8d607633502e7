#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: cluster_status
short_description: The cluster as etcd and libvirt see it, and where they disagree
version_added: 0.1.0
description:
  - For every hypervisor, whether its agent is alive (and its lease's time to live),
    whether it is fenced or in maintenance, and which domains libvirt runs there.
  - For every VM, its VDM home, where etcd records it and where it actually runs.
  - Lists the disagreements in RV(problems) - above all a VM running on two hosts.
  - etcd's records (hosts, VMs, fences, the disarm flag) are read in one transaction,
    so they are consistent with each other.
  - Changes nothing.
author:
  - YASCO developers (@yasco)
options:
  hypervisors:
    description: Hypervisor name to its libvirt URI.
    type: dict
    required: true
  ceph_addrs:
    description:
      - Hypervisor name to the addresses its Ceph client uses, as the inventory declares
        them (C(yasco_hypervisor_ceph_addrs) in the playbooks, from each host's
        C(yasco_ceph_addrs)), each a list of plain IP addresses, no range.
      - Each entry of RV(hypervisors) carries its own as C(ceph_addrs), the only
        addresses the evacuation fences it at; a hypervisor not listed, or listed with
        an empty list, has none, and its evacuation is refused. What a host's agent
        registered in etcd is never a fence target (a compromised host could name
        others there).
      - The task fails, before it reads anything, naming a hypervisor whose addresses
        are not plain IP addresses.
    type: dict
    default: {}
    version_added: 0.1.0
  cluster:
    description: The cluster's name, under which its etcd keys live.
    type: str
    default: yasco
  vdm:
    description: The VDM (C(yasco_vdm)), for homes and kinds.
    type: dict
    default: {}
  domains_from:
    description:
      - Where to learn which domains run on each hypervisor.
      - V(libvirt) asks every hypervisor's libvirt, all at once, which is the truth
        but waits up to O(connect_timeout) when a host is dead.
      - V(agents) reads what the host agents publish in etcd, which vanishes with a
        host's lease and never waits on a dead host. The evacuation uses it. Each
        hypervisor's C(libvirt) is then V(published), or V(not alive).
    type: str
    choices: [libvirt, agents]
    default: libvirt
    version_added: 0.1.0
  leases:
    description:
      - Whether to look up each live hypervisor's lease for the seconds it has left
        (C(lease_ttl) in RV(hypervisors)), one more etcd request per host.
      - V(false) reads the whole cluster in one etcd request, each C(lease_ttl) then
        null. The HA playbooks (evacuation, recovery) do, between a failure and
        the VMs starting again.
    type: bool
    default: true
    version_added: 0.1.0
  events:
    description: How many of the latest events of the cluster's history to show.
    type: int
    default: 10
    version_added: 0.1.0
  connect_timeout:
    description: Seconds to wait for a hypervisor's libvirt to answer.
    type: float
    default: 10
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.etcd
"""

EXAMPLES = r"""
- name: Look at the cluster
  yasco.cluster.cluster_status:
    hypervisors: "{{ dict(groups.yasco_hypervisors | zip(groups.yasco_hypervisors | map('extract', hostvars, 'yasco_libvirt_uri'))) }}"
    cluster: "{{ yasco_cluster_name }}"
    vdm: "{{ yasco_vdm }}"
    endpoints: "{{ yasco_etcd_endpoints }}"
  register: status

- name: Read the cluster for an evacuation, with the addresses each host is fenced at
  yasco.cluster.cluster_status:
    hypervisors: "{{ yasco_hypervisor_uris }}"
    ceph_addrs: "{{ yasco_hypervisor_ceph_addrs }}"  # playbooks/vars/cluster.yml
    cluster: "{{ yasco_cluster_name }}"
    vdm: "{{ yasco_vdm }}"
    domains_from: agents
    endpoints: "{{ yasco_etcd_endpoints }}"
  register: status
"""

RETURN = r"""
hypervisors:
  description: Per hypervisor, C(name), C(uri), C(ceph_addrs) (its Ceph addresses as
    O(ceph_addrs) declares them; empty when it names none), C(registered) (what its
    agent last registered, such as C(address) and C(ceph_addrs), or null; data, never
    a fence target), C(alive),
    C(boot_id) (the boot its agent runs in now, or null when not alive),
    C(watchdog) (the timeout of the hardware watchdog its agent keeps armed, or null),
    C(lease_ttl) (the seconds its lease has left; null when not alive or when
    O(leases) is false), C(fenced), C(fence) (its C(fences/<host>) record, or null),
    C(maintenance), C(maintenance_marker) (its marker, which says who set it, or
    null), C(libvirt) (reachable or not) and C(domains).
  returned: success
  type: list
  elements: dict
vms:
  description: Per VM, C(name), C(kind), C(home), C(recorded_host), C(recorded_state),
    C(record) (its whole etcd record, or null), C(record_revision) (the record's
    C(mod_revision), which a change to it compares; 0 when there is none),
    C(running_on) (hosts where libvirt runs it) and C(requested) (its requested
    state; null for a VM that is not HA and was given none).
  returned: success
  type: list
  elements: dict
requested:
  description:
    - VM -> the state an operator requested for it with C(playbooks/vm_state.yml)
      (V(stopped), V(disabled) or V(ignored)); a VM not listed is V(started). Each
      entry of RV(vms) has it as C(requested) too.
  returned: success
  type: dict
  sample: {"db1": "stopped"}
problems:
  description: Every disagreement, as a sentence naming the VM or host.
  returned: success
  type: list
  elements: str
  sample: ["web1: RUNNING TWICE, on hv1 and hv2"]
events:
  description: The latest O(events) events of the cluster's history, oldest first,
    each with C(key), C(at), C(kind) and, when known, C(host), C(vm), C(by) and
    C(details). An agent's event that the HA watcher has not copied into the history
    yet is among them with C(waiting) true, its C(key) under its host.
  returned: success
  type: list
  elements: dict
  version_added: 0.1.0
ha_disarmed:
  description: The cluster's disarm flag (C(by), C(reason), C(since)) while automatic
    evacuation is paused by C(playbooks/disarm.yml), else null.
  returned: success
  type: dict
  version_added: 0.1.0
table:
  description: The same as text tables, after a line saying so when HA is disarmed.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, etcd_run, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import run_module
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_status import (
    cluster_status, declared_problem)


def main(module_class=AnsibleModule) -> None:
    module = module_class(
        argument_spec=module_argument_spec(
            hypervisors={"type": "dict", "required": True},
            ceph_addrs={"type": "dict", "default": {}},
            cluster={"type": "str", "default": "yasco"},
            vdm={"type": "dict", "default": {}},
            events={"type": "int", "default": 10},
            domains_from={"type": "str", "default": "libvirt",
                          "choices": ["libvirt", "agents"]},
            connect_timeout={"type": "float", "default": 10.0},
            leases={"type": "bool", "default": True},
        ),
        supports_check_mode=True,
    )
    run_module(module, etcd_run(cluster_status, declared_problem), EtcdError,
               ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
