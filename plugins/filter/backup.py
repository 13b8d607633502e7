# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter that tells snapshots, backups and restores which disks of which VMs."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def vm_disks(status, items, selected):
    """Each selected VM's disks and the host it runs on (see module_utils/stories/vm_backup.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import vm_backup
    try:
        return vm_backup.selected_vms(status or {}, items or [], selected)
    except vm_backup.BackupError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    def filters(self):
        return {"vm_disks": vm_disks}
