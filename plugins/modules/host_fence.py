#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: host_fence
short_description: Fence hypervisors off Ceph and record it in etcd, or lift their fences, safely against each other
version_added: 0.1.0
description:
  - A hypervisor's fence is two things, changed together by this module - its entries
    in Ceph's OSD blocklist, and its fence record in etcd (C(fences/<host>)), whose
    C(ceph_addrs) name the entries.
  - V(present) waits while a lift of a record stands (see below), blocklists every
    record's addresses as M(yasco.cluster.ceph_fence) does, and writes each record by
    compare-and-swap against the record as it read it, with C(since) set to now. If a
    record changed in between, it starts over, up to five times. A record of the same
    fence, its entries in place, is left as it is, so a rerun changes nothing. Once the
    records are written, it breaks the locks of O(images) that fenced clients hold.
  - V(absent) lifts each record's fence, only if the record still says what
    O(records) gives (as read earlier, for instance by M(yasco.cluster.cluster_status)),
    and, given the host's liveness key (C(alive)), only while that key exists - a host
    that failed again since keeps its fence for the evacuation under way.
    It first marks the record, by compare-and-swap, as being lifted under an etcd
    lease of 30 seconds that nothing renews; it removes the blocklist entries only while
    that lease has at least 10 seconds plus O(ceph_timeout) left (so O(ceph_timeout) may
    be 15 at most for a lift), and then deletes the record by compare-and-swap. A fence
    of the same host waits while such a mark's lease lives, and at most 30 seconds once
    it has seen the mark. A lift that cannot finish puts the fence back as it was.
    Several records are lifted one by one; one refused fails the task, after the others.
  - So a run that lifts a fence it read before the host failed again (a watcher
    deposed during a return home, say) fails and removes nothing, and a fence is never
    undone by a lift that started before it. A lift that finds a newer fence recorded
    after it removed entries puts them back and fails.
  - The fencing user (C(docs/security.md)) and the controller's etcd user are needed,
    the latter with write access to C(fences/).
author:
  - YASCO developers (@yasco)
options:
  state:
    description: V(present) fences, V(absent) lifts.
    type: str
    choices: [present, absent]
    default: present
  records:
    description:
      - The hosts' fence records, each a mapping of C(key) (the record's etcd key),
        C(value) (a mapping whose C(ceph_addrs) lists the host's addresses, as
        M(yasco.cluster.ceph_fence) takes them) and, for a lift, C(alive) (the host's
        liveness key, which must exist for the lift to go ahead; required).
      - With O(state=present), C(value) is what to record; with O(state=absent), what
        the record held when it was read. A record absent from etcd is not lifted again.
    type: list
    elements: dict
    required: true
  images:
    description:
      - Images, C(pool/image), whose locks held by fenced clients to break - with
        O(state=present) once the fence is in effect and recorded, with O(state=absent)
        under the lift's mark, before any entry goes (a QEMU killed while fenced could
        not release its lock, and a hypervisor may not take one over).
    type: list
    elements: str
    default: []
  expire:
    description: Seconds until Ceph drops the entries by itself, as for M(yasco.cluster.ceph_fence).
    type: float
    default: 315360000
attributes:
  check_mode:
    details:
      - A fence in check mode still waits while a lift stands.
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
  - yasco.cluster.etcd
seealso:
  - module: yasco.cluster.ceph_fence
  - module: yasco.cluster.cluster_status
"""

EXAMPLES = r"""
- name: Fence hv1, record it, and break its VMs' disk locks
  yasco.cluster.host_fence:
    records:
      - key: /yasco/yasco/fences/hv1
        value: {by: evacuate, method: ceph-blocklist, ceph_addrs: [10.0.0.11]}
    images: [yasco/web1, yasco/db1]

- name: Lift hv1's fence, as recorded when the return home read the cluster
  yasco.cluster.host_fence:
    state: absent
    records:
      - key: /yasco/yasco/fences/hv1
        value: "{{ status.hosts | selectattr('name', 'eq', 'hv1') | map(attribute='fence') | first }}"
        alive: /yasco/yasco/hosts/hv1/alive
"""

# The blocklist, lock and image keys are those of ceph_fence, whose run HostFenceRun
# extends; here each says what it is for a host's fence.
RETURN = r"""
blocklisted:
  description: The fenced hosts' addresses this run added to the blocklist (would add,
    in check mode), as Ceph writes them.
  returned: always
  type: list
  elements: str
  sample: ["10.0.0.11:0/0"]
unblocklisted:
  description: The lifted hosts' addresses this run removed from the blocklist.
  returned: always
  type: list
  elements: str
records:
  description: The fence records this run wrote (V(present)) or deleted (V(absent)).
  returned: always
  type: list
  elements: str
waited:
  description: Seconds a fence waited for lifts of the same records to end.
  returned: always
  type: float
locks_broken:
  description: The locks on O(images) that the fenced hosts held and this run broke,
    each with C(image), C(kind) and C(owner).
  returned: always
  type: list
  elements: dict
locks_kept:
  description: The locks on O(images) that other clients hold, left in place.
  returned: always
  type: list
  elements: dict
images_missing:
  description: The images of O(images) that do not exist, as C(pool/name); the fence
    goes on without them.
  returned: always
  type: list
  elements: str
entries:
  description: The whole blocklist once the run is over, address to expiry time.
  returned: always
  type: dict
actions:
  description: What was done to each host's fence, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.stories.ceph_fencing import HostFenceRun


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, module_argument_spec(
        state={"type": "str", "default": "present", "choices": ["present", "absent"]},
        records={"type": "list", "elements": "dict", "required": True},
        images={"type": "list", "elements": "str", "default": []},
        expire={"type": "float", "default": 315360000.0},
    ))
    CEPH.run(module, HostFenceRun, EtcdError, requirements=ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
