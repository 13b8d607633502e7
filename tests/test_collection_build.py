"""The collection as Galaxy ships it: `ansible-galaxy collection build`, installed into
a fresh path, and found there by fully qualified name by ansible-doc,
ansible-playbook and ansible-rulebook, with nothing of this checkout on their path."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import tarfile

import pytest
import yaml

from .ansible_run import BIN, ROOT

GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"


def plugins(kind: str) -> list[str]:
    """The plugins of one kind in this checkout, by name (filters and tests are
    documented by a .yml file each)."""
    directory = ROOT / "plugins" / kind
    if kind in ("filter", "test"):
        return sorted(p.stem for p in directory.glob("*.yml"))
    return sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__")


@pytest.fixture(name="installed", scope="module")
def fixture_installed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("galaxy")
    collections = root / "collections"
    # Only the installed copy: no ansible.cfg of this checkout, its venv's tools on PATH.
    (root / "ansible.cfg").write_text("[defaults]\n")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections),
           "ANSIBLE_CONFIG": str(root / "ansible.cfg"), "PATH": f"{BIN}:{os.environ['PATH']}",
           "ANSIBLE_NOCOLOR": "1"}
    built = subprocess.run([BIN / "ansible-galaxy", "collection", "build", "--output-path",
                            root, ROOT], cwd=root, env=env, check=True, capture_output=True,
                           text=True, timeout=120)
    assert "WARNING" not in built.stdout + built.stderr, built.stdout + built.stderr
    (tarball,) = root.glob("*.tar.gz")
    subprocess.run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p",
                    collections, tarball], cwd=root, env=env, check=True,
                   capture_output=True, timeout=120)
    assert (collections / "ansible_collections" / "yasco" / "cluster" / "MANIFEST.json").exists()
    return {"tarball": tarball, "collections": collections, "env": env, "cwd": root}


def run(installed: dict, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=installed["cwd"], env=installed["env"],
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_tarball_holds_the_collection_and_nothing_of_the_workbench(installed):
    with tarfile.open(installed["tarball"]) as tar:
        names = set(tar.getnames())
        shipped_python = {name: tar.extractfile(name).read().decode()
                          for name in names if name.endswith(".py")}
    for wanted in ("MANIFEST.json", "COPYING", "meta/runtime.yml", "plugins/modules/etcd_key.py",
                   "extensions/eda/plugins/event_source/etcd_hosts.py", "rulebooks/ha.yml",
                   "playbooks/evacuate.yml", "roles/agent/tasks/main.yml", "docs/security.md",
                   "CHANGELOG.md", "changelogs/changelog.yaml",
                   "tests/unit/plugins/modules/test_libvirt_domain.py"):
        assert wanted in names, wanted
    tops = {name.split("/")[0] for name in names}
    assert not tops & {".venv", ".ansible", ".hypothesis", ".pytest_cache", ".ruff_cache",
                       ".ci", ".ansible-lint", ".gitignore", "ansible.cfg", "pytest.ini",
                       "Makefile", "lab", "scripts", "collections", "benchmarks", "molecule",
                       "environments", "requirements", "requirements.txt",
                       "execution-environment.yml", "decision-environment.yml"}, tops
    assert not [n for n in names if "__pycache__" in n or n.startswith(
        ("inventories/lab", "changelogs/fragments"))]
    # Of the tests, the unit tests alone (ansible-test units), with the helper they
    # import; the rest need this checkout's venv, a real etcd or the lab.
    assert {n for n in names if n.startswith("tests/") and n.split("/")[1] != "unit"} == {
        "tests/__init__.py", "tests/ansible_run.py"}
    for name, source in shipped_python.items():
        nodes = list(ast.walk(ast.parse(source)))
        imported = {alias.name for node in nodes if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module for node in nodes
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not {m for m in imported if m.split(".")[0] == "yasco_lab"}, name


def test_the_tarball_carries_the_license_galaxy_yml_names(installed):
    with tarfile.open(installed["tarball"]) as tar:
        copying = tar.extractfile("COPYING").read().decode()
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    assert info["license"] == ["GPL-3.0-or-later"]
    assert copying == (ROOT / "COPYING").read_text()
    assert copying.split("\n", 2)[:2] == [" " * 20 + "GNU GENERAL PUBLIC LICENSE",
                                          " " * 23 + "Version 3, 29 June 2007"]


@pytest.mark.parametrize("kind", ["module", "lookup", "inventory", "filter", "test"])
def test_ansible_doc_renders_every_plugin_from_the_installed_collection(installed, kind):
    directory = {"module": "modules"}.get(kind, kind)
    names = [f"{FQCN}.{name}" for name in plugins(directory)]
    assert names
    shown = run(installed, "ansible-doc", "-t", kind, *names)
    assert shown.returncode == 0, shown.stderr
    assert "WARNING" not in shown.stderr and "ERROR" not in shown.stderr, shown.stderr
    for name in names:
        assert name in shown.stdout, f"{name} not rendered"
    assert str(installed["collections"]) in shown.stdout  # not this checkout's copy


def test_ansible_playbook_runs_the_playbooks_by_fqcn(installed):
    playbooks = sorted((ROOT / "playbooks").glob("*.yml"))
    assert len(playbooks) > 20
    checked = run(installed, "ansible-playbook", "-i", "localhost,", "--syntax-check",
                  *[f"{FQCN}.{path.stem}" for path in playbooks])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ansible_doc_documents_every_role_and_its_arguments_from_the_installed_collection(
        installed):
    roles = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/main.yml"))
    assert roles
    shown = run(installed, "ansible-doc", "-t", "role", "--json",
                *[f"{FQCN}.{role}" for role in roles])
    assert shown.returncode == 0, shown.stderr
    docs = json.loads(shown.stdout)
    assert sorted(docs) == [f"{FQCN}.{role}" for role in roles]
    for role in roles:
        spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml"
                               ).read_text())["argument_specs"]["main"]
        shown_main = docs[f"{FQCN}.{role}"]["entry_points"]["main"]
        assert shown_main["short_description"] == spec["short_description"], role
        assert sorted(shown_main["options"]) == sorted(spec["options"]), role
        assert docs[f"{FQCN}.{role}"]["path"].startswith(str(installed["collections"]))


def test_ansible_rulebook_finds_the_rulebooks_and_the_event_source_by_fqcn(installed):
    probe = """
from ansible_rulebook.collection import find_source, has_rulebook
print(has_rulebook("{c}", "ha"), has_rulebook("{c}", "ha_controller"))
print(find_source("{c}", "etcd_hosts"))
""".format(c=FQCN)
    found = run(installed, str(BIN / "python"), "-c", probe)
    assert found.returncode == 0, found.stderr
    rulebooks, source = found.stdout.splitlines()
    assert rulebooks == "True True"
    assert source.startswith(str(installed["collections"]))
    assert source.endswith("extensions/eda/plugins/event_source/etcd_hosts.py")


def test_galaxy_yml_states_its_addresses_and_where_the_documentation_is(installed):
    # Galaxy's and ansible-lint's metadata checks want the keys; with no public home
    # yet they are empty rather than invented, and the comment says where the docs are.
    with tarfile.open(installed["tarball"]) as tar:
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    for key in ("repository", "documentation", "homepage", "issues"):
        assert GALAXY[key] == info[key], key
        assert GALAXY[key] == "" or GALAXY[key].startswith("https://"), key
    assert "docs/production.md" in (ROOT / "galaxy.yml").read_text()
