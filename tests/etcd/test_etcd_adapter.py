"""The etcd adapter against real etcd servers: keys, compare-and-swap, leases, TLS,
authentication, fail-over, and errors that name the endpoint and say what to do;
and the key layout it is used with."""

from __future__ import annotations

import threading
import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    CONNECTION_OPTIONS, EtcdClient, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_ARGUMENT_SPEC)

from .conftest import CuttableLink, closed_port_url, wait_for


# -- keys ---------------------------------------------------------------------------


def test_a_value_reads_back_with_its_revisions(etcd, prefix):
    client = etcd.client()
    key = f"{prefix}vm"
    first = client.put(key, "héllo ✓")
    second = client.put(key, "again")
    found = client.get(key)
    assert found.value == "again"
    assert (found.create_revision, found.mod_revision, found.version, found.lease) == (
        first, second, 2, 0)
    assert client.get(f"{prefix}missing") is None


def test_a_prefix_reads_and_deletes_only_the_keys_under_it(etcd, prefix):
    client = etcd.client()
    for key in ("a/1", "a/2", "a/3/x", "ab", "b"):
        client.put(f"{prefix}{key}", key)
    under = client.get_prefix(f"{prefix}a/")
    assert [kv.key for kv in under] == [f"{prefix}a/1", f"{prefix}a/2", f"{prefix}a/3/x"]
    both = client.get_prefixes([f"{prefix}a/", f"{prefix}b"])
    assert [kv.value for kv in both[f"{prefix}b"]] == ["b"]
    assert client.delete_prefix(f"{prefix}a/") == 3
    assert client.delete_prefix(f"{prefix}a/") == 0
    assert [kv.key for kv in client.get_prefix(prefix)] == [f"{prefix}ab", f"{prefix}b"]
    assert client.delete(f"{prefix}ab") == 1 and client.delete(f"{prefix}ab") == 0


def test_deleting_the_whole_keyspace_is_refused(etcd):
    with pytest.raises(EtcdError, match="give a non-empty prefix"):
        etcd.client().delete_prefix("")


def test_json_records_round_trip_and_a_record_that_is_not_json_names_its_key(etcd, prefix):
    client = etcd.client()
    client.put_json(f"{prefix}vm", {"state": "running", "host": "hv1"})
    assert client.get(f"{prefix}vm").value == '{"host":"hv1","state":"running"}'
    assert client.get_json(f"{prefix}vm") == {"host": "hv1", "state": "running"}
    assert client.get_json(f"{prefix}none", default={}) == {}
    client.put(f"{prefix}junk", "not json")
    with pytest.raises(EtcdError, match=f"{prefix}junk holds no JSON"):
        client.get_json(f"{prefix}junk")


# -- compare-and-swap ---------------------------------------------------------------


def test_revision_zero_creates_a_key_only_when_it_is_absent(etcd, prefix):
    client = etcd.client()
    key = f"{prefix}fence"
    created = client.put_if(key, "first", mod_revision=0)
    assert created.succeeded
    lost = client.put_if(key, "second", mod_revision=0)
    assert not lost.succeeded
    assert lost.current.value == "first" and lost.current.mod_revision == created.revision
    assert client.get(key).value == "first"


def test_a_swap_on_a_stale_revision_or_value_fails_and_shows_the_key_as_it_is(etcd, prefix):
    client = etcd.client()
    key = f"{prefix}vm"
    revision = client.put(key, "on hv1")
    assert client.put_if(key, "on hv2", mod_revision=revision).succeeded
    stale = client.put_if(key, "on hv3", mod_revision=revision)
    assert not stale.succeeded and stale.current.value == "on hv2"
    assert not client.put_if(key, "on hv3", value_equals="on hv1").succeeded
    assert client.put_if(key, "on hv3", value_equals="on hv2").succeeded
    assert not client.delete_if(key, value_equals="on hv2").succeeded
    assert client.get(key).value == "on hv3"
    assert client.delete_if(key, mod_revision=client.get(key).mod_revision).succeeded
    assert client.get(key) is None
    missing = client.put_if(key, "x", value_equals="on hv3")
    assert not missing.succeeded and missing.current is None


def test_of_concurrent_writers_on_one_revision_exactly_one_wins(etcd, prefix):
    key = f"{prefix}vm"
    revision = etcd.client().put(key, "start")
    outcomes: dict[int, bool] = {}
    barrier = threading.Barrier(8)

    def writer(number: int) -> None:
        client = etcd.client()  # one client per thread
        barrier.wait()
        outcomes[number] = client.put_if(key, f"writer {number}", mod_revision=revision).succeeded

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [number for number, won in outcomes.items() if won]
    assert len(outcomes) == 8 and len(winners) == 1
    assert etcd.client().get(key).value == f"writer {winners[0]}"


# -- leases -------------------------------------------------------------------------


def test_a_key_bound_to_a_lease_goes_when_the_lease_expires(etcd, prefix):
    client = etcd.client()
    lease = client.grant_lease(1)
    key = f"{prefix}alive"
    client.put(key, "up", lease=lease.id)
    assert client.get(key).lease == lease.id
    assert client.lease_info(lease.id).keys == (key,)
    assert wait_for(lambda: client.get(key) is None, 5), "the key outlived its lease"
    assert client.lease_info(lease.id) is None
    assert client.keepalive_once(lease.id) is None
    with pytest.raises(EtcdError, match=f"lease {lease.id} does not exist .*grant a new lease"):
        client.put(key, "up", lease=lease.id)


def test_renewing_a_lease_keeps_its_keys(etcd, prefix):
    client = etcd.client()
    lease = client.grant_lease(2)
    client.put(f"{prefix}alive", "up", lease=lease.id)
    for dummy in range(6):  # 3 s, past the TTL, renewed every 0.5 s
        time.sleep(0.5)
        assert client.keepalive_once(lease.id) == 2
    assert client.get(f"{prefix}alive").value == "up"
    client.revoke_lease(lease.id)


def test_revoking_a_lease_deletes_its_keys_and_revoking_again_reports_it_gone(etcd, prefix):
    client = etcd.client()
    lease = client.grant_lease(60)
    info = client.lease_info(lease.id)
    assert info.granted_ttl == 60 and 0 < info.ttl <= 60
    client.put(f"{prefix}a", "1", lease=lease.id)
    client.put(f"{prefix}b", "2", lease=lease.id)
    assert client.revoke_lease(lease.id) is True
    assert client.get_prefix(prefix) == []
    assert client.revoke_lease(lease.id) is False


def test_a_lease_can_be_granted_under_a_chosen_id_once(etcd):
    client = etcd.client()
    lease_id = int(time.time_ns() % 10**15)
    assert client.grant_lease(30, lease_id).id == lease_id
    with pytest.raises(EtcdError, match="lease already exists"):
        client.grant_lease(30, lease_id)
    client.revoke_lease(lease_id)


# -- reaching etcd ------------------------------------------------------------------


def test_an_unreachable_endpoint_fails_within_the_timeout_naming_it():
    url = closed_port_url()
    started = time.monotonic()
    with pytest.raises(EtcdError) as failure:
        EtcdClient([url], timeout=2).get("/x")
    assert time.monotonic() - started < 2
    assert str(failure.value) == (
        f"etcd at {url}: unreachable within 2 s ({url}: connection refused): check "
        f"endpoints (yasco_etcd_endpoints) and that etcd runs there")


def test_a_watch_through_a_down_member_with_a_user_fails_as_etcd_errors_do():
    # The watcher's stream of a member that died with its host retries quietly on an
    # EtcdError; anything else is logged with a traceback every two seconds.
    url = closed_port_url()
    watch = EtcdClient([url], timeout=2, username="watcher", password="secret").watch_prefix(
        "/yasco/", 1, idle=1)
    with pytest.raises(EtcdError, match=f"etcd at {url}: watch /yasco/\\*: "):
        next(watch)


def test_a_down_endpoint_is_passed_over_for_the_next(etcd, prefix):
    down = closed_port_url()
    client = EtcdClient([down, etcd.url], timeout=2)
    client.put(f"{prefix}k", "v")
    assert client.endpoint == etcd.url
    assert client.get(f"{prefix}k").value == "v"


def test_a_process_holding_over_1024_descriptors_still_picks_its_member(etcd, prefix):
    """select() cannot wait on a descriptor numbered 1024 or more; a watcher or a test
    run that has opened many connections must still reach etcd."""
    held = [os.open(os.devnull, os.O_RDONLY) for dummy in range(1100)]
    try:
        client = EtcdClient([closed_port_url(), etcd.url], timeout=2)
        client.put(f"{prefix}many", "v")
        assert client.endpoint == etcd.url
    finally:
        for descriptor in held:
            os.close(descriptor)


@pytest.fixture(name="linked")
def fixture_linked(etcd, prefix):
    """A client whose member is reached through a link a test can cut, the member
    after it reached directly, and a key `a` written through the link."""
    link = CuttableLink(etcd.url)
    try:
        client = EtcdClient([link.url, etcd.url], timeout=2)
        client.put(f"{prefix}k", "a")
        assert client.endpoint == link.url
        yield link, client
    finally:
        link.close()


def test_a_swap_sent_to_a_member_that_dies_is_tried_once_more_on_the_next(
        etcd, prefix, linked):
    """Its member died with the request unsent: the second try applies it once."""
    link, client = linked
    link.requests = False
    assert client.put_if(f"{prefix}k", "b", value_equals="a").succeeded
    assert client.endpoint == etcd.url and client.get(f"{prefix}k").value == "b"


def test_a_swap_its_dying_member_applied_is_reported_as_maybe_applied(prefix, linked):
    """Applied, but the answer was lost: the second try's comparison fails, and the
    caller is told it may have been applied, never that it failed."""
    link, client = linked
    link.replies = False
    with pytest.raises(EtcdError) as failure:
        client.put_if(f"{prefix}k", "b", value_equals="a")
    assert str(failure.value).startswith(
        f"etcd at {link.url}: no answer to write {prefix}k within 2 s; it may or may not "
        "have been applied")
    assert client.get(f"{prefix}k").value == "b"


def test_when_every_endpoint_is_down_each_is_named():
    first, second = closed_port_url(), closed_port_url()
    with pytest.raises(EtcdError, match=f"^etcd at {first}, {second}: unreachable within 5 s "
                                        f"\\({first}: connection refused; {second}: "):
        EtcdClient([first, second]).get("/x")


@pytest.mark.parametrize("url", ["10.0.0.1:2379", "ftp://10.0.0.1:2379",
                                 "http://10.0.0.1:2379/v3", "http://10.0.0.1:port"])
def test_an_endpoint_that_is_not_a_url_is_refused_naming_it(url):
    with pytest.raises(EtcdError, match=f"endpoints: '{url}' is not a URL like "
                                        f"https://10.0.0.1:2379"):
        EtcdClient([url])


def test_connect_takes_a_modules_options_and_refuses_incomplete_ones(etcd, prefix):
    assert ETCD_ARGUMENT_SPEC["endpoints"]["required"] is True
    assert ETCD_ARGUMENT_SPEC["password"]["no_log"] is True
    assert tuple(ETCD_ARGUMENT_SPEC) == CONNECTION_OPTIONS  # what the plugins read
    client = connect({"endpoints": [etcd.url], "ca_cert": None, "client_cert": None,
                      "client_key": None, "username": None, "password": None,
                      "timeout": 5.0})
    client.put(f"{prefix}k", "v")
    assert client.get(f"{prefix}k").value == "v"
    with pytest.raises(EtcdError, match="endpoints: none given: set endpoints"):
        connect({"endpoints": []})
    with pytest.raises(EtcdError, match="set both or neither of username and password"):
        connect({"endpoints": [etcd.url], "username": "root"})
    with pytest.raises(EtcdError, match="ca_cert: /nonexistent/ca.pem is not a file"):
        connect({"endpoints": [etcd.url], "ca_cert": "/nonexistent/ca.pem"})


# -- TLS ----------------------------------------------------------------------------


def test_tls_with_a_client_certificate_works(etcd_tls, prefix):
    client = etcd_tls.client()
    client.put(f"{prefix}k", "over tls")
    assert client.get(f"{prefix}k").value == "over tls"


def test_a_wrong_ca_fails_saying_to_check_ca_cert(etcd_tls):
    with pytest.raises(EtcdError) as failure:
        etcd_tls.client(ca_cert=etcd_tls.wrong_ca).get("/x")
    message = str(failure.value)
    assert message.startswith(f"etcd at {etcd_tls.url}: unreachable within 5 s "
                              f"({etcd_tls.url}: TLS: certificate verify failed: "), message
    assert message.endswith("check that ca_cert (yasco_etcd_ca_cert) is the CA that signed "
                            "etcd's server certificate and that the certificate names the "
                            "endpoint's host"), message


def test_no_client_certificate_fails_saying_to_check_the_certificates(etcd_tls):
    with pytest.raises(EtcdError) as failure:
        etcd_tls.client(client_cert=None, client_key=None).get("/x")
    message = str(failure.value)
    assert f"{etcd_tls.url}: TLS handshake failed: " in message, message
    assert "check ca_cert, client_cert and client_key" in message, message


# -- authentication -----------------------------------------------------------------


def test_username_and_password_work(etcd_auth, prefix):
    client = etcd_auth.client()
    client.put(f"{prefix}k", "authenticated")
    assert client.get(f"{prefix}k").value == "authenticated"


def test_a_wrong_password_fails_saying_to_check_the_credentials(etcd_auth):
    with pytest.raises(EtcdError) as failure:
        etcd_auth.client(password="wrong").get("/x")
    assert str(failure.value) == (
        f"etcd at {etcd_auth.url}: authentication as 'root' failed: wrong user name or "
        f"password: check username and password (yasco_etcd_username, yasco_etcd_password)")


def test_no_credentials_fails_saying_authentication_is_required(etcd_auth):
    with pytest.raises(EtcdError, match=f"^etcd at {etcd_auth.url} requires authentication: "
                                        f"set username and password"):
        etcd_auth.client(username=None, password=None).get("/x")


def test_a_rejected_token_is_renewed_once(etcd_auth, prefix):
    client = etcd_auth.client()
    client.put(f"{prefix}k", "v")
    member = client._gateway.members[0]
    old_token = member.token
    # As after the token's TTL or a restart of etcd: the server no longer knows it.
    member.session.headers["Authorization"] = member.token = "stale.1"
    assert client.get(f"{prefix}k").value == "v"
    assert member.token not in ("stale.1", old_token)


def test_a_user_without_the_permission_is_told_what_it_may_not_do(etcd_auth, prefix):
    reader = etcd_auth.client(username="reader", password=etcd_auth.credentials["reader"])
    etcd_auth.client().put(f"{prefix}k", "v")
    assert reader.get(f"{prefix}k").value == "v"
    with pytest.raises(EtcdError, match=f"^etcd at {etcd_auth.url}: user 'reader' may not "
                                        f"write {prefix}k: permission denied: grant"):
        reader.put(f"{prefix}k", "w")


# -- the key layout -----------------------------------------------------------------

names = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
                min_size=1, max_size=20)


@given(cluster=names, host=names, vm=names)
def test_every_key_parses_back_to_what_it_names(cluster, host, vm):
    assert etcd_keys.parse_key(etcd_keys.registered_key(host, cluster=cluster),
                               cluster=cluster) == ("registered", host, None)
    assert etcd_keys.parse_key(etcd_keys.alive_key(host, cluster=cluster),
                               cluster=cluster) == ("alive", host, None)
    assert etcd_keys.parse_key(etcd_keys.maintenance_key(host, cluster=cluster),
                               cluster=cluster) == ("maintenance", host, None)
    assert etcd_keys.parse_key(etcd_keys.domain_key(host, vm, cluster=cluster),
                               cluster=cluster) == ("domain", host, vm)
    assert etcd_keys.parse_key(etcd_keys.vm_key(vm, cluster=cluster),
                               cluster=cluster) == ("vm", None, vm)
    assert etcd_keys.parse_key(etcd_keys.fence_key(host, cluster=cluster),
                               cluster=cluster) == ("fence", host, None)


def test_the_layout_is_the_documented_one():
    assert etcd_keys.alive_key("hv1") == "/yasco/yasco/hosts/hv1/alive"
    assert etcd_keys.domain_key("hv1", "web1", cluster="lab") == \
        "/yasco/lab/hosts/hv1/domains/web1"
    assert etcd_keys.vm_key("web1") == "/yasco/yasco/vms/web1"
    assert etcd_keys.fence_key("hv2") == "/yasco/yasco/fences/hv2"
    assert etcd_keys.vdm_version_key() == "/yasco/yasco/vdm/version"
    assert etcd_keys.parse_key("/yasco/yasco/vdm/version") == ("vdm_version", None, None)
    assert etcd_keys.parse_key(etcd_keys.history_key(7)) == ("history", None, None)
    assert etcd_keys.parse_key("/yasco/yasco/hosts/hv1/unknown") is None
    assert etcd_keys.parse_key("/yasco/other/vms/web1") is None


def test_history_keys_sort_in_event_order():
    events = [0, 9, 10, 1_700_000_000_000_000_000, 99]
    assert sorted(etcd_keys.history_key(n) for n in events) == \
        [etcd_keys.history_key(n) for n in sorted(events)]


@pytest.mark.parametrize("build", [lambda: etcd_keys.vm_key("a/b"),
                                   lambda: etcd_keys.alive_key(""),
                                   lambda: etcd_keys.cluster_prefix("x/y")])
def test_a_name_that_would_break_the_layout_is_refused(build):
    with pytest.raises(ValueError, match="name .*: must "):
        build()
