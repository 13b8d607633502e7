#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: ceph_fence
short_description: Fence clients or hosts off Ceph storage, and lift fences
version_added: 0.1.0
description:
  - V(present) (fenced) adds an OSD blocklist entry for each of O(addresses), all in one
    OSD map, waits until it has that map, and then breaks the locks of O(images) that
    fenced clients hold, so that another host may open the images. It returns exactly
    what it blocklisted and which locks it broke.
  - An OSD serves a request only once it has the map epoch the request carries, so the
    lock break, and every request of a QEMU started afterwards, reach OSDs that
    enforce the fence. Whatever the fenced clients wrote before is ordered before them.
  - The user needs C(mon 'allow r, allow command "osd blocklist", allow command "osd
    blocklist ls"') and C(osd 'profile rbd pool=POOL') for the images' pool, and
    nothing more; see C(docs/security.md).
  - A lock held by a client that the fence does not cover is kept and returned in
    RV(locks_kept). That client is alive (for instance a VM started elsewhere by a
    concurrent evacuation), and its disk must not get a second writer.
  - An address is one client (C(ip:port/nonce), as an image's watchers show it), a
    host (an IP address, which covers every client on it) or a CIDR range (expanded to
    its addresses; at most 256).
  - V(absent) (unfenced) removes those entries.
  - Entries already present are not added again and absent ones not removed, so a
    rerun changes nothing.
author:
  - YASCO developers (@yasco)
options:
  state:
    description: What to do.
    type: str
    choices: [present, absent]
    default: present
  addresses:
    description: Clients, hosts or ranges to fence or unfence.
    type: list
    elements: str
    required: true
  images:
    description:
      - Images, C(pool/image), whose locks to break once the fence is in effect.
      - Only with O(state=present).
    type: list
    elements: str
    default: []
  expire:
    description:
      - Seconds until Ceph drops the entries by itself.
      - Ten years by default, so that a fenced host stays fenced until it is unfenced
        on purpose, after its VMs were dealt with. Ceph keeps an entry's first expiry;
        adding an entry again does not extend it, so an entry that must outlive its
        expiry has to be lifted and added anew. C(playbooks/fence_check.yml) checks the
        fences etcd records against the blocklist.
    type: float
    default: 315360000
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
notes:
  - Verified on Ceph 16 against real guests, the lab's tests show a fenced QEMU's
    writes fail while the same disk opened by a new QEMU on another host carries on.
seealso:
  - module: yasco.cluster.ceph_fence_info
  - module: yasco.cluster.rbd_image
"""

EXAMPLES = r"""
- name: Fence everything on hv1, then break its VMs' disk locks
  yasco.cluster.ceph_fence:
    addresses: [10.0.0.11]
    images: [yasco/web1, yasco/db1]
  register: fence

- name: Lift the fence once hv1 is back and its VMs are handled
  yasco.cluster.ceph_fence:
    state: absent
    addresses: [10.0.0.11]
"""

RETURN = r"""
blocklisted:
  description: The entries this run added (would add, in check mode).
  returned: always
  type: list
  elements: str
  sample: ["10.0.0.11:0/0"]
unblocklisted:
  description: The entries this run removed.
  returned: always
  type: list
  elements: str
locks_broken:
  description: The locks this run broke, each with C(image), C(kind) and C(owner).
  returned: always
  type: list
  elements: dict
locks_kept:
  description:
    - The locks of O(images) held by clients the fence does not cover, left in place;
      each with C(image), C(kind) and C(owner).
  returned: always
  type: list
  elements: dict
images_missing:
  description:
    - The images of O(images) that do not exist, as C(pool/name). They have no lock
      to break, and the rest of the fence goes on.
  returned: always
  type: list
  elements: str
  version_added: 0.1.0
entries:
  description: Every blocklist entry afterwards, address to expiry time.
  returned: always
  type: dict
actions:
  description: What was done, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.stories.ceph_fencing import FenceRun


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {
        "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        "addresses": {"type": "list", "elements": "str", "required": True},
        "images": {"type": "list", "elements": "str", "default": []},
        "expire": {"type": "float", "default": 315360000.0},
    })
    CEPH.run(module, FenceRun)


if __name__ == "__main__":
    main()
