"""libvirt.kill_now against libvirt's built-in test driver (test:///default), whose
domain `test` runs from the start, and real processes standing in for its QEMU: the
QEMU a pid file names is killed at once only when its command line is that domain's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv


@pytest.fixture(name="domain")
def fixture_domain():
    """The test driver's domain `test`, running. Every connection of one process shares
    the driver's state, so while another test holds one open, a domain destroyed by
    the test before stays so: it is started again here."""
    conn = lv.connect("test:///default")
    dom = conn.lookupByName("test")
    if not dom.isActive():
        dom.create()
    yield dom
    conn.close()


def process(*argv: str) -> subprocess.Popen:
    """A process that sleeps with `argv` on its command line, as QEMU's `-name`. Popen
    returns once the child has called exec, which may be before the kernel shows the
    new command line: it waits for that, as a QEMU started long ago has it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv])
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().strip(b"\0") and time.monotonic() < deadline:
        time.sleep(0.01)
    return child


def test_the_domains_qemu_is_killed_at_once_and_the_domain_destroyed(domain, tmp_path: Path):
    qemu = process("-name", "guest=test,debug-threads=on")
    (tmp_path / "test.pid").write_text(f"{qemu.pid}\n")
    try:
        lv.kill_now(domain, run_dir=str(tmp_path))
        assert qemu.wait(timeout=10) == -9  # SIGKILL, not libvirt's SIGTERM first
        assert not domain.isActive()
    finally:
        qemu.kill()


@pytest.mark.parametrize("argv", [("-name", "guest=test2"), ("-name", "test"), ()])
def test_a_pid_file_naming_another_process_kills_nothing_but_the_domain_goes(
        domain, tmp_path: Path, argv):
    other = process(*argv)
    (tmp_path / "test.pid").write_text(f"{other.pid}\n")
    try:
        lv.kill_now(domain, run_dir=str(tmp_path))
        assert other.poll() is None
        assert not domain.isActive()
    finally:
        other.kill()


def test_without_a_pid_file_it_is_libvirts_destroy(domain, tmp_path: Path):
    lv.kill_now(domain, run_dir=str(tmp_path))
    assert not domain.isActive()
