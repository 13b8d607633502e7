"""Least privilege on the lab, as in production: etcd with TLS, client certificates and
a user per role; Ceph with a cephx user per role (docs/security.md).

Every check goes through YASCO's own modules, as a playbook would, and asserts what
etcd or Ceph did (or refused) and what the operator reads.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.agent import agent_restart
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access, etcd_keys
from yasco_lab import ceph, credentials, layout, pki
from yasco_lab.credentials import EtcdUser, etcd_client

from ..ansible_run import BIN, ROOT, local_play, run_playbook

CLUSTER = layout.CLUSTER_NAME


def etcd_task(name: str, module: str, **options) -> dict:
    return {"name": name, f"yasco.cluster.{module}": options, "ignore_errors": True}


def as_user(lab, user: str, **overrides) -> dict:
    """The connection options of lab user `user`, with `overrides`."""
    return {**EtcdUser(user).options(lab["etcd_endpoints"]), **overrides}


def run(tmp_path: Path, *tasks: dict) -> list[dict]:
    dummy, results = run_playbook(local_play(*tasks), tmp_path=tmp_path)
    return results


# (user, key, may it write?) for each role: its own keys, and what it must not touch.
WRITES = [
    (etcd_access.agent_role("hv1"), etcd_keys.host_prefix("hv1", cluster=CLUSTER) + "probe",
     True),
    (etcd_access.agent_role("hv1"), etcd_keys.alive_key("hv2", cluster=CLUSTER), False),
    (etcd_access.agent_role("hv1"), etcd_keys.vm_key("probe", cluster=CLUSTER), False),
    (etcd_access.agent_role("hv1"), etcd_keys.fence_key("hv1", cluster=CLUSTER), False),
    # The audit trail: the leading watcher copies the agents' events there.
    (etcd_access.agent_role("hv1"), etcd_keys.history_prefix(cluster=CLUSTER) + "probe", False),
    (etcd_access.WATCHER_ROLE, etcd_keys.history_prefix(cluster=CLUSTER) + "probe", True),
    (etcd_access.CONTROLLER_ROLE, etcd_keys.vm_key("probe", cluster=CLUSTER), True),
    (etcd_access.CONTROLLER_ROLE, etcd_keys.maintenance_key("hv2", cluster=CLUSTER) + "-probe",
     False),
    (etcd_access.CONTROLLER_ROLE, etcd_keys.alive_key("hv2", cluster=CLUSTER), False),
    (etcd_access.WATCHER_ROLE, etcd_keys.vm_key("probe", cluster=CLUSTER), False),
    (etcd_access.READER_ROLE, etcd_keys.vm_key("probe", cluster=CLUSTER), False),
]


@pytest.mark.parametrize("user,key,allowed", WRITES,
                         ids=[f"{u}-{k.split('/', 3)[-1]}" for u, k, dummy in WRITES])
def test_each_etcd_user_writes_only_what_its_role_allows(lab, tmp_path, user, key, allowed):
    (written,) = run(tmp_path, etcd_task("write", "etcd_key", key=key, value="probe",
                                         **as_user(lab, user)))
    with etcd_client(lab["etcd_endpoints"]) as root:
        try:
            if allowed:
                assert not written.get("failed"), written.get("msg")
                assert root.get(key).value == "probe"
            else:
                assert written["failed"]
                assert f"user {user!r} may not" in written["msg"], written["msg"]
                assert key in written["msg"] and "permission denied" in written["msg"]
                assert root.get(key) is None or root.get(key).value != "probe"
        finally:
            if allowed:
                root.delete(key)


def test_every_user_reads_the_cluster_and_nothing_else(lab, tmp_path):
    """The reader (inventory plugin, status) sees the cluster's records; no role of
    YASCO reads keys outside the cluster's prefix."""
    outside = f"/yasco-security-{uuid.uuid4().hex[:6]}"
    with etcd_client(lab["etcd_endpoints"]) as root:
        root.put(outside, "secret")
    try:
        inside, beyond = run(
            tmp_path,
            etcd_task("inside", "etcd_key_info", key=etcd_keys.hosts_prefix(cluster=CLUSTER),
                      prefix=True, **as_user(lab, etcd_access.READER_ROLE)),
            etcd_task("beyond", "etcd_key_info", key=outside,
                      **as_user(lab, etcd_access.READER_ROLE)))
        assert not inside.get("failed"), inside.get("msg")
        assert any(kv["key"].endswith("/alive") for kv in inside["kvs"])
        assert beyond["failed"] and "permission denied" in beyond["msg"]
    finally:
        with etcd_client(lab["etcd_endpoints"]) as root:
            root.delete(outside)


@pytest.fixture(name="strangers", scope="module")
def fixture_strangers(lab, tmp_path_factory) -> dict[str, pki.Certificate]:
    """Certificates etcd must refuse: from another CA, expired, and one with a
    common name (which etcd's gateway would ignore while authentication is on)."""
    directory = tmp_path_factory.mktemp("strangers")
    other = pki.make_ca(directory, "other-ca")
    ours = credentials.ca()
    return {
        "other_ca": other.cert,
        "foreign": pki.issue(directory, "foreign", other, subject=pki.client_subject("x")),
        "expired": pki.issue(directory, "expired", ours, subject=pki.client_subject("x"),
                             days=-1),
        "named": pki.issue(directory, "named", ours, subject="/O=yasco/CN=yasco-controller"),
    }


def test_etcd_refuses_clients_without_a_valid_certificate_with_clear_errors(
        lab, tmp_path, strangers):
    endpoint = lab["etcd_endpoints"][0]
    controller = etcd_access.CONTROLLER_ROLE
    key = etcd_keys.vdm_version_key(cluster=CLUSTER)

    def read(name: str, **overrides) -> dict:
        options = as_user(lab, controller, endpoints=[endpoint], **overrides)
        return etcd_task(name, "etcd_key_info", key=key,
                         **{k: v for k, v in options.items() if v is not None})

    no_cert, foreign, expired, named, wrong_ca = run(
        tmp_path,
        read("no certificate", client_cert=None, client_key=None),
        read("another CA's", client_cert=str(strangers["foreign"].cert),
             client_key=str(strangers["foreign"].key)),
        read("expired", client_cert=str(strangers["expired"].cert),
             client_key=str(strangers["expired"].key)),
        read("with a common name", client_cert=str(strangers["named"].cert),
             client_key=str(strangers["named"].key)),
        read("server checked against another CA", ca_cert=str(strangers["other_ca"])))
    for result in (no_cert, foreign, expired, named, wrong_ca):
        assert result["failed"]
        assert endpoint in result["msg"], result["msg"]
        assert "Traceback" not in result["msg"]
    assert "TLS handshake failed" in no_cert["msg"] and "client_cert" in no_cert["msg"]
    assert "TLS handshake failed" in foreign["msg"]
    assert "expired" in expired["msg"], expired["msg"]
    assert "common name" in named["msg"] and "without a CN" in named["msg"]
    assert "certificate verify failed" in wrong_ca["msg"]
    assert "ca_cert" in wrong_ca["msg"]


def test_the_hypervisor_and_provisioning_cephx_users_cannot_blocklist(lab, tmp_path):
    """Only the fencer may stop a client's disks: a compromised hypervisor cannot fence
    the others. The fencer can, and lifts its fence again."""
    address = lab["hosts"][2]["address"]

    def fence(name: str, client: str, state: str = "present") -> dict:
        return {"name": name, "ignore_errors": True, "yasco.cluster.ceph_fence": {
            "addresses": [address], "state": state, "expire": 60,
            "conf": str(layout.ceph_conf_path()),
            "keyring": str(layout.ceph_keyring_path(client)), "client": client}}

    hypervisor, provision, fencer, lifted = run(
        tmp_path, fence("hypervisor", layout.CEPH_HYPERVISOR_CLIENT),
        fence("provisioning", layout.CEPH_PROVISION_CLIENT),
        fence("fencer", layout.CEPH_FENCE_CLIENT),
        fence("lift", layout.CEPH_FENCE_CLIENT, "absent"))
    for refused, client in ((hypervisor, layout.CEPH_HYPERVISOR_CLIENT),
                            (provision, layout.CEPH_PROVISION_CLIENT)):
        assert refused["failed"]
        assert f"client.{client}" in refused["msg"]
        assert "'osd blocklist' refused: the user lacks the capability" in refused["msg"]
    assert fencer["blocklisted"] == [f"{address}:0/0"]
    assert lifted["unblocklisted"] == [f"{address}:0/0"]


def _secrets() -> dict[str, str]:
    """Every password and cephx key of the lab, by where it comes from."""
    found = {f"etcd password of {user}": password
             for user, password in credentials.etcd_passwords().items()}
    for keyring in layout.ceph_dir().glob("ceph.client.*.keyring"):
        found[f"cephx key of {keyring.name}"] = ceph.secret_key(keyring)
    return found


def test_no_secret_reaches_the_output_and_none_is_world_readable(lab, tmp_path):
    """status.yml, and every etcd and Ceph module on the lab's credentials, run with
    -v: no password and no key appears in what the operator sees."""
    inventory = lab["inventory"]
    play = tmp_path / "modules.yml"
    play.write_text(f"""
- name: Modules on the lab's credentials
  hosts: localhost
  gather_facts: false
  vars_files: ["{ROOT}/playbooks/vars/cluster.yml"]
  vars: {{ansible_connection: local, ansible_python_interpreter: "{BIN}/python"}}
  module_defaults:
    group/yasco.cluster.etcd: "{{{{ yasco_etcd_connection }}}}"
    group/yasco.cluster.ceph: "{{{{ yasco_ceph_connection }}}}"
    yasco.cluster.ceph_fence_info: "{{{{ yasco_ceph_fence_connection }}}}"
  tasks:
    - name: Read the hosts
      yasco.cluster.etcd_key_info:
        key: "{etcd_keys.hosts_prefix(cluster=CLUSTER)}"
        prefix: true
    - name: Read the fences
      yasco.cluster.ceph_fence_info:
    - name: Read an image
      yasco.cluster.rbd_image_info:
        pool: "{layout.CEPH_POOL}"
        name: no-such-image
    - name: Fail on purpose, with the password in the invocation
      yasco.cluster.etcd_key:
        key: /outside/the/cluster
        value: x
      ignore_errors: true
""")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    outputs = []
    for playbook in (ROOT / "playbooks" / "status.yml", play):
        done = subprocess.run([str(BIN / "ansible-playbook"), "-v", "-i", inventory,
                               str(playbook)], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs.append(done.stdout + done.stderr)
    with etcd_client(lab["etcd_endpoints"]) as root:
        stored = [kv.value for kv in root.get_prefix(etcd_keys.cluster_prefix(CLUSTER))]
    output = "\n".join(outputs + stored)  # nor in etcd's records and history
    assert "permission denied" in output  # the failing task ran, and said why
    secrets = _secrets()
    assert len(secrets) >= 8
    for where, secret in secrets.items():
        assert secret not in output, f"the {where} appears in the output"
    # Keys, passwords, keyrings and the agents' configurations: for root's eyes only.
    private = [*layout.pki_dir().rglob("*.key"), *credentials.passwords_dir().iterdir(),
               *layout.ceph_dir().glob("ceph.client.*.keyring"),
               *(layout.state_dir() / "hosts").glob("hv*/agent.yml")]
    assert len(private) >= 15
    for path in private:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"


def test_the_ceph_set_up_in_the_production_guide_is_what_the_lab_runs(lab):
    """docs/production.md's pool and cephx users, command for command as `yasco-lab up`
    makes them (lab/yasco_lab/ceph.py), and the users' caps as Ceph holds them."""
    text = (ROOT / "docs" / "production.md").read_text()
    section = text[text.index("## 2. Ceph"):text.index("## 3.")]
    block, agents = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    pool = layout.CEPH_POOL
    assert commands[0] == ["ceph", "osd", "pool", "create", pool]  # the lab adds PGs
    assert commands[1] == ["rbd", "pool", "init", pool]
    assert commands[2:] == [["ceph", "auth", "get-or-create", f"client.{client}", *caps]
                            for client, caps in ceph.CEPH_CAPS.items()]
    assert [shlex.split(line) for line in agents.splitlines() if line.strip()] == [
        ["ceph", "auth", "get-or-create", f"client.{agent_restart.ceph_user('hv1')}",
         *agent_restart.ceph_caps(["10.0.0.11"], pool)]]
    hosts = [layout.HostLayout(h["name"]) for h in lab["hosts"]]
    for client, caps in {**ceph.CEPH_CAPS, **ceph.agent_users(hosts)}.items():
        held = ceph.ceph_cli("auth", "get", f"client.{client}")
        for daemon, cap in zip(caps[::2], caps[1::2]):
            assert f'caps {daemon} = "{cap}"' in held.replace('\\"', '"'), (client, held)
    assert pool in ceph.ceph_cli("osd", "pool", "ls")


def test_an_agents_cephx_user_blocklists_its_own_hosts_client_instances_and_nothing_else(
        lab):
    """What a compromised hypervisor could do with its agent's Ceph key: blocklist a
    client instance of its own host (a dead QEMU's, for a restart in place), but not
    its host's whole address, nor any client of another host."""
    mine, other = (layout.HostLayout(h["name"]) for h in lab["hosts"][:2])
    user = agent_restart.ceph_user(mine.name)

    def blocklist(address: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ceph", "-c", str(layout.ceph_conf_path()), "--name", f"client.{user}",
             "--keyring", str(layout.ceph_keyring_path(user)), "osd", "blocklist", "add",
             address, "60"], capture_output=True, text=True, check=False, timeout=60)

    own = f"{mine.address}:0/{uuid.uuid4().int % 10**9 + 1}"
    try:
        done = blocklist(own)
        assert done.returncode == 0, done.stderr
        assert own in ceph.ceph_cli("osd", "blocklist", "ls")
        for address in (f"{mine.address}:0/0", mine.address, f"{other.address}:0/12345",
                        f"{other.address}:0/0", f"{layout.ceph_address()}:0/1"):
            refused = blocklist(address)
            assert refused.returncode != 0 and "EACCES" in refused.stderr, (address, refused)
    finally:
        ceph.ceph_cli("osd", "blocklist", "rm", own)
    assert own not in ceph.ceph_cli("osd", "blocklist", "ls")


def test_reading_etcd_by_hand_as_the_docs_show_works_as_the_reader(lab):
    """docs/etcd-schema.md's etcdctl lines, run as written (bash, with its alias), on
    the lab: the hosts' keys, a VM's record with its revisions, and the watch."""
    text = (ROOT / "docs" / "etcd-schema.md").read_text()
    section = text[text.index("## Reading it by hand"):]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    record = etcd_keys.vm_key("web1", cluster=layout.CLUSTER_NAME)
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        etcd.put_json(record, {"host": "hv1", "state": "running"})
        try:
            shell = subprocess.Popen(["bash", "-O", "expand_aliases", "-c", block],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = shell.communicate(timeout=8)  # the watch never ends by itself
            except subprocess.TimeoutExpired:
                shell.kill()
                out, err = shell.communicate()
        finally:
            etcd.delete(record)
    assert "Error" not in err, err
    for host in ("hv1", "hv2", "hv3"):
        assert etcd_keys.alive_key(host, cluster=layout.CLUSTER_NAME) in out
    assert '"mod_revision"' in out
    assert "PUT" in out  # the watch saw the agents' keepalives rewrite their keys
