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
    for bad in ("snapdir=bogus", "uring=maybe", "repack=sometimes", "cache=none"):
        r = subprocess.run([SCION_BIN, "mount", "-o", bad, str(store), str(mnt)], capture_output=True, text=True, timeout=60)
        key = bad.split("=")[0]
        assert r.returncode == 2 and f"{bad}: expected {key}=" in r.stderr, (bad, r.stderr)
        assert not os.path.ismount(mnt)
        assert sorted(os.listdir(store)) == before, bad


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
