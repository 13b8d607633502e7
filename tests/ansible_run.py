"""Run ansible-playbook as an operator does and read back what each task returned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_playbook(playbook: Path | str | list, inventory: str = "localhost,",
                 *args: str, extra_vars: dict | None = None, tmp_path: Path | None = None,
                 timeout: float = 300, controller: Path | None = None
                 ) -> tuple[int, list[dict]]:
    """Run a playbook (a path, a collection's playbook by name, or plays as data
    written to `tmp_path`) and return its exit code and the tasks' results in order,
    one per task and host (the host's name under `_host`, the task's under `_task`).
    With `controller`, a controller installed by scripts/controller there runs it,
    with its own venv and collections and nothing of this checkout."""
    if isinstance(playbook, list):
        path = Path(tmp_path) / "play.yml"
        path.write_text(yaml.safe_dump(playbook, sort_keys=False))
        playbook = path
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1"}
    binary = BIN / "ansible-playbook"
    if controller is not None:
        binary = controller / "venv" / "bin" / "ansible-playbook"
        del env["ANSIBLE_CONFIG"]  # none in its directory: Ansible's defaults
        env.update(ANSIBLE_COLLECTIONS_PATH=str(controller / "collections"),
                   PATH=f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    command = [str(binary), "-i", inventory, str(playbook), *args]
    if extra_vars:
        command += ["-e", json.dumps(extra_vars)]
    with subprocess.Popen(command, cwd=ROOT if controller is None else controller, env=env,
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as run:
        try:
            stdout, stderr = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # What it was still doing: the hung task's own processes (an SSH command,
            # a module) name it; the JSON report comes only at the end.
            hung = _descendants(run.pid)
            for pid, dummy in hung:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            run.communicate()
            raise AssertionError(
                f"{Path(playbook).name} did not end within {timeout} s; its processes "
                "then:\n" + "\n".join(line[:2000] for pid, line in hung[1:])) from None
    output = stdout + stderr
    assert "Traceback" not in output, output
    report = json.loads(stdout)
    results = []
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                results.append({**result, "_host": host, "_task": task["task"]["name"]})
    return run.returncode, results


def _descendants(root: int) -> list[tuple[int, str]]:
    """Process `root` and all its descendants (ansible's workers start sessions of
    their own), each with its elapsed seconds and command line."""
    listing = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,etimes=,args="],
                             capture_output=True, text=True, check=False).stdout
    rows = [line.split(None, 3) for line in listing.splitlines()]
    children: dict[int, list[tuple[int, str]]] = {}
    for row in rows:
        if len(row) == 4:
            children.setdefault(int(row[1]), []).append((int(row[0]), f"{row[2]:>6} s  {row[3]}"))
    out, todo = [], [(root, "")]
    while todo:
        pid, line = todo.pop()
        out.append((pid, line))
        todo += children.get(pid, [])
    return out


def local_play(*tasks: dict, check: bool = False, **play) -> list[dict]:
    """One play on the controller running `tasks`, with the venv's Python."""
    return [{"name": "test", "hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_connection": "local",
                      "ansible_python_interpreter": sys.executable},
             **({"check_mode": True} if check else {}), **play, "tasks": list(tasks)}]
