"""ansible-test passes on the collection as Galaxy users and CI would run it: sanity
with no ignore files, and units running every unit test that pytest finds; at both ends
of the ansible-core range meta/runtime.yml claims: the lowest it names, and the lock's,
the newest Debian 12's Python 3.11 runs (ansible-core 2.20 needs 3.12)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ansible_test.py"
# pytest's closing line, e.g. "==== 100 passed, 2 warnings in 18.20s (0:00:18) ===="
SUMMARY = re.compile(r"^=+ (.+) in [\d.]+s(?: \([\d:]+\))? =+$", re.MULTILINE)


LOWEST = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())[
    "requires_ansible"].removeprefix(">=")


@pytest.fixture(name="python", scope="module", params=["locked", "lowest"])
def fixture_python(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter scripts/ansible_test.py runs with: .venv's, whose ansible-core is
    the lock's, or a venv holding the lowest ansible-core alone, .venv's packages behind
    it (its own site-packages come first on sys.path)."""
    if request.param == "locked":
        return sys.executable
    venv = tmp_path_factory.mktemp("ansible-core-lowest")
    subprocess.run([str(Path(sys.executable).resolve()), "-m", "venv", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--quiet", "--no-deps", f"ansible-core=={LOWEST}"],
                   check=True, timeout=600)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    ours = next(p for p in sys.path if p.endswith("site-packages") and
                p.startswith(sys.prefix))
    (site / "zz-yasco-venv.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(python)


def core_version(python: str) -> str:
    return subprocess.run([python, "-c", "import ansible.release as r; print(r.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_ends_of_the_range_are_the_ones_tested(python):
    wanted = LOWEST if python != sys.executable else importlib.metadata.version("ansible-core")
    assert core_version(python) == wanted


def ansible_test(*args: str, timeout: float, python: str = sys.executable) -> str:
    """Run scripts/ansible_test.py and return its output, failing on a non-zero exit."""
    done = subprocess.run([python, str(SCRIPT), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)
    output = done.stdout + done.stderr
    # pytest's FAILED/ERROR lines first: a truncated report still names the test.
    failed = re.findall(r"^(?:FAILED|ERROR) .*$", output, re.MULTILINE)
    assert done.returncode == 0, "\n".join(failed + [output[-8000:]])
    return output


def unit_tests_pytest_collects() -> int:
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/unit", "--collect-only", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return int(re.search(r"^(\d+) tests? collected", done.stdout, re.MULTILINE).group(1))


def test_ansible_test_units_runs_every_unit_test_and_each_passes(python):
    output = ansible_test("units", "--color", "no", timeout=900, python=python)
    # One pytest run per context (modules, module_utils, controller); each must say
    # only "N passed" (warnings aside), or something was skipped, failed or xfailed.
    summaries = SUMMARY.findall(output)
    assert summaries, output[-3000:]
    passed = 0
    for summary in summaries:
        counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
        assert set(counts) <= {"passed", "warning", "warnings"}, summary
        passed += counts.get("passed", 0)
    assert passed == unit_tests_pytest_collects()


# A first run creates ansible-test's sanity virtualenvs, pip-installing pylint and the
# rest, which can take longer than pytest.ini's 600 s.
@pytest.mark.timeout(1800)
def test_ansible_test_sanity_passes_with_no_ignore_files(python):
    ansible_test("sanity", timeout=1800, python=python)
