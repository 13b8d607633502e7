"""The lab's cluster is real and reachable the way production hosts are."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import libvirt
import pytest
import rbd
import yaml

from yasco_lab import lab as lab_verbs
from yasco_lab import etcd as lab_etcd
from yasco_lab import layout, storage
from yasco_lab.credentials import etcd_client

from .conftest import yasco_lab

REPO = Path(__file__).resolve().parents[2]


def test_etcd_cluster_has_one_healthy_member_per_hypervisor(lab):
    request = urllib.request.Request(f"{lab['etcd_endpoints'][0]}/v3/cluster/member/list",
                                     data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5, context=lab_etcd.tls_context()) as reply:
        members = json.load(reply)["members"]
    assert sorted(m["name"] for m in members) == ["hv1", "hv2", "hv3"]
    for host in lab["hosts"]:
        assert host["etcd"] == "healthy"
    # A write on one member is read back through another.
    first, last = (etcd_client([h["etcd_client_url"]]) for h in (lab["hosts"][0],
                                                                 lab["hosts"][2]))
    with first, last:
        first.put("/yasco-lab-test/key", "value")
        assert last.get("/yasco-lab-test/key").value == "value"
        first.delete("/yasco-lab-test/key")


def test_ceph_is_healthy_and_the_pool_is_usable_through_cephx(lab):
    assert lab["ceph"]["health"] == "HEALTH_OK"
    keyring = str(layout.ceph_hypervisor_keyring_path())
    with storage.pool(client=layout.CEPH_HYPERVISOR_CLIENT, keyring=keyring) as ioctx:
        rbd.RBD().create(ioctx, "cephx-probe", 4 << 20)
        try:
            with rbd.Image(ioctx, "cephx-probe") as image:
                image.write(b"yasco", 4096)
                assert image.read(4096, 5) == b"yasco"
        finally:
            rbd.RBD().remove(ioctx, "cephx-probe")


def test_hypervisor_reaches_ceph_with_its_own_key(lab):
    result = lab_verbs.run_on_host("hv2", "rbd", "-n", f"client.{layout.CEPH_HYPERVISOR_CLIENT}",
                                   "ls", layout.CEPH_POOL, timeout=30)
    assert result.returncode == 0, result.stderr


def test_each_libvirtd_answers_on_its_uri_and_over_ssh(lab):
    for host in lab["hosts"]:
        conn = libvirt.open(host["libvirt_uri"])
        try:
            assert conn.getHostname() == host["name"]
            assert conn.secretLookupByUUIDString(layout.CEPH_SECRET_UUID).usageID() \
                == f"client.{layout.CEPH_HYPERVISOR_CLIENT} secret"
        finally:
            conn.close()
        ssh = subprocess.run(
            ["ssh", "-i", lab["ssh_key"], "-o", f"UserKnownHostsFile={layout.known_hosts_path()}",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", host["ssh"],
             "virsh -c qemu:///system hostname"],
            capture_output=True, text=True, timeout=30, check=False)
        assert ssh.returncode == 0, ssh.stderr
        assert ssh.stdout.strip() == host["name"]


def test_libvirt_uri_refuses_a_host_whose_key_does_not_match(lab, tmp_path):
    hv1, hv2 = lab["hosts"][0], lab["hosts"][1]
    known = layout.known_hosts_path().read_text().splitlines()
    hv2_key = next(line for line in known if line.startswith(hv2["address"] + " "))
    wrong = tmp_path / "known_hosts"
    wrong.write_text(hv2_key.replace(hv2["address"], hv1["address"], 1) + "\n")
    uri = hv1["libvirt_uri"].replace(str(layout.known_hosts_path()), str(wrong))
    with pytest.raises(libvirt.libvirtError, match="HOST KEY VERIFICATION FAILED"):
        libvirt.open(uri)


def test_ansible_reaches_every_hypervisor_through_the_lab_inventory(lab):
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "-i", lab["inventory"],
         "yasco_hypervisors", "-m", "ansible.builtin.command", "-a", "hostname", "-o"],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for host in ("hv1", "hv2", "hv3"):
        assert f"{host} | CHANGED | rc=0 | (stdout) {host}" in result.stdout


def test_inventory_describes_hosts_and_boot_defaults(lab):
    inventory = yaml.safe_load((Path(lab["inventory"]) / "hosts.yml").read_text())
    hosts = inventory["all"]["children"]["yasco_hypervisors"]["hosts"]
    assert sorted(hosts) == ["hv1", "hv2", "hv3"]
    assert hosts["hv1"]["yasco_capacity"]["memory_mb"] > 0
    group_vars = yaml.safe_load(
        (Path(lab["inventory"]) / "group_vars" / "all" / "lab.yml").read_text())
    assert group_vars["yasco_virt_type"] in ("kvm", "qemu")
    assert group_vars["yasco_virt_type"] == lab["virt_type"]
    defaults = group_vars["yasco_vm_defaults"]
    assert Path(defaults["kernel"]).is_file() and Path(defaults["initrd"]).is_file()


def test_status_json_is_machine_readable(lab):
    info = json.loads(yasco_lab("status", "--json").stdout)
    assert info["up"] is True
    assert [h["name"] for h in info["hosts"]] == ["hv1", "hv2", "hv3"]
    for host in info["hosts"]:
        assert set(host) >= {"name", "address", "ssh", "libvirt_uri", "etcd_client_url",
                             "state", "etcd"}
    assert info["etcd_endpoints"] == [h["etcd_client_url"] for h in info["hosts"]]
    assert set(info["ceph"]) >= {"conf", "keyring", "pool"}
    assert info["virt_type"] in ("kvm", "qemu")
