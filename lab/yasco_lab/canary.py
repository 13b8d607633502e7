"""The canary guest: a tiny Linux VM that proves its disk keeps working.

The canary is built locally from what the lab host already has installed - the
Debian kernel in /boot, its virtio modules and the static busybox - so the lab
needs no image downloads. It boots the kernel's own ELF through its PVH entry
(:func:`boot_kernel`): under emulation that saves the bzImage's decompressor, 2 to
3 s that every recovery benchmark would otherwise count.  Its ``/init`` writes a
numbered record every ``WRITE_INTERVAL`` (0.4 s, plus the write) into a ring at the start of its disk (``/dev/vda``).  The storage side reads
that ring back (:func:`parse_records`) to check that writes kept flowing through
a failover and that only one copy of the guest wrote at a time: every boot
signs its records with its own writer id, and a new boot resumes after the
highest sequence number it finds on the disk.

Record format: slot ``seq % RING_RECORDS`` of the first ``RING_RECORDS * 512``
bytes holds ``"<seq> <timestamp> <writer>\\n"`` padded with NULs to 512 bytes.
The timestamp is wall-clock seconds with 10 ms resolution, anchored to a tick
of the guest's emulated RTC.  QEMU's RTC keeps only the whole seconds of the
host time it started at, so each boot's timestamps trail the host clock by a
constant offset in [0, 1) s; differences within one boot are good to ~10 ms.

Booting the kernel command line with ``yasco.probe=1`` instead prints
``PROBE_MARKER`` and powers off; :func:`probe_virt_type` uses that to find out
whether KVM really works here or the lab must fall back to plain emulation.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import re
import select
import struct
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

RECORD_SIZE = 512
RING_RECORDS = 2048  # the ring is the first 1 MiB of the disk
# Seconds between two records. Each record costs an emulated fork and a write through
# librbd: a quarter of a core per canary at 0.2 s, on a lab of a dozen canaries and
# two cores; 0.4 s halves that, and still times a failover to half a second.
WRITE_INTERVAL = 0.4
PROBE_MARKER = "YASCO-CANARY-PROBE-OK"
# Wanted modules; build() adds whatever they depend on and orders them.
MODULES = ("virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev",
           "virtio_pci", "virtio_blk", "pvpanic-mmio")
CMDLINE = "console=ttyS0 panic=-1 quiet"
BUSYBOX = Path("/bin/busybox")
_FORMAT = 2  # bump when the image's layout changes without the inputs changing
# XEN_ELFNOTE_PHYS32_ENTRY: the note by which a kernel's ELF offers its PVH entry point.
_PVH_NOTE = (b"Xen\0", 18)


class CanaryBuildError(Exception):
    """Something the canary needs is missing; the message says what to install."""


@dataclass(frozen=True)
class CanaryImage:
    kernel: Path
    initrd: Path
    cmdline: str


@dataclass(frozen=True)
class Record:
    seq: int
    timestamp: float
    writer: str


# The guest's PID 1.  It must never exit (the kernel would panic), hence idle().
_INIT = r"""#!/bin/sh
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
log() { echo "yasco-canary: $*"; }
idle() { while :; do sleep 3600; done; }
# busybox date has no %N, so timestamps are uptime (10 ms resolution) anchored
# to the moment the RTC ticks.  Anchoring to the kernel clock instead would add
# up to another second of error: it was set from the RTC by whole seconds.
# The loop below forks once per record (dd): under emulation every fork and exec
# is costly, and a dozen canaries forking five times a record kept the lab's
# CPUs busy.  Hence builtins only: read for the clock and the pause, arithmetic
# in centiseconds (1${frac} - 100 reads "05" as 5, not as octal).
rtc=/sys/class/rtc/rtc0/since_epoch
if [ -r $rtc ]; then clock() { cat $rtc; }; else clock() { date +%s; }; fi
uptime_cs() { read up rest < /proc/uptime; cs=$(( ${up%.*} * 100 + 1${up#*.} - 100 )); }
# The tick is awaited in the background while the modules load and the ring is
# read: the wait, up to a second, is otherwise the longest step of the boot.
(
    e0=$(clock)
    e=$e0
    while [ "$e" = "$e0" ]; do sleep 0.01; e=$(clock); done
    uptime_cs
    echo "$e $cs" > /anchor
) &
anchor=$!
for m in @MODULES@; do insmod /lib/modules/$m.ko || log "insmod $m failed"; done

if grep -qw yasco.probe=1 /proc/cmdline; then
    echo @MARKER@
    poweroff -f
    idle
fi
# An NMI (virsh inject-nmi) panics the kernel, which reports it to QEMU through the
# pvpanic device: how the lab makes a guest crash.
echo 1 > /proc/sys/kernel/unknown_nmi_panic || log "no unknown_nmi_panic"

# yasco.dirty=MB (benchmarks/migration.py): memory that keeps changing, as a busy
# database's does: MB of RAM rewritten over and over, with new contents each pass.
dirty=$(sed -n 's/.*yasco[.]dirty=\([0-9]*\).*/\1/p' /proc/cmdline)
if [ -n "$dirty" ]; then
    ( n=0; while :; do n=$((n + 1)); yes "$n" | head -c $((dirty * 1048576)) > /dirty; done ) &
fi

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || { log "no /dev/vda, not writing"; idle; }

stamp() {
    uptime_cs
    t=$(( e0 * 100 + cs - u0 ))
    f=$(( t % 100 ))
    [ $f -ge 10 ] || f=0$f
    stamp=$(( t / 100 )).$f
}

writer=$(cut -c1-8 /proc/sys/kernel/random/boot_id)
seq=$(dd if=/dev/vda bs=@SIZE@ count=@RING@ 2>/dev/null | tr -s '\000' '\n' |
      awk '$1 ~ /^[0-9]+$/ && NF == 3 && $1 + 0 > m { m = $1 + 0 } END { printf "%d", m }')
wait $anchor
read e0 u0 < /anchor
log "ready, resuming after seq $seq"
# Nothing ever writes the fifo: read -t on it is a pause without a fork.
if mkfifo /nap && exec 3<>/nap; then
    pause() { read -t @PAUSE@ nap <&3; }
else
    pause() { sleep @PAUSE@; }
fi
while :; do
    seq=$((seq + 1))
    stamp
    # conv=sync pads the short record with NULs to a full slot; fsync makes
    # the write reach the disk (oflag=direct silently fails in busybox dd).
    if ! dd of=/dev/vda bs=@SIZE@ seek=$((seq % @RING@)) count=1 conv=notrunc,fsync,sync \
            2>/dev/null <<RECORD
$seq $stamp $writer
RECORD
    then
        log "write error at seq $seq"
        idle
    fi
    log "wrote $seq $stamp $writer"
    pause
done
"""


def _version_key(version: str) -> list[tuple[int, str]]:
    # Natural sort, so 6.10 sorts after 6.9.
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", version)]


def _find_kernel() -> tuple[str, Path]:
    found = [(p.name.removeprefix("vmlinuz-"), p) for p in Path("/boot").glob("vmlinuz-*")]
    found = [(v, p) for v, p in found if Path("/lib/modules", v).is_dir()]
    if not found:
        raise CanaryBuildError(
            "no kernel in /boot with modules in /lib/modules: apt-get install linux-image-amd64")
    return max(found, key=lambda vp: _version_key(vp[0]))


def _modinfo(version: str, field: str, module: str) -> str:
    try:
        out = subprocess.run(["modinfo", "-k", version, "-F", field, module],
                             capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise CanaryBuildError("modinfo not found: apt-get install kmod") from None
    except subprocess.CalledProcessError as e:
        raise CanaryBuildError(f"module {module} not found for kernel {version}: "
                               f"{e.stderr.strip()}") from None
    return out.stdout.strip()


def _resolve_modules(version: str) -> list[tuple[str, Path]]:
    """The wanted modules plus their dependencies, each after what it needs."""
    ordered: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for dep in filter(None, _modinfo(version, "depends", name).split(",")):
            visit(dep)
        filename = _modinfo(version, "filename", name)
        if filename != "(builtin)":  # built into the kernel: nothing to load
            ordered.append((name.replace("-", "_"), Path(filename)))

    for name in MODULES:
        visit(name)
    return ordered


def _module_bytes(path: Path) -> bytes:
    # busybox insmod wants a plain ELF; newer Debian kernels ship .ko.xz.
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes())
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    if path.suffix != ".ko":
        raise CanaryBuildError(f"cannot unpack module {path}")
    return path.read_bytes()


def _busybox() -> bytes:
    if not BUSYBOX.is_file():
        raise CanaryBuildError(f"{BUSYBOX} missing: apt-get install busybox-static")
    data = BUSYBOX.read_bytes()
    # The dynamic "busybox" package installs the same path; it cannot run in an
    # initramfs without libc, and the guest would just panic.
    if b"/lib64/ld-linux" in data[:4096]:
        raise CanaryBuildError(f"{BUSYBOX} is dynamically linked: apt-get install busybox-static")
    return data


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc archive of (name, mode, data) with root ownership, in order."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")], 1):
        rdev = (5, 1) if name == "dev/console" else (0, 0)
        raw_name = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, *rdev, len(raw_name), 0)
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + raw_name
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def init_script(modules: list[str]) -> str:
    """The guest's /init, loading ``modules`` in the given order."""
    subst = {"@MODULES@": " ".join(modules), "@MARKER@": PROBE_MARKER,
             "@SIZE@": str(RECORD_SIZE), "@RING@": str(RING_RECORDS),
             "@PAUSE@": f"{WRITE_INTERVAL:g}"}
    return re.sub("|".join(subst), lambda m: subst[m.group(0)], _INIT)


def _payload(bzimage: bytes) -> bytes | None:
    """The compressed kernel inside a bzImage, from its setup header (the x86 boot
    protocol, 2.08 or later), decompressed; None if it is not one this can unpack."""
    if len(bzimage) < 0x250 or bzimage[0x202:0x206] != b"HdrS":
        return None
    version, = struct.unpack_from("<H", bzimage, 0x206)
    if version < 0x208:
        return None
    setup_sectors = bzimage[0x1F1] or 4
    offset, length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sectors + 1) * 512 + offset
    payload = bzimage[start:start + length]
    try:
        if payload.startswith(b"\xfd7zXZ\0"):
            return lzma.LZMADecompressor().decompress(payload)
        if payload.startswith(b"\x1f\x8b"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    except (lzma.LZMAError, zlib.error):
        return None
    return None  # zstd, lz4 and the rest: no unpacker in the standard library


def _has_pvh_entry(elf: bytes) -> bool:
    """Whether a 64-bit ELF kernel carries the note of a PVH entry point."""
    if elf[:5] != b"\x7fELF\x02":
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for index in range(phnum):
        kind, = struct.unpack_from("<I", elf, phoff + index * phentsize)
        if kind != 4:  # PT_NOTE
            continue
        at, = struct.unpack_from("<Q", elf, phoff + index * phentsize + 8)
        size, = struct.unpack_from("<Q", elf, phoff + index * phentsize + 0x20)
        end = at + size
        while at + 12 <= end:
            namesz, descsz, note = struct.unpack_from("<III", elf, at)
            name = elf[at + 12:at + 12 + namesz]
            if (name, note) == _PVH_NOTE:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def boot_kernel(bzimage: bytes) -> bytes:
    """What the canary boots: the kernel's uncompressed ELF when it has a PVH entry,
    else the bzImage itself.

    QEMU loads a PVH kernel straight into the guest and jumps to it; a bzImage first
    runs its own decompressor, which under TCG takes 2 to 3 s of the guest's 5 s boot,
    time a failover benchmark would count as the HA stack's.
    """
    elf = _payload(bzimage)
    return elf if elf is not None and _has_pvh_entry(elf) else bzimage


def build(out_dir: Path) -> CanaryImage:
    """Build (or reuse) the canary kernel and initrd in ``out_dir``."""
    version, kernel_src = _find_kernel()
    modules = _resolve_modules(version)
    init = init_script([name for name, dummy in modules])
    image = CanaryImage(out_dir / "canary-kernel", out_dir / "canary-initrd.gz", CMDLINE)

    inputs = {"format": _FORMAT, "kernel": version, "init": init,
              "modules": [str(p) for dummy, p in modules]}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    stamp = out_dir / "canary.stamp"
    if (stamp.is_file() and stamp.read_text().strip() == digest
            and image.kernel.is_file() and image.initrd.is_file()):
        return image

    directories = ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "tmp",
                   "lib", "lib/modules")
    entries = [(d, 0o40755, b"") for d in directories]
    entries += [("dev/console", 0o20600, b""), ("bin/busybox", 0o100755, _busybox()),
                ("bin/sh", 0o120777, b"busybox"), ("init", 0o100755, init.encode())]
    entries += [(f"lib/modules/{name}.ko", 0o100644, _module_bytes(path))
                for name, path in modules]

    out_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)  # a half-done rebuild must not look finished
    tmp = image.initrd.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(_cpio(entries), compresslevel=9, mtime=0))
    tmp.replace(image.initrd)
    tmp = image.kernel.with_suffix(".tmp")
    tmp.write_bytes(boot_kernel(kernel_src.read_bytes()))
    tmp.replace(image.kernel)
    # libvirt runs QEMU as an unprivileged user that must be able to read both.
    image.kernel.chmod(0o644)
    image.initrd.chmod(0o644)
    stamp.write_text(digest + "\n")
    return image


def parse_records(data: bytes) -> list[Record]:
    """Valid records of a ring image, sorted by seq; other slots are ignored."""
    records = []
    for slot in range(min(len(data) // RECORD_SIZE, RING_RECORDS)):
        raw = data[slot * RECORD_SIZE:(slot + 1) * RECORD_SIZE]
        fields = raw.split(b"\n", 1)[0].split(b" ")
        try:
            seq, ts, writer = int(fields[0]), float(fields[1]), fields[2].decode("ascii")
        except (IndexError, ValueError, UnicodeDecodeError):
            continue
        # A record found in the wrong slot is garbage, not a real write.
        if len(fields) == 3 and seq > 0 and writer and seq % RING_RECORDS == slot:
            records.append(Record(seq, ts, writer))
    return sorted(records, key=lambda r: r.seq)


def latest_record(data: bytes) -> Record | None:
    records = parse_records(data)
    return records[-1] if records else None


def qemu_argv(image: CanaryImage, accel: str = "tcg", extra_cmdline: str = "",
              disk: Path | None = None) -> list[str]:
    """A bare QEMU command booting the canary with its console on stdout."""
    argv = ["qemu-system-x86_64", "-accel", accel, "-nodefaults", "-nographic",
            "-no-reboot", "-m", "128", "-serial", "stdio",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-append", f"{image.cmdline} {extra_cmdline}".strip()]
    if disk is not None:
        argv += ["-drive", f"file={disk},format=raw,if=virtio,cache=writeback"]
    return argv


def wait_for_output(proc: subprocess.Popen[bytes], marker: str, timeout: float) -> bool:
    """Read ``proc``'s stdout until ``marker`` shows up; False on timeout or exit."""
    assert proc.stdout is not None
    deadline, seen = time.monotonic() + timeout, b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([proc.stdout], [], [], left)[0]:
            break
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        seen = seen[-len(marker):] + chunk  # keep enough to match across reads
        if marker.encode() in seen:
            return True
    return False


def seconds_to_output(argv: list[str], marker: str, timeout: float) -> float | None:
    """Seconds from starting the QEMU of ``argv`` to ``marker`` on its console, None
    if it does not show within ``timeout``; the QEMU is killed either way."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except FileNotFoundError:
        raise CanaryBuildError(
            "qemu-system-x86_64 not found: apt-get install qemu-system-x86") from None
    try:
        return time.monotonic() - started if wait_for_output(proc, marker, timeout) else None
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def probe_virt_type(image: CanaryImage, timeout: float = 30.0) -> str:
    """"kvm" if a guest really boots under KVM here, else "qemu" (TCG).

    /dev/kvm existing is not enough: under nested virtualisation the guest
    kernel can hang under KVM, so boot the canary in probe mode and watch for
    its marker.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "qemu"
    booted = seconds_to_output(qemu_argv(image, "kvm", "yasco.probe=1"), PROBE_MARKER,
                               timeout)
    return "qemu" if booted is None else "kvm"
