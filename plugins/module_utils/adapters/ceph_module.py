# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the Ceph modules share, apart from the adapter (ceph.py), which the host agent
uses without Ansible: the connection options (doc fragment yasco.cluster.ceph), the
connection as a module takes it (CEPH), and the beginning of a run on it (CephRun)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import env_fallback

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import Connection

CEPH_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "conf": {"type": "path", "default": "/etc/ceph/ceph.conf",
             "fallback": (env_fallback, ["YASCO_CEPH_CONF"])},
    "client": {"type": "str", "default": "admin",
               "fallback": (env_fallback, ["YASCO_CEPH_CLIENT"])},
    "keyring": {"type": "path", "fallback": (env_fallback, ["YASCO_CEPH_KEYRING"])},
    "ceph_timeout": {"type": "float", "default": 10.0},
}

CEPH = Connection(CEPH_ARGUMENT_SPEC, (ceph.CephError,),
                  {ceph.CEPH_REQUIREMENT: ceph.CEPH_IMPORT_ERROR})


class CephRun:
    """A module run on a Ceph connection: its own, or the one the items of a batch
    that a worker runs share (module_run.run_module opens it with `session`)."""

    session = staticmethod(ceph.connect)

    def __init__(self, params: dict[str, Any], check_mode: bool,
                 session: ceph.Cluster | None = None) -> None:
        self.params = params
        self.check_mode = check_mode
        self.session = session

    def connected(self):
        """The batch's connection, left open for the next item, or a new one."""
        return ceph.connected(self.params, self.session)
