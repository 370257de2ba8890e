"""The fault-injection filesystems do what tests rely on, seen through real syscalls.

Calls that may hang run in a subprocess client, never in the test process: a call
stuck in the kernel would keep the runner from exiting.
"""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kit.faultfs import FaultFS, mount_fstype

pytest_plugins = ["tests.kit.fixtures_fs"]

MIB = 1 << 20

# Does one call on argv[2] and prints "ok" or the errno name.
CLIENT = r"""
import errno, mmap, os, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "stat":
        os.stat(path)
    elif op == "read":
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        os.preadv(fd, [mmap.mmap(-1, 1 << 20)], 0)
    print("ok", flush=True)
except OSError as exc:
    print(errno.errorcode[exc.errno], flush=True)
"""


def client(op: str, path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CLIENT, op, str(path)],
                            stdout=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    try:
        return proc.communicate(timeout=timeout)[0].strip()
    finally:
        proc.kill()  # a client still hung after a failure must not outlive the test


def make_file(path: Path, size: int) -> None:
    path.write_bytes(os.urandom(size))


def direct_seconds(path: Path, op: str, repeat: int = 5) -> float:
    """Fastest of `repeat` 1 MiB O_DIRECT reads or writes at offset 0 (aligned mmap buffer).

    The minimum, because noise (the backing disk is shared) only ever adds time.
    """
    fd = os.open(path, (os.O_RDONLY if op == "read" else os.O_WRONLY) | os.O_DIRECT)
    buf = mmap.mmap(-1, MIB)
    call = os.preadv if op == "read" else os.pwritev
    times = []
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            assert call(fd, [buf], 0) == MIB
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return min(times)


def stat_seconds(path: Path, repeat: int = 5) -> float:
    """Fastest of `repeat` os.stat(path) calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        os.stat(path)
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.mark.timeout(30)
def test_mount_is_real_and_passes_through(faultfs: FaultFS) -> None:
    assert mount_fstype(faultfs.mountpoint) == "fuse.faultfs"
    m, b = faultfs.mountpoint, faultfs.backing
    (m / "d").mkdir()
    fd = os.open(m / "d" / "f", os.O_CREAT | os.O_WRONLY, 0o640)
    assert os.pwrite(fd, b"hello world", 0) == 11
    os.fsync(fd)
    os.fdatasync(fd)
    os.close(fd)
    assert (b / "d" / "f").read_bytes() == b"hello world"
    os.truncate(m / "d" / "f", 5)
    os.rename(m / "d" / "f", m / "d" / "g")
    os.symlink("g", m / "d" / "link")
    assert os.readlink(m / "d" / "link") == "g"
    assert (m / "d" / "link").read_bytes() == b"hello"
    os.chmod(m / "d" / "g", 0o600)
    os.utime(m / "d" / "g", ns=(1_000_000_000, 2_000_000_123))
    st = os.stat(m / "d" / "g")
    assert (st.st_size, st.st_mode & 0o777, st.st_mtime_ns) == (5, 0o600, 2_000_000_123)
    assert os.access(m / "d" / "g", os.R_OK)
    assert sorted(os.listdir(m / "d")) == ["g", "link"]
    assert os.statvfs(m).f_blocks == os.statvfs(b).f_blocks
    os.unlink(m / "d" / "link")
    os.unlink(m / "d" / "g")
    os.rmdir(m / "d")
    assert os.listdir(b) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("op", ["read", "write"])
def test_delay_adds_to_a_direct_1mib_call(faultfs: FaultFS, op: str) -> None:
    make_file(faultfs.backing / "data.bin", 4 * MIB)
    path = faultfs.mountpoint / "data.bin"
    base = direct_seconds(path, op)
    faultfs.delay([op], 0.05)
    slow = direct_seconds(path, op)
    # One FUSE request per 1 MiB call (libfuse3), so the delay counts once.
    assert 0.045 < slow - base < 0.09, (base, slow)
    faultfs.clear()
    assert direct_seconds(path, op) < base + 0.03


@pytest.mark.timeout(30)
def test_getattr_delay_counts_twice_per_stat(faultfs: FaultFS) -> None:
    make_file(faultfs.backing / "slow", 10)
    make_file(faultfs.backing / "fast", 10)
    faultfs.delay(["getattr"], 0.05, path="slow")
    slow = stat_seconds(faultfs.mountpoint / "slow")
    fast = stat_seconds(faultfs.mountpoint / "fast")
    # No attribute or name caching: a stat is a LOOKUP plus a GETATTR.
    assert 0.1 <= slow < 0.16, slow
    assert fast < 0.03, fast


@pytest.mark.timeout(30)
def test_errors_reach_the_caller_with_their_errno(faultfs: FaultFS) -> None:
    make_file(faultfs.backing / "bad", MIB)
    make_file(faultfs.backing / "good", MIB)
    bad, good = faultfs.mountpoint / "bad", faultfs.mountpoint / "good"
    faultfs.fail(["read"], "EIO", path="bad")
    faultfs.fail(["write"], "ENOSPC", path="bad")
    faultfs.fail(["getattr"], "EIO", path="missing*")
    fd = os.open(bad, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, MIB)
    with pytest.raises(OSError) as err:
        os.preadv(fd, [buf], 0)
    assert err.value.errno == errno.EIO
    with pytest.raises(OSError) as err:
        os.pwritev(fd, [buf], 0)
    assert err.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as err:
        os.stat(faultfs.mountpoint / "missing-file")
    assert err.value.errno == errno.EIO
    assert good.read_bytes() == (faultfs.backing / "good").read_bytes()
    # A new rule set applies to the very next call, however quickly it follows.
    faultfs.clear()
    assert os.preadv(fd, [buf], 0) == MIB
    faultfs.fail(["read"], "EIO")
    with pytest.raises(OSError):
        os.preadv(fd, [buf], 0)
    faultfs.clear()
    assert os.preadv(fd, [buf], 0) == MIB
    os.close(fd)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("op", "call"), [("getattr", "stat"), ("read", "read")])
def test_hang_blocks_a_client_until_released(faultfs: FaultFS, op: str, call: str) -> None:
    make_file(faultfs.backing / "data.bin", MIB)
    faultfs.hang([op], path="data.bin")
    proc = client(call, faultfs.mountpoint / "data.bin")
    try:
        hung = faultfs.wait_hung()
        assert hung[0]["op"] == op and hung[0]["path"] == "data.bin"
        time.sleep(0.3)
        assert proc.poll() is None, "the client did not stay blocked"
        # Other calls go on while one hangs.
        assert os.stat(faultfs.mountpoint).st_mode
        start = time.monotonic()
        faultfs.release()
        assert finish(proc) == "ok"
        assert time.monotonic() - start < 2
        assert faultfs.hung() == []
    finally:
        proc.kill()


@pytest.mark.timeout(30)
def test_hang_replaced_by_an_error_fails_the_hung_call(faultfs: FaultFS) -> None:
    make_file(faultfs.backing / "data.bin", MIB)
    faultfs.set_rules([{"ops": ["read"], "hang": True}])
    proc = client("read", faultfs.mountpoint / "data.bin")
    faultfs.wait_hung()
    faultfs.set_rules([{"ops": ["read"], "error": "EIO"}])
    assert finish(proc) == "EIO"


@pytest.mark.timeout(30)
def test_stop_with_a_hung_client_unmounts_and_fails_the_client(tmp_path: Path) -> None:
    fs = FaultFS(tmp_path / "backing", tmp_path / "mnt").start()
    try:
        make_file(fs.backing / "data.bin", MIB)
        fs.hang(["read"])
        proc = client("read", fs.mountpoint / "data.bin")
        fs.wait_hung()
    finally:
        fs.stop()
    assert finish(proc) in {"ECONNABORTED", "ENOTCONN"}
    assert mount_fstype(fs.mountpoint) is None
    fs.stop()  # idempotent, as fixture teardown may call it again


@pytest.mark.timeout(30)
def test_fuse_does_not_check_direct_alignment(faultfs: FaultFS) -> None:
    make_file(faultfs.backing / "data.bin", MIB)
    fd = os.open(faultfs.mountpoint / "data.bin", os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.preadv(fd, [memoryview(mmap.mmap(-1, 2 * 4096))[1:4097]], 1) == 4096
    finally:
        os.close(fd)


def test_bad_rules_are_refused_in_the_test() -> None:
    fs = FaultFS(Path("/nonexistent/b"), Path("/nonexistent/m"))
    with pytest.raises(ValueError, match="unknown ops"):
        fs.fail(["reed"], "EIO")
    with pytest.raises(ValueError, match="errno name"):
        fs.fail(["read"], "EWHATEVER")
    with pytest.raises(ValueError, match="delay"):
        fs.delay(["read"], -1)


@pytest.mark.timeout(30)
def test_tmpfs_enospc_is_exact_and_growing_cures_it(small_tmpfs) -> None:
    assert mount_fstype(small_tmpfs.path) == "tmpfs"
    sv = os.statvfs(small_tmpfs)
    assert sv.f_blocks * sv.f_frsize == 8 * MIB
    fd = os.open(small_tmpfs / "fill", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert os.write(fd, b"\0" * (8 * MIB)) == 8 * MIB
        with pytest.raises(OSError) as err:
            os.write(fd, b"\0")
        assert err.value.errno == errno.ENOSPC
        small_tmpfs.remount_size(16 * MIB)
        assert os.write(fd, b"\0" * MIB) == MIB
    finally:
        os.close(fd)
    assert (small_tmpfs / "fill").stat().st_size == 9 * MIB


@pytest.mark.timeout(60)
def test_ext4_refuses_misaligned_direct_io(ext4_mount: Path) -> None:
    assert mount_fstype(ext4_mount) == "ext4"
    path = ext4_mount / "data.bin"
    with open(path, "wb") as f:  # real blocks: a read of a hole is not alignment-checked
        f.write(os.urandom(MIB))
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 2 * 4096)
        assert os.preadv(fd, [memoryview(buf)[:4096]], 0) == 4096
        with pytest.raises(OSError) as err:
            os.preadv(fd, [memoryview(buf)[1:4097]], 0)
        assert err.value.errno == errno.EINVAL
        with pytest.raises(OSError) as err:
            os.preadv(fd, [memoryview(buf)[:4096]], 1)
        assert err.value.errno == errno.EINVAL
    finally:
        os.close(fd)
