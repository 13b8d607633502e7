"""The checkout is the yasco.cluster collection, and setup leaves a working toolchain."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, cwd=REPO,
                            timeout=1200, check=False, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_fqcns_resolve_to_this_checkout_without_an_install():
    listing = run(str(BIN / "ansible-galaxy"), "collection", "list", "yasco.cluster").stdout
    assert str(REPO / "collections" / "ansible_collections") in listing
    assert "yasco.cluster" in listing


def test_collection_builds_without_the_lab_or_the_venv(tmp_path):
    run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path))
    (artifact,) = tmp_path.glob("yasco-cluster-*.tar.gz")
    with tarfile.open(artifact) as tar:
        names = tar.getnames()
    assert "galaxy.yml" not in names and "MANIFEST.json" in names
    assert "meta/runtime.yml" in names
    assert not any(n.startswith((".venv", "lab/", "collections/", ".ci")) for n in names)


def test_setup_twice_changes_nothing():
    result = run("scripts/bootstrap")
    assert result.stdout == "setup: ready\n"


def test_venv_imports_the_ceph_bindings_and_the_clients():
    run(sys.executable, "-c", "import rados, rbd, libvirt, etcd3gw, ansible_rulebook")


def test_ansible_rulebook_runs_on_the_jvm():
    java_home = os.environ.get("JAVA_HOME") or sorted(glob.glob("/usr/lib/jvm/java-17-*"))[-1]
    env = {**os.environ, "JAVA_HOME": java_home, "PATH": f"{BIN}:{os.environ['PATH']}"}
    assert "Drools_jpy" in run(str(BIN / "ansible-rulebook"), "--version", env=env).stdout


def test_every_module_and_filter_documents_itself():
    """ansible-doc parses every plugin's documentation (what ansible-test sanity and
    Galaxy render)."""
    import json
    kinds = {"module": sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py")
                              if p.stem != "__init__"),
             "filter": sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.yml"))}
    for kind, names in kinds.items():
        assert names, kind
        result = run(str(BIN / "ansible-doc"), "-t", kind, "--json",
                     *[f"yasco.cluster.{n}" for n in names])
        assert "ERROR" not in result.stderr, result.stderr
        docs = json.loads(result.stdout)
        assert sorted(docs) == [f"yasco.cluster.{n}" for n in names]
        for name, doc in docs.items():
            assert doc["doc"]["short_description"], name
            assert doc["examples"], name


def test_the_event_source_documents_itself_and_every_argument_it_reads():
    """ansible-doc has no event source type, so nothing else parses its
    DOCUMENTATION: it must be valid YAML and name exactly the arguments the watcher
    it runs reads (args.get("..."), and the connection options it takes from
    _ENVIRONMENT), in plugins/module_utils/watcher/."""
    import ast
    import re
    import yaml

    def assignments(path):
        return {node.targets[0].id: node.value for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}

    path = REPO / "extensions" / "eda" / "plugins" / "event_source" / "etcd_hosts.py"
    values = assignments(path)
    doc = yaml.safe_load(values["DOCUMENTATION"].value)
    assert doc["short_description"] and doc["description"]
    watcher = sorted((REPO / "plugins" / "module_utils" / "watcher").glob("*.py"))
    read = set(re.findall(r'args(?:\.get\(|\[)"([a-z_]+)"',
                          "".join(p.read_text() for p in [path, *watcher])))
    io = REPO / "plugins" / "module_utils" / "watcher" / "watcher_io.py"
    read |= set(ast.literal_eval(assignments(io)["_ENVIRONMENT"]))
    assert sorted(doc["options"]) == sorted(read)
    for name, option in doc["options"].items():
        assert option["description"] and option.get("type"), name
    yaml.safe_load(values["EXAMPLES"].value)


def test_each_module_is_in_the_action_groups_of_the_connections_it_takes():
    """module_defaults: {group/yasco.cluster.ceph: ...} sets the Ceph options of every
    module in that group: a module is in the group of each connection doc fragment it
    extends (ceph, etcd, libvirt), and in no other, whose options it would not take."""
    import ast
    import yaml
    groups = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]
    for path in sorted((REPO / "plugins" / "modules").glob("*.py")):
        doc = next(yaml.safe_load(node.value.value) for node in ast.parse(
            path.read_text()).body if isinstance(node, ast.Assign)
            and node.targets[0].id == "DOCUMENTATION")
        takes = {name.split(".")[-1] for name in doc.get("extends_documentation_fragment", [])
                 if name.split(".")[-1] in groups}
        within = {group for group, members in groups.items() if path.stem in members}
        assert within == takes, f"{path.stem}: in {sorted(within)}, takes {sorted(takes)}"


def test_the_collection_passes_ansible_lint_production_profile_as_run_at_the_root():
    """A plain `ansible-lint` at the root, as a developer runs it: .ansible-lint holds
    the profile and what is left out."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = run(str(BIN / "ansible-lint"), env=env)
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


def test_every_role_documents_each_variable_it_takes_a_default_for():
    """meta/argument_specs.yml, which ansible-core checks each call of the role against
    and ansible-doc -t role shows, names every variable defaults/main.yml sets, with
    its type (roles/README.md says each role has one)."""
    import yaml
    roles = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/tasks/main.yml"))
    assert {"agent", "notify", "provision", "rebalance", "start_tier"} <= set(roles)
    for role in roles:
        spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml")
                              .read_text())["argument_specs"]["main"]
        assert spec["short_description"] and spec["description"], role
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml")
                                  .read_text()) or {}
        assert set(defaults) <= set(spec["options"]), (role, set(defaults) - set(spec["options"]))
        for name, option in spec["options"].items():
            assert name.startswith(f"{role}_"), (role, name)
            assert option["description"] and option.get("type"), (role, name)


def shell_scripts() -> list[str]:
    """Tracked files that are shell: by a shell's shebang, a .sh name or a directive."""
    tracked = run("git", "ls-files", "-co", "--exclude-standard").stdout.split()
    found = []
    for name in tracked:
        path = REPO / name
        if not path.is_file() or name.startswith(("collections/", "tests/output/")):
            continue
        with path.open("rb") as file:
            head = file.read(200)
        first = head.split(b"\n", 1)[0]
        if name.endswith(".sh") or b"# shellcheck shell=" in head or (
                first.startswith(b"#!") and first.split(b"/")[-1].split()[-1] in
                {b"sh", b"bash"}):
            found.append(name)
    return found


def test_every_shell_script_passes_shellcheck():
    scripts = shell_scripts()
    assert {"scripts/bootstrap", "scripts/test", "scripts/debian.sh", ".ci/run",
            "environments/apt-pkgmgr"} <= set(scripts)
    run("shellcheck", "--format", "gcc", *scripts)


def test_each_module_that_talks_to_etcd_ceph_or_libvirt_runs_in_the_controllers_process():
    """Its action plugin, through meta/runtime.yml, is ModuleOnController: what Ansible's
    own loader finds for every module, but vdm_plan (an action of its own) and
    power_fence (a plain module)."""
    script = (
        "import json, sys\n"
        "from ansible.plugins.loader import action_loader, init_plugin_loader, module_loader\n"
        "init_plugin_loader([sys.argv[1]])\n"
        "from ansible_collections.yasco.cluster.plugins.plugin_utils.controller_module"
        " import ModuleOnController\n"
        "found = {}\n"
        "for name in sys.argv[2:]:\n"
        "    module = module_loader.find_plugin_with_context('yasco.cluster.' + name)\n"
        "    action = module.action_plugin or (module.resolved_fqcn if action_loader.has_plugin("
        "module.resolved_fqcn) else None)\n"
        "    cls = action_loader.get(action, class_only=True) if action else None\n"
        "    found[name] = bool(cls and issubclass(cls, ModuleOnController))\n"
        "print(json.dumps(found))\n")
    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    result = run(str(BIN / "python"), "-c", script, str(REPO / "collections"), *modules)
    import json
    found = json.loads(result.stdout)
    assert {m for m, yes in found.items() if not yes} == {"power_fence", "vdm_plan"}
    assert len(found) == len(modules) > 20
    assert sorted(p.stem for p in (REPO / "plugins" / "action").glob("*.py")) == [
        "cluster_status", "vdm_plan"]


def test_every_test_the_threat_model_names_exists():
    """docs/security.md's threat model names, for each attack, the test that shows it is
    stopped: each file exists and defines each test named."""
    text = (REPO / "docs" / "security.md").read_text()
    table = text[text.index("## Threat model"):text.index("What follows says the same")]
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", table)
    assert len(named) >= 12, named
    for path, test in named:
        assert (REPO / path).is_file(), f"docs/security.md names {path}, which is gone"
        if test:
            assert re.search(rf"^def {test}\(", (REPO / path).read_text(), re.MULTILINE), (
                f"docs/security.md names {path}::{test}, which is gone")
