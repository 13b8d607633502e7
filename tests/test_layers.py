"""The layers of plugins/module_utils (docs/architecture.md), enforced: each file
belongs to one tier and imports from its own tier or the ones below it only, and the
planner, pure Python, imports nothing of Ansible's and nothing that does I/O."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = "ansible_collections.yasco.cluster.plugins.module_utils"

# Lowest first. A file may import from its own tier and the tiers before it.
TIERS = {
    "planner": {"vdm_model", "vdm_solver", "vdm_planner", "vdm_check", "vdm_document",
                "vdm_what_if", "vdm_planted"},
    "adapters": {"etcd", "etcd_keys", "etcd_access", "etcd_quorum", "etcd_module", "ceph",
                 "ceph_module", "libvirt", "power_fence", "hw_watchdog", "atomic_file",
                 "metrics", "module_run"},
    "cluster state and decisions": {"vm_records", "cluster_events", "host_states",
                                    "reconciler"},
    "stories and the modules' work": {
        "agent_restart", "ceph_fencing", "ceph_health", "ceph_image", "config_drive",
        "cluster_status", "cluster_report", "cluster_report_html", "cluster_report_render",
        "cluster_report_write", "drain", "evacuation", "host_agent", "libvirt_domain",
        "libvirt_guest", "power", "rebalance", "recovery", "return_home", "storage_probe",
        "vm_backup", "vm_provisioning", "vm_snapshot"},
}
RANK = {name: rank for rank, files in enumerate(TIERS.values()) for name in files}
TIER_OF = {name: tier for tier, files in TIERS.items() for name in files}
# What the planner may not import: it plans from its inputs alone.
IMPURE = ("ansible", "socket", "subprocess", "etcd3gw", "libvirt", "rados", "rbd",
          "requests", "urllib")


def ours_and_others(path: Path) -> tuple[set[str], set[str]]:
    """The module_utils files `path` imports, and the top-level names of the rest."""
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # relative: within module_utils
                base = node.module.split(".")[0]
                ours.add(base)
            elif node.module == PACKAGE:
                ours.update(alias.name for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                ours.add(node.module[len(PACKAGE) + 1:].split(".")[0])
            else:
                others.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    ours.add(alias.name[len(PACKAGE) + 1:].split(".")[0])
                else:
                    others.add(alias.name.split(".")[0])
    return ours, others


FILES = sorted(p.stem for p in MODULE_UTILS.glob("*.py") if p.stem != "__init__")


def test_every_file_has_a_tier_and_every_tier_a_file() -> None:
    assert set(FILES) - set(RANK) == set(), (
        "put each new module_utils file in a tier of tests/test_layers.py "
        "(and docs/architecture.md)")
    assert set(RANK) - set(FILES) == set(), "a tier names a file that is gone"


@pytest.mark.parametrize("name", FILES)
def test_imports_go_down_the_tiers_only(name: str) -> None:
    ours, dummy = ours_and_others(MODULE_UTILS / f"{name}.py")
    upward = sorted(f"{dep} ({TIER_OF[dep]})" for dep in ours
                    if dep in RANK and RANK[dep] > RANK[name])
    assert not upward, f"{name} ({TIER_OF[name]}) imports from a tier above it: {upward}"


@pytest.mark.parametrize("name", sorted(TIERS["planner"]))
def test_the_planner_is_pure(name: str) -> None:
    dummy, others = ours_and_others(MODULE_UTILS / f"{name}.py")
    assert not others & set(IMPURE), f"{name} imports {sorted(others & set(IMPURE))}"


def test_the_checker_trusts_nothing_of_the_planner() -> None:
    # The independent check of a plan must not share the code that made it.
    ours, dummy = ours_and_others(MODULE_UTILS / "vdm_check.py")
    assert ours <= {"vdm_model"}, ours


def test_the_filters_load_no_story_and_no_client() -> None:
    """To find any one filter, Ansible imports every filter file of the collection
    afresh in each task's worker process, so whatever they import at load time is paid
    for by every task that uses one: the evacuation's among them, between a host's
    failure and its VMs starting. A filter imports its story's module when it runs;
    at load time they import etcd's key names alone (130 ms of stories, the solver's
    OR-Tools, numpy and pandas and the etcd client's libraries otherwise)."""
    filters = sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.py"))
    assert filters, "no filter plugins found"
    heavy = ("numpy", "ortools", "pandas", "etcd3gw", "requests", "libvirt")
    code = ("import sys\n"
            + "".join(f"import ansible_collections.yasco.cluster.plugins.filter.{name}\n"
                      for name in filters)
            + f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
            + f"print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
              f"if m.startswith({PACKAGE + '.'!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "collections")})
    assert done.returncode == 0, done.stderr
    libraries, ours = done.stdout.splitlines()
    assert libraries == "[]", f"the filter plugins import {libraries}"
    assert ours == "['etcd_access', 'etcd_keys']", f"the filter plugins import {ours}"
