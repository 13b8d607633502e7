#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: libvirt_domain
short_description: Define, start, stop, remove and migrate a libvirt domain
version_added: 0.1.0
description:
  - Brings one libvirt domain to the declared O(state), defined from a VM O(spec) or
    from raw O(xml).
  - Compares definitions by the settings it manages (size, boot, disks, NICs, serial),
    not by XML text, so a second run with the same input changes nothing; a real
    difference redefines the domain (keeping its UUID and generated MACs) and is shown
    as a diff. A running domain keeps running; the new definition applies at its next
    start and RV(pending_restart) says so.
  - With O(target_uri), moves the domain to that host first, live if it runs and
    O(state) is V(running) or V(present), offline otherwise; it ends up persistent on
    the target and undefined on the source. A rerun after the move changes nothing.
    A domain running on both hosts is refused and left alone.
  - Autostart is off unless asked for, since YASCO decides where VMs start.
author:
  - YASCO developers (@yasco)
options:
  name:
    description: The domain's name. One of O(name) and O(domains) is required.
    type: str
  domains:
    description:
      - Several domains in one task, with at least O(name) each (see the notes).
        Mutually exclusive with O(name).
    type: list
    elements: dict
    version_added: 0.1.0
  state:
    description:
      - V(present) defines the domain and leaves it as it is.
      - V(running) also starts it (or resumes it when paused).
      - V(shutdown) asks the guest to power off (ACPI) and waits up to O(timeout).
      - V(destroyed) powers it off at once. The domain stays defined in both cases.
      - V(absent) powers it off and undefines it. Its disks are left alone.
    type: str
    choices: [present, running, shutdown, destroyed, absent]
    default: present
  xml:
    description:
      - Raw domain XML, instead of O(spec). Its name must be O(name).
    type: str
  autostart:
    description: Whether libvirtd starts the domain when the host boots.
    type: bool
    default: false
  target_uri:
    description:
      - Move the domain to the hypervisor at this libvirt URI first.
      - Both O(uri) and O(target_uri) must be reachable from where the module runs,
        and the hypervisors from each other for a live migration.
    type: str
  timeout:
    description: Seconds to wait for a shutdown or a live migration before failing.
    type: float
    default: 120
  destroy_after_timeout:
    description:
      - With O(state=shutdown), power the domain off at once (as V(destroyed) does) when
        its guest is still running O(timeout) seconds after the ACPI request, instead of
        failing. RV(actions) then ends with C(destroy).
      - With O(domains) and O(parallel), a host's guests are asked to shut down at the
        same time, so the whole batch takes about O(timeout) at most.
    type: bool
    default: false
    version_added: 0.1.0
  migrate_tls:
    description:
      - Whether a live migration to O(target_uri) runs over QEMU's TLS, the guest's
        memory encrypted and both hypervisors checking each other's certificate
        (libvirt's C(VIR_MIGRATE_TLS)).
      - The hypervisors need C(migrate_tls_x509_cert_dir) in C(qemu.conf) (by default
        C(/etc/pki/qemu)), and should set C(migrate_tls_x509_verify = 1) and
        C(migrate_tls_force = 1); see C(docs/security.md).
      - Set V(false) only where the migration network is trusted. Without TLS, the
        target's QEMU listens on a TCP port that anyone who reaches it can feed a
        guest's memory.
    type: bool
    default: true
  migration:
    description:
      - How a live migration to O(target_uri) runs. Playbooks take it from the
        inventory's C(yasco_migration) (C(docs/ha.md), "Live migration").
      - Unset suboptions keep QEMU's own behaviour.
      - O(timeout) is the migration's completion timeout. A migration not done by then
        is cancelled and the domain keeps running on the source, never moved cold.
    type: dict
    version_added: 0.1.0
    suboptions:
      bandwidth:
        description: MiB/s the migration may use at most, in its post-copy phase too; V(0) for no limit.
        type: int
      max_downtime:
        description:
          - Milliseconds the guest may be paused for the switch-over at the end; QEMU
            waits until what is left to send fits in that pause. QEMU's default is 300.
        type: int
      auto_converge:
        description:
          - Throttle the guest's vCPUs, more and more, while its memory changes faster
            than it is sent, so that a busy guest's migration ends (QEMU's
            auto-converge). The guest runs slower until it does.
        type: bool
      compressed:
        description:
          - Resend only the changed bytes of pages sent already (XBZRLE), at the cost of
            CPU on both hosts; it helps on a slow migration network.
        type: bool
      post_copy_after:
        description:
          - Switch a migration still running after this many seconds to post-copy. The
            guest runs on the target at once and fetches the pages it still lacks from
            the source, so the migration always ends.
          - If either host or the network between them fails during post-copy, the
            guest's memory is lost and it must be started again (its disks are safe).
            Unset, the default, never switches.
          - Must be less than O(timeout); a migration in post-copy is not cancelled.
        type: float
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.libvirt
  - yasco.cluster.domain_spec
  - yasco.cluster.batch
  - yasco.cluster.batch.independent
notes:
  - Disks are not created or removed here; see M(yasco.cluster.rbd_image).
seealso:
  - module: yasco.cluster.rbd_image
"""

EXAMPLES = r"""
- name: Define and start a VM whose disk is an RBD image
  yasco.cluster.libvirt_domain:
    uri: qemu+libssh://root@hv1/system
    name: web1
    state: running
    spec:
      vcpus: 2
      memory_mb: 2048
      disks:
        - rbd: yasco/web1
          monitors: ["10.0.0.2:6789"]
          auth_user: hypervisor
          secret_uuid: 5b3f0a6e-7a1c-4e0b-9d53-1f2ad0c0ffee
      nics:
        - bridge: br0

- name: Live-migrate web1 from hv1 to hv2
  yasco.cluster.libvirt_domain:
    uri: qemu+libssh://root@hv1/system
    target_uri: qemu+libssh://root@hv2/system
    name: web1
    state: running

- name: Live-migrate a busy database over a shared link, cancelled after 10 minutes
  yasco.cluster.libvirt_domain:
    uri: qemu+libssh://root@hv1/system
    target_uri: qemu+libssh://root@hv2/system
    name: db1
    state: running
    timeout: 600
    migration:
      bandwidth: 400
      max_downtime: 500
      auto_converge: true
  register: db1_moved  # db1_moved.migration.downtime_ms: how long db1 was paused

- name: Start every VM of a host in one task
  yasco.cluster.libvirt_domain:
    uri: qemu+libssh://root@hv1/system
    state: running
    domains:
      - name: web1
        spec: {vcpus: 2, memory_mb: 2048, disks: [{rbd: yasco/web1}]}
      - name: web2
        spec: {vcpus: 1, memory_mb: 1024, disks: [{rbd: yasco/web2}]}
      - name: old1
        state: absent

- name: Set the URI once for a play
  hosts: localhost
  module_defaults:
    group/yasco.cluster.libvirt:
      uri: qemu+libssh://root@hv1/system
  tasks:
    - name: Power web1 off at once
      yasco.cluster.libvirt_domain:
        name: web1
        state: destroyed

    - name: Shut web1 down, powering it off if it ignores ACPI for a minute
      yasco.cluster.libvirt_domain:
        name: web1
        state: shutdown
        timeout: 60
        destroy_after_timeout: true

    - name: Remove web1, leaving its disk
      yasco.cluster.libvirt_domain:
        name: web1
        state: absent
"""

RETURN = r"""
results:
  description: With O(domains), each domain's RV(state), RV(uri), RV(xml), RV(actions)
    and RV(pending_restart), with its C(name) and C(changed), in the order given.
  returned: with O(domains)
  type: list
  elements: dict
  sample: [{name: web1, changed: true, actions: [define, start], state: running}]
state:
  description: The domain's state afterwards (predicted in check mode).
  returned: without O(domains)
  type: str
  sample: running
migration:
  description:
    - A live migration's figures, read on the target once it completed; empty when
      there was none.
    - After post-copy libvirt keeps none on the target; RV(migration.total_ms) is then
      the time the module measured, and the others are missing.
  returned: without O(domains)
  type: dict
  sample: {total_ms: 2310, downtime_ms: 41, memory_bytes: 137281536, iterations: 3,
           throttle_percent: 0, post_copy: false}
  contains:
    total_ms:
      description: The migration's time from start to end, in milliseconds.
      type: int
    downtime_ms:
      description: How long the guest was paused for the switch-over, in milliseconds.
      type: int
    memory_bytes:
      description: The guest memory sent.
      type: int
    iterations:
      description: QEMU's passes over the guest's memory.
      type: int
    throttle_percent:
      description:
        - With O(migration.auto_converge), the most auto-converge slowed the vCPUs down
          (sampled each second while the migration ran).
      type: int
    post_copy:
      description: Whether it switched to post-copy.
      type: bool
uri:
  description: The URI of the hypervisor the domain is on afterwards.
  returned: without O(domains)
  type: str
xml:
  description: The domain's XML afterwards; empty when it is gone.
  returned: without O(domains)
  type: str
actions:
  description: What was done (or would be, in check mode), in order.
  returned: without O(domains)
  type: list
  elements: str
  sample: [define, start]
pending_restart:
  description: Whether a running domain was redefined and needs a restart to apply it.
  returned: without O(domains)
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_module import (
    LIBVIRT, SPEC_OPTIONS)
from ansible_collections.yasco.cluster.plugins.module_utils.resources.libvirt_domain import (
    DomainRun)

# libvirt_migration.MigrationPolicy's fields; null leaves QEMU's own behaviour.
MIGRATION_OPTIONS = {
    "bandwidth": {"type": "int"},
    "max_downtime": {"type": "int"},
    "auto_converge": {"type": "bool"},
    "compressed": {"type": "bool"},
    "post_copy_after": {"type": "float"},
}


def main(module_class=AnsibleModule) -> None:
    module = LIBVIRT.module(module_class, {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "present",
                  "choices": ["present", "running", "shutdown", "destroyed", "absent"]},
        "spec": {"type": "dict", "options": SPEC_OPTIONS},
        "xml": {"type": "str"},
        "autostart": {"type": "bool", "default": False},
        "target_uri": {"type": "str"},
        "timeout": {"type": "float", "default": 120.0},
        "destroy_after_timeout": {"type": "bool", "default": False},
        "migrate_tls": {"type": "bool", "default": True},
        "migration": {"type": "dict", "options": MIGRATION_OPTIONS},
    }, batch="domains", independent=True, mutually_exclusive=[["spec", "xml"]])
    LIBVIRT.run(module, DomainRun)


if __name__ == "__main__":
    main()
