"""Shared helpers for the through-the-mount tests (stdlib only).

- libc wrappers (fallocate, renameat2) through ctypes
- snapshot() / compare_snapshots(): a whole-tree comparison used by the
  differential test and by the persistence checks.
"""

import ctypes
import ctypes.util
import errno
import hashlib
import os
import stat

# --------------------------------------------------------------------------
# libc wrappers

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int

_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]
_libc.renameat2.restype = ctypes.c_int


def _raise_errno(what):
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}")


def fallocate(fd, mode, offset, length):
    """Raw fallocate(2). Raises OSError on failure."""
    if _libc.fallocate(fd, mode, offset, length) != 0:
        _raise_errno("fallocate")


def punch_hole(fd, offset, length):
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)


def renameat2(old, new, flags, olddirfd=AT_FDCWD, newdirfd=AT_FDCWD):
    """Raw renameat2(2). Raises OSError on failure."""
    if _libc.renameat2(olddirfd, os.fsencode(old), newdirfd, os.fsencode(new), flags) != 0:
        _raise_errno("renameat2")


def errname(e):
    if e is None:
        return "None"
    return errno.errorcode.get(e, str(e))


# --------------------------------------------------------------------------
# mount table (no FUSE calls: safe even when the daemon hangs)

def _unescape_mountinfo(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def is_mounted(path):
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 4 and _unescape_mountinfo(parts[4]) == path:
                    return True
    except OSError:
        pass
    return False


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True
    try:
        state = data.rsplit(")", 1)[1].split()[0]
    except IndexError:
        return True
    return state not in ("Z", "X")


# --------------------------------------------------------------------------
# tree snapshots

def _kind(mode):
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "chardev"
    if stat.S_ISBLK(mode):
        return "blockdev"
    return "unknown"


def drop_page_cache(fd):
    """Ask the kernel to forget cached pages of fd, so that the next read reaches the
    filesystem (through FUSE: the daemon) instead of the page cache. Best effort."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass


def drop_kernel_caches():
    """Drop unused dentries and inodes machine-wide (echo 2 > drop_caches), so that the
    next lookups and getattrs reach the FUSE daemon instead of the kernel's caches.
    Page cache is left alone (see drop_page_cache). Disabled by SCION_DROP_CACHES=0."""
    if os.environ.get("SCION_DROP_CACHES", "1") == "0":
        return
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
    except OSError:
        pass


def file_digest(path, chunk=1 << 20):
    h = hashlib.sha256()
    n = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        drop_page_cache(fd)
        while True:
            b = os.read(fd, chunk)
            if not b:
                break
            h.update(b)
            n += len(b)
    finally:
        os.close(fd)
    return h.hexdigest(), n


def first_difference(path_a, path_b, chunk=1 << 20):
    """Offset of the first differing byte of two files (or None if equal)."""
    fa = os.open(path_a, os.O_RDONLY | os.O_NOFOLLOW)
    fb = os.open(path_b, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        off = 0
        while True:
            a = os.read(fa, chunk)
            b = os.read(fb, chunk)
            if a != b:
                for i in range(min(len(a), len(b))):
                    if a[i] != b[i]:
                        return off + i, a[i:i + 16], b[i:i + 16]
                return off + min(len(a), len(b)), a[len(b):len(b) + 16], b[len(a):len(a) + 16]
            if not a:
                return None
            off += len(a)
    finally:
        os.close(fa)
        os.close(fb)


def read_xattrs(path):
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        return {"<listxattr error>": errname(e.errno)}
    for n in names:
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=False)
        except OSError as e:
            out[n] = f"<getxattr error {errname(e.errno)}>"
    return out


def snapshot(root, content=True, skip=()):
    """Walk root (not following symlinks) and describe every entry.

    Returns {relpath: dict}. relpath "" is the root itself. Nothing here
    depends on inode numbers except 'ino', which callers only use to build
    hard-link partitions.
    """
    result = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        st = os.lstat(path)
        kind = _kind(st.st_mode)
        e = {
            "kind": kind,
            "mode": st.st_mode,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "nlink": st.st_nlink,
            "size": st.st_size,
            "rdev": st.st_rdev if kind in ("chardev", "blockdev") else 0,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "xattrs": read_xattrs(path),
        }
        if kind == "symlink":
            e["target"] = os.readlink(path)
        elif kind == "file" and content:
            e["digest"], e["read_len"] = file_digest(path)
        elif kind == "dir":
            names = sorted(os.listdir(path))
            e["names"] = names
            for n in names:
                child = os.path.join(rel, n) if rel else n
                if child in skip:
                    continue
                stack.append(child)
        result[rel] = e
    return result


def link_partition(snap):
    """Hard-link structure as a set of frozensets of names sharing an inode
    (only groups with more than one name; directories excluded)."""
    groups = {}
    for rel, e in snap.items():
        if e["kind"] == "dir":
            continue
        groups.setdefault(e["ino"], []).append(rel)
    return {frozenset(g) for g in groups.values() if len(g) > 1}


def _fmt_mode(m):
    return f"{stat.filemode(m)} ({m:o})"


def compare_snapshots(a, b, *, label_a="ref", label_b="scion", root_a=None, root_b=None,
                      check_mtime=None, check_ctime=False, limit=25):
    """Return a list of human readable differences between two snapshots.

    check_mtime: callable(rel, entry_a) -> bool, or True (always) / None (never).
    root_a/root_b: when given, a differing file gets its first differing offset.
    """
    diffs = []

    def add(msg):
        if len(diffs) < limit:
            diffs.append(msg)

    for rel in sorted(set(a) | set(b)):
        name = rel or "<root>"
        ea, eb = a.get(rel), b.get(rel)
        if ea is None:
            add(f"{name}: only in {label_b} ({eb['kind']})")
            continue
        if eb is None:
            add(f"{name}: only in {label_a} ({ea['kind']})")
            continue
        if ea["kind"] != eb["kind"]:
            add(f"{name}: kind {label_a}={ea['kind']} {label_b}={eb['kind']}")
            continue
        kind = ea["kind"]
        if ea["mode"] != eb["mode"]:
            add(f"{name}: mode {label_a}={_fmt_mode(ea['mode'])} {label_b}={_fmt_mode(eb['mode'])}")
        for k in ("uid", "gid", "nlink", "rdev"):
            if ea[k] != eb[k]:
                add(f"{name}: {k} {label_a}={ea[k]} {label_b}={eb[k]}")
        if kind != "dir" and ea["size"] != eb["size"]:
            add(f"{name}: size {label_a}={ea['size']} {label_b}={eb['size']}")
        if ea["xattrs"] != eb["xattrs"]:
            xa, xb = ea["xattrs"], eb["xattrs"]
            detail = []
            for n in sorted(set(xa) | set(xb)):
                va, vb = xa.get(n), xb.get(n)
                if va != vb:
                    def short(v):
                        if v is None:
                            return "<absent>"
                        if isinstance(v, bytes):
                            return f"{len(v)}B:{v[:24]!r}"
                        return str(v)
                    detail.append(f"{n}: {label_a}={short(va)} {label_b}={short(vb)}")
            add(f"{name}: xattrs differ: " + "; ".join(detail[:6]))
        if kind == "symlink" and ea.get("target") != eb.get("target"):
            add(f"{name}: symlink target {label_a}={ea.get('target')!r} {label_b}={eb.get('target')!r}")
        if kind == "file" and "digest" in ea and "digest" in eb:
            if ea["read_len"] != eb["read_len"] or ea["digest"] != eb["digest"]:
                msg = (f"{name}: content differs (read {label_a}={ea['read_len']}B "
                       f"{label_b}={eb['read_len']}B, st_size {ea['size']}/{eb['size']})")
                if root_a and root_b:
                    try:
                        d = first_difference(os.path.join(root_a, rel), os.path.join(root_b, rel))
                        if d:
                            msg += f"; first difference at offset {d[0]}: {label_a}={d[1]!r} {label_b}={d[2]!r}"
                    except OSError as ex:
                        msg += f"; (could not locate difference: {ex})"
                add(msg)
        if kind == "dir" and ea.get("names") != eb.get("names"):
            na, nb = set(ea["names"]), set(eb["names"])
            add(f"{name}: listing differs: only {label_a}={sorted(na - nb)[:10]} "
                f"only {label_b}={sorted(nb - na)[:10]}")
        want_mtime = check_mtime is True or (callable(check_mtime) and check_mtime(rel, ea))
        if want_mtime and ea["mtime_ns"] != eb["mtime_ns"]:
            add(f"{name}: mtime_ns {label_a}={ea['mtime_ns']} {label_b}={eb['mtime_ns']}")
        if check_ctime and ea["ctime_ns"] != eb["ctime_ns"]:
            add(f"{name}: ctime_ns {label_a}={ea['ctime_ns']} {label_b}={eb['ctime_ns']}")

    pa, pb = link_partition(a), link_partition(b)
    if pa != pb:
        only_a = sorted(sorted(g) for g in pa - pb)
        only_b = sorted(sorted(g) for g in pb - pa)
        add(f"hard-link structure differs: groups only in {label_a}={only_a[:5]} "
            f"only in {label_b}={only_b[:5]}")
    return diffs


# --------------------------------------------------------------------------
# NFS (tests/mount/test_nfs*.py)

def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_nfs(m):
    """Mounts the scion mount `m` again with its daemon serving NFS on a free port of
    127.0.0.1, root not squashed; returns the port."""
    port = free_port()
    m.umount()
    m.mount(f"nfs=127.0.0.1:{port}", "nfs_squash=none")
    return port


def mount_fuse_nfs(client, port, where, *options):
    """Mounts the NFS server on 127.0.0.1:`port` at `where` through fuse-nfs, as root (uid
    0), with no caching in the client (libfuse's high-level API keeps one node per path, so a
    file written under one name would keep a stale size under another: what is tested is the
    server), and waits until it is mounted (`where` made if missing). `options`: more
    fuse-nfs options."""
    import subprocess
    import time
    os.makedirs(where, exist_ok=True)
    share = f"nfs://127.0.0.1/?nfsport={port}&mountport={port}&uid=0&gid=0"
    r = subprocess.run([client, "-n", share, "-m", str(where), *options, "--attr_timeout=0",
                        "--entry_timeout=0", "--negative_timeout=0", "--ac_attr_timeout=0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    for _ in range(100):
        if os.path.ismount(where):
            return
        time.sleep(0.05)
    raise AssertionError(f"fuse-nfs did not mount {where}")


def fuse_nfs_client():
    """The fuse-nfs binary (built once by scripts/fuse-nfs), or None if it cannot be built."""
    import subprocess
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fuse-nfs")
    r = subprocess.run([script], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None
