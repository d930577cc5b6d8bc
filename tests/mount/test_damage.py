"""Damage through the mount: a rotten data block gives EIO to the reads that need it, with
its location in the daemon's log, while everything else keeps working; `scion check`
itemises it and `scion scrub` names the damaged file, mounted or not. A dead daemon's mount point is recovered by the next `scion mount`."""

import errno
import glob
import json
import os

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="scion-specific")


def test_rotten_block_gives_eio_not_a_crash(scion_mount):
    m = scion_mount
    bad = os.path.join(m.mnt, "victim")
    good = os.path.join(m.mnt, "bystander")
    pattern = b"ROTTEN-BLOCK-TEST" * 4096  # ~68 KiB, so at least one whole 64 KiB chunk
    with open(bad, "wb") as f:
        f.write(pattern * 4)
    with open(good, "wb") as f:
        f.write(b"still fine")
    m.umount()
    # Flip bytes inside the victim's data in the pack file.
    hits = 0
    for pack in glob.glob(os.path.join(m.store, "packs", "*.pack")):
        with open(pack, "r+b") as f:
            data = f.read()
            at = data.find(pattern[:4096])
            if at >= 0:
                f.seek(at + 1000)
                f.write(b"\xff" * 64)
                hits += 1
    assert hits, "victim data not found in any pack"
    # scrub names the damaged file by path (unmounted store)...
    r = m.run("scrub", "--store", m.store)
    assert r.returncode == 1, r.describe()
    assert "/victim" in r.stderr and "bystander" not in r.stderr, r.describe()
    m.mount()
    # ... and through the daemon of a mounted one.
    r = m.run("scrub", m.mnt)
    assert r.returncode == 1 and "/victim" in r.stderr, r.describe()
    r = m.run("scrub", "--json", m.mnt)
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["damaged_total"] >= 1, r.describe()
    assert {d["path"] for d in rep["damage"]} == {"/victim"}, rep
    with open(good, "rb") as f:
        assert f.read() == b"still fine"
    with pytest.raises(OSError) as e:
        with open(bad, "rb") as f:
            f.read()
    assert e.value.errno == errno.EIO
    # The daemon is alive and still serves everything else, including writes.
    with open(good, "ab") as f:
        f.write(b", and writable")
    with open(good, "rb") as f:
        assert f.read() == b"still fine, and writable"
    m.umount()
    log = open(os.path.join(m.store, "daemon.log")).read()
    assert "corrupt block" in log and "pack 1 offset" in log, log[-2000:]
    r = m.run("check", m.store)
    assert r.returncode == 1, r.describe()
    assert "content hash differs" in r.stdout, r.stdout
    m.mount()  # leave it mounted for the fixture's teardown


def test_mount_recovers_a_dead_daemons_mount_point(scion_mount):
    m = scion_mount
    with open(os.path.join(m.mnt, "f"), "wb") as f:
        f.write(b"synced")
        f.flush()
        os.fsync(f.fileno())
    pid = m.daemon_pid()
    os.kill(pid, 9)
    m._wait(lambda: not os.path.exists(f"/proc/{pid}"), 30, "daemon to die")
    # The mount point is now dead ("Transport endpoint is not connected"); no umount -l.
    r = m.run("mount", m.store, m.mnt)
    assert r.returncode == 0, r.describe()
    with open(os.path.join(m.mnt, "f"), "rb") as f:
        assert f.read() == b"synced"


def test_truncated_pack_is_refused_clearly(scion_mount):
    m = scion_mount
    with open(os.path.join(m.mnt, "f"), "wb") as f:
        f.write(os.urandom(300_000))
    m.umount()
    pack = sorted(glob.glob(os.path.join(m.store, "packs", "*.pack")))[-1]
    os.truncate(pack, os.path.getsize(pack) // 2)
    r = m.run("mount", m.store, m.mnt)
    assert r.returncode != 0
    assert "truncated" in (r.stdout + r.stderr) and "panicked" not in r.stderr, r.describe()
    r = m.run("check", m.store)
    assert r.returncode != 0 and "panicked" not in r.stderr, r.describe()
    assert "truncated" in (r.stdout + r.stderr), r.describe()
