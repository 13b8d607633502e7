"""The role yasco.cluster.agent, run into a scratch root without the systemd service:
what it installs, that a second run changes nothing, and that the installed agent runs
on Debian's Python with no Ansible, registers with etcd under its own user, and stops
gracefully. Against real etcd with authentication and libvirt's built-in test driver."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE)

from ..ansible_run import run_playbook
from .conftest import wait_for


def test_the_role_installs_an_agent_that_runs_without_ansible(etcd_auth, tmp_path):
    root = tmp_path / "root"
    host, cluster = f"role-{uuid.uuid4().hex[:6]}", f"role-{uuid.uuid4().hex[:6]}"
    alive = etcd_keys.alive_key(host, cluster=cluster)
    play = [{"name": "agent", "hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_connection": "local",
                      "ansible_python_interpreter": sys.executable},
             "roles": [{"role": "yasco.cluster.agent", "agent_host": host,
                        "agent_cluster": cluster, "agent_endpoints": [etcd_auth.url],
                        "agent_username": etcd_auth.username,
                        "agent_password": etcd_auth.password,
                        "agent_libvirt_uri": "test:///default", "agent_address": "127.0.0.1",
                        "agent_root": str(root), "agent_manage_service": False}]}]
    rc, results = run_playbook(play, tmp_path=tmp_path)
    assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
    rc, again = run_playbook(play, tmp_path=tmp_path)
    assert rc == 0 and not [r for r in again if r.get("changed")]
    lib = root / "usr" / "lib" / "yasco-agent"
    config = root / "etc" / "yasco" / "agent.yml"
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    unit = (root / "etc" / "systemd" / "system" / "yasco-agent.service").read_text()
    assert f"ExecStart={lib}/venv/bin/python {lib}/yasco_agent.py --config {config}" in unit
    assert "Type=notify" in unit and "WatchdogSec=10" in unit
    python = lib / "venv" / "bin" / "python"
    assert subprocess.run([python, "-c", "import ansible"], capture_output=True,
                          check=False).returncode != 0
    # The test's etcd speaks plain http: the lab-only switch, as a lab's unit would set it.
    agent = subprocess.Popen([python, lib / "yasco_agent.py", "--config", config],
                             env={"YASCO_AGENT_LIB": str(lib), ALLOW_INSECURE: "1"},
                             stderr=subprocess.PIPE, text=True)
    with etcd_auth.client() as etcd:
        try:
            assert wait_for(lambda: etcd.get(alive), 15), "the agent did not register"
        finally:
            agent.terminate()
            stderr = agent.communicate(timeout=15)[1]
        assert agent.returncode == 0, stderr
        assert etcd.get(alive) is None
        marker = etcd.get(etcd_keys.maintenance_key(host, cluster=cluster))
        assert json.loads(marker.value)["by"] == "agent"
        etcd.delete_prefix(etcd_keys.cluster_prefix(cluster=cluster))
