#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: rbd_image_info
short_description: Describe an RBD image, with who has it open and who holds its lock
version_added: 0.1.0
description:
  - Reports an image's size, features, parent, snapshots, watchers (the clients that
    have it open, which is what a fence must cut) and lock owners.
  - Its own connection is left out of the watchers.
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The image.
    type: str
    required: true
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.ceph
  - yasco.cluster.ceph.pool
seealso:
  - module: yasco.cluster.rbd_image
  - module: yasco.cluster.ceph_fence
"""

EXAMPLES = r"""
- name: Who has web1's disk open
  yasco.cluster.rbd_image_info:
    pool: yasco
    name: web1
  register: web1_disk

- name: Fence them
  yasco.cluster.ceph_fence:
    addresses: "{{ web1_disk.image.watchers | map(attribute='address') }}"
    images: [yasco/web1]
"""

RETURN = r"""
exists:
  description: Whether the image exists.
  returned: always
  type: bool
image:
  description: The image, as M(yasco.cluster.rbd_image) returns it; empty when it does
    not exist.
  returned: always
  type: dict
  sample: {pool: yasco, name: web1, size: 10737418240, features: [exclusive-lock, layering],
           parent: null, snapshots: [], watchers: [{address: "10.0.0.11:0/3041757318",
           id: 4242, cookie: 140256}], locks: [{kind: exclusive, owner: "client.4242 auto 1",
           mode: "1"}]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.resources.ceph_image import ImageInfo


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {"pool": {"type": "str", "required": True},
                                        "name": {"type": "str", "required": True}})
    CEPH.run(module, ImageInfo)


if __name__ == "__main__":
    main()
