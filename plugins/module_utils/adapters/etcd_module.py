# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What etcd modules share: the connection options as an argument spec (documented by
the `yasco.cluster.etcd` doc fragment), and running a task on one connection, an
`EtcdError` becoming the task's failure. The client itself is module_utils/adapters/etcd.py.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    DEFAULT_TIMEOUT, EtcdClient, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_gateway import (
    ETCD3GW_IMPORT_ERROR)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import (
    BatchModule, check_requirements)

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
# What a module does once connected: (client, params, check_mode) -> the task's result.
Task = Callable[[EtcdClient, "dict[str, Any]", bool], "dict[str, Any]"]


def module_argument_spec(**options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A module's argument spec: the connection options (a copy) and its own."""
    return {**copy.deepcopy(ETCD_ARGUMENT_SPEC), **options}


def run_module(module: AnsibleModule, task: Task, *,
               refusal: Callable[[dict[str, Any]], str | None] | None = None,
               **context: Any) -> None:
    """Run a module: fail when etcd3gw is missing or `refusal(params)` names a problem
    with the options, else connect, run `task` and exit with its result (without its
    `diff` unless --diff). An EtcdError fails the task with its message and details.
    `context` goes into a failure's result."""
    if ETCD3GW_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("etcd3gw"), exception=ETCD3GW_IMPORT_ERROR,
                         **context)
    params = module.params
    problem = refusal(params) if refusal else None
    if problem:
        module.fail_json(msg=problem, **context)
    try:
        with connect(params) as etcd:
            result = task(etcd, params, module.check_mode)
    except EtcdError as err:
        module.fail_json(msg=str(err), **context, **err.details)
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


def run_batch_module(batch: BatchModule, task: Task,
                     items: list[dict[str, Any]] | None = None) -> None:
    """Run `task` for each item of a BatchModule (its `items()`, unless given), all
    on one connection, and exit with the batch's result."""
    module = batch.module
    check_requirements(module, {"etcd3gw": ETCD3GW_IMPORT_ERROR})
    items = batch.items() if items is None else items
    try:
        with connect(module.params) as etcd:
            batch.run(lambda item: task(etcd, item, module.check_mode), EtcdError, items)
    except EtcdError as err:  # connecting
        module.fail_json(msg=str(err), **err.details)
