"""cluster_status's answer read by name, the same for every story."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView

STATUS = {
    "hypervisors": [{"name": "hv1", "alive": True, "uri": "qemu+ssh://hv1/system"},
                    {"name": "hv2", "alive": False, "uri": None, "fence": {"at": "t"}}],
    "vms": [{"name": "web", "record": {"host": "hv1", "state": "running"},
             "running_on": ["hv1"]}],
    "requested": {"web": "stopped"},
    "ha_disarmed": {"by": "operator"},
}


def test_the_view_reads_hosts_and_vms_by_name_in_the_status_order():
    view = ClusterView(STATUS)
    assert list(view.hosts) == ["hv1", "hv2"] and view.hosts["hv2"]["fence"] == {"at": "t"}
    assert view.vms["web"]["running_on"] == ["hv1"]
    assert view.uris == {"hv1": "qemu+ssh://hv1/system", "hv2": None}
    assert view.requested == {"web": "stopped"}
    assert view.ha_disarmed == {"by": "operator"}


@pytest.mark.parametrize("status", [None, "not a status", {}, {"hypervisors": None}])
def test_a_status_without_a_part_reads_as_empty(status):
    view = ClusterView(status)
    assert (view.hosts, view.vms, view.uris, view.requested, view.ha_disarmed) == (
        {}, {}, {}, {}, None)
