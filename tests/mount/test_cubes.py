"""Cubes (issue 21, in part): `scion cube create|set|list|recover` and `check --cube`
through the mount. A cube is a store of its own shown at its directory: moves across its
edge are EXDEV (mv copies), it and the directories above it cannot be removed or renamed
(EBUSY), commands on paths inside it run on the cube (snapshots there), a snapshot of a
directory above it holds its directory empty (as btrfs does with nested subvolumes), fsynced
data in it survives a SIGKILL of the daemon, and a damaged block in one cube makes that cube
read-only (EROFS) or fenced (EIO) by its policy while the rest of the mount and the other
cube go on; `cube recover` serves it again without a remount."""

import errno
import json
import os
import random
import shutil
import subprocess
import time

import pytest

from conftest import PLAIN, remount_with_failpoints

pytestmark = pytest.mark.skipif(PLAIN, reason="cubes need a scion mount")


def cubes(m):
    r = m.run("cube", "list", "--json", m.mnt)
    assert r.returncode == 0, r.describe()
    return {os.path.relpath(c["path"], m.mnt): c for c in map(json.loads, r.stdout.splitlines())}


def damage(store_dir, data):
    """Overwrite, in the packs of a store, the 64 KiB where the bytes of `data` begin (a
    file's data, stored as written). Returns how many places were hit."""
    packs = os.path.join(store_dir, "packs")
    needle, hit = data[:4096], 0
    for f in os.listdir(packs):
        with open(os.path.join(packs, f), "r+b") as h:
            blob = h.read()
            at = blob.find(needle)
            while at >= 0:
                h.seek(at)
                h.write(os.urandom(64 << 10))
                hit += 1
                at = blob.find(needle, at + 1)
    assert hit, f"the data is in no pack of {store_dir}"
    return hit


def test_cubes_through_the_mount(scion_mount):
    m = scion_mount
    c1, c2 = os.path.join(m.mnt, "c1"), os.path.join(m.mnt, "sub", "c2")
    os.makedirs(os.path.join(m.mnt, "sub"))
    assert m.run("cube", "create", c1).returncode == 0
    r = m.run("cube", "create", c2, "--mode", "nofsync", "--on-error", "fence")
    assert r.returncode == 0, r.describe()
    # Refusals: an existing directory, a cube in a cube, modes not built, unknown words.
    for args, why in [
        ((c1,), "exists"),
        ((os.path.join(c1, "inner"),), "do not nest"),
        ((os.path.join(m.mnt, "x"), "--mode", "fast"), "unknown mode"),
        ((os.path.join(m.mnt, "x"), "--on-error", "panic"), "unknown"),
    ]:
        r = m.run("cube", "create", *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.describe())
    rows = cubes(m)
    assert set(rows) == {"c1", "sub/c2"}
    assert set(rows["c1"]) == {"path", "id", "mode", "on_error", "state", "why", "used"}
    assert (rows["c1"]["mode"], rows["c1"]["on_error"], rows["c1"]["state"]) == ("ordered", "readonly", "ok")
    assert (rows["sub/c2"]["mode"], rows["sub/c2"]["on_error"]) == ("nofsync", "fence")
    assert "ID" in m.run("cube", "list", m.mnt).stdout
    lines = m.run("cube", "list", "-H", "-p", m.mnt).stdout.splitlines()
    assert sorted(ln.split("\t")[5] for ln in lines) == [c1, c2]
    assert all(ln.split("\t")[4].isdigit() for ln in lines), lines

    # Files in each; the cube's root is its own (another device-less volume: other inodes).
    for d in (c1, c2):
        with open(os.path.join(d, "small"), "w") as h:
            h.write(d)
        os.makedirs(os.path.join(d, "dir"))
    big = os.urandom(4 << 20)
    for d in (c1, c2):
        with open(os.path.join(d, "big"), "wb") as h:
            h.write(big)
            os.fsync(h.fileno())
    assert os.stat(c1).st_ino != os.stat(m.mnt).st_ino
    assert sorted(os.listdir(c1)) == ["big", "dir", "small"] == sorted(os.listdir(c2))
    assert "c1" in os.listdir(m.mnt)
    # Across the edge: EXDEV for rename(2) and link(2); mv copies.
    with pytest.raises(OSError) as e:
        os.rename(os.path.join(c1, "small"), os.path.join(m.mnt, "moved"))
    assert e.value.errno == errno.EXDEV
    with pytest.raises(OSError) as e:
        os.link(os.path.join(c1, "small"), os.path.join(c2, "linked"))
    assert e.value.errno == errno.EXDEV
    # The cube and the directories above it stay where they are.
    for f, args in [(os.rmdir, (c2,)), (os.rename, (os.path.join(m.mnt, "sub"), os.path.join(m.mnt, "sub2"))),
                    (os.rename, (c1, os.path.join(m.mnt, "c9")))]:
        with pytest.raises(OSError) as e:
            f(*args)
        assert e.value.errno == errno.EBUSY, f
    # Commands inside a cube run on it; across volumes they are refused.
    r = m.run("snapshot", "--name", "s1", c1)
    assert r.returncode == 0, r.describe()
    assert os.listdir(os.path.join(c1, ".snapshot")) == ["s1"]
    assert sorted(os.listdir(os.path.join(c1, ".snapshot", "s1"))) == ["big", "dir", "small"]
    r = m.run("clone", os.path.join(c1, "dir"), os.path.join(c1, "dir2"))
    assert r.returncode == 0, r.describe()
    # Listings of what lies in a cube name paths from the mount root.
    r = m.run("list", "--json", c1)
    assert r.returncode == 0, r.describe()
    paths = sorted(json.loads(x)["path"] for x in r.stdout.splitlines())
    assert paths == ["/c1/.snapshot/s1", "/c1/dir2"], paths  # (store paths, as list prints them)
    # The mount's listing holds the cubes' too, with ids of their own in the mount: `destroy
    # @ID` of a cube's row takes that one, never the main tree's of the same number there.
    os.makedirs(os.path.join(m.mnt, "plain"))
    assert m.run("snapshot", "--name", "main-s", os.path.join(m.mnt, "plain")).returncode == 0
    rows = {json.loads(x)["path"]: json.loads(x) for x in m.run("list", "--json", m.mnt).stdout.splitlines()}
    assert {"/c1/.snapshot/s1", "/c1/dir2", "/plain/.snapshot/main-s"} <= set(rows), rows
    assert len({r["id"] for r in rows.values()}) == len(rows), rows
    assert m.run("clone", os.path.join(c1, "dir"), os.path.join(c1, "dir3")).returncode == 0
    rows = {json.loads(x)["path"]: json.loads(x) for x in m.run("list", "--json", m.mnt).stdout.splitlines()}
    assert rows["/c1/dir3"]["origin"] == "/c1/dir", rows  # (the mount's path, not the cube's)
    r = m.run("destroy", f"@{rows['/c1/dir3']['id']}", "--mount", m.mnt)
    assert r.returncode == 0, r.describe()
    assert not os.path.exists(os.path.join(c1, "dir3")) and os.path.isdir(os.path.join(c1, "dir2"))
    assert os.listdir(os.path.join(m.mnt, "plain", ".snapshot")) == ["main-s"]
    assert m.run("destroy", os.path.join(m.mnt, "plain", ".snapshot", "main-s")).returncode == 0
    os.rmdir(os.path.join(m.mnt, "plain"))
    r = m.run("versions", "--json", os.path.join(c1, "small"))
    assert r.returncode == 0, r.describe()
    assert "c1/.snapshot/s1" in r.stdout, r.stdout
    r = m.run("clone", c1, os.path.join(m.mnt, "copy"))  # out of the cube: a copy
    assert r.returncode == 0 and "copied" in r.stdout, r.describe()
    assert sorted(os.listdir(os.path.join(m.mnt, "copy"))) == ["big", "dir", "dir2", "small"]
    r = m.run("diff", c1, os.path.join(m.mnt, "copy"))  # commands naming two volumes: refused
    assert r.returncode == 2 and "cubes" in r.stderr, r.describe()
    # A snapshot of the root holds the cubes' directories empty, and snapshots each cube
    # under the same name.
    assert m.run("snapshot", "--name", "root", m.mnt).returncode == 0
    assert os.listdir(os.path.join(m.mnt, ".snapshot", "root", "c1")) == []
    assert sorted(os.listdir(os.path.join(c1, ".snapshot"))) == ["root", "s1"]
    assert os.listdir(os.path.join(c2, ".snapshot")) == ["root"]
    assert sorted(os.listdir(os.path.join(c2, ".snapshot", "root"))) == ["big", "dir", "small"]

    # A cube checked online while another is written: the check is clean, the writer in the
    # other cube never fails, and the checked cube serves again after it.
    import threading
    stop, errors, written = threading.Event(), [], [0]

    def writer():
        while not stop.is_set():
            try:
                with open(os.path.join(c2, "w%d" % (written[0] % 50)), "wb") as h:
                    h.write(os.urandom(65536))
                    os.fsync(h.fileno())
                written[0] += 1
            except OSError as e:
                errors.append(e)
                return
    t = threading.Thread(target=writer)
    t.start()
    r = m.run("cube", "check", c1, "--json")
    stop.set()
    t.join()
    assert r.returncode == 0, r.describe()
    assert json.loads(r.stdout)["clean"] is True
    assert not errors and written[0] > 0, (errors, written)
    with open(os.path.join(c1, "big"), "rb") as h:
        assert h.read() == big

    with open(os.path.join(c1, "after-check"), "w") as h:
        h.write("journaled")
        h.flush()
        os.fsync(h.fileno())

    # A nojournal cube: nothing goes to its journal; an fsync takes a checkpoint, so what it
    # covers survives the SIGKILL below.
    c3 = os.path.join(m.mnt, "c3")
    assert m.run("cube", "create", c3, "--mode", "nojournal").returncode == 0
    with open(os.path.join(c3, "kept"), "wb") as h:
        h.write(big[:100000])
        os.fsync(h.fileno())
    # A data cube: the fsynced 1 MiB is in its journal, not written ahead to its packs.
    c4 = os.path.join(m.mnt, "c4")
    assert m.run("cube", "create", c4, "--mode", "data").returncode == 0
    with open(os.path.join(c4, "j"), "wb") as h:
        h.write(big[:1 << 20])
        os.fsync(h.fileno())
    # A writeback cube: its background syncs journal without its packs; what fsync covered
    # is there after the SIGKILL, and a file written after is whole or older, never garbage.
    c5 = os.path.join(m.mnt, "c5")
    assert m.run("cube", "create", c5, "--mode", "writeback").returncode == 0
    with open(os.path.join(c5, "w"), "wb") as h:
        h.write(big[:300000])
        h.flush()
        os.fsync(h.fileno())
    with open(os.path.join(c5, "w2"), "wb") as h:
        h.write(big[:200000])
    with open(os.path.join(c3, "later"), "wb") as h:
        h.write(big[:200000])
    os.sync()
    import time
    time.sleep(1.5)  # three rounds of the background sync, which an ordered cube journals in

    # fsynced data in the cube survives a SIGKILL of the daemon.
    m.kill9()
    # Before the remount replays them: the ordered cube's journal holds its changes since
    # its last checkpoint, the nojournal cube's none.
    records = lambda c: int(m.run("check", m.store, "--cube", c).stdout.split("journal: ")[1].split()[0])
    assert records("c1") > 0 and records("c3") == 0, (records("c1"), records("c3"))
    j4 = os.path.join(m.store, "cubes.d", "4", "journal")
    packs4 = os.path.join(m.store, "cubes.d", "4", "packs")
    used = lambda d: sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in os.listdir(d))
    assert records("c4") > 0 and used(packs4) < (1 << 20), used(packs4)
    m.mount()
    with open(os.path.join(c1, "big"), "rb") as h:
        assert h.read() == big
    with open(os.path.join(c3, "kept"), "rb") as h:
        assert h.read() == big[:100000]
    assert not os.path.exists(os.path.join(c3, "later"))  # after its last checkpoint: gone
    with open(os.path.join(c4, "j"), "rb") as h:
        assert h.read() == big[:1 << 20]
    assert cubes(m)["c3"]["mode"] == "nojournal"
    assert cubes(m)["c5"]["mode"] == "writeback"
    with open(os.path.join(c5, "w"), "rb") as h:
        assert h.read() == big[:300000]
    if os.path.exists(os.path.join(c5, "w2")):
        with open(os.path.join(c5, "w2"), "rb") as h:
            w2 = h.read()
        assert all(b in (0, big[i]) for i, b in enumerate(w2)), "bytes that were never there"

    # (c2's fsync returned at once, mode nofsync: its big file may be lost; written again.)
    with open(os.path.join(c2, "big"), "wb") as h:
        h.write(big)
    assert cubes(m)["c1"]["state"] == "ok"
    m.umount()
    for c in ("c1", "sub/c2", "c3", "c4", "c5"):
        r = m.run("check", m.store, "--cube", c)
        assert r.returncode == 0 and "clean" in r.stdout, r.describe()
    assert m.run("check", m.store, "--cube", "nope").returncode == 2

    # A damaged block in c1 (policy readonly): reads of it fail, changes get EROFS, the
    # undamaged file still reads; the root and c2 go on.
    damage(os.path.join(m.store, "cubes.d", "1"), big)
    m.mount()
    with pytest.raises(OSError) as e:
        with open(os.path.join(c1, "big"), "rb") as h:
            h.read()
    assert e.value.errno == errno.EIO
    rows = cubes(m)
    assert rows["c1"]["state"] == "read-only" and rows["c1"]["why"], rows["c1"]
    with pytest.raises(OSError) as e:
        open(os.path.join(c1, "new"), "w").close()
    assert e.value.errno == errno.EROFS
    with open(os.path.join(c1, "small")) as h:
        assert h.read() == c1
    with open(os.path.join(m.mnt, "root-file"), "w") as h:
        h.write("fine")
    with open(os.path.join(c2, "more"), "w") as h:
        h.write("fine")
    assert rows["sub/c2"]["state"] == "ok"
    # Recovered without a remount: served again from its store (the damage is still
    # there, so only what is undamaged reads).
    r = m.run("cube", "recover", c1)
    assert r.returncode == 0, r.describe()
    assert cubes(m)["c1"]["state"] == "ok"
    with open(os.path.join(c1, "after"), "w") as h:
        h.write("writable again")

    # A cube with policy fence: after a failure every access gets EIO.
    m.umount()
    damage(os.path.join(m.store, "cubes.d", "2"), big)
    m.mount()
    with pytest.raises(OSError) as e:
        with open(os.path.join(c2, "big"), "rb") as h:
            h.read()
    assert e.value.errno == errno.EIO
    assert cubes(m)["sub/c2"]["state"] == "fenced"
    with pytest.raises(OSError) as e:
        os.listdir(c2)
    assert e.value.errno == errno.EIO
    with open(os.path.join(m.mnt, "root-file")) as h:
        assert h.read() == "fine"
    m.umount()


def ten_cubes_holding(m, data):
    """Ten cubes `cube0`..`cube9` (ids 1..10), each and the root holding `data` as `data`;
    the store is left unmounted. Returns the cubes' directories."""
    dirs = [os.path.join(m.mnt, f"cube{i}") for i in range(10)]
    for d in dirs:
        assert m.run("cube", "create", d).returncode == 0
    for d in dirs + [m.mnt]:
        with open(os.path.join(d, "data"), "wb") as h:
            h.write(data)
    m.umount()
    return dirs


def test_a_fault_in_one_cube_of_ten_stays_there(scion_mount):
    """Ten cubes and the root each hold a file; three cubes' packs are damaged while
    unmounted. After the remount exactly those three fail (EIO on their damaged file, state
    read-only), every other cube and the root read and write as before: 3 faults injected,
    3 localized."""
    m = scion_mount
    data = os.urandom(2 << 20)
    dirs = ten_cubes_holding(m, data)
    hit = {2, 5, 7}
    for i in hit:
        damage(os.path.join(m.store, "cubes.d", str(i + 1)), data)
    m.mount()
    failed = set()
    for i, d in enumerate(dirs):
        try:
            with open(os.path.join(d, "data"), "rb") as h:
                assert h.read() == data
        except OSError as e:
            assert e.errno == errno.EIO
            failed.add(i)
    assert failed == hit, (failed, hit)
    with open(os.path.join(m.mnt, "data"), "rb") as h:
        assert h.read() == data
    rows = cubes(m)
    assert {k for k, r in rows.items() if r["state"] != "ok"} == {f"cube{i}" for i in hit}, rows
    for i, d in enumerate(dirs):
        target = os.path.join(d, "after")
        if i in hit:
            with pytest.raises(OSError) as e:
                open(target, "w").close()
            assert e.value.errno == errno.EROFS
        else:
            with open(target, "w") as h:
                h.write("ok")
    print(f"faults injected {len(hit)}, localized {len(failed & hit)}")
    m.umount()
    # `scion check STORE` checks the store and every cube: exit 1, naming exactly those.
    r = m.run("check", m.store, "--json")
    assert r.returncode == 1, r.describe()
    rep = json.loads(r.stdout)
    assert rep["clean"] is False and rep["problems"] == []  # the main volume's own are fine
    assert {c["path"] for c in rep["cubes"] if not c["report"]["clean"]} == {f"/cube{i}" for i in hit}
    assert len(rep["cubes"]) == 10


def test_a_cube_whose_store_cannot_be_opened(scion_mount):
    """A cube whose store will not open is listed as unavailable and its directory gives
    EIO (not an empty directory); once its store is back, `cube recover` serves it, and
    `cube check` checks it online."""
    m = scion_mount
    c = os.path.join(m.mnt, "c")
    assert m.run("cube", "create", c).returncode == 0
    with open(os.path.join(c, "f"), "w") as h:
        h.write("kept")
    m.umount()
    sb = os.path.join(m.store, "cubes.d", "1", "superblock")
    os.rename(sb, sb + ".away")
    m.mount()
    with pytest.raises(OSError) as e:
        os.listdir(c)
    assert e.value.errno == errno.EIO
    row = cubes(m)["c"]
    assert row["state"] == "unavailable" and "superblock" in row["why"], row
    os.rename(sb + ".away", sb)
    r = m.run("cube", "recover", c)
    assert r.returncode == 0, r.describe()
    with open(os.path.join(c, "f")) as h:
        assert h.read() == "kept"
    r = m.run("cube", "check", c)
    assert r.returncode == 0 and "clean" in r.stdout, r.describe()
    m.umount()


def test_a_cube_below_a_damaged_directory_stays_reachable(scion_mount):
    """The directory above a cube is damaged (its tree node overwritten while unmounted):
    its path cannot be walked, but the cube is served (found by the inode number its table
    entry records) and reached at MNT/.cubes/ID, whole; `cube list` and `scion check` say
    so."""
    m = scion_mount
    os.makedirs(os.path.join(m.mnt, "top", "zzqqabove"))
    c = os.path.join(m.mnt, "top", "zzqqabove", "c")
    assert m.run("cube", "create", c).returncode == 0
    data = os.urandom(300000)
    with open(os.path.join(c, "f"), "wb") as h:
        h.write(data)
    assert os.listdir(os.path.join(m.mnt, ".cubes")) == ["1"]
    m.umount()
    packs = os.path.join(m.store, "packs")
    hit = 0
    for f in os.listdir(packs):
        with open(os.path.join(packs, f), "r+b") as h:
            blob = h.read()
            at = blob.find(b"zzqqabove")
            while at >= 0:
                h.seek(max(0, at - 256))
                h.write(os.urandom(512))
                hit += 1
                at = blob.find(b"zzqqabove", at + 1)
    assert hit, "the directory's entry is in no pack"
    m.mount()
    with pytest.raises(OSError) as e:
        os.listdir(os.path.join(m.mnt, "top", "zzqqabove"))
    assert e.value.errno == errno.EIO
    row = cubes(m)["top/zzqqabove/c"]
    assert row["state"] == "ok" and ".cubes/1" in row["why"], row
    with open(os.path.join(m.mnt, ".cubes", "1", "f"), "rb") as h:
        assert h.read() == data
    with open(os.path.join(m.mnt, ".cubes", "1", "g"), "w") as h:
        h.write("still writable")
    assert sorted(os.listdir(os.path.join(m.mnt, ".cubes", "1"))) == ["f", "g"]
    assert ".cubes" not in os.listdir(m.mnt)
    m.umount()
    r = m.run("check", m.store)
    assert r.returncode == 1, r.describe()
    assert "cube /top/zzqqabove/c: clean" in r.stdout and ".cubes/1" in r.stdout, r.describe()
    assert m.run("check", m.store, "--cube", "top/zzqqabove/c").returncode == 0


def tree(root):
    """Every path below root with its kind, mode, link count, mtime, xattrs and bytes."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".snapshot")
        for n in sorted(files) + dirs:
            p = os.path.join(d, n)
            st = os.lstat(p)
            data = None
            if os.path.islink(p):
                data = os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as h:
                    data = h.read()
            xa = {} if os.path.islink(p) else {k: os.getxattr(p, k) for k in os.listxattr(p)}
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_nlink if not os.path.isdir(p) else 0,
                                             st.st_mtime_ns if not os.path.isdir(p) else 0, xa, data)
    return out


def test_convert_copy_across_and_remove(scion_mount):
    """`cube create --convert` makes an existing directory a cube with everything in it
    (hard links, symlinks, a FIFO, xattrs, mtimes, a sparse file kept sparse); a clone into
    or out of a cube is a copy; `cube remove` makes it an ordinary directory again with the
    same tree; `check` is clean and no cube store is left."""
    m = scion_mount
    p = os.path.join(m.mnt, "proj")
    os.makedirs(os.path.join(p, "sub", "deep"))
    with open(os.path.join(p, "f"), "wb") as h:
        h.write(os.urandom(200000))
    os.link(os.path.join(p, "f"), os.path.join(p, "sub", "hard"))
    os.symlink("../f", os.path.join(p, "sub", "sl"))
    os.mkfifo(os.path.join(p, "fifo"))
    os.setxattr(os.path.join(p, "f"), "user.k", b"v")
    with open(os.path.join(p, "sparse"), "wb") as h:
        h.truncate(8 << 20)
        h.seek(4 << 20)
        h.write(b"x" * 5000)
    with open(os.path.join(p, "sub", "deep", "small"), "w") as h:
        h.write("small")
    os.utime(os.path.join(p, "sub", "deep", "small"), ns=(1, 1_500_000_000_000_000_000))
    before = tree(p)
    r = m.run("cube", "create", p, "--convert")
    assert r.returncode == 0 and "entries" in r.stdout, r.describe()
    assert tree(p) == before
    assert cubes(m)["proj"]["state"] == "ok"
    assert os.stat(os.path.join(p, "sparse")).st_blocks * 512 < 1 << 20  # still sparse
    assert sorted(os.listdir(m.mnt)) == ["proj"]  # the original is gone
    # A clone out of the cube, and into another cube: copies, equal.
    r = m.run("clone", os.path.join(p, "sub"), os.path.join(m.mnt, "out"))
    assert r.returncode == 0 and "copied" in r.stdout, r.describe()
    # (sub/hard has a second name outside sub, which the copy of sub cannot hold.)
    unlinked = lambda t: {k: (v[0], 0, *v[2:]) for k, v in t.items()}
    assert unlinked(tree(os.path.join(m.mnt, "out"))) == unlinked(tree(os.path.join(p, "sub")))
    assert m.run("cube", "create", os.path.join(m.mnt, "other")).returncode == 0
    r = m.run("clone", os.path.join(p, "sub"), os.path.join(m.mnt, "other", "in"))
    assert r.returncode == 0 and "copied" in r.stdout, r.describe()
    assert unlinked(tree(os.path.join(m.mnt, "other", "in"))) == unlinked(tree(os.path.join(p, "sub")))
    # Back to an ordinary directory, the same tree.
    r = m.run("cube", "remove", p)
    assert r.returncode == 0, r.describe()
    assert tree(p) == before
    assert set(cubes(m)) == {"other"}
    assert m.run("cube", "remove", os.path.join(m.mnt, "out")).returncode == 2
    os.rename(p, os.path.join(m.mnt, "proj2"))  # an ordinary directory: movable
    m.umount()
    assert "clean" in m.check()
    assert os.listdir(os.path.join(m.store, "cubes.d")) == ["2"]


def test_check_repair_of_a_cube(scion_mount):
    """A damaged file in a cube: `scion check STORE --cube PATH --repair` removes it (named
    in `lost`), leaves the other files, and the cube checks clean and serves again."""
    m = scion_mount
    c = os.path.join(m.mnt, "c")
    assert m.run("cube", "create", c).returncode == 0
    bad, good = os.urandom(300000), os.urandom(300000)
    for name, data in (("bad", bad), ("good", good)):
        with open(os.path.join(c, name), "wb") as h:
            h.write(data)
    m.umount()
    damage(os.path.join(m.store, "cubes.d", "1"), bad)
    assert m.run("check", m.store, "--cube", "c").returncode == 1
    r = m.run("check", m.store, "--cube", "c", "--repair", "--json")
    assert r.returncode == 0, r.describe()
    rep = json.loads(r.stdout)
    assert rep["lost"] == ["/bad"] and rep["left"] == [] and rep["report"]["clean"], rep
    assert "clean" in m.check()
    m.mount()
    assert os.listdir(c) == ["good"]
    with open(os.path.join(c, "good"), "rb") as h:
        assert h.read() == good
    assert cubes(m)["c"]["state"] == "ok"
    m.umount()


def test_a_schedule_above_cubes_snapshots_and_thins_them_with_it(scion_mount):
    """A schedule of a directory that holds a cube takes each of its snapshots in the cube
    too, under the same name and marked scheduled, and its retention removes the cube's with
    its own; a snapshot taken in the cube by hand is never touched."""
    m = scion_mount
    top = os.path.join(m.mnt, "top")
    os.mkdir(top)
    c = os.path.join(top, "c")
    assert m.run("cube", "create", c).returncode == 0
    with open(os.path.join(c, "f"), "w") as h:
        h.write("in the cube")
    assert m.run("snapshot", "--name", "by-hand", c).returncode == 0
    r = m.run("snapshot", "schedule", top, "--every", "1s", "--keep", "last=2")
    assert r.returncode == 0, r.describe()
    log = lambda: open(os.path.join(m.store, "daemon.log"), errors="replace").read()
    m._wait(lambda: log().count("of cube /top/c") >= 5 and "removed snapshot" in log(), 30,
            "scheduled snapshots of the cube taken and thinned")
    assert m.run("snapshot", "schedule", "--remove", top).returncode == 0
    time.sleep(2)  # a round that was under way when the schedule went ends
    above = sorted(os.listdir(os.path.join(top, ".snapshot")))
    inside = sorted(os.listdir(os.path.join(c, ".snapshot")))
    assert "by-hand" in inside and "failed" not in log(), (inside, log()[-2000:])
    # Each snapshot of the directory above has its twin in the cube, and no more: the
    # cube's were thinned with them.
    assert sorted(set(inside) - {"by-hand"}) == above, (above, inside)
    assert 1 <= len(above) <= 3, above
    with open(os.path.join(c, ".snapshot", above[-1], "f")) as h:
        assert h.read() == "in the cube"
    rows = [json.loads(x) for x in m.run("list", "--json", c).stdout.splitlines()]
    assert sum(r["scheduled"] for r in rows) == len(inside) - 1, rows


def test_host_faults_in_one_cube_stay_there(scion_mount):
    """Failed reads, flipped bits, failed writes and failed syncs of the host, each in the
    files of one cube of ten (SCION_FAULTS, matched by the cube's directory in the store):
    exactly those four cubes stop serving (read-only, fenced or unavailable, as the fault
    finds them), and every other cube and the root read, write and fsync as before."""
    m = scion_mount
    data = os.urandom(1 << 20)
    dirs = ten_cubes_holding(m, data)
    # Cube ids are 1..10 in creation order: cube i lives in cubes.d/(i + 1).
    faults = {2: "read:cubes.d/3/packs/:eio", 4: "read:cubes.d/5/:flip", 6: "write:cubes.d/7/:eio",
              8: "sync:cubes.d/9/:eio"}
    os.environ["SCION_FAULTS"] = ";".join(faults.values())
    try:
        m.mount()
    finally:
        del os.environ["SCION_FAULTS"]

    def works(d):
        try:
            with open(os.path.join(d, "data"), "rb") as h:
                if h.read() != data:
                    return False
            with open(os.path.join(d, "after"), "wb") as h:
                h.write(b"x" * 200_000)
                h.flush()
                os.fsync(h.fileno())
            return True
        except OSError:
            return False

    failed = {i for i, d in enumerate(dirs) if not works(d)}
    assert failed == set(faults), (failed, sorted(faults))
    assert works(m.mnt), "the root"
    rows = cubes(m)
    assert {k for k, r in rows.items() if r["state"] != "ok"} == {f"cube{i}" for i in faults}, rows
    print(f"host faults injected {len(faults)}, localized {len(failed & set(faults))}")


def test_a_panic_in_one_cube_stays_there(scion_mount):
    """A broken invariant in one cube (the test-only failpoint `checkpoint@cubes.d/2`: its
    engine panics in a checkpoint) fails that cube alone, by its policy: its changes get
    EROFS, its files read; the daemon, the root and the other cube go on; `cube recover`
    serves it again with everything it acknowledged."""
    m = scion_mount
    c = [os.path.join(m.mnt, f"c{i}") for i in (1, 2, 3)]
    for d in c:
        assert m.run("cube", "create", d).returncode == 0
    # (The first checkpoint of cube 2 is its recovery at mount; the second panics.)
    remount_with_failpoints(m, "checkpoint@cubes.d/2:2")
    for d in c + [m.mnt]:
        with open(os.path.join(d, "f"), "wb") as h:
            h.write(b"acknowledged")
            h.flush()
            os.fsync(h.fileno())
    r = m.run("list", c[1])  # a checkpoint in cube 2: the failpoint fires
    assert r.returncode != 0, r.describe()
    log = open(os.path.join(m.store, "daemon.log"), errors="replace").read()
    assert "PANIC" in log, log[-2000:]
    with pytest.raises(OSError) as e:
        open(os.path.join(c[1], "later"), "w").close()
    assert e.value.errno == errno.EROFS
    with open(os.path.join(c[1], "f"), "rb") as h:
        assert h.read() == b"acknowledged"
    for d in (c[0], c[2], m.mnt):
        with open(os.path.join(d, "later"), "w") as h:
            h.write("ok")
    assert cubes(m)["c2"]["state"] != "ok" and cubes(m)["c1"]["state"] == "ok"
    r = m.run("cube", "recover", c[1])
    assert r.returncode == 0, r.describe()
    with open(os.path.join(c[1], "f"), "rb") as h:
        got = h.read()
    assert got == b"acknowledged"
    with open(os.path.join(c[1], "later"), "w") as h:
        h.write("ok")


def test_a_removed_cubes_open_files_never_reach_the_next_cube(scion_mount):
    """A file held open in a cube that is then removed, and a cube made after it: the old
    file's inode number must not name the new cube's file (the slot, and with it the numbers,
    went to the next cube, and a write through the old descriptor landed in the new cube's
    file). Writes through it fail; the new cube's file keeps its bytes; the old directory
    descriptor lists nothing of the new cube."""
    m = scion_mount
    b, c = os.path.join(m.mnt, "b"), os.path.join(m.mnt, "c")
    assert m.run("cube", "create", b).returncode == 0
    with open(os.path.join(b, "f"), "w") as h:
        h.write("bbbb")
    fd = os.open(os.path.join(b, "f"), os.O_RDWR)
    dfd = os.open(b, os.O_RDONLY | os.O_DIRECTORY)
    try:
        r = m.run("cube", "remove", b)
        assert r.returncode == 0, r.describe()
        assert m.run("cube", "create", c).returncode == 0
        with open(os.path.join(c, "f"), "w") as h:
            h.write("cccc")
        os.sync()
        failed = False
        try:
            os.pwrite(fd, b"XX", 0)
            os.fsync(fd)
        except OSError:
            failed = True
        with open(os.path.join(c, "f")) as h:
            assert h.read() == "cccc", "a write through the removed cube's file reached the next cube"
        assert failed, "a write into a removed cube's file succeeded"
        try:
            names = os.listdir(dfd)
        except OSError:
            names = []
        assert "f" not in names or os.path.exists(os.path.join(b, "f")), names
        with open(os.path.join(b, "f")) as h:
            assert h.read() == "bbbb", "the removed cube's copy changed"
    finally:
        for d in (fd, dfd):
            try:
                os.close(d)
            except OSError:  # (the write that failed is reported again at close: ESTALE)
                pass
    m.umount()
    assert "clean" in m.check()


def _files(root):
    """Every regular file below root with its bytes (the snapshots left out)."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".snapshot"]
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as h:
                out[os.path.relpath(p, root)] = h.read()
    return out


def _cube_commands_killed(m, rng, remove):
    """One round: a 1,500-file directory converted (or a cube of it removed) while the
    daemon is SIGKILLed at a random moment; after the remount the directory is whole in one
    form or the other, nothing hidden is left beside it, and the store checks clean."""
    p = os.path.join(m.mnt, "proj")
    want = {}
    for i in range(1500):
        os.makedirs(os.path.join(p, f"d{i % 30}"), exist_ok=True)
        data = os.urandom(rng.choice([100, 3000, 20000]))
        with open(os.path.join(p, f"d{i % 30}", f"f{i}"), "wb") as h:
            h.write(data)
        want[f"d{i % 30}/f{i}"] = data
    if remove:
        r = m.run("cube", "create", p, "--convert")
        assert r.returncode == 0, r.describe()
    os.sync()
    argv = [m.bin, "cube", "remove" if remove else "create", p] + ([] if remove else ["--convert"])
    cmd = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.05, 1.5))
    m.kill9()
    cmd.wait(timeout=60)
    m.mount()
    assert _files(p) == want, "the directory is not whole after the crash"
    is_cube = "proj" in cubes(m)
    assert sorted(n for n in os.listdir(m.mnt) if "scion-" in n) == [], os.listdir(m.mnt)
    if is_cube:
        assert cubes(m)["proj"]["state"] == "ok"
    m.umount()
    out = m.check()
    assert "clean" in out and "left by a crash" not in out, out
    m.mount()
    return is_cube


def test_a_convert_or_remove_killed_at_any_moment_is_all_or_nothing(scion_mount):
    """Issue 34 items 1 and 2: the daemon SIGKILLed during `cube create --convert` and
    during `cube remove`, at random moments: after the remount the directory holds all its
    files, as a cube or as an ordinary directory, with nothing half made served in its place
    and no hidden copy left; `check` clean (before, a half-filled cube was served as whole
    and the original stayed hidden, and a removal left its partial copy)."""
    m = scion_mount
    rng = random.Random(int(os.environ.get("SCION_SEED", "34")))
    print(f"seed={rng.random()}")
    for remove in (False, True, False, True):
        was_cube = _cube_commands_killed(m, rng, remove)
        # Back to an ordinary directory for the next round, whole.
        p = os.path.join(m.mnt, "proj")
        if was_cube:
            r = m.run("cube", "remove", p)
            assert r.returncode == 0, r.describe()
        shutil.rmtree(p)


def test_a_killed_convert_is_settled_by_the_next_one(scion_mount):
    """The command SIGKILLed while it copies (the daemon lives on): the cube half made stays
    hidden, `check` would name it, and the next convert of the same directory undoes it first
    and converts."""
    m = scion_mount
    p = os.path.join(m.mnt, "proj")
    os.makedirs(p)
    for i in range(800):
        with open(os.path.join(p, f"f{i}"), "wb") as h:
            h.write(os.urandom(20000))
    want = _files(p)
    cmd = subprocess.Popen([m.bin, "cube", "create", p, "--convert"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def copied():
        # Entries the command has copied into the hidden cube so far.
        hidden = [n for n in os.listdir(m.mnt) if "scion-convert" in n]
        try:
            return len(os.listdir(os.path.join(m.mnt, hidden[0]))) if hidden else 0
        except FileNotFoundError:
            return 0

    # Killed while it copies: once a few dozen of the 800 files are in (a fixed sleep let a
    # fast copy finish first, and the convert was then whole, not killed).
    deadline = time.time() + 30
    while time.time() < deadline and copied() < 40:
        time.sleep(0.002)
    cmd.kill()
    cmd.wait()
    assert _files(p) == want and "proj" not in cubes(m)
    r = m.run("cube", "create", p, "--convert")
    assert r.returncode == 0, r.describe()
    assert _files(p) == want and cubes(m)["proj"]["state"] == "ok"
    assert [n for n in os.listdir(m.mnt) if "scion-" in n] == []
    m.umount()
    out = m.check()
    assert "clean" in out and "left by a crash" not in out, out


def _killed_at_the_swap(m, argv):
    """Runs `scion ARGV` with the daemon waiting at the failpoint `cube.swap` (the copy made
    durable and recorded so, not yet exchanged with the original) and SIGKILLs it there."""
    def waits():
        logs = [os.path.join(m.store, n) for n in os.listdir(m.store) if n.endswith(".log")]
        return sum(open(p, errors="replace").read().count("failpoint cube.swap: waiting") for p in logs)

    before = waits()
    cmd = subprocess.Popen([m.bin, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m._wait(lambda: waits() > before, 60, "the command at its swap")
    m.kill9()
    cmd.wait(timeout=60)


def test_the_copy_is_durable_before_the_original_goes(scion_mount):
    """Issue 34 item 7: a convert into a `nojournal` cube (whose changes live in the daemon's
    memory until a checkpoint) and a cube removal (whose copy's journal is written behind)
    killed after the command recorded that the copy is whole, before the exchange: the next
    mount finishes the command from the copy, so the copy must be durable by then. Both
    hold every file after the remount (without the syncs before the swap, the convert's cube
    came back empty and the mount after the removal's kill failed)."""
    m = scion_mount
    p = os.path.join(m.mnt, "proj")
    os.makedirs(p)
    for i in range(300):
        with open(os.path.join(p, f"f{i}"), "wb") as h:
            h.write(os.urandom(3000 + i))
    want = _files(p)
    m.umount()
    os.environ["SCION_FAILPOINTS"] = "cube.swap:3000"
    try:
        m.mount()
        _killed_at_the_swap(m, ["cube", "create", p, "--convert", "--mode", "nojournal"])
        m.mount()
        assert cubes(m)["proj"]["mode"] == "nojournal" and _files(p) == want
        _killed_at_the_swap(m, ["cube", "remove", p])
        m.mount()
        assert "proj" not in cubes(m) and _files(p) == want
    finally:
        del os.environ["SCION_FAILPOINTS"]
    m.umount()
    out = m.check()
    assert "clean" in out and "left by a crash" not in out, out
