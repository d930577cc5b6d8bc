"""Snapshot schedules through the mount (issue 18 items 1 and 2): snapshots taken on time by
the daemon, thinned by the keep policy, never the ones taken by hand; schedules kept across
unmount, remount and SIGKILL (one snapshot at mount when one is due); space-aware retention
on a small tmpfs whose free space the test fills; the command's exit codes and JSON."""

import json
import os
import subprocess
import time

import pytest

from conftest import PLAIN, ScionMount

pytestmark = pytest.mark.skipif(PLAIN, reason="schedules need a scion mount")


def snaps(m, d="work"):
    return sorted(os.listdir(os.path.join(m.mnt, d, ".snapshot")))


def schedules(m):
    r = m.run("snapshot", "schedule", "--list", "--json", m.mnt)
    assert r.returncode == 0, r.describe()
    return [json.loads(line) for line in r.stdout.splitlines()]


def listing(m):
    r = m.run("list", "--json", m.mnt)
    assert r.returncode == 0, r.describe()
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_schedule_takes_and_thins_snapshots_and_spares_hand_made_ones(scion_mount):
    m = scion_mount
    work = os.path.join(m.mnt, "work")
    os.mkdir(work)
    with open(os.path.join(work, "f"), "w") as f:
        f.write("v1")
    r = m.run("snapshot", "--name", "by-hand", work)
    assert r.returncode == 0, r.describe()
    r = m.run("snapshot", "schedule", work, "--every", "1s", "--keep", "last=2")
    assert r.returncode == 0, r.describe()
    # Names are UTC times; more than two are taken over time, two are kept.
    m._wait(lambda: sum("took snapshot" in line for line in open(os.path.join(m.store, "daemon.log"))) >= 4,
            30, "four scheduled snapshots to have been taken")
    s = snaps(m)
    assert "by-hand" in s, s
    sched = [n for n in s if n != "by-hand"]
    assert 1 <= len(sched) <= 3, s      # two kept, a third perhaps just taken
    assert all(len(n) >= 18 and n[10] == "T" and n[17] == "Z" for n in sched), sched
    log = open(os.path.join(m.store, "daemon.log")).read()
    assert "the keep policy no longer keeps it" in log
    # The snapshot holds what the directory held.
    with open(os.path.join(work, ".snapshot", sched[-1], "f")) as f:
        assert f.read() == "v1"
    rows = schedules(m)
    assert len(rows) == 1 and rows[0]["dir"] == "/work" and rows[0]["every_s"] == 1, rows
    assert rows[0]["keep"] == "last=2" and rows[0]["kept"] >= 1 and rows[0]["next_run"], rows
    f = m.run("snapshot", "schedule", "--list", "-H", "-p", m.mnt).stdout.rstrip("\n").split("\t")
    assert (f[0], f[1], f[2]) == ("/work", "1", "last=2") and f[3].isdigit() and f[4].isdigit(), f
    kinds = {row["path"].rsplit("/", 1)[-1]: row["kind"] for row in listing(m)}
    assert kinds["by-hand"] == "snapshot" and all(kinds.get(n, "scheduled") == "scheduled" for n in sched)
    # Removing: the snapshots stay and none are taken any more; a second removal has
    # nothing to do (exit 1).
    r = m.run("snapshot", "schedule", "--remove", work)
    assert r.returncode == 0, r.describe()
    time.sleep(0.5)
    left = snaps(m)
    time.sleep(2)
    assert snaps(m) == left and "by-hand" in left
    r = m.run("snapshot", "schedule", "--remove", work)
    assert r.returncode == 1, r.describe()
    assert schedules(m) == []
    m.umount()
    m.check()


def test_bad_schedules_are_refused(scion_mount):
    m = scion_mount
    work = os.path.join(m.mnt, "work")
    os.mkdir(work)
    for args in (["--every", "0s"], ["--every", "5w"], ["--every", "1h", "--keep", "fortnightly=2"],
                 ["--every", "1h", "--keep", "last=0"], ["--every", "1h", "--min-free", "101"], []):
        r = m.run("snapshot", "schedule", work, *args)
        assert r.returncode == 2, r.describe()
        assert r.stderr.startswith("scion: "), r.describe()
    r = m.run("snapshot", "schedule", os.path.join(m.mnt, "nope"), "--every", "1h")
    assert r.returncode == 2, r.describe()
    # A snapshot never changes: a schedule there would fail at every run.
    assert m.run("snapshot", "--name", "s", work).returncode == 0
    r = m.run("snapshot", "schedule", os.path.join(work, ".snapshot", "s"), "--every", "1h")
    assert r.returncode == 2 and "schedule the directory it was taken of" in r.stderr, r.describe()
    assert schedules(m) == []


def test_schedules_survive_remount_and_sigkill(scion_mount):
    m = scion_mount
    work = os.path.join(m.mnt, "work")
    os.mkdir(work)
    r = m.run("snapshot", "schedule", work, "--every", "3s", "--keep", "last=50")
    assert r.returncode == 0, r.describe()
    m._wait(lambda: len(snaps(m)) >= 1, 30, "a first scheduled snapshot")
    m.umount()
    time.sleep(4)       # a snapshot fell due while unmounted
    m.mount()
    before = len(snaps(m))
    # One snapshot at mount for the one missed (not one per missed interval).
    m._wait(lambda: len(snaps(m)) >= 2, 30, "the snapshot missed while unmounted")
    assert schedules(m)[0]["every_s"] == 3
    m.kill9()
    m.mount()
    assert schedules(m)[0]["dir"] == "/work"
    n = len(snaps(m))
    m._wait(lambda: len(snaps(m)) > n, 20, "snapshots to go on after SIGKILL")
    assert before >= 1
    m.umount()
    m.check()


@pytest.fixture
def small_tmpfs():
    """A 96 MiB tmpfs for a store whose host runs short of space."""
    root = "/tmp/scion-tests/tmpfs-" + str(os.getpid())
    os.makedirs(root, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", root], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode()}")
    m = ScionMount(root)
    try:
        m.init()
        m.mount()
        yield m
    finally:
        try:
            if m.mounted:
                m.kill9()
        finally:
            subprocess.run(["umount", "-l", root])
            os.rmdir(root)


def test_space_aware_retention_on_a_filling_host(small_tmpfs):
    m = small_tmpfs
    work = os.path.join(m.mnt, "work")
    os.mkdir(work)
    data = os.urandom(1 << 20)
    # Snapshots the policy does not keep stay while more than 40% is free.
    r = m.run("snapshot", "schedule", work, "--every", "1s", "--keep", "last=1", "--keep-while-free", "40")
    assert r.returncode == 0, r.describe()
    for i in range(4):
        with open(os.path.join(work, f"f{i}"), "wb") as f:
            f.write(data)       # each snapshot holds a MiB the next one changes
        os.sync()
        time.sleep(1.2)
    m._wait(lambda: len(snaps(m)) >= 4, 30, "several snapshots kept while space is plentiful")
    # Fill the host until less than 40% is free: they go, oldest first, down to the policy.
    filler = os.path.join(m.root, "filler")
    st = os.statvfs(m.root)
    want_free = st.f_blocks * st.f_frsize * 30 // 100
    size = st.f_bavail * st.f_frsize - want_free
    with open(filler, "wb") as f:
        f.write(b"\0" * size)
    m._wait(lambda: len(snaps(m)) <= 2, 30, "the snapshots the policy gave up to go")
    log = open(os.path.join(m.store, "daemon.log")).read()
    assert "--keep-while-free" in log, log[-2000:]
    # --min-free: below it even kept ones go, never the newest.
    r = m.run("snapshot", "schedule", work, "--every", "1s", "--keep", "last=50", "--min-free", "50")
    assert r.returncode == 0, r.describe()
    time.sleep(3)
    assert len(snaps(m)) >= 1
    m._wait(lambda: "--min-free" in open(os.path.join(m.store, "daemon.log")).read(), 30, "min-free to thin kept snapshots")
    os.remove(filler)
    m.umount()
    m.check()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a user")
def test_an_ordinary_user_on_their_own_store():
    """Issue 18 item 7: snapshots, schedules, versions and restore as an ordinary user on
    a store of their own, mounted through fusermount3."""
    from conftest import copy_scion
    from test_safety import as_user, ensure_user
    import shutil
    import tempfile
    ensure_user("scion-bob")
    root = tempfile.mkdtemp(prefix="user-", dir="/tmp")
    os.chmod(root, 0o755)
    copy_scion(root)
    subprocess.run(["chown", "scion-bob", root], check=True)
    script = (
        "set -e; cd " + root + "; mkdir mnt; ./scion init st >/dev/null; ./scion mount st mnt >/dev/null; "
        "mkdir mnt/w; echo one > mnt/w/f; ./scion snapshot --name a mnt/w >/dev/null; echo two > mnt/w/f; "
        "./scion snapshot schedule mnt/w --every 1s --keep last=2 >/dev/null; sleep 3; "
        "ls mnt/w/.snapshot | wc -l; ./scion versions --json mnt/w/f | wc -l; "
        "./scion restore mnt/w/f --from a >/dev/null; cat mnt/w/f; "
        "./scion list --json mnt | grep -c '\"kind\":\"scheduled\"'; "
        "./scion umount mnt >/dev/null; ./scion check st | tail -1"
    )
    try:
        r = as_user("scion-bob", script)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.split()
        # "a" and up to three scheduled; two versions; the restored bytes; scheduled rows;
        # a clean store.
        assert 2 <= int(lines[0]) <= 4 and lines[1] == "2" and lines[2] == "one", r.stdout
        assert 1 <= int(lines[3]) <= 3 and lines[4] == "clean", r.stdout
    finally:
        subprocess.run(["fusermount3", "-u", "-z", os.path.join(root, "mnt")], capture_output=True)
        subprocess.run(["pkill", "-9", "-f", os.path.join(root, "st")], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
