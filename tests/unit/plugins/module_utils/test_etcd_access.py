"""YASCO's etcd roles: who may write which key (the lab enforces them on a real etcd,
tests/lab/test_security.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access, etcd_keys

HOSTS = ["hv1", "hv2", "hv3"]
CLUSTER = "prod"
ROLES = etcd_access.roles(HOSTS, CLUSTER)
DOCS = Path(__file__).resolve().parents[4] / "docs" / "security.md"


def may(role: str, permission: str, key: str) -> bool:
    """Whether `role` may `permission` (read or write) `key`."""
    return any(permission in grant.permission
               and (key.startswith(grant.key) if grant.prefix else key == grant.key)
               for grant in ROLES[role])


def test_there_is_one_agent_role_per_host_and_the_three_others():
    assert sorted(ROLES) == sorted([*(f"yasco-agent-{h}" for h in HOSTS), "yasco-controller",
                                    "yasco-reader", "yasco-watcher"])


@pytest.mark.parametrize("host", HOSTS)
def test_an_agent_writes_its_own_host_records_and_no_one_elses(host):
    role = etcd_access.agent_role(host)
    for other in HOSTS:
        keys = [etcd_keys.alive_key(other, cluster=CLUSTER),
                etcd_keys.registered_key(other, cluster=CLUSTER),
                etcd_keys.domain_key(other, "web1", cluster=CLUSTER),
                etcd_keys.restart_key(other, "web1", cluster=CLUSTER)]
        assert all(may(role, "write", key) is (other == host) for key in keys)
    assert may(role, "read", etcd_keys.fence_key(host, cluster=CLUSTER))
    assert not may(role, "write", etcd_keys.fence_key(host, cluster=CLUSTER))
    assert not may(role, "write", etcd_keys.vm_key("web1", cluster=CLUSTER))
    assert not may(role, "write", etcd_keys.disarmed_key(cluster=CLUSTER))
    assert may(role, "read", etcd_keys.disarmed_key(cluster=CLUSTER))  # freeze mode
    # A VM's record and requested state, read-only: whether it restarts it in place.
    assert may(role, "read", etcd_keys.vm_key("web1", cluster=CLUSTER))
    assert may(role, "read", etcd_keys.requested_key("web1", cluster=CLUSTER))
    assert not may(role, "write", etcd_keys.requested_key("web1", cluster=CLUSTER))
    assert not may(role, "read", etcd_keys.vdm_ha_key(cluster=CLUSTER))
    # Other hosts' liveness, read-only: whether they reach Ceph (the storage probe).
    assert all(may(role, "read", etcd_keys.alive_key(other, cluster=CLUSTER))
               for other in HOSTS)


def test_only_agents_and_the_watcher_write_liveness_and_only_the_controller_placement():
    alive = etcd_keys.alive_key("hv2", cluster=CLUSTER)
    record = etcd_keys.vm_key("web1", cluster=CLUSTER)
    fence = etcd_keys.fence_key("hv2", cluster=CLUSTER)
    assert [r for r in ROLES if may(r, "write", alive)] == ["yasco-agent-hv2", "yasco-watcher"]
    assert [r for r in ROLES if may(r, "write", record)] == ["yasco-controller"]
    assert [r for r in ROLES if may(r, "write", fence)] == ["yasco-controller"]
    assert not any(may("yasco-reader", "write", key) for key in (alive, record, fence))
    # Nobody is granted anything beyond the cluster's own keys.
    for grants in ROLES.values():
        assert all(g.key.startswith(etcd_keys.cluster_prefix(CLUSTER)) for g in grants)


def test_no_agent_may_touch_the_history_and_each_writes_its_events_under_its_host():
    """etcd grants ranges, not create-only: an agent that could add to history/ could
    delete or rewrite every host's events and the controller's."""
    history = [etcd_keys.history_prefix(cluster=CLUSTER), etcd_keys.history_key(7, cluster=CLUSTER)]
    for host in HOSTS:
        role = etcd_access.agent_role(host)
        assert not any(may(role, permission, key) for permission in ("read", "write")
                       for key in history)
        for other in HOSTS:
            event = etcd_keys.host_event_key(other, 7, cluster=CLUSTER)
            assert may(role, "write", event) is (other == host)
    # The leading watcher copies them there; it may delete the agents' copies.
    assert all(may("yasco-watcher", "write", key) for key in history)
    assert may("yasco-watcher", "write", etcd_keys.host_event_key("hv1", 7, cluster=CLUSTER))
    assert [r for r in ROLES if may(r, "write", history[1])] == ["yasco-watcher",
                                                                 "yasco-controller"]


def test_the_controller_may_mark_maintenance_but_not_forge_a_host():
    maintenance = etcd_keys.maintenance_key("hv1", cluster=CLUSTER)
    assert may("yasco-controller", "write", maintenance)
    assert not may("yasco-controller", "write", maintenance + "x")
    assert not may("yasco-controller", "write", etcd_keys.registered_key("hv1", cluster=CLUSTER))


def test_the_commands_in_the_docs_are_the_ones_made_here():
    script = etcd_access.as_script(["hv1", "hv2"], CLUSTER).splitlines()
    agent = [line for line in script if "yasco-agent-hv1" in line]
    assert len(agent) == 9
    assert "\n".join(agent) in DOCS.read_text()
