"""The execution and decision environments as ansible-builder prepares them: the build
context `ansible-builder create` writes for execution-environment.yml and
decision-environment.yml, the collection installed from it as the image's galaxy stage
does, and the requirements the builder stage's own introspection then hands to pip and
to the package manager. Building the images themselves needs podman or docker.

Also: every third-party package a plugin imports is one the collection declares in
meta/execution-environment.yml, so an EE built from it can run every plugin."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from bindep.depends import Depends
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from .ansible_run import BIN, ROOT

DEFINITIONS = ("execution-environment.yml", "decision-environment.yml")
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
LOCK = ROOT / "requirements" / "lock.txt"
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
# Debian 12's python3 (3.11) is the one its python3-rados and python3-rbd are built for.
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
# bindep's view of that image, as assemble runs it there (`bindep -l newline`).
DEBIAN = ("default", "platform:dpkg", "platform:debian")
# Bindings the distribution builds for its python3 (rados and rbd are on no index at all).
DISTRO_BINDINGS = {"libvirt": "python3-libvirt", "libvirt_qemu": "python3-libvirt",
                   "rados": "python3-rados", "rbd": "python3-rbd"}
OURS = f"ansible_collections.{GALAXY['namespace']}.{GALAXY['name']}."
# ansible-core, in every image, brings these along (PyYAML, cryptography, Jinja2, ...).
ANSIBLE_CORE_DEPENDENCIES = {canonicalize_name(Requirement(r).name)
                             for r in importlib.metadata.requires("ansible-core") or ()}


@dataclass
class BuildContext:
    """One `ansible-builder create` output and what its builder stage would install."""
    containerfile: str
    build: Path  # _build, the image's /build
    collections: Path  # the collection installed from it, as the galaxy stage does
    python: list[str]  # combined pip requirements, as assemble gets them
    debian_packages: set[str]  # the combined bindep file, resolved for Debian


def requirement_lines(text: str) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def debian_packages(bindep_text: str) -> set[str]:
    return {rule[0] for rule in Depends(bindep_text).active_rules(DEBIAN)}


def run(*command, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(name="workspace", scope="module")
def fixture_workspace(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The definitions and the files they copy, beside a collection tarball built from
    this checkout, as an operator has them before `ansible-builder build`."""
    root = tmp_path_factory.mktemp("environments")
    source = root / "source"
    source.mkdir()
    for definition in DEFINITIONS:
        shutil.copy(ROOT / definition, source)
    shutil.copytree(ROOT / "environments", source / "environments")
    (source / "requirements").mkdir()
    shutil.copy(LOCK, source / "requirements")
    (root / "ansible.cfg").write_text("[defaults]\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONFIG": str(root / "ansible.cfg")}
    run("ansible-galaxy", "collection", "build", "--output-path", source, ROOT,
        cwd=root, env=env)
    assert (source / TARBALL).exists()
    return {"root": root, "source": source, "env": env}


def create(workspace: dict, definition: str) -> BuildContext:
    """`ansible-builder create` for one definition, then what its image build does that
    needs no container: the galaxy stage's install of our collection, and the builder
    stage's introspection on it, whose output assemble hands to pip and apt."""
    root, env = workspace["root"], workspace["env"]
    context = root / Path(definition).stem
    run("ansible-builder", "create", "-f", workspace["source"] / definition, "-c", context,
        "--output-filename", "Containerfile", cwd=root, env=env)
    containerfile = (context / "Containerfile").read_text()
    build = context / "_build"

    # The galaxy stage: our collection from the tarball in the context, in /build.
    wanted = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    files = [c["name"] for c in wanted if c.get("type") == "file"]
    assert files == [f"collections/{TARBALL}"], "the tarball named does not follow galaxy.yml"
    collections = context / "collections"
    run("ansible-galaxy", "collection", "install", "--offline", "-p", collections, *files,
        cwd=build, env=env)

    # The builder stage: its own introspection command, on that collection.
    (line,) = [s for s in containerfile.splitlines() if "introspect.py introspect" in s]
    arguments = shlex.split(line)[4:]
    assert arguments[-2:] == ["--write-bindep=/tmp/src/bindep.txt",
                              "--write-pip=/tmp/src/requirements.txt"]
    out = context / "introspected"  # the image's /tmp/src
    arguments = [a.replace("/tmp/src/", f"{out}/") for a in arguments]
    run(sys.executable, build / "scripts" / "introspect.py", "introspect", *arguments,
        collections, cwd=build, env=env)
    python = out / "requirements.txt"
    return BuildContext(
        containerfile=containerfile, build=build, collections=collections,
        python=requirement_lines(python.read_text()) if python.exists() else [],
        debian_packages=debian_packages((out / "bindep.txt").read_text()))


@pytest.fixture(name="ee", scope="module")
def fixture_ee(workspace: dict) -> BuildContext:
    return create(workspace, "execution-environment.yml")


@pytest.fixture(name="de", scope="module")
def fixture_de(workspace: dict) -> BuildContext:
    return create(workspace, "decision-environment.yml")


def imports(path: Path) -> set[str]:
    """Absolute imports of a file, as dotted names; `from a import b` gives a and a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def third_party_imports(files: list[Path], follow_ours: bool = False) -> set[str]:
    """Top-level names of what the files import from outside the standard library,
    Ansible and this collection; with follow_ours, also what the collection's own
    modules they import do, and so on."""
    seen: set[Path] = set()
    todo = list(files)
    found = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imports(path):
            top = name.split(".")[0]
            if name.startswith(OURS):
                module = ROOT / (name[len(OURS):].replace(".", "/") + ".py")
                if follow_ours and module.exists():
                    todo.append(module)
            elif top == "ansible_collections":
                found.add(".".join(name.split(".")[:3]))  # another collection
            elif top not in sys.stdlib_module_names and top != "ansible":
                found.add(top)
    return found


def uncovered(imported: set[str], requirements: list[str], packages: set[str]) -> list[str]:
    """The imported names that neither the pip requirements (with what ansible-core
    brings) nor the Debian packages provide."""
    provided = names(requirements) | ANSIBLE_CORE_DEPENDENCIES
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for name in sorted(imported):
        if name in DISTRO_BINDINGS:
            covered = DISTRO_BINDINGS[name] in packages
        else:
            covered = any(canonicalize_name(d) in provided for d in distributions.get(name, ()))
        if not covered:
            missing.append(name)
    return missing


def declared() -> tuple[list[str], set[str]]:
    """The collection's own declaration: meta/execution-environment.yml's two files."""
    meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    deps = meta["dependencies"]
    return (requirement_lines((ROOT / deps["python"]).read_text()),
            debian_packages((ROOT / deps["system"]).read_text()))


def test_every_third_party_import_of_the_plugins_is_declared_for_an_ee():
    files = [p for d in ("plugins", "extensions/eda/plugins/event_source")
             for p in sorted((ROOT / d).rglob("*.py"))]
    imported = third_party_imports(files)
    assert {"etcd3gw", "numpy", "rados", "rbd", "libvirt"} <= imported  # the walk sees them
    requirements, packages = declared()
    assert uncovered(imported, requirements, packages) == []


def test_the_versions_the_tests_run_are_inside_the_ee_ranges():
    requirements = declared()[0]
    for line in requirements:
        requirement = Requirement(line)
        tested = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(tested, prereleases=True), (line, tested)
    for definition in DEFINITIONS:
        deps = yaml.safe_load((ROOT / definition).read_text())["dependencies"]
        for line in [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"],
                     *deps.get("python", [])]:
            requirement = Requirement(line)
            tested = importlib.metadata.version(requirement.name)
            assert requirement.specifier.contains(tested), (definition, line, tested)
    # Galaxy collections: the ones the ansible package bundles are the ones tested.
    wanted = yaml.safe_load((ROOT / DEFINITIONS[0]).read_text())["dependencies"]["galaxy"]
    for collection in wanted["collections"]:
        if collection.get("type") == "file":
            continue
        namespace, name = collection["name"].split(".")
        manifest = importlib.metadata.distribution("ansible").locate_file(
            f"ansible_collections/{namespace}/{name}/MANIFEST.json")
        tested = json.loads(Path(manifest).read_text())["collection_info"]["version"]
        assert SpecifierSet(collection["version"]).contains(tested), (collection, tested)


def test_galaxy_yml_the_ee_and_the_requirements_file_declare_the_same_collections():
    """One statement of the collections YASCO needs, and the ansible-core it runs on:
    the one installed here, where every test ran."""
    declared_in = {
        "galaxy.yml": GALAXY["dependencies"],
        "collections/requirements.yml": {
            c["name"]: c["version"] for c in yaml.safe_load(
                (ROOT / "collections" / "requirements.yml").read_text())["collections"]},
        DEFINITIONS[0]: {
            c["name"]: c["version"] for c in yaml.safe_load(
                (ROOT / DEFINITIONS[0]).read_text())["dependencies"]["galaxy"]["collections"]
            if c.get("type") != "file"}}
    assert declared_in["galaxy.yml"], "galaxy.yml declares no dependency"
    assert all(d == declared_in["galaxy.yml"] for d in declared_in.values()), declared_in
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    core = importlib.metadata.version("ansible-core")
    assert SpecifierSet(runtime["requires_ansible"]).contains(core), (runtime, core)
    # Nothing claims an older one than meta/runtime.yml does.
    lowest = runtime["requires_ansible"].removeprefix(">=").rsplit(".", 1)[0]
    for meta in sorted((ROOT / "roles").glob("*/meta/main.yml")):
        info = yaml.safe_load(meta.read_text())["galaxy_info"]
        assert str(info["min_ansible_version"]) == lowest, meta


def test_ansible_builder_introspection_finds_what_the_installed_collection_declares(
        ee, workspace):
    out = workspace["root"] / "collection-needs"
    run("ansible-builder", "introspect", "--sanitize", ee.collections,
        "--write-pip", out / "requirements.txt", "--write-bindep", out / "bindep.txt",
        cwd=workspace["root"], env=workspace["env"])
    python = (out / "requirements.txt").read_text().splitlines()
    assert all(line.endswith("# from collection yasco.cluster") for line in python)
    assert {"etcd3gw", "numpy", "jmespath", "pycdlib"} <= names(requirement_lines(
        "\n".join(python)))
    assert {"python3-rados", "python3-rbd", "python3-libvirt", "ceph-common"} <= \
        debian_packages((out / "bindep.txt").read_text())


def base_stage(containerfile: str) -> list[str]:
    lines = containerfile.splitlines()
    assert f'ARG EE_BASE_IMAGE="{BASE_IMAGE}"' in lines
    return lines[:lines.index("# Galaxy build stage")]


def test_the_ee_is_debian_with_apt_behind_ansible_builders_package_manager(ee):
    base = base_stage(ee.containerfile)
    assert 'ARG PYCMD="/usr/bin/python3"' in base  # Debian's own, not a venv or a build
    (pkgmgr,) = [s.split('"')[1] for s in base if s.startswith("ARG PKGMGR=")]
    copy = base.index(f"COPY _build/environments/apt-pkgmgr {pkgmgr}")
    assert copy < min(i for i, s in enumerate(base) if "$PKGMGR install" in s)
    assert os.access(ee.build / "environments" / "apt-pkgmgr", os.X_OK)
    # ensurepip is off in Debian's python3: pip comes from python3-pip instead.
    assert "pip_install" not in ee.containerfile
    assert 'ARG PYPKG="python3 python3-pip"' in base
    refs = next(s for s in base if s.startswith("ARG ANSIBLE_INSTALL_REFS="))
    assert "ansible-core>=2.19" in refs and "ansible-runner" in refs
    # Debian's python3 is externally managed (PEP 668): pip installs beside it only when
    # told to (ansible-builder does), and must be before its first install.
    assert base.index("ENV PIP_BREAK_SYSTEM_PACKAGES=1") < base.index(
        "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS")


def test_the_ee_installs_the_collection_and_what_its_modules_import(ee):
    assert "ansible-galaxy collection install" in ee.containerfile
    wanted = yaml.safe_load((ee.build / "requirements.yml").read_text())["collections"]
    assert "community.general" in [c["name"] for c in wanted]  # dict_kv in roles/provision
    assert {"etcd3gw", "requests", "urllib3", "jmespath", "numpy", "pycdlib"} <= \
        names(ee.python)
    # libvirt's binding comes built from Debian: no compiler in the builder stage for it.
    assert "libvirt-python" not in names(ee.python)
    assert {"python3-rados", "python3-rbd", "ceph-common", "python3-libvirt", "libvirt0",
            "openssh-client"} <= ee.debian_packages


def test_the_de_runs_ansible_rulebook_on_java_17(de):
    base_stage(de.containerfile)
    final = de.containerfile.split("# Final build stage")[1].splitlines()
    assert "ENV JAVA_HOME=/usr/lib/jvm/java-17" in final
    assert any(s.startswith("RUN ln -s") and s.endswith(" /usr/lib/jvm/java-17")
               for s in final)
    assert "openjdk-17-jre-headless" in de.debian_packages
    assert "ansible-rulebook" in names(de.python)
    assert "ansible-galaxy collection install" in de.containerfile


def test_the_de_has_what_the_event_source_imports_and_no_ceph_or_libvirt(de):
    source = ROOT / "extensions/eda/plugins/event_source/etcd_hosts.py"
    imported = third_party_imports([source], follow_ours=True)
    assert "etcd3gw" in imported
    assert uncovered(imported, de.python, de.debian_packages) == []
    assert not {"python3-rados", "python3-rbd", "ceph-common", "python3-libvirt",
                "libvirt0"} & de.debian_packages


def locked() -> dict[str, str]:
    """requirements/lock.txt: each package's exact version."""
    pins = {}
    for line in requirement_lines(LOCK.read_text()):
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", line
        pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def test_the_lock_pins_every_requirement_inside_its_range_and_is_what_the_tests_run():
    pins = locked()
    ranges = [line for name in ("controller", "test", "lab")
              for line in requirement_lines((ROOT / "requirements" / f"{name}.in").read_text())]
    for line in ranges:
        requirement = Requirement(line)
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{line}: not in requirements/lock.txt; run make lock"
        assert requirement.specifier.contains(pin, prereleases=True), (
            f"{line}: locked at {pin}; run make lock")
    # `make setup` holds every install to the lock: what runs here is what it says.
    for name, pin in pins.items():
        assert importlib.metadata.version(name) == pin, (name, pin)
    assert requirement_lines((ROOT / "requirements.txt").read_text())[0] == \
        "-c requirements/lock.txt"


@pytest.mark.parametrize("kind", ["ee", "de"])
def test_every_pip_install_of_the_images_is_held_to_the_lock(kind, request):
    context: BuildContext = request.getfixturevalue(kind)
    lines = context.containerfile.splitlines()
    # Set in the base stage, before its first pip install; the builder and final
    # stages are built from it, and pip reads PIP_CONSTRAINT wherever it runs.
    constraint = lines.index("ENV PIP_CONSTRAINT=/etc/yasco/lock.txt")
    copy = lines.index("COPY _build/environments/lock.txt /etc/yasco/lock.txt")
    first_pip = min(i for i, s in enumerate(lines) if "pip install" in s)
    assert copy < constraint < first_pip < lines.index("# Galaxy build stage")
    assert (context.build / "environments" / "lock.txt").read_text() == LOCK.read_text()
    # Each thing it installs with pip is locked, at a version its range accepts: the
    # constraint can be met, and it is what the tests ran.
    pins = locked()
    deps = yaml.safe_load((ROOT / f"{'execution' if kind == 'ee' else 'decision'}"
                           "-environment.yml").read_text())["dependencies"]
    wanted = [*context.python, deps["ansible_core"]["package_pip"],
              deps["ansible_runner"]["package_pip"], *deps.get("python", [])]
    for line in wanted:
        requirement = Requirement(line)
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None and requirement.specifier.contains(pin), (kind, line, pin)
