"""Waiting for the cluster to reach a state, as the demo and the benchmarks watch it."""

from __future__ import annotations

import time
from typing import Any, Callable

from .errors import LabError


def wait_until(what: str, condition: Callable[[], Any], timeout: float,
               every: float = 0.05) -> Any:
    """Poll `condition` until it returns something true, and return that; a LabError
    naming `what` once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise LabError(f"{what}: not within {timeout:g} s")
