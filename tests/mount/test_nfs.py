"""Serving over NFS (issue 40) through a real NFS client no one here wrote: libnfs's
`nfs-ls`, `nfs-cat` and `nfs-cp` (Debian libnfs-utils) against the mount's daemon
(`-o nfs=`, `scion serve nfs`). What NFS changes shows through the FUSE mount at once (the
daemon tells the kernel), and the other way round; permissions, read-only directories,
exports and `.snapshot` hold over NFS as through the mount. The protocol's corners (forged
handles, squash, COMMIT) are in crates/nfs/tests/protocol.rs; a crash in
crates/cli/tests/nfs_crash.rs."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import PLAIN
from scion_helpers import drop_page_cache, free_port, fuse_nfs_client, mount_fuse_nfs, serve_nfs

pytestmark = pytest.mark.skipif(
    PLAIN or shutil.which("nfs-cat") is None or os.geteuid() != 0,
    reason="needs a scion mount, root and libnfs-utils (scripts/setup installs it)",
)


def url(port, path, uid=1000, gid=1000):
    return f"nfs://127.0.0.1{path}?nfsport={port}&mountport={port}&uid={uid}&gid={gid}"


def nfs(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def nfs_cat(port, path, **kw):
    return nfs("nfs-cat", url(port, path, **kw))


def nfs_put(port, local, path, **kw):
    return nfs("nfs-cp", local, url(port, path, **kw))


def test_nfs_beside_the_mount_sees_and_is_seen(scion_mount, tmp_path):
    m = scion_mount
    port = free_port()
    m.umount()
    m.mount(f"nfs=127.0.0.1:{port}")
    proj = os.path.join(m.mnt, "proj")
    os.makedirs(proj)
    os.chmod(proj, 0o777)
    with open(f"{proj}/a.txt", "w") as f:
        f.write("written through the mount\n")
    os.chown(f"{proj}/a.txt", 1000, 1000)
    r = nfs_cat(port, "/proj/a.txt")
    assert r.returncode == 0 and r.stdout == "written through the mount\n", r
    # The kernel has the directory and the file cached: what NFS changes must show at once.
    assert sorted(os.listdir(proj)) == ["a.txt"]
    with open(f"{proj}/a.txt") as f:
        assert f.read() == "written through the mount\n"
    local = tmp_path / "in"
    local.write_bytes(b"written over NFS\n" * 1000)
    r = nfs_put(port, str(local), "/proj/b.txt")
    assert r.returncode == 0, r
    assert sorted(os.listdir(proj)) == ["a.txt", "b.txt"]
    st = os.stat(f"{proj}/b.txt")
    assert (st.st_uid, st.st_gid, st.st_size) == (1000, 1000, 17000), st
    with open(f"{proj}/b.txt", "rb") as f:
        assert f.read() == local.read_bytes()
    # A file the kernel holds with its pages (read above), rewritten in place over NFS
    # (through fuse-nfs: nfs-cp only makes new files): the mount reads the new bytes.
    client = fuse_nfs_client()
    if client:
        nfsmnt = tmp_path / "nfs"
        nfsmnt.mkdir()
        share = f"nfs://127.0.0.1/?nfsport={port}&mountport={port}&uid=1000&gid=1000"
        assert subprocess.run([client, "-n", share, "-m", str(nfsmnt)]).returncode == 0
        try:
            with open(nfsmnt / "proj" / "a.txt", "r+") as f:
                f.write("REWRITTEN")
            with open(f"{proj}/a.txt") as f:
                assert f.read() == "REWRITTENhrough the mount\n"
        finally:
            subprocess.run(["umount", "-l", str(nfsmnt)])
    r = nfs("nfs-ls", url(port, "/proj"))
    assert r.returncode == 0 and "a.txt" in r.stdout and "b.txt" in r.stdout, r
    st = json.loads(m.run("status", "--json", m.mnt).stdout)
    assert st["nfs"].startswith(f"NFSv3 on 127.0.0.1:{port}: exports /"), st
    # Unmount stops the server with the daemon.
    m.umount()
    assert nfs_cat(port, "/proj/a.txt").returncode != 0


def test_permissions_hold_over_nfs(scion_mount, tmp_path):
    m = scion_mount
    port = free_port()
    priv = os.path.join(m.mnt, "priv")
    os.makedirs(priv, mode=0o700)
    with open(f"{priv}/secret", "w") as f:
        f.write("root's\n")
    pub = os.path.join(m.mnt, "pub")
    os.makedirs(pub)
    with open(f"{pub}/mine", "w") as f:
        f.write("root's, 0600\n")
    os.chmod(f"{pub}/mine", 0o600)
    r = m.run("serve", "nfs", m.mnt, "--listen", f"127.0.0.1:{port}")
    assert r.returncode == 0 and r.stdout.startswith(f"NFSv3 on 127.0.0.1:{port}"), r.describe()
    # uid 1000 may not search root's 0700 directory, nor read a 0600 file.
    assert nfs_cat(port, "/priv/secret").returncode != 0
    r = nfs_cat(port, "/pub/mine")
    assert r.returncode != 0 and "ACCES" in r.stderr, r
    # Root from a client is squashed to nobody by default...
    assert nfs_cat(port, "/pub/mine", uid=0, gid=0).returncode != 0
    local = tmp_path / "x"
    local.write_text("x\n")
    assert nfs_put(port, str(local), "/pub/new", uid=0, gid=0).returncode != 0, "nobody may not write in root's 0755 directory"
    assert not os.path.exists(f"{pub}/new")
    # ... and is root with --squash none.
    assert m.run("serve", "nfs", "--stop", m.mnt).returncode == 0
    r = m.run("serve", "nfs", m.mnt, "--listen", f"127.0.0.1:{port}", "--squash", "none")
    assert r.returncode == 0, r.describe()
    r = nfs_cat(port, "/pub/mine", uid=0, gid=0)
    assert r.returncode == 0 and r.stdout == "root's, 0600\n", r


def test_exports_read_only_directories_and_snapshots(scion_mount, tmp_path):
    m = scion_mount
    port = free_port()
    for d in ("vm1/etc", "gold"):
        os.makedirs(os.path.join(m.mnt, d))
    with open(f"{m.mnt}/vm1/etc/hostname", "w") as f:
        f.write("vm1\n")
    with open(f"{m.mnt}/secret", "w") as f:
        f.write("not exported\n")
    for d in ("", "/vm1", "/vm1/etc"):
        os.chmod(m.mnt + d, 0o777)
    assert m.run("snapshot", "--name", "s1", f"{m.mnt}/vm1").returncode == 0
    r = m.run("serve", "nfs", f"{m.mnt}/vm1", "--listen", f"127.0.0.1:{port}", "--read-only", f"{m.mnt}/vm1/etc")
    assert r.returncode == 0, r.describe()
    assert "exports /vm1" in r.stdout and "1 read-only directory" in r.stdout, r.stdout
    assert nfs_cat(port, "/vm1/etc/hostname").stdout == "vm1\n"
    local = tmp_path / "x"
    local.write_text("x\n")
    r = nfs_put(port, str(local), "/vm1/etc/motd")
    assert r.returncode != 0 and "ROFS" in r.stderr, r
    assert nfs_put(port, str(local), "/vm1/new").returncode == 0
    assert open(f"{m.mnt}/vm1/new").read() == "x\n"
    # Only the export (and what is below it) can be mounted; `..` stops at it.
    for outside in ("/secret", "/", "/gold", "/vm1/../secret"):
        assert nfs_cat(port, outside).returncode != 0, outside
    # Snapshots are browsed over NFS as through the mount, and refuse changes.
    r = nfs_cat(port, "/vm1/.snapshot/s1/etc/hostname")
    assert r.returncode == 0 and r.stdout == "vm1\n", r
    r = nfs_put(port, str(local), "/vm1/.snapshot/s1/z")
    assert r.returncode != 0 and "ROFS" in r.stderr, r
    # A second server is refused; --stop stops it; a stopped one cannot be stopped again.
    r = m.run("serve", "nfs", m.mnt, "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2 and "already serving" in r.stderr, r.describe()
    r = m.run("serve", "nfs", "--stop", m.mnt)
    assert r.returncode == 0 and r.stdout.startswith("stopped NFSv3"), r.describe()
    assert nfs_cat(port, "/vm1/etc/hostname").returncode != 0
    r = m.run("serve", "nfs", "--stop", m.mnt)
    assert r.returncode == 2 and "not serving" in r.stderr, r.describe()


def test_bad_arguments_are_refused_before_anything_is_served(scion_mount):
    m = scion_mount
    cases = [
        (["--listen", "localhost"], "ADDR:PORT"),
        (["--squash", "some"], "squash"),
        (["--anon", "nobody"], "UID:GID"),
        (["--export", "/nonexistent/dir"], "not below the mount point"),
        (["--export", f"{m.mnt}/missing"], "--export"),
        (["--max-held", "16"], "--max-held 16: expected a number of inodes from 64"),
        (["--max-held", "lots"], "--max-held lots"),
    ]
    for args, words in cases:
        r = m.run("serve", "nfs", m.mnt, *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.describe())
    assert "nfs" not in json.loads(m.run("status", "--json", m.mnt).stdout) or \
        json.loads(m.run("status", "--json", m.mnt).stdout)["nfs"] is None
    r = m.run("serve", "nfs", "/tmp", "--listen", "127.0.0.1:0")
    assert r.returncode == 2 and "not inside a scion mount" in r.stderr, r.describe()
    r = m.run("mount", "-o", "nfs_squash=all", m.store, m.mnt)
    assert r.returncode != 0 and "nfs=ADDR:PORT" in r.stderr, r.describe()
    r = m.run("mount", "-o", "nfs=127.0.0.1:0,nfs_max_held=5", m.store, m.mnt)
    assert r.returncode != 0 and "nfs_max_held=5" in r.stderr, r.describe()
    # A bound given is the one the server keeps (its status line says it).
    r = m.run("serve", "nfs", m.mnt, "--listen", "127.0.0.1:0", "--max-held", "100")
    assert r.returncode == 0, r.describe()
    assert "at most 100 after a sweep" in r.stdout, r.describe()
    assert m.run("serve", "nfs", "--stop", m.mnt).returncode == 0
    r = m.run("serve", "nfs", "--help")
    assert r.returncode == 0 and "--read-only" in r.stdout and "--squash" in r.stdout


def test_registered_with_rpcbind_while_serving(scion_mount):
    """With rpcbind running, a client that asks it (a Linux client without port= and
    mountport=) finds NFS 3 and MOUNT 3 at the server's port; gone again at the stop."""
    if shutil.which("rpcbind") is None or shutil.which("rpcinfo") is None:
        pytest.skip("rpcbind is not installed")
    started = subprocess.run(["pgrep", "-x", "rpcbind"], capture_output=True).returncode != 0
    if started:
        subprocess.run(["rpcbind"], check=True)
    try:
        m = scion_mount
        port = free_port()

        def registered():
            out = subprocess.run(["rpcinfo", "-p", "127.0.0.1"], capture_output=True, text=True).stdout
            return sorted(line.split()[0] for line in out.splitlines()
                          if line.split()[-2:-1] == [str(port)] and "tcp" in line)

        r = m.run("serve", "nfs", m.mnt, "--listen", f"127.0.0.1:{port}")
        assert r.returncode == 0, r.describe()
        assert registered() == ["100003", "100005"], registered()
        assert m.run("serve", "nfs", "--stop", m.mnt).returncode == 0
        assert registered() == []
    finally:
        if started:
            subprocess.run(["pkill", "-x", "rpcbind"], check=False)


def test_a_client_goes_on_across_a_daemon_crash(scion_mount):
    """fuse-nfs (libnfs) keeps its mount and an open file across a SIGKILL of the daemon
    and a new mount of the store: its handles (the export's root, the open file's) name the
    same inodes after the restart, found again by number (STORE/nfs/hints or a walk)."""
    m = scion_mount
    client = fuse_nfs_client()
    if client is None:
        pytest.skip("fuse-nfs could not be built (scripts/fuse-nfs)")
    port = serve_nfs(m)
    os.makedirs(f"{m.mnt}/d/e")
    tail = os.urandom(1 << 20)
    with open(f"{m.mnt}/d/e/f.txt", "wb") as f:
        f.write(b"before the crash")
        f.seek(3 << 20)
        f.write(tail)
        f.flush()
        os.fsync(f.fileno())
    # Checkpointed, so that after the crash the file is in no journal record (which would
    # load it): the server must find it by number.
    m.umount()
    m.mount(f"nfs=127.0.0.1:{port}", "nfs_squash=none")
    nfsmnt = os.path.join(m.root, "nfs")
    mount_fuse_nfs(client, port, nfsmnt)
    try:
        held = open(f"{nfsmnt}/d/e/f.txt", "rb", buffering=0)
        assert held.read(6) == b"before"
        m.kill9()
        m.mount(f"nfs=127.0.0.1:{port}", "nfs_squash=none")
        # The open file goes on through its handle from before the crash (pages not read
        # before, and those read dropped from the kernel's cache: the reads reach the server).
        drop_page_cache(held.fileno())
        assert held.read(10) == b" the crash"
        held.seek(3 << 20)
        assert held.read() == tail
        held.close()
        assert sorted(os.listdir(f"{nfsmnt}/d/e")) == ["f.txt"]
        with open(f"{nfsmnt}/d/e/after.txt", "w") as f:
            f.write("written over NFS after the restart")
        assert open(f"{m.mnt}/d/e/after.txt").read() == "written over NFS after the restart"
        # The open file and its directories were found by number (by hint, or by a walk if
        # the server was killed before its first sweep wrote hints).
        st = json.dumps(json.loads(m.run("status", "--json", m.mnt).stdout))
        found = re.search(r"(\d+) found again by hint, (\d+) by walk", st)
        assert found and int(found.group(1)) + int(found.group(2)) >= 1, st
    finally:
        subprocess.run(["umount", "-l", nfsmnt], check=False)
