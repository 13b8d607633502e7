"""libvirt domain XML for a canary VM whose disk is an RBD image in the lab's pool, and
its removal."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from .layout import (CEPH_HYPERVISOR_CLIENT, CEPH_MON_PORT, CEPH_POOL, CEPH_SECRET_UUID,
                     ceph_address)


def canary_domain_xml(name: str, *, kernel: str, initrd: str, cmdline: str, virt_type: str,
                      rbd_image: str | None = None, memory_mb: int = 128,
                      vcpus: int = 1) -> str:
    """A direct-boot domain with one virtio disk on RBD and its serial console in a file.

    cache='none' makes every guest fsync reach the OSDs before it completes, which is
    both what live migration requires and what lets the storage side see every
    acknowledged write.
    """
    image = rbd_image or name
    console = f"/var/log/libvirt/qemu/{name}.console"
    return f"""<domain type={quoteattr(virt_type)}>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mb}</memory>
  <vcpu>{vcpus}</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='network' device='disk'>
      <driver name='qemu' type='raw' cache='none'/>
      <source protocol='rbd' name='{CEPH_POOL}/{image}'>
        <host name='{ceph_address()}' port='{CEPH_MON_PORT}'/>
      </source>
      <auth username='{CEPH_HYPERVISOR_CLIENT}'>
        <secret type='ceph' uuid='{CEPH_SECRET_UUID}'/>
      </auth>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'>
      <source path='{console}' append='on'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def remove_everywhere(conns, name: str) -> None:
    """Power off and undefine the domain `name` wherever one of the libvirt
    connections `conns` has it, then close them."""
    for conn in conns:
        for dom in conn.listAllDomains():
            if dom.name() == name:
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
        conn.close()
