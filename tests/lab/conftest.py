"""The lab, brought up once for the whole test run and taken down at its end.

Tests that need it take the `lab` fixture. Tests that break a host restore it
before they finish, so the order of the other tests does not matter; the test of
`down` itself is marked `teardown` and runs last.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from yasco_lab import layout
from yasco_lab.credentials import etcd_client
from yasco_lab import lab as lab_verbs
from yasco_lab.errors import LabError

CLI = str(Path(sys.executable).with_name("yasco-lab"))


def network_namespaces() -> set[str]:
    """Network namespaces held by any process on this machine."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            found.add(str((proc / "ns" / "net").readlink()))
        except OSError:
            continue
    return found


# Taken before the lab starts, to tell the lab's namespaces from the machine's own.
NAMESPACES_BEFORE_LAB: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    NAMESPACES_BEFORE_LAB.update(network_namespaces())
    config.addinivalue_line("markers", "teardown: takes the lab down; runs after every other test")
    config.addinivalue_line("markers", "own_lab: brings up a lab of its own and takes it down; "
                            "runs before the session's lab is up")
    config.addinivalue_line("markers", "lab_waits: its tests mostly wait on the lab (leases, "
                            "hold-downs); scripts/test starts the tests that need no lab then")
    config.addinivalue_line("markers", "controller_install: uses the controller_install "
                            "fixture, whose install starts with the run")


def pytest_runtest_call(item: pytest.Item) -> None:
    """The first test marked `lab_waits` to run tells scripts/test (the file named by
    YASCO_TEST_LAB_WAITS) that the tests that need no lab may start."""
    signal = os.environ.get("YASCO_TEST_LAB_WAITS")
    if signal and item.get_closest_marker("lab_waits") is not None:
        Path(signal).touch()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: (item.get_closest_marker("own_lab") is None,
                                 item.get_closest_marker("teardown") is not None))
    if not config.option.collectonly and any(
            item.get_closest_marker("controller_install") for item in items):
        start_controller_install()


# The controller that scripts/controller installs, as production installs one, for the
# tests marked `controller_install`. It needs no lab, and takes a minute or more of pip:
# started when the run starts, it installs while the lab comes up.
_CONTROLLER: dict = {}


def start_controller_install() -> None:
    prefix = Path(tempfile.mkdtemp(prefix="yasco-controller-"))
    log = (prefix.parent / f"{prefix.name}.log").open("w+")
    _CONTROLLER.update(prefix=prefix, log=log, proc=subprocess.Popen(
        [str(Path(__file__).resolve().parents[2] / "scripts" / "controller"), str(prefix)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))


@pytest.fixture(scope="session")
def controller_install():
    """The prefix of the controller scripts/controller installed, once it has."""
    if not _CONTROLLER:
        start_controller_install()
    proc, log, prefix = _CONTROLLER["proc"], _CONTROLLER["log"], _CONTROLLER["prefix"]
    try:
        rc = proc.wait(timeout=1200)
        log.seek(0)
        assert rc == 0, f"scripts/controller {prefix} failed:\n{log.read()}"
        yield prefix
    finally:
        proc.kill()
        proc.wait()
        log.close()
        Path(log.name).unlink(missing_ok=True)
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item):
    """Each phase's report on its test (`item.rep_call`...), for fixtures that restore
    the lab after a test that failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    if report.failed and "lab" in getattr(item, "fixturenames", ()):
        report.sections.append(("what the lab's guests said", guest_lines()))
        lab = getattr(item, "funcargs", {}).get("lab")
        if lab:
            report.sections.append(("the cluster's latest history", history_lines(lab)))
        scratch = (getattr(item, "funcargs", {}).get("ha") or {}).get("scratch")
        if scratch:
            report.sections.append(("what the HA watchers logged last", watcher_lines(scratch)))


# Lines of a guest's serial console and QEMU log worth seeing after a failure: where each
# boot began (the canary's "ready"), why a kernel stopped, and why a QEMU ended.
GUEST_LINE = re.compile(r"yasco-canary: (ready|no )|panic|Oops|BUG|RIP:|Call Trace|"
                        r"watchdog|NMI|reboot|starting up|shutting down|terminating|migration|error",
                        re.IGNORECASE)


def guest_lines() -> str:
    """The telling lines of every guest's console and QEMU log on every lab host."""
    out = []
    for host in layout.host_names(layout.MAX_HOSTS):
        logs = layout.HostLayout(host).root / "log" / "qemu"
        for path in sorted(logs.glob("*.console")) + sorted(logs.glob("*.log")):
            lines = [line for line in path.read_text(errors="replace").splitlines()
                     if GUEST_LINE.search(line) and not line.startswith("-")]
            if lines:
                out.append(f"--- {host} {path.name}:\n" + "\n".join(lines[-30:]))
    return "\n".join(out) or "(no guest logs)"


def history_lines(lab: dict, most: int = 60) -> str:
    """The newest events of the lab cluster's history, one a line: who started,
    moved, restarted or fenced what, and why."""
    try:
        with etcd_client(lab["etcd_endpoints"]) as etcd:
            kvs = etcd.last_under(etcd_keys.history_prefix(cluster=layout.CLUSTER_NAME), most)
    except Exception as err:  # noqa: BLE001 - a report of a failure must not fail
        return f"(the history could not be read: {err})"
    return "\n".join(kv.value for kv in kvs) or "(no history)"


def watcher_lines(scratch: Path, most: int = 80) -> str:
    """The last lines of each HA watcher's log: the playbooks it ran and their tasks."""
    out = []
    for path in sorted(scratch.glob("watcher*.log")):
        lines = path.read_text(errors="replace").splitlines()
        out.append(f"--- {path.name}:\n" + "\n".join(lines[-most:]))
    return "\n".join(out) or "(no watcher logs)"


def yasco_lab(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run the `yasco-lab` command as an operator would."""
    result = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300,
                            check=False, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"yasco-lab {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture(scope="session")
def lab() -> dict:
    """The running lab's `status --json`; a lab left over from earlier is replaced."""
    try:
        lab_verbs.down(log=lambda _: None)
    except LabError:
        pass  # nothing was up
    # Taken again now that a lab left over from earlier is gone, for the same reason.
    NAMESPACES_BEFORE_LAB.clear()
    NAMESPACES_BEFORE_LAB.update(network_namespaces())
    yasco_lab("up")
    yield lab_verbs.status()
    try:
        lab_verbs.down(log=lambda _: None)
    except LabError:
        pass  # the teardown test already took it down
