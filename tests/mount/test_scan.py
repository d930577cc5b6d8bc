"""`scion scan` through the mount (issue 19 item 2): COMMAND runs once per distinct content
across a tree and its clones (invocations counted), every path gets the result of its content
as if COMMAND had run on it (sha256sum's output equals sha256sum over every file), a second
scan runs nothing (results kept in the store), --since runs on what changed since a snapshot,
--json, exit codes."""

import hashlib
import json
import os
import random
import re

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="scan needs a scion mount")


def files_below(*roots):
    out = {}
    for r in roots:
        for d, dirs, fs in os.walk(r):
            dirs[:] = [x for x in dirs if x != ".snapshot"]
            for f in fs:
                p = os.path.join(d, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as h:
                        out[p] = h.read()
    return out


def counted(log):
    """A command that logs each run, then prints sha256sum's line for its file."""
    return ["sh", "-c", f'echo "$1" >> {log}; sha256sum "$1"', "sh", "{}"]


PIN = re.compile(r"/\.snapshot/\.scion-scan-[0-9a-f]+(?=/|$)")


def runs(log):
    """The paths COMMAND ran on, as the live paths they pinned: a scan that keeps results
    runs COMMAND on a snapshot it takes for the purpose (DIR/.snapshot/.scion-scan-HEX)."""
    if not os.path.exists(log):
        return []
    with open(log) as h:
        return [PIN.sub("", line) for line in h.read().splitlines()]


def test_scan_runs_once_per_content_and_reports_every_path(scion_mount, tmp_path):
    m = scion_mount
    rng = random.Random(3)
    src = os.path.join(m.mnt, "src")
    shared = [bytes(rng.randrange(256) for _ in range(n)) for n in (0, 100, 5000, 200_000)]
    for d in range(4):
        os.makedirs(f"{src}/d{d}")
        for f in range(6):
            data = rng.choice(shared) if rng.random() < 0.5 else os.urandom(rng.choice([10, 3000, 90_000]))
            with open(f"{src}/d{d}/f{f}", "wb") as h:
                h.write(data)
    os.symlink("d0/f0", f"{src}/link")
    c1, c2 = os.path.join(m.mnt, "c1"), os.path.join(m.mnt, "c2")
    assert m.run("clone", src, c1).returncode == 0
    assert m.run("clone", src, c2).returncode == 0
    assert m.run("snapshot", "--name", "before", c1).returncode == 0
    with open(f"{c1}/d1/f2", "r+b") as h:
        h.write(b"changed")
    with open(f"{c2}/new", "wb") as h:
        h.write(shared[3])               # the same bytes as files elsewhere: no new run
    with open(f"{c1}/d3/unsynced", "wb") as h:
        h.write(b"only in the page cache, maybe")
    log = str(tmp_path / "runs")
    r = m.run("scan", src, c1, c2, "--", *counted(log))
    assert r.returncode == 0, r.describe()
    every = files_below(src, c1, c2)
    distinct = set(every.values())
    ran = {every[p] for p in runs(log)}
    assert len(runs(log)) == len(distinct), (len(runs(log)), len(distinct), len(every), [(p, len(b)) for p, b in every.items() if b not in ran])
    want = sorted(f"{hashlib.sha256(b).hexdigest()}  {p}" for p, b in every.items())
    assert sorted(r.stdout.splitlines()) == want
    assert f"{len(every)} files, {len(distinct)} distinct contents: {len(distinct)} run, 0 from the cache" in r.stderr, r.stderr

    # Again: every result from the cache, nothing run.
    os.remove(log)
    r = m.run("scan", src, c1, c2, "--", *counted(log))
    assert r.returncode == 0 and runs(log) == [], r.describe()
    assert sorted(r.stdout.splitlines()) == want
    # One more change: one run.
    with open(f"{c2}/d0/f0", "ab") as h:
        h.write(b"+")
    r = m.run("scan", src, c1, c2, "--", *counted(log))
    assert len(runs(log)) == 1 and runs(log)[0].endswith("/c2/d0/f0"), runs(log)
    # --no-cache runs on everything again.
    os.remove(log)
    r = m.run("scan", "--no-cache", "--jobs", "3", src, "--", *counted(log))
    assert len(runs(log)) == len(set(files_below(src).values()))

    # In batches (`{} +`, as find -exec): the same lines, each content once, fewer runs.
    os.remove(log)
    batched = ["sh", "-c", f'echo run >> {log}.runs; for f; do echo "$f" >> {log}; done; sha256sum "$@"', "sh", "{}", "+"]
    every = files_below(src, c1, c2)
    r = m.run("scan", "--no-cache", "--jobs", "2", src, c1, c2, "--", *batched)
    assert r.returncode == 0, r.describe()
    assert len(runs(log)) == len(set(every.values()))
    assert len(runs(log + ".runs")) <= 2, runs(log + ".runs")
    want = sorted(f"{hashlib.sha256(b).hexdigest()}  {p}" for p, b in every.items())
    assert sorted(r.stdout.splitlines()) == want
    # Kept from a batch that exited 0, shown again without a run.
    r = m.run("scan", src, c1, c2, "--", *batched)
    assert sorted(r.stdout.splitlines()) == want
    r = m.run("scan", src, c1, c2, "--", *batched)
    assert "0 run" in r.stderr, r.stderr
    # --since: only what differs from the snapshot.
    os.remove(log)
    r = m.run("scan", "--since", "before", "--no-cache", c1, "--", *counted(log))
    assert r.returncode == 0, r.describe()
    assert sorted(runs(log)) == sorted([f"{c1}/d1/f2", f"{c1}/d3/unsynced"]), runs(log)
    assert len(r.stdout.splitlines()) == 2

    # --json: one object per file.
    r = m.run("scan", "--json", c2, "--", "wc", "-c")
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert {x["path"] for x in rows} == set(files_below(c2))
    for x in rows:
        assert {"path", "content", "size", "status", "stdout", "stderr", "cached", "ran_on"} <= set(x)
        assert x["stdout"] == f"{x['size']} {x['path']}\n", x
    # Exit codes: 1 when a run fails, 2 when the command cannot start or a path is wrong.
    assert m.run("scan", "--no-cache", src, "--", "false").returncode == 1
    assert m.run("scan", src, "--", "/nonexistent/cmd").returncode == 2
    assert m.run("scan", os.path.join(m.mnt, "nope"), "--", "true").returncode == 2
    assert m.run("scan", "--since", "nope", c1, "--", "true").returncode == 2
    assert m.run("scan", "--help").returncode == 0


def test_scan_output_without_the_path_is_labelled(scion_mount):
    m = scion_mount
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    for n in ("x", "y"):
        with open(f"{a}/{n}", "w") as h:
            h.write("same text\n")
    r = m.run("scan", "--no-cache", a, "--", "sh", "-c", "cat {}")
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines() == [f"{a}/x: same text", f"{a}/y: same text"]
