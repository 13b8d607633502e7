"""The agent's word that HA is frozen: once it has read the disarm flag in freeze mode
it says so under its lease (hosts/<host>/frozen), which disarm.yml waits for, since
until then a partition would still self-fence its HA VMs; re-armed, the word goes.
Against real etcd and libvirt's built-in test driver. The nemesis found the gap: a
partition a second after disarm.yml returned destroyed an HA VM while HA was frozen."""

from __future__ import annotations

import json

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_keys

from .conftest import wait_for
from .test_agent_start import fixture_running, start_agent, stop_agent  # noqa: F401  pylint: disable=unused-import


def test_the_agent_says_it_is_frozen_under_its_lease_and_takes_it_back_when_rearmed(
        etcd, running):
    agent = start_agent([etcd.url])
    try:
        assert wait_for(lambda: agent.lease, 5), "the agent did not register"
        cluster = agent.config.cluster
        frozen = etcd_keys.frozen_key("hv1", cluster=cluster)
        flag = etcd_keys.disarmed_key(cluster=cluster)
        with etcd.client() as client:
            client.put(flag, json.dumps({"mode": "ignore-failures"}))
            wait_for(lambda: agent.flag_read > 0, 5)
            assert client.get(frozen) is None  # disarmed, but self-fencing still
            client.put(flag, json.dumps({"mode": "freeze"}))
            assert wait_for(lambda: client.get(frozen), 5), "the agent never said it is frozen"
            assert client.get(frozen).lease == agent.lease  # goes with its liveness
            assert agent.frozen
            client.delete(flag)
            assert wait_for(lambda: client.get(frozen) is None, 5), "the word stayed"
            assert not agent.frozen
    finally:
        stop_agent(agent)
