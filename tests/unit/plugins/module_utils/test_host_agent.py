"""The host agent's configuration: every bad setting is refused by name, before the
agent touches etcd or libvirt. Its behaviour on a cluster is tested on the lab
(tests/lab/test_agent.py)."""

from __future__ import annotations

import ast
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE)
from ansible_collections.yasco.cluster.plugins.module_utils.agent import (
    host_agent, liveness, planned_stop, self_fence)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import (
    AgentConfig, ConfigError)

ROOT = Path(__file__).resolve().parents[4]
AGENT = ROOT / "roles" / "agent" / "files" / "yasco_agent.py"
# The directory holding ansible_collections/, as this test imported it: the checkout's
# collections/ link under pytest, the collection tree's parent under ansible-test.
COLLECTIONS = Path(host_agent.__file__).parents[6]
GOOD = {"host": "hv1", "endpoints": ["http://127.0.0.1:2379"]}


@pytest.mark.parametrize(("changes", "message"), [
    ({"host": ""}, "agent.yml: host is required"),
    ({"endpoints": []}, "agent.yml: endpoints is required"),
    ({"host": "a/b"}, "agent.yml: host name 'a/b': must not contain '/'"),
    ({"ttl": 1}, "agent.yml: ttl 1 is below 2 s; etcd raises a lease below 1.5 x its "
                 "election timeout anyway"),
    ({"ttl": "5"}, "agent.yml: ttl must be a positive number of seconds, got '5'"),
    ({"margin": 0}, "agent.yml: margin must be a positive number of seconds, got 0"),
    ({"margin": 0.1, "ttl": 4.4}, "agent.yml: margin 0.1 must be at least 1 s, with ttl over "
                                  "twice that: the self-fence needs that long to destroy the "
                                  "HA domains before the lease can expire"),
    ({"margin": 0.9, "ttl": 2}, "agent.yml: margin 0.9 must be at least 1 s, with ttl over "
                                "twice that: the self-fence needs that long to destroy the "
                                "HA domains before the lease can expire"),
    ({"ceph_addrs": "10.0.0.1"}, "agent.yml: ceph_addrs must be a list of addresses"),
    ({"keepalive": 2}, "agent.yml: keepalive 2 must be at most a third of ttl 5.0"),
    ({"tll": 5}, "agent.yml: unknown setting(s) tll; known: host, endpoints, cluster, ttl, "
                 "margin, libvirt_uri, address, ceph_addrs, reconcile, keepalive, fence_wait, "
                 "shutdown_policy, shutdown_timeout, migrate_timeout, ca_cert, "
                 "client_cert, client_key, username, password, watchdog_device, "
                 "watchdog_timeout, metrics_listen, ceph_conf, ceph_client, ceph_pool, "
                 "storage_grace, ceph_keyring, restart_in_place, restart_window"),
    ({"restart_in_place": -1}, "agent.yml: restart_in_place -1 must be a whole number of "
                               "restarts, 0 for none"),
    ({"restart_in_place": True}, "agent.yml: restart_in_place True must be a whole number "
                                 "of restarts, 0 for none"),
    ({"restart_window": 0}, "agent.yml: restart_window must be a positive number of "
                            "seconds, got 0"),
    ({"ceph_conf": "/etc/ceph/ceph.conf", "storage_grace": 5},
     "agent.yml: storage_grace 5 must be at least 7 s, a probe's interval and timeout, "
     "or one slow answer from Ceph fences the host"),
    ({"storage_grace": 0}, "agent.yml: storage_grace must be a positive number of seconds, "
                           "got 0"),
    ({"metrics_listen": ":9731"}, "agent.yml: metrics_listen ':9731' serves on the host's "
                                  "own address, and address is empty: set address, or give "
                                  "metrics_listen one (0.0.0.0:9731 for every address)"),
    ({"metrics_listen": "localhost"}, "agent.yml: metrics_listen: 'localhost' is not "
                                      "address:port (e.g. 0.0.0.0:9731, [::]:9731 or :9731); "
                                      "leave it empty to serve no metrics"),
    ({"watchdog_timeout": 4}, "agent.yml: watchdog_timeout 4 must be whole seconds from 1 "
                              "to 3 (ttl - margin), or 0 for 3: a longer one could reset "
                              "the host after its lease expired"),
    ({"watchdog_timeout": 2.5}, "agent.yml: watchdog_timeout 2.5 must be whole seconds "
                                "from 1 to 3 (ttl - margin), or 0 for 3: a longer one "
                                "could reset the host after its lease expired"),
])
def test_a_bad_setting_is_named(changes, message):
    with pytest.raises(ConfigError) as err:
        AgentConfig.from_mapping({**GOOD, **changes}, "agent.yml")
    assert str(err.value) == message


@pytest.mark.parametrize(("address", "listen", "served"), [
    ("10.0.0.11", ":9731", "10.0.0.11:9731"),
    ("hv1.mgmt.example.net", ":9731", "hv1.mgmt.example.net:9731"),
    ("fd00::11", ":9731", "[fd00::11]:9731"),
    ("10.0.0.11", "0.0.0.0:9731", "0.0.0.0:9731"),  # every address, when asked for
    ("10.0.0.11", "[::]:9731", "[::]:9731"),
])
def test_metrics_without_an_address_are_served_on_the_hosts_own(address, listen, served):
    config = AgentConfig.from_mapping({**GOOD, "address": address, "metrics_listen": listen},
                                      "agent.yml")
    assert config.metrics_listen == served


def test_the_lease_granted_is_whole_seconds_never_under_the_ttl():
    for tenths in range(20, 200):
        assert liveness.lease_seconds(tenths / 10) >= tenths / 10
    assert [liveness.lease_seconds(ttl) for ttl in (2, 2.5, 4.4, 5)] == [2, 3, 5, 5]


def test_the_watchdog_timeout_defaults_to_the_longest_that_resets_in_time():
    assert AgentConfig.from_mapping({**GOOD, "ttl": 8, "margin": 1.5},
                                    "agent.yml").watchdog_timeout == 6
    assert AgentConfig.from_mapping({**GOOD, "watchdog_timeout": 2},
                                    "agent.yml").watchdog_timeout == 2


@pytest.mark.parametrize(("now", "holding", "may"), [
    (0.0, True, True),      # just renewed
    (1.25, True, True),     # a reset 3 s away still lands 0.75 s before expiry at 5
    (1.26, True, False),    # it might not: the self-fence at 3.5, or the reset, acts
    (3.5, True, False),     # the self-fence deadline (ttl - margin)
    (10.0, False, True),    # no lease: self-fenced, frozen or stopping
])
def test_the_watchdog_is_petted_only_while_a_reset_would_come_before_expiry(
        now, holding, may):
    assert self_fence.watchdog_may_pet(now, last_ok=0.0, ttl=5.0, margin=1.5, timeout=3,
                                       holding=holding) is may


def test_a_missing_watchdog_device_is_named_with_what_to_do(tmp_path):
    from ansible_collections.yasco.cluster.plugins.module_utils.adapters import hw_watchdog
    with pytest.raises(hw_watchdog.WatchdogError, match=(
            f"watchdog device {tmp_path}/watchdog: No such file or directory: load a driver "
            r"\(modprobe softdog, iTCO_wdt or ipmi_watchdog\)")):
        hw_watchdog.Watchdog(str(tmp_path / "watchdog"), 3)


def test_a_bad_shutdown_policy_is_named_with_the_allowed_ones():
    with pytest.raises(ConfigError, match="agent.yml: shutdown_policy 'evacuate': must be one "
                                          "of conditional, freeze, failover, migrate"):
        AgentConfig.from_mapping({**GOOD, "shutdown_policy": "evacuate"}, "agent.yml")


def test_the_shutdown_intent_comes_from_its_file_before_systemd(tmp_path):
    intent = tmp_path / "shutdown"
    for said in ("reboot", "poweroff"):
        intent.write_text(f"{said}\n")
        assert planned_stop.shutdown_intent(str(intent)) == said
    intent.write_text("nonsense\n")
    # No such word, and no systemd here with a shutdown queued: only the agent stops.
    assert planned_stop.shutdown_intent(str(intent)) is None
    assert planned_stop.shutdown_intent(str(tmp_path / "absent")) is None


def test_endpoints_may_be_a_comma_separated_string():
    config = AgentConfig.from_mapping({**GOOD, "endpoints": "http://a:2379, http://b:2379"},
                                      "agent.yml")
    assert config.endpoints == ["http://a:2379", "http://b:2379"]


def test_the_agent_exits_2_on_a_bad_configuration_is_refused_naming_the_setting(tmp_path):
    config = tmp_path / "agent.yml"
    config.write_text("host: hv1\nendpoints: [http://127.0.0.1:2379]\nttl: 4\nmargin: 3\n")
    done = subprocess.run([sys.executable, AGENT, "--config", config], capture_output=True,
                          text=True, env={"YASCO_AGENT_LIB": str(COLLECTIONS)}, check=False)
    assert done.returncode == 2
    assert done.stderr == (f"yasco-agent: {config}: margin 3 must be under half of ttl 4, "
                           "or the agent self-fences between keepalives\n")
    config.write_text("host: hv1\nendpoint: x\n")  # a typo
    done = subprocess.run([sys.executable, AGENT, "--config", config], capture_output=True,
                          text=True, env={"YASCO_AGENT_LIB": str(COLLECTIONS)}, check=False)
    assert done.returncode == 2 and "unknown setting(s) endpoint" in done.stderr
    missing = subprocess.run([sys.executable, AGENT, "--config", tmp_path / "none.yml"],
                             capture_output=True, text=True, check=False,
                             env={"YASCO_AGENT_LIB": str(COLLECTIONS)})
    assert missing.returncode == 2
    assert missing.stderr == (f"yasco-agent: {tmp_path / 'none.yml'}: cannot read the "
                              "configuration: No such file or directory\n")


def test_the_agent_exits_2_on_an_etcd_over_plain_http_without_a_user_naming_the_switch(
        tmp_path):
    config = tmp_path / "agent.yml"
    config.write_text("host: hv1\nendpoints: [http://127.0.0.1:2379]\n"
                      "libvirt_uri: test:///default\n")
    done = subprocess.run([sys.executable, AGENT, "--config", config], capture_output=True,
                          text=True, env={"YASCO_AGENT_LIB": str(COLLECTIONS)}, check=False,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("yasco-agent: etcd at http://127.0.0.1:2379: refused: "
                                  "plain http sends the password"), done.stderr
    assert "no username is given" in done.stderr
    assert f"set {ALLOW_INSECURE}=1 in the environment" in done.stderr
    assert "Traceback" not in done.stderr


def test_with_etcd_out_of_reach_the_agent_keeps_retrying_and_stops_cleanly(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "agent.yml"
    config.write_text(f"host: hv1\nendpoints: [http://127.0.0.1:{port}]\n"
                      "libvirt_uri: test:///default\n")
    log = tmp_path / "agent.err"
    with log.open("w") as err:  # plain http without a user: a lab's etcd, were it there
        agent = subprocess.Popen([sys.executable, AGENT, "--config", config], stderr=err,
                                 env={"YASCO_AGENT_LIB": str(COLLECTIONS), ALLOW_INSECURE: "1"})
    try:
        # Two failed registrations, however long a loaded machine takes to start it.
        deadline = time.monotonic() + 120
        while (log.read_text().count("cannot register") < 2 and agent.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert agent.poll() is None, "the agent exited"
    finally:
        agent.terminate()  # it stops within its TTL (5 s) once etcd refuses; a loaded
        agent.wait(timeout=60)  # machine may take longer to run it
    stderr = log.read_text()
    assert agent.returncode == 0, stderr
    retries = re.findall(r"cannot register \(again in (\d+) s\)", stderr)
    assert [int(s) for s in retries[:2]] == [2, 3]  # doubling from ttl/3, rounded
    assert "cannot mark maintenance before stopping" in stderr
    assert "SELF-FENCE" in stderr  # what it does instead, with no lease left to revoke


def test_the_agent_role_installs_every_module_the_agent_imports():
    """The role copies a list of module_utils files to each hypervisor: one the agent
    imports and the list lacks would make the installed agent fail at its start."""
    module_utils = Path(host_agent.__file__).parents[1]
    prefix = "ansible_collections.yasco.cluster.plugins.module_utils"
    needed, todo = set(), ["agent/host_agent"]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        tree = ast.parse((module_utils / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix + "."):
                dotted = node.module[len(prefix) + 1:].replace(".", "/")
                todo += ([dotted] if "/" in dotted
                         else [f"{dotted}/{alias.name}" for alias in node.names])
    installed = yaml.safe_load((ROOT / "roles" / "agent" / "vars" / "main.yml").read_text())[
        "agent_sources"]
    assert sorted(f"{name}.py" for name in needed) == sorted(installed)
