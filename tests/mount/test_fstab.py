"""Mounted like a filesystem (issue 22 item 1): an /etc/fstab line of type `fuse.scion`
(here a temporary fstab, `mount -T`) mounts with plain `mount MOUNTPOINT`, through fuse3's
mount.fuse, which runs `scion STORE MOUNTPOINT -o OPTIONS`; fstab's own options (defaults,
_netdev, nofail, x-systemd.*) are dropped and scion's applied; the mount's type is
`fuse.scion` whoever mounts; plain `umount` unmounts and the daemon flushes and exits, leaving
a store that `check` finds clean, with what was written."""

import contextlib
import errno
import json
import os
import subprocess

import pytest

from conftest import PLAIN
from scion_helpers import is_mounted, pid_alive

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="needs root and a scion store")


@contextlib.contextmanager
def helper(m):
    """The binary under test as the mount helpers mount(8) runs: `scion` on the PATH (fuse3's
    mount.fuse runs it) and /sbin/mount.fuse.scion (which scripts/xfstests installs), each
    put back as it was afterwards."""
    saved = []
    try:
        for link in ("/usr/local/bin/scion", "/sbin/mount.fuse.scion"):
            aside = link + ".scion-test-aside"
            if os.path.lexists(link):
                os.rename(link, aside)
                saved.append((link, aside))
            else:
                saved.append((link, None))
            os.symlink(m.bin, link)
        yield
    finally:
        for link, aside in saved:
            if os.path.lexists(link):
                os.unlink(link)
            if aside:
                os.rename(aside, link)


def test_fstab_line_mounts_with_mount_and_unmounts_with_umount(scion_store, tmp_path):
    m = scion_store
    fstab = tmp_path / "fstab"
    fstab.write_text(
        f"{m.store} {m.mnt} fuse.scion defaults,_netdev,nofail,x-systemd.automount,snapdir=visible 0 0\n"
    )
    with helper(m):
        r = subprocess.run(["mount", "-T", str(fstab), m.mnt], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # A mount helper is silent on success (issue 35 item 4: every boot's `mount -a` printed).
    assert r.stdout == "" and r.stderr == "", r.stdout + r.stderr
    m._wait(lambda: is_mounted(m.mnt), 10, "the fstab mount")
    m.mounted = True
    # The mount's source is the store as given: `findmnt -S STORE` finds it.
    r = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", m.mnt], capture_output=True, text=True)
    assert r.stdout.split() == ["fuse.scion", m.store], r.stdout
    r = subprocess.run(["findmnt", "-n", "-o", "TARGET", "-S", m.store], capture_output=True, text=True)
    assert r.stdout.split() == [m.mnt], r.stdout
    os.makedirs(f"{m.mnt}/d")
    with open(f"{m.mnt}/d/f", "w") as h:
        h.write("written through the fstab mount\n")
    assert m.run("snapshot", "--name", "s", f"{m.mnt}/d").returncode == 0
    # snapdir=visible came through; fstab's own options did not reach scion (it would refuse them).
    assert ".snapshot" in os.listdir(f"{m.mnt}/d")
    pid = m.daemon_pid()
    r = subprocess.run(["umount", m.mnt], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m._wait(lambda: not pid_alive(pid), 60, "the daemon to flush and exit after umount")
    m.mounted = False
    m.check()
    m.mount()
    with open(f"{m.mnt}/d/.snapshot/s/f") as h:
        assert h.read() == "written through the fstab mount\n"


def test_mount_t_with_the_source_the_table_shows(scion_store):
    """`mount -t fuse.scion SOURCE MNT` with SOURCE as mountinfo shows it (the store's path, or
    `scion:PATH` as older mounts named it) mounts: the round trip tools like xfstests'
    `_check_mounted_on` rely on."""
    m = scion_store
    with helper(m):
        for source in (m.store, f"scion:{m.store}"):
            r = subprocess.run(["mount", "-t", "fuse.scion", source, m.mnt], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
            m._wait(lambda: is_mounted(m.mnt), 10, "the mount")
            m.mounted = True
            # The source as given: `umount SOURCE` finds the mount by it.
            r = subprocess.run(["findmnt", "-n", "-o", "SOURCE", m.mnt], capture_output=True, text=True)
            assert r.stdout.split() == [source], r.stdout
            assert m.run("list", m.mnt).returncode == 0
            if source.startswith("scion:"):
                assert subprocess.run(["umount", source], timeout=60).returncode == 0
                m._wait(lambda: not is_mounted(m.mnt), 10, "umount SOURCE")
                m.mounted = False
            else:
                m.umount()


def test_mount_right_after_a_plain_umount(scion_mount):
    """Issue 35 item 3: `umount MNT; mount MNT` (mount(8), systemd, a test harness): the
    daemon still writes its final checkpoint after the kernel let the mount go, and a mount
    right after waits for it instead of refusing the store as in use; nothing is lost."""
    m = scion_mount
    p = os.path.join(m.mnt, "big")
    with open(p, "wb") as h:
        for i in range(160):
            h.write(bytes([i]) * (1 << 20))  # buffered in the daemon: the final checkpoint writes it
    for _ in range(3):
        r = subprocess.run(["umount", m.mnt], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        m.mounted = False
        r = m.run("mount", m.store, m.mnt)
        assert r.returncode == 0, r.describe()
        m.mounted = True
        with open(p, "rb") as h:
            for i in (0, 80, 159):
                h.seek(i << 20)
                assert h.read(16) == bytes([i]) * 16
        with open(p, "r+b") as h:
            h.seek(120 << 20)
            h.write(b"x" * (8 << 20))  # more for the next final checkpoint to write


def test_remount_read_only_and_back(scion_mount):
    """Issue 36 item 1 (xfstests generic/294, 306, 452): `mount -o remount,ro MNT` through
    the helper makes the mount read-only (EROFS for writes, scion's commands refused, the
    daemon checkpointed) and `remount,rw` writable again, with no unmount; other flags
    (nosuid) change too. Before, the helper refused the option `remount`."""
    m = scion_mount
    with open(os.path.join(m.mnt, "before"), "w") as f:
        f.write("kept")
    with helper(m):
        r = subprocess.run(["mount", "-o", "remount,ro", m.mnt], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
        opts = subprocess.run(["findmnt", "-n", "-o", "OPTIONS", m.mnt], capture_output=True, text=True).stdout
        assert opts.startswith("ro,"), opts
        with pytest.raises(OSError) as e:
            open(os.path.join(m.mnt, "x"), "w")
        assert e.value.errno == errno.EROFS
        r = m.run("snapshot", m.mnt, "--name", "s")
        assert r.returncode != 0 and "read-only" in r.stderr, r.describe()
        st = json.loads(m.run("status", "--json", m.mnt).stdout.splitlines()[0])
        assert st["dirty_bytes"] == 0 and st["journal_bytes"] <= 64, st
        r = subprocess.run(["mount", "-o", "remount,rw,nosuid", m.mnt], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    opts = subprocess.run(["findmnt", "-n", "-o", "OPTIONS", m.mnt], capture_output=True, text=True).stdout
    assert opts.startswith("rw,nosuid,"), opts
    with open(os.path.join(m.mnt, "after"), "w") as f:
        f.write("written")
    assert m.run("snapshot", m.mnt, "--name", "s").returncode == 0
    with open(os.path.join(m.mnt, "before")) as f:
        assert f.read() == "kept"
