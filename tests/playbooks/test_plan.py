"""playbooks/plan.yml end to end: a small inventory in, yasco_vdm out, and every way
it can refuse, through ansible-playbook as an operator runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planted import planted

from ..ansible_run import ROOT, run_playbook

HOSTS = {f"hv{i}": {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192}} for i in (1, 2, 3)}
VMS = {
    "web1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "anti_affinity": ["web"]},
    "web2": {"vcpus": 2, "memory_mb": 2048, "ha": True, "anti_affinity": ["web"]},
    "db1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "priority": 10,
            "placement": "yasco_capacity.memory_mb >= `8192`"},
    "batch1": {"vcpus": 2, "memory_mb": 4096, "preemptible": True},
}


def inventory(root: Path, vms: dict, hosts: dict | None = None, **settings) -> Path:
    (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"yasco_hypervisors": {"hosts": hosts or HOSTS}}}}))
    (root / "group_vars" / "all" / "main.yml").write_text(
        yaml.safe_dump({"yasco_vms": vms, **settings}))
    return root


def run_plan(inv: Path, *args: str) -> tuple[int, dict]:
    rc, (task, *dummy) = run_playbook(ROOT / "playbooks" / "plan.yml", str(inv), *args)
    return rc, task


def vdm_file(inv: Path) -> Path:
    return inv / "group_vars" / "all" / "yasco_vdm.yml"


def written(inv: Path) -> dict:
    return yaml.safe_load(vdm_file(inv).read_text())["yasco_vdm"]


def test_plan_writes_a_valid_map_and_a_second_run_changes_nothing(tmp_path):
    inv = inventory(tmp_path, VMS)
    rc, task = run_plan(inv)
    assert rc == 0 and task["changed"] is True, task
    vdm = written(inv)
    assert vdm["version"] == 1
    assert set(vdm["home"]) == set(VMS)
    assert set(vdm["failover"]) == {"hv1", "hv2", "hv3"}
    problem = load_problem(HOSTS, {"yasco_vms": VMS})
    assert check(problem, vdm) == []
    rc, task = run_plan(inv)
    assert rc == 0 and task["changed"] is False, task
    assert written(inv)["version"] == 1


def test_check_mode_shows_the_diff_and_writes_nothing(tmp_path):
    inv = inventory(tmp_path, VMS)
    rc, task = run_plan(inv, "--check", "--diff")
    assert rc == 0 and task["changed"] is True
    assert "web1" in task["diff"]["after"] and task["diff"]["before"] == ""
    assert not vdm_file(inv).exists()


def test_replanning_with_a_new_vm_keeps_homes_and_bumps_the_version(tmp_path):
    inv = inventory(tmp_path, VMS)
    run_plan(inv)
    before = written(inv)
    inventory(tmp_path, {**VMS, "web3": {"vcpus": 1, "memory_mb": 1024, "ha": True}})
    rc, task = run_plan(inv)
    assert rc == 0 and task["changed"] is True and task["moved"] == []
    after = written(inv)
    assert after["version"] == 2
    assert {n: after["home"][n] for n in before["home"]} == before["home"]


def test_an_infeasible_inventory_names_the_failure_set_and_writes_nothing(tmp_path):
    big = {f"vm{i}": {"vcpus": 2, "memory_mb": 4096, "ha": True} for i in range(5)}
    inv = inventory(tmp_path, big, yasco_failures_to_tolerate=2)
    rc, task = run_plan(inv)
    assert rc != 0 and task["answer"] == "infeasible"
    assert task["msg"].startswith("no VDM can be planned: failure of hv1,hv2: 2 vCPUs and "
                                  "12288 MB memory short on hosts outside {hv1,hv2}"), task["msg"]
    assert not vdm_file(inv).exists()


def test_invalid_input_names_the_vm_and_the_field(tmp_path):
    inv = inventory(tmp_path, {**VMS, "db2": {"vcpus": 1, "memory_mb": -5, "hosts": ["hv9"]}})
    rc, task = run_plan(inv)
    assert rc != 0
    # One problem per line, under a headline that says how many.
    assert task["msg"].startswith("invalid VDM input: 2 problems, one per line in `problems`")
    assert task["problems"] == [
        "yasco_vms.db2.memory_mb: must be positive, got -5",
        "yasco_vms.db2.hosts: names 'hv9', which is not in yasco_hypervisors"]
    assert not vdm_file(inv).exists()


@pytest.mark.parametrize("name", ["all.yml", "all.yaml"])
def test_a_group_vars_file_that_the_map_would_hide_is_refused(tmp_path, name):
    inv = inventory(tmp_path, VMS)
    main = inv / "group_vars" / "all" / "main.yml"
    (inv / "group_vars" / name).write_text(main.read_text())
    main.unlink()
    (inv / "group_vars" / "all").rmdir()
    rc, task = run_plan(inv)
    assert rc != 0
    assert f"group_vars/{name} exists, and Ansible ignores it" in task["msg"]
    assert not (inv / "group_vars" / "all").exists()


def test_rebalance_moves_lets_that_many_vms_move_to_a_new_host(tmp_path):
    inv = inventory(tmp_path, VMS)
    assert run_plan(inv)[0] == 0
    homes = written(inv)["home"]
    # A fourth hypervisor joins: keeping homes moves nothing onto it.
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["yasco_hypervisors"]["hosts"]["hv4"] = HOSTS["hv1"]
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    rc, task = run_plan(inv)
    assert rc == 0 and task["moved"] == [] and written(inv)["home"] == homes
    rc, task = run_plan(inv, "-e", "yasco_rebalance_moves=1")
    assert rc == 0 and len(task["moved"]) == 1, task
    (moved,) = task["moved"]
    assert written(inv)["home"] == {**homes, moved: written(inv)["home"][moved]}
    assert written(inv)["home"][moved] != homes[moved]


# A mixed cluster of six hosts built around a valid VDM, which the greedy search alone
# does not plan (tests/unit/plugins/module_utils/test_vdm_solver.py).
MIXED = planted(0, 6, fill=0.98, scale=0.25)


def mixed_inventory(root: Path, **settings) -> Path:
    others = {k: v for k, v in MIXED.settings.items() if k != "yasco_vms"}
    return inventory(root, MIXED.vms, MIXED.hostvars, **{**others, **settings})


def test_a_mixed_cluster_the_greedy_search_misses_is_planned_by_the_exact_one(tmp_path):
    inv = mixed_inventory(tmp_path)
    rc, task = run_plan(inv)
    assert rc == 0 and task["answer"] == "plan" and task["method"] == "exact", task
    assert task["msg"].endswith("(found by the exact search)")
    assert check(load_problem(MIXED.hostvars, MIXED.settings), written(inv)) == []


def test_a_search_out_of_time_says_not_found_and_leaves_the_current_map(tmp_path):
    inv = mixed_inventory(tmp_path)
    assert run_plan(inv)[0] == 0
    before = vdm_file(inv).read_bytes()
    # Planned afresh (a rebalance budget makes it plan although nothing changed), the
    # greedy search fails again and the exact one gets a millisecond.
    rc, task = run_plan(inv, "-e", "yasco_keep_homes=false", "-e", "yasco_rebalance_moves=1",
                        "-e", "yasco_plan_time_limit=0.001")
    assert rc != 0 and task["answer"] == "not_found", task
    assert task["msg"].startswith("no VDM found within 0.001 s: no plan found: the greedy "
                                  "search stopped at VM "), task["msg"]
    assert "leaves the least room" in task["msg"]
    assert task["msg"].endswith(f"the VDM at {vdm_file(inv)} is left as it was")
    assert vdm_file(inv).read_bytes() == before


def test_a_plan_afresh_leaves_vms_where_they_are_that_another_of_their_size_may_take(
        tmp_path):
    """Two HA VMs of one size trade homes in the map on file, which no longer holds
    (neither has a failover target for its new home's failure); planned afresh (the
    same plan as before), each takes the place the other had in it, failover targets
    and all, so neither moves."""
    cluster = planted(1, 8, 1, fill=0.9, scale=0.25)
    inv = inventory(tmp_path, cluster.vms, cluster.hostvars,
                    **{k: v for k, v in cluster.settings.items() if k != "yasco_vms"})
    assert run_plan(inv)[0] == 0
    document = yaml.safe_load(vdm_file(inv).read_text())
    home = document["yasco_vdm"]["home"]
    ha = sorted(n for n, vm in cluster.vms.items() if vm.get("ha")
                and not vm.get("anti_affinity"))
    a, b = next((a, b) for a in ha for b in ha
                if cluster.vms[a] == cluster.vms[b] and home[a] != home[b])
    home[a], home[b] = home[b], home[a]
    vdm_file(inv).write_text(yaml.safe_dump(document))
    rc, task = run_plan(inv, "-e", "yasco_keep_homes=false")
    assert rc == 0 and task["changed"] is True, task
    assert task["moved"] == [], task["moved"]
    assert written(inv)["home"] == home


def test_the_preemptions_objective_writes_a_map_that_stops_fewer_and_is_then_current(
        tmp_path):
    cluster = planted(3, 4, fill=0.95, scale=0.25)
    inv = inventory(tmp_path, cluster.vms, cluster.hostvars,
                    **{k: v for k, v in cluster.settings.items() if k != "yasco_vms"})
    rc, task = run_plan(inv)
    assert rc == 0 and task["preemptions"] > 0 and "objective" not in written(inv), task
    greedy = task["preemptions"]
    ask = ("-e", "yasco_plan_objective=preemptions", "-e", "yasco_plan_time_limit=3")
    rc, task = run_plan(inv, *ask)
    assert rc == 0 and task["changed"] is True and task["moved"] == [], task.get("msg")
    assert task["preemptions"] < greedy
    vdm = written(inv)
    assert vdm["objective"] == "preemptions" and vdm["version"] == 2
    assert check(load_problem(cluster.hostvars, cluster.settings), vdm) == []
    rc, task = run_plan(inv, *ask)
    assert rc == 0 and task["changed"] is False and task["msg"] == "VDM version 2 is current"
    rc, task = run_plan(inv, "-e", "yasco_plan_objective=fewest")
    assert rc != 0 and "objective" in task["msg"] and "balance, preemptions" in task["msg"]
    assert written(inv) == vdm


def test_a_time_limit_of_zero_is_refused_naming_the_variable(tmp_path):
    inv = inventory(tmp_path, VMS)
    rc, task = run_plan(inv, "-e", "yasco_plan_time_limit=0")
    assert rc != 0
    assert "time_limit: must be more than 0 seconds, got 0 (yasco_plan_time_limit)" \
        in task["msg"]
    assert not vdm_file(inv).exists()


def test_what_if_reports_a_table_per_scenario_and_writes_nothing(tmp_path):
    inv = inventory(tmp_path, VMS)
    rc, task = run_plan(inv, "-e", "yasco_what_if=add-host:8:8192,remove-host:hv3",
                        "-e", "yasco_what_if_flavour=2:2048")
    assert rc == 0 and task["changed"] is False, task
    rows = {row["scenario"]: (row["hosts"], row["answer"], row["fits"])
            for row in task["what_if"]}
    # web1, web2 and db1 take 6 of the 16 vCPUs HA VMs may use on three hosts, of
    # the 24 on four; two hosts cannot keep web1 and web2 apart after a failure.
    assert rows == {"as is": (3, "plan", 5), "add-host:8:8192": (4, "plan", 9),
                    "remove-host:hv3": (2, "infeasible", 0)}
    assert task["table"][0].startswith("scenario")
    assert task["table"][2].split() == ["as", "is", "3", "4", "plan", "5"]
    assert not vdm_file(inv).exists()


def test_failures_that_would_take_etcd_below_quorum_are_refused_naming_the_members(tmp_path):
    """etcd's three members on the three hypervisors: surviving any one failure keeps
    two, surviving two would keep one, which is no quorum."""
    hosts = {name: {**spec, "ansible_host": f"10.0.0.1{name[-1]}"}
             for name, spec in HOSTS.items()}
    endpoints = [f"https://10.0.0.1{i}:2379" for i in (1, 2, 3)]
    small = {"web1": {"vcpus": 1, "memory_mb": 1024, "ha": True}}
    refused = inventory(tmp_path / "two", small, hosts, yasco_failures_to_tolerate=2,
                        yasco_etcd_endpoints=endpoints)
    rc, task = run_plan(refused)
    assert rc != 0
    assert task["problems"] == [
        "etcd quorum: a failure of hv1, hv2, which the VDM is to survive, takes 2 of etcd's "
        "3 members (https://10.0.0.11:2379 on hv1, https://10.0.0.12:2379 on hv2); 3 members "
        "survive 1 lost, so etcd would stop: no evacuation could run and every agent would "
        "self-fence its HA VMs. Run more members (5 survive 2 lost), or run them off the "
        "hypervisors, or lower yasco_failures_to_tolerate (and "
        "yasco_failure_domains_to_tolerate)"], task
    assert not vdm_file(refused).exists()
    # The same with one failure, or with the members elsewhere: planned.
    for name, settings in (("one", {"yasco_failures_to_tolerate": 1,
                                    "yasco_etcd_endpoints": endpoints}),
                           ("elsewhere", {"yasco_failures_to_tolerate": 2,
                                          "yasco_etcd_endpoints": ["https://etcd1:2379"]})):
        rc, task = run_plan(inventory(tmp_path / name, small, hosts, **settings))
        assert rc == 0, (name, task)
