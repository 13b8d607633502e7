"""A VM record's compare-and-swap against real etcd (module_utils/cluster/vm_records.py): a
step decided on a record that changed and came back with the same value is refused,
which a compare on the value alone would have let through; of two runs that read one
revision, only one claims it."""

from __future__ import annotations

import time

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records


def test_a_claim_on_a_record_that_changed_and_came_back_is_refused(etcd, playbook):
    cluster = f"r{int(time.time() * 1000) % 10**9}"
    key = f"/yasco/{cluster}/vms/web"
    client = etcd.client()
    client.put_json(key, {"host": "hv1", "state": "running"})
    status_task = {"name": "status", "yasco.cluster.cluster_status": {
        "endpoints": [etcd.url], "cluster": cluster, "domains_from": "agents",
        "hypervisors": {h: f"qemu+libssh://root@{h}/system" for h in ("hv1", "hv2")},
        "events": 0}}

    def read() -> dict:
        run = playbook([status_task])
        assert run.returncode == 0, run.output
        return {vm["name"]: vm for vm in run.result("status")["vms"]}["web"]

    web = read()
    assert web["record_revision"] == client.get(key).mod_revision > 0
    decided = vm_records.claim(web, vm_records.STARTING, "hv2", cluster, **{"from": "hv1"})
    # Meanwhile it was migrated away and back: the same value, a new revision.
    client.put_json(key, {"host": "hv1", "state": "migrating", "to": "hv2"})
    client.put_json(key, {"host": "hv1", "state": "running"})
    assert read()["record"] == web["record"]

    run = playbook([{"name": "claim", "yasco.cluster.etcd_key": {"keys": [decided]},
                     "ignore_errors": True}], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    claim = run.result("claim")
    assert claim["failed"] and "compare-and-swap failed: expected mod_revision " \
        f"{web['record_revision']}" in claim["msg"], claim
    assert client.get_json(key) == {"host": "hv1", "state": "running"}

    # Decided again on what is there now: of two runs that read it, one claims it,
    # and only the winner's start is recorded.
    web = read()
    first = vm_records.claim(web, vm_records.STARTING, "hv2", cluster, **{"from": "hv1"})
    second = vm_records.claim(web, vm_records.STARTING, "hv1", cluster, **{"from": "hv1"})
    run = playbook([
        {"name": "first", "yasco.cluster.etcd_key": {"keys": [first]}},
        {"name": "second", "yasco.cluster.etcd_key": {"keys": [second]},
         "ignore_errors": True},
        {"name": "second's start", "yasco.cluster.etcd_key": {
            "keys": [vm_records.complete(second, vm_records.RUNNING, "hv1")]},
         "ignore_errors": True},
        {"name": "first's start", "yasco.cluster.etcd_key": {
            "keys": [vm_records.complete(first, vm_records.RUNNING, "hv2")]}},
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.result("first")["changed"] and not run.result("first").get("failed")
    assert run.result("second")["failed"] and run.result("second's start")["failed"]
    assert run.result("first's start")["changed"]
    assert client.get_json(key) == {"host": "hv2", "state": "running"}
