"""Host faults through a real mount: a full host filesystem (a small tmpfs under the store),
and faults injected into the daemon's host calls with SCION_FAULTS (armed once mounted; the
syntax is in crates/store/src/faults.rs and docs/testing.md). Each test checks what the
application sees, then restarts the daemon without the fault and requires `scion check`
clean and every fsynced byte back."""

import errno
import hashlib
import json
import os

import pytest

from conftest import PLAIN, small_host

pytestmark = pytest.mark.skipif(PLAIN, reason="scion-specific")


def write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read(path):
    with open(path, "rb") as f:
        return f.read()


def digest(data):
    return hashlib.sha256(data).hexdigest()


def verify(m, synced):
    for p, h in synced.items():
        assert digest(read(p)) == h, f"{p}: fsynced content lost"


def fill_host(m):
    """Another program fills the store's host to the last byte; returns its file."""
    filler = os.path.join(m.store, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\xff" * (1 << 20))
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def late_write_errors(m):
    """The errnos of eight fsynced writes into the mount of a full host."""
    errs = set()
    for i in range(8):
        try:
            write_synced(os.path.join(m.mnt, f"late{i}"), os.urandom(256 << 10))
        except OSError as e:
            errs.add(e.errno)
    return errs


def mount_with_faults(m, spec):
    os.environ["SCION_FAULTS"] = spec
    try:
        m.mount()
    finally:
        del os.environ["SCION_FAULTS"]


def test_full_host_gives_enospc_and_keeps_the_store(scion_store):
    m = scion_store
    with small_host(m):
        synced, err = {}, None
        for i in range(200):
            p = os.path.join(m.mnt, f"f{i:03d}")
            data = os.urandom(1 << 20)
            try:
                write_synced(p, data)
            except OSError as e:
                err = e
                break
            synced[p] = digest(data)
        assert err is not None and err.errno == errno.ENOSPC, f"expected ENOSPC, got {err!r}"
        assert len(synced) >= 40, f"only {len(synced)} MiB fitted on a 96 MiB host"
        print(f"{len(synced)} MiB fitted on a 96 MiB host before ENOSPC")
        verify(m, synced)
        # Removing files works on the full host; so does a clean unmount (its checkpoint
        # has the reserve).
        for p in sorted(synced)[:5]:
            os.unlink(p)
            del synced[p]
        m.umount()
        m.check()
        m.mount()
        verify(m, synced)
        # The space came back: a new file fits.
        p = os.path.join(m.mnt, "after")
        data = os.urandom(3 << 20)
        write_synced(p, data)
        synced[p] = digest(data)

        # Another program fills the host to the last byte: scion's changes fail, nothing
        # acknowledged is lost, and once the space is back a restart gives a clean store.
        filler = fill_host(m)
        errs = late_write_errors(m)
        assert errs and errs <= {errno.ENOSPC, errno.EIO}, f"errors seen: {errs}"
        print("errors with the host filled by another program:", sorted(errno.errorcode[e] for e in errs))
        m.kill9()
        os.unlink(filler)
        m.check()
        m.mount()
        verify(m, synced)
        m.umount()
        m.check()


def test_flipped_bits_from_the_host_give_eio(scion_mount):
    m = scion_mount
    a = os.urandom(256 << 10)
    b = b"bystander" * 1000
    write_synced(os.path.join(m.mnt, "a"), a)
    write_synced(os.path.join(m.mnt, "b"), b)
    m.umount()
    mount_with_faults(m, "read:packs/:flip")
    with pytest.raises(OSError) as ei:
        read(os.path.join(m.mnt, "a"))
    assert ei.value.errno == errno.EIO
    assert os.path.exists(f"/proc/{m.daemon_pid()}"), "the daemon died"
    with open(os.path.join(m.store, "daemon.log")) as f:
        log = f.read()
    assert "fault injected" in log and "hash" in log, "the damaged block is not named in the log"
    m.umount()
    m.check()
    m.mount()
    assert read(os.path.join(m.mnt, "a")) == a
    assert read(os.path.join(m.mnt, "b")) == b


def test_failing_pack_writes_give_eio_and_lose_nothing(scion_mount):
    m = scion_mount
    m.umount()
    mount_with_faults(m, "write:packs/:eio")
    small = b"journaled only" * 100
    write_synced(os.path.join(m.mnt, "small"), small)
    with pytest.raises(OSError) as ei:
        write_synced(os.path.join(m.mnt, "big"), os.urandom(1 << 20))
    assert ei.value.errno == errno.EIO
    assert read(os.path.join(m.mnt, "small")) == small
    m.kill9()
    m.check()
    m.mount()
    assert read(os.path.join(m.mnt, "small")) == small
    m.umount()
    m.check()


def test_a_host_filled_by_another_program_is_no_failure(scion_store):
    """Issue 35 item 1: another program fills the host to the last byte while the store has
    changes waiting for their checkpoint. Writers get ENOSPC (never EIO), the checkpoint
    still writes (into the room of the store's reserve), `scion status` says the host is
    full, and once the other program's file is gone the store takes changes again by itself,
    with no remount; nothing acknowledged is lost and the store checks clean."""
    m = scion_store
    with small_host(m):
        synced = {}
        for i in range(10):
            p = os.path.join(m.mnt, f"f{i}")
            data = os.urandom(1 << 20)
            write_synced(p, data)
            synced[p] = digest(data)
        # Changes waiting for a checkpoint: small files and a directory, fsynced.
        os.makedirs(os.path.join(m.mnt, "d"))
        for i in range(50):
            p = os.path.join(m.mnt, "d", f"s{i}")
            data = os.urandom(3000)
            write_synced(p, data)
            synced[p] = digest(data)
        filler = fill_host(m)
        errs = late_write_errors(m)
        assert errs == {errno.ENOSPC}, f"errors seen: {sorted(errno.errorcode[e] for e in errs)}"
        # A checkpoint now (list takes one): it must not fail the store.
        r = m.run("list", m.mnt)
        assert r.returncode == 0, r.describe()
        st = json.loads(m.run("status", "--json", m.mnt).stdout.splitlines()[0])
        assert st["failed"] is None and st["host_full"], st
        os.unlink(filler)
        # Room again: changes are taken, with no remount.
        p = os.path.join(m.mnt, "after")
        data = os.urandom(1 << 20)
        write_synced(p, data)
        synced[p] = digest(data)
        st = json.loads(m.run("status", "--json", m.mnt).stdout.splitlines()[0])
        assert st["failed"] is None and not st["host_full"], st
        verify(m, synced)
        m.umount()
        m.check()
        m.mount()
        verify(m, synced)


def test_fallocate_past_the_free_space_is_enospc(scion_store):
    """Issue 36 item 6 (xfstests generic/213): fallocate promises the space it is asked for,
    so a request larger than the host's free space gets ENOSPC and changes nothing (before,
    it succeeded and grew the file); one that fits succeeds; the store is not full."""
    m = scion_store
    with small_host(m):
        p = os.path.join(m.mnt, "f")
        with open(p, "wb") as h:
            h.write(b"x" * 100)
        fd = os.open(p, os.O_WRONLY)
        try:
            with pytest.raises(OSError) as e:
                os.posix_fallocate(fd, 0, 1 << 30)
            assert e.value.errno == errno.ENOSPC
            assert os.fstat(fd).st_size == 100
            os.posix_fallocate(fd, 0, 4 << 20)
            assert os.fstat(fd).st_size == 4 << 20
        finally:
            os.close(fd)
        st = json.loads(m.run("status", "--json", m.mnt).stdout.splitlines()[0])
        assert st["failed"] is None and not st["host_full"], st
