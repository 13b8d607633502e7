#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Append events to the cluster's history in etcd. The history's layout belongs to
module_utils/cluster/cluster_events.py, the connection to module_utils/adapters/etcd.py."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_event
short_description: Append an event to the cluster's history in etcd
version_added: 0.1.0
description:
  - Appends an event (what happened, to which hypervisor and VM, by whom) to the
    cluster's append-only history, C(/yasco/<cluster>/history/), which
    M(yasco.cluster.cluster_status) shows and operators audit.
  - Events are numbered by the time they are written, so the history is in time order
    across writers; an event is never changed or deleted.
  - Appending is a change every time, so the playbooks of the collection append only
    when something they did changed the cluster.
author:
  - YASCO developers (@yasco)
options:
  cluster:
    description: The cluster's name (C(yasco_cluster_name)).
    type: str
    default: yasco
  kind:
    description:
      - What happened, such as V(provisioned), V(started), V(migrated), V(removed),
        V(fenced), V(evacuated) or V(note).
      - Required, for the task or for each of O(events).
    type: str
  host:
    description: The hypervisor it happened on.
    type: str
  vm:
    description: The VM it happened to.
    type: str
  by:
    description: Who or what did it, such as a playbook's name.
    type: str
  details:
    description: Anything else worth keeping, as a mapping.
    type: dict
  events:
    description:
      - Several events in one task, with at least O(kind) each or for the task (see
        the notes).
    type: list
    elements: dict
attributes:
  check_mode:
    details:
      - Reports the event it would append, and appends nothing.
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.etcd
  - yasco.cluster.batch
seealso:
  - module: yasco.cluster.cluster_status
"""

EXAMPLES = r"""
- name: Note a disk replacement in the history
  yasco.cluster.cluster_event:
    endpoints: "{{ yasco_etcd_endpoints }}"
    cluster: "{{ yasco_cluster_name }}"
    kind: note
    host: hv2
    by: ops
    details: {text: replaced the boot disk}

- name: Record the VMs a run started
  yasco.cluster.cluster_event:
    endpoints: "{{ yasco_etcd_endpoints }}"
    kind: started
    host: hv1
    by: provision.yml
    events:
      - vm: web1
      - vm: web2
"""

RETURN = r"""
key:
  description: The event's key.
  returned: without O(events), when not in check mode
  type: str
  sample: /yasco/yasco/history/01795012345678901234
event:
  description: The event as written (or as it would be, in check mode).
  returned: without O(events)
  type: dict
  sample: {at: "2026-11-22T02:50:00.000+00:00", kind: started, host: hv1, vm: web1,
           by: provision.yml}
results:
  description: With O(events), each event's RV(key) and RV(event), with its C(kind)
    and C(changed), in the order given.
  returned: with O(events)
  type: list
  elements: dict
"""

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, etcd_run, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import (
    BatchModule, run_module)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

ARGUMENT_SPEC = module_argument_spec(
    cluster={"type": "str", "default": "yasco"},
    kind={"type": "str", "required": True},
    host={"type": "str"},
    vm={"type": "str"},
    by={"type": "str"},
    details={"type": "dict"},
)


def append(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    record = cluster_events.event(params["kind"], host=params["host"], vm=params["vm"],
                                  by=params["by"], details=params["details"])
    result: dict[str, Any] = {"changed": True, "event": record,
                              "diff": {"before": "", "after": json.dumps(record) + "\n"}}
    if not check_mode:
        result["key"] = cluster_events.append(etcd, record, cluster=params["cluster"])
    return result


def main(module_class=AnsibleModule) -> None:
    run_module(BatchModule(ARGUMENT_SPEC, option="events", key="kind", shared_key=True,
                           module_class=module_class), etcd_run(append), EtcdError,
               ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
