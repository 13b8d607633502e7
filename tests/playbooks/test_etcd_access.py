"""playbooks/etcd_access.yml: the etcdctl commands for an inventory's hypervisors."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access

from ..ansible_run import ROOT, run_playbook


def test_it_prints_the_roles_and_users_for_the_inventorys_hypervisors(tmp_path: Path):
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"yasco_cluster_name": "prod"},
        "children": {"yasco_hypervisors": {"hosts": {"hv1": {}, "hv2": {}}}}}}))
    rc, (shown,) = run_playbook(ROOT / "playbooks" / "etcd_access.yml",
                                str(tmp_path / "hosts.yml"))
    assert rc == 0
    assert shown["msg"] == etcd_access.as_script(["hv1", "hv2"], "prod").splitlines()
    assert ("etcdctl role grant-permission yasco-agent-hv2 --prefix=true readwrite "
            "/yasco/prod/hosts/hv2/") in shown["msg"]
