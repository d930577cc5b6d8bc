"""Rough edges a new user hits (issue 22 item 7), each fixed and kept so."""

import os
import subprocess

import pytest

from conftest import PLAIN, SCION_BIN

pytestmark = pytest.mark.skipif(PLAIN, reason="runs the scion binary on directories")


def test_a_directory_that_is_not_a_store_is_left_untouched(tmp_path):
    # `scion mount` and `scion check` on any directory (tried on /etc) wrote a lock file and
    # a daemon log into it, and advised a chmod, before saying it was not a store.
    d = tmp_path / "not-a-store"
    d.mkdir()
    (d / "file").write_text("mine\n")
    os.chmod(d, 0o755)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in (["check", d], ["mount", d, mnt], ["mount", "-f", d, mnt]):
        r = subprocess.run([SCION_BIN] + [str(a) for a in args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "is not a scion store" in r.stderr and "chmod" not in r.stderr, r.stderr
        assert sorted(os.listdir(d)) == ["file"], (args, os.listdir(d))
    assert not os.path.ismount(mnt)


def test_snapshot_names_are_refused_in_words(scion_mount):
    # They were refused as "Invalid argument (os error 22)" and "File exists (os error 17)".
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    for bad in ("a/b", "..", "."):
        r = m.run("snapshot", "--name", bad, d)
        assert r.returncode == 2 and "is not a snapshot name" in r.stderr and "os error" not in r.stderr, r.describe()
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    r = m.run("snapshot", "--name", "s", d)
    assert r.returncode == 2 and "already has a snapshot named s" in r.stderr and "os error" not in r.stderr, r.describe()


def test_a_missing_path_is_said_in_words(scion_mount):
    # It said "m/nope: No such file or directory (os error 2)": the system's errno tail is
    # dropped where the words say the same.
    m = scion_mount
    for args in (("clone", os.path.join(m.mnt, "nope"), os.path.join(m.mnt, "x")),
                 ("snapshot", os.path.join(m.mnt, "nope")),
                 ("diff", m.mnt, os.path.join(m.mnt, "nope"))):
        r = m.run(*args)
        assert r.returncode == 2 and "nope: No such file or directory" in r.stderr, r.describe()
        assert "os error" not in r.stderr, r.describe()


def test_scion_options_are_checked_before_mounting(tmp_path):
    # `-o snapdir=bogus` was taken as hidden; every value of scion's own options is checked,
    # by name, before anything is opened or written.
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    mnt.mkdir()
    assert subprocess.run([SCION_BIN, "init", str(store)], capture_output=True).returncode == 0
    before = sorted(os.listdir(store))
    for bad in ("snapdir=bogus", "uring=maybe", "repack=sometimes", "cache=none", "bogus", "max_read=x", "nonempty"):
        r = subprocess.run([SCION_BIN, "mount", "-o", f"ro,{bad}", str(store), str(mnt)], capture_output=True, text=True, timeout=60)
        key = bad.split("=")[0]
        want = f"{bad}: expected {key}=" if "=" in bad and key != "max_read" else f'mount option "{bad}" is unknown'
        assert r.returncode == 2 and want in r.stderr, (bad, r.stderr)
        assert "mount()" not in r.stderr and "EINVAL" not in r.stderr, (bad, r.stderr)
        assert not os.path.ismount(mnt)
        assert sorted(os.listdir(store)) == before, bad
    # Numbers out of range, and fold_batch's special 0, which the mount takes.
    for bad in ("fold_batch=10", "fold_batch=lots", "hash_memo=10"):
        r = subprocess.run([SCION_BIN, "mount", "-o", bad, str(store), str(mnt)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and f"{bad}: expected" in r.stderr, (bad, r.stderr)
        assert not os.path.ismount(mnt) and sorted(os.listdir(store)) == before, bad
    r = subprocess.run([SCION_BIN, "mount", "-o", "fold_batch=0", str(store), str(mnt)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and os.path.ismount(mnt), r.stderr
    with open(mnt / "f", "w") as f:
        f.write("kept")
    assert subprocess.run([SCION_BIN, "umount", str(mnt)], capture_output=True).returncode == 0


def test_destroy_of_the_snapshot_directory_itself_says_what_to_do(scion_mount):
    # It said "Stale file handle (os error 116)".
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    r = m.run("destroy", f"{d}/.snapshot")
    assert r.returncode == 2 and "it is not one" in r.stderr and "os error" not in r.stderr, r.describe()
    assert os.listdir(f"{d}/.snapshot") == ["s"]


def test_a_mount_over_a_live_scion_mount_is_refused(scion_mount, tmp_path):
    # It was allowed without a word, and `scion umount` then took both down naming one.
    m = scion_mount
    other = tmp_path / "other"
    assert subprocess.run([SCION_BIN, "init", str(other)], capture_output=True).returncode == 0
    r = subprocess.run([SCION_BIN, "mount", str(other), m.mnt], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "already a scion mount" in r.stderr, r.stderr
    with open("/proc/self/mountinfo") as f:
        assert sum(1 for l in f if f" {m.mnt} " in l) == 1


def test_refusals_name_what_was_wrong_and_what_to_do(scion_mount):
    """Issue 22 item 6, from a review of every refusal: messages that leaked errno text, a
    Rust error ("prefix not found"), store paths of a cube, or a collision that failed."""
    m = scion_mount
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    with open(f"{a}/f", "w") as h:
        h.write("v1")
    assert m.run("snapshot", "--name", "s1", a).returncode == 0

    def refused(*args, says, stdin=None):
        r = subprocess.run([SCION_BIN, *args], capture_output=True, text=True, errors="replace", timeout=60, input=stdin)
        assert r.returncode != 0 and says in r.stderr, (args, r.returncode, r.stderr)
        for raw in ("os error", "(No such file or directory)", "(Invalid argument)", "Stale file handle",
                    "prefix not found", "ERROR scion"):
            assert raw not in r.stderr, (args, r.stderr)
        return r.stderr

    # A `.snapshot` directory named where a tree is needed.
    for args in (("diff", f"{a}/.snapshot", a), ("clone", f"{a}/.snapshot", f"{m.mnt}/z"),
                 ("send", f"{a}/.snapshot")):
        refused(*args, says="lists the snapshots, it is not one")
    refused("run", m.mnt, "--", "true", says="the mount's root")
    refused("restore", f"{a}/f", "--from", "nope", says="no snapshot named nope")
    refused("snapshot", "--name", "x", f"{a}/.snapshot/s1", says="clone it to change it")
    refused("receive", f"{m.mnt}/r", stdin="", says="ends before a stream header")
    # Two restores of one file in one second keep two copies aside.
    for _ in range(2):
        assert m.run("restore", f"{a}/f", "--from", "s1").returncode == 0
    assert len([n for n in os.listdir(a) if n.startswith("f.scion-restore-")]) == 2, os.listdir(a)
    # In a cube, a refusal says which cube its paths are in.
    c = os.path.join(m.mnt, "cb")
    assert m.run("cube", "create", c).returncode == 0
    os.makedirs(f"{c}/x")
    refused("destroy", f"{c}/x", says="in cube /cb: /x is not a clone or snapshot")


def test_a_read_only_mount_refuses_changes_through_commands_too(scion_mount):
    """`-o ro` made the kernel refuse writes, but clone, snapshot, destroy and the cube and
    schedule commands went to the daemon and changed the store; all are refused now (EROFS,
    saying why), reads and listings go on, and a remount `rw` takes changes again."""
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    with open(f"{d}/f", "w") as h:
        h.write("kept")
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    assert m.run("cube", "create", os.path.join(m.mnt, "c")).returncode == 0
    m.umount()
    m.mount("ro")
    for args in (("clone", d, f"{m.mnt}/x"), ("snapshot", "--name", "t", d), ("destroy", f"{d}/.snapshot/s"),
                 ("cube", "create", f"{m.mnt}/c2"), ("cube", "set", f"{m.mnt}/c", "--mode", "data"),
                 ("snapshot", "schedule", d, "--every", "1h"), ("snapshot", "--name", "t", f"{m.mnt}/c")):
        r = m.run(*args)
        assert r.returncode != 0 and "read-only" in r.stderr, (args, r.describe())
    with open(f"{d}/.snapshot/s/f") as h:
        assert h.read() == "kept"
    assert m.run("list", m.mnt).returncode == 0 and m.run("cube", "list", m.mnt).returncode == 0
    assert sorted(os.listdir(m.mnt)) == ["c", "d"] and os.listdir(f"{d}/.snapshot") == ["s"]
    m.umount()
    m.mount()
    assert m.run("snapshot", "--name", "t", d).returncode == 0
