# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the libvirt modules share, apart from the adapter (libvirt.py): the connection
as a module takes it (LIBVIRT, documented by the doc fragment yasco.cluster.libvirt),
and the options of a VM's `spec`, which render_domain_xml reads (documented by the doc
fragment yasco.cluster.domain_spec)."""

from __future__ import annotations

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import ON_CRASH
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import Connection

LIBVIRT = Connection(lv.LIBVIRT_ARGUMENT_SPEC, (lv.LibvirtAdapterError,),
                     {"libvirt-python": lv.LIBVIRT_IMPORT_ERROR})

# A VM's `spec`, with its disks and NICs, as libvirt.render_domain_xml reads it.
DISK_OPTIONS = {
    "rbd": {"type": "str"},
    "file": {"type": "str"},
    "device": {"type": "str", "choices": ["disk", "cdrom"], "default": "disk"},
    "format": {"type": "str", "default": "raw"},
    "monitors": {"type": "list", "elements": "str", "default": []},
    "auth_user": {"type": "str"},
    "secret_uuid": {"type": "str", "no_log": False},  # names a libvirt secret, holds none
    "target": {"type": "str"},
    "bus": {"type": "str"},
    "cache": {"type": "str", "default": "none"},
    "discard": {"type": "str", "choices": ["unmap", "ignore"]},
    "readonly": {"type": "bool", "default": False},
}
NIC_OPTIONS = {
    "network": {"type": "str"},
    "bridge": {"type": "str"},
    "mac": {"type": "str"},
    "model": {"type": "str", "default": "virtio"},
}
SPEC_OPTIONS = {
    "vcpus": {"type": "int", "required": True},
    "memory_mb": {"type": "int", "required": True},
    "domain_type": {"type": "str", "choices": ["kvm", "qemu"], "default": "kvm"},
    "machine": {"type": "str", "default": "pc"},
    "kernel": {"type": "str"},
    "initrd": {"type": "str"},
    "cmdline": {"type": "str"},
    "disks": {"type": "list", "elements": "dict", "default": [], "options": DISK_OPTIONS,
              "mutually_exclusive": [["rbd", "file"]], "required_one_of": [["rbd", "file"]],
              "required_together": [["auth_user", "secret_uuid"]]},
    "nics": {"type": "list", "elements": "dict", "default": [], "options": NIC_OPTIONS,
             "mutually_exclusive": [["network", "bridge"]],
             "required_one_of": [["network", "bridge"]]},
    "serial_log": {"type": "path"},
    "kind": {"type": "str", "choices": ["ha", "plain", "preemptible"]},
    "guest_agent": {"type": "bool", "default": False},
    "on_crash": {"type": "str", "choices": list(ON_CRASH), "default": ON_CRASH[0]},
    "watchdog": {"type": "bool", "default": False},
}
