"""The agent's word that HA is frozen: once it has read the disarm flag in freeze mode
it says so under its lease (hosts/<host>/frozen), which disarm.yml waits for, since
until then a partition would still self-fence its HA VMs; re-armed, the word goes.
Against real etcd and libvirt's built-in test driver. The nemesis found the gap: a
partition a second after disarm.yml returned destroyed an HA VM while HA was frozen."""

from __future__ import annotations

import json

import yaml
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from ..ansible_run import ROOT, run_playbook
from .conftest import wait_for
from .test_agent_start import (  # noqa: F401  pylint: disable=unused-import
    fixture_running, start_agent, stop_agent)


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


def test_disarm_yml_waits_for_the_running_agents_word_and_refuses_to_rearm_over_a_down_host(
        etcd, running, tmp_path):
    agent = start_agent([etcd.url])
    try:
        assert wait_for(lambda: agent.lease, 5), "the agent did not register"
        cluster = agent.config.cluster
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {
            "vars": {"yasco_cluster_name": cluster, "yasco_etcd_endpoints": [etcd.url]},
            "children": {"yasco_hypervisors": {"hosts": {
                # hv2 has no agent: down, and frozen it never self-fenced.
                h: {"yasco_libvirt_uri": "test:///default"} for h in ("hv1", "hv2")}}}}}))

        def disarm(**extra):
            return run_playbook(ROOT / "playbooks" / "disarm.yml", str(inventory),
                                extra_vars=extra)

        rc, results = disarm(yasco_disarm_mode="freeze", yasco_disarm_reason="switch work")
        assert rc == 0, results
        waited = next(r for r in results if r["_task"].startswith("Wait for each"))
        assert [r["item"] for r in waited["results"]] == ["hv1"]  # hv2 is down
        assert "every running agent has said" in results[-1]["msg"]
        assert agent.frozen
        with etcd.client() as client:
            assert client.get(etcd_keys.frozen_key("hv1", cluster=cluster))

        rc, results = disarm(yasco_ha_disarmed=False)
        assert rc != 0
        assert "hv2 down while HA is frozen" in results[-1]["msg"]
        assert agent.frozen  # still disarmed

        rc, results = disarm(yasco_ha_disarmed=False, yasco_rearm_with_hosts_down=True)
        assert rc == 0, results
        assert results[-1]["msg"].startswith("HA armed")
        assert wait_for(lambda: not agent.frozen, 5)
    finally:
        stop_agent(agent)
