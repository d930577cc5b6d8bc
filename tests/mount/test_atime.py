"""Access times (issue 36 item 8, xfstests generic/192): FUSE leaves atime to the filesystem
and the kernel serves cached reads itself, so scion sets it when a file is opened for
reading, by the mount's rule: relatime by default (when atime is not newer than the last
change, or is a day old), noatime never, strictatime always. ctime never moves for an
access. Before, atime stayed as the file was made."""

import os
import time

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="mount options")


def read(p):
    with open(p, "rb") as f:
        return f.read()


def test_relatime(scion_mount):
    p = os.path.join(scion_mount.mnt, "f")
    with open(p, "w") as f:
        f.write("test")
    before = os.stat(p)
    time.sleep(1.1)
    read(p)
    after = os.stat(p)
    assert after.st_atime_ns > before.st_atime_ns + 1_000_000_000 - 1, (before.st_atime_ns, after.st_atime_ns)
    assert after.st_ctime_ns == before.st_ctime_ns and after.st_mtime_ns == before.st_mtime_ns
    # Newer than the last change: a second read leaves it (relatime).
    time.sleep(1.1)
    read(p)
    assert os.stat(p).st_atime_ns == after.st_atime_ns
    # Kept across a remount.
    scion_mount.umount()
    scion_mount.mount()
    assert os.stat(p).st_atime_ns == after.st_atime_ns
    # O_NOATIME (the owner's) leaves it too.
    with open(p, "w") as f:
        f.write("changed")
    changed = os.stat(p).st_atime_ns
    fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
    os.close(fd)
    assert os.stat(p).st_atime_ns == changed


@pytest.mark.parametrize("rule", ["noatime", "strictatime"])
def test_noatime_and_strictatime(scion_mount, rule):
    m = scion_mount
    m.umount()
    m.mount(rule)
    p = os.path.join(m.mnt, "f")
    with open(p, "w") as f:
        f.write("test")
    read(p)
    first = os.stat(p).st_atime_ns
    time.sleep(1.1)
    read(p)
    moved = os.stat(p).st_atime_ns != first
    assert moved == (rule == "strictatime"), (rule, first)
