"""The lab's verbs: up, down, status, crash, boot, partition and heal."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import (bmc, canary, ceph, credentials, etcd, hypervisor, inventory, network,
               node, prometheus, sshkeys)
from .errors import LabError
from .layout import (BRIDGE, CEPH_POOL, CEPH_SECRET_UUID, MAX_HOSTS, PREFIX_LEN, HostLayout, ceph_address,
                     ceph_admin_keyring_path, ceph_conf_path, canary_dir, ceph_dir,
                     controller_address,
                     host_names, inventory_dir, pki_dir, ssh_key_path, state_dir,
                     state_file, veth_name)

CEPH_NODE = "ceph"
Log = Callable[[str], None]
REQUIRED_COMMANDS = {
    "etcd": "etcd-server", "ceph-mon": "ceph-mon", "ceph-osd": "ceph-osd",
    "ceph": "ceph-common", "rbd": "ceph-common", "libvirtd": "libvirt-daemon",
    "virsh": "libvirt-clients", "qemu-system-x86_64": "qemu-system-x86",
    "sshd": "openssh-server", "ssh-keygen": "openssh-client", "unshare": "util-linux",
    "nsenter": "util-linux", "ip": "iproute2",
}


@dataclass
class LabState:
    """What `up` made, saved so that later verbs (and later processes) find it."""

    hosts: list[str]
    virt_type: str
    ceph_fsid: str
    canary: dict[str, str]
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    partitioned: list[str] = field(default_factory=list)
    # Hosts cut off from Ceph alone (`partition HOST --from ceph`): etcd still answers.
    cut_from_ceph: list[str] = field(default_factory=list)
    # Hosts cut off from the other hosts (`partition HOST --from etcd`): from every
    # other etcd member, so from etcd's quorum; Ceph and the controller still answer.
    cut_from_etcd: list[str] = field(default_factory=list)
    # False until `up` has finished: an interrupted `up` is stale, not a running lab.
    complete: bool = False

    def save(self) -> None:
        tmp = state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(state_file())

    @classmethod
    def load(cls) -> LabState | None:
        try:
            return cls(**json.loads(state_file().read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def node(self, name: str) -> node.Node | None:
        pids = self.nodes.get(name)
        return node.Node(name, pids["unshare_pid"], pids["init_pid"]) if pids else None

    def remember(self, n: node.Node) -> None:
        self.nodes[n.name] = {"unshare_pid": n.unshare_pid, "init_pid": n.init_pid}

    def layouts(self) -> list[HostLayout]:
        return [HostLayout(name) for name in self.hosts]


@contextmanager
def _locked() -> Iterator[None]:
    """One lab verb at a time: two concurrent `up`s would fight over the bridge."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise LabError("another yasco-lab command is running; wait for it to finish") \
                from err
        yield


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, bridges, mounts): run as root")


def preflight() -> None:
    require_root()
    missing = sorted({pkg for cmd, pkg in REQUIRED_COMMANDS.items()
                      if shutil.which(cmd) is None and not Path("/usr/sbin", cmd).exists()})
    if missing:
        raise LabError(f"missing packages: {' '.join(missing)}; run `make setup` "
                       "(or apt-get install them)")
    try:
        pwd.getpwnam("libvirt-qemu")
    except KeyError:
        raise LabError("libvirtd needs the user libvirt-qemu: run `make setup`") from None


def _running_state() -> LabState | None:
    state = LabState.load()
    if state is None or not state.complete or not network.link_exists(BRIDGE):
        return None
    ceph_node = state.node(CEPH_NODE)
    return state if ceph_node is not None and ceph_node.alive() else None


def _require_up() -> LabState:
    state = _running_state()
    if state is None:
        raise LabError("the lab is not up: run `yasco-lab up`")
    return state


def _check_host(state: LabState, name: str) -> HostLayout:
    if name not in state.hosts:
        raise LabError(f"unknown host {name!r}: the lab's hosts are {', '.join(state.hosts)}")
    return HostLayout(name)


def _teardown(state: LabState | None) -> None:
    """Kill every lab node (known or stale), then remove links and the bridge."""
    pids = [pid for pid, dummy in node.find_stale()]
    if state is not None:
        for name in state.nodes:
            n = state.node(name)
            if n is not None and n.alive():
                pids += [n.init_pid, n.unshare_pid]
    bmc.stop()
    node.kill_pids(sorted(set(pids)))
    for name in [CEPH_NODE, prometheus.NODE] + host_names(MAX_HOSTS):
        network.delete_link(veth_name(name))
    network.delete_bridge()


def up(count: int, log: Log = print) -> LabState:
    if not 1 <= count <= MAX_HOSTS:
        raise LabError(f"--hosts must be between 1 and {MAX_HOSTS}, not {count}")
    preflight()
    with _locked():
        running = _running_state()
        if running is not None:
            raise LabError(f"the lab is already up with {', '.join(running.hosts)}; "
                           "run `yasco-lab down` first")
        started = time.monotonic()
        _teardown(LabState.load())  # a failed `up` or a crashed controller left this behind
        for stale in (state_dir() / "hosts", ceph_dir(), pki_dir(), state_file()):
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        hosts = [HostLayout(name) for name in host_names(count)]
        try:
            state = _bring_up(hosts, log)
        except BaseException:
            _teardown(LabState.load())
            raise
        log(f"lab up in {time.monotonic() - started:.0f} s")
        return state


def _bring_up(hosts: list[HostLayout], log: Log) -> LabState:
    network.create_bridge()
    log("building the canary guest")
    try:
        image = canary.build(canary_dir())
    except canary.CanaryBuildError as err:
        raise LabError(str(err)) from None
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The KVM probe may take its whole timeout on a machine where KVM hangs:
        # overlap it with the cluster's bootstrap.
        probe = pool.submit(_virt_type, image)
        sshkeys.ensure_keys(hosts)
        credentials.make(hosts, etcd.users(hosts))
        log("starting Ceph (monitor and memstore OSD)")
        ceph_node = node.spawn(CEPH_NODE, ceph_dir() / "node.log")
        state = LabState(hosts=[h.name for h in hosts], virt_type="", ceph_fsid="",
                         canary={"kernel": str(image.kernel), "initrd": str(image.initrd),
                                 "cmdline": image.cmdline})
        state.remember(ceph_node)
        state.save()
        node.attach(ceph_node, veth_name(CEPH_NODE), ceph_address(), PREFIX_LEN, CEPH_NODE)
        state.ceph_fsid = ceph.CephBootstrap(ceph_node, hosts).run()
        log(f"starting hypervisors {', '.join(h.name for h in hosts)} "
            "(etcd member, libvirtd, sshd)")
        nodes = {}
        for host in hosts:
            nodes[host.name] = _start_host(host, hosts, state, agent=False)
        etcd.wait_healthy(hosts, timeout=60)
        etcd.enable_access(hosts)
        # Only now: every client of YASCO, the agents among them, refuses an etcd
        # whose authentication is off, and an agent that cannot register self-fences.
        for host in hosts:
            hypervisor.start_agent(nodes[host.name], host, hosts)
        for host in hosts:
            hypervisor.wait_ready(nodes[host.name], host, timeout=60)
        log(f"starting the hosts' BMCs (IPMI at {controller_address()}, ports "
            f"{bmc.port(hosts[0].name)}-{bmc.port(hosts[-1].name)})")
        bmc.spawn([h.name for h in hosts])
        if prometheus.installed():
            log(f"starting Prometheus at {prometheus.url()} (the agents' and the HA "
                "watcher's metrics, the collection's alerting rules)")
            metrics = prometheus.spawn(hosts)
            state.remember(metrics)
            state.save()
            node.attach(metrics, veth_name(prometheus.NODE), prometheus.address(), PREFIX_LEN,
                        prometheus.NODE)
            prometheus.run(metrics)
        else:
            log("Prometheus is not installed (make setup installs it): no metrics scraped")
        state.virt_type = probe.result()
    state.complete = True
    state.save()
    inventory.write(hosts, state.virt_type, state.canary)
    log(f"inventory written to {inventory_dir()}")
    return state


def _virt_type(image: canary.CanaryImage) -> str:
    """KVM if a guest really boots under it here, else TCG; probed once per machine setup.

    The probe costs its whole timeout where KVM hangs, so its answer is kept, keyed
    by what could change it: the machine's kernel, the QEMU binary and the canary.
    YASCO_LAB_VIRT_TYPE=kvm|qemu overrides it.
    """
    forced = os.environ.get("YASCO_LAB_VIRT_TYPE")
    if forced:
        if forced not in ("kvm", "qemu"):
            raise LabError(f"YASCO_LAB_VIRT_TYPE must be kvm or qemu, not {forced!r}")
        return forced
    qemu = Path(shutil.which("qemu-system-x86_64") or "qemu-system-x86_64")
    stat = qemu.stat()
    key = [os.uname().release, stat.st_size, stat.st_mtime, image.initrd.stat().st_mtime]
    cache = canary_dir() / "virt-type.json"
    try:
        cached = json.loads(cache.read_text())
        if cached["key"] == key:
            return cached["virt_type"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    virt_type = canary.probe_virt_type(image, timeout=20)
    cache.write_text(json.dumps({"key": key, "virt_type": virt_type}))
    return virt_type


def _start_host(host: HostLayout, cluster: list[HostLayout], state: LabState,
                agent: bool = True) -> node.Node:
    """Power a hypervisor on: a new node, its link, its mounts and its services, its
    agent among them unless `agent` is False."""
    if not (host.root / "sshd_config").exists():
        hypervisor.prepare(host, state.ceph_fsid)
    n = node.spawn(host.name, host.run / "node.log")
    state.remember(n)
    state.save()
    node.attach(n, host.veth, host.address, PREFIX_LEN, host.name)
    hypervisor.boot(n, host, cluster, agent=agent)
    return n


def down(log: Log = print) -> None:
    preflight()
    with _locked():
        state = LabState.load()
        if state is None and not node.find_stale() and not network.link_exists(BRIDGE):
            raise LabError("the lab is not up: nothing to take down")
        _teardown(state)
        state_file().unlink(missing_ok=True)
        inventory.remove()
        log("lab down")


@contextmanager
def _host_verb(name: str, running: bool) -> Iterator[tuple[LabState, HostLayout, node.Node]]:
    """The frame of every host verb: one at a time, on a lab that is up, on one of its
    hosts that is powered on (`running`) or off; the state is saved afterwards."""
    with _locked():
        state = _require_up()
        host = _check_host(state, name)
        n = state.node(name)
        alive = n is not None and n.alive()
        if running and not alive:
            raise LabError(f"{name} is down: `yasco-lab boot {name}` starts it")
        if not running and alive:
            raise LabError(f"{name} is running: `yasco-lab crash {name}` first")
        yield state, host, n
        state.save()


def is_powered(name: str) -> bool:
    """Whether host `name` is on (running or partitioned); takes no lock."""
    state = LabState.load()
    n = state.node(name) if state is not None else None
    return n is not None and n.alive()


def crash(name: str) -> None:
    """Power loss: every process of the host dies at once, nothing is cleaned up."""
    with _host_verb(name, running=True) as (state, dummy, n):
        n.kill()
        # Its network namespace, routes included, goes with it.
        for cut in (state.partitioned, state.cut_from_ceph, state.cut_from_etcd):
            if name in cut:
                cut.remove(name)


def boot(name: str, timeout: float = 60) -> None:
    """Start a crashed host again like a reboot: same disk, fresh /run, no VM autostarts."""
    with _host_verb(name, running=False) as (state, host, dummy):
        new = _start_host(host, state.layouts(), state)
        etcd.wait_healthy([host], timeout=timeout)
        hypervisor.wait_ready(new, host, timeout=timeout)


def reboot(name: str, timeout: float = 60) -> None:
    """A clean reboot, as systemd does one: the agent stops first (told it is a
    reboot), the guests still running go down, the host restarts."""
    with _host_verb(name, running=True) as (state, host, n):
        _go_down(n, host, "reboot")
        new = _start_host(host, state.layouts(), state)
        etcd.wait_healthy([host], timeout=timeout)
        hypervisor.wait_ready(new, host, timeout=timeout)


def shutdown(name: str) -> None:
    """A clean poweroff, as systemd does one: the agent stops first (told it is a
    poweroff), the guests still running go down, the host is off (boot starts it)."""
    with _host_verb(name, running=True) as (dummy, host, n):
        _go_down(n, host, "poweroff")


def _go_down(n: node.Node, host: HostLayout, intent: str) -> None:
    # What systemd's shutdown does, in its order: the agent's unit stops before
    # libvirt-guests', which shuts down every guest (the canaries ignore ACPI, so as
    # at the end of its timeout they are powered off); then the machine goes.
    n.run("sh", "-ec", f"mkdir -p /run/yasco-agent && echo {intent} > "
                       "/run/yasco-agent/shutdown")
    # As long as systemd's TimeoutStopSec would let a stop take: with shutdown_policy
    # migrate, the VMs' live migrations away first.
    n.run("sh", "-ec", hypervisor.agent_service_commands(host)["stop"], timeout=300)
    n.run("sh", "-ec", "for d in $(virsh -c qemu:///system list --name); do "
                       "virsh -c qemu:///system destroy \"$d\"; done", timeout=60)
    n.kill()


PARTITIONS = ("all", "ceph", "etcd")


def _blackholes(state: LabState, name: str, only: str) -> list[str]:
    """The addresses a partition `only` drops what the host sends to."""
    if only == "ceph":
        return [f"{ceph_address()}/32"]
    return [f"{h.address}/32" for h in state.layouts() if h.name != name]


def partition(name: str, only: str = "all") -> None:
    """Cut the host's network (`all`), or only its way to Ceph's monitors and OSDs
    (`ceph`) or to the other hosts, every other etcd member among them (`etcd`): routes
    in the host's namespace that drop what it sends there, as a switch or firewall
    fault on one network would; everything on it keeps running."""
    if only not in PARTITIONS:
        raise LabError(f"partition {name} from {only!r}: choose one of "
                       f"{', '.join(PARTITIONS)}")
    with _host_verb(name, running=True) as (state, host, n):
        if name in state.partitioned + state.cut_from_ceph + state.cut_from_etcd:
            raise LabError(f"{name} is already partitioned: `yasco-lab heal {name}` first")
        if only == "all":
            network.set_link(host.veth, up=False)
            state.partitioned.append(name)
            return
        for address in _blackholes(state, name, only):
            n.run("ip", "route", "add", "blackhole", address)
        (state.cut_from_ceph if only == "ceph" else state.cut_from_etcd).append(name)


def heal(name: str) -> None:
    """Undo `partition`, whichever it was."""
    with _host_verb(name, running=True) as (state, host, n):
        for only, cut in (("ceph", state.cut_from_ceph), ("etcd", state.cut_from_etcd)):
            if name in cut:
                for address in _blackholes(state, name, only):
                    n.run("ip", "route", "del", "blackhole", address)
                cut.remove(name)
                return
        if name in state.partitioned:
            network.set_link(host.veth, up=True)
            state.partitioned.remove(name)
        else:
            raise LabError(f"{name} is not partitioned")


def status() -> dict:
    """Machine-readable state of the lab (what `status --json` prints)."""
    state = _running_state()
    if state is None:
        return {"up": False}
    hosts = []
    for layout in state.layouts():
        n = state.node(layout.name)
        running = n is not None and n.alive()
        hosts.append({
            "name": layout.name,
            "address": layout.address,
            "ssh": f"root@{layout.address}",
            "libvirt_uri": layout.libvirt_uri(),
            "etcd_client_url": layout.etcd_client_url,
            "state": ("partitioned" if layout.name in state.partitioned
                      else "cut from ceph" if layout.name in state.cut_from_ceph
                      else "cut from etcd" if layout.name in state.cut_from_etcd
                      else "running") if running else "crashed",
        })
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        health = list(pool.map(lambda h: etcd.endpoint_health(h["etcd_client_url"]), hosts))
    for host, healthy in zip(hosts, health, strict=True):
        host["etcd"] = "healthy" if healthy else "unreachable"
    try:
        ceph_health = ceph.health()["status"]
    except LabError:
        ceph_health = "unreachable"
    return {
        "up": True,
        "hosts": hosts,
        "etcd_endpoints": [h["etcd_client_url"] for h in hosts],
        "ceph": {"address": ceph_address(), "conf": str(ceph_conf_path()),
                 "keyring": str(ceph_admin_keyring_path()), "pool": CEPH_POOL,
                 "health": ceph_health},
        "virt_type": state.virt_type,
        "canary": state.canary,
        "inventory": str(inventory_dir()),
        "ssh_key": str(ssh_key_path()),
        "prometheus": prometheus.url() if _alive(state.node(prometheus.NODE)) else None,
    }


def _alive(n: node.Node | None) -> bool:
    return n is not None and n.alive()


def ceph_secret(name: str, present: bool) -> None:
    """Remove the host's libvirt secret for Ceph (every VM start there then fails, as
    with a broken hypervisor), or define it again."""
    with _host_verb(name, running=True) as (dummy, host, n):
        if present:
            hypervisor.define_ceph_secret(n, host)
        else:
            n.run("virsh", "-q", "secret-undefine", CEPH_SECRET_UUID, check=False)


def restart_agent(name: str, storage_probe: bool = True, **settings) -> None:
    """Kill the host's agent, as a crash would, and start it again as systemd would,
    with or without its storage probe and with `settings` of its configuration over
    the lab's (not waiting for it to register)."""
    with _host_verb(name, running=True) as (state, host, n):
        n.run("sh", "-ec", hypervisor.agent_service_commands(host)["kill"], timeout=30)
        hypervisor.start_agent(n, host, state.layouts(), storage_probe=storage_probe,
                               **settings)


def kill_qemu(vm: str) -> None:
    """SIGKILL the QEMU of VM `vm`, on whichever host it runs, as the OOM killer would:
    the hosts have PID namespaces of their own, all visible from the machine's."""
    found = subprocess.run(["pgrep", "-f", f"guest={vm},"], capture_output=True, text=True,
                           check=False).stdout.split()
    if len(found) != 1:
        raise LabError(f"{vm}: expected one QEMU process, found {found or 'none'}")
    os.kill(int(found[0]), signal.SIGKILL)


def run_on_host(name: str, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command inside a host's namespaces (for tests and debugging)."""
    state = _require_up()
    _check_host(state, name)
    n = state.node(name)
    if n is None or not n.alive():
        raise LabError(f"{name} is down")
    return n.run(*command, timeout=timeout, check=False)
