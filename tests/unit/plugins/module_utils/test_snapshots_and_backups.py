"""The pure parts of snapshots, backups and Ceph's readiness: snapshot retention, the
chain a restore applies, which VMs a run acts on, and when Ceph can serve disks.
Snapshots, backups and restores themselves run on the lab
(tests/lab/test_power_and_backup.py)."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.resources.ceph_health import (
    BLOCKING_CHECKS, judged)
from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_backup import (
    MANIFEST, BackupError, chain, read_sets, selected_vms)
from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_snapshot import (
    SnapshotError, doomed, parse_age, snapshot_name)

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.timezone.utc)


def snap(name, hours_ago, protected=False):
    return {"name": name, "protected": protected,
            "timestamp": NOW - datetime.timedelta(hours=hours_ago)}


def test_snapshot_names_sort_by_time_and_ages_read_like_an_operator_writes_them():
    assert snapshot_name("yasco-snap-", NOW) == "yasco-snap-20261122T120000Z"
    assert [parse_age(a) for a in (90, "90s", "30m", "12h", "7d", "2w", None)] == [
        90, 90, 1800, 43200, 604800, 1209600, None]
    with pytest.raises(SnapshotError, match="max_age: 'soon' is not an age"):
        parse_age("soon")


def test_retention_keeps_the_newest_by_count_and_age_never_the_new_or_a_protected_one():
    snaps = [snap("s-new", 0), snap("s-1", 1), snap("s-2", 2), snap("s-3", 30, protected=True),
             snap("s-4", 40), snap("other", 50)]
    assert doomed(snaps, "s-", 3, None, NOW, "s-new") == ["s-4"]
    assert doomed(snaps, "s-", 2, None, NOW, "s-new") == ["s-2", "s-4"]
    assert doomed(snaps, "s-", None, 24 * 3600, NOW, "s-new") == ["s-4"]
    assert doomed(snaps, "s-", 1, None, NOW, "s-new") == ["s-1", "s-2", "s-4"]
    assert doomed(snaps, "s-", None, None, NOW, "s-new") == []


def write_set(root, vm, snapshot, kind, base, taken_at):
    path = root / vm / snapshot
    path.mkdir(parents=True)
    (path / MANIFEST).write_text(json.dumps({
        "snapshot": snapshot, "kind": kind, "base": base, "taken_at": taken_at,
        "disks": [{"image": "yasco/db", "file": "yasco.db.raw", "sha256": "x"}]}))


def test_a_restore_applies_the_full_set_then_each_diff_up_to_the_one_asked_for(tmp_path):
    write_set(tmp_path, "db", "b1", "full", None, "2026-11-22T10:00")
    write_set(tmp_path, "db", "b2", "incremental", "b1", "2026-11-22T11:00")
    write_set(tmp_path, "db", "b3", "incremental", "b2", "2026-11-22T12:00")
    (tmp_path / "db" / "b4").mkdir()  # interrupted: no manifest
    sets = read_sets(tmp_path, "db")
    assert [s["snapshot"] for s in sets] == ["b1", "b2", "b3"]
    assert [s["snapshot"] for s in chain(sets, None)] == ["b1", "b2", "b3"]
    assert [s["snapshot"] for s in chain(sets, "b2")] == ["b1", "b2"]
    with pytest.raises(BackupError, match="no backup set b9; there are b1, b2, b3"):
        chain(sets, "b9")
    with pytest.raises(BackupError, match="incremental from b1, which is not in the backup"):
        chain(sets[1:], "b3")
    with pytest.raises(BackupError, match="no complete backup set"):
        chain(read_sets(tmp_path, "web"), None)


def test_the_vms_to_act_on_are_named_and_found_where_they_run():
    items = [{"name": n, "home": "hv1", "domain": {"spec": {"disks": [
        {"rbd": f"yasco/{n}"}, {"rbd": f"yasco/{n}-cidata", "device": "cdrom"},
        {"file": "/tmp/x"}]}}} for n in ("db", "web")]
    status = {"hypervisors": [{"name": "hv1", "uri": "u1"}, {"name": "hv2", "uri": "u2"}],
              "vms": [{"name": "db", "running_on": ["hv2"], "recorded_host": "hv2"},
                      {"name": "web", "running_on": [], "recorded_host": None}]}
    found = selected_vms(status, items, "db, web")
    assert found[0] == {"vm": "db", "host": "hv2", "uri": "u2", "running": True,
                        "images": ["yasco/db", "yasco/db-cidata"]}
    assert found[1]["host"] == "hv1" and not found[1]["running"]
    with pytest.raises(BackupError, match="nope: not in yasco_vms"):
        selected_vms(status, items, ["db", "nope"])
    with pytest.raises(BackupError, match="name the VMs"):
        selected_vms(status, items, [])


def test_ceph_is_ready_unless_in_error_or_a_blocking_check_is_raised():
    ok = judged({"status": "HEALTH_OK", "checks": {}}, BLOCKING_CHECKS)
    assert ok["ready"] and ok["why_not_ready"] == ""
    warn = judged({"status": "HEALTH_WARN", "checks": {
        "OSD_DOWN": {"severity": "HEALTH_WARN", "summary": {"message": "1 osds down"}}}},
        BLOCKING_CHECKS)
    assert warn["ready"] and warn["checks"]["OSD_DOWN"]["summary"] == "1 osds down"
    inactive = judged({"status": "HEALTH_WARN", "checks": {"PG_AVAILABILITY": {
        "severity": "HEALTH_WARN", "summary": {"message": "Reduced data availability"}}}},
        BLOCKING_CHECKS)
    assert not inactive["ready"] and inactive["blocking"] == ["PG_AVAILABILITY"]
    assert not judged({"status": "HEALTH_ERR", "checks": {}}, BLOCKING_CHECKS)["ready"]
