"""etcd's housekeeping against real etcd servers: the lab's compaction settings keep
the database bounded under the agents' rewrites; a full etcd (alarm NOSPACE) refuses
writes but renews leases, so the agent keeps its lease and its HA VMs, and the
watcher ends no lease and reports the alarm; playbooks/etcd_maintenance.yml frees the
space and disarms it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from yasco_lab.etcd import housekeeping_flags

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError, NoSpace)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import AgentConfig
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent

from .conftest import (ROOT, Started, ansible_env, parse_run, playbook_command, start_etcd,
                       stop, wait_for, wait_until_serving)
from .test_etcd_hosts_source import LEADER_TTL, RunningSource, wait_until_leading

QUOTA = 4 * 1024 ** 2  # bytes: small, to fill in a second
# An agent's liveness value is about 300 bytes; twenty agents rewrite theirs.
ALIVE = json.dumps({"address": "10.0.0.11", "boot_id": "b" * 36, "agent_version": "0.2.0",
                    "started": "2026-11-26T09:00:00Z", "pid": 4242, "ttl": 5,
                    "ceph_addrs": ["10.0.0.11"], "padding": "p" * 120})
HOSTS = 20


@pytest.fixture(name="etcd_started")
def fixture_etcd_started(tmp_path: Path) -> Iterator:
    """Start etcd servers with the given flags; stopped after the test."""
    running: list[Started] = []

    def start(name: str, *flags: str) -> Started:
        started = start_etcd(tmp_path, name, "http", *flags)
        running.append(started)
        wait_until_serving(started)
        return started

    yield start
    for started in running:
        stop(started)


def rewrite(client: EtcdClient, prefix: str, rounds: int) -> None:
    """Each of HOSTS liveness keys rewritten `rounds` times, as the agents do."""
    for dummy in range(rounds):
        for host in range(HOSTS):
            client.put(f"{prefix}hv{host}/alive", ALIVE)


# How long etcd's status may take to count a write (it counts within 0.1 s when idle).
GROWN_WITHIN = 60


def grow(client: EtcdClient, key: str) -> None:
    """Rewrite `key` with a large value and wait until etcd's status has moved since.
    etcd commits its writes in batches every 100 ms and reports the sizes it read when
    its last batch began, so a loop that writes faster than that overshoots the size it
    aims at; small writes to another key bring the next batches on. The size in use may
    come back smaller than before the write: it counts the pages that a read still
    held when it was taken, and a later batch frees them. Beside the lab, at the lowest
    priority, a few seconds may pass between two requests: the wait is long."""
    def sizes() -> tuple[int, int]:
        status = client.status()
        return status["db_size"], status["db_size_in_use"]

    before = sizes()
    client.put(key, "x" * 100_000)

    def counted() -> bool:
        client.put("/scratch/tick", "x")
        return sizes() != before
    assert wait_for(counted, GROWN_WITHIN), (
        f"etcd's status still counts {before[1]} of {before[0]} bytes in use "
        f"{GROWN_WITHIN} s after a write")


def fill(client: EtcdClient, key: str) -> NoSpace:
    """Rewrite `key` with large values until etcd refuses: the NoSpace it raised."""
    for dummy in range(10 * QUOTA // 100_000):
        try:
            client.put(key, "x" * 100_000)
        except NoSpace as err:
            return err
    raise AssertionError(f"etcd took {QUOTA * 10} bytes without reaching its quota {QUOTA}")


def test_the_labs_compaction_keeps_the_database_bounded_where_etcds_default_grows(
        etcd_started):
    # The lab's flags with a retention of a second instead of five minutes.
    kept = etcd_started("kept", *housekeeping_flags(retention="1s"))
    default = etcd_started("default")
    sizes: dict[str, list[int]] = {"kept": [], "default": []}
    with EtcdClient([kept.url]) as to_kept, EtcdClient([default.url]) as to_default:
        for dummy in range(3):
            for name, client in (("kept", to_kept), ("default", to_default)):
                rewrite(client, "/yasco/lab/hosts/", rounds=30)
            time.sleep(2.5)  # the compactor runs every retention period
            sizes["kept"].append(to_kept.status()["db_size_in_use"])
            sizes["default"].append(to_default.status()["db_size_in_use"])
        first = to_kept.status()["revision"] - 3 * 30 * HOSTS
        with pytest.raises(EtcdError, match="compacted"):
            list(to_kept.watch_prefix("/yasco/lab/hosts/", first, idle=1))
    # etcd's default keeps every revision: its database grows with each round.
    assert sizes["default"][2] > 2 * sizes["default"][0], sizes
    # Compacted, the space of old revisions is reused: through three rounds it never
    # holds as much as etcd's default after two. (Not after one: the compactor runs
    # on its own clock, and a round may end before it has run, with a few pages more
    # in use than the default's first round.)
    assert max(sizes["kept"]) < sizes["default"][1], sizes


def agent_config(url: str, cluster: str) -> AgentConfig:
    config = AgentConfig(host="hv1", endpoints=[url], cluster=cluster, ttl=3, margin=1,
                         keepalive=0.5, libvirt_uri="test:///default")
    config.check("test")
    return config


def test_a_full_etcd_keeps_the_agents_lease_ends_none_and_the_watcher_reports_it(
        etcd_started):
    full = etcd_started("full", "--quota-backend-bytes", str(QUOTA))
    cluster = "full"
    with EtcdClient([full.url]) as client:
        source = RunningSource({"endpoints": [full.url], "cluster": cluster,
                                "leader_ttl": LEADER_TTL, "settle": 0.3, "hold_down": 600})
        agent = Agent(agent_config(full.url, cluster))
        beating = threading.Thread(target=agent.heartbeat, daemon=True)
        try:
            wait_until_leading(source)
            beating.start()
            assert wait_for(lambda: agent.lease, 10), "the agent did not register"
            lease = agent.lease
            assert source.next()["type"] == "host_up"

            refused = fill(client, "/scratch/big")
            assert "the database is full (alarm NOSPACE)" in str(refused)
            assert "playbooks/etcd_maintenance.yml" in str(refused)
            assert [a["alarm"] for a in client.alarms()] == ["NOSPACE"]
            raised = source.next()
            assert (raised["type"], raised["raised"], raised["hosts"]) == (
                "etcd_alarm", True, [])
            assert [a["alarm"] for a in raised["alarms"]] == ["NOSPACE"]

            # Three TTLs: the liveness key is never rewritten, the lease is renewed.
            alive = client.get(etcd_keys.alive_key("hv1", cluster=cluster))
            for dummy in range(18):
                time.sleep(0.5)
                # What the fencer compares with its deadline, ttl - margin.
                assert agent.clock() - agent.last_ok < 2, "the agent would self-fence"
            assert agent.no_space and agent.lease == lease
            assert client.lease_info(lease) is not None, "the lease is gone"
            assert client.get(etcd_keys.alive_key("hv1", cluster=cluster)) == alive

            done = run_maintenance(full.url)
            assert done.returncode == 0, done.output
            freed = done.result(MAINTAIN)
            assert freed["changed"] and [a["alarm"] for a in freed["disarmed"]] == ["NOSPACE"]
            member, = freed["members"]
            assert member["defragmented"] and member["db_size"] < member["db_size_before"] / 2
            assert client.alarms() == []
            cleared = source.next()  # the next event: no host_down came before it
            assert (cleared["type"], cleared["raised"]) == ("etcd_alarm", False)
            assert wait_for(lambda: not agent.no_space, 5), "the agent writes no more"
            assert client.get(etcd_keys.alive_key("hv1", cluster=cluster)) != alive
            assert agent.lease == lease
        finally:
            agent.leaving.set()
            agent.stopping.set()
            source.stop()


MAINTAIN = "Compact, defragment one member at a time, disarm"


def run_maintenance(url: str, quota: int = QUOTA):
    done = subprocess.run(
        playbook_command(ROOT / "playbooks" / "etcd_maintenance.yml",
                         "-e", json.dumps({"yasco_etcd_endpoints": [url],
                                           "yasco_etcd_quota_bytes": quota})),
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=120,
        check=False)
    return parse_run(done)


def test_maintenance_over_a_member_still_over_its_quota_fails_naming_it_and_disarms_nothing(
        etcd_started):
    full = etcd_started("over", "--quota-backend-bytes", str(QUOTA))
    with EtcdClient([full.url]) as client:
        for index in range(2 * QUOTA // 100_000):  # live data, not history
            try:
                client.put(f"/data/{index}", "x" * 100_000)
            except NoSpace:
                break
        # Live data at NOSPACE fills between half the quota and all of it, as etcd's
        # file grows: measured against half of it, defragmenting cannot be enough.
        done = run_maintenance(full.url, quota=QUOTA // 2)
        assert done.returncode != 0
        failed = done.result(MAINTAIN)
        assert "% of quota_bytes" in failed["msg"] and full.url in failed["msg"]
        assert "raise --quota-backend-bytes" in failed["msg"]
        assert [a["alarm"] for a in client.alarms()] == ["NOSPACE"]


def test_a_second_run_on_a_quiet_etcd_changes_nothing(etcd_started):
    quiet = etcd_started("quiet", *housekeeping_flags())
    with EtcdClient([quiet.url]) as client:
        rewrite(client, "/yasco/lab/hosts/", rounds=20)
    first, second = run_maintenance(quiet.url), run_maintenance(quiet.url)
    assert first.returncode == second.returncode == 0, first.output + second.output
    assert first.result(MAINTAIN)["compacted_to"] and first.result(MAINTAIN)["changed"]
    assert second.result(MAINTAIN)["changed"] is False, second.result(MAINTAIN)
    assert second.result(MAINTAIN)["compacted_to"] is None


def test_the_watcher_warns_before_etcd_is_full_and_says_when_it_is_not_any_more(
        etcd_started):
    """At etcd_space_warning percent of the quota a member's database raises
    etcd_space, naming it, before etcd refuses anything; maintenance clears it."""
    member = etcd_started("filling", "--quota-backend-bytes", str(QUOTA))
    with EtcdClient([member.url]) as client:
        source = RunningSource({"endpoints": [member.url], "cluster": "filling",
                                "leader_ttl": LEADER_TTL, "etcd_quota_bytes": str(QUOTA),
                                "etcd_space_warning": "60"})
        try:
            wait_until_leading(source)
            index = 0
            while client.status()["db_size"] < 0.7 * QUOTA:  # history, not live data
                grow(client, "/scratch/big")
                index += 1
                assert index < QUOTA // 100_000, "the database does not grow"
            assert client.alarms() == []  # not full: a warning, ahead of the alarm
            raised = source.next()
            assert (raised["type"], raised["raised"], raised["over"], raised["hosts"]) == (
                "etcd_space", True, [member.url], [])
            size, = raised["members"]
            assert size["endpoint"] == member.url and size["percent"] >= 60
            assert raised["quota_bytes"] == QUOTA

            # etcd counts the space a compaction frees at its next write, which the
            # agents' rewrites bring within a second; the second run defragments.
            assert run_maintenance(member.url).returncode == 0
            client.put("/scratch/small", "x")
            done = run_maintenance(member.url)
            assert done.returncode == 0, done.output
            assert done.result(MAINTAIN)["members"][0]["defragmented"]
            cleared = source.next()
            assert (cleared["type"], cleared["raised"], cleared["over"]) == (
                "etcd_space", False, [])
            assert cleared["members"][0]["percent"] < 60
        finally:
            source.stop()
