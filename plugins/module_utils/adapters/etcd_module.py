# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What etcd modules share: the connection options as an argument spec (documented by
the `yasco.cluster.etcd` doc fragment), and their work as a run class of
module_run.run_module, on one connection, an `EtcdError` becoming the task's failure.
The client itself is module_utils/adapters/etcd.py.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from ansible.module_utils.basic import env_fallback

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    DEFAULT_TIMEOUT, EtcdClient, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_gateway import (
    ETCD3GW_IMPORT_ERROR)

# The options every etcd module takes (doc fragment yasco.cluster.etcd), in the order
# of etcd.CONNECTION_OPTIONS, which the plugins read. No default for
# a fallback option: Ansible applies a default before it looks at the environment.
ETCD_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "endpoints": {"type": "list", "elements": "str", "required": True,
                  "fallback": (env_fallback, ["YASCO_ETCD_ENDPOINTS"])},
    "ca_cert": {"type": "path", "fallback": (env_fallback, ["YASCO_ETCD_CA_CERT"])},
    "client_cert": {"type": "path", "fallback": (env_fallback, ["YASCO_ETCD_CLIENT_CERT"])},
    "client_key": {"type": "path", "no_log": False,
                   "fallback": (env_fallback, ["YASCO_ETCD_CLIENT_KEY"])},
    "username": {"type": "str", "fallback": (env_fallback, ["YASCO_ETCD_USERNAME"])},
    "password": {"type": "str", "no_log": True,
                 "fallback": (env_fallback, ["YASCO_ETCD_PASSWORD"])},
    "timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
}
# What etcd modules need, for module_run.run_module.
ETCD_REQUIREMENTS: dict[str, str | None] = {"etcd3gw": ETCD3GW_IMPORT_ERROR}
# What a module does once connected: (client, params, check_mode) -> the task's result.
Task = Callable[[EtcdClient, "dict[str, Any]", bool], "dict[str, Any]"]


def module_argument_spec(**options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A module's argument spec: the connection options (a copy) and its own."""
    return {**copy.deepcopy(ETCD_ARGUMENT_SPEC), **options}


def etcd_run(task: Task, refusal: Callable[[dict[str, Any]], str | None] | None = None
             ) -> type:
    """`task` as the run class module_run.run_module takes, with ETCD_REQUIREMENTS and
    EtcdError: once `refusal(params)` names no problem with the options (its words
    fail the task otherwise), `task` runs on a client connected from them, closed
    after it, or on the one a batch's items share. etcd's client contacts nothing
    until its first request, so a batch's is made before its first item: options
    it refuses fail the task, as the single form's do, not that item."""

    class EtcdRun:
        session = staticmethod(connect)
        session_first = True

        def __init__(self, params: dict[str, Any], check_mode: bool,
                     session: EtcdClient | None = None) -> None:
            self.params, self.check_mode, self.session = params, check_mode, session

        def run(self) -> dict[str, Any]:
            problem = refusal(self.params) if refusal else None
            if problem:
                raise EtcdError(problem)
            if self.session is not None:
                return task(self.session, self.params, self.check_mode)
            with connect(self.params) as etcd:
                return task(etcd, self.params, self.check_mode)

    return EtcdRun
