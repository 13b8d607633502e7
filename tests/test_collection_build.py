"""The collection as Galaxy ships it: `ansible-galaxy collection build`, installed into
a fresh path, and found there by fully qualified name by ansible-doc,
ansible-playbook and ansible-rulebook, with nothing of this checkout on their path."""

from __future__ import annotations

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
    for wanted in ("MANIFEST.json", "meta/runtime.yml", "plugins/modules/etcd_key.py",
                   "extensions/eda/plugins/event_source/etcd_hosts.py", "rulebooks/ha.yml",
                   "playbooks/evacuate.yml", "roles/agent/tasks/main.yml", "docs/security.md"):
        assert wanted in names, wanted
    tops = {name.split("/")[0] for name in names}
    assert not tops & {".venv", ".ansible", ".hypothesis", ".pytest_cache", ".ruff_cache",
                       "lab", "scripts", "collections"}, tops
    assert not [n for n in names if "__pycache__" in n or n.startswith("inventories/lab/hosts")]


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
    checked = run(installed, "ansible-playbook", "-i", "localhost,", "--syntax-check",
                  f"{FQCN}.evacuate", f"{FQCN}.return_home", f"{FQCN}.status")
    assert checked.returncode == 0, checked.stdout + checked.stderr


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
