"""`scion status` (issue 22 item 5) against a live mount and an unmounted store: the daemon's
pid and uptime, the store, clones and snapshots counted, space (what only snapshots hold),
the checkpoint, schedules and mirrors; every scion mount without a path; --json; an unmounted
store with --store."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import PLAIN, remount_with_failpoints

pytestmark = pytest.mark.skipif(PLAIN, reason="status needs a scion store")


def test_status_of_a_live_mount_and_of_an_unmounted_store(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    with open(f"{d}/f", "wb") as h:
        h.write(os.urandom(300_000))
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    os.unlink(f"{d}/f")   # now only the snapshot holds its blocks
    assert m.run("clone", d, os.path.join(m.mnt, "c")).returncode == 0
    assert m.run("snapshot", "schedule", d, "--every", "1d").returncode == 0
    assert m.run("cube", "create", os.path.join(m.mnt, "cube")).returncode == 0
    r = m.run("status", "--json", m.mnt)
    assert r.returncode == 0, r.describe()
    st = json.loads(r.stdout)
    assert st["pid"] == m.daemon_pid() and st["uptime_s"] >= 0, st
    assert (st["cubes"], st["cubes_failing"]) == (1, 0), st
    assert os.path.samefile(st["store"], m.store) and os.path.samefile(st["mountpoint"], m.mnt), st
    # (The schedule takes its first snapshot at its first round: one or two snapshots.)
    assert (st["clones"], st["schedules"], st["mirrors"]) == (1, 1, 0) and st["snapshots"] in (1, 2), st
    assert st["snapshots_only_bytes"] >= 300_000, st
    assert st["generation"] > 0 and st["failed"] is None and st["host_total"] >= st["host_free"] > 0, st
    # Without a path: every scion mount, this one among them (another test's leftover mount
    # of an older build could make the exit status 2).
    r = m.run("status")
    assert f"{m.mnt}: store" in r.stdout and "state: ok" in r.stdout and "1 cubes, 0 of them not ok" in r.stdout, r.describe()
    m.umount()
    r = m.run("status", "--json", "--store", m.store)
    st = json.loads(r.stdout)
    listed = [json.loads(x) for x in m.run("list", "--json", "--store", m.store).stdout.splitlines()]
    assert r.returncode == 0 and st["pid"] is None, r.describe()
    assert st["snapshots"] == sum(x["kind"] != "clone" for x in listed), (st, listed)
    assert "not mounted" in m.run("status", "--store", m.store).stdout
    r = m.run("status", "--store", os.path.join(m.root, "nowhere"))
    assert r.returncode == 2, r.describe()
    m.mount()


def test_snapshots_of_a_removed_directory_are_found_counted_and_freed(scion_mount):
    """Issue 22: `rm -rf` of a directory with snapshots leaves them holding space; `scion
    status` counts them, `scion list --orphaned` names them, `scion destroy @ID` frees them."""
    m = scion_mount
    d = os.path.join(m.mnt, "gone")
    os.makedirs(d)
    with open(f"{d}/f", "wb") as h:
        h.write(os.urandom(200_000))
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    os.makedirs(os.path.join(m.mnt, "kept"))
    assert m.run("snapshot", "--name", "k", os.path.join(m.mnt, "kept")).returncode == 0
    r = m.run("status", "--json", m.mnt)
    assert json.loads(r.stdout)["orphaned"] == 0, r.stdout
    r = m.run("list", "--orphaned", "--json", m.mnt)
    assert r.returncode == 0 and r.stdout == "", r.describe()
    shutil.rmtree(d)
    st = json.loads(m.run("status", "--json", m.mnt).stdout)
    assert st["orphaned"] == 1 and st["orphaned_bytes"] >= 200_000, st
    assert "list --orphaned" in m.run("status", m.mnt).stdout
    rows = [json.loads(x) for x in m.run("list", "--orphaned", "--json", m.mnt).stdout.splitlines()]
    sid = rows[0]["id"]
    assert len(rows) == 1 and rows[0]["orphaned"] and rows[0]["origin"] == "/gone", rows
    # Browsable where `list` says: .snapshot/@ID of the root; `@` names are refused as new names.
    assert rows[0]["path"] == f"/.snapshot/@{sid}", rows
    assert os.listdir(os.path.join(m.mnt, ".snapshot")) == [f"@{sid}"]
    with open(os.path.join(m.mnt, ".snapshot", f"@{sid}", "f"), "rb") as h:
        assert len(h.read()) == 200_000
    assert not os.path.exists(os.path.join(m.mnt, ".snapshot", f"@{sid + 100}"))
    assert "(directory gone)" in m.run("list", "--orphaned", m.mnt).stdout
    r = m.run("snapshot", "--name", "@1", os.path.join(m.mnt, "kept"))
    assert r.returncode != 0 and "'@'" in r.stderr, r.describe()
    r = m.run("destroy", f"@{rows[0]['id']}", "--mount", m.mnt)
    assert r.returncode == 0, r.describe()
    st = json.loads(m.run("status", "--json", m.mnt).stdout)
    assert st["orphaned"] == 0 and st["snapshots"] == 1, st


def test_memory_follows_what_the_kernel_holds(scion_mount):
    """Issue 39: `status --json` reports the daemon's memory by use; a walk loads the inodes the
    kernel then holds, and once the kernel forgets them (drop_caches) the daemon gives them
    back, directories included. On 093a770 every directory stayed loaded (and nothing was
    reported)."""
    import subprocess
    import time
    m = scion_mount
    for d in range(20):
        os.makedirs(f"{m.mnt}/w/d{d}")
        for f in range(25):
            with open(f"{m.mnt}/w/d{d}/f{f}", "wb") as h:
                h.write(b"x" * 3000)
    subprocess.run(["sync"], check=True)

    def memory():
        r = m.run("status", "--json", m.mnt)
        assert r.returncode == 0, r.describe()
        return json.loads(r.stdout)["memory"]

    for _ in os.walk(f"{m.mnt}/w"):
        pass
    def forgotten():
        """`memory()` once the kernel has forgotten what it held (or 30 s have gone by)."""
        deadline = time.time() + 30
        while True:
            with open("/proc/sys/vm/drop_caches", "w") as h:
                h.write("3\n")
            time.sleep(1)
            now = memory()
            if now["inodes"] < 20 or time.time() > deadline:
                return now

    walked = memory()
    assert walked["kernel_inodes"] >= 20 * 26, walked
    assert walked["rss_bytes"] > 0 and walked["node_cache_limit"] == 64 << 20, walked
    assert walked["hash_memo_limit"] == 1 << 20 and walked["listings"] == 0, walked
    assert walked["whereabouts_limit"] == 1 << 15 and walked["whereabouts_entries"] <= 1 << 15, walked
    # The kernel forgets over a while; what the daemon holds follows.
    now = forgotten()
    assert now["inodes"] < 20, (now, walked)
    assert now["inode_bytes"] < walked["inode_bytes"], (now, walked)
    # What was evicted left its place for handles, within the bound; `whereabouts=` sets it.
    assert 0 < now["whereabouts_entries"] <= 1 << 15, now
    m.umount()
    m.mount("whereabouts=100")
    for _ in os.walk(f"{m.mnt}/w"):
        pass
    now = forgotten()
    assert now["whereabouts_limit"] == 100 and 0 < now["whereabouts_entries"] <= 100, now


def test_long_holds_of_the_engine_lock_are_shown_with_their_place(scion_mount):
    """Issue 38: `scion status` counts the engine lock's holds and waits by length and names
    the longest holds with where they were taken; the daemon logs those of 50 ms or more. A
    test-only failpoint makes every checkpoint's fold hold the lock 700 ms; a snapshot's
    checkpoint is then the longest hold, and creates made meanwhile waited for it."""
    m = scion_mount
    remount_with_failpoints(m, "fold.hold:700")
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    with open(f"{d}/f", "wb") as h:
        h.write(b"x")
    snap = subprocess.Popen([m.bin, "snapshot", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < 2.0:   # creates reach the daemon, which waits on the fold
        with open(f"{m.mnt}/w{i}", "wb"):
            pass
        i += 1
    assert snap.wait(timeout=60) == 0
    st = json.loads(m.run("status", "--json", m.mnt).stdout)["lock"]
    assert st["holds"] > i, st
    longest = st["longest"][0]
    assert longest["us"] >= 700_000 and st["held"]["over_250ms"] >= 1, st
    assert re.fullmatch(r"crates/[a-z_/]+\.rs:\d+", longest["at"]), st
    assert st["longest_wait_us"] >= 100_000 and st["waited"]["over_250ms"] + st["waited"]["le_250ms"] >= 1, st
    out = m.run("status", m.mnt).stdout
    assert "engine lock:" in out and longest["at"] in out, out
    with open(os.path.join(m.store, "daemon.log"), errors="replace") as f:
        log = f.read()
    assert re.search(r"engine lock held [0-9.]+ ms, taken at crates/", log), log[-2000:]
    m.umount()
    m.mount()
