# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Ceph modules' shared connection options (doc fragment yasco.cluster.ceph),
apart from the adapter (ceph.py), which the host agent uses without Ansible."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import env_fallback

CEPH_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "conf": {"type": "path", "default": "/etc/ceph/ceph.conf",
             "fallback": (env_fallback, ["YASCO_CEPH_CONF"])},
    "client": {"type": "str", "default": "admin",
               "fallback": (env_fallback, ["YASCO_CEPH_CLIENT"])},
    "keyring": {"type": "path", "fallback": (env_fallback, ["YASCO_CEPH_KEYRING"])},
    "ceph_timeout": {"type": "float", "default": 10.0},
}
