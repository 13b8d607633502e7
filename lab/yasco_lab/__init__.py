"""yasco-lab: a real YASCO cluster on one machine.

etcd, Ceph (memstore OSD) and libvirtd + QEMU hypervisors, each hypervisor in its
own network, mount, PID and UTS namespaces on a private bridge, reached over SSH
exactly like production hosts. The lab is both the project's test bed and the
default cluster for `make demo`.
"""

import sys
from pathlib import Path

# The lab runs YASCO's own code from this checkout (the agent, the etcd roles), as
# ansible.cfg has Ansible find the collection here.
_COLLECTIONS = str(Path(__file__).resolve().parents[2] / "collections")
if _COLLECTIONS not in sys.path:
    sys.path.append(_COLLECTIONS)
