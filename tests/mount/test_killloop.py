"""A kill loop through the mount (issue 34): the daemon SIGKILLed at random moments of
commands of several steps (cube create --convert, cube remove, restore --replace, rollback,
destroy, compress, repack, a mirror's send to a second store), with a writer beside them
that fsyncs what it writes. After each kill the store is mounted again and must hold every
fsynced byte, the command done or not done (the tree it works on whole, in its old form or
its new; a mirrored snapshot arrives whole), and after an unmount `scion check --json` must
be clean, with nothing left by the crash (no pending command, no pack space that nothing
references), in the source store and in the mirror's.

    SCION_SEED=N SCION_KILLLOOP_SECONDS=600 python3 -m pytest -q tests/mount/test_killloop.py

CI runs it for a minute (SCION_KILLLOOP_SECONDS, default 60) with a fixed seed (default 34).
"""

import hashlib
import json
import os
import random
import shutil
import subprocess
import threading
import time

import pytest

from conftest import PLAIN
from test_mirror import status as mirror_status
from test_mirror import tree

pytestmark = pytest.mark.skipif(PLAIN, reason="kills the scion daemon")

SECONDS = float(os.environ.get("SCION_KILLLOOP_SECONDS", "60"))


def digest(root):
    """A hash of every regular file below root (paths and bytes), snapshots left out."""
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(x for x in dirs if x != ".snapshot")
        for n in sorted(files):
            p = os.path.join(d, n)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def fill(root, rng, n):
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        d = os.path.join(root, f"d{i % 12}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(rng.randbytes(rng.choice([200, 5000, 70000])))


class Writer(threading.Thread):
    """Writes files in `dir`, each fsynced; `done` holds every fsynced file's bytes."""

    def __init__(self, dir, seed):
        super().__init__(daemon=True)
        self.dir, self.rng, self.done, self.stop = dir, random.Random(seed), {}, threading.Event()
        os.makedirs(dir, exist_ok=True)

    def run(self):
        i = 0
        while not self.stop.is_set():
            p = os.path.join(self.dir, f"w{i}")
            data = self.rng.randbytes(self.rng.choice([100, 9000, 100000]))
            try:
                with open(p, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                return  # the daemon was killed
            self.done[p] = data
            i += 1


def setup_round(m, rng, kind, target):
    """Makes what command `kind` works on; returns (argv, the path, the acceptable digests)."""
    M = m.mnt
    p = os.path.join(M, "work")
    fill(p, rng, 300)
    before = digest(p)
    if kind == "mirror":
        # The snapshot starts the daemon's send of it to `target` (in another store); the
        # kill lands before, during or after that send.
        os.makedirs(target)
        assert m.run("mirror", "add", p, "--to", target).returncode == 0
        fill(os.path.join(p, "big"), rng, 40)
        return ["snapshot", p, "--name", "s"], p, {digest(p)}
    if kind == "convert":
        return ["cube", "create", p, "--convert"], p, {before}
    if kind == "remove":
        assert m.run("cube", "create", p, "--convert").returncode == 0
        return ["cube", "remove", p], p, {before}
    if kind == "restore":
        assert m.run("snapshot", p, "--name", "s").returncode == 0
        shutil.rmtree(os.path.join(p, "d0"))
        fill(os.path.join(p, "new"), rng, 50)
        return ["restore", p, "--from", "s", "--replace"], p, {before, digest(p)}
    if kind in ("rollback", "destroy"):
        c = os.path.join(M, "clone")
        assert m.run("clone", p, c).returncode == 0
        assert m.run("snapshot", c, "--name", "s").returncode == 0
        shutil.rmtree(os.path.join(c, "d1"))
        fill(os.path.join(c, "more"), rng, 40)
        if kind == "rollback":
            return ["rollback", c, "--to", "s"], c, {before, digest(c)}
        return ["destroy", "-r", c], c, {digest(c), None}
    # compress and repack change where bytes lie, never what they are.
    assert m.run("snapshot", p, "--name", "s").returncode == 0
    for i in range(0, 300, 3):
        with open(os.path.join(p, f"d{i % 12}", f"f{i}"), "r+b") as f:
            f.write(rng.randbytes(100))
    return (["compress", M] if kind == "compress" else ["repack", p]), p, {digest(p)}


def check_clean(m):
    """`m` unmounted, checked clean with no pack space unreferenced, and mounted again."""
    m.umount()
    r = m.run("check", "--json", m.store)
    assert r.returncode == 0, r.describe()
    rep = json.loads(r.stdout.splitlines()[0])
    assert rep["problems"] == [] and rep["leftovers"] == [], rep
    assert rep["unreferenced_bytes"] == 0, rep
    m.mount()


def mirror_arrived(m, path, target, what):
    """After a mirror round's remount: the snapshot reaches the target, equal to the source's."""
    snap = os.path.join(path, ".snapshot", "s")
    if os.path.exists(snap):  # else the kill came before the snapshot: nothing to send
        m._wait(lambda: mirror_status(m)[0]["last"] == "s", 90, f"{what}: s on the mirror")
        assert tree(os.path.join(target, "s")) == tree(snap), f"{what}: the mirror differs"
    assert m.run("mirror", "remove", path).returncode == 0


def test_kill_loop(scion_mount, scion_store):
    m, b = scion_mount, scion_store
    b.mount()
    seed = int(os.environ.get("SCION_SEED", "34"))
    rng = random.Random(seed)
    print(f"seed={seed}")
    kinds = ["convert", "remove", "restore", "rollback", "destroy", "compress", "repack", "mirror"]
    end, rounds = time.time() + SECONDS, 0
    while time.time() < end or rounds < len(kinds):
        kind = kinds[rounds % len(kinds)] if rounds < len(kinds) else rng.choice(kinds)
        target = os.path.join(b.mnt, f"m{rounds}")
        argv, path, ok = setup_round(m, rng, kind, target)
        os.sync()
        w = Writer(os.path.join(m.mnt, "w"), rng.random())
        w.start()
        cmd = subprocess.Popen([m.bin, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.8))
        m.kill9()
        w.stop.set()
        w.join(timeout=30)
        cmd.wait(timeout=60)
        m.mount()
        what = f"seed={seed} round {rounds} ({kind})"
        for p, data in w.done.items():
            with open(p, "rb") as f:
                assert f.read() == data, f"{what}: fsynced {p} changed"
        got = digest(path) if os.path.exists(path) else None
        assert got in ok, f"{what}: {path} is neither before nor after the command"
        assert not [n for n in os.listdir(m.mnt) if "scion-" in n], f"{what}: {os.listdir(m.mnt)}"
        if kind == "mirror":
            mirror_arrived(m, path, target, what)
        check_clean(m)
        # Clean for the next round.
        if "work" in json.dumps([json.loads(x) for x in m.run("cube", "list", "--json", m.mnt).stdout.splitlines()]):
            assert m.run("cube", "remove", os.path.join(m.mnt, "work")).returncode == 0
        for c in ("clone",):
            if os.path.exists(os.path.join(m.mnt, c)):
                assert m.run("destroy", "-r", os.path.join(m.mnt, c)).returncode == 0
        for s in ("s",):
            if os.path.exists(os.path.join(m.mnt, "work", ".snapshot", s)):
                assert m.run("destroy", "-r", os.path.join(m.mnt, "work", ".snapshot", s)).returncode == 0
        shutil.rmtree(os.path.join(m.mnt, "work"), ignore_errors=True)
        shutil.rmtree(os.path.join(m.mnt, "w"), ignore_errors=True)
        rounds += 1
    print(f"{rounds} rounds")
    check_clean(m)
    check_clean(b)
