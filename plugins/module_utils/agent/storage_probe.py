# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a hypervisor reaches its Ceph cluster, as its agent asks every few seconds.

A host cut off from Ceph alone (its OSDs or monitors out of reach, etcd still
answering) keeps its lease, so no evacuation starts, while every guest on it waits on
its disk for good. The agent probes Ceph with a client of its own, which gives up
after `timeout` seconds where the guests' clients wait: one object stat in the VM pool
(an OSD's answer, "no such object" included, is proof enough). A client this host is
blocklisted as answers at once with ESHUTDOWN: Ceph is reached, and the host is
fenced, which is the evacuation's doing, not a partition.

`verdict` decides, without I/O, what a probe's outcome means: a host that has not
reached Ceph for `grace` seconds while another host does is the one cut off, and
self-fences so that its HA VMs run elsewhere; when no other host reaches Ceph either,
the outage is Ceph's, and moving VMs would not help: nothing is fenced.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import STORAGE_LOST

try:
    import rados
except ImportError:
    rados = None

# The object each probe stats; it need not exist. Every host stats the same one, so
# that an object whose placement group is stuck shows on every host alike.
PROBE_OBJECT = "yasco.storage-probe"
# How often the agent probes Ceph, and how long one probe may take before it counts
# as not reached, in seconds.
PROBE_EVERY = 2.0
PROBE_TIMEOUT = 5.0
# What a host's liveness value says of its storage: probed and reached (or fenced),
# not reached for `grace` seconds, or not probed.
REACHED, LOST = "ok", STORAGE_LOST

OK, WAITING, OUTAGE, FENCE = "ok", "waiting", "outage", "fence"


class ProbeError(Exception):
    """The probe cannot run here at all; the message says what to install or set."""


def verdict(lost_for: float, grace: float, others: list[Any], frozen: bool) -> str:
    """What `lost_for` seconds without reaching Ceph means (0 once reached):
    OK, WAITING (within `grace`), OUTAGE (no other host reaches Ceph either, as
    their liveness values say in `others`, or HA is frozen: nothing would start the
    VMs elsewhere) or FENCE (this host alone is cut off)."""
    if lost_for <= 0:
        return OK
    if lost_for < grace:
        return WAITING
    if frozen or REACHED not in others:
        return OUTAGE
    return FENCE


class Probe:
    """One Ceph client of the agent's own, connected on demand and dropped after any
    failure (a client cut off mid-session may never recover)."""

    def __init__(self, conf: str, client: str, pool: str, timeout: float,
                 keyring: str = "") -> None:
        if rados is None:
            raise ProbeError("the Ceph Python bindings are not installed (Debian: "
                             "python3-rados); install them or set no ceph_conf")
        self.conf, self.client, self.pool, self.keyring = conf, client, pool, keyring
        self.timeout = max(1, math.ceil(timeout))
        self.handle = None
        self.last_error = ""

    def reached(self) -> bool:
        """Whether Ceph answered this time; `last_error` says why not."""
        try:
            if self.handle is None:
                seconds = str(self.timeout)
                options = {"rados_mon_op_timeout": seconds, "rados_osd_op_timeout": seconds,
                           "client_mount_timeout": seconds}
                if self.keyring:
                    options["keyring"] = self.keyring
                self.handle = rados.Rados(conffile=self.conf, name=f"client.{self.client}",
                                          conf=options)
                self.handle.connect(timeout=self.timeout)
            with self.handle.open_ioctx(self.pool) as ioctx:
                ioctx.stat(PROBE_OBJECT)
        except rados.ObjectNotFound:
            pass  # an OSD answered
        except rados.ConnectionShutdown:
            return True  # ESHUTDOWN: blocklisted, so reached, and fenced
        except rados.Error as err:
            self.last_error = f"{self.pool} in the Ceph cluster of {self.conf}: {err}"
            self.close()
            return False
        return True

    def close(self) -> None:
        """Drop the client; its shutdown, which may wait on a cluster out of reach,
        runs on a thread of its own so that the next probe never waits on it."""
        handle, self.handle = self.handle, None
        if handle is not None:
            threading.Thread(target=_shut_down, args=(handle,), daemon=True,
                             name="ceph-probe-shutdown").start()


def _shut_down(handle: Any) -> None:
    try:
        handle.shutdown()
    except rados.Error:
        pass
