#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Grant or revoke an etcd lease. Reading one is etcd_lease_info's; the connection
belongs to module_utils/adapters/etcd.py, its errors to etcd_errors.py beside it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_lease
short_description: Grant or revoke an etcd lease
version_added: 0.1.0
description:
  - A lease is etcd's timer for keys. Every key bound to it (with
    O(yasco.cluster.etcd_key#module:lease)) is deleted when it expires or is revoked.
    The cluster's liveness keys are bound to the host agents' leases.
  - O(state=present) grants a lease of O(ttl) seconds. With O(id), it makes sure the
    lease O(id) exists, granting it under that id only when it does not.
  - O(state=absent) revokes lease O(id), deleting its keys now.
  - M(yasco.cluster.etcd_lease_info) reads how long a lease has left and which keys are
    bound to it.
  - Leases are not renewed by this module; whatever owns a lease keeps it alive.
author:
  - YASCO developers (@yasco)
options:
  state:
    description: Whether the lease should exist.
    type: str
    choices: [present, absent]
    default: present
  id:
    description:
      - The lease's id. Required with O(state=absent).
      - With O(state=present), the id to grant the lease under. Without it, every run
        grants a new lease with an id etcd picks.
    type: int
  ttl:
    description:
      - The lease's time to live in seconds, when it is granted. Required with
        O(state=present).
      - etcd raises a TTL below its minimum (about 1.5 election timeouts) to that
        minimum.
      - A lease that exists keeps the TTL it was granted with.
    type: int
attributes:
  check_mode:
    details:
      - A grant in check mode without O(id) returns no RV(id), since etcd picks it.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.etcd
seealso:
  - module: yasco.cluster.etcd_lease_info
  - module: yasco.cluster.etcd_key
"""

EXAMPLES = r"""
- name: Grant a lease of 30 s
  yasco.cluster.etcd_lease:
    endpoints: "{{ yasco_etcd_endpoints }}"
    ttl: 30
  register: lease

- name: Bind a key to it
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/hosts/hv1/maintenance
    value: '{"by": "operator"}'
    lease: "{{ lease.id }}"

- name: Revoke it, deleting the key now
  yasco.cluster.etcd_lease:
    endpoints: "{{ yasco_etcd_endpoints }}"
    id: "{{ lease.id }}"
    state: absent
"""

RETURN = r"""
id:
  description: The lease's id.
  returned: always, except a check-mode grant without O(id)
  type: int
  sample: 7587883712345678901
alive:
  description: Whether the lease is alive once the task is done, neither expired nor
    revoked.
  returned: always
  type: bool
ttl:
  description: The seconds the lease has left.
  returned: when the lease exists after the task, except a check-mode grant
  type: int
  sample: 28
granted_ttl:
  description: The TTL the lease was granted with (possibly raised to etcd's minimum).
  returned: when the lease exists after the task, except a check-mode grant
  type: int
  sample: 30
keys:
  description: The keys bound to the lease when it was revoked (in check mode, now).
  returned: O(state=absent), when the lease existed
  type: list
  elements: str
  sample: [/yasco/yasco/hosts/hv1/maintenance]
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, etcd_run, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import run_module

ARGUMENT_SPEC = module_argument_spec(
    state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    id={"type": "int"},
    ttl={"type": "int"},
)


def refusal(params: dict[str, Any]) -> str | None:
    """Why these options do not make sense together, naming the option, or None."""
    if params["state"] != "present" and params["ttl"] is not None:
        return f"ttl: applies to state=present only, not state={params['state']}"
    if params["ttl"] is not None and params["ttl"] <= 0:
        return f"ttl: must be a positive number of seconds, got {params['ttl']}"
    if params["id"] is not None and params["id"] <= 0:
        return f"id: must be a positive lease id, got {params['id']}"
    return None


def present(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    lease_id, ttl = params["id"], params["ttl"]
    if lease_id:
        existing = etcd.lease_info(lease_id, keys=False)
        if existing is not None:
            return {"changed": False, "id": lease_id, "alive": True, "ttl": existing.ttl,
                    "granted_ttl": existing.granted_ttl}
    if check_mode:
        return {"changed": True, "alive": True, **({"id": lease_id} if lease_id else {})}
    granted = etcd.grant_lease(ttl, lease_id or 0)
    return {"changed": True, "id": granted.id, "alive": True, "ttl": granted.ttl,
            "granted_ttl": granted.granted_ttl}


def absent(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    lease_id = params["id"]
    existing = etcd.lease_info(lease_id)
    if existing is None:
        return {"changed": False, "id": lease_id, "alive": False}
    result = {"changed": True, "id": lease_id, "alive": False, "keys": list(existing.keys)}
    if not check_mode:
        # It may have expired since it was read: then it is gone, but not by this task.
        result["changed"] = etcd.revoke_lease(lease_id)
    return result


STATES = {"present": present, "absent": absent}


def main(module_class=AnsibleModule) -> None:
    module = module_class(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                          required_if=[("state", "present", ("ttl",)),
                                       ("state", "absent", ("id",))])
    run_module(module, etcd_run(STATES[module.params["state"]], refusal), EtcdError,
               ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
