"""yasco.cluster.etcd_key, etcd_key_info, etcd_lease and etcd_lease_info, run by
ansible-playbook as an operator runs them, against real etcd servers."""

from __future__ import annotations

import json
import subprocess
import time

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

from .conftest import (ROOT, ansible_env, closed_port_url, parse_run, playbook_command,
                       write_playbook)


def unsupported(module: str, option: str) -> str:
    return f"Unsupported parameters for (yasco.cluster.{module}) module: {option}."


def key_task(name: str, **args) -> dict:
    return {"name": name, "yasco.cluster.etcd_key": args}


def key_info_task(name: str, **args) -> dict:
    return {"name": name, "yasco.cluster.etcd_key_info": args}


def lease_task(name: str, **args) -> dict:
    return {"name": name, "yasco.cluster.etcd_lease": args}


def lease_info_task(name: str, **args) -> dict:
    return {"name": name, "yasco.cluster.etcd_lease_info": args}


def test_a_second_identical_write_changes_nothing_and_the_diff_shows_the_change(
        etcd, prefix, playbook):
    key = f"{prefix}vms/web1"
    etcd.client().put(key, '{"host":"hv1"}')
    run = playbook([key_task("write", key=key, value='{"host":"hv2"}'),
                    key_task("write again", key=key, value='{"host":"hv2"}'),
                    key_task("write it as data", key=key, value={"host": "hv2"}),
                    key_info_task("read", key=key)],
                   "--diff", env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    first, again, read = (run.result(n) for n in ("write", "write again", "read"))
    assert first["changed"] is True and again["changed"] is False
    assert first["diff"] == {"before_header": key, "after_header": key,
                             "before": '{"host":"hv1"}\n', "after": '{"host":"hv2"}\n'}
    assert "diff" not in again
    assert run.result("write it as data")["changed"] is False
    current = etcd.client().get(key)
    assert first["revision"] == again["revision"] == read["revision"] == current.mod_revision
    assert read["exists"] is True and read["value"] == '{"host":"hv2"}'
    assert read["kvs"] == [current.as_dict()]


def test_check_mode_reports_every_change_and_makes_none(etcd, prefix, playbook):
    client = etcd.client()
    client.put(f"{prefix}keep", "old")
    client.put(f"{prefix}doomed/a", "1")
    client.put(f"{prefix}doomed/b", "2")
    run = playbook([key_task("write", key=f"{prefix}keep", value="new"),
                    key_task("create", key=f"{prefix}new", value="x"),
                    key_task("delete", key=f"{prefix}keep", state="absent"),
                    key_task("delete prefix", key=f"{prefix}doomed/", prefix=True,
                             state="absent"),
                    lease_task("grant", ttl=30)],
                   "--check", "--diff", env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    assert all(result["changed"] for result in run.results), run.results
    assert run.result("write")["diff"]["before"] == "old\n"
    assert run.result("create")["diff"]["before"] == ""
    assert run.result("delete prefix")["deleted"] == 2
    assert run.result("delete prefix")["diff"]["before"] == (
        f"{prefix}doomed/a: 1\n{prefix}doomed/b: 2\n")
    assert "id" not in run.result("grant")
    assert {kv.key: kv.value for kv in client.get_prefix(prefix)} == {
        f"{prefix}keep": "old", f"{prefix}doomed/a": "1", f"{prefix}doomed/b": "2"}


def test_compare_and_swap_writes_when_unchanged_and_fails_naming_what_it_found(
        etcd, prefix, playbook):
    key = f"{prefix}vms/web1"
    client = etcd.client()
    revision = client.put(key, "on hv1")
    run = playbook([
        key_task("move", key=key, value="on hv2", if_revision=revision),
        {**key_task("move on a stale revision", key=key, value="on hv3", if_revision=revision),
         "ignore_errors": True},
        {**key_task("create what exists", key=key, value="on hv3", if_revision=0),
         "ignore_errors": True},
        {**key_task("swap a stale value", key=key, value="on hv3", if_value="on hv1"),
         "ignore_errors": True},
        {**key_task("delete a stale value", key=key, state="absent", if_value="on hv1"),
         "ignore_errors": True},
        key_task("swap the current value", key=key, value="on hv3", if_value="on hv2"),
        key_task("create a fence", key=f"{prefix}fences/hv1", value="{}", if_revision=0),
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    stale = run.result("move on a stale revision")
    now = run.result("move")["revision"]
    assert stale["failed"] is True
    assert stale["msg"] == (f"{key}: compare-and-swap failed: expected mod_revision "
                            f"{revision}, found mod_revision {now}, value 'on hv2': it changed "
                            f"since it was read; read it again and retry")
    assert (stale["expected_revision"], stale["actual_revision"], stale["actual_value"]) == (
        revision, now, "on hv2")
    assert run.result("create what exists")["msg"].startswith(
        f"{key}: compare-and-swap failed: expected no key, found mod_revision {now}")
    for name in ("swap a stale value", "delete a stale value"):
        result = run.result(name)
        assert result["failed"] is True and result["expected_value"] == "on hv1", result
        assert "expected value 'on hv1', found mod_revision" in result["msg"]
    assert run.result("swap the current value")["changed"] is True
    assert run.result("create a fence")["changed"] is True
    assert client.get(key).value == "on hv3"


def test_a_write_holds_only_while_the_other_keys_it_names_are_unchanged(
        etcd, prefix, playbook):
    """if_unchanged: a relocation's claim holds only while the agent's restarts/ key
    is as the step read it (agent_restart.py says the same the other way round)."""
    key, said = f"{prefix}vms/web1", f"{prefix}hosts/hv1/restarts/web1"
    client = etcd.client()
    revision = client.put(key, "on hv1")
    run = playbook([
        {**key_task("claim while the agent said nothing", key=key, value="on hv2",
                    if_revision=revision, if_unchanged={said: 0}), "check_mode": True},
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.result("claim while the agent said nothing")["changed"] is True
    client.put(said, '{"state": "restarting"}')
    run = playbook([
        {**key_task("claim after the agent said it restarts", key=key, value="on hv2",
                    if_revision=revision, if_unchanged={said: 0}), "ignore_errors": True},
        {**key_task("bad revision", key=key, value="on hv2", if_unchanged={said: "x"}),
         "ignore_errors": True},
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    lost = run.result("claim after the agent said it restarts")
    assert lost["failed"] is True and lost["other_key"] == said, lost
    assert lost["msg"].startswith(f"{said}: changed since it was read (expected no key, "
                                  "found mod_revision"), lost["msg"]
    assert run.result("bad revision")["msg"] == (
        f"if_unchanged: {said}: must be 0 (key absent) or a mod_revision, got 'x'")
    assert client.get(key).value == "on hv1"


def test_of_two_concurrent_writers_on_one_revision_only_one_wins(etcd, prefix, tmp_path):
    key = f"{prefix}vms/web1"
    revision = etcd.client().put(key, "on hv1")
    books = [write_playbook(tmp_path, [key_task("move", key=key, value=f"on {host}",
                                                if_revision=revision)])
             for host in ("hv2", "hv3")]
    env = ansible_env(YASCO_ETCD_ENDPOINTS=etcd.url)
    writers = [subprocess.Popen(playbook_command(book), cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for book in books]
    runs = []
    for writer in writers:
        stdout, stderr = writer.communicate(timeout=120)
        runs.append(parse_run(subprocess.CompletedProcess(writer.args, writer.returncode,
                                                          stdout, stderr)))
    won = [run for run in runs if run.returncode == 0]
    lost = [run for run in runs if run.returncode != 0]
    assert len(won) == 1 and len(lost) == 1, [run.output for run in runs]
    winner = won[0].result("move")
    assert etcd.client().get(key).value == winner["value"]
    assert lost[0].result("move")["actual_value"] == winner["value"]
    assert lost[0].result("move")["actual_revision"] == winner["revision"]


def test_a_key_bound_to_a_lease_goes_with_it(etcd, prefix, playbook):
    key = f"{prefix}hosts/hv1/alive"
    ttl = 8  # long enough for the tasks after the grant to see the lease, whatever the load
    run = playbook([
        {**lease_task("grant", ttl=ttl), "register": "granted"},
        key_task("bind", key=key, value="up", lease="{{ granted.id }}"),
        key_task("bind again", key=key, value="up", lease="{{ granted.id }}"),
        lease_info_task("read", id="{{ granted.id }}"),
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    granted = run.result("grant")
    assert granted["changed"] is True and granted["granted_ttl"] == ttl
    assert run.result("bind")["changed"] is True
    assert run.result("bind again")["changed"] is False
    assert run.result("read")["keys"] == [key]
    client = etcd.client()
    deadline = time.monotonic() + ttl + 5
    while client.get(key) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get(key) is None, "the key outlived its lease"


def test_a_lease_with_an_id_is_granted_once_and_revoked_once(etcd, prefix, playbook):
    lease_id = int(time.time_ns() % 10**15)
    key = f"{prefix}k"
    run = playbook([
        lease_task("grant", id=lease_id, ttl=60),
        lease_task("grant again", id=lease_id, ttl=60),
        key_task("bind", key=key, value="v", lease=lease_id),
        lease_task("revoke", id=lease_id, state="absent"),
        lease_task("revoke again", id=lease_id, state="absent"),
        lease_info_task("read", id=lease_id),
        {**key_task("bind to the revoked lease", key=key, value="v", lease=lease_id),
         "ignore_errors": True},
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    assert run.result("grant")["changed"] is True and run.result("grant")["id"] == lease_id
    assert run.result("grant again")["changed"] is False
    assert 0 < run.result("grant again")["ttl"] <= 60
    assert run.result("revoke")["changed"] is True and run.result("revoke")["keys"] == [key]
    assert run.result("revoke again")["changed"] is False
    assert run.result("read")["alive"] is False and "keys" not in run.result("read")
    assert f"lease {lease_id} does not exist (it expired or was revoked): grant a new lease" in \
        run.result("bind to the revoked lease")["msg"]
    assert etcd.client().get(key) is None


def test_a_prefix_is_read_and_deleted_as_a_whole(etcd, prefix, playbook):
    client = etcd.client()
    for name in ("hv1", "hv2", "hv3"):
        client.put(f"{prefix}hosts/{name}/registered", f'{{"name":"{name}"}}')
    client.put(f"{prefix}vms/web1", "{}")
    run = playbook([
        key_info_task("read", key=f"{prefix}hosts/", prefix=True),
        key_task("delete", key=f"{prefix}hosts/", prefix=True, state="absent"),
        key_task("delete again", key=f"{prefix}hosts/", prefix=True, state="absent"),
        key_task("delete one", key=f"{prefix}vms/web1", state="absent"),
        key_task("delete it again", key=f"{prefix}vms/web1", state="absent"),
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    assert run.returncode == 0, run.output
    kvs = run.result("read")["kvs"]
    assert [kv["key"] for kv in kvs] == [f"{prefix}hosts/hv{n}/registered" for n in (1, 2, 3)]
    assert kvs[0]["value"] == '{"name":"hv1"}' and kvs[0]["version"] == 1
    assert (run.result("delete")["changed"], run.result("delete")["deleted"]) == (True, 3)
    assert (run.result("delete again")["changed"], run.result("delete again")["deleted"]) == (
        False, 0)
    assert run.result("delete one")["deleted"] == 1
    assert run.result("delete it again")["changed"] is False
    assert client.get_prefix(prefix) == []


def test_key_info_reads_a_key_a_prefix_and_a_missing_key_alike_in_check_mode(
        etcd, prefix, playbook):
    client = etcd.client()
    client.put(f"{prefix}hosts/hv1/registered", '{"rack":"1"}')
    client.put(f"{prefix}hosts/hv2/registered", '{"rack":"2"}')
    client.put(f"{prefix}vms/web1", '{"host":"hv1"}')
    before = {kv.key: kv.as_dict() for kv in client.get_prefix(prefix)}
    tasks = [key_info_task("one", key=f"{prefix}vms/web1"),
             key_info_task("missing", key=f"{prefix}vms/nothing"),
             key_info_task("prefix", key=f"{prefix}hosts/", prefix=True),
             key_info_task("empty prefix", key=f"{prefix}fences/", prefix=True)]
    env = {"YASCO_ETCD_ENDPOINTS": etcd.url}
    runs = {"run": playbook(tasks, env=env),
            "check": playbook(tasks, "--check", "--diff", env=env)}
    for mode, run in runs.items():
        assert run.returncode == 0, (mode, run.output)
        assert not any(result["changed"] for result in run.results), (mode, run.results)
        assert not any("diff" in result for result in run.results), (mode, run.results)
        one, missing = run.result("one"), run.result("missing")
        assert (one["exists"], one["value"], one["revision"]) == (
            True, '{"host":"hv1"}', before[f"{prefix}vms/web1"]["mod_revision"]), mode
        assert one["kvs"] == [before[f"{prefix}vms/web1"]], mode
        assert missing["exists"] is False and missing["kvs"] == [], mode
        assert "value" not in missing and "revision" not in missing, mode
        assert run.result("prefix")["kvs"] == [before[f"{prefix}hosts/hv1/registered"],
                                               before[f"{prefix}hosts/hv2/registered"]], mode
        assert "exists" not in run.result("prefix"), mode
        assert run.result("empty prefix")["kvs"] == [], mode
    assert {kv.key: kv.as_dict() for kv in client.get_prefix(prefix)} == before


def test_lease_info_reads_time_to_live_and_keys_and_says_when_a_lease_is_gone(
        etcd, prefix, playbook):
    client = etcd.client()
    lease = client.grant_lease(60)
    client.put(f"{prefix}b", "2", lease=lease.id)
    client.put(f"{prefix}a", "1", lease=lease.id)
    gone = client.grant_lease(60)
    client.revoke_lease(gone.id)
    tasks = [lease_info_task("held", id=lease.id), lease_info_task("gone", id=gone.id)]
    env = {"YASCO_ETCD_ENDPOINTS": etcd.url}
    for args in ((), ("--check",)):
        run = playbook(tasks, *args, env=env)
        assert run.returncode == 0, (args, run.output)
        held, revoked = run.result("held"), run.result("gone")
        assert held["changed"] is False and held["alive"] is True, (args, held)
        assert held["id"] == lease.id and held["granted_ttl"] == 60, (args, held)
        assert 0 < held["ttl"] <= 60, (args, held)
        assert held["keys"] == [f"{prefix}a", f"{prefix}b"], (args, held)
        assert (revoked["changed"], revoked["id"], revoked["alive"]) == (False, gone.id, False)
        assert not {"ttl", "granted_ttl", "keys"} & set(revoked), (args, revoked)
    assert sorted(client.lease_info(lease.id).keys) == [f"{prefix}a", f"{prefix}b"]
    client.revoke_lease(lease.id)


def test_modules_reach_etcd_over_tls_and_with_a_password_and_say_why_not(
        etcd_tls, etcd_auth, prefix, playbook):
    key = f"{prefix}k"
    run = playbook([
        key_task("over tls", key=key, value="v", **etcd_tls.options()),
        {**key_task("with a wrong ca", key=key, value="v",
                    **etcd_tls.options(ca_cert=etcd_tls.wrong_ca)), "ignore_errors": True},
        key_task("with a password", key=key, value="v", **etcd_auth.options()),
        {**key_task("with a wrong password", key=key, value="v",
                    **etcd_auth.options(password="not-the-password")),
         "ignore_errors": True},
        lease_task("grant with a password", ttl=5, **etcd_auth.options()),
        key_info_task("read as a user who may only read", key=key,
                      **etcd_auth.options(username="reader", password="reader-secret")),
    ])
    assert run.returncode == 0, run.output
    assert run.result("over tls")["changed"] is True
    assert etcd_tls.client().get(key).value == "v"
    assert "TLS: certificate verify failed" in run.result("with a wrong ca")["msg"]
    assert "check that ca_cert (yasco_etcd_ca_cert)" in run.result("with a wrong ca")["msg"]
    assert run.result("with a password")["changed"] is True
    assert etcd_auth.client().get(key).value == "v"
    assert run.result("with a wrong password")["msg"] == (
        f"etcd at {etcd_auth.url}: authentication as 'root' failed: wrong user name or "
        f"password: check username and password (yasco_etcd_username, yasco_etcd_password)")
    assert "root-secret" not in run.output
    assert run.result("grant with a password")["changed"] is True
    assert run.result("read as a user who may only read")["value"] == "v"


def test_an_unreachable_etcd_fails_the_task_in_time_naming_it_and_a_second_one_is_used(
        etcd, prefix, playbook):
    down = closed_port_url()
    started = time.monotonic()
    run = playbook([
        {**key_task("down", key=f"{prefix}k", value="v", endpoints=[down], timeout=2),
         "ignore_errors": True},
        key_task("fail over", key=f"{prefix}k", value="v", endpoints=[down, etcd.url]),
    ])
    assert time.monotonic() - started < 20
    assert run.returncode == 0, run.output
    assert run.result("down")["msg"] == (
        f"etcd at {down}: unreachable within 2 s ({down}: connection refused): check "
        f"endpoints (yasco_etcd_endpoints) and that etcd runs there")
    assert run.result("fail over")["changed"] is True
    assert etcd.client().get(f"{prefix}k").value == "v"


def test_options_that_do_not_fit_together_are_refused_naming_the_option(etcd, prefix,
                                                                        playbook):
    endpoints = [etcd.url]
    tasks = {
        "prefix to write": key_task("prefix to write", key=prefix, value="v", prefix=True,
                                    endpoints=endpoints),
        "condition to read": key_info_task("condition to read", key=prefix, if_revision=3,
                                           endpoints=endpoints),
        "state info": key_task("state info", key=prefix, state="info", endpoints=endpoints),
        "empty key to read": key_info_task("empty key to read", key="", endpoints=endpoints),
        "value to delete": key_task("value to delete", key=prefix, state="absent", value="v",
                                    endpoints=endpoints),
        "condition on a prefix": key_task("condition on a prefix", key=prefix, prefix=True,
                                          state="absent", if_value="v", endpoints=endpoints),
        "no value": key_task("no value", key=prefix, endpoints=endpoints),
        "no endpoints": key_info_task("no endpoints", key=prefix),
        "no ttl": lease_task("no ttl", endpoints=endpoints),
        "ttl to read": lease_info_task("ttl to read", id=7, ttl=5, endpoints=endpoints),
        "no lease id": lease_info_task("no lease id", id=0, endpoints=endpoints),
    }
    run = playbook([{**task, "ignore_errors": True} for task in tasks.values()])
    # Ansible lists the supported options after the unsupported ones: leave that out.
    messages = {name: run.result(name)["msg"].split(" Supported parameters include")[0]
                for name in tasks}
    assert messages == {
        "prefix to write": "prefix: applies to state=absent only; state=present writes one "
                           "key",
        "condition to read": unsupported("etcd_key_info", "if_revision"),
        "state info": "value of state must be one of: present, absent, got: info",
        "empty key to read": "key: must not be empty",
        "value to delete": "value: applies to state=present only, not state=absent",
        "condition on a prefix": "if_value: compares one key, so it cannot be used with "
                                 "prefix=true",
        "no value": "state is present but all of the following are missing: value",
        "no endpoints": "missing required arguments: endpoints",
        "no ttl": "state is present but all of the following are missing: ttl",
        "ttl to read": unsupported("etcd_lease_info", "ttl"),
        "no lease id": "id: must be a positive lease id, got 0",
    }


def test_a_batch_writes_each_key_on_its_own_condition_and_stops_at_the_first_lost_swap(
        etcd, prefix, playbook):
    client = etcd.client()
    client.put(f"{prefix}taken", "someone else's")
    claims = [{"key": f"{prefix}a"}, {"key": f"{prefix}b", "value": "b's own"},
              {"key": f"{prefix}taken"}, {"key": f"{prefix}never"}]
    run = playbook([
        {**key_task("claim", keys=claims, value="mine", if_revision=0), "ignore_errors": True},
        key_task("again", keys=claims[:2], value="mine"),
        {**key_task("bad", keys=[{"key": f"{prefix}c", "value": "x"},
                                 {"key": f"{prefix}d", "state": "absent", "value": "x"}]),
         "ignore_errors": True},
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url})
    claim, again, bad = (run.result(n) for n in ("claim", "again", "bad"))
    assert claim["failed"]
    assert claim["msg"].startswith(f"key {prefix}taken: {prefix}taken: compare-and-swap "
                                   "failed: expected no key")
    assert [(r["key"], r["changed"]) for r in claim["results"]] == [
        (f"{prefix}a", True), (f"{prefix}b", True)]
    assert claim["actual_value"] == "someone else's"
    # An element's own value wins over the task's, so the rerun changes nothing.
    assert [(r["key"], r["changed"]) for r in again["results"]] == [
        (f"{prefix}a", False), (f"{prefix}b", False)]
    assert bad["msg"] == f"{prefix}d: value: applies to state=present only, not state=absent"
    assert {kv.key: kv.value for kv in client.get_prefix(prefix)} == {
        f"{prefix}a": "mine", f"{prefix}b": "b's own", f"{prefix}taken": "someone else's"}


def test_events_are_appended_in_order_and_check_mode_appends_none(etcd, prefix, playbook):
    cluster = prefix.strip("/").split("/")[-1]
    event = {"endpoints": [etcd.url], "cluster": cluster, "by": "test"}
    run = playbook([
        {"name": "one", "yasco.cluster.cluster_event": {
            **event, "kind": "note", "details": {"text": "hello"}}},
        {"name": "batch", "yasco.cluster.cluster_event": {
            **event, "kind": "started", "host": "hv1",
            "events": [{"vm": "web1"}, {"vm": "web2", "host": "hv2"}]}},
        {"name": "checked", "check_mode": True, "yasco.cluster.cluster_event": {
            **event, "kind": "note"}},
        {"name": "status", "yasco.cluster.cluster_status": {
            "endpoints": [etcd.url], "cluster": cluster, "hypervisors": {}, "events": 2}},
    ])
    assert run.returncode == 0, run.output
    history = etcd.client().get_prefix(f"/yasco/{cluster}/history/")
    written = [json.loads(kv.value) for kv in history]
    assert [(e["kind"], e.get("host"), e.get("vm"), e["by"]) for e in written] == [
        ("note", None, None, "test"), ("started", "hv1", "web1", "test"),
        ("started", "hv2", "web2", "test")]
    assert written[0]["details"] == {"text": "hello"}
    assert [kv.key for kv in history] == [run.result("one")["key"]] + [
        r["key"] for r in run.result("batch")["results"]]
    assert run.result("checked")["changed"] is True and "key" not in run.result("checked")
    assert [e["vm"] for e in run.result("status")["events"]] == ["web1", "web2"]
    assert "started  hv2   web2" in run.result("status")["table"]


def test_status_shows_an_agents_event_waiting_for_the_watcher_among_the_history(
        etcd, prefix, playbook):
    """An agent may not write the history: its events wait under its host until the
    HA watcher copies them in, and status shows them meanwhile, said to wait."""
    cluster = prefix.strip("/").split("/")[-1]
    with etcd.client() as client:
        cluster_events.append(client, cluster_events.event("fenced", host="hv1",
                                                           by="evacuate"), cluster=cluster)
        waiting = cluster_events.append_for_agent(client, cluster_events.event(
            "crashed", vm="web1", by="agent"), host="hv1", cluster=cluster)
        # Not an agent's to write: never shown, and dropped by the watcher.
        cluster_events.append_for_agent(client, cluster_events.event(
            "fenced", host="hv2", by="agent"), host="hv1", cluster=cluster)
    run = playbook([{"name": "status", "yasco.cluster.cluster_status": {
        "endpoints": [etcd.url], "cluster": cluster, "hypervisors": {}, "events": 5}}])
    assert run.returncode == 0, run.output
    events = run.result("status")["events"]
    assert [(e["kind"], e["host"], e.get("waiting", False)) for e in events] == [
        ("fenced", "hv1", False), ("crashed", "hv1", True)]
    assert events[1]["key"] == waiting
    assert "crashed  hv1   web1  agent (waiting)" in run.result("status")["table"]


def test_status_carries_each_hosts_declared_ceph_addresses_not_what_it_registered(
        etcd, playbook):
    """The evacuation fences a host at the addresses cluster_status was given for it
    (the inventory's yasco_ceph_addrs), whatever its agent registered; a range is
    refused before anything is read."""
    cluster = f"d{int(time.time() * 1000) % 10**9}"
    root = f"/yasco/{cluster}"
    etcd.client().put_json(f"{root}/hosts/hv1/registered",
                           {"ceph_addrs": ["10.1.0.1", "10.1.0.0/24"]})
    uris = {h: f"qemu+libssh://root@{h}/system" for h in ("hv1", "hv2")}
    status = {"endpoints": [etcd.url], "cluster": cluster, "hypervisors": uris,
              "domains_from": "agents", "events": 0, "leases": False}
    run = playbook([
        {"name": "declared", "yasco.cluster.cluster_status": {
            **status, "ceph_addrs": {"hv1": ["10.1.0.1"], "hv2": []}}},
        {"name": "a range", "yasco.cluster.cluster_status": {
            **status, "ceph_addrs": {"hv1": ["10.1.0.1"], "hv2": ["10.1.0.0/24"]}},
         "ignore_errors": True},
        {"name": "none", "yasco.cluster.cluster_status": status}])
    assert run.returncode == 0, run.output
    hosts = {h["name"]: h for h in run.result("declared")["hypervisors"]}
    assert (hosts["hv1"]["ceph_addrs"], hosts["hv2"]["ceph_addrs"]) == (["10.1.0.1"], [])
    assert hosts["hv1"]["registered"] == {"ceph_addrs": ["10.1.0.1", "10.1.0.0/24"]}
    assert run.result("a range")["msg"].startswith(
        "ceph_addrs.hv2[0]: '10.1.0.0/24' is not a plain IP address")
    assert [h["ceph_addrs"] for h in run.result("none")["hypervisors"]] == [[], []]


def test_status_reads_what_the_agents_publish_as_of_one_revision(etcd, playbook):
    """cluster_status with domains_from: agents, as the evacuation asks it: every
    record from one read of etcd, nothing asked of libvirt."""
    cluster = f"s{int(time.time() * 1000) % 10**9}"
    root = f"/yasco/{cluster}"
    client = etcd.client()
    lease = client.grant_lease(60).id
    client.put_json(f"{root}/hosts/hv1/alive", {"boot_id": "b-now", "ttl": 5, "watchdog": 3},
                    lease=lease)
    client.put_json(f"{root}/hosts/hv1/registered", {"ceph_addrs": ["10.1.0.1"]})
    client.put_json(f"{root}/hosts/hv1/domains/web", {"state": "running"}, lease=lease)
    client.put_json(f"{root}/hosts/hv2/registered", {"ceph_addrs": ["10.1.0.2"]})
    client.put_json(f"{root}/hosts/hv3/maintenance", {"by": "operator"})
    client.put_json(f"{root}/fences/hv2", {"by": "evacuate", "boot_id": "b-old"})
    client.put_json(f"{root}/vms/web", {"host": "hv1", "state": "running"})
    client.put_json(f"{root}/vms/db", {"host": "hv2", "state": "running"})
    client.put_json(f"{root}/ha/disarmed", {"by": "test", "reason": "switch upgrade"})
    uris = {h: f"qemu+libssh://root@{h}/system" for h in ("hv1", "hv2", "hv3")}
    run = playbook([{"name": "status", "yasco.cluster.cluster_status": {
        "endpoints": [etcd.url], "cluster": cluster, "hypervisors": uris,
        "domains_from": "agents", "events": 0}}])
    assert run.returncode == 0, run.output
    status = run.result("status")
    hosts = {h["name"]: h for h in status["hypervisors"]}
    assert (hosts["hv1"]["alive"], hosts["hv1"]["boot_id"], hosts["hv1"]["domains"]) == (
        True, "b-now", ["web"])
    assert 0 < hosts["hv1"]["lease_ttl"] <= 60
    assert (hosts["hv1"]["watchdog"], hosts["hv2"]["watchdog"]) == (3, None)
    assert [line.split()[3] for line in status["table"].splitlines()
            if line.startswith(("hv1 ", "hv2 "))] == ["3", "-"]
    assert hosts["hv1"]["registered"] == {"ceph_addrs": ["10.1.0.1"]}
    assert (hosts["hv2"]["alive"], hosts["hv2"]["fence"]["boot_id"]) == (False, "b-old")
    assert hosts["hv2"]["libvirt"] == "not alive" and hosts["hv3"]["maintenance"]
    vms = {v["name"]: v for v in status["vms"]}
    assert vms["web"]["running_on"] == ["hv1"] and vms["web"]["record"]["host"] == "hv1"
    assert status["ha_disarmed"]["reason"] == "switch upgrade"
    assert status["table"].startswith("HA DISARMED by test")
    # Without the lookup of each lease, as the evacuation asks it: the same, but for
    # the seconds the leases have left.
    run = playbook([{"name": "status", "yasco.cluster.cluster_status": {
        "endpoints": [etcd.url], "cluster": cluster, "hypervisors": uris,
        "domains_from": "agents", "events": 0, "leases": False}}])
    assert run.returncode == 0, run.output
    fast = run.result("status")
    assert [h["lease_ttl"] for h in fast["hypervisors"]] == [None, None, None]
    assert ([{**h, "lease_ttl": None} for h in status["hypervisors"]]
            == fast["hypervisors"])
    assert fast["vms"] == status["vms"]
