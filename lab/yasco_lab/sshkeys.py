"""The lab's SSH identity and the hypervisors' host keys.

Host keys are made once and kept across `down`, so the lab's known_hosts stays
valid and Ansible can verify every hypervisor it talks to.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .errors import LabError
from .layout import HostLayout, known_hosts_path, ssh_dir, ssh_key_path


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    result = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                             "-f", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"ssh-keygen failed for {path}: {result.stderr.strip()}")


def ensure_keys(hosts: list[HostLayout]) -> None:
    """Make the lab identity and each host's key if missing; rewrite known_hosts."""
    ssh_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    _keygen(ssh_key_path(), "yasco-lab controller")
    lines = []
    for host in hosts:
        key = host.ssh_host_key
        _keygen(key, f"yasco-lab {host.name}")
        kind, blob = key.with_suffix(".pub").read_text().split()[:2]
        lines.append(f"{host.address} {kind} {blob}\n")
    known_hosts_path().write_text("".join(lines))
