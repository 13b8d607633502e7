"""The canary guest, booted for real under QEMU (TCG, so it runs anywhere)."""

from __future__ import annotations

import gzip
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from yasco_lab import canary
from yasco_lab.canary import RECORD_SIZE, RING_RECORDS, Record, latest_record, parse_records

# A TCG boot takes 5-20 s on the lab machines; leave room for a loaded host.
BOOT_TIMEOUT = 90.0
RING_BYTES = RING_RECORDS * RECORD_SIZE


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> canary.CanaryImage:
    return canary.build(tmp_path_factory.mktemp("canary"))


def slot(seq: int, ts: float, writer: str) -> bytes:
    return f"{seq} {ts:.2f} {writer}\n".encode().ljust(RECORD_SIZE, b"\0")


def ring(*records: tuple[int, float, str]) -> bytes:
    data = bytearray(RING_BYTES)
    for seq, ts, writer in records:
        at = seq % RING_RECORDS * RECORD_SIZE
        data[at:at + RECORD_SIZE] = slot(seq, ts, writer)
    return bytes(data)


def test_parse_records_sorted_by_seq_skipping_empty_slots() -> None:
    data = ring((7, 107.5, "bbbb"), (3, 103.25, "aaaa"), (5, 105.0, "aaaa"))
    assert parse_records(data) == [Record(3, 103.25, "aaaa"), Record(5, 105.0, "aaaa"),
                                   Record(7, 107.5, "bbbb")]
    assert latest_record(data) == Record(7, 107.5, "bbbb")


def test_parse_records_ignores_garbage() -> None:
    data = bytearray(ring((2, 1.0, "aaaa")))
    data[3 * RECORD_SIZE:4 * RECORD_SIZE] = b"\xff" * RECORD_SIZE
    data[4 * RECORD_SIZE:5 * RECORD_SIZE] = slot(9, 1.0, "aaaa")  # seq 9 belongs in slot 9
    data[5 * RECORD_SIZE:6 * RECORD_SIZE] = b"5 notatime aaaa\n".ljust(RECORD_SIZE, b" ")
    assert parse_records(bytes(data)) == [Record(2, 1.0, "aaaa")]
    assert latest_record(bytes(RING_BYTES)) is None


def test_parse_records_across_wraparound() -> None:
    last = RING_RECORDS + 9
    data = ring(*((seq, float(seq), "w") for seq in range(1, last + 1)))
    records = parse_records(data)
    # The newest RING_RECORDS writes survive; the oldest ones were overwritten.
    assert [r.seq for r in records] == list(range(last - RING_RECORDS + 1, last + 1))
    assert latest_record(data) == Record(last, float(last), "w")


def test_build_is_idempotent_and_complete(image: canary.CanaryImage) -> None:
    stamp = image.initrd.parent / "canary.stamp"
    before = (image.initrd.stat().st_mtime_ns, stamp.stat().st_mtime_ns)
    assert canary.build(image.initrd.parent) == image
    assert (image.initrd.stat().st_mtime_ns, stamp.stat().st_mtime_ns) == before

    # Debian's kernel has a PVH entry: the canary boots its ELF, skipping the
    # bzImage's decompressor (2 to 3 s of an emulated boot).
    kernel = image.kernel.read_bytes()
    assert kernel[:4] == b"\x7fELF" and canary.boot_kernel(kernel) == kernel
    assert canary.boot_kernel(b"not a kernel") == b"not a kernel"

    archive = gzip.decompress(image.initrd.read_bytes())
    for name in ("init", "bin/busybox", "lib/modules/virtio_blk.ko"):
        assert name.encode() + b"\0" in archive
    start = archive.index(b"#!/bin/sh\n/bin/busybox --install")
    init = archive[start:].decode(errors="replace")
    order = init.split("for m in ", 1)[1].split(";", 1)[0].split()
    assert order.index("virtio_ring") < order.index("virtio") < order.index("virtio_blk")
    assert order.index("virtio") < order.index("virtio_pci")


@contextmanager
def boot(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as console:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console,
                                stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes],
             log: Path) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            console = log.read_text(errors="replace")[-2000:]
            pytest.fail(f"canary never got to {what}; console:\n{console}")
        time.sleep(0.2)


def make_disk(path: Path) -> Path:
    with path.open("wb") as f:
        f.truncate(4 << 20)
    return path


def disk_records(disk: Path) -> list[Record]:
    with disk.open("rb") as f:
        return parse_records(f.read(RING_BYTES))


def run_until(image: canary.CanaryImage, disk: Path, log: Path, min_seq: int) -> float:
    """Boot the canary until it wrote ``min_seq``; returns the host start time."""
    started = time.time()
    with boot(canary.qemu_argv(image, disk=disk), log) as proc:
        wait_for(f"seq {min_seq}",
                 lambda: any(r.seq >= min_seq for r in disk_records(disk)), proc, log)
    return started


def test_canary_writes_then_resumes_after_reboot(image: canary.CanaryImage,
                                                 tmp_path: Path) -> None:
    disk = make_disk(tmp_path / "disk.img")
    started = run_until(image, disk, tmp_path / "boot1.log", 10)
    first = disk_records(disk)
    assert [r.seq for r in first] == list(range(1, len(first) + 1))
    assert len({r.writer for r in first}) == 1
    stamps = [r.timestamp for r in first]
    assert stamps == sorted(stamps)
    # Host-comparable: the guest clock trails the host by less than a second.
    assert started - 1.5 < stamps[0] and stamps[-1] < time.time() + 0.5
    assert "ready, resuming after seq 0" in (tmp_path / "boot1.log").read_text()

    last = first[-1].seq
    run_until(image, disk, tmp_path / "boot2.log", last + 5)
    records = disk_records(disk)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    resumed = [r for r in records if r.seq > last]
    assert len({r.writer for r in resumed}) == 1
    assert resumed[0].writer != first[0].writer
    assert resumed[0].timestamp > first[-1].timestamp
    assert f"ready, resuming after seq {last}" in (tmp_path / "boot2.log").read_text()


def test_canary_stops_writing_on_error_but_stays_up(image: canary.CanaryImage,
                                                    tmp_path: Path) -> None:
    disk = make_disk(tmp_path / "disk.img")
    log = tmp_path / "boot.log"
    argv = canary.qemu_argv(image) + ["-drive", f"file={disk},format=raw,if=virtio,readonly=on"]
    with boot(argv, log) as proc:
        wait_for("a write error", lambda: b"write error at seq 1" in log.read_bytes(),
                 proc, log)
        time.sleep(1.0)
        # PID 1 exiting would panic the guest, and -no-reboot would end QEMU.
        assert proc.poll() is None
    assert b"yasco-canary: wrote" not in log.read_bytes()


def test_probe_virt_type(image: canary.CanaryImage) -> None:
    # A working KVM boots the probe in a second or two; 20 s only bounds a hang.
    assert canary.probe_virt_type(image, timeout=20.0) in ("kvm", "qemu")
