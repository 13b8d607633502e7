#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: rbd_image
short_description: Create, grow, clone, snapshot, describe and remove RBD images
version_added: 0.1.0
description:
  - Brings one RBD image to the declared O(state).
  - V(present) creates it (blank of O(size), or cloned from O(clone_from)), grows it to
    O(size), switches its dynamic O(features), and keeps O(snapshot) as
    O(snapshot_state) says.
  - V(absent) removes it; an image in use or with snapshots is refused unless O(force).
  - Shrinking, and rolling back an image in use, also need O(force). A rollback is only
    done when the image differs from the snapshot, so a rerun changes nothing.
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The image. One of O(name) and O(images) is required.
    type: str
  images:
    description:
      - Several images in one task, with at least O(name) each (see the notes).
        Mutually exclusive with O(name).
    type: list
    elements: dict
    version_added: 0.1.0
  state:
    description: What to do.
    type: str
    choices: [present, absent]
    default: present
  size:
    description:
      - The size, in bytes or with a binary unit (V(512M), V(10G), V(1T)).
      - Required to create a blank image. An image is never shrunk unless O(force).
    type: raw
  features:
    description:
      - RBD features, for example V([layering, exclusive-lock, object-map, fast-diff]).
      - At creation, any; later only C(exclusive-lock), C(object-map), C(fast-diff) and
        C(journaling) can be switched. Default is the cluster's default features.
    type: list
    elements: str
  clone_from:
    description:
      - Create the image as a clone of this snapshot, C(pool/image@snapshot); the
        snapshot is protected if it is not.
    type: str
  snapshot:
    description: A snapshot of the image to keep as O(snapshot_state) says.
    type: str
  snapshot_state:
    description: V(present) creates it, V(absent) removes it, V(rollback) rolls the
      image back to it.
    type: str
    choices: [present, absent, rollback]
    default: present
  force:
    description: Allow what loses data; see the description.
    type: bool
    default: false
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.ceph
  - yasco.cluster.ceph.pool
  - yasco.cluster.batch
seealso:
  - module: yasco.cluster.rbd_image_info
  - module: yasco.cluster.ceph_fence
  - module: yasco.cluster.libvirt_domain
"""

EXAMPLES = r"""
- name: A 10 GiB disk for web1
  yasco.cluster.rbd_image:
    pool: yasco
    name: web1
    size: 10G

- name: A disk cloned from a base image's snapshot
  yasco.cluster.rbd_image:
    pool: yasco
    name: web2
    clone_from: yasco/debian-12@base

- name: Every VM disk of a host in one task, from one base image
  yasco.cluster.rbd_image:
    pool: yasco
    clone_from: yasco/debian-12@base
    images:
      - name: web3
      - name: web4
      - name: db1
        size: 40G

- name: Snapshot before an upgrade
  yasco.cluster.rbd_image:
    pool: yasco
    name: web1
    snapshot: before-upgrade
"""

RETURN = r"""
results:
  description: With O(images), each image's RV(image) and RV(actions), with its
    C(name) and C(changed), in the order given.
  returned: with O(images)
  type: list
  elements: dict
  sample: [{name: web3, changed: true, actions: [clone from yasco/debian-12@base],
            image: {}}]
image:
  description: The image afterwards (predicted in check mode); empty when removed.
  returned: without O(images)
  type: dict
  contains:
    size:
      description: Size in bytes.
      type: int
    features:
      description: Its features.
      type: list
      elements: str
    parent:
      description: C(pool/image@snapshot) it is cloned from, or null.
      type: str
    snapshots:
      description: Its snapshots, each with C(name), C(size) and C(protected).
      type: list
      elements: dict
    watchers:
      description: Clients other than this module that have it open, each with
        C(address) (fence these).
      type: list
      elements: dict
    locks:
      description: Lock holders, each with C(kind) (exclusive or advisory) and C(owner).
      type: list
      elements: dict
  sample: {pool: yasco, name: web1, size: 10737418240, features: [exclusive-lock, layering],
           parent: null, snapshots: [], watchers: [], locks: []}
actions:
  description: What was done (or would be, in check mode), in order.
  returned: without O(images)
  type: list
  elements: str
  sample: [create, snapshot before-upgrade]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph_module import CEPH
from ansible_collections.yasco.cluster.plugins.module_utils.resources.ceph_image import ImageRun


def main(module_class=AnsibleModule) -> None:
    module = CEPH.module(module_class, {
        "pool": {"type": "str", "required": True},
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        "size": {"type": "raw"},
        "features": {"type": "list", "elements": "str"},
        "clone_from": {"type": "str"},
        "snapshot": {"type": "str"},
        "snapshot_state": {"type": "str", "default": "present",
                           "choices": ["present", "absent", "rollback"]},
        "force": {"type": "bool", "default": False},
    }, batch="images")
    CEPH.run(module, ImageRun)


if __name__ == "__main__":
    main()
