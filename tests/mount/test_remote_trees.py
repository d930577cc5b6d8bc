"""Trees on an object store (issue 41): `scion push` publishes a snapshot to a real S3-API
server (moto_server on 127.0.0.1, never a mock), `scion pull` attaches it in other stores
without downloading it, blocks fetched when first read. What users rely on: a pulled tree
is exactly the pushed one; clones of one base in two stores stay isolated; a tiny cache
evicts and reads stay right; a remote that is slow, down, answering errors or wrong bytes
gives EIO or the right bytes, never wrong ones, and the mount recovers when it is back; a
cut push leaves the remote consistent and the next one sends only the rest; gc keeps what
a version needs, even with a push under way; a daemon killed mid-fetch loses nothing."""

import errno
import json
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import PLAIN
from s3_helpers import FaultProxy, Moto
from scion_helpers import compare_snapshots, snapshot

pytestmark = pytest.mark.skipif(PLAIN, reason="remotes need a scion store")

CHUNK = 64 << 10


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto_server, and the credentials every daemon mounted from here on is given."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "SCION_REMOTE_DEADLINE_MS")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1", SCION_REMOTE_DEADLINE_MS="3000")
    moto = Moto(str(tmp_path_factory.mktemp("moto")))
    yield moto
    moto.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


_buckets = iter(range(1, 1000))


def remote(s3, *stores, endpoint=None, bucket=None):
    """A fresh bucket (or `bucket`), added as remote `r` to each store (its daemon, started
    after the `s3` fixture, has the credentials)."""
    bucket = bucket or s3.bucket(f"scion-t{os.getpid()}-{next(_buckets)}")
    for m in stores:
        where = ["--mount", m.mnt] if m.mounted else ["--store", m.store]
        r = m.run("remote", "add", "r", f"s3://{bucket}/trees", "--endpoint", endpoint or s3.endpoint, *where)
        assert r.returncode == 0, r.describe()
    return bucket


def random_tree(root, seed, files=40):
    """Files of awkward sizes (empty, one byte, a chunk, a chunk and one, sparse, several
    MiB), a symlink, hard links, an xattr, modes; what send and receive carry."""
    rnd = random.Random(seed)
    os.makedirs(root)
    os.makedirs(os.path.join(root, "d/e"))
    sizes = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]
    for i in range(files):
        size = sizes[i] if i < len(sizes) else rnd.choice([rnd.randrange(1, 4 * CHUNK), rnd.randrange(1, 2 << 20)])
        d = rnd.choice(["", "d", "d/e"]) if i >= len(sizes) else ""
        p = os.path.join(root, d, f"f{i}")
        with open(p, "wb") as f:
            f.write(rnd.randbytes(size))
        os.chmod(p, rnd.choice([0o644, 0o600, 0o755]))
    with open(os.path.join(root, "sparse"), "wb") as f:
        f.write(b"head")
        f.seek(5 * CHUNK + 3)
        f.write(b"tail")
    with open(os.path.join(root, "dup1"), "wb") as f:
        f.write(b"same bytes\n" * 20000)
    with open(os.path.join(root, "dup2"), "wb") as f:
        f.write(b"same bytes\n" * 20000)
    os.symlink("d/e/f1", os.path.join(root, "link"))
    os.link(os.path.join(root, "f2"), os.path.join(root, "d/hard"))
    os.setxattr(os.path.join(root, "f3"), "user.origin", b"pushed")


def push(m, snap, name="base", *extra, ok=True):
    r = m.run("push", snap, "r", "--name", name, "--json", *extra)
    if ok:
        assert r.returncode == 0, r.describe()
        return json.loads(r.stdout)
    return r


def pull(m, dst, name="base", *extra):
    r = m.run("pull", "r", name, dst, "--json", *extra)
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)


def same(a, b):
    diffs = compare_snapshots(snapshot(a), snapshot(b), root_a=a, root_b=b, check_mtime=True)
    assert not diffs, "\n".join(diffs)


def status_remote(m):
    r = m.run("status", m.mnt, "--json")
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout.splitlines()[0])["remote"]


def read_all(root):
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if not os.path.islink(p):
                with open(p, "rb") as f:
                    while f.read(1 << 20):
                        pass


def test_push_and_pull_round_trips_random_trees(scion_mount, scion_store, s3):
    """Two random trees pushed as two versions, each pulled into another store: the same
    files, bytes, modes, times, links and xattrs; the pull writes metadata only and takes
    well under a second; a second version sends only its new blocks; both stores check clean."""
    a, b = scion_mount, scion_store
    b.mount()
    remote(s3, a, b)
    random_tree(os.path.join(a.mnt, "src"), seed=1)
    assert a.run("snapshot", os.path.join(a.mnt, "src"), "--name", "v1").returncode == 0
    p1 = push(a, os.path.join(a.mnt, "src/.snapshot/v1"))
    assert p1["version"] == 1 and p1["new_blocks"] == p1["blocks"] > 0, p1
    # The two files of equal bytes are one block set on the remote.
    got = pull(b, os.path.join(b.mnt, "base"))
    assert got["version"] == 1 and got["snapshot"] == "v1" and got["root"] == p1["root"], got
    assert got["seconds"] < 5, got
    same(os.path.join(a.mnt, "src"), os.path.join(b.mnt, "base"))
    same(os.path.join(a.mnt, "src"), os.path.join(b.mnt, "base/.snapshot/v1"))
    # A second version: a few files changed; only their blocks travel.
    with open(os.path.join(a.mnt, "src/f4"), "wb") as f:
        f.write(random.Random(9).randbytes(200000))
    os.unlink(os.path.join(a.mnt, "src/f5"))
    assert a.run("snapshot", os.path.join(a.mnt, "src"), "--name", "v2").returncode == 0
    p2 = push(a, os.path.join(a.mnt, "src/.snapshot/v2"))
    assert p2["version"] == 2 and 0 < p2["new_bytes"] <= 200000, p2
    pull(b, os.path.join(b.mnt, "v2"))
    same(os.path.join(a.mnt, "src/.snapshot/v2"), os.path.join(b.mnt, "v2"))
    # An older version by number, and what is not there.
    pull(b, os.path.join(b.mnt, "old"), "base", "--version", "1")
    same(os.path.join(a.mnt, "src/.snapshot/v1"), os.path.join(b.mnt, "old"))
    r = b.run("pull", "r", "nothing", os.path.join(b.mnt, "x"))
    assert r.returncode == 2 and "nothing is published as nothing" in r.stderr and not os.path.exists(os.path.join(b.mnt, "x")), r.describe()
    r = b.run("pull", "r", "base", os.path.join(b.mnt, "base"))
    assert r.returncode == 2 and "exists" in r.stderr, r.describe()
    r = a.run("push", os.path.join(a.mnt, "src"), "r", "--name", "live")
    assert r.returncode == 2 and "snapshot" in r.stderr, r.describe()
    # Across a remount the pulled trees read the same (the cache and the remote).
    b.remount()
    same(os.path.join(a.mnt, "src/.snapshot/v1"), os.path.join(b.mnt, "old"))
    for m in (a, b):
        m.umount()
        assert "clean" in m.check()


def test_clones_of_one_pulled_base_in_two_stores(scion_mount, scion_store, s3, tmp_path):
    """Two stores attach one base at once; each clones it and writes: neither sees the
    other's changes, the base stays as pushed; a snapshot of a clone pushed back sends only
    its new blocks, and the other store pulls it."""
    a, b = scion_mount, scion_store
    b.mount()
    remote(s3, a, b)
    src = os.path.join(a.mnt, "img")
    random_tree(src, seed=2, files=12)
    assert a.run("snapshot", src, "--name", "gold").returncode == 0
    push(a, os.path.join(src, ".snapshot/gold"), "image")
    dirs = {}
    for m, tag in ((a, "a"), (b, "b")):
        pull(m, os.path.join(m.mnt, "base"), "image")
        assert m.run("clone", os.path.join(m.mnt, "base/.snapshot/gold"), os.path.join(m.mnt, "vm")).returncode == 0
        with open(os.path.join(m.mnt, "vm/f5"), "r+b") as f:
            f.seek(100)
            f.write(f"written in {tag}".encode())
        with open(os.path.join(m.mnt, "vm/only-" + tag), "w") as f:
            f.write(tag * 1000)
        dirs[tag] = os.path.join(m.mnt, "vm")
    assert not os.path.exists(os.path.join(dirs["a"], "only-b")) and not os.path.exists(os.path.join(dirs["b"], "only-a"))
    for tag, other in (("a", "b"), ("b", "a")):
        with open(os.path.join(dirs[tag], "f5"), "rb") as f:
            f.seek(100)
            assert f.read(11) == f"written in {tag}".encode()[:11]
    same(os.path.join(src, ".snapshot/gold"), os.path.join(b.mnt, "base"))
    same(os.path.join(src, ".snapshot/gold"), os.path.join(a.mnt, "base"))
    assert b.run("snapshot", dirs["b"], "--name", "monday").returncode == 0
    back = push(b, os.path.join(dirs["b"], ".snapshot/monday"), "vm-b")
    # The rewritten chunk of f5 and the new file: a few KiB, not the image.
    assert back["new_bytes"] <= CHUNK + 3000, back
    pull(a, os.path.join(a.mnt, "from-b"), "vm-b")
    same(os.path.join(dirs["b"], ".snapshot/monday"), os.path.join(a.mnt, "from-b"))
    for m in (a, b):
        m.umount()
        assert "clean" in m.check()


def test_a_tiny_cache_evicts_and_reads_stay_right(scion_mount, scion_store, s3):
    """With -o remote_cache=256K, reading a 6 MiB tree twice keeps the cache within its
    bound, fetches blocks again once evicted, and returns the right bytes every time."""
    a, b = scion_mount, scion_store
    bucket = remote(s3, a)
    src = os.path.join(a.mnt, "src")
    os.makedirs(src)
    rnd = random.Random(3)
    for i in range(6):
        with open(os.path.join(src, f"f{i}"), "wb") as f:
            f.write(rnd.randbytes(1 << 20))
    assert a.run("snapshot", src, "--name", "v1").returncode == 0
    push(a, os.path.join(src, ".snapshot/v1"))
    remote(s3, b, bucket=bucket)
    b.mount("remote_cache=256K")
    pull(b, os.path.join(b.mnt, "base"))
    for _ in range(2):
        same(src, os.path.join(b.mnt, "base"))
        subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
    st = status_remote(b)
    assert st["cache_limit"] == 256 << 10 and st["cache_bytes"] <= 256 << 10, st
    assert st["fetched_bytes"] >= 2 * (6 << 20), st
    b.umount()
    assert "clean" in b.check()


def test_a_failing_remote_gives_eio_or_right_bytes_never_wrong_ones(scion_mount, scion_store, s3):
    """Between scion and the server, a proxy delays past the deadline, drops connections,
    answers 500, flips a byte or cuts the body of every read of a pack: a read of what the
    cache lacks gets EIO within the deadline (never wrong bytes, never a hung mount), status
    says the remote is failing, cached data keeps working; once the remote is back, the same
    reads succeed without a remount."""
    a, b = scion_mount, scion_store
    proxy = FaultProxy(s3.port)
    try:
        bucket = remote(s3, a)
        src = os.path.join(a.mnt, "src")
        os.makedirs(src)
        data = random.Random(4).randbytes(16 << 20)
        with open(os.path.join(src, "big"), "wb") as f:
            f.write(data)
        assert a.run("snapshot", src, "--name", "v1").returncode == 0
        push(a, os.path.join(src, ".snapshot/v1"))
        b.mount()
        remote(s3, b, endpoint=proxy.endpoint, bucket=bucket)
        pull(b, os.path.join(b.mnt, "base"))
        big = os.path.join(b.mnt, "base/big")
        with open(big, "rb") as f:
            assert f.read(CHUNK) == data[:CHUNK]  # cached from here on
        modes = ["flip", "truncate", "500", "drop", "delay:5"]
        for i, mode in enumerate(modes):
            proxy.mode = mode
            off = (i + 1) * (2 << 20)
            t = time.monotonic()
            fd = os.open(big, os.O_RDONLY)
            try:
                got = os.pread(fd, CHUNK, off)
                assert got == data[off:off + CHUNK], f"{mode}: wrong bytes at {off}"
            except OSError as e:
                assert e.errno == errno.EIO, f"{mode}: {e}"
            finally:
                os.close(fd)
            assert time.monotonic() - t < 30, f"{mode}: a read took {time.monotonic() - t:.1f} s"
            with open(big, "rb") as f:
                assert f.read(CHUNK) == data[:CHUNK], f"{mode}: cached bytes"
        st = status_remote(b)
        assert st["failures"] >= 1 and st["failing"], st
        assert "FAILING" in b.run("status", b.mnt).stdout
        proxy.mode = "pass"
        with open(big, "rb") as f:
            assert f.read() == data
        assert not status_remote(b)["failing"]
    finally:
        proxy.stop()
    b.umount()
    assert "clean" in b.check()


def test_a_cut_push_leaves_the_remote_consistent_and_the_next_sends_the_rest(scion_mount, scion_store, s3):
    """A push whose uploads stop after two packs fails, publishing nothing; pushed again,
    it sends only the packs that did not make it, and the tree pulls whole."""
    a, b = scion_mount, scion_store
    proxy = FaultProxy(s3.port)
    try:
        bucket = remote(s3, a, endpoint=proxy.endpoint)
        src = os.path.join(a.mnt, "src")
        os.makedirs(src)
        data = random.Random(5).randbytes(40 << 20)  # three packs: 16, 16 and 8 MiB
        with open(os.path.join(src, "big"), "wb") as f:
            f.write(data)
        assert a.run("snapshot", src, "--name", "v1").returncode == 0
        proxy.puts_left = 5  # the push's lock, two packs and their indexes
        r = push(a, os.path.join(src, ".snapshot/v1"), ok=False)
        assert r.returncode == 2, r.describe()
        proxy.puts_left = None
        b.mount()
        remote(s3, b, bucket=bucket)
        r = b.run("pull", "r", "base", os.path.join(b.mnt, "base"))
        assert r.returncode == 2 and "nothing is published" in r.stderr, r.describe()
        again = push(a, os.path.join(src, ".snapshot/v1"))
        assert again["version"] == 1 and again["known_packs"] == 2, again
        assert 0 < again["new_bytes"] <= 8 << 20, again
        pull(b, os.path.join(b.mnt, "base"))
        with open(os.path.join(b.mnt, "base/big"), "rb") as f:
            assert f.read() == data
    finally:
        proxy.stop()


def test_gc_keeps_what_versions_need_beside_a_push(scion_mount, scion_store, s3):
    """gc removes the pack a cut push left (once older than the grace period) and nothing a
    version names; run while another push goes on, it removes nothing or the push waits for
    it: either way every version pulls whole."""
    a, b = scion_mount, scion_store
    proxy = FaultProxy(s3.port)
    try:
        bucket = remote(s3, a, endpoint=proxy.endpoint)
        src = os.path.join(a.mnt, "src")
        os.makedirs(src)
        with open(os.path.join(src, "one"), "wb") as f:
            f.write(random.Random(6).randbytes(9 << 20))
        assert a.run("snapshot", src, "--name", "v1").returncode == 0
        push(a, os.path.join(src, ".snapshot/v1"))
        # A cut push leaves a pack and its index that no version names.
        with open(os.path.join(src, "two"), "wb") as f:
            f.write(random.Random(7).randbytes(9 << 20))
        assert a.run("snapshot", src, "--name", "v2").returncode == 0
        before = s3.keys(bucket)
        proxy.puts_left = 3  # the push's lock, a pack and its index
        assert push(a, os.path.join(src, ".snapshot/v2"), ok=False).returncode == 2
        proxy.puts_left = None
        left = {k for k in set(s3.keys(bucket)) - set(before) if "/locks/" not in k}
        assert len(left) == 2 and all("/packs/" in k for k in left), left
        r = a.run("remote", "gc", "r", "--grace", "1d", "--json", "--mount", a.mnt)
        g = json.loads(r.stdout)
        assert r.returncode == 0 and g["removed"] == 0 and g["young"] == 2, r.describe()
        r = a.run("remote", "gc", "r", "--grace", "0", "--json", "--mount", a.mnt)
        assert r.returncode == 0 and json.loads(r.stdout)["removed"] == 2, r.describe()
        assert not left & set(s3.keys(bucket))
        # gc while a push goes on (slowly): it removes nothing, or the push waits for it.
        assert a.run("snapshot", src, "--name", "v3").returncode == 0
        proxy.mode, proxy.everything = "delay:0.05", True
        done = {}
        pusher = threading.Thread(target=lambda: done.update(r=push(a, os.path.join(src, ".snapshot/v3"), ok=False)))
        pusher.start()
        gcs = []
        while pusher.is_alive():
            r = a.run("remote", "gc", "r", "--grace", "0", "--json", "--mount", a.mnt)
            assert r.returncode == 0, r.describe()
            gcs.append(json.loads(r.stdout))
        pusher.join()
        proxy.mode, proxy.everything = "pass", False
        assert done["r"].returncode == 0, done["r"].describe()
        assert any(g["pushes"] for g in gcs) or all(g["removed"] == 0 for g in gcs), gcs
        b.mount()
        remote(s3, b, bucket=bucket)
        for v, name in ((1, "v1"), (2, "v3")):
            pull(b, os.path.join(b.mnt, name), "base", "--version", str(v))
            same(os.path.join(src, ".snapshot", name), os.path.join(b.mnt, name))
    finally:
        proxy.stop()


def test_a_daemon_killed_mid_fetch_loses_nothing(scion_mount, scion_store, s3):
    """The daemon is killed while reads of a pulled tree are fetching (slowly); mounted
    again, the tree reads right, the store checks clean, and a pull killed before it finished
    leaves nothing that `pull` does not clear."""
    a, b = scion_mount, scion_store
    proxy = FaultProxy(s3.port)
    try:
        bucket = remote(s3, a)
        src = os.path.join(a.mnt, "src")
        random_tree(src, seed=10, files=30)
        assert a.run("snapshot", src, "--name", "v1").returncode == 0
        push(a, os.path.join(src, ".snapshot/v1"))
        b.mount()
        remote(s3, b, endpoint=proxy.endpoint, bucket=bucket)
        pull(b, os.path.join(b.mnt, "base"))
        proxy.mode = "delay:0.3"
        reader = subprocess.Popen(["sh", "-c", f"cat {b.mnt}/base/* {b.mnt}/base/d/* > /dev/null 2>&1"])
        time.sleep(1.0)
        b.kill9()
        reader.wait()
        proxy.mode = "pass"
        b.mount()
        same(src, os.path.join(b.mnt, "base"))
        # A pull killed while it fetches (slowly) leaves nothing a second pull trips on.
        proxy.mode, proxy.everything = "delay:0.5", True
        killed = subprocess.Popen([b.bin, "pull", "r", "base", os.path.join(b.mnt, "again")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.8)
        killed.kill()
        killed.wait()
        proxy.mode, proxy.everything = "pass", False
        pull(b, os.path.join(b.mnt, "again"))
        same(src, os.path.join(b.mnt, "again"))
        assert not [n for n in os.listdir(b.mnt) if "scion-receive" in n]
        # The daemon killed while a pull builds its tree: the next mount removes what it built.
        proxy.mode, proxy.everything = "delay:0.5", True
        killed = subprocess.Popen([b.bin, "pull", "r", "base", os.path.join(b.mnt, "third")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.8)
        b.kill9()
        killed.wait()
        proxy.mode, proxy.everything = "pass", False
        b.mount()
        assert not [n for n in os.listdir(b.mnt) if "scion-receive" in n or n == "third"], os.listdir(b.mnt)
        b.umount()
        assert "left by a crash" not in b.check()
        b.mount()
        b.umount()
        assert "clean" in b.check()
    finally:
        proxy.stop()


def test_credentials_from_the_mounting_users_profile(scion_store, s3, tmp_path):
    """A daemon without keys in its environment reads the profile files (`AWS_PROFILE` in
    `~/.aws/credentials` and `config`, here through AWS_SHARED_CREDENTIALS_FILE and
    AWS_CONFIG_FILE); the store keeps no credentials."""
    m = scion_store
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text("[default]\naws_access_key_id = WRONG\n[ci]\naws_access_key_id = FROMPROFILE\naws_secret_access_key = SECRETKEY\n")
    config.write_text("[profile ci]\nregion = us-east-1\n")
    saved = {k: os.environ.pop(k, None) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(config), AWS_PROFILE="ci")
    try:
        remote(s3, m)
        m.mount()
    finally:
        for k in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_PROFILE"):
            os.environ.pop(k)
        os.environ.update({k: v for k, v in saved.items() if v is not None})
    src = os.path.join(m.mnt, "src")
    os.makedirs(src)
    with open(os.path.join(src, "f"), "wb") as f:
        f.write(b"x" * 100000)
    assert m.run("snapshot", src, "--name", "v1").returncode == 0
    push(m, os.path.join(src, ".snapshot/v1"))
    for name in os.listdir(m.store):
        p = os.path.join(m.store, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                assert b"SECRETKEY" not in f.read(), name
