"""`scion send` / `scion receive` through the mount (issue 20, in part): a full stream and a
chain of increments round-trip a tree with hard links, xattrs, sparse files, symlinks, FIFOs
and small patches, compared tree by tree; a base is found by content in a store that got it
by `cp -a`; a missing or wrong base is refused; a stream cut at any frame or damaged leaves
nothing behind; a small write travels as its patch."""

import json
import os
import random
import re
import stat
import subprocess

import pytest

from conftest import PLAIN, SCION_BIN, small_host

pytestmark = pytest.mark.skipif(PLAIN, reason="send needs a scion mount")


def tree(root):
    """{path: (kind, mode, uid, mtime_ns, xattrs, content)} below root (hard links as ids)."""
    out, inodes = {}, {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".snapshot")
        for n in sorted(dirs + files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as h:
                    body = h.read()
                if st.st_nlink > 1:
                    body = (body, inodes.setdefault(st.st_ino, len(inodes)))
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            else:
                body = None
            xs = () if stat.S_ISLNK(st.st_mode) else tuple(sorted(
                (k, os.getxattr(p, k, follow_symlinks=False)) for k in os.listxattr(p, follow_symlinks=False)))
            mt = None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, mt, xs, body)
    return out


def build(top, rng):
    os.makedirs(f"{top}/d/e")
    for i in range(30):
        p = f"{top}/{rng.choice(['', 'd/', 'd/e/']) if i >= 10 else ''}f{i}"
        with open(p, "wb") as h:
            h.write(bytes(rng.randrange(256) for _ in range(rng.choice([0, 5, 3000, 70000, 200000]))))
        os.chmod(p, rng.choice([0o644, 0o600, 0o755]))
        if rng.random() < 0.2:
            os.setxattr(p, "user.tag", str(i).encode())
    os.link(f"{top}/f0", f"{top}/d/f0-link")
    os.symlink("f1", f"{top}/l")
    os.mkfifo(f"{top}/fifo")
    with open(f"{top}/sparse", "wb") as h:
        h.truncate(5 << 20)
        h.seek(3 << 20)
        h.write(b"middle")


def change(top, rng):
    with open(f"{top}/f2", "r+b") as h:            # a small write: a patch
        h.seek(10)
        h.write(b"patch!")
    with open(f"{top}/d/new", "wb") as h:
        h.write(os.urandom(150000))
    os.remove(f"{top}/f3")
    os.rename(f"{top}/f4", f"{top}/d/e/moved")
    os.chmod(f"{top}/f5", 0o700)
    os.makedirs(f"{top}/newdir/deep")
    os.link(f"{top}/d/new", f"{top}/newdir/deep/new-link")
    with open(f"{top}/sparse", "r+b") as h:
        h.seek(4 << 20)
        h.write(b"more")
    os.setxattr(f"{top}/f1", "user.added", b"x")
    os.remove(f"{top}/l")                      # a symlink retargeted
    os.symlink("f2", f"{top}/l")


def two_snapshots(m, seed):
    """A tree `a` in mount `m` snapshotted as s1, changed, and snapshotted as s2; its path."""
    rng = random.Random(seed)
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    build(a, rng)
    assert m.run("snapshot", "--name", "s1", a).returncode == 0
    change(a, rng)
    assert m.run("snapshot", "--name", "s2", a).returncode == 0
    return a


def test_full_and_incremental_round_trips(scion_mount, tmp_path):
    m = scion_mount
    rng = random.Random(11)
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    build(a, rng)
    assert m.run("snapshot", "--name", "s1", a).returncode == 0
    full = str(tmp_path / "full")
    r = m.run("send", f"{a}/.snapshot/s1", "-o", full)
    assert r.returncode == 0, r.describe()
    b = os.path.join(m.mnt, "b")
    r = m.run("receive", b, "-i", full)
    assert r.returncode == 0, r.describe()
    assert tree(b) == tree(f"{a}/.snapshot/s1")
    assert os.listdir(f"{b}/.snapshot") == ["s1"]
    # A chain of increments, each received on the last.
    prev = "s1"
    for k in range(2, 5):
        change(a, rng) if k == 2 else open(f"{a}/step{k}", "w").write(str(k))
        name = f"s{k}"
        assert m.run("snapshot", "--name", name, a).returncode == 0
        inc = str(tmp_path / name)
        r = m.run("send", f"{a}/.snapshot/{name}", "--base", f"{a}/.snapshot/{prev}", "-o", inc)
        assert r.returncode == 0, r.describe()
        if k == 2:
            # The 6-byte patch and the 150 KB file, compressed: far below the tree's size.
            assert os.path.getsize(inc) < os.path.getsize(full) / 2, (os.path.getsize(inc), os.path.getsize(full))
        dst = os.path.join(m.mnt, f"b{k}")
        r = m.run("receive", dst, "-i", inc)
        assert r.returncode == 0, r.describe()
        assert tree(dst) == tree(f"{a}/.snapshot/{name}"), k
        assert m.run("diff", "--metadata", f"{a}/.snapshot/{name}", dst).returncode == 0
        prev = name
    # A live directory is sent through a snapshot taken for it (and gone after).
    r = subprocess.run(f"{SCION_BIN} send {a} --base {a}/.snapshot/s4 | {SCION_BIN} receive {m.mnt}/live",
                       shell=True, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert tree(f"{m.mnt}/live") == tree(a)
    assert sorted(os.listdir(f"{a}/.snapshot")) == ["s1", "s2", "s3", "s4"]


def test_base_found_by_content_and_refused_when_absent(scion_mount, tmp_path):
    m = scion_mount
    rng = random.Random(5)
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    build(a, rng)
    assert m.run("snapshot", "--name", "base", a).returncode == 0
    with open(f"{a}/f7", "ab") as h:
        h.write(b"appended")
    assert m.run("snapshot", "--name", "next", a).returncode == 0
    inc = str(tmp_path / "inc")
    assert m.run("send", f"{a}/.snapshot/next", "--base", f"{a}/.snapshot/base", "-o", inc).returncode == 0
    # The second store has no base yet: refused, nothing left behind.
    other = m.__class__(str(tmp_path / "other"))
    other.init()
    other.mount()
    try:
        r = other.run("receive", f"{other.mnt}/x", "-i", inc)
        assert r.returncode == 1 and "base" in r.stderr, r.describe()
        assert os.listdir(other.mnt) == []
        # A copy of the base with one byte changed, snapshotted under the base's name: not
        # the base, refused.
        subprocess.run(["cp", "-a", f"{a}/.snapshot/base", f"{other.mnt}/near"], check=True)
        with open(f"{other.mnt}/near/f1", "r+b") as h:
            h.write(b"?")
        assert other.run("snapshot", "--name", "base", f"{other.mnt}/near").returncode == 0
        r = other.run("receive", f"{other.mnt}/x", "-i", inc)
        assert r.returncode == 1 and "base" in r.stderr, r.describe()
        assert sorted(os.listdir(other.mnt)) == ["near"]
        # The base arrives another way (cp -a), is snapshotted under another name: found.
        subprocess.run(["cp", "-a", f"{a}/.snapshot/base", f"{other.mnt}/copy"], check=True)
        assert other.run("snapshot", "--name", "whatever", f"{other.mnt}/copy").returncode == 0
        r = other.run("receive", f"{other.mnt}/x", "-i", inc)
        assert r.returncode == 0, r.describe()
        assert tree(f"{other.mnt}/x") == tree(f"{a}/.snapshot/next")
    finally:
        other.umount()
    assert "clean" in other.check()


def test_cut_or_damaged_streams_leave_nothing(scion_mount, tmp_path):
    m = scion_mount
    rng = random.Random(8)
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    build(a, rng)
    for compress in (True, False):
        s = str(tmp_path / f"s{compress}")
        args = ["send", a, "-o", s] + ([] if compress else ["--no-compress"])
        assert m.run(*args).returncode == 0
        data = open(s, "rb").read()
        cuts = sorted(set([0, 5, 10, 11, len(data) // 3, len(data) // 2, len(data) - 1] +
                          [rng.randrange(len(data)) for _ in range(6)]))
        for cut in cuts:
            open(s + ".cut", "wb").write(data[:cut])
            r = m.run("receive", f"{m.mnt}/x", "-i", s + ".cut")
            assert r.returncode == 1, (cut, r.describe())
            assert sorted(os.listdir(m.mnt)) == ["a"], (cut, os.listdir(m.mnt))
        for _ in range(6):
            d = bytearray(data)
            i = rng.randrange(10, len(d))
            d[i] ^= 0x10
            open(s + ".bad", "wb").write(bytes(d))
            r = m.run("receive", f"{m.mnt}/x", "-i", s + ".bad")
            assert r.returncode == 1, (i, r.describe())
            assert sorted(os.listdir(m.mnt)) == ["a"]
    assert m.run("receive", f"{m.mnt}/x", "-i", "/dev/null").returncode == 1
    assert m.run("receive", a, "-i", s).returncode != 0, "DIR exists"
    assert m.run("send", "--help").returncode == 0 and m.run("receive", "--help").returncode == 0
    m.umount()
    assert "clean" in m.check()
    m.mount()


def test_a_cut_receive_resumes_where_it_stopped(scion_mount, tmp_path):
    import re
    m = scion_mount
    a = two_snapshots(m, 21)
    for name, base, compress in [("s1", None, False), ("s2", "s1", True)]:
        snap = f"{a}/.snapshot/{name}"
        whole = str(tmp_path / f"{name}.st")
        args = ["send", snap, "-o", whole] + (["--base", f"{a}/.snapshot/{base}"] if base else [])
        assert m.run(*args, *([] if compress else ["--no-compress"])).returncode == 0
        data = open(whole, "rb").read()
        if not compress:
            plain = data
        dst = os.path.join(m.mnt, f"got-{name}")
        rest_of = whole
        for cut_at in (0.4, 0.5):                 # cut, resume, cut the rest, resume again
            cut = data if rest_of == whole else open(rest_of, "rb").read()
            open(whole + ".cut", "wb").write(cut[: int(len(cut) * cut_at)])
            mode = "--resumable" if rest_of == whole else "--resume"
            r = m.run("receive", dst, mode, "-i", whole + ".cut")
            assert r.returncode == 1, r.describe()
            token = re.search(r"--resume (scion1:[0-9a-f]+)", r.stderr)
            assert token, r.stderr
            assert not os.path.exists(dst) and os.path.isdir(os.path.join(m.mnt, f".got-{name}.scion-receive"))
            rest_of = str(tmp_path / f"{name}.rest")
            r = m.run("send", snap, "--resume", token.group(1), "-o", rest_of,
                      *(["--base", f"{a}/.snapshot/{base}"] if base else []), *([] if compress else ["--no-compress"]))
            assert r.returncode == 0, r.describe()
            assert os.path.getsize(rest_of) < len(data)
        r = m.run("receive", dst, "--resume", "-i", rest_of)
        assert r.returncode == 0, r.describe()
        assert tree(dst) == tree(snap)
    # A token for another tree is refused by the sender; --abort removes what was kept.
    open(whole + ".cut", "wb").write(data[: len(data) // 2])
    r = m.run("receive", f"{m.mnt}/x", "--resumable", "-i", whole + ".cut")
    token = re.search(r"--resume (scion1:[0-9a-f]+)", r.stderr).group(1)
    assert m.run("send", f"{a}/.snapshot/s1", "--resume", token, "-o", str(tmp_path / "no")).returncode != 0
    assert m.run("receive", f"{m.mnt}/x", "-i", whole).returncode == 1, "a receive stopped short is there"
    assert m.run("receive", f"{m.mnt}/x", "--abort").returncode == 0
    assert not os.path.exists(f"{m.mnt}/.x.scion-receive")
    # A damaged stream is not kept, even when resumable.
    d = bytearray(plain)
    d[len(d) // 2] ^= 0x10
    open(whole + ".bad", "wb").write(bytes(d))
    r = m.run("receive", f"{m.mnt}/y", "--resumable", "-i", whole + ".bad")
    assert r.returncode == 1 and "--resume" not in r.stderr, r.describe()
    assert sorted(n for n in os.listdir(m.mnt) if "y" in n) == []
    m.umount()
    assert "clean" in m.check()
    m.mount()


def test_abort_removes_what_a_killed_receive_left(scion_mount, tmp_path):
    """A receive of an increment SIGKILLed while it waits for the rest of its stream leaves
    its hidden tree and the base it held; `--abort` removes both (and no running receive's),
    and the store checks clean."""
    import signal
    import time
    m = scion_mount
    a = two_snapshots(m, 5)
    inc = str(tmp_path / "inc")
    r = m.run("send", f"{a}/.snapshot/s2", "--base", f"{a}/.snapshot/s1", "--no-compress", "-o", inc)
    assert r.returncode == 0, r.describe()
    data = open(inc, "rb").read()
    dst = os.path.join(m.mnt, "got")
    left = lambda: sorted(n for n in os.listdir(m.mnt) if n.startswith(".got.scion-receive"))
    # Half the stream, then nothing more and no end: the receiver waits, mid-receive.
    p = subprocess.Popen([SCION_BIN, "receive", dst], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdin.write(data[: len(data) // 2])
    p.stdin.flush()
    deadline = time.time() + 30
    while len(left()) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert left() == [f".got.scion-receive-{p.pid}", f".got.scion-receive-{p.pid}.base"], left()
    # A receive that is running is not removed by another's --abort.
    r = m.run("receive", dst, "--abort")
    assert left() == [f".got.scion-receive-{p.pid}", f".got.scion-receive-{p.pid}.base"], r.describe()
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stdin.close()
    r = m.run("receive", dst, "--abort")
    assert r.returncode == 0, r.describe()
    assert left() == [] and not os.path.exists(dst), left()
    assert r.stderr.count("left by a receive that was killed") == 2, r.stderr
    # The same stream, whole, is received as if nothing had happened.
    r = m.run("receive", dst, "-i", inc)
    assert r.returncode == 0, r.describe()
    assert tree(dst) == tree(f"{a}/.snapshot/s2")
    m.umount()
    assert "clean" in m.check()
    m.mount()


def test_list_shows_clones_made_from_a_snapshot_and_destroy_says_they_stay(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(d)
    with open(f"{d}/f", "w") as h:
        h.write("kept\n")
    assert m.run("snapshot", "--name", "s1", d).returncode == 0
    assert m.run("clone", f"{d}/.snapshot/s1", f"{m.mnt}/c").returncode == 0
    r = m.run("list", "--json", m.mnt)
    rows = {x["path"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert rows["/d/.snapshot/s1"]["clones"] == [rows["/c"]["id"]] and rows["/c"]["origin"] == "/d/.snapshot/s1"
    # The table stays one row per line (scripts and the soak test read it by columns).
    table = m.run("list", m.mnt).stdout.splitlines()
    assert table[0].split()[-1] == "CLONES"
    by_path = {ln.split()[2]: ln.split() for ln in table[1:]}
    assert set(by_path) == {"/d/.snapshot/s1", "/c"}, table
    assert by_path["/d/.snapshot/s1"][-1] == "1" and by_path["/c"][-1] == "-", table
    # -H -p: for scripts, no header, tabs, exact numbers (as `zfs list -Hp`).
    rows = {f[2]: f for f in (ln.split("\t") for ln in m.run("list", "-Hp", m.mnt).stdout.splitlines())}
    js = {x["path"]: x for x in map(json.loads, m.run("list", "--json", m.mnt).stdout.splitlines())}
    assert set(rows) == {"/d/.snapshot/s1", "/c"}, rows
    for p, f in rows.items():
        assert len(f) == 9 and f[0] == js[p]["kind"] and int(f[1]) == js[p]["id"], (f, js[p])
        assert (int(f[5]), int(f[6]), int(f[7])) == (js[p]["refer"], js[p]["used"], js[p]["stored"]), (f, js[p])
    r = m.run("destroy", f"{d}/.snapshot/s1")
    assert r.returncode == 0 and "keep their files" in r.stdout and "/c" in r.stdout, r.describe()
    with open(f"{m.mnt}/c/f") as h:
        assert h.read() == "kept\n"


def transient_mounts():
    with open("/proc/self/mountinfo") as h:
        return [ln for ln in h if "scion-transient-" in ln]


def test_receive_into_an_unmounted_store(scion_mount, scion_store, tmp_path):
    """`receive --store`: the store is mounted for the receive at a private directory and
    unmounted, flushed, after it, also when the receiver is killed (its daemon gets SIGTERM
    when the receiver dies); a refused increment leaves nothing there."""
    m, s = scion_mount, scion_store
    a = two_snapshots(m, 3)
    full, inc = str(tmp_path / "full"), str(tmp_path / "inc")
    assert m.run("send", f"{a}/.snapshot/s1", "-o", full).returncode == 0
    assert m.run("send", f"{a}/.snapshot/s2", "--base", f"{a}/.snapshot/s1", "-o", inc).returncode == 0
    # The increment first: no base in the store, refused, nothing left, not mounted after.
    r = s.run("receive", "--store", s.store, "/x", "-i", inc)
    assert r.returncode == 1 and "base" in r.stderr, r.describe()
    assert not transient_mounts(), r.describe()
    r = s.run("receive", "--store", s.store, "/x", "-i", full)
    assert r.returncode == 0, r.describe()
    assert f"{s.store}:/x" in r.stderr, r.describe()
    r = s.run("receive", "--store", s.store, "y", "-i", inc)
    assert r.returncode == 0, r.describe()
    assert not transient_mounts()
    assert "clean" in s.check()
    # A receiver killed in the middle: its store is unmounted and flushed all the same.
    p = subprocess.Popen(f"sleep 30 | exec {SCION_BIN} receive --store {s.store} /z", shell=True,
                         stderr=subprocess.PIPE, start_new_session=True)
    m._wait(lambda: transient_mounts(), 10, "the store mounted for the receive")
    receiver = int(subprocess.run(["pgrep", "-f", f"^{SCION_BIN} receive --store {s.store} /z"],
                                  capture_output=True, text=True).stdout.split()[0])
    os.kill(receiver, 9)
    m._wait(lambda: not transient_mounts(), 10, "the store unmounted after the receiver died")
    os.killpg(p.pid, 9)
    p.wait()
    s._wait(lambda: subprocess.run([SCION_BIN, "check", s.store], capture_output=True).returncode == 0,
            10, "the store's lock released and the store clean")
    s.mount()
    assert tree(f"{s.mnt}/x") == tree(f"{a}/.snapshot/s1")
    assert tree(f"{s.mnt}/y") == tree(f"{a}/.snapshot/s2")
    assert os.listdir(f"{s.mnt}/y/.snapshot") == ["s2"]
    assert "z" not in os.listdir(s.mnt)
    # Mounted, the store's own mount is used.
    r = s.run("receive", "--store", s.store, "/w", "-i", full)
    assert r.returncode == 0, r.describe()
    assert tree(f"{s.mnt}/w") == tree(f"{a}/.snapshot/s1")
    assert not transient_mounts()


def test_dedup_over_a_two_way_channel(scion_mount, scion_store, tmp_path):
    """`send --dedup --through CMD`: the receiver says which of the stream's blocks it holds
    (anywhere in its store, however they got there) and those go as hashes. A second base-less
    send of a tree the receiver holds moves almost nothing; a tree it holds part of moves the
    rest; a negotiated stream replayed to a store without those blocks is refused whole."""
    m, s = scion_mount, scion_store
    s.mount()
    rng = random.Random(5)
    a = os.path.join(m.mnt, "a")
    os.makedirs(a)
    build(a, rng)
    with open(f"{a}/big", "wb") as h:
        h.write(os.urandom(8 << 20))
    assert m.run("snapshot", "--name", "s1", a).returncode == 0
    snap = f"{a}/.snapshot/s1"
    # The receiver gets the tree by another route than a stream: cp -a.
    subprocess.run(["cp", "-a", snap, f"{s.mnt}/copied"], check=True)
    sent = tmp_path / "negotiated"
    recv = f"tee {sent} | {SCION_BIN} receive {s.mnt}/r1"
    r = m.run("send", snap, "--dedup", "--through", recv)
    assert r.returncode == 0, r.describe()
    held, offered = map(int, re.search(r"holds (\d+) of the (\d+) blocks", r.stderr).groups())
    assert held == offered >= 128, r.describe()  # the 8 MiB file and the 200 KB ones
    assert tree(f"{s.mnt}/r1") == tree(snap)
    full = tmp_path / "full"
    assert m.run("send", snap, "-o", str(full)).returncode == 0
    # The negotiated stream is a small part of the full one (its small files still go whole).
    assert os.path.getsize(sent) * 10 < os.path.getsize(full), (os.path.getsize(sent), os.path.getsize(full))
    # Half of big changes: only that half travels.
    with open(f"{a}/big", "r+b") as h:
        h.seek(4 << 20)
        h.write(os.urandom(4 << 20))
    assert m.run("snapshot", "--name", "s2", a).returncode == 0
    sent2 = tmp_path / "negotiated2"
    r = m.run("send", f"{a}/.snapshot/s2", "--dedup", "--through", f"tee {sent2} | {SCION_BIN} receive {s.mnt}/r2")
    assert r.returncode == 0, r.describe()
    assert tree(f"{s.mnt}/r2") == tree(f"{a}/.snapshot/s2")
    assert (4 << 20) < os.path.getsize(sent2) < (6 << 20), os.path.getsize(sent2)
    # Replayed to a store that holds none of those blocks: refused, nothing left.
    other = str(tmp_path / "other")
    assert m.run("init", other).returncode == 0
    r = m.run("receive", "--store", other, "/x", "-i", str(sent))
    assert r.returncode != 0 and "held here" in r.stderr, r.describe()
    assert "x" not in m.run("list", "--json", "--store", other).stdout
    assert m.run("check", other).returncode == 0
    # --dedup needs the two-way channel; a failing receiver fails the send.
    r = m.run("send", snap, "--dedup", "-o", str(tmp_path / "x"))
    assert r.returncode != 0 and "--through" in r.stderr, r.describe()
    r = m.run("send", snap, "--dedup", "--through", f"{SCION_BIN} receive {s.mnt}/r1")
    assert r.returncode != 0 and "already exists" in r.stderr and "stopped before it answered" in r.stderr, r.describe()
    s.umount()


def test_a_receive_that_fills_the_host_fails_cleanly(scion_mount, scion_store, tmp_path):
    """A receive into a store whose host fills up (a 96 MiB tmpfs under it) fails with the
    host's error named, leaves nothing in the mount, loses nothing that was there, and gives
    the space back at once: a receive that fits works right after it, and `check` is clean."""
    m, s = scion_mount, scion_store
    big = os.path.join(m.mnt, "big")
    os.makedirs(f"{big}/d")
    for i in range(12):
        with open(f"{big}/d/f{i}", "wb") as h:
            h.write(os.urandom(10 << 20))
    small = os.path.join(m.mnt, "small")
    os.makedirs(small)
    build(small, random.Random(5))
    assert m.run("snapshot", "--name", "b", big).returncode == 0
    assert m.run("snapshot", "--name", "s", small).returncode == 0
    big_s, small_s = str(tmp_path / "big"), str(tmp_path / "small")
    assert m.run("send", f"{big}/.snapshot/b", "-o", big_s).returncode == 0
    assert m.run("send", f"{small}/.snapshot/s", "-o", small_s).returncode == 0
    with small_host(s):
        keep = os.urandom(1 << 20)
        with open(f"{s.mnt}/keep", "wb") as h:
            h.write(keep)
            h.flush()
            os.fsync(h.fileno())
        r = s.run("receive", f"{s.mnt}/x", "-i", big_s)
        assert r.returncode == 1 and "No space left on device" in r.stderr, r.describe()
        assert sorted(set(os.listdir(s.mnt)) - {".snapshot"}) == ["keep"], r.describe()
        with open(f"{s.mnt}/keep", "rb") as h:
            assert h.read() == keep
        r = s.run("receive", f"{s.mnt}/y", "-i", small_s)
        assert r.returncode == 0, r.describe()
        assert tree(f"{s.mnt}/y") == tree(f"{small}/.snapshot/s")
        s.umount()
        assert "clean" in s.check()
        s.mount()
        with open(f"{s.mnt}/keep", "rb") as h:
            assert h.read() == keep
        assert tree(f"{s.mnt}/y") == tree(f"{small}/.snapshot/s")
