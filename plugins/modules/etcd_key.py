#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write or delete an etcd key (or every key under a prefix), optionally by
compare-and-swap. Reading is etcd_key_info's; the connection belongs to
module_utils/adapters/etcd.py, its errors to etcd_errors.py beside it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_key
short_description: Write or delete a key in etcd, optionally by compare-and-swap
version_added: 0.1.0
description:
  - Makes an etcd key hold a value (O(state=present)), or removes it or every key under
    a prefix (O(state=absent)).
  - M(yasco.cluster.etcd_key_info) reads keys.
  - With O(if_revision) or O(if_value), the write or delete happens only if the key is
    still as the caller last saw it, checked atomically by etcd. When it is not, the
    task fails, changes nothing, and says what it expected and what it found.
author:
  - YASCO developers (@yasco)
options:
  key:
    description:
      - The key, such as V(/yasco/yasco/vms/web1); with O(prefix), the prefix.
      - One of O(key) and O(keys) is required.
    type: str
  keys:
    description:
      - Several keys in one task, with at least O(key) each (see the notes).
        Mutually exclusive with O(key).
      - Each key is written or deleted, and its condition compared, on its own, in
        order; the first that fails stops the task.
    type: list
    elements: dict
    version_added: 0.1.0
  value:
    description:
      - The value the key should hold. Required with O(state=present), refused
        otherwise.
      - A string is written as it is. Anything else (a dictionary, a list, a number, a
        boolean) is written as compact JSON with sorted keys, as the cluster's records
        are, so that the same data is always the same text.
    type: raw
  state:
    description:
      - V(present) makes the key hold O(value) (bound to O(lease), or to no lease).
      - V(absent) deletes the key, or with O(prefix) every key under it.
    type: str
    choices: [present, absent]
    default: present
  prefix:
    description:
      - Treat O(key) as a prefix. Only with O(state=absent), and not with
        O(if_revision) or O(if_value).
    type: bool
    default: false
  lease:
    description:
      - The id of a lease (from M(yasco.cluster.etcd_lease)) to bind the key to; the
        key is deleted when the lease expires or is revoked.
      - Omitted or V(0), the key is bound to no lease; a key that was bound to one is
        rewritten unbound. Only with O(state=present).
    type: int
  if_revision:
    description:
      - Write or delete only if the key's C(mod_revision) is this; V(0) means only if
        the key does not exist.
      - Take it from the RV(yasco.cluster.etcd_key_info#module:revision) of an
        earlier M(yasco.cluster.etcd_key_info) task, or the RV(revision) of an earlier
        write.
    type: int
  if_value:
    description:
      - Write or delete only if the key's value is this (so not if the key is absent).
      - Like O(value), anything but a string is compared as compact JSON.
    type: raw
  if_unchanged:
    description:
      - Write only while each of these other keys has the C(mod_revision) given
        (V(0) means only while that key does not exist), in the same transaction
        as the write. So another writer's key that says it acts on the same thing
        (an agent's restart in place) excludes this write, and the other way round.
      - A mapping of key to C(mod_revision). Only with O(state=present).
    type: dict
attributes:
  check_mode:
    details:
      - O(if_revision), O(if_value) and O(if_unchanged) are checked against the keys
        as they are now; etcd checks them again, atomically, when the task runs for
        real.
  diff_mode:
    details:
      - The value before and after; with O(prefix), every key deleted and its value.
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.etcd
  - yasco.cluster.batch
notes:
  - When the key already holds O(value) bound to O(lease), nothing changes and
    O(if_revision) and O(if_value) are not checked, so that running the task again
    after it succeeded does not fail.
seealso:
  - module: yasco.cluster.etcd_key_info
  - module: yasco.cluster.etcd_lease
  - plugin: yasco.cluster.etcd
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: Put a hypervisor into maintenance (the record is written as JSON)
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/hosts/hv1/maintenance
    value:
      by: operator
      reason: firmware

- name: Read where web1 runs
  yasco.cluster.etcd_key_info:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/vms/web1
  register: web1

- name: Move web1 to hv2, unless someone moved it since it was read
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/vms/web1
    value:
      host: hv2
      state: running
      since: "{{ now(utc=true).isoformat() }}"
    if_revision: "{{ web1.revision }}"

- name: Record a fence only if there is none yet
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/yasco/fences/hv3
    value: {by: hv1, method: ipmi}
    if_revision: 0

- name: Forget every key of a test cluster
  yasco.cluster.etcd_key:
    endpoints: "{{ yasco_etcd_endpoints }}"
    key: /yasco/test/
    prefix: true
    state: absent
"""

RETURN = r"""
results:
  description: With O(keys), each key's result (RV(key), RV(value), RV(revision),
    RV(deleted) as for one key) and C(changed), in the order given.
  returned: with O(keys)
  type: list
  elements: dict
  sample: [{key: /yasco/yasco/vms/web1, changed: true, revision: 42}]
key:
  description: The key (or prefix) of the task.
  returned: without O(keys)
  type: str
  sample: /yasco/yasco/vms/web1
value:
  description: The key's value after the task (in check mode, the value it would hold).
  returned: when the key exists after the task, without O(prefix)
  type: str
  sample: '{"host":"hv2","since":"2025-01-01T00:00:00+00:00","state":"running"}'
revision:
  description:
    - The key's C(mod_revision) after the task; give it as O(if_revision) to change
      the key only if nobody else changed it since.
    - In check mode, the current one.
  returned: when the key exists after the task, without O(prefix)
  type: int
  sample: 42
deleted:
  description: How many keys were (in check mode, would be) deleted.
  returned: O(state=absent)
  type: int
  sample: 1
expected_revision:
  description: The O(if_revision) a failed compare-and-swap expected.
  returned: when a compare-and-swap on O(if_revision) fails
  type: int
actual_revision:
  description: The key's C(mod_revision) when a compare-and-swap failed (0 when absent).
  returned: when a compare-and-swap fails
  type: int
other_key:
  description: The key of O(if_unchanged) that had changed when a compare-and-swap failed.
  returned: when a compare-and-swap on O(if_unchanged) fails
  type: str
expected_value:
  description: The O(if_value) a failed compare-and-swap expected.
  returned: when a compare-and-swap on O(if_value) fails
  type: str
actual_value:
  description: The key's value when a compare-and-swap failed (null when absent).
  returned: when a compare-and-swap fails
  type: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, etcd_run, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import (
    BatchModule, run_module)

ARGUMENT_SPEC = module_argument_spec(
    key={"type": "str", "required": True, "no_log": False},
    value={"type": "raw"},
    state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    prefix={"type": "bool", "default": False},
    lease={"type": "int"},
    if_revision={"type": "int"},
    if_value={"type": "raw"},
    if_unchanged={"type": "dict"},
)


class SwapLost(EtcdError):
    """The key is not as the task's condition expects; `details` go into the result."""


def as_text(value: Any) -> str | None:
    """What etcd stores for `value`: a string as it is, other data as canonical JSON."""
    if value is None or isinstance(value, str):
        return value
    return to_json(value)


def _short(value: str | None) -> str:
    if value is None:
        return "no key"
    return repr(value if len(value) <= 120 else value[:117] + "...")


def refusal(params: dict[str, Any]) -> str | None:
    """Why these options do not make sense together, naming the option, or None."""
    state = params["state"]
    conditions = [name for name in ("if_revision", "if_value") if params[name] is not None]
    if not params["key"]:
        return "key: must not be empty"
    if state != "present" and params["value"] is not None:
        return f"value: applies to state=present only, not state={state}"
    if state != "present" and params["lease"]:
        return f"lease: applies to state=present only, not state={state}"
    if state == "present" and params["prefix"]:
        return "prefix: applies to state=absent only; state=present writes one key"
    if params["prefix"] and conditions:
        return f"{conditions[0]}: compares one key, so it cannot be used with prefix=true"
    if params["if_revision"] is not None and params["if_revision"] < 0:
        return f"if_revision: must be 0 (key absent) or a revision, got {params['if_revision']}"
    if params["lease"] is not None and params["lease"] < 0:
        return f"lease: must be a lease id, got {params['lease']}"
    unchanged = params.get("if_unchanged")
    if unchanged is not None and state != "present":
        return f"if_unchanged: applies to state=present only, not state={state}"
    for other, revision in (unchanged or {}).items():
        if isinstance(revision, bool) or not str(revision).isdigit():
            return (f"if_unchanged: {other}: must be 0 (key absent) or a mod_revision, "
                    f"got {revision!r}")
    return None


def check_unchanged(etcd: EtcdClient, unchanged: dict[str, int]) -> None:
    """Raise SwapLost when one of the other keys `unchanged` names has changed."""
    for other, revision in sorted(unchanged.items()):
        found = etcd.get(other)
        actual = found.mod_revision if found else 0
        if actual != revision:
            expected = "no key" if revision == 0 else f"mod_revision {revision}"
            raise SwapLost(f"{other}: changed since it was read (expected {expected}, found "
                           f"{'mod_revision ' + str(actual) if found else 'no key'}): "
                           "another writer acted; read it again and retry",
                           {"other_key": other, "expected_revision": revision,
                            "actual_revision": actual})


def check_condition(key: str, current: KeyValue | None, if_revision: int | None,
                    if_value: str | None) -> None:
    """Raise SwapLost when `current` is not what the task's conditions expect."""
    actual_revision = current.mod_revision if current else 0
    actual_value = current.value if current else None
    details: dict[str, Any] = {"actual_revision": actual_revision, "actual_value": actual_value}
    found = (f"found mod_revision {actual_revision}, value {_short(actual_value)}"
             if current else "found no key")
    if if_revision is not None and if_revision != actual_revision:
        expected = ("expected no key" if if_revision == 0
                    else f"expected mod_revision {if_revision}")
        raise SwapLost(f"{key}: compare-and-swap failed: {expected}, {found}: it changed "
                       f"since it was read; read it again and retry",
                       {**details, "expected_revision": if_revision})
    if if_value is not None and if_value != actual_value:
        raise SwapLost(f"{key}: compare-and-swap failed: expected value {_short(if_value)}, "
                       f"{found}: it changed since it was read; read it again and retry",
                       {**details, "expected_value": if_value})


def lost(key: str, current: KeyValue | None, if_revision: int | None,
         if_value: str | None) -> None:
    """Raise SwapLost for a transaction etcd refused: its comparison is the one
    check_condition makes, on the key as the transaction found it."""
    check_condition(key, current, if_revision, if_value)
    raise SwapLost(f"{key}: compare-and-swap failed; read it again and retry",
                   {"actual_revision": current.mod_revision if current else 0,
                    "actual_value": current.value if current else None})


def present(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    key, value, lease = params["key"], params["value"], params["lease"] or 0
    current = etcd.get(key)
    if current is not None and current.value == value and current.lease == lease:
        return {"changed": False, "key": key, "value": value, "revision": current.mod_revision}
    if_revision, if_value = params["if_revision"], params["if_value"]
    unchanged = {k: int(v) for k, v in (params.get("if_unchanged") or {}).items()}
    check_condition(key, current, if_revision, if_value)
    check_unchanged(etcd, unchanged)
    result = {"changed": True, "key": key, "value": value,
              "diff": {"before_header": key, "after_header": key,
                       "before": current.value + "\n" if current else "",
                       "after": value + "\n"}}
    if check_mode:
        if lease and etcd.lease_info(lease, keys=False) is None:
            raise EtcdError(f"lease: {lease} does not exist (it expired or was revoked): "
                            f"grant a new lease")
        if current is not None:
            result["revision"] = current.mod_revision
        return result
    if if_revision is None and if_value is None and not unchanged:
        result["revision"] = etcd.put(key, value, lease=lease)
        return result
    swap = etcd.put_if(key, value, mod_revision=if_revision, value_equals=if_value,
                       lease=lease, unchanged=unchanged)
    if not swap.succeeded:  # changed between the read above and the transaction
        check_condition(key, swap.current, if_revision, if_value)
        check_unchanged(etcd, unchanged)
        lost(key, swap.current, if_revision, if_value)
    result["revision"] = swap.revision
    return result


def absent(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    key = params["key"]
    if params["prefix"]:
        doomed = etcd.get_prefix(key)
        if not doomed:
            return {"changed": False, "key": key, "deleted": 0}
        listing = "".join(f"{kv.key}: {kv.value}\n" for kv in doomed)
        result = {"changed": True, "key": key, "deleted": len(doomed),
                  "diff": {"before_header": f"{key} (prefix)", "after_header": f"{key} (prefix)",
                           "before": listing, "after": ""}}
        if not check_mode:
            result["deleted"] = etcd.delete_prefix(key)
            result["changed"] = result["deleted"] > 0
        return result
    current = etcd.get(key)
    if current is None:
        return {"changed": False, "key": key, "deleted": 0}
    if_revision, if_value = params["if_revision"], params["if_value"]
    check_condition(key, current, if_revision, if_value)
    result = {"changed": True, "key": key, "deleted": 1,
              "diff": {"before_header": key, "after_header": key,
                       "before": current.value + "\n", "after": ""}}
    if check_mode:
        return result
    if if_revision is None and if_value is None:
        result["deleted"] = etcd.delete(key)
    else:
        swap = etcd.delete_if(key, mod_revision=if_revision, value_equals=if_value)
        if not swap.succeeded:
            lost(key, swap.current, if_revision, if_value)
    result["changed"] = result["deleted"] > 0
    return result


STATES = {"present": present, "absent": absent}


def main(module_class=AnsibleModule) -> None:
    batch = BatchModule(ARGUMENT_SPEC, option="keys", key="key",
                        required_if=[("state", "present", ("value",))],
                        module_class=module_class)
    items = [dict(item, value=as_text(item["value"]), if_value=as_text(item["if_value"]))
             for item in batch.items()]
    for item in items:  # every item's options are checked before anything is written
        problem = refusal(item)
        if problem:
            batch.module.fail_json(msg=f"{item['key']}: {problem}" if batch.batch else problem,
                                   key=item["key"])
    run_module(batch, etcd_run(lambda etcd, item, check_mode:
                               STATES[item["state"]](etcd, item, check_mode)),
               EtcdError, ETCD_REQUIREMENTS, items=items)


if __name__ == "__main__":
    main()
