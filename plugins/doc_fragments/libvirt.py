# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection options every libvirt module shares (module_utils/adapters/libvirt.py)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  uri:
    description:
      - The libvirt connection URI of the hypervisor, for example
        C(qemu+libssh://root@hv1/system?keyfile=/root/.ssh/id_ed25519).
      - If not set, the environment variable E(YASCO_LIBVIRT_URI) is used.
      - Set it once for a play with C(module_defaults) and the C(yasco.cluster.libvirt)
        action group.
    type: str
    default: qemu:///system
  connect_timeout:
    description:
      - Seconds to wait for a remote URI's host to accept a connection before failing.
      - libvirt has no connect timeout of its own, and a connection to a dead host would
        otherwise hang for minutes.
    type: float
    default: 10
requirements:
  - libvirt-python
"""
