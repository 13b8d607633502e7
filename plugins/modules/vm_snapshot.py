#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: vm_snapshot
short_description: A consistent snapshot of every RBD disk of a VM, with retention
version_added: 0.1.0
description:
  - Snapshots every disk of O(images) at one moment. When the VM runs and its QEMU
    guest agent answers, its filesystems are frozen for the snapshots and thawed
    right after (RV(consistency) is C(filesystem-frozen)); otherwise the snapshot is
    C(crash-consistent), what a power cut would leave, and RV(why) says why. A VM that
    does not run gets C(at-rest) snapshots.
  - Connections and images are opened before the freeze, which lasts only as long as
    the snapshots themselves (RV(frozen_seconds)).
  - A snapshot of that name on every disk already is left alone; on some disks only,
    it is refused, before anything changes.
  - Retention removes the older snapshots named with O(prefix), beyond O(keep) and
    older than O(max_age); never the one just taken, and never a protected one.
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The VM, its libvirt domain's name, on the host O(uri) names (where it
      runs).
    type: str
    required: true
  images:
    description: The VM's disks, each C(pool/image).
    type: list
    elements: str
    required: true
  snapshot:
    description: The snapshot's name; by default O(prefix) and the time, in UTC, such
      as V(yasco-20261122T210000Z).
    type: str
  prefix:
    description: What this module's snapshots are named with, and the only ones
      retention removes.
    type: str
    default: yasco-
  quiesce:
    description:
      - V(auto) freezes the filesystems when the guest agent answers and takes a
        crash-consistent snapshot otherwise.
      - V(required) refuses, before anything changes, when it does not answer.
      - V(never) takes a crash-consistent snapshot without asking the guest.
    type: str
    choices: [auto, required, never]
    default: auto
  keep:
    description: How many of the VM's snapshots named with O(prefix) to keep on each
      disk, the new one included; by default, all.
    type: int
  max_age:
    description: Remove snapshots named with O(prefix) older than this, such as V(7d),
      V(12h) or seconds; by default none is too old.
    type: raw
attributes:
  check_mode:
    details: Says what would be taken and removed, and how consistent it would be.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
  - yasco.cluster.libvirt
seealso:
  - module: yasco.cluster.rbd_image
  - module: yasco.cluster.libvirt_domain
"""

EXAMPLES = r"""
- name: Snapshot db1's disks, frozen when its guest agent answers; keep a week of them
  yasco.cluster.vm_snapshot:
    uri: qemu+libssh://root@hv2/system
    name: db1
    images: [yasco/db1, yasco/db1-data]
    keep: 14
    max_age: 7d
  register: db1_snapshot

- name: Say how consistent it is
  ansible.builtin.debug:
    msg: "{{ db1_snapshot.snapshot }}: {{ db1_snapshot.consistency }} {{ db1_snapshot.why }}"
"""

RETURN = r"""
snapshot:
  description: The snapshot's name.
  returned: always
  type: str
  sample: yasco-20261122T210000Z
images:
  description: The disks snapshotted.
  returned: always
  type: list
  elements: str
consistency:
  description: C(filesystem-frozen), C(crash-consistent), C(at-rest), or C(existing)
    when the snapshot was there already.
  returned: always
  type: str
why:
  description: Why the filesystems were not frozen; empty when they were.
  returned: always
  type: str
  sample: the VM has no guest agent channel (spec.guest_agent)
frozen_filesystems:
  description: How many filesystems the guest agent froze.
  returned: always
  type: int
frozen_seconds:
  description: How long the guest was frozen.
  returned: always
  type: float
removed:
  description: The snapshots retention removed, each C(image) and C(snapshot).
  returned: always
  type: list
  elements: dict
kept_protected:
  description: Snapshots named with O(prefix) kept because they are protected (cloned).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_module import LIBVIRT
from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_snapshot import (
    SnapshotError, SnapshotRun)


def main(module_class=AnsibleModule) -> None:
    connection = CEPH + LIBVIRT
    module = connection.module(module_class, {
        "name": {"type": "str", "required": True},
        "images": {"type": "list", "elements": "str", "required": True},
        "snapshot": {"type": "str"},
        "prefix": {"type": "str", "default": "yasco-"},
        "quiesce": {"type": "str", "choices": ["auto", "required", "never"],
                    "default": "auto"},
        "keep": {"type": "int"},
        "max_age": {"type": "raw"},
    })
    connection.run(module, SnapshotRun, SnapshotError)


if __name__ == "__main__":
    main()
