"""A lab host's hardware watchdog, emulated: what /dev/watchdog is to a real machine.

Each lab host has a FIFO at WATCHDOG_PATH (in its private /run) that its agent opens
as its watchdog device. Once something is written to it, the host is reset unless more
follows within TIMEOUT seconds; a `V` written last stops it (the magic close of a
driver without nowayout). The host's PID 1 runs `Watchdog.run` in a thread and exits
when it fires, which takes every process of the host down at once, as a reset does:
the lab host crashes, never the machine it runs on.

Standard library only: the node's PID 1 loads this file by its path.
"""

from __future__ import annotations

import os
import select
import time

WATCHDOG_PATH = "/run/yasco-lab-watchdog"
# Whole seconds, as drivers count; the lab agents' ttl 8 and margin 1.5 allow up to 6.
TIMEOUT = 4


class Watchdog:
    """Reads pets from a FIFO; `run()` returns when it fires (no pet for `timeout`
    seconds once armed). `pets` holds the monotonic time of the last pet."""

    def __init__(self, path: str = WATCHDOG_PATH, timeout: float = TIMEOUT) -> None:
        self.path, self.timeout = path, timeout
        self.armed = False
        self.last_pet = 0.0
        self.pets = 0
        self.disarms = 0

    def run(self, stop=lambda: False) -> bool:
        """Serve pets until the watchdog fires (True) or `stop()` says so (False)."""
        while not os.path.exists(self.path):
            if stop():
                return False
            time.sleep(0.2)
        # Opened for writing too: the reader never sees end-of-file when a writer
        # closes, only the bytes it wrote.
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            while not stop():
                left = self.last_pet + self.timeout - time.monotonic() if self.armed else 0.2
                if self.armed and left <= 0:
                    return True
                ready, dummy, dummy = select.select([fd], [], [], min(max(left, 0), 0.2))
                if ready:
                    data = os.read(fd, 4096)
                    self.last_pet = time.monotonic()
                    self.pets += len(data)
                    self.armed = not data.endswith(b"V")
                    self.disarms += not self.armed
            return False
        finally:
            os.close(fd)


def serve_and_reset(name: str) -> None:
    """The host's PID 1 thread: wait for the FIFO its boot makes, serve it, and reset
    the host when the watchdog fires."""
    dog = Watchdog()
    if dog.run():
        print(f"{time.time():.3f} {name}: WATCHDOG: not petted for {dog.timeout} s: "
              "resetting the host", flush=True)
        os._exit(1)  # PID 1 gone: the kernel kills every process of the host
