"""What the agent's storage probe makes of Ceph out of reach (module_utils/
storage_probe.py): only a host cut off alone self-fences, after its grace period.
The probe itself runs against the lab's Ceph in tests/lab/test_ha.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_probe import (
    FENCE, OK, OUTAGE, WAITING, verdict)


@pytest.mark.parametrize(("lost_for", "others", "frozen", "expected"), [
    (0, ["ok", "ok"], False, OK),
    (29.9, ["ok", "ok"], False, WAITING),  # a blip: an OSD's restart, a peering
    (30, ["ok", "lost"], False, FENCE),  # another host reaches Ceph: this one is cut off
    (30, ["lost", "lost"], False, OUTAGE),  # nobody does: Ceph's outage
    (30, [None, None], False, OUTAGE),  # nobody else probes: nothing to compare with
    (30, [], False, OUTAGE),  # a one-host cluster
    (30, ["ok"], True, OUTAGE),  # frozen: nothing would start its VMs elsewhere
    (300, ["ok"], False, FENCE),
])
def test_only_a_host_cut_off_alone_past_its_grace_is_fenced(
        lost_for, others, frozen, expected):
    assert verdict(lost_for, 30, others, frozen) == expected
