"""Mounted like a filesystem (issue 22 item 1): an /etc/fstab line of type `fuse.scion`
(here a temporary fstab, `mount -T`) mounts with plain `mount MOUNTPOINT`, through fuse3's
mount.fuse, which runs `scion STORE MOUNTPOINT -o OPTIONS`; fstab's own options (defaults,
_netdev, nofail, x-systemd.*) are dropped and scion's applied; the mount's type is
`fuse.scion` whoever mounts; plain `umount` unmounts and the daemon flushes and exits, leaving
a store that `check` finds clean, with what was written."""

import os
import subprocess

import pytest

from conftest import PLAIN
from scion_helpers import is_mounted, pid_alive

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="needs root and a scion store")


def test_fstab_line_mounts_with_mount_and_unmounts_with_umount(scion_store, tmp_path):
    m = scion_store
    fstab = tmp_path / "fstab"
    fstab.write_text(
        f"{m.store} {m.mnt} fuse.scion defaults,_netdev,nofail,x-systemd.automount,snapdir=visible 0 0\n"
    )
    # mount.fuse runs the program named by the type, `scion`, from the system's PATH, where
    # a package installs it; the binary under test is linked there for the test.
    link = "/usr/local/bin/scion"
    ours = not os.path.lexists(link)
    if ours:
        os.symlink(m.bin, link)
    try:
        r = subprocess.run(["mount", "-T", str(fstab), m.mnt], capture_output=True, text=True, timeout=60)
    finally:
        if ours:
            os.unlink(link)
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
    link = "/usr/local/bin/scion"
    ours = not os.path.lexists(link)
    if ours:
        os.symlink(m.bin, link)
    try:
        for source in (m.store, f"scion:{m.store}"):
            r = subprocess.run(["mount", "-t", "fuse.scion", source, m.mnt], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
            m._wait(lambda: is_mounted(m.mnt), 10, "the mount")
            m.mounted = True
            r = subprocess.run(["findmnt", "-n", "-o", "SOURCE", m.mnt], capture_output=True, text=True)
            assert r.stdout.split() == [m.store], r.stdout
            assert m.run("list", m.mnt).returncode == 0
            m.umount()
    finally:
        if ours:
            os.unlink(link)


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
