#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: cluster_report
short_description: Draw the cluster's capacity, a failure and the latest incident
version_added: 0.1.0
description:
  - Writes C(report.html), a self-contained page, and C(report.png), its pictures in
    one image, into O(dest).
  - The capacity picture shows every hypervisor as boxes of memory and vCPUs, filled
    with its home VMs by kind (HA, plain, preemptible), the spare it keeps for failover
    (the VDM's C(reserve)), in which preemptible VMs run, and what is free.
  - The failure picture shows what the failure of the hosts O(failed) does, as the
    evacuation reads the VDM - where each HA VM starts, which preemptible VMs stop to
    make room, which VMs stay down.
  - The timeline shows the latest incident in O(events) - the last host failure and
    what followed, until the return home that brought every failed host back, or
    until the last event - one row per hypervisor and VM, in seconds since the
    failure. Without a failure in O(events), the page says so and draws no timeline.
  - The files are rewritten only when their content changes, the page's time of
    writing aside; the same inputs give the same pictures, byte for byte.
author:
  - YASCO developers (@yasco)
options:
  vdm:
    description: The VDM (C(yasco_vdm)).
    type: dict
    required: true
  events:
    description:
      - The cluster's history, oldest first, as M(yasco.cluster.cluster_status)
        returns it in RV(yasco.cluster.cluster_status#module:events), each with C(at),
        C(kind) and, when known, C(key), C(host), C(vm) and C(by).
      - Events without a readable C(at) are left out.
    type: list
    elements: dict
    default: []
  failed:
    description:
      - The failure set to show, hypervisor names (a list, or names separated by
        commas).
      - By default the first planned failure of one hypervisor that moves a VM.
      - A set the VDM does not plan is shown as the evacuation would handle it - a
        best effort.
    type: list
    elements: str
  cluster:
    description: The cluster's name, for the page's header.
    type: str
    default: yasco
  dest:
    description: The directory to write into; created when missing.
    type: path
    required: true
attributes:
  check_mode:
    details: Says whether the files would change, and writes nothing.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
requirements:
  - matplotlib
  - numpy
notes:
  - The playbook C(playbooks/report.yml) reads the history from etcd and runs this.
  - The report, in C(docs/report.md) of the collection.
seealso:
  - module: yasco.cluster.cluster_status
"""

EXAMPLES = r"""
- name: Read the cluster's history
  yasco.cluster.cluster_status:
    hypervisors: "{{ yasco_hypervisor_uris }}"
    cluster: "{{ yasco_cluster_name }}"
    domains_from: agents
    events: 1000
    endpoints: "{{ yasco_etcd_endpoints }}"
  register: status

- name: Write the report, showing what the failure of hv2 does
  yasco.cluster.cluster_report:
    vdm: "{{ yasco_vdm }}"
    events: "{{ status.events }}"
    failed: [hv2]
    cluster: "{{ yasco_cluster_name }}"
    dest: /srv/www/yasco
"""

RETURN = r"""
html:
  description: The page's path.
  returned: success
  type: str
  sample: /srv/www/yasco/report.html
png:
  description: The path of the image holding every picture.
  returned: success
  type: str
  sample: /srv/www/yasco/report.png
failure_set:
  description: The failure set shown (host names sorted and joined by commas), or
    null when the VDM plans no failure.
  returned: success
  type: str
  sample: hv1
incident:
  description: The latest incident - C(failed) (its hosts, in the order they failed),
    C(started) (its first failure's time), C(ended), C(seconds) (from its first
    failure to its last event) and C(events) (how many); null when no host failed in
    O(events).
  returned: success
  type: dict
  sample: {failed: [hv1], started: "2026-05-04T10:00:00.000+00:00", ended: true,
           seconds: 74.2, events: 12}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import run_module
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import ReportError
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_canvas import (
    MATPLOTLIB_IMPORT_ERROR)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_write import ReportRun


def main(module_class=AnsibleModule) -> None:
    module = module_class(
        argument_spec={
            "vdm": {"type": "dict", "required": True},
            "events": {"type": "list", "elements": "dict", "default": []},
            "failed": {"type": "list", "elements": "str"},
            "cluster": {"type": "str", "default": "yasco"},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    run_module(module, ReportRun, ReportError, {"matplotlib": MATPLOTLIB_IMPORT_ERROR})


if __name__ == "__main__":
    main()
