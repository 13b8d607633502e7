"""The HA reconciler's decisions over random clusters, judged by an oracle written
here from the docs and the record states, that calls none of the reconciler's own
helpers: hosts with capacities, some down, draining, drained, fenced or cut off from
Ceph; HA, plain and preemptible VMs with sizes and anti-affinity labels; records in
every state; domains running here and there. One decision's starts fit every target
(what runs there, what etcd records as meant to run there, the decision's earlier
starts) and share no anti-affinity label with it, never go to a host that may not
take VMs, never touch a VM the evacuation owns, and once carried out leave nothing
more to do for those VMs. Each property is shown to catch a reconciler with a fault
planted in it."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import reconciler
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import decide
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)

HOSTS = ("hv1", "hv2", "hv3", "hv4")
RESOURCES = ("vcpus", "memory_mb")
# Record states that say a VM is meant to run on the recorded host, or is claimed for
# it (docs/etcd-schema.md, vms/<vm>).
MEANT_TO_RUN = ("running", "starting", "migrating")
STATES = ("running", "running", "starting", "migrating", "stopped", "down", "preempted",
          "failed", None)
STARTS = ("restart", "relocate")
# What a host's keys in etcd say, as observe() reads them, for each condition.
CONDITIONS = {
    "up": {"alive": True},
    "down": {"registered": {"address": "10.0.0.1"}},
    "down in maintenance, uncleanly": {"maintenance": True,
                                       "registered": {"address": "10.0.0.1"}},
    "stopped in maintenance": {"maintenance": True,
                               "registered": {"address": "10.0.0.1", "stopped": "then"}},
    "shut down by its agent": {"maintenance": True, "off": []},
    "draining": {"alive": True, "maintenance": True},
    "drained": {"alive": True, "maintenance": True},
    "fenced": {"fenced": True},
    "fenced, its agent back": {"alive": True, "fenced": True},
    "cut off from Ceph": {"alive": True, "storage": "lost"},
}
EXAMPLES = 1000
# How many generated clusters a planted fault may take to be caught.
WITHIN = 500


def cluster_of(seed: int):
    """`observed` as decide() takes it, with what memory holds of earlier starts, the
    policy, and whether a first look came 1000 s before the one judged: four hosts,
    up to seven VMs, drawn from `seed` (hypothesis draws the seed: a cluster drawn
    value by value took it twenty times as long to make as decide() to judge)."""
    rng = random.Random(seed)
    conditions = {h: rng.choice(["up"] * 4 + list(CONDITIONS)) for h in HOSTS}
    view = {"hosts": {h: {"vcpus": rng.choice([2, 4, 4, 8]),
                          "memory_mb": rng.choice([2048, 4096, 4096, 8192])}
                      for h in HOSTS}, "vms": {}}
    observed = {"hosts": {h: copy.deepcopy(CONDITIONS[c]) for h, c in conditions.items()},
                "domains": {h: {} for h in HOSTS}, "records": {}, "requested": {},
                "restarts": {}, "vdm": view, "disarmed": False}
    attempts = {}
    for name in [f"vm{i}" for i in range(rng.randint(1, 7))]:
        entry = {"kind": rng.choice(["ha", "ha", "ha", "plain", "preemptible"]),
                 "priority": rng.randint(0, 2), "vcpus": rng.randint(1, 4),
                 "memory_mb": rng.choice([512, 1024, 2048, 3072]),
                 "home": rng.choice(HOSTS), "chain": rng.sample(HOSTS, rng.randint(0, 3))}
        labels = rng.choice([[], [], ["web"], ["db"], ["web", "db"]])
        if labels:
            entry["anti_affinity"] = labels
        if rng.random() < 0.25:
            entry["allowed"] = sorted(rng.sample(HOSTS, rng.randint(1, len(HOSTS))))
        view["vms"][name] = entry
        host = entry["home"] if rng.random() < 0.5 else rng.choice(HOSTS)
        state = rng.choice(STATES)
        record = {"host": host} if state is None else {"host": host, "state": state}
        if state == "migrating":
            record["to"] = rng.choice(HOSTS)
        observed["records"][name] = (record, rng.randint(1, 50))
        # Mostly where its record says, when it is meant to run; anywhere else too.
        where = rng.sample(HOSTS, rng.choice([0, 0, 1, 1, 2]))
        if state in MEANT_TO_RUN and rng.random() < 0.5:
            where = [host]
        for h in where:
            if conditions[h] != "drained":
                observed["domains"][h][name] = "running"
        if conditions[host] == "shut down by its agent" and rng.random() < 0.5:
            observed["hosts"][host]["off"].append(name)
        if rng.random() < 0.25:
            observed["requested"][name] = rng.choice(["started", "stopped", "disabled",
                                                      "ignored"])
        if rng.random() < 0.2:
            observed["restarts"][name] = {rng.choice(HOSTS): {
                "state": rng.choice(["restarting", "restarted", "declined"]),
                "count": rng.randint(0, 2), "mod_revision": rng.randint(0, 9)}}
        if rng.random() < 0.25:
            attempts[name] = [(990.0, rng.choice(HOSTS), rng.choice(STARTS))]
    # At once (no grace, no start timeout), or after a first look 1000 s before.
    waits = rng.random() < 0.5
    policy = Policy() if waits else Policy(grace=0, start_timeout=0)
    return observed, attempts, policy, waits


def clusters():
    return st.integers(0, 2 ** 32 - 1).map(cluster_of)


def decided(case) -> tuple[dict, Memory, dict]:
    """The decision judged: at 1000 s, after a first look at 0 s when the policy
    waits. Returns the cluster as it was decided on, the memory after, the decision."""
    observed, attempts, policy, waits = case
    observed = copy.deepcopy(observed)
    memory = Memory(attempts=copy.deepcopy(attempts))
    if waits:
        decide(observed, memory, policy, 0.0)
    return observed, memory, decide(observed, memory, policy, 1000.0)


# -- the oracle: what the cluster says, read here from `observed` ----------------------

def _alive(observed, host) -> bool:
    return bool(observed["hosts"].get(host, {}).get("alive"))


def _size(observed, vm) -> dict[str, float]:
    entry = observed["vdm"]["vms"].get(vm, {})
    return {r: float(entry.get(r) or 0) for r in RESOURCES}


def _capacity(observed, host) -> dict[str, float]:
    entry = observed["vdm"]["hosts"].get(host, {})
    return {r: float(entry.get(r, float("inf"))) for r in RESOURCES}


def _labels(observed, vm) -> set[str]:
    return set(observed["vdm"]["vms"].get(vm, {}).get("anti_affinity", []))


def _kind(observed, vm) -> str | None:
    return observed["vdm"]["vms"].get(vm, {}).get("kind")


def _there(observed, host, migrating_to: bool = False) -> set[str]:
    """The VMs host holds or has been promised: those its agent runs (a live host's),
    those whose record says they are meant to run there, and with `migrating_to` those
    under way there by a live migration."""
    held = set(observed["domains"].get(host, {})) if _alive(observed, host) else set()
    for vm, (record, dummy) in observed["records"].items():
        if record.get("state") in MEANT_TO_RUN and record.get("host") == host:
            held.add(vm)
        if migrating_to and record.get("state") == "migrating" and record.get("to") == host:
            held.add(vm)
    return held


def _running(observed, vm) -> list[str]:
    return [h for h in sorted(observed["domains"]) if _alive(observed, h)
            and vm in observed["domains"][h]]


def _starts(observed, steps, migrating_to: bool = False):
    """Each start of the decision in order, with what its target then holds: before
    it (the decision's earlier starts and preemptions counted) and after it. Also
    what is wrong with its preemptions: a VM that is not a preemptible VM there."""
    held = {h: _there(observed, h, migrating_to) for h in observed["vdm"]["hosts"]}
    for step in steps:
        if step["action"] not in STARTS:
            continue
        target = step["to"]
        here = held.setdefault(target, set())
        wrong = [f"{step['vm']} preempts {p}, not a preemptible VM on {target}"
                 for p in step["preempt"]
                 if _kind(observed, p) != "preemptible" or p not in here]
        here -= set(step["preempt"])
        before = set(here)
        here.add(step["vm"])
        yield step, target, before, set(here), wrong


def over_capacity(observed, steps, migrating_to: bool = False) -> list[str]:
    """Starts that bring a VM to a host it takes past its capacity."""
    wrong = []
    for step, target, before, after, preempting in _starts(observed, steps, migrating_to):
        wrong += preempting
        if step["vm"] in before:
            continue  # already counted there: its start takes no more
        cap = _capacity(observed, target)
        used = {r: sum(_size(observed, vm)[r] for vm in after) for r in RESOURCES}
        over = [f"{r} {used[r]:g} > {cap[r]:g}" for r in RESOURCES if used[r] > cap[r]]
        if over:
            wrong.append(f"{step['action']} of {step['vm']} to {target}, which then holds "
                         f"{sorted(after)}: {', '.join(over)}")
    return wrong


def anti_affinity_broken(observed, steps) -> list[str]:
    """Starts that bring a VM to a host that holds another VM with one of its labels."""
    wrong = []
    for step, target, before, dummy, dummy in _starts(observed, steps):
        if step["vm"] in before:
            continue
        mine = _labels(observed, step["vm"])
        for other in sorted(before):
            shared = mine & _labels(observed, other)
            if shared:
                wrong.append(f"{step['action']} of {step['vm']} to {target}, where "
                             f"{other} shares {sorted(shared)}")
    return wrong


def unfit_targets(observed, steps) -> list[str]:
    """Starts on a host that is down, in maintenance (draining or drained), fenced,
    cut off from Ceph or unknown to the map; relocations to a host the VM is not
    allowed on."""
    wrong = []
    for step in steps:
        if step["action"] not in STARTS:
            continue
        target = step["to"]
        host = observed["hosts"].get(target, {})
        why = [why for why, bad in (
            ("down", not host.get("alive")), ("in maintenance", host.get("maintenance")),
            ("fenced", host.get("fenced")), ("cut off from Ceph", host.get("storage") == "lost"),
            ("not in the map", target not in observed["vdm"]["hosts"])) if bad]
        allowed = observed["vdm"]["vms"][step["vm"]].get("allowed")
        if step["action"] == "relocate" and allowed and target not in allowed:
            why.append(f"not among the hosts it may run on {allowed}")
        if why:
            wrong.append(f"{step['action']} of {step['vm']} to {target}: {', '.join(why)}")
    return wrong


def evacuations_taken(observed, steps) -> list[str]:
    """Steps for a VM whose record says it is meant to run on a host that is down: the
    evacuation fences that host and moves the VM, and only it. Allowed: a start of a
    VM that host's agent shut down as the host went down (it is known off), and a
    stop or a confirmation of a VM that runs on a live host."""
    wrong = []
    for step in steps:
        record = observed["records"][step["vm"]][0]
        host = record.get("host")
        if record.get("state") not in MEANT_TO_RUN or _alive(observed, host):
            continue
        running = _running(observed, step["vm"])
        shut_down = step["vm"] in observed["hosts"].get(host, {}).get("off", [])
        if step["action"] in ("stop", "confirm") and running:
            continue
        if step["action"] in (*STARTS, "fail") and shut_down and not running:
            continue
        wrong.append(f"{step['action']} of {step['vm']}, recorded {record.get('state')} "
                     f"on {host}, which is down")
    return wrong


def carried_out(observed, steps) -> dict:
    """The cluster once recover_vm.yml has done `steps`: each start claimed and its VM
    running on its target, its preempted VMs stopped there; a stop done; a failure
    and a confirmation recorded. Each write gives its record a new revision."""
    after = copy.deepcopy(observed)
    revision = 1 + max((r for dummy, r in observed["records"].values()), default=0)

    def record(vm, value):
        nonlocal revision
        after["records"][vm] = (value, revision)
        revision += 1

    for step in steps:
        vm, was = step["vm"], after["records"][step["vm"]][0]
        if step["action"] in STARTS:
            target = step["to"]
            for other in step["preempt"]:
                after["domains"].get(target, {}).pop(other, None)
                record(other, {"host": target, "state": "preempted"})
            record(vm, {"host": target, "state": "running"})
            after["domains"].setdefault(target, {})[vm] = "running"
        elif step["action"] == "stop":
            for h in step["hosts"]:
                after["domains"].get(h, {}).pop(vm, None)
            record(vm, {"host": was.get("host"), "state": "stopped"})
        elif step["action"] == "fail":
            record(vm, {"host": was.get("host"), "state": "failed", "reason": step["reason"]})
        elif step["action"] == "confirm":
            record(vm, {"host": step["to"] or was.get("host"), "state": "running"})
    return after


def not_converged(observed, memory, policy, decision) -> list[str]:
    """Steps for the same VMs once the decision is carried out, decided again at once
    (waits are fine: a failed VM waits for its retry)."""
    again = decide(carried_out(observed, decision["steps"]), memory, policy, 1000.0)
    acted = {step["vm"]: step for step in decision["steps"]}
    return [f"{acted[s['vm']]['action']} of {s['vm']} to {acted[s['vm']]['to']}, then "
            f"{s['action']} to {s['to']}: {s['reason']}"
            for s in again["steps"] if s["vm"] in acted]


def capacity_wrong(case) -> list[str]:
    observed, dummy, decision = decided(case)
    return over_capacity(observed, decision["steps"])


def destination_wrong(case) -> list[str]:
    observed, dummy, decision = decided(case)
    return over_capacity(observed, decision["steps"], migrating_to=True)


def anti_affinity_wrong(case) -> list[str]:
    observed, dummy, decision = decided(case)
    return anti_affinity_broken(observed, decision["steps"])


def target_wrong(case) -> list[str]:
    observed, dummy, decision = decided(case)
    return unfit_targets(observed, decision["steps"])


def evacuation_wrong(case) -> list[str]:
    observed, dummy, decision = decided(case)
    return evacuations_taken(observed, decision["steps"])


def convergence_wrong(case) -> list[str]:
    observed, memory, decision = decided(case)
    return not_converged(observed, memory, case[2], decision)


PROPERTIES = settings(max_examples=EXAMPLES, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(clusters())
def test_a_decisions_starts_fit_every_target_with_what_it_holds_and_earlier_starts(case):
    assert capacity_wrong(case) == []


# A live migration's claim (a record `migrating` from its host `to` another) holds
# room on both ends until it lands: a start must count it on its destination too
# (once, the reconciler counted it on its source alone, and relocated db beside web
# on a host with room for one of them).


def migration_under_way():
    hosts = {h: {"vcpus": 4, "memory_mb": 4096} for h in ("hv1", "hv2")}
    observed = {"hosts": {h: {"alive": True} for h in hosts},
                "domains": {"hv1": {}, "hv2": {"web": "running"}},
                "records": {"web": ({"host": "hv2", "state": "migrating", "to": "hv1"}, 7),
                            "db": ({"host": "hv1", "state": "down"}, 8)},
                "requested": {}, "restarts": {}, "disarmed": False,
                "vdm": {"hosts": hosts, "vms": {
                    "web": {"kind": "ha", "priority": 0, "vcpus": 2, "memory_mb": 2048,
                            "home": "hv1", "chain": ["hv2"]},
                    "db": {"kind": "ha", "priority": 0, "vcpus": 2, "memory_mb": 3072,
                           "home": "hv1", "chain": ["hv2"]}}}}
    return observed, {}, Policy(), False


def test_a_start_keeps_room_for_a_live_migration_under_way_to_its_target():
    assert capacity_wrong(migration_under_way()) == []  # the source counts it
    assert destination_wrong(migration_under_way()) == []


@PROPERTIES
@given(clusters())
def test_a_decisions_starts_keep_room_for_the_live_migrations_under_way_to_a_target(case):
    assert destination_wrong(case) == []


@PROPERTIES
@given(clusters())
def test_no_start_brings_a_vm_next_to_one_that_shares_an_anti_affinity_label(case):
    assert anti_affinity_wrong(case) == []


@PROPERTIES
@given(clusters())
def test_no_start_targets_a_host_down_draining_drained_fenced_or_cut_off(case):
    assert target_wrong(case) == []


@PROPERTIES
@given(clusters())
def test_no_step_touches_a_vm_that_the_evacuation_of_its_failed_host_owns(case):
    assert evacuation_wrong(case) == []


@PROPERTIES
@given(clusters())
def test_a_decision_carried_out_leaves_no_step_for_its_vms(case):
    assert convergence_wrong(case) == []


# -- each property, shown to catch a planted fault --------------------------------------

def counterexample(prop):
    """The first of the clusters drawn from seeds 0 to WITHIN - 1 on which `prop`
    finds a fault, and what it finds; the test fails when it finds none."""
    for seed in range(WITHIN):
        wrong = prop(cluster_of(seed))
        if wrong:
            return wrong
    pytest.fail(f"{prop.__name__} found nothing wrong in {WITHIN} clusters")


def test_the_capacity_property_catches_a_reconciler_that_forgets_earlier_steps(monkeypatch):
    # What a start takes is no longer subtracted for the VMs after it.
    monkeypatch.setattr(reconciler, "take", lambda *args: True)
    wrong = counterexample(capacity_wrong)
    assert " > " in wrong[0], wrong


def test_the_capacity_property_catches_a_reconciler_that_forgets_the_records(monkeypatch):
    # Room counted from the running domains alone: a VM claimed or recorded running on
    # a host (starting there, or down with it a moment) takes nothing.
    host_loads = reconciler.host_loads
    monkeypatch.setattr(reconciler, "host_loads", lambda observed, on: host_loads(
        {**observed, "records": {}}, on))
    wrong = counterexample(capacity_wrong)
    assert " > " in wrong[0], wrong


def test_the_anti_affinity_property_catches_a_reconciler_that_drops_labels(monkeypatch):
    first_room = reconciler.first_room
    monkeypatch.setattr(reconciler, "first_room",
                        lambda vm, entry, usable, free, preemptible, labels, vms, exclude=():
                        first_room(vm, entry, usable, free, preemptible, {}, vms, exclude))
    wrong = counterexample(anti_affinity_wrong)
    assert " shares " in wrong[0], wrong


def test_the_target_property_catches_a_reconciler_that_takes_any_host(monkeypatch):
    monkeypatch.setattr(reconciler, "usable_hosts", lambda observed: set(observed["hosts"]))
    wrong = counterexample(target_wrong)
    assert any(why in wrong[0] for why in ("down", "maintenance", "fenced", "Ceph")), wrong


def test_the_evacuation_property_catches_a_reconciler_that_relocates_a_failed_hosts_vms(
        monkeypatch):
    # A VM recorded running is no longer "meant to run" there: one on a failed host
    # looks down, and is started elsewhere while the evacuation moves it too.
    monkeypatch.setattr(reconciler, "ACTIVE", ("starting", "migrating"))
    wrong = counterexample(evacuation_wrong)
    assert "recorded running on" in wrong[0] and "which is down" in wrong[0], wrong


def test_the_convergence_property_catches_a_reconciler_blind_to_what_it_started(
        monkeypatch):
    monkeypatch.setattr(reconciler, "where_running", lambda observed: {})
    wrong = counterexample(convergence_wrong)
    assert ", then " in wrong[0], wrong


def test_the_oracle_applies_a_decision_as_recover_vm_does():
    """carried_out, on a decision with each kind of step: what the next look sees."""
    observed = {"hosts": {"hv1": {"alive": True}, "hv2": {"alive": True}},
                "domains": {"hv1": {"a": "running"}, "hv2": {"p": "running"}},
                "records": {"a": ({"host": "hv1", "state": "running"}, 3),
                            "b": ({"host": "hv1", "state": "down"}, 4),
                            "c": ({"host": "hv2", "state": "running"}, 5),
                            "p": ({"host": "hv2", "state": "running"}, 6)},
                "vdm": {"hosts": {}, "vms": {}}}
    steps = [{"action": "stop", "vm": "a", "to": None, "hosts": ["hv1"], "preempt": []},
             {"action": "relocate", "vm": "b", "to": "hv2", "preempt": ["p"]},
             {"action": "fail", "vm": "c", "to": None, "reason": "no room"}]
    after = carried_out(observed, steps)
    assert after["domains"] == {"hv1": {}, "hv2": {"b": "running"}}
    assert after["records"] == {
        "a": ({"host": "hv1", "state": "stopped"}, 7),
        "b": ({"host": "hv2", "state": "running"}, 9),
        "c": ({"host": "hv2", "state": "failed", "reason": "no room"}, 10),
        "p": ({"host": "hv2", "state": "preempted"}, 8)}
    assert observed["domains"]["hv1"] == {"a": "running"}, "the cluster given is left as it was"
