# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja tests on the VM records etcd holds (vms/<vm>, see docs/etcd-schema.md)."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError


def vm_record_on(record, host):
    """Whether a VM record (its JSON text, or the parsed mapping) places it on `host`."""
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except ValueError as err:
            raise AnsibleFilterError(f"vm_record_on: not a VM record: {record!r}") from err
    if not isinstance(record, dict):
        raise AnsibleFilterError(f"vm_record_on: not a VM record: {record!r}")
    return record.get("host") == host


class TestModule:
    def tests(self):
        return {"vm_record_on": vm_record_on}
