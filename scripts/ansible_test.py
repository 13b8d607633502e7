"""ansible-test on the collection: `sanity` with no ignore files, `units` on .venv.

    python scripts/ansible_test.py sanity|units [ansible-test options]

ansible-test wants the collection at .../ansible_collections/yasco/cluster and lists
its files with git, so the checkout's files (tracked, or new and not ignored) are
copied into such a tree first; `collections/`, the link that makes the checkout its
own collection path, is left out.

sanity: its virtualenvs bootstrap pip from a script ansible-test downloads from a host
that may be unreachable; the interpreter's own ensurepip does the same job, so a
stand-in is cached where ansible-test looks for the script.

units: --local runs pytest with this script's interpreter (.venv's) and its packages
(libvirt-python, numpy, hypothesis, ...), into which ansible-test then
installs nothing; a venv or container of ansible-test's would pip-install them from
the network.

Both use the ansible-test of the interpreter that runs this script: .venv's, or that of
a venv holding another ansible-core with .venv's packages behind it (--core).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent  # .venv/bin, or another ansible-core's venv
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
STAND_IN = '''"""Installs pip with the interpreter's own ensurepip, in place of get-pip.py."""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
'''


def collection_tree(scratch: Path) -> Path:
    """Copy the checkout into scratch/ansible_collections/yasco/cluster, a git work tree
    of its own, and return that directory."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    root = scratch / "ansible_collections" / "yasco" / "cluster"
    for name in files:
        source = REPO / name
        if not name or name.startswith("collections/") or not source.is_file():
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, root / name)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return root


def pip_bootstrap_stand_in() -> None:
    source = next((VENV_BIN.parent / "lib").glob(
        "python3*/site-packages/ansible_test/_internal/python_requirements.py"))
    version = re.search(r"pip='([\d.]+)'", source.read_text()).group(1)
    name = f"get_pip_{version.replace('.', '_')}.py"
    cache = Path.home() / ".ansible" / "test" / "cache" / name
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(STAND_IN)


def sanity(args: list[str]) -> int:
    if (REPO / "tests" / "sanity").exists():
        print("tests/sanity/ exists: this collection keeps no sanity ignore files",
              file=sys.stderr)
        return 1
    pip_bootstrap_stand_in()
    return ansible_test(["sanity", "--python", PYTHON, *args])


def units(args: list[str]) -> int:
    # ansible-test always runs pytest with -n, which only pytest-xdist understands.
    if importlib.util.find_spec("xdist") is None:
        print("units: pytest-xdist is missing from this interpreter (`make setup` "
              "installs it)", file=sys.stderr)
        return 1
    return ansible_test(["units", "--local", "--python", PYTHON,
                         "--python-interpreter", sys.executable, *args])


def ansible_test(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="yasco-ansible-test-") as scratch:
        root = collection_tree(Path(scratch))
        return subprocess.run([str(VENV_BIN / "ansible-test"), *argv], cwd=root,
                              check=False).returncode


COMMANDS = {"sanity": sanity, "units": units}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: {Path(__file__).name} {'|'.join(COMMANDS)} [ansible-test options]",
              file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
