# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Live migration of a libvirt domain: how it runs (MigrationPolicy, the module's
`migration` option), the migration itself with its deadline and its one retry, and
the figures libvirt keeps of it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt import (
    LibvirtAdapterError, call, find_domain, libvirt)

# A live migration that fails while the source keeps running is tried once more:
# libvirt has aborted it cleanly, and a stream can break on a loaded host (on the lab,
# QEMU 7.2 once reported an I/O error on its TLS channel, with several at once).
MIGRATION_ATTEMPTS = 2


# QEMU's own maximum pause of a guest at a migration's switch-over, in milliseconds.
QEMU_MAX_DOWNTIME = 300


@dataclass(frozen=True)
class MigrationPolicy:
    """How a live migration runs: the module's `migration` option, which playbooks take
    from the inventory's `yasco_migration`. The defaults are QEMU's own behaviour."""

    bandwidth: int = 0  # MiB/s at most; 0: as fast as the network goes
    max_downtime: int = 0  # ms the guest may pause at the switch-over; 0: QEMU's 300 ms
    # Slow the guest's vCPUs down while its memory changes faster than it is sent, so
    # that a busy guest converges (QEMU's auto-converge).
    auto_converge: bool = False
    compressed: bool = False  # resend only what changed in pages sent already (XBZRLE)
    # A migration still running after this many seconds switches to post-copy: the
    # guest runs on the target at once and fetches the pages it still lacks from the
    # source. It always ends, but a failure of either host or of the network during
    # it loses the guest's memory (its disks are safe, on Ceph): never by default.
    post_copy_after: float | None = None

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> MigrationPolicy:
        given = {k: v for k, v in (options or {}).items() if v is not None}
        return cls(**given)

    def flags(self) -> int:
        flags = 0
        if self.auto_converge:
            flags |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
        if self.compressed:
            flags |= libvirt.VIR_MIGRATE_COMPRESSED
        if self.post_copy_after is not None:
            flags |= libvirt.VIR_MIGRATE_POSTCOPY
        return flags

    def params(self) -> dict[str, Any]:
        if not self.bandwidth:
            return {}
        # The cap holds in both phases: libvirt sets post-copy's apart (MiB/s too).
        params = {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: self.bandwidth}
        if self.post_copy_after is not None:
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY] = self.bandwidth
        return params


def migrate_live(dom, target_conn, timeout: float, tls: bool = True,
                 policy: MigrationPolicy | None = None) -> tuple[Any, dict[str, Any]]:
    """Live-migrate `dom` to `target_conn`, persistent there and undefined here, over
    QEMU's TLS unless `tls` is false, as `policy` says; abort the job if it has not
    finished within `timeout` (a migration switched to post-copy cannot be aborted: it
    is waited for). A failed attempt is retried once while the domain still runs here
    and nowhere on the target. Returns the domain on the target and the migration's
    figures (`migration_stats`)."""
    policy = policy or MigrationPolicy()
    flags = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
             | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE | policy.flags())
    if tls:
        flags |= libvirt.VIR_MIGRATE_TLS
    # Set each time: QEMU keeps the last value given, from an earlier attempt say.
    call(f"domain {dom.name()}: set the migration's maximum downtime",
         dom.migrateSetMaxDowntime, policy.max_downtime or QEMU_MAX_DOWNTIME, 0)
    deadline = time.monotonic() + timeout
    failures: list[str] = []
    for dummy in range(MIGRATION_ATTEMPTS):
        started = time.monotonic()
        outcome = _migrate_once(dom, target_conn, flags, policy,
                                max(1.0, deadline - time.monotonic()))
        if "domain" in outcome:
            figures = migration_stats(outcome["domain"])
            # After post-copy libvirt keeps no figures on the target: the time is ours.
            figures.setdefault("total_ms", round((time.monotonic() - started) * 1000))
            if policy.auto_converge:
                figures["throttle_percent"] = outcome.get("throttle", 0)
            return outcome["domain"], {**figures, "post_copy": "post_copy" in outcome}
        failures.append(outcome["error"].get_error_message())
        if not (_active(dom) and find_domain(target_conn, dom.name()) is None
                and time.monotonic() < deadline):
            break
    raise LibvirtAdapterError(f"domain {dom.name()}: live migration failed: "
                              + "; then: ".join(failures))


def _migrate_once(dom, target_conn, flags: int, policy: MigrationPolicy,
                  timeout: float) -> dict[str, Any]:
    """One migration: {'domain': the domain on the target} or {'error': libvirtError};
    raises when it did not finish within `timeout` (it is aborted)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["domain"] = dom.migrate3(target_conn, policy.params(), flags)
        except libvirt.libvirtError as err:
            outcome["error"] = err

    def wait(seconds: float) -> None:
        """Join the worker for up to `seconds`, noting auto-converge's throttle as it
        goes: libvirt keeps it only while the job runs."""
        until = time.monotonic() + seconds
        while worker.is_alive() and time.monotonic() < until:
            worker.join(min(1.0, max(0.0, until - time.monotonic())))
            if policy.auto_converge and worker.is_alive():
                try:
                    throttle = dom.jobStats().get("auto_converge_throttle", 0)
                except libvirt.libvirtError:
                    continue
                outcome["throttle"] = max(outcome.get("throttle", 0), throttle)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout
    if policy.post_copy_after is not None and policy.post_copy_after < timeout:
        wait(policy.post_copy_after)
        # Asked again each second until QEMU takes it: it refuses while the migration
        # is still being set up, and an ended one needs nothing.
        while worker.is_alive() and time.monotonic() < deadline:
            try:
                dom.migrateStartPostCopy(0)
            except libvirt.libvirtError:
                wait(1.0)
                continue
            # No abort from here on: the guest runs on the target already.
            outcome["post_copy"] = True
            worker.join()
            return outcome
    wait(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        try:
            dom.abortJob()
        except libvirt.libvirtError:
            pass
        worker.join(30)
        if "domain" in outcome:
            return outcome  # it ended as it was being cancelled: moved after all
        raise LibvirtAdapterError(
            f"domain {dom.name()}: live migration did not finish within {timeout:g} s and "
            + ("was cancelled; the domain still runs on the source" if "error" in outcome
               else "libvirt has not said how its cancellation ended: check which host "
                    "runs the domain"))
    return outcome


# What a completed migration's statistics say, by the names a module returns.
MIGRATION_STATS = {"time_elapsed": "total_ms", "downtime": "downtime_ms",
                   "memory_processed": "memory_bytes", "memory_iteration": "iterations"}


def migration_stats(dom) -> dict[str, Any]:
    """The last completed migration of `dom`, read on the target: its total time and the
    guest's pause (ms), the memory sent and QEMU's passes over it; {} when libvirt
    kept none."""
    try:
        stats = dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    except libvirt.libvirtError:
        return {}
    return {name: stats[key] for key, name in MIGRATION_STATS.items() if key in stats}


def _active(dom) -> bool:
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False
