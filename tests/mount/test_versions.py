"""`scion versions` through the mount (issue 18 item 3): every distinct version of a file
across the snapshots of its directory and of the directories above it, and the live one;
JSON Lines; `--deleted`; exit codes."""

import json
import os
import time

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="versions need a scion mount")


def versions(m, path, *extra):
    r = m.run("versions", "--json", *extra, path)
    return r, [json.loads(line) for line in r.stdout.splitlines()]


def test_versions_of_a_file_across_snapshots(scion_mount):
    m = scion_mount
    top = os.path.join(m.mnt, "top")
    d = os.path.join(top, "d")
    os.makedirs(d)
    f = os.path.join(d, "f")

    def write(text):
        with open(f, "w") as h:
            h.write(text)

    def snap(dirpath, name):
        r = m.run("snapshot", "--name", name, dirpath)
        assert r.returncode == 0, r.describe()

    write("one")
    snap(d, "a")
    snap(top, "b")          # the same version, held by a snapshot of the directory above
    write("two, longer")
    snap(d, "c")
    os.remove(f)
    snap(top, "e")          # does not hold it
    write("three")
    r, v = versions(m, f)
    assert r.returncode == 0, r.describe()
    assert [x["size"] for x in v] == [3, 11, 5], v
    assert sorted(v[0]["snapshots"]) == ["/top/.snapshot/b", "/top/d/.snapshot/a"], v
    assert v[1]["snapshots"] == ["/top/d/.snapshot/c"] and not v[1]["live"], v
    assert v[2]["live"] and v[2]["snapshots"] == [], v
    assert all(x["kind"] == "file" and x["mtime"].endswith("Z") for x in v), v
    # What each version's snapshot path holds is that version.
    with open(os.path.join(m.mnt, v[1]["snapshots"][0].lstrip("/"), "f")) as h:
        assert h.read() == "two, longer"
    # The table form.
    r = m.run("versions", f)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 4, r.describe()
    # Gone from the live tree: the snapshots still answer, and --deleted names it.
    os.remove(f)
    r, v = versions(m, f)
    assert r.returncode == 0 and len(v) == 2 and not any(x["live"] for x in v), r.describe()
    r, dl = versions(m, d, "--deleted")
    assert r.returncode == 0, r.describe()
    assert dl == [{"path": "f", "snapshot": "/top/d/.snapshot/c", "kind": "file"}], dl
    # Nothing anywhere: exit 1; a path with .snapshot in it: exit 2.
    r, _ = versions(m, os.path.join(d, "never"))
    assert r.returncode == 1, r.describe()
    r = m.run("versions", os.path.join(d, ".snapshot", "a", "f"))
    assert r.returncode == 2, r.describe()
    write("four")
    r, dl = versions(m, d, "--deleted")
    assert r.returncode == 1 and dl == [], r.describe()
    m.umount()
    m.check()


def test_restore_puts_back_what_a_snapshot_held(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "proj")
    os.makedirs(os.path.join(d, "src"))
    big = os.urandom(3 << 20)
    with open(os.path.join(d, "src", "big"), "wb") as h:
        h.write(big)
    with open(os.path.join(d, "src", "a.c"), "w") as h:
        h.write("int main;")
    os.chmod(os.path.join(d, "src", "a.c"), 0o600)
    os.symlink("a.c", os.path.join(d, "src", "link"))
    r = m.run("snapshot", "--name", "good", d)
    assert r.returncode == 0, r.describe()
    # Damage: a file rewritten, one removed, the directory changed.
    with open(os.path.join(d, "src", "a.c"), "w") as h:
        h.write("broken")
    os.remove(os.path.join(d, "src", "big"))
    # A single file by snapshot name; what is there is set aside.
    r = m.run("restore", os.path.join(d, "src", "a.c"), "--from", "good")
    assert r.returncode == 0, r.describe()
    with open(os.path.join(d, "src", "a.c")) as h:
        assert h.read() == "int main;"
    assert os.stat(os.path.join(d, "src", "a.c")).st_mode & 0o777 == 0o600
    kept = [n for n in os.listdir(os.path.join(d, "src")) if n.startswith("a.c.scion-restore-")]
    assert len(kept) == 1, os.listdir(os.path.join(d, "src"))
    # A whole directory by a path into the snapshot, replacing; the big file comes back
    # shared (the store does not grow by its size).
    du = lambda: sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(os.path.join(m.store, "packs")) for f in fs)
    os.sync()
    before = du()
    r = m.run("restore", os.path.join(d, "src"), "--from", os.path.join(d, ".snapshot", "good", "src"), "--replace")
    assert r.returncode == 0, r.describe()
    with open(os.path.join(d, "src", "big"), "rb") as h:
        assert h.read() == big
    assert os.readlink(os.path.join(d, "src", "link")) == "a.c"
    assert not any(n.startswith("a.c.scion-restore-") for n in os.listdir(os.path.join(d, "src")))
    os.sync()
    time.sleep(1)
    assert du() - before < (1 << 20), (before, du())
    # To a new place, and refusals: an unknown snapshot, a destination in another store.
    r = m.run("restore", os.path.join(d, "src"), "--from", "good", "--to", os.path.join(m.mnt, "copy"))
    assert r.returncode == 0, r.describe()
    assert sorted(os.listdir(os.path.join(m.mnt, "copy"))) == ["a.c", "big", "link"]
    r = m.run("restore", os.path.join(d, "src"), "--from", "nope")
    assert r.returncode == 2 and "no snapshot named nope" in r.stderr, r.describe()
    m.umount()
    m.check()
