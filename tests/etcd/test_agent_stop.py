"""The agent's stop as its host goes down with `shutdown_policy: migrate`: it asks for
its VMs to be migrated away (a maintenance marker of its own with `migrate: true`,
which the HA watcher drains the host for), waits with its lease renewed until none
runs, and only then ends its lease; what is left after `migrate_timeout` fails over
as on a poweroff. Against real etcd and libvirt's built-in test driver, the domains
leaving as a drain's live migrations would take them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent

from .conftest import wait_for
from .test_agent_start import (  # noqa: F401  pylint: disable=unused-import
    fixture_running, start_agent)


def stop_in_background(agent: Agent, intent_file: Path, intent: str) -> threading.Thread:
    """The host going down: the intent written, the agent told to stop (SIGTERM)."""
    intent_file.write_text(intent + "\n", encoding="ascii")
    agent.intent_file = str(intent_file)
    stopping = threading.Thread(target=agent.stop, daemon=True)
    stopping.start()
    return stopping


def marker(etcd, agent: Agent) -> dict | None:
    with etcd.client() as client:
        found = client.get(etcd_keys.maintenance_key("hv1", cluster=agent.config.cluster))
    return json.loads(found.value) if found else None


def alive(etcd, agent: Agent) -> bool:
    with etcd.client() as client:
        return client.get(etcd_keys.alive_key("hv1", cluster=agent.config.cluster)) is not None


def test_a_reboot_waits_for_the_vms_to_be_migrated_away_before_the_lease_ends(
        etcd, running, tmp_path):
    agent = start_agent([etcd.url], shutdown_policy="migrate", migrate_timeout=60)
    assert wait_for(lambda: agent.lease, 5), "the agent did not register"
    stopping = stop_in_background(agent, tmp_path / "shutdown", "reboot")
    assert wait_for(lambda: marker(etcd, agent), 5), "no maintenance marker"
    assert marker(etcd, agent) | {"since": None} == {
        "by": "agent", "reason": "host rebooting: its VMs migrate away", "migrate": True,
        "since": None}
    # Waiting, and still alive: no failure may be seen while the VMs move.
    time.sleep(2)
    assert stopping.is_alive() and alive(etcd, agent)
    # The drain's migrations take the VMs away, one after the other.
    for kind in ("ha", "plain"):
        running.conn.lookupByName(running.names[kind]).destroy()
        time.sleep(1)
    stopping.join(10)
    assert not stopping.is_alive(), "the stop did not end once no VM ran here"
    assert not alive(etcd, agent) and agent.stopped_cleanly
    assert "off" not in marker(etcd, agent)


def test_what_was_not_migrated_in_time_fails_over_as_on_a_poweroff(etcd, running, tmp_path):
    agent = start_agent([etcd.url], shutdown_policy="migrate", migrate_timeout=3,
                        shutdown_timeout=5)
    assert wait_for(lambda: agent.lease, 5), "the agent did not register"
    asked = time.monotonic()
    stop_in_background(agent, tmp_path / "shutdown", "poweroff").join(30)
    assert time.monotonic() - asked >= 3
    # The HA domain was shut down and the marker says so, for the reconciler to start
    # it elsewhere; the plain one goes down with the host.
    assert not running.active("ha") and running.active("plain")
    assert marker(etcd, agent)["off"] == [running.names["ha"]]
    assert marker(etcd, agent)["migrate"] is True and not alive(etcd, agent)


def test_the_agent_alone_stopping_or_a_drained_host_asks_for_no_migration(
        etcd, running, tmp_path):
    agent = start_agent([etcd.url], shutdown_policy="migrate", migrate_timeout=60)
    assert wait_for(lambda: agent.lease, 5), "the agent did not register"
    (tmp_path / "shutdown").write_text("", encoding="ascii")
    agent.intent_file = str(tmp_path / "shutdown")
    started = time.monotonic()
    agent.stop()
    assert time.monotonic() - started < 10
    assert marker(etcd, agent) | {"since": None} == {
        "by": "agent", "reason": "agent stopped", "since": None}
    assert running.active("ha") and running.active("plain")
    # A host in maintenance already (drained): its VMs were moved, or kept on purpose.
    drained = start_agent([etcd.url], shutdown_policy="migrate", migrate_timeout=60)
    with etcd.client() as client:
        client.put(etcd_keys.maintenance_key("hv1", cluster=drained.config.cluster),
                   json.dumps({"by": "drain", "reason": "firmware"}))
    assert wait_for(lambda: drained.lease, 5), "the agent did not register"
    started = time.monotonic()
    stop_in_background(drained, tmp_path / "shutdown", "reboot").join(10)
    assert time.monotonic() - started < 10
    assert marker(etcd, drained) == {"by": "drain", "reason": "firmware"}
    assert running.active("ha") and running.active("plain")


def registration(etcd, agent: Agent) -> dict | None:
    with etcd.client() as client:
        found = client.get(etcd_keys.registered_key("hv1", cluster=agent.config.cluster))
    return json.loads(found.value) if found else None


def test_a_clean_stop_says_so_in_the_registration_and_the_next_start_clears_it(
        etcd, running, tmp_path):
    """What tells a host stopped in maintenance (a drain's end) from one that went down
    in it uncleanly (a crash during the drain), whose VMs fail over: only the clean
    stop writes `stopped` into the registration, before its lease goes."""
    agent = start_agent([etcd.url])
    assert wait_for(lambda: agent.lease, 5), "the agent did not register"
    assert "stopped" not in registration(etcd, agent)
    (tmp_path / "shutdown").write_text("", encoding="ascii")
    agent.intent_file = str(tmp_path / "shutdown")
    agent.stop()
    said = registration(etcd, agent)
    assert said["stop_reason"] == "agent stopped" and said["stopped"]
    assert not alive(etcd, agent) and marker(etcd, agent)["by"] == "agent"
    # Started again on the same cluster: registered afresh, as running.
    again = start_agent([etcd.url], cluster=agent.config.cluster)
    assert wait_for(lambda: again.lease, 5), "the agent did not register again"
    assert wait_for(lambda: "stopped" not in registration(etcd, again), 5)
    assert registration(etcd, again)["address"] == said["address"]
    again.leaving.set()
    again.stopping.set()
