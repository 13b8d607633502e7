# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read etcd keys, or every key under prefixes, into templates on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
name: etcd
short_description: Read keys from etcd
version_added: 0.1.0
description:
  - Returns the value of each key given, or with O(prefix) a dictionary of every key
    under each prefix given and its value.
  - Runs on the controller. Connection options come from the lookup's keywords, then
    from the variables (such as C(yasco_etcd_endpoints)), then from the environment
    (such as E(YASCO_ETCD_ENDPOINTS)).
  - When etcd cannot be reached or refuses, the lookup fails with a message naming the
    endpoints and what to check.
author:
  - YASCO developers (@yasco)
options:
  _terms:
    description: The keys to read; with O(prefix), the prefixes.
    type: list
    elements: str
    required: true
  prefix:
    description:
      - Read every key under each term, returning one dictionary per term (key to
        value, in key order).
    type: bool
    default: false
  default:
    description:
      - What a key that does not exist returns, instead of the empty string.
      - Not used with O(prefix); a prefix with no keys under it returns an empty
        dictionary.
    type: raw
    default: ""
  json:
    description:
      - Parse each value as JSON, as the cluster's records are. A value that is not
        JSON fails the lookup, naming the key. O(default) is returned as it is.
    type: bool
    default: false
  endpoints:
    vars:
      - name: yasco_etcd_endpoints
  ca_cert:
    vars:
      - name: yasco_etcd_ca_cert
  client_cert:
    vars:
      - name: yasco_etcd_client_cert
  client_key:
    vars:
      - name: yasco_etcd_client_key
  username:
    vars:
      - name: yasco_etcd_username
  password:
    vars:
      - name: yasco_etcd_password
  timeout:
    vars:
      - name: yasco_etcd_timeout
extends_documentation_fragment:
  - yasco.cluster.etcd
  - yasco.cluster.etcd.plugins
seealso:
  - module: yasco.cluster.etcd_key
  - plugin: yasco.cluster.etcd
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: Show where web1 runs (endpoints from yasco_etcd_endpoints)
  ansible.builtin.debug:
    msg: "{{ lookup('yasco.cluster.etcd', '/yasco/yasco/vms/web1', json=true).host }}"

- name: Fail unless hv1 is alive
  ansible.builtin.assert:
    that: lookup('yasco.cluster.etcd', '/yasco/yasco/hosts/hv1/alive', default=none) is not none

- name: Every VM record, parsed
  ansible.builtin.debug:
    msg: "{{ lookup('yasco.cluster.etcd', '/yasco/yasco/vms/', prefix=true, json=true) }}"

- name: Two keys at once, from an endpoint given here
  ansible.builtin.debug:
    msg: "{{ query('yasco.cluster.etcd', '/yasco/yasco/vdm/version', '/yasco/yasco/fences/hv3',
             endpoints=['https://10.0.0.1:2379'], ca_cert='/etc/yasco/etcd-ca.pem') }}"
"""

RETURN = r"""
_raw:
  description:
    - One item per term. Without O(prefix), the key's value (parsed with O(json)), or
      O(default) when the key does not exist.
    - With O(prefix), a dictionary of every key under the term and its value.
  type: list
  elements: raw
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    CONNECTION_OPTIONS, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)


class LookupModule(LookupBase):

    def run(self, terms: list[str], variables: dict[str, Any] | None = None,
            **kwargs: Any) -> list[Any]:
        self.set_options(var_options=variables, direct=kwargs)
        as_json = self.get_option("json")
        try:
            with connect({name: self.get_option(name) for name in CONNECTION_OPTIONS}) as etcd:
                if self.get_option("prefix"):
                    return [{kv.key: self._value(kv, as_json) for kv in etcd.get_prefix(term)}
                            for term in terms]
                default = self.get_option("default")
                found = [etcd.get(term) for term in terms]
                return [default if kv is None else self._value(kv, as_json) for kv in found]
        except EtcdError as err:
            raise AnsibleLookupError(f"yasco.cluster.etcd: {err}") from err

    @staticmethod
    def _value(kv: KeyValue, as_json: bool) -> Any:
        return kv.json() if as_json else kv.value
