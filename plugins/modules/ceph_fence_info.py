#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: ceph_fence_info
short_description: List Ceph blocklist entries, or check whether addresses are fenced
version_added: 0.1.0
description:
  - Lists the OSD blocklist, or with O(addresses) says which of them are fenced.
author:
  - YASCO developers (@yasco)
options:
  addresses:
    description:
      - Clients, hosts or ranges to look for, written as for M(yasco.cluster.ceph_fence).
      - Without them, every entry is listed.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.ceph
seealso:
  - module: yasco.cluster.ceph_fence
"""

EXAMPLES = r"""
- name: Is hv1 still fenced?
  yasco.cluster.ceph_fence_info:
    addresses: [10.0.0.11]
  register: hv1_fence
"""

RETURN = r"""
entries:
  description: Blocklist entries (those of O(addresses) when given), address to expiry.
  returned: always
  type: dict
  sample: {"10.0.0.11:0/0": "2026-12-21T10:00:00.000000+0000"}
fenced:
  description: The addresses (as blocklist entries) that are fenced.
  returned: always
  type: list
  elements: str
not_fenced:
  description: The addresses of O(addresses) that are not.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.stories.ceph_fencing import FenceInfo


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class,
                         {"addresses": {"type": "list", "elements": "str", "default": []}})
    CEPH.run(module, FenceInfo)


if __name__ == "__main__":
    main()
