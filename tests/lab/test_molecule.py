"""The molecule scenarios (molecule/), each run as `molecule test -s NAME` against the
lab's hypervisors: the agent role installs an agent that holds its host's lease,
provision.yml converges and changes nothing on a rerun, evacuate.yml brings an HA VM
up on its planned target after its host crashed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def test_every_scenario_is_found():
    assert SCENARIOS == ["agent", "ha", "provision"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes_on_the_lab(lab, scenario):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1", "PY_COLORS": "0"}
    done = subprocess.run([str(BIN / "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    # Each step of the scenario's sequence ran to its end (destroy has no playbook: the
    # lab's hosts stay).
    assert "Executed: Failed" not in output, output[-8000:]
    assert f"[{scenario} > verify] Executed: Successful" in output, output[-3000:]
