# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection options every Ceph module shares (module_utils/adapters/ceph.py), and
`POOL` (fragment `yasco.cluster.ceph.pool`), the pool of the one image a module
manages."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  conf:
    description:
      - The Ceph configuration file, naming the monitors.
      - If not set, the environment variable E(YASCO_CEPH_CONF) is used.
      - Set the Ceph options once for a play with C(module_defaults) and the
        C(yasco.cluster.ceph) action group.
    type: path
    default: /etc/ceph/ceph.conf
  client:
    description:
      - The cephx client to connect as, without C(client.).
      - If not set, the environment variable E(YASCO_CEPH_CLIENT) is used.
    type: str
    default: admin
  keyring:
    description:
      - The keyring holding the client's key; by default the one the conf file names.
      - If not set, the environment variable E(YASCO_CEPH_KEYRING) is used.
    type: path
  ceph_timeout:
    description: Seconds to wait for the monitors and OSDs before failing.
    type: float
    default: 10
requirements:
  - the Ceph Python bindings C(rados) and C(rbd) (Debian packages python3-rados and
    python3-rbd)
"""

    POOL = r"""
options:
  pool:
    description: The pool.
    type: str
    required: true
"""
