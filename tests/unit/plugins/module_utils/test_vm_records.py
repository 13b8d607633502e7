"""A VM record's states and changes (module_utils/cluster/vm_records.py): which changes are
allowed, and that each compares the revision it was decided on, never the value
alone. Against real etcd by tests/etcd/test_vm_records.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import (
    CLAIMS, DOWN, FAILED, MIGRATING, PREEMPTED, RUNNING, STARTING, STATES, STOPPED,
    RecordError)


def entry(state: str | None, revision: int = 12, host: str = "hv1") -> dict:
    """A cluster_status VM entry whose record is `state` on `host` (None: no record)."""
    return {"name": "web", "record": {"host": host, "state": state} if state else None,
            "record_revision": revision if state else 0}


@given(st.sampled_from((None,) + STATES), st.sampled_from(STATES),
       st.integers(min_value=1, max_value=2**40))
def test_a_change_is_allowed_by_the_table_and_compares_the_revision_read(old, new, revision):
    vm = entry(old, revision)
    if old not in vm_records.FROM[new]:
        with pytest.raises(RecordError, match=r"^web: a record .* cannot become " + new):
            vm_records.change(vm, new, "hv2", "c1")
        return
    done = vm_records.change(vm, new, "hv2", "c1", reason="why", none=None)
    assert done == {"key": "/yasco/c1/vms/web", "if_revision": revision if old else 0,
                    "value": {"host": "hv2", "state": new, "reason": "why"}}


def test_running_follows_only_a_claim_a_creation_or_a_restart_where_it_was():
    assert vm_records.FROM[RUNNING] == {None, STARTING, MIGRATING, PREEMPTED, DOWN, RUNNING}
    assert vm_records.FROM[MIGRATING] == {RUNNING}
    for state in (STOPPED, FAILED):
        with pytest.raises(RecordError, match=f"a record {state} cannot become running"):
            vm_records.change(entry(state), RUNNING, "hv1")
    for new in (STARTING, STOPPED, DOWN, PREEMPTED, FAILED):
        assert set(vm_records.FROM[new]) == set(STATES) | {None}


@pytest.mark.parametrize("old", [None, RUNNING, DOWN, FAILED, STARTING])
def test_a_claim_names_the_revision_it_replaces_and_its_end_compares_that_claim(old):
    claimed = vm_records.claim(entry(old, 77), STARTING, "hv2", "c1", **{"from": "hv1"})
    revision = 77 if old else 0
    assert claimed == {"key": "/yasco/c1/vms/web", "if_revision": revision,
                       "value": {"host": "hv2", "state": "starting", "from": "hv1",
                                 "claimed_at": revision}}
    assert vm_records.complete(claimed, RUNNING, "hv2") == {
        "key": "/yasco/c1/vms/web", "if_value": claimed["value"],
        "value": {"host": "hv2", "state": "running"}}
    assert vm_records.complete(claimed, DOWN, "hv2", reason="start on hv2 failed")[
        "value"] == {"host": "hv2", "state": "down", "reason": "start on hv2 failed"}
    # Two claims of one record differ if it changed between them, even to the same value.
    again = vm_records.claim(entry(old, 78), STARTING, "hv2", "c1", **{"from": "hv1"})
    assert old is None or again["value"] != claimed["value"]


def test_a_migration_claims_only_a_record_that_says_it_runs_where_it_leaves():
    claimed = vm_records.migrate(entry(RUNNING, 5), "hv1", "hv3", "c1")
    assert claimed == {"key": "/yasco/c1/vms/web", "if_revision": 5,
                       "if_value": {"host": "hv1", "state": "running"},
                       "value": {"host": "hv1", "state": "migrating", "to": "hv3",
                                 "claimed_at": 5}}
    assert vm_records.complete(claimed, RUNNING, "hv3")["if_value"] == claimed["value"]
    assert vm_records.complete(claimed, RUNNING, "hv1")["value"] == {"host": "hv1",
                                                                     "state": "running"}


def test_what_is_not_a_state_or_not_a_claim_or_not_read_is_refused_naming_the_vm():
    with pytest.raises(RecordError, match=r"^web: 'sleeping' is not a record state \(one of "
                                          r"running, starting"):
        vm_records.change(entry(RUNNING), "sleeping", "hv1")
    with pytest.raises(RecordError, match=r"^web: 'down' is not a claim \(one of starting, "
                                          r"migrating\)"):
        vm_records.claim(entry(RUNNING), DOWN, "hv1")
    with pytest.raises(RecordError, match="^web: a record stopped cannot become running"):
        vm_records.complete({"key": "/yasco/c/vms/web", "value": {"state": STOPPED}},
                            RUNNING, "hv1")
    with pytest.raises(RecordError, match="^web: its status entry has no record_revision: "
                                          "read it with yasco.cluster.cluster_status"):
        vm_records.change({"name": "web", "record": None}, STARTING, "hv1")
    assert CLAIMS == (STARTING, MIGRATING)


def test_an_emergency_record_is_written_whatever_was_there():
    assert vm_records.overwrite("/yasco/c/vms/web", STOPPED, "hv1", by="emergency") == {
        "key": "/yasco/c/vms/web", "value": {"host": "hv1", "state": "stopped",
                                             "by": "emergency"}}
    with pytest.raises(RecordError, match="^web: 'off' is not a record state"):
        vm_records.overwrite("/yasco/c/vms/web", "off", "hv1")
