"""Users help themselves on a mount made by root for everyone (issue 18 item 6): through the
users' control socket an ordinary user snapshots, schedules, rolls back and destroys what they
own, sees the versions and listings of what they can reach, and every way through these
commands to another user's data or to a privilege is refused (the attempts below)."""

import os
import shutil
import subprocess

import pytest

from conftest import PLAIN, copy_scion
from test_safety import ensure_user

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="needs root to mount for everyone and make users")

BOB, MALLORY = "scion-bob", "scion-mallory"


def as_user(user, exe, *args):
    cmd = " ".join([exe] + [f"'{a}'" for a in args])
    return subprocess.run(["su", user, "-s", "/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60)


def by_hand(d):
    """The snapshots of d taken by hand (a schedule's are named by their time)."""
    return sorted(n for n in os.listdir(os.path.join(d, ".snapshot")) if not n[:1].isdigit())


def refused(r, *words):
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    for w in words:
        assert w in out, out


def test_users_help_themselves_and_reach_nothing_else(scion_mount):
    m = scion_mount
    bob, mallory = ensure_user(BOB), ensure_user(MALLORY)
    os.chmod(m.root, 0o755)
    exe = copy_scion(m.root)
    M = m.mnt
    # Bob's project, private; Mallory's own directory; a root-owned directory everyone reads.
    os.makedirs(f"{M}/home/bob/proj")
    with open(f"{M}/home/bob/proj/notes", "w") as f:
        f.write("bob's notes\n")
    os.chown(f"{M}/home/bob", bob, bob)
    os.chown(f"{M}/home/bob/proj", bob, bob)
    os.chown(f"{M}/home/bob/proj/notes", bob, bob)
    os.chmod(f"{M}/home/bob", 0o700)
    os.makedirs(f"{M}/home/mallory")
    os.chown(f"{M}/home/mallory", mallory, mallory)
    os.makedirs(f"{M}/srv/shared")
    with open(f"{M}/srv/shared/data", "w") as f:
        f.write("root's\n")
    # Root's own clone, and a setuid-root program.
    shutil.copy("/bin/true", f"{M}/srv/shared/su-like")
    os.chmod(f"{M}/srv/shared/su-like", 0o4755)
    assert m.run("clone", f"{M}/srv/shared", f"{M}/srv/rootclone").returncode == 0
    # The private socket is out of reach (the store is root's alone); the users' socket answers.
    assert os.stat(m.store).st_mode & 0o777 == 0o700
    r = as_user(BOB, exe, "snapshot", "--name", "mine", f"{M}/home/bob/proj")
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.listdir(f"{M}/home/bob/proj/.snapshot") == ["mine"]
    r = as_user(BOB, exe, "versions", "--json", f"{M}/home/bob/proj/notes")
    assert r.returncode == 0 and "mine" in r.stdout, r.stdout + r.stderr
    r = as_user(BOB, exe, "snapshot", "schedule", f"{M}/home/bob/proj", "--every", "1h")
    assert r.returncode == 0, r.stdout + r.stderr
    r = as_user(BOB, exe, "snapshot", "schedule", "--list", "--json", M)
    assert r.returncode == 0 and "home/bob/proj" in r.stdout, r.stdout + r.stderr
    r = as_user(BOB, exe, "destroy", f"{M}/home/bob/proj/.snapshot/mine")
    assert r.returncode == 0, r.stdout + r.stderr
    assert by_hand(f"{M}/home/bob/proj") == []
    as_user(BOB, exe, "snapshot", "--name", "again", f"{M}/home/bob/proj")
    # Compare, scan, try: on his own directory, as his diff -r, find and shell would.
    r = as_user(BOB, exe, "run", "--apply", f"{M}/home/bob/proj", "--", "sh", "-c", "echo more >> notes; echo n > new")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["A new", "M notes"], r.stdout
    assert os.stat(f"{M}/home/bob/proj/new").st_uid == bob
    with open(f"{M}/home/bob/proj/notes") as f:
        assert f.read() == "bob's notes\nmore\n"
    r = as_user(BOB, exe, "diff", f"{M}/home/bob/proj/.snapshot/again", f"{M}/home/bob/proj")
    assert r.returncode == 1 and r.stdout.splitlines() == ["A new", "M notes"], r.stdout + r.stderr
    r = as_user(BOB, exe, "scan", f"{M}/home/bob/proj", "--", "wc", "-c")
    assert r.returncode == 0 and f"2 {M}/home/bob/proj/new" in r.stdout, r.stdout + r.stderr
    assert sorted(os.listdir(f"{M}/home/bob")) == ["proj"], "the clone is gone"
    assert by_hand(f"{M}/home/bob/proj") == ["again"], "the base snapshot is gone"

    # Mallory's attempts, each refused, and nothing of Bob's or root's changes or shows.
    refused(as_user(MALLORY, exe, "snapshot", "--name", "x", f"{M}/home/bob/proj"), "home/bob")
    refused(as_user(MALLORY, exe, "snapshot", "--name", "x", f"{M}/srv/shared"), "not yours")
    refused(as_user(MALLORY, exe, "destroy", f"{M}/home/bob/proj/.snapshot/again"))
    refused(as_user(MALLORY, exe, "destroy", f"{M}/srv/rootclone"), "not yours")
    refused(as_user(MALLORY, exe, "versions", f"{M}/home/bob/proj/notes"))
    refused(as_user(MALLORY, exe, "versions", "--deleted", f"{M}/home/bob/proj"))
    refused(as_user(MALLORY, exe, "snapshot", "schedule", f"{M}/srv/shared", "--every", "1m"), "not yours")
    refused(as_user(MALLORY, exe, "snapshot", "schedule", "--remove", f"{M}/home/bob/proj"))
    refused(as_user(MALLORY, exe, "rollback", f"{M}/srv/rootclone", "--to", "x"), "not yours")
    refused(as_user(MALLORY, exe, "diff", f"{M}/home/bob/proj/.snapshot/again", f"{M}/home/bob/proj"))
    refused(as_user(MALLORY, exe, "scan", f"{M}/home/bob/proj", "--", "cat"))
    refused(as_user(MALLORY, exe, "run", f"{M}/home/bob/proj", "--", "true"))
    # Bob's files by cloning or restoring: refused.
    refused(as_user(MALLORY, exe, "clone", f"{M}/home/bob/proj", f"{M}/home/mallory/b"))
    refused(as_user(MALLORY, exe, "clone", f"{M}/srv/shared", f"{M}/srv/mine"), "may not write")
    refused(as_user(MALLORY, exe, "restore", f"{M}/home/mallory/x", "--from",
                    f"{M}/home/bob/proj/.snapshot/again/notes"))
    # A clone of what she can read, into her own directory: made, but root's setuid program
    # in it is not setuid for anyone, nor in a snapshot of it.
    r = as_user(MALLORY, exe, "clone", f"{M}/srv/shared", f"{M}/home/mallory/c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.stat(f"{M}/home/mallory/c/su-like").st_mode & 0o7777 == 0o755
    assert os.stat(f"{M}/srv/shared/su-like").st_mode & 0o7777 == 0o4755
    r = as_user(MALLORY, exe, "snapshot", "--name", "cs", f"{M}/home/mallory/c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.stat(f"{M}/home/mallory/c/.snapshot/cs/su-like").st_mode & 0o7777 == 0o755
    r = subprocess.run(["su", MALLORY, "-s", "/bin/sh", "-c", f"{M}/home/mallory/c/su-like; id -u"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # Restoring from her snapshot makes what her `cp -a` would: hers, no setuid bit.
    r = as_user(MALLORY, exe, "restore", f"{M}/home/mallory/prog", "--from",
                f"{M}/home/mallory/c/.snapshot/cs/su-like")
    assert r.returncode == 0, r.stdout + r.stderr
    st = os.stat(f"{M}/home/mallory/prog")
    assert (st.st_uid, st.st_mode & 0o7777) == (mallory, 0o755), (st.st_uid, oct(st.st_mode))
    refused(as_user(MALLORY, exe, "restore", f"{M}/home/mallory/prog", "--from",
                    f"{M}/home/mallory/c/.snapshot/cs/su-like", "--replace"), "root's")
    refused(as_user(MALLORY, exe, "restore", f"{M}/srv/x", "--from",
                    f"{M}/home/mallory/c/.snapshot/cs/data"), "may not write")
    # What she made is hers to roll back and destroy (its top keeps root as owner), not Bob's.
    refused(as_user(BOB, exe, "destroy", f"{M}/home/mallory/c"), "not yours")
    refused(as_user(BOB, exe, "rollback", f"{M}/home/mallory/c", "--to", "cs"), "not yours")
    r = as_user(MALLORY, exe, "rollback", f"{M}/home/mallory/c", "--to", "cs")
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.stat(f"{M}/home/mallory/c/su-like").st_mode & 0o7777 == 0o755
    # It holds her snapshot cs: refused without -r, taken with it.
    refused(as_user(MALLORY, exe, "destroy", f"{M}/home/mallory/c"), "destroy -r")
    r = as_user(MALLORY, exe, "destroy", "-r", f"{M}/home/mallory/c")
    assert r.returncode == 0, r.stdout + r.stderr
    # -r takes only what is hers: a clone of root's that root put inside her clone stays, and
    # so does her clone.
    r = as_user(MALLORY, exe, "clone", f"{M}/srv/shared", f"{M}/home/mallory/c3")
    assert r.returncode == 0, r.stdout + r.stderr
    os.chmod(f"{M}/home/mallory/c3", 0o755)
    assert m.run("clone", f"{M}/srv/shared", f"{M}/home/mallory/c3/roots").returncode == 0
    refused(as_user(MALLORY, exe, "destroy", "-r", f"{M}/home/mallory/c3"), "which it holds")
    assert os.path.isdir(f"{M}/home/mallory/c3/roots")
    assert m.run("destroy", "-r", f"{M}/home/mallory/c3").returncode == 0
    refused(as_user(MALLORY, exe, "scrub", M), "whole store")
    refused(as_user(MALLORY, exe, "repack", M), "whole store")
    refused(as_user(MALLORY, exe, "compress", M), "whole store")
    assert not os.path.exists(f"{M}/home/mallory/b")
    # Listings show only what she can reach: not Bob's snapshot, not his schedule.
    r = as_user(MALLORY, exe, "list", "--json", M)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "home/bob" not in r.stdout and "srv/rootclone" in r.stdout, r.stdout
    r = as_user(MALLORY, exe, "snapshot", "schedule", "--list", "--json", M)
    assert "home/bob" not in r.stdout, r.stdout
    # Her own directory is hers to snapshot and roll back nothing (not a clone).
    r = as_user(MALLORY, exe, "snapshot", "--name", "m1", f"{M}/home/mallory")
    assert r.returncode == 0, r.stdout + r.stderr
    assert by_hand(f"{M}/home/bob/proj") == ["again"]
    # Root keeps every right over what users made.
    assert m.run("destroy", f"{M}/home/mallory/.snapshot/m1").returncode == 0
    m.umount()
    assert "clean" in m.check()
    m.mount()
