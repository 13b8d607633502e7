#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: ceph_health_info
short_description: Whether Ceph is healthy enough to serve VM disks
version_added: 0.1.0
description:
  - Reads the cluster's health (C(ceph health)) and says whether it is RV(ready) to
    serve VM disks, that is when its status is not C(HEALTH_ERR) and none of
    O(blocking_checks) is raised.
  - Fails when no monitor quorum answers within O(ceph_timeout); retry it with
    C(until) to wait for Ceph after a power cut.
  - The cephx user needs C(mon 'allow r') or C(profile rbd).
author:
  - YASCO developers (@yasco)
options:
  blocking_checks:
    description:
      - Health checks that mean VM disks cannot be served, whatever the status. By
        default, PGs that are inactive or down, and full OSDs or pools.
    type: list
    elements: str
    default: [PG_AVAILABILITY, OSD_FULL, POOL_FULL]
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.ceph
seealso:
  - module: yasco.cluster.ceph_fence_info
"""

EXAMPLES = r"""
- name: Wait up to ten minutes for Ceph to serve disks
  yasco.cluster.ceph_health_info:
  register: ceph_health
  until: ceph_health is succeeded and ceph_health.ready
  retries: 120
  delay: 5
"""

RETURN = r"""
ready:
  description: Whether VM disks can be served.
  returned: always
  type: bool
status:
  description: C(HEALTH_OK), C(HEALTH_WARN) or C(HEALTH_ERR).
  returned: always
  type: str
  sample: HEALTH_WARN
checks:
  description: The raised health checks, name to C(severity) and C(summary).
  returned: always
  type: dict
  sample: {OSD_DOWN: {severity: HEALTH_WARN, summary: "1 osds down"}}
blocking:
  description: The raised checks among O(blocking_checks).
  returned: always
  type: list
  elements: str
why_not_ready:
  description: Why it is not ready, for a message; empty when it is.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.resources.ceph_health import (
    BLOCKING_CHECKS, HealthInfo)


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {"blocking_checks": {
        "type": "list", "elements": "str", "default": list(BLOCKING_CHECKS)}})
    CEPH.run(module, HealthInfo)


if __name__ == "__main__":
    main()
