"""`scion versions` through the mount (issue 18 item 3): every distinct version of a file
across the snapshots of its directory and of the directories above it, and the live one;
JSON Lines; `--deleted`; exit codes."""

import json
import os

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
