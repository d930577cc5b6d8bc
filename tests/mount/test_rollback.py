"""`scion rollback` through the mount (issue 18 item 4): a clone becomes exactly its snapshot
again, every snapshot stays, a file held open keeps what it opened, refusals and exit codes."""

import os

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="rollback needs a scion mount")


def tree(top):
    """Every path below top with its kind, mode and bytes (symlinks: their target)."""
    out = {}
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != ".snapshot")
        for n in sorted(dirs + files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            if os.path.islink(p):
                what = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as h:
                    what = h.read()
            else:
                what = "dir"
            out[os.path.relpath(p, top)] = (st.st_mode, st.st_uid, what)
    return out


def test_rollback_of_a_clone(scion_mount):
    m = scion_mount
    src = os.path.join(m.mnt, "src")
    os.makedirs(os.path.join(src, "etc"))
    with open(os.path.join(src, "etc", "conf"), "w") as h:
        h.write("original\n")
    with open(os.path.join(src, "big"), "wb") as h:
        h.write(os.urandom(1 << 20))
    os.symlink("etc/conf", os.path.join(src, "link"))
    sb = os.path.join(m.mnt, "sandbox")
    assert m.run("clone", src, sb).returncode == 0
    r = m.run("snapshot", "--name", "clean", sb)
    assert r.returncode == 0, r.describe()
    clean = tree(sb)
    # An "install" into the sandbox: files changed, added, removed.
    with open(os.path.join(sb, "etc", "conf"), "a") as h:
        h.write("changed by the install\n")
    os.makedirs(os.path.join(sb, "usr", "lib"))
    with open(os.path.join(sb, "usr", "lib", "libnew.so"), "wb") as h:
        h.write(os.urandom(70000))
    os.remove(os.path.join(sb, "big"))
    r = m.run("snapshot", "--name", "installed", sb)
    assert r.returncode == 0, r.describe()
    installed = tree(sb)
    # A process holds a file of the sandbox open across the rollback.
    held = open(os.path.join(sb, "etc", "conf"), "r+")
    r = m.run("rollback", sb, "--to", "clean")
    assert r.returncode == 0, r.describe()
    assert tree(sb) == clean
    assert sorted(os.listdir(os.path.join(sb, ".snapshot"))) == ["clean", "installed"]
    assert tree(os.path.join(sb, ".snapshot", "installed")) == installed
    # The open file is the one it opened: its bytes, and it takes writes; the name now
    # gives the snapshot's file.
    assert held.read() == "original\nchanged by the install\n"
    held.write("more\n")
    held.flush()
    os.fsync(held.fileno())
    with open(os.path.join(sb, "etc", "conf")) as h:
        assert h.read() == "original\n"
    held.close()
    # And forward again.
    r = m.run("rollback", sb, "--to", "installed")
    assert r.returncode == 0, r.describe()
    assert tree(sb) == installed
    # The source is untouched.
    with open(os.path.join(src, "etc", "conf")) as h:
        assert h.read() == "original\n"
    # Refusals: no such snapshot (1), a path for --to (2). A plain directory rolls back in
    # place (test_restore_replace.py), the mount's root is refused (2).
    r = m.run("rollback", sb, "--to", "nope")
    assert r.returncode == 1 and "no snapshot nope" in r.stderr, r.describe()
    r = m.run("snapshot", "--name", "s", m.mnt)
    assert r.returncode == 0, r.describe()
    r = m.run("rollback", m.mnt, "--to", "s")
    assert r.returncode == 2 and "not a clone" in r.stderr and "restore" in r.stderr, r.describe()
    assert m.run("destroy", "-r", os.path.join(m.mnt, ".snapshot", "s")).returncode == 0
    r = m.run("rollback", sb, "--to", os.path.join(sb, ".snapshot", "clean"))
    assert r.returncode == 2, r.describe()
    assert m.run("rollback", "--help").returncode == 0
    m.umount()
    assert "clean" in m.check()
    m.mount()
    assert tree(sb) == installed
