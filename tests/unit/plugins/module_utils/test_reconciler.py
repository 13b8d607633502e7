"""The HA reconciler's decisions, driven through Proxmox-style scenarios on a fake
clock: a VM that dies on a live host, one that keeps dying, a start that fails or
never finishes, more failures than planned, requested states, targets that are
drained or fenced, and safety properties over random clusters."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import decide
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    failures_tolerated, ha_vms, observe, usable_hosts)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import ha_view

HOSTS = ("hv1", "hv2", "hv3")


def cluster(**vms) -> dict:
    """Three hosts of 4 GiB; `vms` maps a name to (kind, home, chain, memory_mb); every
    VM recorded running at home, and running there."""
    view = {"hosts": {h: {"vcpus": 8, "memory_mb": 4096} for h in HOSTS}, "vms": {}}
    observed = {"hosts": {h: {"alive": True} for h in HOSTS}, "domains": {h: {} for h in HOSTS},
                "records": {}, "requested": {}, "vdm": view, "disarmed": False}
    for name, (kind, home, chain, memory) in vms.items():
        view["vms"][name] = {"kind": kind, "priority": 0, "vcpus": 1, "memory_mb": memory,
                             "home": home, "chain": list(chain)}
        observed["records"][name] = ({"host": home, "state": "running"}, 10)
        observed["domains"][home][name] = "running"
    return observed


def dies(observed: dict, vm: str) -> None:
    host = observed["records"][vm][0]["host"]
    observed["domains"][host].pop(vm)


def claimed(observed: dict, step: dict, revision: int) -> None:
    """What recover_vm.yml's claim does: the record says starting on the target."""
    observed["records"][step["vm"]] = ({"host": step["to"], "state": "starting",
                                        "from": step["from"]}, revision)


def started(observed: dict, vm: str, host: str, revision: int) -> None:
    observed["records"][vm] = ({"host": host, "state": "running"}, revision)
    observed["domains"][host][vm] = "running"


def test_a_vm_that_dies_on_a_live_host_is_restarted_in_place_after_the_grace():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    dies(observed, "web")
    first = decide(observed, memory, policy, now=100.0)
    assert first["steps"] == [] and first["wake"] == 100.0 + policy.grace
    (step,) = decide(observed, memory, policy, now=100.0 + policy.grace)["steps"]
    assert (step["action"], step["from"], step["to"]) == ("restart", "hv1", "hv1")
    assert "not running on hv1" in step["reason"]
    assert step["record"] == {"host": "hv1", "state": "running"} and step["revision"] == 10


def test_a_vm_that_comes_back_within_the_grace_is_left_alone():
    observed, memory = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory()
    dies(observed, "web")
    decide(observed, memory, Policy(), now=0.0)
    started(observed, "web", "hv1", 10)
    assert decide(observed, memory, Policy(), now=5.0)["steps"] == []
    dies(observed, "web")  # a new outage counts its grace afresh
    assert decide(observed, memory, Policy(), now=6.0)["steps"] == []


def test_a_step_goes_out_once_per_record_revision_until_its_timeout():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    dies(observed, "web")
    decide(observed, memory, policy, now=0.0)
    assert len(decide(observed, memory, policy, now=3.0)["steps"]) == 1
    again = decide(observed, memory, policy, now=4.0)
    assert again["steps"] == [] and again["wake"] == 3.0 + policy.action_timeout
    # The run changed nothing in etcd: after the timeout it is decided afresh, and the
    # restart it was asked for counts.
    (step,) = decide(observed, memory, policy, now=3.0 + policy.action_timeout)["steps"]
    assert step["action"] == "relocate" and step["to"] == "hv2"


def test_a_vm_that_keeps_dying_is_restarted_then_relocated_along_its_chain_then_failed():
    observed = cluster(web=("ha", "hv1", ["hv2", "hv3"], 1024))
    memory, policy, now, revision = Memory(), Policy(max_restart=1, max_relocate=2), 0.0, 10
    where = []
    for dummy in range(4):
        dies(observed, "web")
        decide(observed, memory, policy, now)
        now += policy.grace
        (step,) = decide(observed, memory, policy, now)["steps"]
        where.append((step["action"], step["to"]))
        if step["action"] == "fail":
            break
        revision += 1
        claimed(observed, step, revision)
        revision += 1
        started(observed, "web", step["to"], revision)
        decide(observed, memory, policy, now)  # seen running again
        now += 1
    assert where == [("restart", "hv1"), ("relocate", "hv2"), ("relocate", "hv3"),
                     ("fail", None)]


def test_restarts_are_counted_within_the_window_only():
    observed, memory = cluster(web=("ha", "hv1", [], 1024)), Memory()
    policy = Policy(max_restart=1, window=60)
    dies(observed, "web")
    decide(observed, memory, policy, 0.0)
    assert decide(observed, memory, policy, 2.0)["steps"][0]["action"] == "restart"
    started(observed, "web", "hv1", 11)
    decide(observed, memory, policy, 3.0)
    dies(observed, "web")
    decide(observed, memory, policy, 100.0)
    (step,) = decide(observed, memory, policy, 102.0)["steps"]
    assert step["action"] == "restart", "an old restart is out of the window"


def test_a_start_that_never_finishes_goes_to_the_next_host():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2", "hv3"], 1024)), Memory(), Policy()
    observed["records"]["web"] = ({"host": "hv2", "state": "starting", "from": "hv1"}, 20)
    observed["domains"]["hv1"].pop("web")
    first = decide(observed, memory, policy, 0.0)
    assert first["steps"] == [] and first["wake"] == policy.start_timeout
    (step,) = decide(observed, memory, policy, policy.start_timeout)["steps"]
    assert step["action"] == "relocate" and step["to"] not in ("hv2",)
    assert "did not finish" in step["reason"]


def test_a_vm_started_but_never_recorded_running_is_recorded_as_it_runs():
    """The run that started it lost etcd before recording it: the record says starting
    on the host where the VM runs. Left to that run for the start timeout, then
    recorded running, on the record it was decided on; a new claim starts the clock
    again."""
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    dies(observed, "web")
    observed["records"]["web"] = ({"host": "hv2", "state": "starting", "from": "hv1"}, 20)
    observed["domains"]["hv2"]["web"] = "running"
    first = decide(observed, memory, policy, 0.0)
    assert first["steps"] == [] and first["wake"] == policy.start_timeout
    observed["records"]["web"] = ({"host": "hv2", "state": "starting", "from": "hv1"}, 21)
    assert decide(observed, memory, policy, policy.start_timeout)["steps"] == []
    (step,) = decide(observed, memory, policy, 1 + 2 * policy.start_timeout)["steps"]
    assert (step["action"], step["from"], step["revision"]) == ("confirm", "hv2", 21)
    assert "unrecorded after" in step["reason"]
    # Running somewhere else than claimed is not the claimed start: left for a human.
    observed["domains"]["hv2"].pop("web")
    observed["domains"]["hv3"]["web"] = "running"
    assert decide(observed, Memory(), policy, 0.0)["steps"] == []
    assert decide(observed, Memory(), policy, 1e6)["steps"] == []


def test_a_vm_that_landed_where_its_live_migration_went_is_recorded_there():
    """The run that live-migrated it died with the source host before recording the
    move: the record says migrating from hv1 to hv2, and only hv2 runs it. Left to
    that run for the start timeout, then recorded running on hv2. While both hosts run
    a copy (a migration under way), nothing is done."""
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    observed["records"]["web"] = ({"host": "hv1", "state": "migrating", "to": "hv2"}, 30)
    observed["domains"]["hv2"]["web"] = "paused"  # the incoming copy
    assert decide(observed, memory, policy, 0.0)["steps"] == []
    assert decide(observed, memory, policy, 1e4)["steps"] == []
    dies(observed, "web")  # the source's copy gone: it crashed with hv1
    observed["hosts"]["hv1"] = {}
    observed["domains"]["hv2"]["web"] = "running"
    first = decide(observed, memory, policy, 2e4)
    assert first["steps"] == [] and first["wake"] == 2e4 + policy.start_timeout
    (step,) = decide(observed, memory, policy, 2e4 + policy.start_timeout)["steps"]
    assert (step["action"], step["from"], step["to"], step["revision"]) == (
        "confirm", "hv1", "hv2", 30)
    assert "where its live migration from hv1 went" in step["reason"]


def test_a_failed_start_recorded_down_tries_the_next_host_at_once():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2", "hv3"], 1024)), Memory(), Policy()
    dies(observed, "web")
    decide(observed, memory, policy, 0.0)
    decide(observed, memory, policy, 2.0)  # restart on hv1, which fails
    observed["records"]["web"] = ({"host": "hv1", "state": "down",
                                   "reason": "start on hv1 failed"}, 12)
    (step,) = decide(observed, memory, policy, 3.0)["steps"]
    assert step["action"] == "relocate" and step["to"] == "hv2"
    assert "start on hv1 failed" in step["reason"]


def test_vms_left_down_beyond_the_plan_start_when_a_host_has_room_highest_priority_first():
    observed = cluster(big=("ha", "hv1", [], 3000), small=("ha", "hv1", [], 1000),
                       filler=("plain", "hv2", [], 3500), other=("plain", "hv3", [], 3500))
    observed["vdm"]["vms"]["small"]["priority"] = 9
    observed["hosts"]["hv1"] = {}  # failed, and its VMs were recorded down
    for vm in ("big", "small"):
        observed["domains"]["hv1"].pop(vm)
        observed["records"][vm] = ({"host": "hv1", "state": "down"}, 30)
    assert decide(observed, Memory(), Policy(), 0.0)["steps"] == [
        s for s in decide(observed, Memory(), Policy(), 0.0)["steps"] if s["action"] == "fail"]
    observed["hosts"]["hv1"] = {"alive": True}  # it returns, empty
    steps = decide(observed, Memory(), Policy(), 1.0)["steps"]
    assert [(s["vm"], s["action"], s["to"]) for s in steps] == [
        ("small", "relocate", "hv1"), ("big", "relocate", "hv1")]


def test_a_failed_vm_is_retried_as_soon_as_a_host_becomes_usable():
    observed, memory = cluster(web=("ha", "hv1", [], 1024)), Memory()
    observed["hosts"]["hv2"]["maintenance"] = observed["hosts"]["hv3"]["fenced"] = True
    observed["records"]["web"] = ({"host": "hv1", "state": "failed", "reason": "x"}, 40)
    observed["hosts"]["hv1"]["maintenance"] = True
    observed["domains"]["hv1"].pop("web")
    first = decide(observed, memory, Policy(retry_after=300), 0.0)
    assert first["steps"] == [] and "failed" in first["standing"]["web"]
    observed["hosts"]["hv2"].pop("maintenance")
    (step,) = decide(observed, memory, Policy(retry_after=300), 10.0)["steps"]
    assert (step["action"], step["to"]) == ("relocate", "hv2")


def test_no_vm_is_started_on_a_host_in_maintenance_fenced_or_without_room():
    observed = cluster(web=("ha", "hv1", ["hv2", "hv3"], 1024), hog=("plain", "hv3", [], 3500))
    observed["hosts"]["hv2"]["maintenance"] = True
    memory = Memory(attempts={"web": [(0.0, "hv1", "restart")]})
    dies(observed, "web")
    decide(observed, memory, Policy(), 1.0)
    (step,) = decide(observed, memory, Policy(), 5.0)["steps"]
    assert step["action"] == "fail" and "no usable host" in step["reason"]
    assert usable_hosts(observed) == {"hv1", "hv3"}


def test_a_preemptible_vm_makes_room_on_the_planned_target():
    observed = cluster(web=("ha", "hv1", ["hv2"], 2048), batch=("preemptible", "hv2", [], 3000))
    memory = Memory(attempts={"web": [(0.0, "hv1", "restart")]})
    dies(observed, "web")
    decide(observed, memory, Policy(), 1.0)
    (step,) = decide(observed, memory, Policy(), 5.0)["steps"]
    assert (step["action"], step["to"], step["preempt"]) == ("relocate", "hv2", ["batch"])


def test_anti_affinity_is_kept_when_relocating():
    observed = cluster(db1=("ha", "hv1", ["hv2", "hv3"], 1024), db2=("ha", "hv2", [], 1024))
    for vm in ("db1", "db2"):
        observed["vdm"]["vms"][vm]["anti_affinity"] = ["db"]
    memory = Memory(attempts={"db1": [(0.0, "hv1", "restart")]})
    dies(observed, "db1")
    decide(observed, memory, Policy(), 1.0)
    (step,) = decide(observed, memory, Policy(), 5.0)["steps"]
    assert step["to"] == "hv3"


def test_requested_states():
    observed = cluster(a=("ha", "hv1", [], 512), b=("ha", "hv1", [], 512),
                       c=("ha", "hv1", [], 512), d=("ha", "hv1", [], 512))
    observed["requested"] = {"a": "stopped", "b": "disabled", "c": "ignored"}
    for vm in ("b", "c", "d"):
        dies(observed, vm)
    memory = Memory()
    first = decide(observed, memory, Policy(), 0.0)  # a stop needs no grace
    decision = decide(observed, memory, Policy(), 5.0)
    steps = {s["vm"]: s for s in first["steps"] + decision["steps"]}
    assert steps["a"]["action"] == "stop" and steps["a"]["hosts"] == ["hv1"]
    assert steps["d"]["action"] == "restart"
    assert set(steps) == {"a", "d"}
    assert "disabled" in decision["standing"]["b"] and "c" not in decision["standing"]
    # A stopped VM that is off, and recorded so, needs nothing more.
    observed["domains"]["hv1"].pop("a")
    observed["records"]["a"] = ({"host": "hv1", "state": "stopped"}, 50)
    assert "a" not in {s["vm"] for s in decide(observed, memory, Policy(), 200.0)["steps"]}
    # Set back to started, it is started where it was.
    observed["requested"].pop("a")
    (step,) = [s for s in decide(observed, memory, Policy(), 300.0)["steps"] if s["vm"] == "a"]
    assert (step["action"], step["to"]) == ("relocate", "hv1")


def test_nothing_is_decided_while_disarmed_or_for_a_failed_hosts_vms():
    observed = cluster(web=("ha", "hv1", ["hv2"], 1024))
    dies(observed, "web")
    observed["disarmed"] = True
    assert decide(observed, Memory(), Policy(grace=0), 10.0)["steps"] == []
    observed["disarmed"] = False
    observed["hosts"]["hv1"] = {}  # no liveness key: the evacuation's
    decision = decide(observed, Memory(), Policy(grace=0), 10.0)
    assert decision["steps"] == [] and "evacuation" in decision["standing"]["web"]


def test_a_vm_running_or_migrating_is_left_alone():
    observed = cluster(web=("ha", "hv1", ["hv2"], 1024), mig=("ha", "hv2", [], 1024))
    observed["records"]["mig"] = ({"host": "hv2", "state": "migrating", "to": "hv3"}, 7)
    observed["domains"]["hv2"].pop("mig")
    # Moved by hand: it runs on hv3 while its record says hv1.
    observed["domains"]["hv1"].pop("web")
    observed["domains"]["hv3"]["web"] = "running"
    decision = decide(observed, Memory(), Policy(grace=0), 10.0)
    assert decision["steps"] == []
    assert "runs on hv3" in decision["standing"]["web"]


def agent_says(observed: dict, vm: str, host: str, state: str, count: int) -> None:
    """What a host's agent writes of its restart in place (agent_restart.py)."""
    said = observed.setdefault("restarts", {}).setdefault(vm, {})
    said[host] = {"state": state, "count": count}


def test_the_reconciler_waits_while_the_hosts_agent_restarts_a_vm_in_place():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    dies(observed, "web")
    agent_says(observed, "web", "hv1", "restarting", 0)
    for now in (0.0, policy.grace, policy.start_timeout - 1):
        decided = decide(observed, memory, policy, now=now)
        assert decided["steps"] == [], now
        assert decided["standing"] == {"web": "hv1's agent restarts it in place"}
        assert decided["wake"] == policy.start_timeout
    # It never finished (an agent that hung): the reconciler takes over, and the
    # restart under way counts for nothing yet.
    (step,) = decide(observed, memory, policy, now=policy.start_timeout)["steps"]
    assert (step["action"], step["to"]) == ("restart", "hv1")
    # Only while the agent has said nothing more since (its key as read): the claim
    # compares it (recovery.py), as the agent's word compares the record.
    assert step["agent_restart"] == {"host": "hv1", "revision": 0}
    observed["restarts"]["web"]["hv1"]["mod_revision"] = 41
    memory = Memory()
    assert decide(observed, memory, policy, now=0.0)["steps"] == []
    (step,) = decide(observed, memory, policy, now=policy.start_timeout)["steps"]
    assert step["agent_restart"] == {"host": "hv1", "revision": 41}


def test_the_agents_restarts_in_place_count_against_max_restart():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    agent_says(observed, "web", "hv1", "restarted", 1)  # it died again after that
    dies(observed, "web")
    decide(observed, memory, policy, now=0.0)
    (step,) = decide(observed, memory, policy, now=policy.grace)["steps"]
    assert (step["action"], step["to"]) == ("relocate", "hv2")
    assert "relocation 1 of 2" in step["reason"]


def test_a_host_whose_agent_restarted_a_vm_is_not_tried_again_within_its_window():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    agent_says(observed, "web", "hv1", "restarted", 1)
    dies(observed, "web")
    decide(observed, memory, policy, now=0.0)
    (step,) = decide(observed, memory, policy, now=policy.grace)["steps"]
    assert step["to"] == "hv2"
    # The start there failed: the next host, never hv1, where it died twice.
    observed["records"]["web"] = ({"host": "hv2", "state": "down", "reason": "no secret"}, 12)
    (step,) = decide(observed, memory, policy, now=policy.grace + 5)["steps"]
    assert (step["action"], step["to"]) == ("relocate", "hv3"), step


def test_the_agent_of_another_host_counts_for_nothing_and_a_declined_restart_waits_not():
    observed, memory, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory(), Policy()
    # hv2's agent restarted it there before it was moved home; hv1's declined just now.
    agent_says(observed, "web", "hv2", "restarted", 1)
    agent_says(observed, "web", "hv1", "declined", 0)
    dies(observed, "web")
    decide(observed, memory, policy, now=0.0)
    (step,) = decide(observed, memory, policy, now=policy.grace)["steps"]
    assert (step["action"], step["to"]) == ("restart", "hv1")
    assert "(1 of 1)" in step["reason"]


def test_observe_reads_etcds_keys():
    def kv(key, value, revision=1):
        return KeyValue(key=key, value=value, mod_revision=revision, create_revision=1,
                        lease=0, version=1)

    vdm = {"version": 3, "hosts": {"hv1": {"memory_mb": 100}, "hv2": {"memory_mb": 100}},
           "vms": {"web": {"kind": "ha", "priority": 1, "memory_mb": 10}},
           "home": {"web": "hv1"}, "failover": {"hv1": {"web": "hv2"}}}
    keys = [kv(etcd_keys.alive_key("hv1"), "{}"), kv(etcd_keys.fence_key("hv2"), "{}"),
            kv(etcd_keys.alive_key("hv3"), '{"storage": "lost"}'),
            kv(etcd_keys.registered_key("hv2"), '{"address": "10.0.0.12", "stopped": "x"}'),
            kv(etcd_keys.domain_key("hv1", "web"), '{"state": "paused"}'),
            kv(etcd_keys.vm_key("web"), '{"host": "hv1", "state": "running"}', 9),
            kv(etcd_keys.requested_key("web"), '{"state": "disabled"}'),
            kv(etcd_keys.requested_key("bad"), '{"state": "sleeping"}'),
            kv(etcd_keys.restart_key("hv1", "web"), '{"state": "restarted", "count": 1}', 7),
            kv(etcd_keys.vdm_ha_key(), __import__("json").dumps(ha_view(vdm)))]
    observed = observe(keys, etcd_keys.parse_key)
    assert observed["hosts"] == {
        "hv1": {"alive": True}, "hv3": {"alive": True, "storage": "lost"},
        "hv2": {"fenced": True, "registered": {"address": "10.0.0.12", "stopped": "x"}}}
    assert usable_hosts(observed) == {"hv1"}  # hv3's agent cannot reach Ceph
    assert observed["domains"] == {"hv1": {"web": "paused"}}
    assert observed["records"] == {"web": ({"host": "hv1", "state": "running"}, 9)}
    assert observed["requested"] == {"web": "disabled"}
    assert observed["restarts"] == {"web": {"hv1": {"state": "restarted", "count": 1,
                                                    "mod_revision": 7}}}
    assert observed["vdm"]["vms"]["web"]["chain"] == ["hv2"]
    assert observed["vdm"]["vms"]["web"]["home"] == "hv1"


# -- properties over random clusters ---------------------------------------------------

states = st.sampled_from(["running", "starting", "down", "stopped", "failed", "migrating"])


@st.composite
def random_cluster(draw):
    names = [f"vm{i}" for i in range(draw(st.integers(1, 6)))]
    vms = {n: (draw(st.sampled_from(["ha", "ha", "plain", "preemptible"])),
               draw(st.sampled_from(HOSTS)), draw(st.lists(st.sampled_from(HOSTS),
                                                           max_size=2, unique=True)),
               draw(st.sampled_from([256, 1024, 3000]))) for n in names}
    observed = cluster(**vms)
    for host in HOSTS:
        observed["hosts"][host] = {k: True for k in ("alive", "maintenance", "fenced")
                                   if draw(st.booleans()) or k == "alive" and draw(st.booleans())}
    for name in names:
        host = draw(st.sampled_from(HOSTS))
        observed["records"][name] = ({"host": host, "state": draw(states)},
                                     draw(st.integers(1, 5)))
        for h in HOSTS:
            observed["domains"][h].pop(name, None)
        for h in draw(st.lists(st.sampled_from(HOSTS), max_size=2, unique=True)):
            observed["domains"][h][name] = "running"
        if draw(st.booleans()):
            observed["requested"][name] = draw(st.sampled_from(
                ["started", "stopped", "disabled", "ignored"]))
        if draw(st.booleans()):
            agent_says(observed, name, draw(st.sampled_from(HOSTS)), draw(st.sampled_from(
                ["restarting", "restarted", "declined"])), draw(st.integers(0, 2)))
    return observed


@settings(max_examples=300, deadline=None)
@given(random_cluster(), st.floats(0, 1000))
def test_no_step_ever_starts_a_vm_that_runs_or_targets_an_unusable_host(observed, now):
    before = copy.deepcopy(observed)
    memory = Memory()
    decide(observed, memory, Policy(), now)
    decision = decide(observed, memory, Policy(), now + 1000)
    assert observed == before, "decide() changes nothing it is given but memory"
    alive = {h for h, s in observed["hosts"].items() if s.get("alive")}
    running = {vm for h in alive for vm in observed["domains"][h]}
    for step in decision["steps"]:
        vm, record = step["vm"], observed["records"][step["vm"]][0]
        assert observed["vdm"]["vms"][vm]["kind"] == "ha"
        assert observed["requested"].get(vm) not in ("disabled", "ignored")
        if step["action"] in ("restart", "relocate"):
            assert vm not in running, f"{vm} runs already"
            assert step["to"] in usable_hosts(observed)
            assert observed["requested"].get(vm, "started") == "started"
            assert record["state"] != "migrating"
            # A VM whose host failed is the evacuation's, never the reconciler's.
            assert record["state"] not in ("running", "starting") or record["host"] in alive
        if step["action"] == "stop":
            assert observed["requested"][vm] == "stopped"


def test_an_evacuation_that_did_not_finish_is_asked_for_again():
    observed, memory = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory()
    policy = Policy(evacuation_timeout=60)
    observed["hosts"]["hv1"] = {}  # failed: the evacuation's, for now
    observed["domains"]["hv1"].pop("web")
    first = decide(observed, memory, policy, 0.0)
    assert first["evacuate"] == [] and first["wake"] == 60.0
    assert decide(observed, memory, policy, 60.0)["evacuate"] == ["hv1"]
    assert decide(observed, memory, policy, 61.0)["evacuate"] == [], "once per timeout"
    # A host stopped on purpose (its marker) is nobody's failure.
    observed["hosts"]["hv1"] = {"maintenance": True}
    assert decide(observed, Memory(), policy, 0.0)["evacuate"] == []
    assert decide(observed, memory, policy, 500.0)["evacuate"] == []


def test_a_host_that_went_down_in_maintenance_uncleanly_is_evacuated_at_once():
    """A crash during a drain: the marker says a stop was planned, but the agent never
    said it stopped (its registration has no `stopped`). No host_down came for it, so
    the reconciler asks for its evacuation at the first look; a clean stop in
    maintenance (a drain's end, a reboot) is left to the host's return."""
    observed, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Policy(evacuation_timeout=60)
    observed["domains"]["hv1"].pop("web")
    observed["hosts"]["hv1"] = {"maintenance": True, "registered": {"address": "10.0.0.11"}}
    decision = decide(observed, Memory(), policy, 0.0)
    assert decision["evacuate"] == ["hv1"] and decision["steps"] == []
    assert decision["standing"]["web"] == (
        "hv1 failed: the evacuation's, down in maintenance without its agent's clean stop")
    observed["hosts"]["hv1"]["registered"]["stopped"] = "2026-11-28T17:00:00Z"
    decision = decide(observed, Memory(), policy, 0.0)
    assert decision["evacuate"] == [] and decision["steps"] == []
    assert decision["standing"]["web"].startswith("hv1 stopped in maintenance")
    # Never registered (no agent ever ran there): nothing to fence it by.
    observed["hosts"]["hv1"].pop("registered")
    assert decide(observed, Memory(), policy, 0.0)["evacuate"] == []
    # Its VM was being moved by the drain, and runs nowhere: the move died with it.
    observed["hosts"]["hv1"]["registered"] = {"address": "10.0.0.11"}
    observed["records"]["web"] = ({"host": "hv1", "state": "migrating", "to": "hv2"}, 12)
    assert decide(observed, Memory(), policy, 0.0)["evacuate"] == ["hv1"]


def test_ha_vms_a_host_shut_down_as_it_went_down_are_started_elsewhere():
    observed, memory = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory()
    observed["hosts"]["hv1"] = {"maintenance": True, "off": ["web"]}
    observed["domains"]["hv1"].pop("web")
    decide(observed, memory, Policy(), 0.0)
    (step,) = decide(observed, memory, Policy(), 2.0)["steps"]
    assert (step["action"], step["to"]) == ("relocate", "hv2")
    assert "shut down by hv1's agent" in step["reason"]


def test_a_host_that_went_down_and_came_back_counts_against_none_of_its_vms():
    observed = cluster(web=("ha", "hv1", ["hv2"], 1024))
    memory = Memory(attempts={"web": [(0.0, "hv1", "restart"), (1.0, "hv2", "relocate"),
                                      (2.0, "hv1", "relocate")]})
    decide(observed, memory, Policy(), 3.0)
    observed["hosts"]["hv1"] = {"maintenance": True}  # a clean reboot
    observed["domains"]["hv1"].pop("web")
    decide(observed, memory, Policy(), 4.0)
    observed["hosts"]["hv1"] = {"alive": True}
    decide(observed, memory, Policy(), 30.0)
    (step,) = decide(observed, memory, Policy(), 33.0)["steps"]
    assert (step["action"], step["to"]) == ("restart", "hv1")


def test_the_restart_that_follows_a_hosts_reboot_is_not_counted_against_the_vm():
    """Back from a clean reboot, the host's HA VMs are started there again; that start is
    the host's, not a failure of the VM's: one that dies right after is still restarted
    in place, and only the next death within the window relocates it."""
    observed, policy = cluster(web=("ha", "hv1", ["hv2"], 1024)), Policy(max_restart=1)
    memory, now = Memory(), 0.0
    decide(observed, memory, policy, now)
    observed["hosts"]["hv1"] = {"maintenance": True}  # rebooting
    observed["domains"]["hv1"].pop("web")
    decide(observed, memory, policy, now + 1)
    observed["hosts"]["hv1"] = {"alive": True}
    actions = []
    for now in (30.0, 100.0, 200.0):
        decide(observed, memory, policy, now)
        (step,) = decide(observed, memory, policy, now + policy.grace)["steps"]
        actions.append((step["action"], step["to"]))
        if step["action"] == "restart" and now == 30.0:
            assert "as hv1 is back" in step["reason"], step["reason"]
        started(observed, "web", step["to"], int(now))
        decide(observed, memory, policy, now + policy.grace + 1)  # seen running again
        dies(observed, "web")
    assert actions == [("restart", "hv1"), ("restart", "hv1"), ("relocate", "hv2")]


def test_a_vm_evacuated_in_time_leaves_no_overdue_mark_for_its_hosts_next_failure():
    observed, memory = cluster(web=("ha", "hv1", ["hv2"], 1024)), Memory()
    policy = Policy(evacuation_timeout=60)
    observed["hosts"]["hv1"] = {}
    observed["domains"]["hv1"].pop("web")
    decide(observed, memory, policy, 0.0)
    started(observed, "web", "hv2", 11)  # evacuated
    decide(observed, memory, policy, 10.0)
    observed["hosts"]["hv1"] = {"alive": True}
    decide(observed, memory, policy, 100.0)
    # Home again, then hv1 fails once more, long after the first failure.
    observed["domains"]["hv2"].pop("web")
    started(observed, "web", "hv1", 12)
    decide(observed, memory, policy, 500.0)
    observed["hosts"]["hv1"] = {}
    observed["domains"]["hv1"].pop("web")
    assert decide(observed, memory, policy, 501.0)["evacuate"] == []


def test_the_metrics_view_names_each_ha_vm_down_running_twice_or_left_stopped():
    observed = cluster(web=("ha", "hv1", ["hv2"], 1024), db=("ha", "hv2", ["hv3"], 1024),
                       app=("ha", "hv3", ["hv1"], 1024), www=("plain", "hv1", [], 512))
    dies(observed, "web")
    observed["domains"]["hv3"]["db"] = "paused"  # a second copy
    observed["requested"]["app"] = "stopped"
    dies(observed, "app")
    observed["vdm"]["vms"]["new"] = {"kind": "ha"}  # planned, not provisioned: no record
    view = ha_vms(observed)
    assert set(view) == {"web", "db", "app"}
    assert view["web"] == {"requested": "started", "record": "running", "host": "hv1",
                           "on": [], "down": True}
    assert view["db"]["on"] == ["hv2", "hv3"] and not view["db"]["down"]
    assert view["app"]["requested"] == "stopped" and not view["app"]["down"]
    observed["hosts"]["hv2"]["alive"] = False  # a dead host's domains count for nothing
    assert ha_vms(observed)["db"]["on"] == ["hv3"]


def test_the_failures_still_covered_count_every_host_out_against_the_maps_x():
    observed = cluster()
    assert failures_tolerated(observed) is None  # a map written before it said its X
    observed["vdm"]["failures_to_tolerate"] = 2
    assert failures_tolerated(observed) == 2
    observed["hosts"]["hv1"]["alive"] = False
    assert failures_tolerated(observed) == 1
    observed["hosts"]["hv2"]["maintenance"] = True  # drained: out as much as down
    assert failures_tolerated(observed) == 0
    observed["hosts"]["hv3"]["fenced"] = True  # back, still fenced: no slot there
    assert failures_tolerated(observed) == -1
    # Beyond X, but one failure domain the map plans for: covered, with none to spare.
    observed = cluster()
    observed["vdm"].update(failures_to_tolerate=1, failure_domains_to_tolerate=1)
    observed["vdm"]["hosts"]["hv1"]["failure_domain"] = "rack1"
    observed["vdm"]["hosts"]["hv2"]["failure_domain"] = "rack1"
    observed["hosts"]["hv1"]["alive"] = observed["hosts"]["hv2"]["alive"] = False
    assert failures_tolerated(observed) == 0
    observed["vdm"]["hosts"]["hv2"]["failure_domain"] = "rack2"
    assert failures_tolerated(observed) == -1


def test_the_map_in_etcd_says_the_failures_it_tolerates():
    vdm = {"version": 1, "failures_to_tolerate": 1, "failure_domains_to_tolerate": 0,
           "hosts": {"hv1": {}}, "vms": {}, "home": {}, "failover": {}}
    view = ha_view(vdm)
    assert (view["failures_to_tolerate"], view["failure_domains_to_tolerate"]) == (1, 0)
