#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: config_drive
short_description: A cloud-init NoCloud config drive, kept as an RBD image
version_added: 0.1.0
description:
  - Writes an ISO 9660 drive labelled C(cidata) with C(user-data), C(meta-data) and
    optionally C(network-config) into an RBD image, which a VM attaches as a CD-ROM, so
    cloud images configure themselves with no metadata server.
  - The drive lives in Ceph, so a VM finds it on any host it fails over to.
  - A digest of the content is kept in the image's metadata; a rerun with the same
    content changes nothing.
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The image holding the drive. One of O(name) and O(drives) is required.
    type: str
  drives:
    description:
      - Several drives in one task, with at least O(name) each (see the notes).
        Mutually exclusive with O(name).
    type: list
    elements: dict
    version_added: 0.1.0
  state:
    description: Whether the drive exists.
    type: str
    choices: [present, absent]
    default: present
  user_data:
    description: The user data; a mapping is written as C(#cloud-config) YAML.
    type: raw
  meta_data:
    description: The meta data, a mapping or text; by default C(instance-id) and
      C(local-hostname) set to O(name).
    type: raw
  network_config:
    description: Network configuration (cloud-init's version 1 or 2), if any.
    type: raw
attributes:
  diff_mode:
    support: partial
    details: Shows the content digest before and after.
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
  - yasco.cluster.ceph.pool
  - yasco.cluster.batch
requirements:
  - pycdlib
seealso:
  - module: yasco.cluster.libvirt_domain
"""

EXAMPLES = r"""
- name: A config drive for web1
  yasco.cluster.config_drive:
    pool: yasco
    name: web1-cidata
    user_data:
      users:
        - name: admin
          ssh_authorized_keys: ["ssh-ed25519 AAAA... admin"]
    meta_data:
      instance-id: web1
      local-hostname: web1

- name: The config drives of several VMs in one task
  yasco.cluster.config_drive:
    pool: yasco
    user_data: "{{ lookup('ansible.builtin.file', 'cloud-config.yml') | from_yaml }}"
    drives:
      - name: web1-cidata
      - name: web2-cidata
"""

RETURN = r"""
sha256:
  description: The digest of the drive's content.
  returned: without O(drives)
  type: str
results:
  description: With O(drives), each drive's RV(sha256), with its C(name) and
    C(changed), in the order given.
  returned: with O(drives)
  type: list
  elements: dict
  sample: [{name: web1-cidata, changed: false, sha256: 9f86d081884c7d65...}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.stories.config_drive import (
    PYCDLIB_IMPORT_ERROR, DriveRun)


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {
        "pool": {"type": "str", "required": True},
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        "user_data": {"type": "raw"},
        "meta_data": {"type": "raw"},
        "network_config": {"type": "raw"},
    }, batch="drives", required_if=[("state", "present", ("user_data",))])
    CEPH.run(module, DriveRun, requirements={"pycdlib": PYCDLIB_IMPORT_ERROR})


if __name__ == "__main__":
    main()
