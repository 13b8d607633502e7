#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: vm_backup
short_description: Export a snapshot of a VM's RBD disks to a filesystem, full or incremental
version_added: 0.1.0
description:
  - Writes a backup set, O(directory)/O(vm)/O(snapshot)/, with one file per disk of
    O(images) and a C(manifest.json) (the set's kind, base, consistency, and each
    file's size and SHA-256).
  - The VM's first set is full (C(rbd export), a raw image). A later one holds what
    changed since the newest set before it (C(rbd export-diff)), while that set's
    snapshot is still on every disk; otherwise, or with O(full), it is full again.
  - Files are written under a temporary name and renamed when complete; the manifest
    comes last, so a set without one is an interrupted backup, never used.
  - A set that exists already is left alone.
  - Take the snapshot first, with M(yasco.cluster.vm_snapshot); keep the newest backed-up
    snapshot on the disks, as the base of the next incremental set.
author:
  - YASCO developers (@yasco)
options:
  vm:
    description: The VM, which names its directory of sets.
    type: str
    required: true
  images:
    description: The VM's disks, each C(pool/image), all with O(snapshot).
    type: list
    elements: str
    required: true
  snapshot:
    description: The snapshot of the disks to back up; it names the set.
    type: str
    required: true
  directory:
    description: Where the VM's sets go, a directory that exists.
    type: path
    required: true
  full:
    description: Write a full set even when an incremental one is possible.
    type: bool
    default: false
  consistency:
    description: How consistent the snapshot is (from M(yasco.cluster.vm_snapshot)), kept in
      the manifest.
    type: str
    default: unknown
attributes:
  check_mode:
    details: Says which set it would write, full or incremental.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
requirements:
  - the C(rbd) command (Debian package ceph-common)
seealso:
  - module: yasco.cluster.vm_snapshot
  - module: yasco.cluster.vm_restore
"""

EXAMPLES = r"""
- name: Back up db1's disks at its newest snapshot
  yasco.cluster.vm_backup:
    vm: db1
    images: [yasco/db1]
    snapshot: yasco-backup-20261122T210000Z
    directory: /srv/backups
"""

RETURN = r"""
set:
  description: The set's directory.
  returned: always
  type: str
  sample: /srv/backups/db1/yasco-backup-20261122T210000Z
kind:
  description: V(full) or V(incremental).
  returned: always
  type: str
base:
  description: The snapshot of the set an incremental one starts from; null when full.
  returned: always
  type: str
files:
  description: Per disk, C(image), C(file), C(kind), C(from) and, once written,
    C(bytes) and C(sha256).
  returned: always
  type: list
  elements: dict
manifest:
  description: The set's manifest (empty in check mode).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_backup import (
    BackupError, BackupRun)


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {
        "vm": {"type": "str", "required": True},
        "images": {"type": "list", "elements": "str", "required": True},
        "snapshot": {"type": "str", "required": True},
        "directory": {"type": "path", "required": True},
        "full": {"type": "bool", "default": False},
        "consistency": {"type": "str", "default": "unknown"},
    })
    CEPH.run(module, BackupRun.through(module), BackupError)


if __name__ == "__main__":
    main()
