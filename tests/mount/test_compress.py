"""Compression of old versions through the mount (issue 18 item 5): `scion compress` turns the
blocks only a snapshot holds into compressed ones; the snapshot and the live tree read the
same bytes before and after, across a remount; `scion list` shows the smaller STORED size and
`check` is clean; blocks the live tree shares stay as they are; an unmounted store is done with
--store; --json; bad arguments are refused."""

import json
import os

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="compression needs a scion mount")

WORDS = [b"scion ", b"snapshot ", b"block ", b"version ", b"old ", b"tree\n"]


def text(seed, n):
    out = bytearray()
    i = seed
    while len(out) < n:
        out += WORDS[(i * 7 + i // 3) % len(WORDS)]
        i += 1
    return bytes(out[:n])


def read(p):
    with open(p, "rb") as h:
        return h.read()


def snapshot_row(m):
    r = m.run("list", "--json", m.mnt)
    assert r.returncode == 0, r.describe()
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    return next(x for x in rows if x["kind"] == "snapshot")


def test_old_versions_compress_and_read_back(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    old = {f"f{i}": text(i, 300_000 + i * 70_000) for i in range(4)}
    old["shared"] = text(9, 500_000)
    for n, data in old.items():
        with open(f"{d}/{n}", "wb") as h:
            h.write(data)
    assert m.run("snapshot", "--name", "s1", d).returncode == 0
    new = dict(old)
    for i in range(4):
        new[f"f{i}"] = text(100 + i, 250_000)
        with open(f"{d}/f{i}", "wb") as h:
            h.write(new[f"f{i}"])
    before = snapshot_row(m)
    assert before["stored"] == before["refer"], before

    r = m.run("compress", "--json", "--level", "3", m.mnt)
    assert r.returncode == 0, r.describe()
    rep = json.loads(r.stdout)
    # The four rewritten files' old blocks (5 + 6 + 7 + 8 chunks) and a few tree nodes, not
    # the shared file's 8 blocks.
    assert 26 <= rep["compressed"] < 34 and rep["left"] == 0, rep
    assert rep["bytes_after"] * 4 < rep["bytes_before"], rep
    for n, data in old.items():
        assert read(f"{d}/.snapshot/s1/{n}") == data, n
    for n, data in new.items():
        assert read(f"{d}/{n}") == data, n
    after = snapshot_row(m)
    assert after["refer"] == before["refer"], (before, after)
    assert after["stored"] < after["refer"] - 26 * 65536 * 3 // 4, after
    table = m.run("list", m.mnt).stdout.splitlines()
    assert table[0].split()[-2] == "STORED", table

    # Nothing more to do; a second run says so.
    r = m.run("compress", "--json", m.mnt)
    assert r.returncode == 0 and json.loads(r.stdout)["compressed"] == 0, r.describe()

    m.umount()
    m.check()
    r = m.run("check", m.store)
    assert "blocks of old versions kept compressed" in r.stdout, r.stdout
    r = m.run("check", "--json", m.store)
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["clean"] and rep["compressed_blocks"] >= 26, r.describe()
    # Five files live and five in the snapshot.
    assert rep["problems"] == [] and rep["files"] == 10, rep
    m.mount()
    r = m.run("scrub", "--json", m.mnt)
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["damaged_total"] == 0 and rep["blocks"] > 26, r.describe()
    for n, data in old.items():
        assert read(f"{d}/.snapshot/s1/{n}") == data, n
    # The live tree takes the snapshot's (compressed) blocks back: still the same bytes.
    assert m.run("restore", f"{d}/f0", "--from", "s1", "--replace").returncode == 0
    assert read(f"{d}/f0") == old["f0"]


def test_compress_on_an_unmounted_store_and_bad_arguments(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    with open(f"{d}/a", "wb") as h:
        h.write(text(1, 400_000))
    assert m.run("snapshot", "--name", "s", d).returncode == 0
    os.unlink(f"{d}/a")
    m.umount()
    r = m.run("compress", "--store", m.store, "--budget-mib", "1")
    assert r.returncode == 0 and "compressed" in r.stdout, r.describe()
    m.check()
    for bad in (["--level", "0"], ["--level", "23"], ["--budget-mib", "x"]):
        r = m.run("compress", "--store", m.store, *bad)
        assert r.returncode == 2 and r.stderr, (bad, r.describe())
    r = m.run("compress", "--store", os.path.join(m.root, "nowhere"))
    assert r.returncode != 0 and "nowhere" in r.stderr, r.describe()
    assert "old versions" in m.run("compress", "--help").stdout
    m.mount()
    assert read(f"{d}/.snapshot/s/a") == text(1, 400_000)
