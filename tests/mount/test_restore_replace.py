"""`restore --replace` and `rollback` of a plain directory keep its history (issue 35 item
2): the directory's snapshots stay in its `.snapshot` (before, all of them were orphaned to
`@ID` and the obvious retry failed), its schedule and mirror stay, a shell inside it sees
the restored tree, and a file open across the restore keeps what it opened."""

import json
import os

import pytest

from conftest import PLAIN
from test_rollback import tree
from test_schedules import schedules

pytestmark = pytest.mark.skipif(PLAIN, reason="scion commands")


def test_restore_replace_keeps_the_directorys_snapshots(scion_mount):
    m = scion_mount
    h = os.path.join(m.mnt, "home2")
    os.makedirs(os.path.join(h, "docs"))
    with open(os.path.join(h, "docs", "a"), "w") as f:
        f.write("v1")
    os.chmod(h, 0o750)
    assert m.run("snapshot", h, "--name", "before").returncode == 0
    want = tree(h)
    assert m.run("snapshot", "schedule", h, "--every", "1h", "--keep", "last=3").returncode == 0
    with open(os.path.join(h, "docs", "a"), "w") as f:
        f.write("v2")
    with open(os.path.join(h, "new"), "w") as f:
        f.write("made after")
    os.chmod(h, 0o755)
    assert m.run("snapshot", h, "--name", "after").returncode == 0
    ino = os.stat(h).st_ino
    held = open(os.path.join(h, "new"))
    cwd = os.getcwd()
    os.chdir(h)
    try:
        r = m.run("restore", h, "--from", "before", "--replace")
        assert r.returncode == 0, r.describe()
        # A shell inside sees the restored tree; the directory is the same one.
        assert sorted(os.listdir(".")) == ["docs"]
    finally:
        os.chdir(cwd)
    assert held.read() == "made after", "an open file keeps what it opened"
    held.close()
    assert os.stat(h).st_ino == ino
    assert tree(h) == want and oct(os.stat(h).st_mode) == oct(0o40750)
    assert sorted(os.listdir(os.path.join(h, ".snapshot"))) == ["after", "before"]
    r = m.run("list", "--orphaned", "--json", m.mnt)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout
    # The retry a user makes works, and so does the way forward again.
    r = m.run("restore", h, "--from", "before", "--replace")
    assert r.returncode == 0, r.describe()
    r = m.run("restore", h, "--from", "after", "--replace")
    assert r.returncode == 0, r.describe()
    with open(os.path.join(h, "docs", "a")) as f:
        assert f.read() == "v2"
    assert [r["dir"] for r in schedules(m)] == ["/home2"]
    # No hidden tree left beside it.
    assert [n for n in os.listdir(m.mnt) if "scion-" in n] == []


def test_rollback_of_a_plain_directory(scion_mount):
    """`scion rollback DIR --to SNAP` of a directory that is not a clone: in place, every
    snapshot kept (before, refused: clones only)."""
    m = scion_mount
    d = os.path.join(m.mnt, "proj")
    os.makedirs(os.path.join(d, "src"))
    for i in range(50):
        with open(os.path.join(d, "src", f"f{i}"), "w") as f:
            f.write(f"one {i}")
    assert m.run("snapshot", d, "--name", "one").returncode == 0
    want = tree(d)
    os.unlink(os.path.join(d, "src", "f3"))
    os.makedirs(os.path.join(d, "build"))
    assert m.run("snapshot", d, "--name", "two").returncode == 0
    r = m.run("rollback", d, "--to", "one")
    assert r.returncode == 0, r.describe()
    assert tree(d) == want
    assert sorted(os.listdir(os.path.join(d, ".snapshot"))) == ["one", "two"]
    r = m.run("rollback", d, "--to", "three")
    assert r.returncode == 1 and "no snapshot three" in r.stderr, r.describe()
    m.umount()
    out = m.check()
    assert "clean" in out, out
