"""The lab bridge, and cutting and restoring a host's link to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .errors import LabError
from .layout import BRIDGE, PREFIX_LEN, controller_address


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise LabError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def create_bridge() -> None:
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{controller_address()}/{PREFIX_LEN}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")


def delete_bridge() -> None:
    if link_exists(BRIDGE):
        ip("link", "del", BRIDGE)


def delete_link(name: str) -> None:
    if link_exists(name):
        ip("link", "del", name, check=False)


def set_link(name: str, up: bool) -> None:
    """Take a host's bridge port down (a network partition) or up again."""
    if not link_exists(name):
        raise LabError(f"link {name} does not exist: is the host running?")
    ip("link", "set", name, "up" if up else "down")
