"""An etcd not run as YASCO's production etcd is (TLS and authentication both,
docs/security.md) is refused by every client, naming the endpoint, why and what to do:
plain http and a client without a user before any request, authentication found off
at the first. The lab-only switch YASCO_ETCD_ALLOW_INSECURE=1 lets them use it as
before. Through EtcdClient itself, a module and the lookup under ansible-playbook, the
inventory plugin under ansible-inventory and the HA watcher's event source; the
agent's refusal is in tests/unit (test_host_agent.py).

Each test of a refusal runs without the switch (`secure_only`) that the other tests
here have on (conftest.py)."""

from __future__ import annotations

import asyncio

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE, EtcdError)

from .test_etcd_hosts_source import etcd_hosts
from .test_etcd_inventory import inventory

SWITCH_ADVICE = (f"for a lab's or a test's throwaway etcd only, set {ALLOW_INSECURE}=1 in "
                 f"the environment of ansible-playbook, ansible-rulebook or the agent")


def plain_http(url: str) -> str:
    return (f"etcd at {url}: refused: plain http sends the password, its token and every "
            f"key in clear, and nothing proves the server is your etcd: use https:// "
            f"endpoints with ca_cert, client_cert and client_key")


def no_user(url: str) -> str:
    return (f"etcd at {url}: refused: no username is given, while YASCO's etcd runs with "
            f"authentication on and each part as a user of its own: set username and "
            f"password (yasco_etcd_username, yasco_etcd_password)")


def auth_off(url: str) -> str:
    return (f"etcd at {url}: refused: authentication is not enabled there, so any client "
            f"it admits may read and write every key")


@pytest.mark.usefixtures("secure_only")
def test_a_plain_http_endpoint_is_refused_before_any_request(etcd_auth):
    with pytest.raises(EtcdError) as refused:
        etcd_auth.client()
    assert str(refused.value).startswith(plain_http(etcd_auth.url)), refused.value
    assert str(refused.value).endswith(f"; docs/security.md has the setup; {SWITCH_ADVICE}")


@pytest.mark.usefixtures("secure_only")
def test_of_several_endpoints_the_plain_http_ones_are_named(etcd_auth, etcd_tls):
    with pytest.raises(EtcdError) as refused:
        EtcdClient([etcd_tls.url, etcd_auth.url], username="root", password="x")
    assert str(refused.value).startswith(plain_http(etcd_auth.url)), refused.value


@pytest.mark.usefixtures("secure_only")
def test_a_client_without_a_user_is_refused_before_any_request(etcd_tls):
    with pytest.raises(EtcdError) as refused:
        etcd_tls.client()
    assert str(refused.value).startswith(no_user(etcd_tls.url)), refused.value
    assert str(refused.value).endswith(SWITCH_ADVICE)


@pytest.mark.usefixtures("secure_only")
def test_plain_http_without_a_user_is_refused_for_both(etcd):
    with pytest.raises(EtcdError) as refused:
        etcd.client()
    assert str(refused.value).startswith(plain_http(etcd.url)), refused.value
    assert "; and no username is given" in str(refused.value)


@pytest.mark.usefixtures("secure_only")
def test_an_etcd_with_authentication_off_is_refused_at_the_first_request(etcd_tls, prefix):
    # TLS with a client certificate, and a user given: but etcd does not check users.
    client = etcd_tls.client(username="root", password="anything")
    with pytest.raises(EtcdError) as refused:
        client.put(f"{prefix}k", "v")
    assert str(refused.value).startswith(auth_off(etcd_tls.url)), refused.value
    assert ("enable it (etcdctl auth enable, docs/production.md section 1); "
            f"{SWITCH_ADVICE}") in str(refused.value)
    with pytest.raises(EtcdError, match=f"^etcd at {etcd_tls.url}: refused: authentication "
                                        f"is not enabled"):
        list(client.watch_prefix(prefix, 1, idle=1))
    client.close()
    with etcd_tls.client(allow_insecure=True) as reader:
        assert reader.get(f"{prefix}k") is None  # nothing was written


@pytest.mark.usefixtures("secure_only")
@pytest.mark.parametrize("value", ["", "0", "no", "false"])
def test_only_a_yes_turns_the_switch_on(etcd_auth, monkeypatch, value):
    monkeypatch.setenv(ALLOW_INSECURE, value)
    with pytest.raises(EtcdError, match="refused: plain http"):
        etcd_auth.client()


@pytest.mark.parametrize(("server", "user"), [
    ("auth", "root"),  # plain http, with a user
    ("tls", None),  # TLS, without a user
    ("tls", "root"),  # TLS and a user, authentication off
    ("plain", "root"),  # all three
    ("plain", None),
])
def test_with_the_lab_switch_each_is_used_as_before(etcd_servers, server, user, prefix):
    etcd = etcd_servers[server]
    password = etcd.password or "anything"
    with etcd.client(username=user, password=password if user else None) as client:
        client.put(f"{prefix}k", server)
        assert client.get(f"{prefix}k").value == server
        client.delete(f"{prefix}k")


@pytest.mark.usefixtures("secure_only")
def test_the_clients_own_option_overrides_the_environment(etcd_auth, monkeypatch, prefix):
    with etcd_auth.client(allow_insecure=True) as client:
        assert client.get(f"{prefix}k") is None
    monkeypatch.setenv(ALLOW_INSECURE, "1")
    with pytest.raises(EtcdError, match="refused: plain http"):
        etcd_auth.client(allow_insecure=False)


@pytest.mark.parametrize("switch", [False, True])
def test_a_module_and_the_lookup_refuse_it_naming_the_endpoint_without_a_traceback(
        etcd_auth, etcd_tls, prefix, playbook, monkeypatch, switch):
    if not switch:
        monkeypatch.delenv(ALLOW_INSECURE)
    auth_off_options = etcd_tls.options(username="root", password="anything")
    run = playbook([
        {"name": "module over http", "ignore_errors": True,
         "yasco.cluster.etcd_key_info": {"key": f"{prefix}k", **etcd_auth.options()}},
        {"name": "module with authentication off", "ignore_errors": True,
         "yasco.cluster.etcd_key_info": {"key": f"{prefix}k", **auth_off_options}},
        {"name": "lookup without a user", "ignore_errors": True,
         "ansible.builtin.debug": {"msg": f"{{{{ lookup('yasco.cluster.etcd', '{prefix}k', "
                                          f"endpoints=['{etcd_tls.url}'], "
                                          f"ca_cert='{etcd_tls.ca_cert}', "
                                          f"client_cert='{etcd_tls.client_cert}', "
                                          f"client_key='{etcd_tls.client_key}', "
                                          f"default='absent') }}}}"}},
    ])
    http, off, lookup = (run.result(name) for name in (
        "module over http", "module with authentication off", "lookup without a user"))
    if switch:
        assert not http.get("failed") and http["exists"] is False, http
        assert not off.get("failed") and off["exists"] is False, off
        assert lookup["msg"] == "absent", lookup
        return
    assert http["failed"] and http["msg"].startswith(plain_http(etcd_auth.url)), http
    assert off["failed"] and off["msg"].startswith(auth_off(etcd_tls.url)), off
    assert lookup["failed"] and no_user(etcd_tls.url) in lookup["msg"], lookup
    for result in (http, off, lookup):
        assert SWITCH_ADVICE in result["msg"]


@pytest.mark.usefixtures("secure_only")
def test_the_inventory_plugin_refuses_it_naming_the_endpoint(etcd_auth, tmp_path):
    done = inventory(tmp_path, {"endpoints": [etcd_auth.url], "username": etcd_auth.username,
                                "password": etcd_auth.password})
    assert done.returncode != 0
    assert f"cluster.etcd.yml: {plain_http(etcd_auth.url)}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("secure_only")
def test_the_event_source_refuses_it_naming_the_endpoint(etcd_auth):
    class Queue:
        async def put(self, event):
            raise AssertionError(f"an event from a refused etcd: {event}")

    args = {"endpoints": [etcd_auth.url], "username": etcd_auth.username,
            "password": etcd_auth.password, "cluster": "refused"}
    with pytest.raises(EtcdError) as refused:
        asyncio.run(asyncio.wait_for(etcd_hosts.main(Queue(), args), 30))
    assert str(refused.value).startswith(plain_http(etcd_auth.url)), refused.value
