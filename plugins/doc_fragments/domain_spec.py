# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM a libvirt domain is defined from: option `spec` of yasco.cluster.libvirt_domain,
whose argument spec is SPEC_OPTIONS in module_utils/adapters/libvirt_module.py and which
the adapter's render_domain_xml turns into the domain's XML. A schema of its own, kept
apart from the module's options for managing the domain (state, migration)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  spec:
    description:
      - The VM to define. Mutually exclusive with O(xml).
    type: dict
    suboptions:
      vcpus:
        description: Virtual CPUs.
        type: int
        required: true
      memory_mb:
        description: Memory in MiB.
        type: int
        required: true
      domain_type:
        description: V(kvm) for hardware virtualisation, V(qemu) for emulation (TCG).
        type: str
        choices: [kvm, qemu]
        default: kvm
      machine:
        description: The machine type.
        type: str
        default: pc
      kernel:
        description: A kernel to boot directly, a path on the hypervisor.
        type: str
      initrd:
        description: An initrd for O(spec.kernel).
        type: str
      cmdline:
        description: The kernel command line for O(spec.kernel).
        type: str
      disks:
        description: Disks, in order; the first is the boot disk.
        type: list
        elements: dict
        default: []
        suboptions:
          rbd:
            description: An RBD image as C(pool/image). Exactly one of O(spec.disks[].rbd)
              and O(spec.disks[].file).
            type: str
          file:
            description: A file on the hypervisor, for example a config drive.
            type: str
          device:
            description: The kind of device.
            type: str
            choices: [disk, cdrom]
            default: disk
          format:
            description: The file's format.
            type: str
            default: raw
          monitors:
            description: Ceph monitors as C(host:port), for RBD disks.
            type: list
            elements: str
            default: []
          auth_user:
            description: The cephx user (without C(client.)) for RBD disks.
            type: str
          secret_uuid:
            description: The libvirt secret holding that user's key.
            type: str
          target:
            description: The device name in the guest; by default C(vd), C(hd) or C(sd) (by
              bus) and a letter by position.
            type: str
          bus:
            description: The bus; V(virtio) for disks by default, and for CD-ROMs V(ide)
              (V(sata) on a q35 machine).
            type: str
          cache:
            description:
              - The cache mode. V(none) (the default) sends every guest flush to the
                storage, which live migration and fencing rely on.
            type: str
            default: none
          discard:
            description: Pass guest discards through (V(unmap)) or not (V(ignore)).
            type: str
            choices: [unmap, ignore]
          readonly:
            description: Attach read-only.
            type: bool
            default: false
      nics:
        description: Network interfaces.
        type: list
        elements: dict
        default: []
        suboptions:
          network:
            description: A libvirt network. Exactly one of O(spec.nics[].network) and
              O(spec.nics[].bridge).
            type: str
          bridge:
            description: A host bridge.
            type: str
          mac:
            description: The MAC address; libvirt generates one when not set.
            type: str
          model:
            description: The NIC model.
            type: str
            default: virtio
      serial_log:
        description:
          - Write the serial console to this file on the hypervisor (appending), instead
            of a pseudo-terminal.
        type: path
      guest_agent:
        description:
          - Give the guest a channel for the QEMU guest agent (C(qemu-guest-agent) in
            the guest), which lets YASCO freeze its filesystems for a consistent
            snapshot and see that its OS is up.
        type: bool
        default: false
        version_added: 0.1.0
      on_crash:
        description:
          - What happens when the guest's kernel panics.
          - V(restart) gives the guest a pvpanic device, through which its kernel
            (Linux's C(pvpanic) driver, loaded by any distribution kernel) reports a
            panic, and libvirt then resets the guest within the same QEMU process. It
            boots again on this host within seconds, its disks' locks kept, and the
            host agent records the crash in the cluster's history. A guest left to
            hang on a panic (Linux's default, C(panic=0)) would otherwise run on,
            silently dead.
          - V(destroy) powers the domain off, as libvirt's own default does; an HA VM
            is then restarted by the HA reconciler, through a playbook run. The
            pvpanic device is there either way.
        type: str
        choices: [restart, destroy]
        default: restart
        version_added: 0.1.0
      watchdog:
        description:
          - Give the guest an C(i6300esb) watchdog device with the action C(reset). A
            watchdog daemon in the guest (systemd's C(RuntimeWatchdogSec), or the
            C(watchdog) package) pets it; when the guest hangs and the daemon stops,
            QEMU resets the guest in place once the daemon's timeout has passed, and
            the host agent records it in the cluster's history. Without a daemon the
            device does nothing.
        type: bool
        default: false
        version_added: 0.1.0
      kind:
        description:
          - The VM's kind in YASCO, kept in the domain's metadata. The host agent
            destroys the V(ha) domains when it self-fences, reading the kind from
            libvirt because etcd is out of reach then.
        type: str
        choices: [ha, plain, preemptible]
        version_added: 0.1.0
"""
