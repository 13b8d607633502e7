# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A VM's record in etcd (`vms/<name>`): its states, the changes allowed between
them, and the compare-and-swap that makes each change. Pure Python, no I/O. Every
writer of a record builds its etcd_key element here: evacuation, the reconciler's
recovery, return home, live migrations (drain, rebalance), cold start and emergency
shutdown; provisioning creates records (only where none is).

A change is a compare-and-swap on the record's `mod_revision` as cluster_status
read it (`record_revision`, 0 when there was no record), never on its value alone:
a record that changed and came back with the same value (running on hv1, migrated,
migrated back) has a new revision, so a step decided on the old one is refused.

A claim (starting, migrating) names the revision it replaced (`claimed_at`). The
write that completes it (running, or down when the start failed) compares the
claim's value, which no other write can leave behind: as strict as comparing its
revision, which the playbook would otherwise have to read back.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

RUNNING = "running"
STARTING = "starting"
MIGRATING = "migrating"
STOPPED = "stopped"
DOWN = "down"
PREEMPTED = "preempted"
FAILED = "failed"
STATES = (RUNNING, STARTING, MIGRATING, STOPPED, DOWN, PREEMPTED, FAILED)
# Record states that mean "this VM is meant to run on the recorded host".
ACTIVE = (RUNNING, STARTING, MIGRATING)
# States a run writes before it acts on the VM; only the run whose claim wins acts.
CLAIMS = (STARTING, MIGRATING)

_ANY = frozenset(STATES) | {None}
# The states a record may take -> those it may come from (None: no record yet).
FROM: dict[str, frozenset[str | None]] = {
    # Created by provisioning; a claim completed; a VM started again by the return
    # home: preempted, gone down with its host, or recorded running there still.
    RUNNING: frozenset({None, STARTING, MIGRATING, PREEMPTED, DOWN, RUNNING}),
    # Any VM may be claimed for a start, even one left starting by a run that died.
    STARTING: _ANY,
    # Only a VM that runs where its record says is migrated live.
    MIGRATING: frozenset({RUNNING}),
    STOPPED: _ANY,
    DOWN: _ANY,
    PREEMPTED: _ANY,
    FAILED: _ANY,
}


class RecordError(ValueError):
    """A change its record's state does not allow; the message says which."""


def state_of(vm: dict[str, Any]) -> str | None:
    """The state of a cluster_status VM entry's record; None when it has none."""
    record = vm.get("record")
    return record.get("state") if isinstance(record, dict) else None


def revision_of(vm: dict[str, Any]) -> int:
    """The record's mod_revision as cluster_status read it; 0 when there was none."""
    if "record_revision" not in vm:
        raise RecordError(f"{vm.get('name', 'a VM')}: its status entry has no "
                          "record_revision: read it with yasco.cluster.cluster_status")
    return int(vm["record_revision"] or 0)


def _known(name: str, state: str) -> None:
    if state not in FROM:
        raise RecordError(f"{name}: {state!r} is not a record state "
                          f"(one of {', '.join(STATES)})")


def _allow(name: str, old: str | None, new: str) -> None:
    _known(name, new)
    if old not in FROM[new]:
        raise RecordError(f"{name}: a record {old or 'that does not exist'} cannot "
                          f"become {new}")


def _value(state: str, host: str | None, fields: dict[str, Any]) -> dict[str, Any]:
    return {"host": host, "state": state,
            **{k: v for k, v in fields.items() if v is not None}}


def change(vm: dict[str, Any], state: str, host: str | None,
           cluster: str = etcd_keys.DEFAULT_CLUSTER, **fields: Any) -> dict[str, Any]:
    """The etcd_key element that moves VM `vm`'s record (its cluster_status entry) to
    `state` on `host`, with `fields` beside them, only if the record is still the
    revision that entry was read at."""
    _allow(vm["name"], state_of(vm), state)
    return {"key": etcd_keys.vm_key(vm["name"], cluster=cluster),
            "value": _value(state, host, fields), "if_revision": revision_of(vm)}


def claim(vm: dict[str, Any], state: str, host: str | None,
          cluster: str = etcd_keys.DEFAULT_CLUSTER, **fields: Any) -> dict[str, Any]:
    """A change to a claim state that names the revision it replaces."""
    if state not in CLAIMS:
        raise RecordError(f"{vm['name']}: {state!r} is not a claim "
                          f"(one of {', '.join(CLAIMS)})")
    return change(vm, state, host, cluster, **fields, claimed_at=revision_of(vm))


def migrate(vm: dict[str, Any], source: str, target: str,
            cluster: str = etcd_keys.DEFAULT_CLUSTER,
            after: dict[str, Any] | None = None) -> dict[str, Any]:
    """The claim of a live migration of VM `vm` from `source` to `target`: only if its
    record is still the revision read and says it runs on `source`. A record that
    says otherwise fails the claim when it is made, and the error says what it found.
    `after` is the write that ended an earlier move of the same VM in the same run (a
    temporary hop): its revision is known only once made, so the claim compares the
    value that write left."""
    if after is not None:
        _allow(vm["name"], after["value"]["state"], MIGRATING)
        return {"key": after["key"], "if_value": after["value"],
                "value": _value(MIGRATING, source, {"to": target})}
    revision = revision_of(vm)
    return {"key": etcd_keys.vm_key(vm["name"], cluster=cluster),
            "value": _value(MIGRATING, source, {"to": target, "claimed_at": revision}),
            "if_revision": revision, "if_value": {"host": source, "state": RUNNING}}


def complete(claimed: dict[str, Any], state: str, host: str | None,
             **fields: Any) -> dict[str, Any]:
    """The etcd_key element that ends a claim (claim()'s element) in `state`: only if
    the record is still the value that claim wrote."""
    name = claimed["key"].rsplit("/", 1)[-1]
    _allow(name, claimed["value"]["state"], state)
    return {"key": claimed["key"], "value": _value(state, host, fields),
            "if_value": claimed["value"]}


def overwrite(key: str, state: str, host: str | None, **fields: Any) -> dict[str, Any]:
    """The record at `key` written whatever it was: only for what a run has just made
    true and must not fail to record (the VMs an emergency shutdown stopped)."""
    _known(key.rsplit("/", 1)[-1], state)
    return {"key": key, "value": _value(state, host, fields)}
