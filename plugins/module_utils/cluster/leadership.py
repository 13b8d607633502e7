# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether an HA watcher leads the others: a state machine over the watchers' leader
lease, with no I/O and no clock of its own. The watcher's leader thread asks it what
to send (a grant, or a keepalive of the lease it holds), tells it what came back and
when the request was sent, and asks it whether to step down.

Only the leader emits events and runs the reconciler, so two watchers must never both
believe they lead. etcd ends a lease `ttl` seconds after the last keepalive it
received, and a keepalive is received no earlier than it was sent. So a watcher
leads only while less than `STEP_DOWN` of the TTL has passed since it *sent* the
last grant or keepalive that etcd answered: asked at any moment, not only when its
thread next looks, it never believes it leads once its lease can have expired,
however long a request hangs. A lease etcd says has expired ends the leadership at
once.
"""

from __future__ import annotations

# The share of the leader lease's TTL, from the last keepalive answered, after which
# a leader steps down: what is left covers the loop's own wait and a request in flight.
STEP_DOWN = 0.6


class Leadership:
    """The leader lease this watcher holds (0: none), and when the keepalive or grant
    that etcd last answered was sent."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.lease = 0
        self.last_ok = float("-inf")

    @property
    def holding(self) -> bool:
        """Whether it holds a lease it has not given up: it keeps it alive, and does not
        ask for another."""
        return bool(self.lease)

    def leads(self, now: float) -> bool:
        return self.holding and now <= self.last_ok + self.ttl * STEP_DOWN

    @property
    def every(self) -> float:
        """How long the leader thread waits between two requests."""
        return self.ttl / 3

    @property
    def request_timeout(self) -> float:
        """How long one request may take: a third of the TTL (etcd may take over half a
        second to grant a lease on a loaded machine, and a shorter timeout kept a
        watcher from ever leading), so that a request sent just before the step-down
        time has timed out well before the lease could expire."""
        return max(1.0, self.ttl / 3)

    def won(self, lease: int, sent: float) -> None:
        """The leader key was written under `lease`, granted by a request sent at
        `sent`."""
        self.lease, self.last_ok = lease, sent

    def renewed(self, sent: float, now: float) -> bool:
        """etcd answered, at `now`, a keepalive sent at `sent`. True when that resumes a
        leadership that had lapsed meanwhile (the request took longer than the
        step-down allows): what the watcher left to a leader while it did not lead,
        it must look at again, as a new leader does."""
        lapsed = not self.leads(now)
        self.last_ok = max(self.last_ok, sent)
        return lapsed and self.leads(now)

    def expired(self) -> None:
        """etcd answered that the lease no longer exists: another watcher may lead."""
        self.lease = 0

    def due_to_step_down(self, now: float) -> bool:
        """Whether it holds a lease it no longer leads by: it must give it up and ask for
        the leader key again."""
        return self.holding and not self.leads(now)

    def silent_for(self, now: float) -> float:
        return now - self.last_ok

    def step_down(self) -> None:
        self.lease = 0
