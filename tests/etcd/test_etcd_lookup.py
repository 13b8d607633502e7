"""The yasco.cluster.etcd lookup in playbooks, against real etcd servers."""

from __future__ import annotations

from .conftest import closed_port_url


def show(name: str, expression: str) -> dict:
    return {"name": name, "ansible.builtin.debug": {"msg": "{{ " + expression + " }}"}}


def test_keys_prefixes_defaults_and_json_records(etcd, prefix, playbook):
    client = etcd.client()
    client.put_json(f"{prefix}vms/web1", {"host": "hv1", "state": "running"})
    client.put_json(f"{prefix}vms/web2", {"host": "hv2", "state": "running"})
    client.put(f"{prefix}vdm/version", "7")
    lookup = "lookup('yasco.cluster.etcd', "
    run = playbook([
        show("one key", f"{lookup}'{prefix}vdm/version')"),
        show("two keys", f"query('yasco.cluster.etcd', '{prefix}vdm/version', "
                         f"'{prefix}vms/web1')"),
        show("missing", f"{lookup}'{prefix}nothing') == ''"),
        show("missing with a default", f"{lookup}'{prefix}nothing', default='none yet')"),
        show("json", f"{lookup}'{prefix}vms/web1', json=true).host"),
        show("prefix", f"{lookup}'{prefix}vms/', prefix=true, json=true)"),
        show("empty prefix", f"{lookup}'{prefix}hosts/', prefix=true)"),
    ], vars={"yasco_etcd_endpoints": [etcd.url]})
    assert run.returncode == 0, run.output
    assert run.result("one key")["msg"] == "7"
    assert run.result("two keys")["msg"] == ["7", '{"host":"hv1","state":"running"}']
    assert run.result("missing")["msg"] is True
    assert run.result("missing with a default")["msg"] == "none yet"
    assert run.result("json")["msg"] == "hv1"
    assert run.result("prefix")["msg"] == {
        f"{prefix}vms/web1": {"host": "hv1", "state": "running"},
        f"{prefix}vms/web2": {"host": "hv2", "state": "running"}}
    assert run.result("empty prefix")["msg"] == {}


def test_connection_options_come_from_keywords_variables_and_the_environment(
        etcd, etcd_tls, etcd_auth, prefix, playbook):
    etcd.client().put(f"{prefix}k", "plain")
    etcd_tls.client().put(f"{prefix}k", "tls")
    etcd_auth.client().put(f"{prefix}k", "auth")
    tls = etcd_tls.options()
    run = playbook([
        show("from the environment", f"lookup('yasco.cluster.etcd', '{prefix}k')"),
        show("from variables", f"lookup('yasco.cluster.etcd', '{prefix}k', "
                               f"endpoints=[auth_url])"),
        show("from keywords", f"lookup('yasco.cluster.etcd', '{prefix}k', "
                              f"endpoints=['{etcd_tls.url}'], ca_cert='{tls['ca_cert']}', "
                              f"client_cert='{tls['client_cert']}', "
                              f"client_key='{tls['client_key']}', username='', "
                              f"password='')"),
    ], env={"YASCO_ETCD_ENDPOINTS": etcd.url},
        vars={"auth_url": etcd_auth.url, "yasco_etcd_username": "root",
              "yasco_etcd_password": etcd_auth.password})
    assert run.returncode == 0, run.output
    assert [result["msg"] for result in run.results] == ["plain", "auth", "tls"]


def test_an_unreachable_etcd_fails_the_lookup_naming_it(prefix, playbook):
    down = closed_port_url()
    run = playbook([show("down", f"lookup('yasco.cluster.etcd', '{prefix}k', "
                                 f"endpoints=['{down}'], timeout=2)")])
    assert run.returncode != 0
    assert (f"yasco.cluster.etcd: etcd at {down}: unreachable within 2 s ({down}: connection "
            f"refused): check endpoints (yasco_etcd_endpoints) and that etcd runs there"
            ) in run.result("down")["msg"], run.result("down")["msg"]


def test_a_wrong_password_fails_the_lookup_saying_so(etcd_auth, prefix, playbook):
    run = playbook([show("wrong password", f"lookup('yasco.cluster.etcd', '{prefix}k', "
                                           f"username='root', password='not-the-password')")],
                   vars={"yasco_etcd_endpoints": [etcd_auth.url]})
    assert run.returncode != 0
    assert (f"etcd at {etcd_auth.url}: authentication as 'root' failed: wrong user name or "
            f"password") in run.result("wrong password")["msg"]


def test_a_record_that_is_not_json_fails_the_lookup_naming_the_key(etcd, prefix, playbook):
    etcd.client().put(f"{prefix}vms/web1", "running on hv1")
    run = playbook([show("not json", f"lookup('yasco.cluster.etcd', '{prefix}vms/web1', "
                                     f"json=true)")],
                   vars={"yasco_etcd_endpoints": [etcd.url]})
    assert run.returncode != 0
    assert f"{prefix}vms/web1 holds no JSON" in run.result("not json")["msg"]
