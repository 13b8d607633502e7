"""`make sanity`: ansible-test sanity on the collection, with no ignore files.

ansible-test wants the collection at .../ansible_collections/yasco/cluster and lists
its files with git, so the checkout's files (tracked, or new and not ignored) are
copied into such a tree first. Its sanity virtualenvs bootstrap pip from a script it
downloads from a host that may be unreachable; the interpreter's own ensurepip does the
same job, so a stand-in is cached where ansible-test looks for the script.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
STAND_IN = '''"""Installs pip with the interpreter's own ensurepip, in place of get-pip.py."""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
'''


def pip_bootstrap_stand_in() -> None:
    source = next((VENV_BIN.parent / "lib").glob(
        "python3*/site-packages/ansible_test/_internal/python_requirements.py"))
    version = re.search(r"pip='([\d.]+)'", source.read_text()).group(1)
    name = f"get_pip_{version.replace('.', '_')}.py"
    cache = Path.home() / ".ansible" / "test" / "cache" / name
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(STAND_IN)


def main() -> int:
    if (REPO / "tests" / "sanity").exists():
        print("tests/sanity/ exists: this collection keeps no sanity ignore files",
              file=sys.stderr)
        return 1
    pip_bootstrap_stand_in()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    with tempfile.TemporaryDirectory(prefix="yasco-sanity-") as scratch:
        root = Path(scratch) / "ansible_collections" / "yasco" / "cluster"
        for name in files:
            source = REPO / name
            if not name or name.startswith("collections/") or not source.is_file():
                continue
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        return subprocess.run([str(VENV_BIN / "ansible-test"), "sanity", "--python", python,
                               *sys.argv[1:]], cwd=root, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
