"""ansible-test passes on the collection as Galaxy users and CI would run it: sanity
with no ignore files, and units running every unit test that pytest finds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ansible_test.py"
# pytest's closing line, e.g. "==== 100 passed, 2 warnings in 18.20s (0:00:18) ===="
SUMMARY = re.compile(r"^=+ (.+) in [\d.]+s(?: \([\d:]+\))? =+$", re.MULTILINE)


def ansible_test(*args: str, timeout: float) -> str:
    """Run scripts/ansible_test.py and return its output, failing on a non-zero exit."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO,
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


def test_ansible_test_units_runs_every_unit_test_and_each_passes():
    output = ansible_test("units", "--color", "no", timeout=900)
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
def test_ansible_test_sanity_passes_with_no_ignore_files():
    ansible_test("sanity", timeout=1800)
