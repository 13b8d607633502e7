"""The layers of plugins/module_utils (docs/architecture.md), enforced: each package
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

# Lowest first: the packages of each tier. A package may import from its own tier and
# the tiers before it.
TIERS = {
    "planner": {"planner"},
    "adapters": {"adapters"},
    "cluster state and decisions": {"cluster"},
    "stories and the modules' work": {"stories", "agent", "watcher", "report", "resources"},
}
RANK = {package: rank for rank, packages in enumerate(TIERS.values()) for package in packages}
TIER_OF = {package: tier for tier, packages in TIERS.items() for package in packages}
# What the planner may not import: it plans from its inputs alone.
IMPURE = ("ansible", "socket", "subprocess", "etcd3gw", "libvirt", "rados", "rbd",
          "requests", "urllib")


def ours_and_others(path: Path) -> tuple[set[str], set[str]]:
    """The module_utils modules `path` imports ("package.module"), and the top-level
    names of the rest."""
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(PACKAGE + "."):
                dotted = node.module[len(PACKAGE) + 1:]
                if "." in dotted:  # from PACKAGE.package.module import names
                    ours.add(dotted)
                else:  # from PACKAGE.package import modules
                    ours.update(f"{dotted}.{alias.name}" for alias in node.names)
            elif node.module == PACKAGE or node.level:
                raise AssertionError(f"{path}: import from a package of module_utils, by "
                                     f"its absolute name")
            else:
                others.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    ours.add(alias.name[len(PACKAGE) + 1:])
                else:
                    others.add(alias.name.split(".")[0])
    return ours, others


MODULES = sorted(str(p.relative_to(MODULE_UTILS).with_suffix(""))
                 for p in MODULE_UTILS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_is_in_a_package_of_a_tier_and_each_says_what_it_owns() -> None:
    loose = [name for name in MODULES if "/" not in name]
    assert not loose, f"put {loose} in a package of plugins/module_utils"
    packages = {name.split("/")[0] for name in MODULES}
    assert packages - set(RANK) == set(), (
        "give each new package of plugins/module_utils a tier in tests/test_layers.py "
        "(and docs/architecture.md)")
    assert set(RANK) - packages == set(), "a tier names a package that is gone"
    assert all(name.count("/") == 1 for name in MODULES), "one level of packages"
    # ansible-test wants a package's __init__.py empty: its README.md says what it is.
    assert all((MODULE_UTILS / package / "README.md").is_file() for package in RANK)


@pytest.mark.parametrize("name", MODULES)
def test_imports_go_down_the_tiers_only(name: str) -> None:
    package = name.split("/")[0]
    ours, dummy = ours_and_others(MODULE_UTILS / f"{name}.py")
    assert all(dep.count(".") == 1 and (MODULE_UTILS / dep.replace(".", "/")).with_suffix(
        ".py").is_file() for dep in ours), ours
    upward = sorted(f"{dep} ({TIER_OF[dep.split('.')[0]]})" for dep in ours
                    if RANK[dep.split(".")[0]] > RANK[package])
    assert not upward, f"{name} ({TIER_OF[package]}) imports from a tier above it: {upward}"


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith("planner/")])
def test_the_planner_is_pure(name: str) -> None:
    dummy, others = ours_and_others(MODULE_UTILS / f"{name}.py")
    assert not others & set(IMPURE), f"{name} imports {sorted(others & set(IMPURE))}"


def test_the_checker_trusts_nothing_of_the_planner() -> None:
    # The independent check of a plan must not share the code that made it.
    ours, dummy = ours_and_others(MODULE_UTILS / "planner" / "vdm_check.py")
    assert ours <= {"planner.vdm_model"}, ours


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
            + f"print(sorted(m[{len(PACKAGE) + 1}:] for m in sys.modules "
              f"if m.startswith({PACKAGE + '.'!r}) and m.count('.') > {PACKAGE.count('.') + 1}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "collections")})
    assert done.returncode == 0, done.stderr
    libraries, ours = done.stdout.splitlines()
    assert libraries == "[]", f"the filter plugins import {libraries}"
    assert ours == "['adapters.etcd_access', 'adapters.etcd_keys']", (
        f"the filter plugins import {ours}")
