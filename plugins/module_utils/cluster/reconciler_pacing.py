# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How hard the HA reconciler tries (Policy), and what it remembers between calls to
go by it (Memory): when each VM was first seen down or starting, the starts asked for
within the window, the steps under way, the failures and when to retry them.

`memory` is kept by the leading watcher. A new leader starts with none: at worst a
VM gets one more restart in place than `max_restart`; etcd's compare-and-swap, not
memory, keeps a VM from starting twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Policy:
    """How hard the reconciler tries; every figure in seconds or counts."""

    # In-place restarts of a VM within `window` before it is relocated.
    max_restart: int = 1
    # Relocations within `window` before the VM is recorded failed.
    max_relocate: int = 2
    window: float = 600.0
    # A VM recorded running on a live host that its agent has not published for this
    # long is down (the agent publishes within a second of a domain event).
    grace: float = 2.0
    # A record left `starting` this long, with the VM running nowhere, is a failed start.
    start_timeout: float = 60.0
    # A step that changed nothing in etcd this long after it went out is decided again.
    action_timeout: float = 90.0
    # A failed VM is tried again this long after it failed, or at once when a host
    # becomes usable.
    retry_after: float = 300.0
    # An HA VM still recorded on a failed host this long after the failure was seen:
    # its evacuation did not finish (a run that failed, a watcher that died), and is
    # asked for again.
    evacuation_timeout: float = 90.0

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None, where: str = "policy") -> Policy:
        data = dict(data or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: "
                             f"{', '.join(fields)}")
        for name, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{where}.{name}: must be a number >= 0, got {value!r}")
        return cls(**data)


@dataclasses.dataclass
class Memory:
    """What the reconciler remembers between calls; changed in place by decide()."""

    # VM -> when it was first seen not running where its record says it runs.
    down_since: dict[str, float] = dataclasses.field(default_factory=dict)
    # VM -> (record revision, when first seen) of a record that says starting.
    starting_since: dict[str, tuple[int, float]] = dataclasses.field(default_factory=dict)
    # VM -> [(when, host, kind)] of the starts asked for, kind restart or relocate.
    attempts: dict[str, list[tuple[float, str, str]]] = dataclasses.field(default_factory=dict)
    # VM -> (when, record revision) of the last step that went out.
    asked: dict[str, tuple[float, int]] = dataclasses.field(default_factory=dict)
    # VM -> (when, the usable hosts then) of the VM's failure.
    failed: dict[str, tuple[float, frozenset]] = dataclasses.field(default_factory=dict)
    # VM -> when it was first seen meant to run on a failed host (the evacuation's).
    stranded_since: dict[str, float] = dataclasses.field(default_factory=dict)
    # The hosts alive at the last look: one back since (a reboot, a crash) took its
    # VMs down with it, which counts against none of them.
    alive: set[str] | None = None
    # VMs recorded on a host when it came back: their first restart there is the
    # host's return, not a failure of theirs, and is not counted against them.
    returning: set[str] = dataclasses.field(default_factory=set)

    def forget(self, vm: str) -> None:
        """Drop all that is remembered of `vm`: HA has let it go, or it is stopped."""
        for table in (self.down_since, self.starting_since, self.attempts, self.failed,
                      self.stranded_since):
            table.pop(vm, None)
        self.returning.discard(vm)
