"""What the cluster report shows (module_utils/report/cluster_report.py and
cluster_report_incident.py), from a VDM the real planner made and histories written
out as events: bars that fill each host's capacity, a failure set as the evacuation
reads it, the latest incident."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.planner import vdm_document
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import (
    RESOURCES, ReportError, build, capacity_bars, default_failure_set, failure_set)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_incident import (
    latest_incident)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan

from .report_sample import HOSTS, VMS

T0 = 1_790_000_000.0


@pytest.fixture(name="vdm", scope="module")
def fixture_vdm() -> dict:
    problem = load_problem(HOSTS, {"yasco_vms": VMS})
    vdm = vdm_document.build(problem, plan(problem), None)
    assert check(problem, vdm) == []
    # The cluster this test needs: some failure preempts, some moves nothing.
    assert any(vdm["preempt"].values()) and any(vdm["failover"].values())
    return vdm


def event(seconds: float, kind: str, **fields) -> dict:
    """A history event `seconds` after T0, as cluster_status returns it."""
    record = cluster_events.event(kind, at=T0 + seconds, **fields)
    return {"key": f"/yasco/c1/history/{int((T0 + seconds) * 1e9)}", **record}


def by_key(events: list[dict]) -> list[dict]:
    """As etcd returns them: in the order they were written."""
    return sorted(events, key=lambda e: e["key"])


# -- capacity -------------------------------------------------------------------------

def test_each_hosts_bars_fill_exactly_its_capacity(vdm):
    bars = capacity_bars(vdm)
    assert {(b.host, b.resource) for b in bars} == {(h, r) for h in HOSTS for r in RESOURCES}
    for box in bars:
        assert box.capacity == vdm["hosts"][box.host][box.resource]
        assert box.segments[0].start == 0
        for before, after in zip(box.segments, box.segments[1:]):
            assert after.start == pytest.approx(before.end)
        assert box.segments[-1].end == pytest.approx(box.capacity)
        assert sum(s.size for s in box.segments) == pytest.approx(box.capacity)


def test_every_vm_is_drawn_once_in_its_homes_bar_at_its_size(vdm):
    for resource in RESOURCES:
        drawn = [(s.vm, b.host, s.size, s.kind) for b in capacity_bars(vdm)
                 if b.resource == resource for s in b.segments if s.vm]
        assert sorted(drawn) == sorted(
            (name, home, vdm["vms"][name][resource], vdm["vms"][name]["kind"])
            for name, home in vdm["home"].items())


def test_ha_then_plain_vms_come_first_and_the_spare_starts_where_they_end(vdm):
    for box in capacity_bars(vdm):
        kinds = [s.kind for s in box.segments]
        order = ["ha", "plain", "preemptible", "spare", "free"]
        assert kinds == sorted(kinds, key=order.index), box
        assert box.reserve == vdm["reserve"].get(box.host, {}).get(box.resource, 0)
        assert box.reserve_start == pytest.approx(box.used("ha", "plain"))
        # The VDM's invariant: the VMs that never stop and the spare fit together.
        assert box.reserve_start + box.reserve <= box.capacity + 1e-9


def test_preemptible_vms_run_inside_the_spare_which_is_drawn_only_where_they_leave_room(vdm):
    bars = capacity_bars(vdm)
    assert any(b.reserve > 0 and b.used("preemptible") > 0 for b in bars)
    for box in bars:
        preemptible = [s for s in box.segments if s.kind == "preemptible"]
        if preemptible:
            assert preemptible[0].start == pytest.approx(box.reserve_start)
        assert box.room("spare") == pytest.approx(
            max(0.0, box.reserve - box.used("preemptible")))
        assert box.room("free") == pytest.approx(
            box.capacity - box.reserve_start - max(box.reserve, box.used("preemptible")))


def test_a_vm_homed_on_no_planned_host_is_refused(vdm):
    broken = {**vdm, "home": {**vdm["home"], "web1": "hv9"}}
    with pytest.raises(ReportError, match="web1's home hv9 is not in hosts"):
        capacity_bars(broken)
    with pytest.raises(ReportError, match="not a VDM"):
        capacity_bars({"home": {}})
    with pytest.raises(ReportError, match="no hypervisors"):
        build({"hosts": {}, "vms": {}, "home": {}}, [])


# -- a failure set -------------------------------------------------------------------

def test_the_default_failure_set_is_the_first_single_host_that_moves_a_vm(vdm):
    chosen = default_failure_set(vdm)
    first = sorted(k for k, moves in vdm["failover"].items() if "," not in k and moves)[0]
    assert chosen == [first]
    assert default_failure_set({**vdm, "failover": {"hv2": {}, "hv1": {}}}) == ["hv1"]
    assert default_failure_set({**vdm, "failover": {}}) is None
    assert build(vdm, []).failure.failed == (first,)


@pytest.mark.parametrize("failed", [["hv1"], ["hv2"], ["hv3"], ["hv1", "hv2"]])
def test_the_moves_are_vdm_failovers_and_the_bars_show_them(vdm, failed):
    shown = failure_set(vdm, failed)
    # What the filter vdm_failover returns (it checks its input, then calls this).
    expected = vdm_document.failover_for(vdm, failed)
    assert shown.key == expected["failed"] and shown.planned == expected["planned"]
    assert shown.moves() == expected["targets"]
    assert sorted(f.vm for f in shown.fates if f.fate == "stopped") == sorted(
        expected["preempt"])
    on_failed = sorted(n for n, h in vdm["home"].items() if h in failed)
    assert sorted(f.vm for f in shown.fates if f.fate in ("moves", "down")) == on_failed
    for box in shown.bars:
        if box.host in failed:
            assert box.failed
            assert {s.vm: s.peer for s in box.segments if s.state == "moved"} == {
                vm: target for vm, target in expected["targets"].items()
                if vdm["home"][vm] == box.host}
            continue
        arriving = {s.vm: s.peer for s in box.segments if s.state == "incoming"}
        assert arriving == {vm: vdm["home"][vm] for vm, target in expected["targets"].items()
                            if target == box.host}
        running = [s for s in box.segments if s.state != "stopped"]
        assert running[-1].end == pytest.approx(box.capacity)
        assert sum(s.size for s in running) == pytest.approx(box.capacity)


def test_preempted_vms_are_shown_stopped_past_the_capacity_and_plain_vms_down(vdm):
    failed = next(k for k, stopped in vdm["preempt"].items() if stopped and "," not in k)
    shown = failure_set(vdm, [failed])
    for name in vdm["preempt"][failed]:
        host = vdm["home"][name]
        for box in (b for b in shown.bars if b.host == host):
            mine = [s for s in box.segments if s.vm == name]
            assert [s.state for s in mine] == ["stopped"]
            assert mine[0].start >= box.capacity
    plain = [n for n, h in vdm["home"].items()
             if h == failed and vdm["vms"][n]["kind"] != "ha"]
    assert plain
    assert {f.vm: (f.fate, f.target) for f in shown.fates if f.vm in plain} == {
        n: ("down", None) for n in plain}
    assert {s.vm for b in shown.bars if b.host == failed for s in b.segments
            if s.state == "down"} == set(plain)


def test_a_failure_set_naming_an_unknown_host_is_refused(vdm):
    with pytest.raises(ReportError, match="hv9 is not a hypervisor of this VDM"):
        failure_set(vdm, ["hv1", "hv9"])
    with pytest.raises(ReportError, match="hv9"):
        build(vdm, [], failed="hv9")


def test_failed_hosts_may_be_given_as_a_comma_separated_string(vdm):
    assert build(vdm, [], failed="hv3,hv1").failure.key == "hv1,hv3"


# -- the latest incident -------------------------------------------------------------

def earlier_incident() -> list[dict]:
    return [event(0, "started", vm="web1", host="hv1", by="provision"),
            event(100, "fenced", host="hv3", by="evacuate"),
            event(100.1, "evacuated", vm="web1", host="hv2", by="evacuate"),
            event(400, "migrated", vm="web1", host="hv3", by="return_home"),
            event(410, "unfenced", host="hv3", by="return_home"),
            event(410.1, "started", vm="tools1", host="hv3", by="return_home")]


def latest() -> list[dict]:
    return [event(1000, "fenced", host="hv1", by="evacuate"),
            event(1000.02, "preempted", vm="batch2", host="hv2", by="evacuate"),
            event(1000.05, "evacuated", vm="db1", host="hv2", by="evacuate"),
            event(1000.06, "evacuated", vm="web2", host="hv2", by="evacuate"),
            event(1250, "migrated", vm="db1", host="hv1", by="return_home"),
            event(1254, "migrated", vm="web2", host="hv1", by="return_home"),
            event(1262, "unfenced", host="hv1", by="return_home"),
            event(1262.1, "started", vm="tools2", host="hv1", by="return_home"),
            event(1262.2, "started", vm="batch2", host="hv2", by="return_home")]


def test_the_incident_is_the_last_failure_and_what_followed_it_alone():
    incident = latest_incident(by_key(earlier_incident() + latest()
                                      + [event(5000, "note", by="operator")]))
    assert incident.failed == ("hv1",) and incident.ended
    assert [p.key for p in incident.points] == [e["key"] for e in latest()]
    assert incident.points[0].seconds == 0 and incident.seconds == pytest.approx(262.2)
    assert [(r.kind, r.name) for r in incident.rows] == [
        ("host", "hv1"), ("vm", "batch2"), ("vm", "db1"), ("vm", "web2"), ("vm", "tools2")]
    rows = {(p.kind, incident.rows[p.row].name) for p in incident.points}
    assert ("evacuated", "db1") in rows and ("unfenced", "hv1") in rows
    # Nothing of the earlier incident, nor what came after the return home.
    assert not {"web1", "hv3", "tools1"} & {r.name for r in incident.rows}


def test_an_incident_not_over_runs_to_the_last_event():
    events = by_key(earlier_incident() + latest()[:4] + [event(1100, "note", by="operator")])
    incident = latest_incident(events)
    assert incident.failed == ("hv1",) and not incident.ended
    assert incident.points[-1].kind == "note"
    assert incident.seconds == pytest.approx(100)


def test_hosts_that_fail_before_the_first_is_back_are_one_incident():
    events = latest()[:4] + [event(1030, "fenced", host="hv3", by="evacuate"),
                             event(1030.1, "evacuated", vm="web1", host="hv2", by="evacuate")]
    incident = latest_incident(by_key(earlier_incident() + events))
    assert incident.failed == ("hv1", "hv3") and not incident.ended
    assert incident.points[0].kind == "fenced" and incident.points[0].host == "hv1"
    assert [r.name for r in incident.rows[:2]] == ["hv1", "hv3"]


def test_a_self_fence_recorded_on_return_counts_from_when_the_agent_fenced():
    # The agent records its own fence once it is back, with the time it fenced: it
    # comes after the evacuation's events in etcd, before them in time.
    self_fenced = cluster_events.event("self-fenced", host="hv1", by="agent", at=T0 + 997)
    events = by_key(earlier_incident() + latest()) + [
        {"key": "/yasco/c1/history/9999999999999999999", **self_fenced}]
    incident = latest_incident(events)
    assert incident.points[0].kind == "self-fenced" and incident.points[0].seconds == 0
    assert incident.points[1].kind == "fenced" and incident.points[1].seconds == pytest.approx(3)
    assert incident.ended


def test_no_failure_in_the_history_is_no_incident():
    assert latest_incident([]) is None
    assert latest_incident([event(0, "started", vm="web1", host="hv1", by="provision"),
                            event(5, "migrated", vm="web1", host="hv2", by="rebalance")]) is None
    # An event whose time cannot be read is left out, not an error.
    assert latest_incident([{"key": "k", "kind": "fenced", "host": "hv1", "at": "never"}]) is None


def test_event_times_in_any_zone_are_read_as_moments():
    earlier = datetime.datetime.fromtimestamp(T0, tz=datetime.timezone.utc)
    paris = earlier.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    incident = latest_incident([
        {"key": "a", "kind": "fenced", "host": "hv1", "at": earlier.isoformat()},
        {"key": "b", "kind": "unfenced", "host": "hv1",
         "at": (paris + datetime.timedelta(seconds=30)).isoformat()}])
    assert incident.ended and incident.seconds == pytest.approx(30)


def test_what_the_evacuation_recorded_just_before_its_fence_is_part_of_the_incident():
    # As evacuate.yml writes them: the preemption first, then the fence and the starts.
    preempted = event(999.9, "preempted", vm="batch2", host="hv2", by="evacuate")
    events = by_key(earlier_incident() + [preempted] + [
        e for e in latest() if e["kind"] != "preempted"])
    incident = latest_incident(events)
    assert incident.points[0].kind == "preempted" and incident.points[0].seconds == 0
    assert [p.kind for p in incident.points[:2]] == ["preempted", "fenced"]
    # The return home of the earlier incident stays out.
    assert "tools1" not in {r.name for r in incident.rows}
