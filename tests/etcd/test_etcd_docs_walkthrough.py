"""docs/modules/etcd.md's "Trying them", run as written from the repository root: its
throwaway etcd, the ad-hoc module calls, the compare-and-swap playbook it saves as
/tmp/move-web1.yml, the lookup and the inventory plugin."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE)

from ..ansible_run import BIN, ROOT

DOC = ROOT / "docs" / "modules" / "etcd.md"
SCRATCH = (Path("/tmp/yasco-etcd-demo"), Path("/tmp/yasco-etcd-demo.log"),
           Path("/tmp/move-web1.yml"), Path("/tmp/demo.etcd.yml"))


def walkthrough() -> tuple[str, str]:
    """The section's shell lines, in order, and the playbook it saves."""
    text = DOC.read_text()
    section = text[text.index("## Trying them"):]
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", section, flags=re.S))
    playbook = re.search(r"saved as `/tmp/move-web1.yml`:\n\n```yaml\n(.*?)```", section,
                         flags=re.S).group(1)
    return shell, playbook


def remove_scratch() -> None:
    for path in SCRATCH:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def test_the_walkthrough_runs_as_written():
    shell, playbook = walkthrough()
    remove_scratch()
    Path("/tmp/move-web1.yml").write_text(playbook)
    # The doc's etcd runs in the background (&) until the doc's own `kill %1`.
    script = ("set -e\n" + shell.replace(
        "export YASCO_ETCD_ENDPOINTS", "sleep 3\nexport YASCO_ETCD_ENDPOINTS", 1)
        + "\nkill %1; rm -rf /tmp/yasco-etcd-demo\n")
    # Without the tests' lab-only switch: the doc's own export must turn it on.
    env = {**{name: value for name, value in os.environ.items() if name != ALLOW_INSECURE},
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    try:
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
    finally:
        subprocess.run(["pkill", "-f", "--", "--data-dir /tmp/yasco-etcd-demo"], check=False)
        remove_scratch()
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "localhost | CHANGED" in out and '"exists": true' in out
    assert '"host": "hv2"' in out or '\\"host\\":\\"hv2\\"' in out  # the move happened
    assert "not fenced" in out
    assert re.search(r"@yasco_hypervisors_alive:\n[ |]+--hv2\n", out), out[-2000:]
    assert re.search(r"@yasco_hypervisors_failed:\n[ |]+--hv1\n", out), out[-2000:]
    assert re.search(r"@yasco_running_on_hv2:\n[ |]+--web1\n", out), out[-2000:]
