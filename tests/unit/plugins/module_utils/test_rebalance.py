"""The order of live migrations: homes reached, no host ever over capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.stories.rebalance import (
    RebalanceError, migration_settings, plan_moves, wave_steps, waves)


def vdm(home, sizes, capacity):
    return {"home": home, "vms": {n: {"memory_mb": m, "vcpus": 1} for n, m in sizes.items()},
            "hosts": {h: {"memory_mb": c, "vcpus": 100} for h, c in capacity.items()}}


def replay(current, plan, concurrency=2):
    """Run the waves, every move of a wave in flight at once: return the highest load
    seen on each host."""
    where = dict(current)
    sizes = {n: v["memory_mb"] for n, v in plan["vms"].items()}
    peak = {h: 0 for h in plan["hosts"]}
    for wave in waves(plan_moves(current, plan), current, plan, concurrency):
        in_flight = {h: sum(sizes[n] for n, w in where.items() if w == h) for h in peak}
        for step in wave:
            assert where[step["vm"]] == step["from"]
            in_flight[step["to"]] += sizes[step["vm"]]
        for h in peak:
            peak[h] = max(peak[h], in_flight[h])
        for step in wave:
            where[step["vm"]] = step["to"]
    return where, peak


def test_nothing_moves_when_every_vm_is_home():
    plan = vdm({"a": "hv1"}, {"a": 1}, {"hv1": 2, "hv2": 2})
    assert plan_moves({"a": "hv1"}, plan) == []


def test_two_full_hosts_swap_through_a_temporary_hop():
    plan = vdm({"a": "hv2", "b": "hv1"}, {"a": 4, "b": 4}, {"hv1": 4, "hv2": 4, "hv3": 4})
    moves = plan_moves({"a": "hv1", "b": "hv2"}, plan)
    assert len(moves) == 3 and any(m["to"] == "hv3" for m in moves)
    where, peak = replay({"a": "hv1", "b": "hv2"}, plan)
    assert where == {"a": "hv2", "b": "hv1"}
    assert all(peak[h] <= 4 for h in peak)


def test_a_vm_that_hops_claims_its_record_as_read_then_as_its_hop_left_it():
    """Each claim must be one etcd will grant when its wave runs: the first on the
    revision read, the next on what the hop's own record wrote (a second claim on the
    revision read would fail, the hop having changed it)."""
    current = {"a": "hv1", "b": "hv2"}
    plan = vdm({"a": "hv2", "b": "hv1"}, {"a": 4, "b": 4}, {"hv1": 4, "hv2": 4, "hv3": 4})
    grouped = waves(plan_moves(current, plan), current, plan, 2)
    entries = {n: {"name": n, "record": {"host": h, "state": "running"},
                   "record_revision": 10 + i} for i, (n, h) in enumerate(current.items())}
    steps = [step for wave in wave_steps(grouped, entries, "c1") for step in wave]
    hopped = [step for step in steps if step["vm"] == steps[0]["vm"]]
    assert len(hopped) == 2 and hopped[0]["to"] == "hv3" == hopped[1]["from"]
    first, then = hopped[0]["claim"], hopped[1]["claim"]
    assert first["if_revision"] == entries[steps[0]["vm"]]["record_revision"]
    assert "if_revision" not in then and then["if_value"] == hopped[0]["record"]["value"] == {
        "host": "hv3", "state": "running"}
    assert then["value"] == {"host": "hv3", "state": "migrating", "to": hopped[1]["to"]}
    others = [step for step in steps if step["vm"] != steps[0]["vm"]]
    assert [step["claim"]["if_revision"] for step in others] == [
        entries[others[0]["vm"]]["record_revision"]]


def test_a_swap_with_no_room_anywhere_is_refused_naming_the_vms():
    plan = vdm({"a": "hv2", "b": "hv1"}, {"a": 4, "b": 4}, {"hv1": 4, "hv2": 4})
    with pytest.raises(RebalanceError, match=r"a \(hv1 to hv2\), b \(hv2 to hv1\) wait"):
        plan_moves({"a": "hv1", "b": "hv2"}, plan)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 5), st.data())
def test_any_feasible_rebalance_reaches_the_homes_within_capacity(k, data):
    hosts = [f"hv{i}" for i in range(k)]
    capacity = {h: data.draw(st.integers(4, 12)) for h in hosts}
    sizes, current, home = {}, {}, {}
    for i in range(data.draw(st.integers(0, 10))):
        name, size = f"vm{i}", data.draw(st.integers(1, 4))
        start = [h for h in hosts if sum(sizes[n] for n in current if current[n] == h)
                 + size <= capacity[h]]
        end = [h for h in hosts if sum(sizes[n] for n in home if home[n] == h)
               + size <= capacity[h]]
        if not start or not end:
            continue
        sizes[name] = size
        current[name] = data.draw(st.sampled_from(start))
        home[name] = data.draw(st.sampled_from(end))
    plan = vdm(home, sizes, capacity)
    try:
        where, peak = replay(current, plan, data.draw(st.integers(1, 3)))
    except RebalanceError:
        return  # a tight cluster may have no safe order; the error says so
    assert where == home
    assert all(peak[h] <= capacity[h] for h in hosts)


def test_a_limit_per_host_splits_the_waves_that_would_load_one_host_with_more():
    # Four VMs of hv1 go home to hv2 and hv3: room for all, four moves a wave allowed.
    current = {n: "hv1" for n in "abcd"}
    plan = vdm({"a": "hv2", "b": "hv2", "c": "hv3", "d": "hv3"}, dict.fromkeys("abcd", 1),
               {"hv1": 8, "hv2": 8, "hv3": 8})
    moves = plan_moves(current, plan)
    assert [len(w) for w in waves(moves, current, plan, 4)] == [4]
    for per_host in (1, 2, 3):
        grouped = waves(moves, current, plan, 4, per_host)
        assert sorted(m["vm"] for w in grouped for m in w) == list("abcd")
        for wave in grouped:
            for host in ("hv1", "hv2", "hv3"):
                assert sum(host in (m["from"], m["to"]) for m in wave) <= per_host
    assert len(waves(moves, current, plan, 4, 1)) == 4  # hv1 sends each one alone


def test_migration_settings_split_the_policy_from_the_timeout_and_the_limit_per_host():
    assert migration_settings(None) == {"policy": {}, "timeout": 600, "per_host": 0}
    assert migration_settings({"bandwidth": 100, "auto_converge": True, "timeout": 300,
                               "per_host": 1, "post_copy_after": 60.0}) == {
        "policy": {"bandwidth": 100, "auto_converge": True, "post_copy_after": 60.0},
        "timeout": 300, "per_host": 1}


@pytest.mark.parametrize("given, said", [
    ({"bandwith": 100}, "yasco_migration.bandwith: unknown; known are bandwidth, "),
    ({"bandwidth": "fast"}, "yasco_migration.bandwidth: must be a whole number of MiB/s, "
                            "0 for no limit, got 'fast'"),
    ({"auto_converge": "yes"}, "yasco_migration.auto_converge: must be true or false"),
    ({"per_host": -1}, "yasco_migration.per_host: must be a whole number of migrations"),
    ({"timeout": 0}, "yasco_migration.timeout: must be a whole number of seconds above 0"),
    ({"timeout": 90.5}, "yasco_migration.timeout: must be a whole number of seconds above 0"),
    ({"post_copy_after": 700}, "yasco_migration.post_copy_after: 700 is not less than "
                               "yasco_migration.timeout (600)"),
    ([1], "yasco_migration: must be a mapping of bandwidth, "),
])
def test_migration_settings_name_each_wrong_key_and_what_it_must_be(given, said):
    with pytest.raises(ValueError) as raised:
        migration_settings(given)
    assert said in str(raised.value)
