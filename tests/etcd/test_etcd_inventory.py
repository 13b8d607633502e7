"""The yasco.cluster.etcd inventory plugin through ansible-inventory, as AWX runs it,
against keys a test writes into a real etcd with the layout's own key functions."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from .conftest import ROOT, ansible_env, closed_port_url


def plain(data: Any) -> Any:
    """The listing without the markers ansible-inventory puts on text from plugins."""
    if isinstance(data, dict):
        if set(data) == {"__ansible_unsafe"}:
            return data["__ansible_unsafe"]
        return {key: plain(value) for key, value in data.items()}
    if isinstance(data, list):
        return [plain(item) for item in data]
    return data


def inventory(directory: Path, config: dict[str, Any], *args: str, name: str = "cluster.etcd.yml",
              **env: str) -> subprocess.CompletedProcess[str]:
    source = directory / name
    source.write_text(yaml.safe_dump({"plugin": "yasco.cluster.etcd", **config}))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                           str(source), "--list", *args], cwd=ROOT,
                          env=ansible_env(ANSIBLE_INVENTORY_UNPARSED_FAILED="true", **env),
                          capture_output=True, text=True, timeout=120, check=False)


def listing(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return plain(json.loads(done.stdout))


def hosts_of(groups: dict[str, Any], group: str) -> list[str]:
    return sorted(groups.get(group, {}).get("hosts", []))


ALIVE = {"address": "10.0.0.1", "boot_id": "b1", "agent_version": "0.1.0",
         "started": "2025-01-01T00:00:00Z", "ceph_addrs": ["10.0.1.1"]}


@pytest.fixture(name="cluster_listing", scope="module")
def fixture_cluster_listing(etcd_servers, tmp_path_factory) -> tuple[str, dict[str, Any], str]:
    """A cluster of four hypervisors and three VMs in etcd, listed once for the tests
    below: (cluster, listing, warnings)."""
    etcd = etcd_servers["plain"]
    cluster = f"c{uuid.uuid4().hex[:8]}"
    client = etcd.client()
    for host in ("hv1", "hv2", "hv3", "hv4"):
        client.put_json(etcd_keys.registered_key(host, cluster=cluster), {"rack": host[-1]})
    client.put_json(etcd_keys.alive_key("hv1", cluster=cluster), ALIVE)
    client.put_json(etcd_keys.alive_key("hv4", cluster=cluster), {**ALIVE, "address": "10.0.0.4"})
    client.put_json(etcd_keys.maintenance_key("hv3", cluster=cluster), {"reason": "firmware"})
    client.put_json(etcd_keys.maintenance_key("hv4", cluster=cluster), {"reason": "drain"})
    client.put_json(etcd_keys.domain_key("hv1", "web1", cluster=cluster), {"state": "running"})
    client.put_json(etcd_keys.domain_key("hv1", "db1", cluster=cluster), {"state": "running"})
    # An agent that runs on a host nobody registered: not a hypervisor of the cluster.
    client.put_json(etcd_keys.alive_key("stray", cluster=cluster), ALIVE)
    client.put_json(etcd_keys.vm_key("web1", cluster=cluster),
                    {"host": "hv1", "state": "running", "since": "2025-01-01T00:00:00Z"})
    client.put_json(etcd_keys.vm_key("db1", cluster=cluster), {"host": "hv1", "state": "running"})
    client.put_json(etcd_keys.vm_key("web2", cluster=cluster), {"host": "hv2", "state": "stopped"})
    client.put_json(etcd_keys.fence_key("hv2", cluster=cluster), {"by": "hv1"})
    client.put_json(etcd_keys.vm_key("other", cluster=f"{cluster}x"), {"host": "hv9"})
    done = inventory(tmp_path_factory.mktemp("inventory"), {
        "cluster": cluster,
        "compose": {"ansible_host": "yasco_alive.address | default(inventory_hostname)"},
        "keyed_groups": [{"key": "yasco_alive.agent_version | default('none')",
                          "prefix": "agent"}],
        "groups": {"racked_2": "(yasco_registered | default({})).rack | default('') == '2'"},
    }, YASCO_ETCD_ENDPOINTS=etcd.url)
    return cluster, listing(done), done.stderr


def test_registered_hosts_are_hypervisors_grouped_alive_failed_or_in_maintenance(
        cluster_listing):
    dummy, groups, dummy = cluster_listing
    assert hosts_of(groups, "yasco_hypervisors") == ["hv1", "hv2", "hv3", "hv4"]
    assert sorted(groups["yasco_hypervisors"]["children"]) == [
        "yasco_hypervisors_alive", "yasco_hypervisors_failed", "yasco_hypervisors_maintenance"]
    assert hosts_of(groups, "yasco_hypervisors_alive") == ["hv1", "hv4"]
    assert hosts_of(groups, "yasco_hypervisors_failed") == ["hv2"]
    assert hosts_of(groups, "yasco_hypervisors_maintenance") == ["hv3", "hv4"]


def test_hypervisors_carry_their_records_and_running_domains(cluster_listing):
    dummy, groups, dummy = cluster_listing
    hostvars = groups["_meta"]["hostvars"]
    assert hostvars["hv1"]["yasco_alive"] == ALIVE
    assert hostvars["hv1"]["yasco_registered"] == {"rack": "1"}
    assert hostvars["hv1"]["yasco_running_domains"] == ["db1", "web1"]
    assert "yasco_maintenance" not in hostvars["hv1"]
    assert "yasco_alive" not in hostvars["hv2"] and hostvars["hv2"]["yasco_running_domains"] == []
    assert hostvars["hv3"]["yasco_maintenance"] == {"reason": "firmware"}


def test_an_unregistered_host_is_left_out_with_a_warning(cluster_listing):
    cluster, groups, warnings = cluster_listing
    assert "stray" not in groups["_meta"]["hostvars"]
    assert (f"stray has alive under /yasco/{cluster}/hosts/stray/ but is not registered: "
            f"left out of the inventory") in warnings


def test_vm_records_are_hosts_grouped_by_where_they_run(cluster_listing):
    dummy, groups, dummy = cluster_listing
    hostvars = groups["_meta"]["hostvars"]
    assert hosts_of(groups, "yasco_vm_records") == ["db1", "web1", "web2"]
    assert hosts_of(groups, "yasco_running_on_hv1") == ["db1", "web1"]
    assert hosts_of(groups, "yasco_running_on_hv2") == ["web2"]
    assert hostvars["web1"]["yasco_vm_record"] == {
        "host": "hv1", "state": "running", "since": "2025-01-01T00:00:00Z"}
    assert hostvars["web2"]["yasco_running_on"] == "hv2"
    assert "other" not in hostvars  # another cluster's VM


def test_compose_groups_and_keyed_groups_apply(cluster_listing):
    dummy, groups, dummy = cluster_listing
    hostvars = groups["_meta"]["hostvars"]
    assert hostvars["hv4"]["ansible_host"] == "10.0.0.4"
    assert hostvars["hv2"]["ansible_host"] == "hv2"
    assert hosts_of(groups, "agent_0_1_0") == ["hv1", "hv4"]
    assert hosts_of(groups, "racked_2") == ["hv2"]


def test_tls_options_in_the_file_work(etcd_tls, tmp_path):
    cluster = f"c{uuid.uuid4().hex[:8]}"
    etcd_tls.client().put_json(etcd_keys.registered_key("hv1", cluster=cluster), {})
    groups = listing(inventory(tmp_path, {"cluster": cluster, **etcd_tls.options()}))
    assert hosts_of(groups, "yasco_hypervisors_failed") == ["hv1"]


def test_the_cache_serves_the_last_reading_until_flushed(etcd, tmp_path):
    cluster = f"c{uuid.uuid4().hex[:8]}"
    client = etcd.client()
    client.put_json(etcd_keys.registered_key("hv1", cluster=cluster), {})
    config = {"cluster": cluster, "endpoints": [etcd.url], "cache": True,
              "cache_plugin": "ansible.builtin.jsonfile",
              "cache_connection": str(tmp_path / "cache")}
    assert hosts_of(listing(inventory(tmp_path, config)), "yasco_hypervisors_failed") == ["hv1"]
    client.put_json(etcd_keys.alive_key("hv1", cluster=cluster), ALIVE)
    cached = listing(inventory(tmp_path, config))
    assert hosts_of(cached, "yasco_hypervisors_failed") == ["hv1"]
    fresh = listing(inventory(tmp_path, config, "--flush-cache"))
    assert hosts_of(fresh, "yasco_hypervisors_alive") == ["hv1"]


def test_a_config_file_with_another_name_is_rejected(etcd, tmp_path):
    done = inventory(tmp_path, {"endpoints": [etcd.url]}, name="cluster.yml")
    assert done.returncode != 0
    assert (f"inventory source '{tmp_path / 'cluster.yml'}' could not be verified by "
            f"inventory plugin 'yasco.cluster.etcd'") in done.stderr, done.stderr


def test_an_unreachable_etcd_is_reported_naming_it(tmp_path):
    down = closed_port_url()
    done = inventory(tmp_path, {"endpoints": [down], "timeout": 2})
    assert done.returncode != 0
    assert (f"cluster.etcd.yml: etcd at {down}: unreachable within 2 s ({down}: connection "
            f"refused)") in done.stderr, done.stderr


@pytest.mark.parametrize("option, value, message", [
    ("cluster", "a/b", "cluster.etcd.yml: cluster name 'a/b': must not contain '/'"),
    ("endpoints", ["etcd1:2379"], "endpoints: 'etcd1:2379' is not a URL like "
                                  "https://10.0.0.1:2379"),
    ("timeout", "soon", "Config 'timeout'"),
])
def test_a_bad_option_is_reported_naming_it(etcd, tmp_path, option, value, message):
    done = inventory(tmp_path, {"endpoints": [etcd.url], option: value})
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
