#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: libvirt_domain_info
short_description: The state of libvirt domains, and whether their guest agents answer
version_added: 0.1.0
description:
  - Reports each domain's state (C(running), C(shutoff), ..., or C(undefined)).
  - With O(guest_agent), also whether its QEMU guest agent answers a ping, which says
    the guest's OS is up. It is C(ready), C(not_answering) (not installed, not started,
    or still booting), C(no_channel) (the domain has no agent channel, see
    O(yasco.cluster.libvirt_domain#module:spec.guest_agent)) or C(not_running).
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The domain. One of O(name) and O(domains) is required.
    type: str
  domains:
    description:
      - Several domains, each a mapping with C(name) and, when it is on another host
        than O(uri), C(uri).
    type: list
    elements: dict
  guest_agent:
    description: Ping each running domain's guest agent.
    type: bool
    default: false
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.libvirt
seealso:
  - module: yasco.cluster.libvirt_domain
"""

EXAMPLES = r"""
- name: Wait until web1 and db1 have booted far enough for their guest agents to answer
  yasco.cluster.libvirt_domain_info:
    domains:
      - {name: web1, uri: "qemu+libssh://root@hv1/system"}
      - {name: db1, uri: "qemu+libssh://root@hv2/system"}
    guest_agent: true
  register: booted
  until: booted.not_ready | length == 0
  retries: 60
  delay: 5
"""

RETURN = r"""
domains:
  description: Each domain's C(name), C(uri), C(state) and, with O(guest_agent),
    C(guest_agent), in the order given.
  returned: always
  type: list
  elements: dict
  sample: [{name: web1, uri: "qemu+libssh://root@hv1/system", state: running,
            guest_agent: ready}]
not_ready:
  description: The domains whose guest agent may answer but does not yet (or that do
    not run).
  returned: with O(guest_agent)
  type: list
  elements: str
no_agent:
  description: The running domains without a guest agent channel.
  returned: with O(guest_agent)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_module import LIBVIRT
from ansible_collections.yasco.cluster.plugins.module_utils.resources.libvirt_guest import (
    DomainInfo)


def main(module_class=AnsibleModule) -> None:
    module = LIBVIRT.module(module_class, {
        "name": {"type": "str"},
        "domains": {"type": "list", "elements": "dict"},
        "guest_agent": {"type": "bool", "default": False},
    }, required_one_of=[["name", "domains"]], mutually_exclusive=[["name", "domains"]])
    LIBVIRT.run(module, DomainInfo)


if __name__ == "__main__":
    main()
