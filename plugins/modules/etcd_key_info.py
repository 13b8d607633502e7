#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an etcd key, or every key under a prefix, changing nothing. The connection
belongs to module_utils/adapters/etcd.py, its errors to etcd_errors.py beside it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_key_info
short_description: Read a key, or every key under a prefix, from etcd
version_added: 0.1.0
description:
  - Reads an etcd key, or with O(prefix) every key under it, with the revisions a
    compare-and-swap of M(yasco.cluster.etcd_key) compares. Changes nothing.
  - A key that does not exist is no failure; RV(exists) says whether it does.
author:
  - YASCO developers (@yasco)
options:
  key:
    description:
      - The key, such as V(/yasco/yasco/vms/web1); with O(prefix), the prefix, such as
        V(/yasco/yasco/hosts/).
    type: str
    required: true
  prefix:
    description:
      - Read every key that starts with O(key), in key order, all at one revision.
    type: bool
    default: false
extends_documentation_fragment:
  - yasco.cluster.attributes.info_module
  - yasco.cluster.attributes
  - yasco.cluster.etcd
seealso:
  - module: yasco.cluster.etcd_key
  - plugin: yasco.cluster.etcd
    plugin_type: lookup
    description: Reads keys into templates and conditions on the controller.
"""

EXAMPLES = r"""
- name: Read where web1 runs
  yasco.cluster.etcd_key_info:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/vms/web1
  register: web1

- name: Move web1 to hv2, unless someone changed its record since it was read
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/vms/web1
    value: "{{ web1.value | from_json | combine({'host': 'hv2'}) }}"
    if_revision: "{{ web1.revision }}"
  when: web1.exists

- name: List the keys of every hypervisor
  yasco.cluster.etcd_key_info:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/hosts/
    prefix: true
  register: hosts

- name: Show them
  ansible.builtin.debug:
    msg: "{{ hosts.kvs | map(attribute='key') }}"
"""

RETURN = r"""
key:
  description: The key (or prefix) read.
  returned: always
  type: str
  sample: /yasco/yasco/vms/web1
exists:
  description: Whether the key exists.
  returned: without O(prefix)
  type: bool
  sample: true
value:
  description: The key's value.
  returned: when the key exists, without O(prefix)
  type: str
  sample: '{"host":"hv1","since":"2025-01-01T00:00:00+00:00","state":"running"}'
revision:
  description:
    - The key's C(mod_revision); give it as
      O(yasco.cluster.etcd_key#module:if_revision) to change the key only if nobody
      changed it since it was read.
  returned: when the key exists, without O(prefix)
  type: int
  sample: 42
kvs:
  description:
    - The keys read, in key order; without O(prefix), the key alone, or none when it
      does not exist.
  returned: always
  type: list
  elements: dict
  contains:
    key:
      description: The key.
      type: str
    value:
      description: Its value.
      type: str
    mod_revision:
      description: The revision of its last change.
      type: int
    create_revision:
      description: The revision it was created at.
      type: int
    version:
      description: How many times it was written since it was created.
      type: int
    lease:
      description: The lease it is bound to, or 0.
      type: int
  sample:
    - key: /yasco/yasco/vms/web1
      value: '{"host":"hv1","state":"running"}'
      mod_revision: 42
      create_revision: 17
      version: 3
      lease: 0
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
    key={"type": "str", "required": True, "no_log": False},
    prefix={"type": "bool", "default": False},
)


def refusal(params: dict[str, Any]) -> str | None:
    """Why these options do not make sense, naming the option, or None."""
    if not params["key"]:
        return "key: must not be empty"
    return None


def read(etcd: EtcdClient, params: dict[str, Any], _check_mode: bool) -> dict[str, Any]:
    """The key, or every key under the prefix; the same in check mode."""
    key = params["key"]
    if params["prefix"]:
        return {"changed": False, "key": key,
                "kvs": [kv.as_dict() for kv in etcd.get_prefix(key)]}
    current = etcd.get(key)
    if current is None:
        return {"changed": False, "key": key, "exists": False, "kvs": []}
    return {"changed": False, "key": key, "exists": True, "value": current.value,
            "revision": current.mod_revision, "kvs": [current.as_dict()]}


def main(module_class=AnsibleModule) -> None:
    module = module_class(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, etcd_run(read, refusal), EtcdError, ETCD_REQUIREMENTS,
               key=module.params["key"])


if __name__ == "__main__":
    main()
