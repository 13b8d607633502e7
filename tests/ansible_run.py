"""Run ansible-playbook as an operator does and read back what each task returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_playbook(playbook: Path | str | list, inventory: str = "localhost,",
                 *args: str, extra_vars: dict | None = None, tmp_path: Path | None = None,
                 timeout: float = 300) -> tuple[int, list[dict]]:
    """Run a playbook (a path, or plays as data written to `tmp_path`) and return its
    exit code and the tasks' results in order, one per task and host (the host's
    name under `_host`)."""
    if isinstance(playbook, list):
        path = Path(tmp_path) / "play.yml"
        path.write_text(yaml.safe_dump(playbook, sort_keys=False))
        playbook = path
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1"}
    command = [str(BIN / "ansible-playbook"), "-i", inventory, str(playbook), *args]
    if extra_vars:
        command += ["-e", json.dumps(extra_vars)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    report = json.loads(done.stdout)
    results = []
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                results.append({**result, "_host": host})
    return done.returncode, results


def local_play(*tasks: dict, check: bool = False, **play) -> list[dict]:
    """One play on the controller running `tasks`, with the venv's Python."""
    return [{"name": "test", "hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_connection": "local",
                      "ansible_python_interpreter": sys.executable},
             **({"check_mode": True} if check else {}), **play, "tasks": list(tasks)}]
