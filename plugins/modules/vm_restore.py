#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: vm_restore
short_description: Restore a VM's RBD disks from its backup sets
version_added: 0.1.0
description:
  - Restores every disk of a backup set made by M(yasco.cluster.vm_backup). The full
    set it grows from is imported (C(rbd import)), then each incremental set up to
    O(snapshot), in order (C(rbd import-diff)).
  - Every file of those sets is checked against the manifest's SHA-256 first; a
    missing or damaged one fails the task before anything changes.
  - Each disk is imported into a new image first. With O(in_place), the disk it
    replaces is then renamed aside, C(NAME.before-restore-TIME), and the new image
    takes its name; a disk that a client has open (its VM runs) is refused. Without,
    the disks are restored beside the VM's, named with O(suffix).
author:
  - YASCO developers (@yasco)
options:
  vm:
    description: The VM whose sets to restore from.
    type: str
    required: true
  directory:
    description: Where the VM's sets are (as given to M(yasco.cluster.vm_backup)).
    type: path
    required: true
  snapshot:
    description: The set to restore; by default the newest.
    type: str
  in_place:
    description: Replace the VM's disks (their old content renamed aside, never
      removed).
    type: bool
    default: false
  suffix:
    description: Without O(in_place), what the restored images' names end with.
    type: str
    default: -restored
attributes:
  check_mode:
    details: Checks the files and the disks, and says what it would import.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
requirements:
  - the C(rbd) command (Debian package ceph-common)
seealso:
  - module: yasco.cluster.vm_backup
"""

EXAMPLES = r"""
- name: Restore db1's disks, stopped, from its newest backup set
  yasco.cluster.vm_restore:
    vm: db1
    directory: /srv/backups
    in_place: true
"""

RETURN = r"""
snapshot:
  description: The set restored.
  returned: always
  type: str
sets:
  description: The sets applied, the full one first.
  returned: always
  type: list
  elements: str
images:
  description: Per disk, C(image) (as backed up), C(restored) (the image written),
    C(staging) and C(aside) (where the replaced disk went, or null).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_backup import (
    BackupError, RestoreRun)


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {
        "vm": {"type": "str", "required": True},
        "directory": {"type": "path", "required": True},
        "snapshot": {"type": "str"},
        "in_place": {"type": "bool", "default": False},
        "suffix": {"type": "str", "default": "-restored"},
    })
    CEPH.run(module, RestoreRun.through(module), BackupError)


if __name__ == "__main__":
    main()
