# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A watchdog device as Linux offers it (/dev/watchdog: softdog, iTCO_wdt, ipmi_watchdog):
once opened it resets the machine unless something is written to it within its
timeout. Closing it after writing the magic character `V` stops it, unless the driver
was loaded with nowayout=1; closing it any other way (a crash, a kill) leaves it
counting.

Used by the hypervisor agent (host_agent opens it, self_fence pets it): the timer runs
while the host holds a lease its HA VMs could be started elsewhere on, so an agent
that hangs resets the host before that lease can expire. Imports nothing of Ansible.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import threading

# linux/watchdog.h: _IOR('W', 5, int), _IOWR('W', 6, int), _IOR('W', 7, int)
WDIOC_KEEPALIVE = 0x80045705
WDIOC_SETTIMEOUT = 0xC0045706
WDIOC_GETTIMEOUT = 0x80045707


class WatchdogError(Exception):
    """The device cannot be opened or set; the message names it and says what to do."""


class Watchdog:
    """An open watchdog device. `pet()` resets its timer; `disarm()` stops it (magic
    close) and `close()` leaves it counting. A path that is not a character device (a
    FIFO, as the lab's per-host emulator offers) takes the same writes but no ioctl:
    its timeout is the one configured."""

    def __init__(self, path: str, timeout: int) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as err:
            hint = ("another process holds it (a watchdog daemon?)" if err.errno == 16
                    else "load a driver (modprobe softdog, iTCO_wdt or ipmi_watchdog)"
                    if err.errno == 2 else "the agent runs as root")
            raise WatchdogError(f"watchdog device {path}: {err.strerror}: {hint}") from err
        self.timeout = timeout
        self.lock = threading.Lock()  # a pet never follows the magic close
        self.device = stat.S_ISCHR(os.fstat(self.fd).st_mode)
        if self.device:
            try:
                got = fcntl.ioctl(self.fd, WDIOC_SETTIMEOUT, struct.pack("i", timeout))
                self.timeout = struct.unpack("i", got)[0]
            except OSError as err:
                self.close()
                raise WatchdogError(f"watchdog device {path}: cannot set its timeout to "
                                    f"{timeout} s: {err.strerror}; choose one the driver "
                                    "accepts (see its max_timeout)") from err
            if self.timeout > timeout:
                self.close()
                raise WatchdogError(f"watchdog device {path}: asked for a timeout of "
                                    f"{timeout} s, the driver set {self.timeout} s, too "
                                    "long to reset the host before its lease expires")
        self.pet()

    def pet(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.write(self.fd, b"\0")

    def disarm(self) -> None:
        """Stop the timer: magic close. A driver loaded with nowayout keeps counting."""
        with self.lock:
            try:
                if self.fd >= 0:
                    os.write(self.fd, b"V")
            finally:
                self._close()

    def close(self) -> None:
        """Close without stopping the timer: the host resets unless someone opens the
        device again and pets it in time."""
        with self.lock:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
