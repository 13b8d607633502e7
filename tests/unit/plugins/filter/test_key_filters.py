"""The filters that name etcd keys in playbooks."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.filter.keys import vm_record_key


def test_a_vm_has_a_record_and_a_requested_state_and_nothing_else():
    assert vm_record_key("web1") == "/yasco/yasco/vms/web1"
    assert vm_record_key("web1", "prod", "requested") == "/yasco/prod/requested/web1"
    with pytest.raises(AnsibleFilterError, match="kind must be one of record, requested"):
        vm_record_key("web1", "prod", "lease")
    with pytest.raises(AnsibleFilterError, match="vm_record_key: "):
        vm_record_key("web/1")
