"""An agent's events reach the cluster's history only through the HA watcher, against a
real etcd with authentication on and YASCO's roles as etcd_access.py makes them: an
agent's user may neither write nor delete any history/ key, writes its events under
its own host, and the watcher's user copies each into the history once (its host
forced), whoever copies and however often, even after a copy cut off halfway; an
event an agent may not write is dropped."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Iterator

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (
    etcd_access, etcd_keys)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

from .conftest import EtcdServer, etcdctl

# Unique in the session's etcd: roles and users are etcd-wide.
SUFFIX = uuid.uuid4().hex[:6]
HV1, HV2 = f"hv1-{SUFFIX}", f"hv2-{SUFFIX}"
CLUSTER = f"t{SUFFIX}"


class Users:
    """A client of each of YASCO's users, made with the real roles."""

    def __init__(self, server: EtcdServer, passwords: dict[str, str]) -> None:
        self.server, self.passwords = server, passwords

    def client(self, user: str) -> EtcdClient:
        return self.server.client(username=user, password=self.passwords[user])

    def agent(self, host: str) -> EtcdClient:
        return self.client(etcd_access.agent_role(host))

    def watcher(self) -> EtcdClient:
        return self.client(etcd_access.WATCHER_ROLE)

    def controller(self) -> EtcdClient:
        return self.client(etcd_access.CONTROLLER_ROLE)


@pytest.fixture(name="users", scope="module")
def fixture_users(etcd_servers: dict[str, EtcdServer]) -> Users:
    """YASCO's roles and users for hosts HV1 and HV2 of cluster CLUSTER, applied with
    etcdctl as root, as playbooks/etcd_access.yml prints them and the lab applies them."""
    server = etcd_servers["auth"]
    roles = etcd_access.roles([HV1, HV2], CLUSTER)
    passwords = {user: f"{user}-secret" for user in roles}
    for command in etcd_access.etcdctl_commands([HV1, HV2], CLUSTER, passwords):
        etcdctl(server.url, "--user", f"{server.username}:{server.password}", *command)
    return Users(server, passwords)


@pytest.fixture(name="watcher")
def fixture_watcher(users: Users) -> Iterator[EtcdClient]:
    with users.watcher() as client:
        yield client


def agent_event(kind: str = "self-fenced", **fields) -> dict:
    return cluster_events.event(kind, by="agent", **fields)


def events_of(client: EtcdClient, keys: list[str]) -> list[dict]:
    """The history's events copied from the agents' `keys`, in order."""
    events = [json.loads(kv.value) for kv in client.get_prefix(
        etcd_keys.history_prefix(cluster=CLUSTER))]
    return [e for e in events if (e.get("source") or {}).get("key") in keys]


def test_an_agents_user_may_neither_write_nor_delete_nor_read_the_history(users):
    with users.controller() as controller:
        key = cluster_events.append(controller, cluster_events.event(
            "fenced", host=HV2, by="evacuate"), cluster=CLUSTER)
        written = controller.get(key)
    forged = to_json(agent_event(host=HV2))
    with users.agent(HV1) as agent:
        attempts = [
            lambda: agent.put(key, forged),
            lambda: agent.delete(key),
            lambda: agent.delete_prefix(etcd_keys.history_prefix(cluster=CLUSTER)),
            lambda: agent.put(etcd_keys.history_key(time.time_ns(), cluster=CLUSTER), forged),
            lambda: cluster_events.append(agent, agent_event(host=HV1), cluster=CLUSTER),
            lambda: agent.get(key),
        ]
        for attempt in attempts:
            with pytest.raises(EtcdError, match="permission denied"):
                attempt()
    with users.controller() as controller:
        assert controller.get(key) == written


def test_an_agent_writes_its_events_under_its_own_host_alone(users):
    with users.agent(HV1) as agent:
        key = cluster_events.append_for_agent(agent, agent_event(host=HV1), host=HV1,
                                              cluster=CLUSTER)
        assert etcd_keys.parse_key(key, cluster=CLUSTER) == ("host_event", HV1, None)
        # Bound to no lease: a self-fence written as the host dies stays.
        assert agent.get(key).lease == 0
        with pytest.raises(EtcdError, match="permission denied"):
            cluster_events.append_for_agent(agent, agent_event(host=HV2), host=HV2,
                                            cluster=CLUSTER)


def test_an_agents_event_reaches_the_history_once_with_its_host_forced(users, watcher):
    with users.agent(HV1) as agent:
        key = cluster_events.append_for_agent(agent, agent_event(
            "crashed", vm="web1", details={"reason": "its kernel panicked"}), host=HV1,
            cluster=CLUSTER)
    read = watcher.get(key)
    copy = cluster_events.copy_from_agent(watcher, read, cluster=CLUSTER)
    assert copy.done == "copied"
    assert watcher.get(key) is None, "the agent's copy stays"
    (event,) = events_of(watcher, [key])
    assert (event["kind"], event["host"], event["vm"], event["by"]) == (
        "crashed", HV1, "web1", "agent")
    assert event["source"] == {"key": key, "revision": read.mod_revision}
    assert etcd_keys.event_number(copy.key) == etcd_keys.event_number(key)
    # Copied again from the same read, as a watcher that saw it before the delete.
    assert cluster_events.copy_from_agent(watcher, read, cluster=CLUSTER) == copy
    assert len(events_of(watcher, [key])) == 1


def test_a_copy_cut_off_before_the_delete_is_finished_once_by_another_watcher(users):
    with users.agent(HV1) as agent:
        key = cluster_events.append_for_agent(agent, agent_event(host=HV1), host=HV1,
                                              cluster=CLUSTER)
    with users.watcher() as first, users.watcher() as second:
        # The first watcher dies between its two requests: the copy made, the agent's
        # key not yet deleted.
        made = cluster_events.copy_into_history(first, first.get(key), cluster=CLUSTER)
        assert made.done == "copied" and first.get(key) is not None
        # The next leader reads the agent's key afresh and copies it.
        again = cluster_events.copy_from_agent(second, second.get(key), cluster=CLUSTER)
        assert again == made
        assert second.get(key) is None
        assert len(events_of(second, [key])) == 1


def test_two_watchers_racing_copy_each_event_once_past_a_taken_number(users):
    with users.agent(HV2) as agent:
        keys = [cluster_events.append_for_agent(agent, agent_event(
            "restarted", host=HV2, vm=f"vm{n}"), host=HV2, cluster=CLUSTER)
            for n in range(24)]
    # Another writer took the number of the first: its copy goes to the next one free.
    with users.controller() as controller:
        taken = etcd_keys.history_key(etcd_keys.event_number(keys[0]), cluster=CLUSTER)
        assert controller.put_if(taken, to_json(cluster_events.event("note", by="operator")),
                                 mod_revision=0).succeeded
    with users.watcher() as reader:
        read = [reader.get(key) for key in keys]
    outcomes: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def copy_all(index: int) -> None:
        with users.watcher() as client:
            start.wait()
            for kv in read if index == 0 else reversed(read):
                outcomes[index].append(cluster_events.copy_from_agent(
                    client, kv, cluster=CLUSTER))

    threads = [threading.Thread(target=copy_all, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(copy.done == "copied" for copies in outcomes.values() for copy in copies)
    with users.watcher() as reader:
        events = events_of(reader, keys)
        assert [reader.get(key) for key in keys] == [None] * len(keys)
    assert sorted(e["vm"] for e in events) == sorted(f"vm{n}" for n in range(24))
    assert {e["host"] for e in events} == {HV2}
    first = [copy for copy in outcomes[0] if copy.key != taken][0]
    assert etcd_keys.event_number(first.key) == etcd_keys.event_number(keys[0]) + 1


@pytest.mark.parametrize("value, why", [
    (agent_event(host=HV2), f"host '{HV2}': not {HV1}"),
    (agent_event("fenced", host=HV1), "kind 'fenced'"),
    (agent_event(host=HV1) | {"by": "evacuate"}, "by 'evacuate'"),
    ([agent_event(host=HV1)], "not a JSON object"),
    ("{{ lookup('pipe', 'id') }}", "not a JSON object"),
])
def test_an_event_an_agent_may_not_write_is_dropped_and_never_reaches_the_history(
        users, watcher, value, why):
    with users.agent(HV1) as agent:
        key = etcd_keys.host_event_key(HV1, time.time_ns(), cluster=CLUSTER)
        agent.put(key, value if isinstance(value, str) else to_json(value))
    copy = cluster_events.copy_from_agent(watcher, watcher.get(key), cluster=CLUSTER)
    assert copy.done == "dropped" and why in copy.why
    assert watcher.get(key) is None, "a dropped event is tried again and again"
    assert events_of(watcher, [key]) == []


def test_an_event_dated_ahead_waits_for_its_time_and_far_ahead_is_dropped(users, watcher):
    now = time.time_ns()
    soon = etcd_keys.host_event_key(HV1, now + 2 * 10**9, cluster=CLUSTER)
    late = etcd_keys.host_event_key(HV1, now + cluster_events.AGENT_AHEAD_NS + 10**9,
                                    cluster=CLUSTER)
    with users.agent(HV1) as agent:
        for key in (soon, late):
            agent.put(key, to_json(agent_event(host=HV1)))
    waiting = cluster_events.copy_from_agent(watcher, watcher.get(soon), cluster=CLUSTER,
                                             now_ns=now)
    assert waiting.done == "waiting" and watcher.get(soon) is not None
    copy = cluster_events.copy_from_agent(watcher, watcher.get(soon), cluster=CLUSTER,
                                          now_ns=now + 2 * 10**9)
    assert copy.done == "copied" and len(events_of(watcher, [soon])) == 1
    dropped = cluster_events.copy_from_agent(watcher, watcher.get(late), cluster=CLUSTER,
                                             now_ns=now)
    assert dropped.done == "dropped" and "ahead of this clock" in dropped.why


def test_the_readers_show_an_event_waiting_and_then_copied_once(users, watcher):
    with users.agent(HV1) as agent:
        key = cluster_events.append_for_agent(agent, agent_event(host=HV1), host=HV1,
                                              cluster=CLUSTER)
    with users.client(etcd_access.READER_ROLE) as reader:
        hosts_read = reader.get_prefix(etcd_keys.hosts_prefix(cluster=CLUSTER))
        (shown,) = [e for e in cluster_events.recent(reader, 50, cluster=CLUSTER)
                    if e["key"] == key]
        assert (shown["kind"], shown["host"], shown["waiting"]) == ("self-fenced", HV1, True)
        # Copied after the reader read the hosts, before it read the history.
        cluster_events.copy_into_history(watcher, watcher.get(key), cluster=CLUSTER)
        mine = [e for e in cluster_events.recent(reader, 50, cluster=CLUSTER,
                                                 hosts_read=hosts_read)
                if (e.get("source") or {}).get("key") == key]
        assert len(mine) == 1 and "waiting" not in mine[0]
