#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an etcd lease: how long it has left and which keys are bound to it. The
connection belongs to module_utils/adapters/etcd.py, its errors to etcd_errors.py
beside it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_lease_info
short_description: Read how long an etcd lease has left and which keys are bound to it
version_added: 0.1.0
description:
  - Reads the seconds lease O(id) has left, the TTL it was granted with and the keys
    bound to it, which etcd deletes when it expires or is revoked. The lease may have
    been granted by M(yasco.cluster.etcd_lease) or by a host agent.
  - Changes nothing, and does not renew the lease.
  - A lease that does not exist (it expired, was revoked or was never granted) is no
    failure; RV(alive) is then false.
author:
  - YASCO developers (@yasco)
options:
  id:
    description: The lease's id.
    type: int
    required: true
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.etcd
seealso:
  - module: yasco.cluster.etcd_lease
  - module: yasco.cluster.etcd_key
"""

EXAMPLES = r"""
- name: See how long the lease has left and what is bound to it
  yasco.cluster.etcd_lease_info:
    endpoints: "{{ yasco_etcd_endpoints }}"
    id: "{{ lease.id }}"
  register: held

- name: Grant a new one when it is gone
  yasco.cluster.etcd_lease:
    endpoints: "{{ yasco_etcd_endpoints }}"
    ttl: 600
  when: not held.alive
"""

RETURN = r"""
id:
  description: The lease's id.
  returned: always
  type: int
  sample: 7587883712345678901
alive:
  description: Whether the lease exists (has not expired and was not revoked).
  returned: always
  type: bool
  sample: true
ttl:
  description: The seconds the lease has left.
  returned: when the lease exists
  type: int
  sample: 28
granted_ttl:
  description: The TTL the lease was granted with (possibly raised to etcd's minimum).
  returned: when the lease exists
  type: int
  sample: 30
keys:
  description: The keys bound to the lease, in key order.
  returned: when the lease exists
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

ARGUMENT_SPEC = module_argument_spec(id={"type": "int", "required": True})


def refusal(params: dict[str, Any]) -> str | None:
    """Why the options do not make sense, naming the option, or None."""
    if params["id"] <= 0:
        return f"id: must be a positive lease id, got {params['id']}"
    return None


def read(etcd: EtcdClient, params: dict[str, Any], _check_mode: bool) -> dict[str, Any]:
    """The lease as etcd holds it now; the same in check mode."""
    existing = etcd.lease_info(params["id"])
    if existing is None:
        return {"changed": False, "id": params["id"], "alive": False}
    return {"changed": False, "alive": True, **existing.as_dict(),
            "keys": sorted(existing.keys)}


def main(module_class=AnsibleModule) -> None:
    module = module_class(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, etcd_run(read, refusal), EtcdError, ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
