#!/usr/bin/env python3
"""Soak test of scion: bounded in time, run on demand, not in CI (stdlib only, Python 3.11).

    python3 tests/soak.py --minutes 10 [--seed S] [--bin PATH] [--workdir DIR] [--keep]
                          [--kill-every SECONDS] [--writers 3] [--readers 2] [--cloners 1]
                          [--snapshotters 1] [--writer-mib 16] [--max-clones 4]
                          [--max-snapshots 4] [--tolerate-stale-cache]

It makes a store (`scion init`), mounts it and, for N minutes, runs these threads at once:

  writers       one directory each (MNT/wI): create, overwrite, append, truncate, atomic
                replace (write a temporary file, fsync, rename over), rename of files and
                directories, unlink, mkdir, rmdir, hard links, symlinks, xattrs, chmod. Every
                writer mirrors its directory in an in-memory model (contents, modes, xattrs,
                hard-link groups) and compares the real tree with it every few hundred
                operations. Some changes are fsynced (file and directory); what each path must
                then hold after a crash is recorded. A writer also publishes "stable" files
                (written once, fsynced, never changed) for the readers.
  readers       walk the whole mount and read every file (tolerating only ENOENT/ENOTDIR
                races with the writers, and ESTALE inside clones being destroyed), verify
                stable files, clones and snapshots against what they must hold (sometimes
                after dropping the page cache, so that the daemon answers), and run
                `scion list`.
  cloners       `scion clone` of a writer's directory while the writer is paused (the clone
                must equal the writer's model exactly, sometimes with an --exclude; then a few
                writes into the clone, after which the clone must match its own model and the
                writer's tree must be unchanged), of a directory whose writer keeps running
                (the clone is recorded as read back and must never change afterwards), of a
                clone and of a snapshot. Old clones are verified once more and destroyed with
                `scion destroy`; at most --max-clones live at once.
  snapshotters  `scion snapshot DIR --name sN` of a paused writer (must equal its model), of
                a running writer (recorded, must never change), of a clone; every snapshot
                must refuse changes with EROFS (create, mkdir, symlink, open for writing,
                truncate, unlink, rename, link, setxattr, chmod, utime), must be listed in
                DIR/.snapshot and by `scion list`; old ones are verified and destroyed.
  killer        (only with --kill-every S) SIGKILLs the daemon at random intervals around S
                seconds, releases the dead mount, runs `scion check` (must be clean),
                remounts; then every fsynced path must hold what was fsynced, every clone and
                snapshot whose command had returned must be there unchanged.

At the end: every writer's tree equals its model, every clone and snapshot equals what it
must hold, stable files are intact, `scion list` names exactly the live clones and
snapshots; `scion umount`, `scion check STORE` (exit 0), remount, all of it again; then
every snapshot and clone is verified and destroyed, `scion list` must be empty and the
writers' trees unchanged; `scion umount`, `scion check` again.

Sizes are bounded: each writer keeps at most --writer-mib MiB of live file data (files of
at most 1 MiB) and 300 entries; at most --max-clones clones and --max-snapshots snapshots
live at once.

A mismatch is read again, and again after dropping the kernel's dentry/inode caches, and the
failure says which of them still differ. --tolerate-stale-cache counts, instead of failing on,
what is right once those caches are dropped (stale kernel caches: a known bug, see
docs/testing.md).

Exit status: 0 if every check passed, 1 on any failure (the work dir, with the store and its
daemon log STORE/daemon.log, is kept), 2 for a usage or environment problem. The seed fixes
every thread's random choices; the interleaving of the threads is not reproducible.
"""

import argparse
import contextlib
import errno
import faulthandler
import hashlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, deque

DEFAULT_BIN = os.environ.get("SCION_BIN", "/work/main/target/release/scion")

ABSENT = "<absent>"
DIRV = "<directory>"
LINKV = "<symlink>"
KIB = 1 << 10
MIB = 1 << 20
HANG_SECONDS = 240          # no completed operation for this long while mounted: a hang
CMD_TIMEOUT = 300           # one CLI command
STABLE_KEEP = 6             # stable files per writer


class SoakFailure(Exception):
    pass


# ----------------------------------------------------------------------------- helpers

def digest(data):
    return hashlib.sha256(data).hexdigest()[:24]


def join(root, rel):
    return os.path.join(root, rel) if rel else root


def parent_of(rel):
    return rel.rpartition("/")[0]


def depth(rel):
    return 0 if not rel else rel.count("/") + 1


def under(rel, prefix):
    return prefix == "" or rel == prefix or rel.startswith(prefix + "/")


def errname(e):
    return errno.errorcode.get(e, str(e)) if e is not None else "None"


def exc_text(ex):
    if isinstance(ex, SoakFailure):
        return str(ex)
    return f"{ex!r}\n" + "".join(traceback.format_exception(ex)).rstrip()


# The mount-table helpers of the mount tests (stdlib only; no FUSE calls).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mount"))
from scion_helpers import is_mounted, pid_alive  # noqa: E402


def wait_for(cond, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def read_xattrs(path):
    out = {}
    for n in os.listxattr(path, follow_symlinks=False):
        out[n] = os.getxattr(path, n, follow_symlinks=False)
    return out


def xattr_key(x):
    return tuple(sorted((k, digest(v)) for k, v in x.items()))


def hash_file(path, drop_cache=False):
    h = hashlib.sha256()
    n = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if drop_cache:
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        while True:
            b = os.read(fd, MIB)
            if not b:
                break
            h.update(b)
            n += len(b)
    finally:
        os.close(fd)
    return h.hexdigest()[:24], n


def read_file(path):
    # os.read, not open(): Python's open() asks isatty(), an ioctl the daemon logs as a warning
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        chunks = []
        while True:
            b = os.read(fd, MIB)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def actual_value(path):
    """What a path holds, in the terms of the crash records."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ABSENT
    except NotADirectoryError:
        return ABSENT
    if stat.S_ISDIR(st.st_mode):
        return DIRV
    if stat.S_ISLNK(st.st_mode):
        return LINKV
    return hash_file(path, drop_cache=True)[0]


def describe_tree(root, drop_cache=False):
    """(entries, hard-link groups) of a real tree, comparable with Model.describe()."""
    desc, inos = {}, {}
    stack = [""]
    while stack:
        rel = stack.pop()
        p = join(root, rel)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            if not rel:
                raise
            desc[rel] = ("!", "listed by readdir, but lstat says ENOENT")
            continue
        m = st.st_mode
        if stat.S_ISDIR(m):
            desc[rel] = ("d", stat.S_IMODE(m), xattr_key(read_xattrs(p)))
            for n in os.listdir(p):
                stack.append(f"{rel}/{n}" if rel else n)
        elif stat.S_ISREG(m):
            h, n = hash_file(p, drop_cache)
            desc[rel] = ("f", st.st_size, n, h, stat.S_IMODE(m), st.st_nlink,
                         xattr_key(read_xattrs(p)))
            inos.setdefault(st.st_ino, []).append(rel)
        elif stat.S_ISLNK(m):
            desc[rel] = ("l", os.readlink(p))
        else:
            desc[rel] = ("?", stat.S_IFMT(m))
    return desc, frozenset(frozenset(g) for g in inos.values() if len(g) > 1)


def fmt_entry(e):
    if e is None:
        return "nothing"
    if e[0] == "d":
        return f"directory mode={e[1]:o} xattrs={[k for k, _ in e[2]]}"
    if e[0] == "f":
        return (f"file st_size={e[1]} read={e[2]}B sha={e[3][:12]} mode={e[4]:o} nlink={e[5]} "
                f"xattrs={[k for k, _ in e[6]]}")
    if e[0] == "l":
        return f"symlink -> {e[1]!r}"
    if e[0] == "!":
        return e[1]
    return f"unexpected type {e[1]:o}"


def diff_desc(exp, act, limit=15):
    (de, ge), (da, ga) = exp, act
    out = []
    for rel in sorted(set(de) | set(da)):
        a, b = de.get(rel), da.get(rel)
        if a != b:
            detail = ""
            if a and b and a[0] == b[0] == "f" and a[6] != b[6]:
                detail = f" (xattr digests expected {a[6]} found {b[6]})"
            out.append(f"  {rel or '.'}: expected {fmt_entry(a)}; found {fmt_entry(b)}{detail}")
    if ge != ga:
        out.append(f"  hard-link groups: only expected {sorted(sorted(g) for g in ge - ga)[:4]}, "
                   f"only found {sorted(sorted(g) for g in ga - ge)[:4]}")
    if len(out) > limit:
        out = out[:limit] + [f"  ... and {len(out) - limit} more differences"]
    return out


def drop_kernel_caches():
    """Forget unused dentries and inodes machine-wide (only used to diagnose a failure)."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
    except OSError:
        pass


def second_look(root, exp, first):
    """After a mismatch: read the tree again, then again after dropping the kernel's caches,
    to tell a stale kernel cache from a wrong answer of the daemon. Returns (text, the
    tree read after dropping the caches, or None if that still differs)."""
    out, ok = [], None
    try:
        again = describe_tree(root, drop_cache=True)
        out.append("  read again at once: " + ("same differences" if again == first else
                   "matches now" if not diff_desc(exp, again) else "different differences"))
        drop_kernel_caches()
        fresh = describe_tree(root, drop_cache=True)
        d = diff_desc(exp, fresh, limit=5)
        out.append("  read again after dropping the kernel's dentry/inode caches: "
                   + ("matches (the kernel served a stale cached directory listing or "
                      "attribute)" if not d else "differs:\n" + "\n".join("  " + x for x in d)))
        ok = fresh if not d else None
    except OSError as e:
        out.append(f"  second look failed: {e!r}")
    return "\n".join(out), ok


_SOAK = None        # the running Soak (for the stale-cache tolerance)


def expect_tree(root, exp, what, drop_cache=False):
    """Read the tree at root; it must be exp (else SoakFailure naming what). Returns it."""
    act = describe_tree(root, drop_cache)
    d = diff_desc(exp, act)
    if d:
        text, fresh = second_look(root, exp, act)
        if fresh is not None and _SOAK is not None and _SOAK.args.tolerate_stale_cache:
            _SOAK.stale(f"{what}: {d[0].strip()}")
            return fresh
        raise SoakFailure(what + ":\n" + "\n".join(d) + "\n" + text)
    return act


def fmt_vals(vals):
    return "{" + ", ".join(sorted(v if v.startswith("<") else v[:12] for v in vals)) + "}"


# ----------------------------------------------------------------------------- model

class Inode:
    __slots__ = ("data", "mode", "xattrs", "_hash")

    def __init__(self, data=b"", mode=0o644, xattrs=None):
        self.data = bytes(data)
        self.mode = mode
        self.xattrs = dict(xattrs or {})
        self._hash = None

    def hash(self):
        if self._hash is None:
            self._hash = digest(self.data)
        return self._hash

    def set(self, data):
        self.data = bytes(data)
        self._hash = None

    def copy(self):
        c = Inode(self.data, self.mode, self.xattrs)
        c._hash = self._hash
        return c


class Model:
    """A tree as the test believes it is. entries: relative path ("" is the root) ->
    ["d", mode, xattrs] | ["f", ino] | ["l", target]."""

    def __init__(self, root_mode=0o755):
        self.entries = {"": ["d", root_mode, {}]}
        self.inodes = {}
        self.next_ino = 1

    def kind(self, rel):
        e = self.entries.get(rel)
        return e[0] if e else None

    def add_file(self, rel, data=b"", mode=0o644):
        ino = self.next_ino
        self.next_ino += 1
        self.inodes[ino] = Inode(data, mode)
        self.entries[rel] = ["f", ino]
        return ino

    def add_dir(self, rel, mode=0o755):
        self.entries[rel] = ["d", mode, {}]

    def add_symlink(self, rel, target):
        self.entries[rel] = ["l", target]

    def link(self, src, dst):
        self.entries[dst] = ["f", self.entries[src][1]]

    def names_of(self, ino):
        return [r for r, e in self.entries.items() if e[0] == "f" and e[1] == ino]

    def children(self, rel):
        return [r for r in self.entries if r and parent_of(r) == rel]

    def remove(self, rel):
        e = self.entries.pop(rel)
        if e[0] == "f" and not any(x[0] == "f" and x[1] == e[1] for x in self.entries.values()):
            del self.inodes[e[1]]

    def remove_subtree(self, rel):
        for r in sorted((r for r in self.entries if under(r, rel)), key=depth, reverse=True):
            self.remove(r)

    def rename(self, src, dst):
        if dst in self.entries:
            self.remove(dst)        # a file or symlink, or an empty directory
        for r in sorted((r for r in self.entries if under(r, src)), key=depth):
            self.entries[dst + r[len(src):]] = self.entries.pop(r)

    def value(self, rel):
        e = self.entries.get(rel)
        if e is None:
            return ABSENT
        if e[0] == "d":
            return DIRV
        if e[0] == "l":
            return LINKV
        return self.inodes[e[1]].hash()

    def live_bytes(self):
        return sum(len(i.data) for i in self.inodes.values())

    def freeze(self):
        m = Model()
        m.entries = {r: (["d", e[1], dict(e[2])] if e[0] == "d" else list(e))
                     for r, e in self.entries.items()}
        m.inodes = {i: n.copy() for i, n in self.inodes.items()}
        m.next_ino = self.next_ino
        return m

    def describe(self):
        counts = Counter(e[1] for e in self.entries.values() if e[0] == "f")
        desc, groups = {}, {}
        for rel, e in self.entries.items():
            if e[0] == "d":
                desc[rel] = ("d", e[1], xattr_key(e[2]))
            elif e[0] == "f":
                i = self.inodes[e[1]]
                desc[rel] = ("f", len(i.data), len(i.data), i.hash(), i.mode, counts[e[1]],
                             xattr_key(i.xattrs))
                groups.setdefault(e[1], []).append(rel)
            else:
                desc[rel] = ("l", e[1])
        return desc, frozenset(frozenset(g) for g in groups.values() if len(g) > 1)

    @classmethod
    def from_tree(cls, root):
        m = cls()
        m.entries = {}
        inos = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            p = join(root, rel)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                m.entries[rel] = ["d", stat.S_IMODE(st.st_mode), read_xattrs(p)]
                for n in os.listdir(p):
                    stack.append(f"{rel}/{n}" if rel else n)
            elif stat.S_ISREG(st.st_mode):
                if st.st_ino not in inos:
                    ino = m.next_ino
                    m.next_ino += 1
                    m.inodes[ino] = Inode(read_file(p), stat.S_IMODE(st.st_mode), read_xattrs(p))
                    inos[st.st_ino] = ino
                m.entries[rel] = ["f", inos[st.st_ino]]
            elif stat.S_ISLNK(st.st_mode):
                m.entries[rel] = ["l", os.readlink(p)]
            else:
                raise SoakFailure(f"unexpected file type {st.st_mode:o} at {p}")
        return m


# ----------------------------------------------------------------------------- tree operations

class TreeOps:
    """Random operations on one real directory tree, mirrored in a Model.

    durable (a dict, or None to not track): path -> set of values the path may hold after a
    crash (a content digest, ABSENT, DIRV, LINKV). A path without a record is unknown. An
    atomic change (rename, unlink) adds its new value to the set; an in-place change (write,
    truncate) drops the record; an fsync of the file and its directory makes the set the
    single current value (only when no kill happened since the operation began)."""

    def __init__(self, ctx, root, model, rng, log, durable=None, always_sync=False,
                 cap=16 * MIB, max_entries=300, protected="stable"):
        self.ctx = ctx
        self.root = root
        self.model = model
        self.rng = rng
        self.log = log
        self.durable = durable
        self.always_sync = always_sync
        self.cap = cap
        self.max_entries = max_entries
        self.protected = protected
        self.op_epoch = 0
        self.tmpn = 0

    # ---- helpers
    def p(self, rel):
        return join(self.root, rel)

    def is_protected(self, rel):
        return bool(self.protected) and under(rel, self.protected)

    def free(self, kinds):
        return [r for r, e in self.model.entries.items()
                if e[0] in kinds and not self.is_protected(r)]

    def free_dirs(self, maxdepth=3):
        return [r for r in self.free("d") if depth(r) < maxdepth]

    def new_name(self, parent, prefix, pool=24):
        for _ in range(8):
            n = f"{prefix}{self.rng.randrange(pool)}"
            rel = f"{parent}/{n}" if parent else n
            if rel not in self.model.entries:
                return rel
        return None

    def gen_data(self, maxlen=MIB):
        r = self.rng.random()
        if r < 0.05:
            n = 0
        elif r < 0.65:
            n = self.rng.randrange(1, 16 * KIB)
        elif r < 0.95:
            n = self.rng.randrange(16 * KIB, 256 * KIB)
        else:
            n = self.rng.randrange(256 * KIB, MIB)
        n = max(0, min(n, maxlen, self.cap - self.model.live_bytes()))
        k = self.rng.random()
        if k < 0.1:
            return bytes(n)
        if k < 0.25:
            return bytes([self.rng.randrange(256)]) * n
        return self.rng.randbytes(n)

    def write_all(self, fd, data, off=None):
        """Write in random-sized pieces, so that several requests reach the daemon."""
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, self.rng.choice((4096, 65536, 131072, MIB, 7777)))
            chunk = data[pos:pos + n]
            w = os.write(fd, chunk) if off is None else os.pwrite(fd, chunk, off + pos)
            if w != len(chunk):
                raise SoakFailure(f"short write: {w} of {len(chunk)} bytes")
            pos += w
        self.ctx.count("bytes written", len(data))

    def value(self, rel):
        return self.model.value(rel)

    def d_drop(self, rel):
        if self.durable is not None:
            self.durable.pop(rel, None)

    def d_drop_tree(self, rel):
        if self.durable is not None:
            for r in [r for r in self.durable if under(r, rel)]:
                del self.durable[r]

    def d_add(self, rel, val):
        if self.durable is not None and rel in self.durable:
            self.durable[rel].add(val)

    def d_set(self, rel, val):
        if self.durable is not None and not self.ctx.interrupted(self.op_epoch):
            self.durable[rel] = {val}

    def d_clean(self, rel):
        return self.durable is not None and self.durable.get(rel) == {self.value(rel)}

    def fsync_rel(self, rel, directory=False):
        fd = os.open(self.p(rel), os.O_RDONLY | (os.O_DIRECTORY if directory else os.O_NOFOLLOW))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_file(self, rel):
        self.fsync_rel(rel)
        self.fsync_rel(parent_of(rel), directory=True)
        self.d_set(rel, self.value(rel))
        self.ctx.count("fsyncs (file and directory)")

    def sync_dirs(self, *rels):
        for d in sorted(set(rels)):
            self.fsync_rel(d, directory=True)

    def want_sync(self):
        return self.always_sync or self.rng.random() < 0.3

    def inode(self, rel):
        return self.model.inodes[self.model.entries[rel][1]]

    # ---- operations (each returns its name, or "skip")
    def op_create(self):
        parent = self.rng.choice(self.free_dirs())
        rel = self.new_name(parent, "f")
        if rel is None:
            return "skip"
        data = self.gen_data()
        mode = self.rng.choice((0o644, 0o600, 0o640, 0o755))
        self.log.append(f"create {rel} {len(data)}B mode={mode:o}")
        self.d_drop(rel)
        fd = os.open(self.p(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            ino = self.model.add_file(rel, b"", mode)
            self.write_all(fd, data)
            self.model.inodes[ino].set(data)
        finally:
            os.close(fd)
        if self.want_sync():
            self.sync_file(rel)
        return "create"

    def _inplace(self, rel, fn, label):
        ino = self.model.entries[rel][1]
        for n in self.model.names_of(ino):
            self.d_drop(n)
        new = fn(self.model.inodes[ino].data)
        self.model.inodes[ino].set(new)
        if self.want_sync():
            self.sync_file(rel)
        return label

    def op_overwrite(self):
        files = self.free("f")
        if not files:
            return self.op_create()
        rel = self.rng.choice(files)
        old = self.inode(rel).data
        off = self.rng.randrange(0, len(old) + 64 * KIB)
        data = self.gen_data(256 * KIB) or b"!"
        self.log.append(f"pwrite {rel} off={off} {len(data)}B (size {len(old)})")

        def apply(old):
            fd = os.open(self.p(rel), os.O_WRONLY)
            try:
                self.write_all(fd, data, off)
            finally:
                os.close(fd)
            new = bytearray(old)
            if off > len(new):
                new.extend(bytes(off - len(new)))
            new[off:off + len(data)] = data
            return new
        return self._inplace(rel, apply, "overwrite")

    def op_append(self):
        files = self.free("f")
        if not files:
            return self.op_create()
        rel = self.rng.choice(files)
        data = self.gen_data(128 * KIB) or b"+"
        self.log.append(f"append {rel} {len(data)}B")

        def apply(old):
            fd = os.open(self.p(rel), os.O_WRONLY | os.O_APPEND)
            try:
                self.write_all(fd, data)
            finally:
                os.close(fd)
            return old + data
        return self._inplace(rel, apply, "append")

    def op_truncate(self, shrink=False):
        files = self.free("f")
        if not files:
            return self.op_create()
        rel = self.rng.choice(files)
        size = len(self.inode(rel).data)
        choices = [0, self.rng.randrange(size + 1)]
        if not shrink:
            choices.append(size + self.rng.randrange(1, 128 * KIB))
        new = self.rng.choice(choices)
        self.log.append(f"truncate {rel} {size} -> {new}")

        def apply(old):
            os.truncate(self.p(rel), new)
            return old[:new] + bytes(max(0, new - len(old)))
        return self._inplace(rel, apply, "truncate")

    def op_replace(self):
        """Write a temporary file, fsync it, rename it over the target, fsync the directory."""
        files = self.free("f")
        if files and self.rng.random() < 0.7:
            target = self.rng.choice(files)
        else:
            target = self.new_name(self.rng.choice(self.free_dirs()), "f")
        if target is None:
            return "skip"
        tdir = parent_of(target) if self.rng.random() < 0.8 else self.rng.choice(self.free_dirs())
        self.tmpn += 1
        tmp = join(tdir, f"tmp{self.tmpn}") if tdir else f"tmp{self.tmpn}"
        if tmp in self.model.entries:
            return "skip"
        data = self.gen_data()
        self.log.append(f"replace {target} via {tmp} {len(data)}B")
        self.d_drop(tmp)
        fd = os.open(self.p(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            ino = self.model.add_file(tmp, b"", 0o644)
            self.write_all(fd, data)
            self.model.inodes[ino].set(data)
            os.fsync(fd)
        finally:
            os.close(fd)
        hv = digest(data)
        if self.ctx.interrupted(self.op_epoch):
            self.d_drop(target)
        else:
            self.d_add(target, hv)          # the target is old-or-new from here on
        os.rename(self.p(tmp), self.p(target))
        self.model.rename(tmp, target)
        self.sync_dirs(parent_of(target), tdir)
        self.d_set(target, hv)
        self.d_set(tmp, ABSENT)
        return "replace"

    def op_rename(self):
        cands = self.free("fl")
        if not cands:
            return self.op_create()
        src = self.rng.choice(cands)
        se = self.model.entries[src]
        others = [r for r in cands if r != src and not (
            se[0] == "f" and self.model.entries[r][0] == "f" and self.model.entries[r][1] == se[1])]
        if others and self.rng.random() < 0.4:
            dst = self.rng.choice(others)
        else:
            dst = self.new_name(self.rng.choice(self.free_dirs()), "f" if se[0] == "f" else "l")
        if dst is None:
            return "skip"
        self.log.append(f"rename {src} -> {dst}")
        val, clean = self.value(src), self.d_clean(src)
        self.d_add(src, ABSENT)
        if clean:
            self.d_add(dst, val)
        else:
            self.d_drop(dst)
        os.rename(self.p(src), self.p(dst))
        self.model.rename(src, dst)
        if self.want_sync():
            self.sync_dirs(parent_of(src), parent_of(dst))
            self.d_set(src, ABSENT)
            if clean:
                self.d_set(dst, val)
        return "rename"

    def op_rename_dir(self):
        dirs = [d for d in self.free("d") if d]
        if not dirs:
            return self.op_mkdir()
        src = self.rng.choice(dirs)
        height = max(depth(r) - depth(src) for r in self.model.entries if under(r, src))
        parents = [d for d in self.free_dirs(4) if not under(d, src)]
        if not parents:
            return "skip"
        dst = self.new_name(self.rng.choice(parents), "d")
        if dst is None or depth(dst) + height > 4:
            return "skip"
        self.log.append(f"rename directory {src} -> {dst}")
        self.d_drop_tree(src)
        self.d_drop_tree(dst)
        os.rename(self.p(src), self.p(dst))
        self.model.rename(src, dst)
        return "rename_dir"

    def op_unlink(self):
        cands = self.free("fl")
        if not cands:
            return "skip"
        rel = self.rng.choice(cands)
        self.log.append(f"unlink {rel}")
        self.d_add(rel, ABSENT)
        os.unlink(self.p(rel))
        self.model.remove(rel)
        if self.want_sync():
            self.sync_dirs(parent_of(rel))
            self.d_set(rel, ABSENT)
        return "unlink"

    def op_mkdir(self):
        rel = self.new_name(self.rng.choice(self.free_dirs()), "d", pool=8)
        if rel is None:
            return "skip"
        self.log.append(f"mkdir {rel}")
        self.d_drop_tree(rel)
        os.mkdir(self.p(rel), 0o755)
        self.model.add_dir(rel, 0o755)
        return "mkdir"

    def op_rmdir(self):
        cands = [d for d in self.free("d") if d and not self.model.children(d)]
        if not cands:
            return "skip"
        rel = self.rng.choice(cands)
        self.log.append(f"rmdir {rel}")
        os.rmdir(self.p(rel))
        self.model.remove(rel)
        return "rmdir"

    def op_rmtree(self):
        """Remove a small directory with everything in it (used to stay under the caps)."""
        cands = []
        for d in self.free("d"):
            if d:
                n = sum(1 for r in self.model.entries if under(r, d))
                if n <= 16:
                    cands.append(d)
        if not cands:
            return self.op_unlink()
        top = self.rng.choice(cands)
        self.log.append(f"rm -r {top}")
        for rel in sorted((r for r in self.model.entries if under(r, top)), key=depth, reverse=True):
            if self.model.kind(rel) == "d":
                os.rmdir(self.p(rel))
            else:
                self.d_add(rel, ABSENT)
                os.unlink(self.p(rel))
            self.model.remove(rel)
        return "rmtree"

    def op_link(self):
        files = self.free("f")
        if not files:
            return self.op_create()
        src = self.rng.choice(files)
        if len(self.model.names_of(self.model.entries[src][1])) >= 4:
            return "skip"
        dst = self.new_name(self.rng.choice(self.free_dirs()), "h")
        if dst is None:
            return "skip"
        self.log.append(f"link {src} {dst}")
        self.d_drop(dst)
        os.link(self.p(src), self.p(dst))
        self.model.link(src, dst)
        return "link"

    def op_symlink(self):
        dst = self.new_name(self.rng.choice(self.free_dirs()), "l", pool=8)
        if dst is None:
            return "skip"
        target = self.rng.choice(("f1", "../d2/f3", "/nonexistent/x", "y" * self.rng.randrange(1, 200)))
        self.log.append(f"symlink {dst} -> {target[:40]}")
        self.d_drop(dst)
        os.symlink(target, self.p(dst))
        self.model.add_symlink(dst, target)
        return "symlink"

    def _xattrs_of(self, rel):
        e = self.model.entries[rel]
        return e[2] if e[0] == "d" else self.model.inodes[e[1]].xattrs

    def op_setxattr(self):
        rel = self.rng.choice(self.free("fd"))
        key = f"user.k{self.rng.randrange(5)}"
        val = self.rng.randbytes(self.rng.randrange(0, 256))
        self.log.append(f"setxattr {rel or '.'} {key} {len(val)}B")
        os.setxattr(self.p(rel), key, val, follow_symlinks=False)
        self._xattrs_of(rel)[key] = val
        return "setxattr"

    def op_rmxattr(self):
        cands = [r for r in self.free("fd") if self._xattrs_of(r)]
        if not cands:
            return self.op_setxattr()
        rel = self.rng.choice(cands)
        key = self.rng.choice(sorted(self._xattrs_of(rel)))
        self.log.append(f"removexattr {rel or '.'} {key}")
        os.removexattr(self.p(rel), key, follow_symlinks=False)
        del self._xattrs_of(rel)[key]
        return "removexattr"

    def op_chmod(self):
        files = self.free("f")
        if not files:
            return "skip"
        rel = self.rng.choice(files)
        mode = self.rng.choice((0o644, 0o600, 0o640, 0o755, 0o700))
        self.log.append(f"chmod {rel} {mode:o}")
        os.chmod(self.p(rel), mode)
        self.inode(rel).mode = mode
        return "chmod"

    def op_fsync(self):
        files = self.free("f")
        if not files:
            return "skip"
        rel = self.rng.choice(files)
        self.log.append(f"fsync {rel}")
        self.sync_file(rel)
        return "fsync"

    WEIGHTS = [("create", 8), ("overwrite", 8), ("append", 5), ("truncate", 3), ("replace", 4),
               ("rename", 4), ("rename_dir", 1), ("unlink", 4), ("mkdir", 2), ("rmdir", 1),
               ("rmtree", 0.3), ("link", 3), ("symlink", 1), ("setxattr", 3), ("rmxattr", 1),
               ("chmod", 1), ("fsync", 4)]
    SHRINK = [("unlink", 6), ("rmtree", 2), ("truncate_shrink", 2), ("rmdir", 1), ("fsync", 1)]
    # what a cloner does in a fresh clone (every change fsynced)
    CLONE_WEIGHTS = [("create", 3), ("overwrite", 4), ("append", 2), ("truncate", 1), ("unlink", 2),
                     ("link", 1), ("setxattr", 2), ("rename", 1), ("chmod", 1)]

    def op_truncate_shrink(self):
        return self.op_truncate(shrink=True)

    def random_op(self, weights=None):
        if weights is None:
            full = (self.model.live_bytes() > self.cap * 0.9
                    or len(self.model.entries) > self.max_entries)
            weights = self.SHRINK if full else self.WEIGHTS
        name = self.rng.choices([n for n, _ in weights], [w for _, w in weights])[0]
        return getattr(self, "op_" + name)()


# ----------------------------------------------------------------------------- registry

class Item:
    """A clone or snapshot the test made."""

    def __init__(self, kind, name, path, spath, src, how, owner):
        self.kind, self.name, self.path, self.spath = kind, name, path, spath
        self.src, self.how, self.owner = src, how, owner
        self.state = "creating"      # creating, mutating, ready, destroying, uncertain*
        self.committed = False       # its command returned: it exists whatever happens next
        self.expected = None         # (desc, groups) it must hold
        self.exact = False           # expected derived from a model, not read back
        self.frozen = None           # paused source's description when taken
        self.model = None            # a paused clone's own model (written into)
        self.pins = 0
        self.parent = None           # clone item a snapshot was taken of
        self.children = 0            # live snapshots of this clone

    def label(self):
        return f"{self.kind} {self.spath} ({self.how}, of {self.src})"


class Registry:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = {}
        self.n = Counter()
        self.stable = {}             # abs path -> [digest, pins]
        self.max_live = Counter()

    def next_name(self, kind):
        with self.lock:
            self.n[kind] += 1
            return f"clone-{self.n[kind]}" if kind == "clone" else f"s{self.n[kind]}"

    def add(self, item):
        with self.lock:
            self.items[item.spath] = item
            live = sum(1 for i in self.items.values() if i.kind == item.kind)
            self.max_live[item.kind] = max(self.max_live[item.kind], live)

    def remove(self, item):
        with self.lock:
            self.items.pop(item.spath, None)
            if item.parent is not None:
                item.parent.children -= 1

    def live(self, kind):
        with self.lock:
            return sum(1 for i in self.items.values() if i.kind == kind)

    def pin(self, rng, kind=None):
        with self.lock:
            c = [i for i in self.items.values()
                 if i.state == "ready" and (kind is None or i.kind == kind)]
            if not c:
                return None
            i = rng.choice(sorted(c, key=lambda x: x.spath))
            i.pins += 1
            return i

    def unpin(self, item):
        with self.lock:
            item.pins -= 1

    def pick_destroy(self, kind):
        with self.lock:
            c = [i for i in self.items.values() if i.kind == kind and i.state == "ready"
                 and i.pins == 0 and i.children == 0]
            if not c:
                return None
            i = min(c, key=lambda x: int(x.name.split("-")[-1].lstrip("s")))
            i.state = "destroying"
            return i

    def add_stable(self, path, h):
        with self.lock:
            self.stable[path] = [h, 0]

    def remove_stable(self, path):
        """Unpublish a stable file (False if a reader holds it)."""
        with self.lock:
            e = self.stable.get(path)
            if e is None:
                return True
            if e[1]:
                return False
            del self.stable[path]
            return True

    def pin_stable(self, rng):
        with self.lock:
            if not self.stable:
                return None, None
            p = rng.choice(sorted(self.stable))
            self.stable[p][1] += 1
            return p, self.stable[p][0]

    def unpin_stable(self, path):
        with self.lock:
            if path in self.stable:
                self.stable[path][1] -= 1


# ----------------------------------------------------------------------------- workers

class Worker(threading.Thread):
    interval = (0, 0)

    def __init__(self, ctx, name):
        super().__init__(name=name, daemon=True)
        self.ctx = ctx
        self.rng = random.Random(f"{ctx.seed}/{name}")
        self.epoch_seen = 0
        self.log = deque(maxlen=50)

    def guard(self):
        return _NULL_LOCK

    def recover(self):
        pass

    def on_interrupt(self):
        pass

    def run(self):
        ctx = self.ctx
        try:
            while not ctx.stop.is_set():
                lo, hi = self.interval
                if hi and ctx.stop.wait(self.rng.uniform(lo, hi)):
                    break
                if not ctx.wait_up():
                    break
                e0 = ctx.epoch
                try:
                    with self.guard():
                        if self.epoch_seen != e0:
                            self.recover()
                            self.epoch_seen = e0
                        self.step(e0)
                except Exception as ex:  # noqa: BLE001
                    if ctx.interrupted(e0):
                        ctx.count("operations interrupted by a kill")
                        self.log.append(f"  (interrupted by the kill: {ex!r})")
                        self.on_interrupt()
                        continue
                    if self.tolerated(ex):
                        continue
                    ctx.fail(f"{self.name}: {exc_text(ex)}", self.log)
                    return
        except BaseException as ex:  # noqa: BLE001
            ctx.fail(f"{self.name} crashed: {exc_text(ex)}", self.log)

    def tolerated(self, ex):
        return False

    def recover_if_needed(self):
        if self.epoch_seen != self.ctx.epoch:
            with self.guard():
                self.recover()
                self.epoch_seen = self.ctx.epoch


class _NullLock:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_NULL_LOCK = _NullLock()


class Writer(Worker):
    def __init__(self, ctx, idx):
        super().__init__(ctx, f"writer{idx}")
        self.rel = f"w{idx}"
        self.root = join(ctx.mnt, self.rel)
        self.lock = threading.Lock()
        self.pause_wanted = 0
        self.plock = threading.Lock()
        self.model = Model()
        self.model.add_dir("stable", 0o755)
        self.durable = {}
        self.ops = TreeOps(ctx, self.root, self.model, self.rng, self.log, durable=self.durable,
                           cap=ctx.args.writer_mib * MIB, max_entries=300)
        self.stable = []
        self.stable_n = 0
        self.valid = True
        self.nops = 0
        self.verify_every = self.rng.randrange(150, 300)
        self.recover_why = "after the daemon was killed and the store remounted"

    def setup(self):
        os.mkdir(self.root, 0o755)
        os.mkdir(join(self.root, "stable"), 0o755)

    def guard(self):
        # a cloner or snapshotter waiting to pause this writer goes first (Lock is not fair)
        while self.pause_wanted and not self.ctx.stop.is_set():
            time.sleep(0.002)
        return self.lock

    @contextlib.contextmanager
    def paused(self):
        """Hold the writer between two operations (no file of its tree is open)."""
        with self.plock:
            self.pause_wanted += 1
        try:
            with self.lock:
                yield
        finally:
            with self.plock:
                self.pause_wanted -= 1

    def on_interrupt(self):
        self.valid = False

    def tolerated(self, ex):
        """An error of an operation: add what its paths look like, to the kernel and (after
        the kernel's dentry/inode caches are dropped) to the daemon. With
        --tolerate-stale-cache, ENOENT/ESTALE for a path that is there once the caches are
        dropped is counted, and the writer re-reads its tree as after a kill."""
        if not isinstance(ex, OSError) or not ex.filename:
            return False
        paths = [ex.filename] + ([os.path.dirname(ex.filename2)] if ex.filename2 else [])

        def look():
            out = []
            for p in paths:
                try:
                    st = os.lstat(p)
                    out.append(f"{p}: ino {st.st_ino} nlink {st.st_nlink} size {st.st_size}")
                except OSError as e:
                    out.append(f"{p}: {errname(e.errno)}")
            return out
        before = look()
        drop_kernel_caches()
        after = look()
        note = ("\n  the paths now: " + "; ".join(before)
                + "\n  after dropping the kernel's dentry/inode caches: " + "; ".join(after))
        there = not after[0].endswith(("ENOENT", "ESTALE"))
        if (self.ctx.args.tolerate_stale_cache and there
                and ex.errno in (errno.ENOENT, errno.ESTALE)):
            self.ctx.stale(f"{self.name}: {ex!r}{note}")
            self.valid = False
            self.epoch_seen = -1        # re-read the tree (after checking the fsync records)
            self.recover_why = "after a tolerated stale-cache error"
            return True
        ex.add_note(note.strip())
        return False

    def step(self, e0):
        self.ops.op_epoch = e0
        self.valid = False          # until the operation completes
        self.nops += 1
        if self.nops % self.verify_every == 0:
            self.verify("periodic check")
            name = "verify"
        elif self.rng.random() < 0.02:
            name = self.op_stable()
        else:
            name = self.ops.random_op()
        self.valid = True
        self.ctx.count(f"op {name}")

    def op_stable(self):
        """Publish a file that never changes: created, fsynced (file and directory)."""
        self.stable_n += 1
        rel = f"stable/s{self.stable_n}"
        data = self.ops.gen_data(128 * KIB)
        self.log.append(f"stable file {rel} {len(data)}B")
        self.ops.d_drop(rel)
        fd = os.open(join(self.root, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            ino = self.model.add_file(rel, b"", 0o644)
            self.ops.write_all(fd, data)
            self.model.inodes[ino].set(data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.ops.fsync_rel("stable", directory=True)
        self.ops.d_set(rel, digest(data))
        if not self.ctx.interrupted(self.ops.op_epoch):
            self.ctx.registry.add_stable(join(self.root, rel), digest(data))
            self.stable.append(rel)
        while len(self.stable) > STABLE_KEEP:
            old = self.stable[0]
            if not self.ctx.registry.remove_stable(join(self.root, old)):
                break               # a reader holds it; later
            self.stable.pop(0)
            self.log.append(f"unlink stable file {old}")
            self.ops.d_add(old, ABSENT)
            os.unlink(join(self.root, old))
            self.model.remove(old)
        return "stable"

    def verify(self, why):
        try:
            expect_tree(self.root, self.model.describe(),
                        f"{self.root} differs from what {self.name} wrote ({why})",
                        drop_cache=self.rng.random() < 0.5)
        except SoakFailure as ex:
            if threading.current_thread() is self:
                raise
            raise SoakFailure(f"{ex}\n  last operations of {self.name}:\n    "
                              + "\n    ".join(list(self.log)[-25:])) from None
        # the crash records must admit the current state (a check of the test itself)
        for rel, vals in self.durable.items():
            if self.model.value(rel) not in vals:
                raise SoakFailure(f"test bug: crash record of {rel} {fmt_vals(vals)} does not "
                                  f"admit the current {self.model.value(rel)}")
        self.ctx.count("tree self-checks")

    def check_durable(self, why):
        problems = []
        for rel, vals in sorted(self.durable.items()):
            act = actual_value(join(self.root, rel))
            if act not in vals:
                problems.append(f"  {self.rel}/{rel}: must hold one of {fmt_vals(vals)}, holds "
                                f"{act if act.startswith('<') else act[:12]}")
        self.ctx.count("fsynced paths verified", len(self.durable))
        if problems:
            raise SoakFailure(f"fsynced data lost ({why}):\n" + "\n".join(problems[:20]))

    def recover(self):
        """After a kill: what was fsynced must be there; then the tree is the new model."""
        self.check_durable(self.recover_why)
        self.recover_why = "after the daemon was killed and the store remounted"
        self.model = Model.from_tree(self.root)
        self.ops.model = self.model
        known = {join(self.root, r) for r in self.stable}
        self.stable = sorted((r for r in self.model.entries
                              if r.startswith("stable/") and self.model.kind(r) == "f"),
                             key=lambda r: int(r.rsplit("s", 1)[1]))
        for r in self.stable:
            if join(self.root, r) not in known:
                self.ctx.registry.add_stable(join(self.root, r), self.model.value(r))
        self.valid = True
        self.ctx.count("recoveries of writers")


class Reader(Worker):
    def step(self, e0):
        a = self.rng.choices(["walk", "item", "stable", "list"], [2, 4, 3, 1])[0]
        getattr(self, "do_" + a)()

    def race(self, e, path):
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            self.ctx.count(f"reader races tolerated ({errname(e.errno)})")
            return
        if e.errno == errno.ESTALE and os.path.relpath(path, self.ctx.mnt).startswith("clone-"):
            self.ctx.count("reader races tolerated (ESTALE in a clone)")
            return
        if e.errno == errno.ELOOP:
            # A writer renamed a symlink over the file since the lstat: the O_NOFOLLOW open
            # meets the symlink. A race if the name is a symlink now.
            try:
                if stat.S_ISLNK(os.lstat(path).st_mode):
                    self.ctx.count("reader races tolerated (file replaced by a symlink)")
                    return
            except OSError:
                pass
        raise SoakFailure(f"walk: {path}: {e!r}")

    def do_walk(self):
        budget = 32 * MIB
        stack = [self.ctx.mnt]
        nfiles = 0
        while stack and not self.ctx.stop.is_set():
            d = stack.pop()
            try:
                names = os.listdir(d)
            except OSError as e:
                self.race(e, d)
                continue
            for n in names:
                p = os.path.join(d, n)
                try:
                    st = os.lstat(p)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(p)
                    elif stat.S_ISREG(st.st_mode) and budget > 0:
                        _, k = hash_file(p, drop_cache=self.rng.random() < 0.2)
                        budget -= k
                        nfiles += 1
                        self.ctx.count("bytes read", k)
                    elif stat.S_ISLNK(st.st_mode):
                        try:
                            os.readlink(p)
                        except OSError as e:
                            # A writer renamed a file over the symlink since the lstat: EINVAL,
                            # a race, if the name is no longer a symlink now.
                            if e.errno != errno.EINVAL or stat.S_ISLNK(os.lstat(p).st_mode):
                                raise
                            self.ctx.count("reader races tolerated (symlink replaced)")
                except OSError as e:
                    self.race(e, p)
        self.ctx.count("reader walks")
        self.ctx.count("reader files read", nfiles)

    def do_item(self):
        item = self.ctx.registry.pin(self.rng)
        if item is None:
            return
        try:
            expect_tree(item.path, item.expected, f"{item.label()} changed since it was taken",
                        drop_cache=self.rng.random() < 0.5)
            self.ctx.count(f"reader verified {item.kind}s")
        finally:
            self.ctx.registry.unpin(item)

    def do_stable(self):
        path, h = self.ctx.registry.pin_stable(self.rng)
        if path is None:
            return
        try:
            got, _ = hash_file(path, drop_cache=self.rng.random() < 0.5)
            if got != h:
                raise SoakFailure(f"stable file {path}: sha {got[:12]}, written {h[:12]}")
            self.ctx.count("reader verified stable files")
        finally:
            self.ctx.registry.unpin_stable(path)

    def do_list(self):
        item = self.ctx.registry.pin(self.rng)
        try:
            paths = self.ctx.list_paths()
            if item is not None and item.spath not in paths:
                raise SoakFailure(f"`scion list` does not name {item.label()}")
        finally:
            if item is not None:
                self.ctx.registry.unpin(item)


class Manager(Worker):
    """Base of cloners and snapshotters: items in flight, recovery after a kill."""
    kind = None

    def __init__(self, ctx, name):
        super().__init__(ctx, name)
        self.inflight = []

    def on_interrupt(self):
        for it in self.inflight:
            if it.state == "creating":
                it.state = "uncertain-create"
            elif it.state == "mutating":
                it.state = "uncertain"
            elif it.state == "destroying":
                it.state = "uncertain-destroy"
        self.inflight = []

    def recover(self):
        """After a kill, settle the items whose command or follow-up was cut short.
        A clone or snapshot is committed before its command answers: it is there whole or
        not at all."""
        reg = self.ctx.registry
        with reg.lock:
            mine = [i for i in reg.items.values() if i.owner is self and i.state.startswith("uncertain")]
        for it in mine:
            exists = os.path.lexists(it.path)
            if it.state == "uncertain-destroy":
                if exists:
                    it.state = "ready"
                else:
                    reg.remove(it)
                continue
            if not exists:
                if it.state == "uncertain" or it.committed:
                    raise SoakFailure(f"{it.label()} vanished after the kill, although its "
                                      f"command had returned")
                reg.remove(it)
                self.ctx.count(f"{self.kind}s lost with their command (kill)")
                continue
            if it.state == "uncertain-create" and it.frozen is not None:
                # not yet written into: it is its source as it was when taken
                act = expect_tree(it.path, it.frozen, f"{it.label()}, taken as the daemon was "
                                  f"killed, is there but differs from its source when taken")
            else:
                act = describe_tree(it.path)
            it.expected, it.exact = act, it.exact and it.state != "uncertain"
            it.model = None
            it.state = "ready"
            self.ctx.count(f"{self.kind}s settled after a kill")

    def check_listed(self, item, present=True):
        paths = self.ctx.list_paths()
        if present and item.spath not in paths:
            raise SoakFailure(f"`scion list` does not name {item.label()}")
        if not present and item.spath in paths:
            raise SoakFailure(f"`scion list` still names {item.label()} after `scion destroy`")

    def destroy_one(self):
        reg = self.ctx.registry
        it = reg.pick_destroy(self.kind)
        if it is None:
            return
        self.inflight = [it]
        self.ctx.destroy_item(it)
        self.inflight = []


class Cloner(Manager):
    kind = "clone"
    interval = (0.3, 2.0)

    def step(self, e0):
        reg, args = self.ctx.registry, self.ctx.args
        n = reg.live("clone")
        if n >= args.max_clones or (n and self.rng.random() < 0.1):
            self.destroy_one()
            return
        how = self.rng.choices(["paused", "live", "of-clone", "of-snapshot"], [5, 2, 1, 1])[0]
        if how == "paused":
            self.clone_paused()
        elif how == "live":
            w = self.rng.choice(self.ctx.writers)
            self.make(w.root, how)
        else:
            src = reg.pin(self.rng, "clone" if how == "of-clone" else "snapshot")
            if src is None:
                return
            try:
                self.make(src.path, how, expected=src.expected, exact=src.exact)
            finally:
                reg.unpin(src)

    def new_item(self, src, how):
        name = self.ctx.registry.next_name("clone")
        return Item("clone", name, join(self.ctx.mnt, name), "/" + name, src, how, self)

    def make(self, src, how, expected=None, exact=False):
        it = self.new_item(src, how)
        it.frozen = expected
        self.inflight = [it]
        self.ctx.registry.add(it)
        self.log.append(f"clone {src} {it.path} ({how})")
        self.ctx.cli_ok("clone", src, it.path)
        it.committed = True
        self.after_create(it, expected, exact)

    def after_create(self, it, expected, exact):
        mnt = self.ctx.mnt
        if not os.path.isdir(it.path):
            raise SoakFailure(f"{it.path} is not a directory after `scion clone` returned")
        self.ctx.check_listing(mnt, it.name, True, f"{it.path} is not listed in {mnt} after "
                               f"`scion clone` returned")
        if expected is not None:
            act = expect_tree(it.path, expected, f"{it.label()} differs from its source as it "
                              f"was when taken", drop_cache=True)
        else:
            act = describe_tree(it.path, drop_cache=True)
        it.expected, it.exact = act, exact
        self.check_listed(it)
        it.state = "ready"
        self.inflight = []
        self.ctx.count(f"clones made ({it.how})")

    def clone_paused(self):
        w = self.rng.choice(self.ctx.writers)
        it = self.new_item(w.root, "paused")
        exclude = None
        with w.paused():
            if not w.valid or w.epoch_seen != self.ctx.epoch:
                return
            frozen = w.model.freeze()
            if self.rng.random() < 0.3:
                cands = [r for r in frozen.entries if r]
                if cands:
                    exclude = self.rng.choice(cands)
                    frozen.remove_subtree(exclude)
            it.model = frozen
            it.frozen = frozen.describe()
            it.exact = True
            self.inflight = [it]
            self.ctx.registry.add(it)
            argv = ["clone", w.root, it.path] + (["--exclude", exclude] if exclude else [])
            self.log.append(" ".join(argv))
            self.ctx.cli_ok(*argv)
            it.committed = True
        if exclude:
            self.ctx.count("clones made with --exclude")
            it.how = f"paused, --exclude {exclude}"
        if not os.path.isdir(it.path):
            raise SoakFailure(f"{it.path} is not a directory after `scion clone` returned")
        self.ctx.check_listing(self.ctx.mnt, it.name, True, f"{it.path} is not listed in "
                               f"{self.ctx.mnt} after `scion clone` returned")
        expect_tree(it.path, it.frozen, f"{it.label()} differs from its paused source",
                    drop_cache=True)
        # writes into the clone: it follows its own model, its source does not move
        it.state = "mutating"
        self.log.append(f"writes into {it.spath}:")
        ops = TreeOps(self.ctx, it.path, it.model, self.rng, self.log, always_sync=True,
                      cap=self.ctx.args.writer_mib * MIB, max_entries=400)
        for _ in range(self.rng.randrange(1, 7)):
            ops.random_op(TreeOps.CLONE_WEIGHTS)
            self.ctx.count("writes into clones")
        expect_tree(it.path, it.model.describe(),
                    f"{it.label()} differs from what was written into it", drop_cache=True)
        with w.paused():
            if w.valid and w.epoch_seen == self.ctx.epoch:
                w.verify(f"after writes into its clone {it.spath}")
                self.ctx.count("sources verified after writes into their clone")
        it.expected = it.model.describe()
        self.check_listed(it)
        it.state = "ready"
        self.inflight = []
        self.ctx.count("clones made (paused)")


class Snapshotter(Manager):
    kind = "snapshot"
    interval = (0.3, 2.0)

    def step(self, e0):
        reg, args = self.ctx.registry, self.ctx.args
        n = reg.live("snapshot")
        if n >= args.max_snapshots or (n and self.rng.random() < 0.1):
            self.destroy_one()
            return
        how = self.rng.choices(["paused", "live", "of-clone"], [5, 2, 1])[0]
        name = reg.next_name("snapshot")
        if how == "of-clone":
            src_item = reg.pin(self.rng, "clone")
            if src_item is None:
                return
            try:
                with reg.lock:
                    src_item.children += 1
                it = self.new_item(src_item.path, name, how)
                it.parent = src_item
                it.frozen, it.exact = src_item.expected, src_item.exact
                self.create(it)
            finally:
                reg.unpin(src_item)
            return
        w = self.rng.choice(self.ctx.writers)
        it = self.new_item(w.root, name, how)
        if how == "paused":
            with w.paused():
                if not w.valid or w.epoch_seen != self.ctx.epoch:
                    return
                it.frozen, it.exact = w.model.describe(), True
                self.create(it, finish=False)
            self.finish(it)
        else:
            self.create(it)

    def new_item(self, src, name, how):
        path = join(src, f".snapshot/{name}")
        spath = "/" + os.path.relpath(path, self.ctx.mnt)
        return Item("snapshot", name, path, spath, src, how, self)

    def create(self, it, finish=True):
        self.inflight = [it]
        self.ctx.registry.add(it)
        self.log.append(f"snapshot {it.src} --name {it.name} ({it.how})")
        self.ctx.cli_ok("snapshot", it.src, "--name", it.name)
        it.committed = True
        if finish:
            self.finish(it)

    def finish(self, it):
        snapdir = join(it.src, ".snapshot")
        self.ctx.check_listing(snapdir, it.name, True,
                               f"{snapdir} does not list {it.name} after `scion snapshot`")
        self.ctx.check_listing(it.src, ".snapshot", False,
                               f"{it.src} lists .snapshot (it must be hidden)")
        if it.frozen is not None:
            act = expect_tree(it.path, it.frozen, f"{it.label()} differs from its source as it "
                              f"was when taken", drop_cache=True)
        else:
            act = describe_tree(it.path, drop_cache=True)
        it.expected = act
        self.ctx.check_erofs(it, self.rng)
        expect_tree(it.path, it.expected, f"{it.label()} changed by refused writes")
        self.check_listed(it)
        it.state = "ready"
        self.inflight = []
        self.ctx.count(f"snapshots made ({it.how})")


# ----------------------------------------------------------------------------- the run

class CmdResult:
    def __init__(self, argv, rc, out, err):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err

    def describe(self):
        return (f"$ {' '.join(self.argv)}\nexit status {self.rc}\n"
                f"stdout: {self.out.strip()[-2000:]}\nstderr: {self.err.strip()[-2000:]}")


class Soak:
    def __init__(self, args, seed, root, created_root):
        self.args = args
        self.seed = seed
        self.bin = args.bin
        self.root = root
        self.created_root = created_root
        self.store = join(root, "store")
        self.mnt = join(root, "mnt")
        self.logf = open(join(root, "soak.log"), "a", buffering=1)
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.up = threading.Event()
        self.epoch = 0
        self.lock = threading.Lock()
        self.stats = Counter()
        self.failures = []
        self.notes = []
        self.registry = Registry()
        self.pids = set()
        self.last_progress = time.monotonic()
        self.writers, self.workers = [], []
        self.load_seconds = 0.0
        self.checks = []
        self.store_sizes = {}
        self.final_phase = False
        self.stale_examples = []
        global _SOAK
        _SOAK = self

    # ---- reporting
    def say(self, msg):
        line = f"[{time.monotonic() - self.t0:7.1f}s] {msg}"
        print(line, flush=True)
        try:
            self.logf.write(line + "\n")
        except ValueError:
            pass

    def count(self, what, n=1):
        with self.lock:
            self.stats[what] += n
            self.last_progress = time.monotonic()

    def fail(self, msg, log=None):
        text = msg
        if log:
            text += "\n  last operations of this thread:\n    " + "\n    ".join(list(log)[-25:])
        text += (f"\n  seed {self.seed}; daemon log: {self.store}/daemon.log "
                 f"(the work dir {self.root} is kept)")
        with self.lock:
            self.failures.append(text)
        self.say("FAILURE: " + text)
        self.stop.set()

    def interrupted(self, e0):
        return self.epoch != e0 or not self.up.is_set()

    def wait_up(self):
        while not self.up.wait(0.2):
            if self.stop.is_set():
                return False
        return not self.stop.is_set()

    # ---- CLI
    def cli(self, *args, timeout=CMD_TIMEOUT):
        argv = [self.bin] + [str(a) for a in args]
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                               start_new_session=True)
            r = CmdResult(argv, p.returncode, p.stdout.decode("utf-8", "replace"),
                          p.stderr.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired as e:
            r = CmdResult(argv, f"timeout after {timeout}s",
                          (e.stdout or b"").decode("utf-8", "replace"),
                          (e.stderr or b"").decode("utf-8", "replace"))
        self.count(f"scion {args[0]}")
        return r

    def cli_ok(self, *args, timeout=CMD_TIMEOUT):
        r = self.cli(*args, timeout=timeout)
        if r.rc != 0:
            raise SoakFailure(f"`scion {args[0]}` failed:\n{r.describe()}")
        return r

    def list_paths(self):
        r = self.cli_ok("list", self.mnt)
        paths = set()
        for line in r.out.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 3:
                paths.add(parts[2] if not parts[2].startswith("(") else f"@{parts[1]}")
        return paths

    def daemon_pid(self):
        try:
            with open(join(self.store, "lock")) as f:
                first = f.readline().strip()
            return int(first[4:]) if first.startswith("pid=") else None
        except (OSError, ValueError):
            return None

    def our_pid(self, pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return self.store.encode() in f.read()
        except OSError:
            return False

    def mount(self):
        with open(join(self.root, "mount.out"), "ab") as out:
            p = subprocess.run([self.bin, "mount", self.store, self.mnt], stdin=subprocess.DEVNULL,
                               stdout=out, stderr=out, timeout=CMD_TIMEOUT, start_new_session=True)
        if p.returncode != 0:
            raise SoakFailure(f"`scion mount` failed (exit {p.returncode}); see {self.root}/mount.out")
        if not wait_for(lambda: is_mounted(self.mnt), 10):
            raise SoakFailure(f"{self.mnt} not in the mount table after `scion mount`")
        pid = self.daemon_pid()
        if pid:
            self.pids.add(pid)
        self.count("mounts")
        self.up.set()

    def umount(self):
        self.up.clear()
        pid = self.daemon_pid()
        self.cli_ok("umount", self.mnt)
        if not wait_for(lambda: not is_mounted(self.mnt), 30):
            raise SoakFailure(f"{self.mnt} still mounted after `scion umount`")
        if pid and not wait_for(lambda: not pid_alive(pid), 60):
            raise SoakFailure(f"daemon pid {pid} still alive after `scion umount`")
        leftovers = os.listdir(self.mnt)
        if leftovers:
            raise SoakFailure(f"the bare mount point {self.mnt} holds {leftovers[:5]}")

    def check(self, why):
        r = self.cli("check", self.store, timeout=900)
        n = len(self.checks) + 1
        with open(join(self.root, f"check{n}.out"), "w") as f:
            f.write(r.describe() + "\n")
        self.checks.append((why, r.rc))
        if r.rc != 0:
            raise SoakFailure(f"`scion check` {why} failed:\n{r.describe()}")
        last = [ln for ln in r.out.splitlines() if ln.strip()][-1:] or ["?"]
        self.say(f"scion check {why}: exit 0 ({last[0]})")

    BENIGN = ("Failed to umount filesystem",      # fuser, after `scion umount` unmounted it
              "[Not Implemented] ioctl")           # isatty() of a file by some program

    def scan_daemon_log(self):
        """Warnings and errors of STORE/daemon.log: (counts by message, panics/errors)."""
        counts, bad = Counter(), []
        try:
            with open(join(self.store, "daemon.log"), errors="replace") as f:
                for line in f:
                    if not line.startswith("[") or "]" not in line:
                        if "panicked" in line:
                            bad.append(line.strip())
                        continue
                    head, msg = line.split("]", 1)
                    level = head.split()[1] if len(head.split()) > 1 else "?"
                    if "panicked" in line or level == "ERROR":
                        bad.append(line.strip())
                    if level in ("WARN", "ERROR"):
                        counts[(level, msg.strip()[:90])] += 1
        except OSError as e:
            self.notes.append(f"daemon log unreadable: {e}")
        return counts, bad

    def store_bytes(self):
        total = 0
        for d, _, files in os.walk(self.store):
            for f in files:
                try:
                    total += os.lstat(os.path.join(d, f)).st_blocks * 512
                except OSError:
                    pass
        return total

    # ---- kill and recover
    def kill_daemon(self):
        pid = self.daemon_pid()
        if not pid or not self.our_pid(pid):
            raise SoakFailure(f"STORE/lock names pid {pid}, which is not this store's daemon")
        with self.lock:
            self.up.clear()
            self.epoch += 1
        self.say(f"kill -9 of the daemon (pid {pid}), kill #{self.epoch}")
        os.kill(pid, signal.SIGKILL)
        if not wait_for(lambda: not pid_alive(pid), 30):
            raise SoakFailure(f"daemon pid {pid} survived SIGKILL for 30 s")
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: not is_mounted(self.mnt), 10):
            raise SoakFailure(f"{self.mnt} still mounted after umount -l")
        time.sleep(0.5)         # let the threads' calls fail
        leftovers = os.listdir(self.mnt)
        if leftovers:
            raise SoakFailure(f"the bare mount point {self.mnt} holds {leftovers[:5]}")
        self.count("kills")
        self.check(f"after kill #{self.epoch}")
        self.mount()

    # ---- checks shared by threads and the final phase
    def check_erofs(self, it, rng):
        desc = it.expected[0]
        p = it.path
        files = sorted(r for r, e in desc.items() if e[0] == "f")
        dirs = sorted(r for r, e in desc.items() if e[0] == "d")
        d = join(p, rng.choice(dirs))
        tries = [
            ("create a file", lambda: os.open(join(d, "soak-new"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)),
            ("mkdir", lambda: os.mkdir(join(d, "soak-newdir"))),
            ("symlink", lambda: os.symlink("x", join(d, "soak-newlink"))),
            ("setxattr on a directory", lambda: os.setxattr(d, "user.soak", b"1")),
            ("chmod a directory", lambda: os.chmod(d, 0o700)),
        ]
        if files:
            f = join(p, rng.choice(files))
            tries += [
                ("open for writing", lambda: os.open(f, os.O_WRONLY)),
                ("open O_RDWR|O_TRUNC", lambda: os.open(f, os.O_RDWR | os.O_TRUNC)),
                ("truncate", lambda: os.truncate(f, 0)),
                ("unlink", lambda: os.unlink(f)),
                ("rename", lambda: os.rename(f, f + ".moved")),
                ("link", lambda: os.link(f, join(d, "soak-hardlink"))),
                ("setxattr", lambda: os.setxattr(f, "user.soak", b"1")),
                ("chmod", lambda: os.chmod(f, 0o600)),
                ("utime", lambda: os.utime(f, (1, 1))),
            ]
        empty = [r for r in dirs if r and not any(parent_of(x) == r for x in desc if x)]
        if empty:
            tries.append(("rmdir", lambda: os.rmdir(join(p, empty[0]))))
        for what, fn in tries:
            try:
                r = fn()
            except OSError as e:
                if e.errno == errno.EROFS:
                    continue
                raise SoakFailure(f"{what} in {it.label()}: {errname(e.errno)}, expected EROFS")
            if isinstance(r, int):
                os.close(r)
            raise SoakFailure(f"{what} in {it.label()} succeeded; a snapshot must refuse every "
                              f"change with EROFS")
        self.count("EROFS refusals checked", len(tries))

    def check_listing(self, d, name, want, what):
        if (name in os.listdir(d)) == want:
            return
        drop_kernel_caches()
        fresh = (name in os.listdir(d)) == want
        if fresh and self.args.tolerate_stale_cache:
            self.stale(what)
            return
        raise SoakFailure(what + ("; a listing after dropping the kernel's dentry/inode caches "
                                  "is right (a stale cached directory listing)" if fresh else ""))

    def stale(self, what):
        with self.lock:
            self.stats["stale kernel caches tolerated"] += 1
            if len(self.stale_examples) < 3:
                self.stale_examples.append(what)
        self.say(f"stale kernel cache (tolerated): {what}")

    def destroy_item(self, it):
        """Verify once more, `scion destroy`, and see it gone."""
        expect_tree(it.path, it.expected, f"{it.label()} changed since it was taken",
                    drop_cache=True)
        if it.kind == "snapshot":
            self.check_erofs(it, random.Random(f"{self.seed}/{it.spath}"))
        self.cli_ok("destroy", "-r", it.path)
        if os.path.lexists(it.path):
            raise SoakFailure(f"{it.path} still there after `scion destroy` returned")
        parent = os.path.dirname(it.path)
        self.check_listing(parent, it.name, False,
                           f"{parent} still lists {it.name} after `scion destroy` returned")
        if it.spath in self.list_paths():
            raise SoakFailure(f"`scion list` still names {it.label()} after `scion destroy`")
        self.registry.remove(it)
        self.count(f"{it.kind}s destroyed")

    def verify_all(self, why):
        """Quiescent: every writer, clone, snapshot and stable file; `scion list`."""
        for w in self.writers:
            w.verify(why)
            w.check_durable(why)
        items = sorted(self.registry.items.values(), key=lambda i: i.spath)
        for it in items:
            if it.state != "ready":
                raise SoakFailure(f"{it.label()} left in state {it.state}")
            expect_tree(it.path, it.expected, f"{it.label()} changed since it was taken ({why})",
                        drop_cache=True)
        for path, (h, _) in sorted(self.registry.stable.items()):
            got, _ = hash_file(path, drop_cache=True)
            if got != h:
                raise SoakFailure(f"stable file {path}: sha {got[:12]}, written {h[:12]} ({why})")
        listed = self.list_paths()
        want = {it.spath for it in items}
        if listed != want:
            raise SoakFailure(f"`scion list` ({why}) names {sorted(listed - want)[:8]} that the test "
                              f"does not know and misses {sorted(want - listed)[:8]}")
        self.say(f"verified {why}: {len(self.writers)} writer trees, "
                 f"{sum(1 for i in items if i.kind == 'clone')} clones, "
                 f"{sum(1 for i in items if i.kind == 'snapshot')} snapshots, "
                 f"{len(self.registry.stable)} stable files, `scion list`")

    # ---- watchdog
    def watchdog(self):
        deadline = self.t0 + self.args.minutes * 60 + 1800
        while not self.watchdog_done.wait(5):
            now = time.monotonic()
            stalled = self.up.is_set() and now - self.last_progress > HANG_SECONDS
            if stalled or now > deadline:
                why = (f"no operation completed for {HANG_SECONDS} s" if stalled
                       else "the run exceeded its time limit by 30 minutes")
                self.say(f"WATCHDOG: {why}; thread stacks follow; killing the daemon so that "
                         f"blocked calls return")
                faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
                self.fail(f"hang: {why}")
                self.emergency_kill()
                return

    def emergency_kill(self):
        self.up.clear()
        for p in {self.daemon_pid(), *self.pids} - {None}:
            if pid_alive(p) and self.our_pid(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # ---- main
    def run(self):
        a = self.args
        self.say(f"scion soak: seed {self.seed}, {a.minutes} min, {a.writers} writers, "
                 f"{a.readers} readers, {a.cloners} cloners, {a.snapshotters} snapshotters, "
                 f"kill every {a.kill_every or 'never'} s; bin {self.bin}; work dir {self.root}")
        self.watchdog_done = threading.Event()
        threading.Thread(target=self.watchdog, name="watchdog", daemon=True).start()
        os.makedirs(self.mnt, exist_ok=True)
        self.cli_ok("init", self.store)
        self.mount()
        for i in range(a.writers):
            w = Writer(self, i)
            w.setup()
            self.writers.append(w)
        self.workers = list(self.writers)
        self.workers += [Reader(self, f"reader{i}") for i in range(a.readers)]
        self.workers += [Cloner(self, f"cloner{i}") for i in range(a.cloners)]
        self.workers += [Snapshotter(self, f"snapshotter{i}") for i in range(a.snapshotters)]
        start = time.monotonic()
        end = start + a.minutes * 60
        for t in self.workers:
            t.start()
        krng = random.Random(f"{self.seed}/killer")
        next_kill = start + krng.uniform(0.5, 1.5) * a.kill_every if a.kill_every else None
        next_report = start + 30
        try:
            while not self.stop.is_set() and time.monotonic() < end:
                now = time.monotonic()
                if next_kill and now >= next_kill and end - now > 15:
                    self.kill_daemon()
                    next_kill = time.monotonic() + krng.uniform(0.5, 1.5) * a.kill_every
                if now >= next_report:
                    self.progress()
                    next_report = now + 30
                self.stop.wait(0.2)
        except Exception as ex:  # noqa: BLE001
            self.fail(f"main thread: {exc_text(ex)}")
        self.load_seconds = time.monotonic() - start
        self.stop.set()
        self.say("load phase over; waiting for the threads")
        for t in self.workers:
            t.join(timeout=HANG_SECONDS)
            if t.is_alive():
                self.fail(f"{t.name} did not finish within {HANG_SECONDS} s of the stop")
                self.emergency_kill()
                t.join(timeout=60)
        if self.failures:
            return
        self.final_phase = True
        self.final_checks()

    def progress(self):
        s = self.stats
        wops = sum(v for k, v in s.items() if k.startswith("op ") and k != "op skip")
        self.say(f"progress: {wops} writer ops, {s['bytes written'] / MIB:.0f} MiB written, "
                 f"{s['reader walks']} walks, clones live {self.registry.live('clone')} "
                 f"(made {sum(v for k, v in s.items() if k.startswith('clones made ('))}), "
                 f"snapshots live {self.registry.live('snapshot')} "
                 f"(made {sum(v for k, v in s.items() if k.startswith('snapshots made ('))}), "
                 f"kills {s['kills']}, store {self.store_bytes() / MIB:.0f} MiB")

    def final_checks(self):
        self.say("final checks")
        self.up.set()
        for t in self.workers:
            t.recover_if_needed()
        self.verify_all("at the end of the load")
        self.store_sizes["end of load"] = self.store_bytes()
        self.umount()
        self.check("after the load (unmounted)")
        self.mount()
        self.verify_all("after a remount")
        snaps = [i for i in self.registry.items.values() if i.kind == "snapshot"]
        clones = [i for i in self.registry.items.values() if i.kind == "clone"]
        for it in sorted(snaps, key=lambda i: i.spath) + sorted(clones, key=lambda i: i.spath):
            it.state = "destroying"
            self.destroy_item(it)
        left = self.list_paths()
        if left:
            raise SoakFailure(f"`scion list` still names {sorted(left)[:8]} after every clone and "
                              f"snapshot was destroyed")
        for w in self.writers:
            w.verify("after every clone and snapshot was destroyed")
        self.say(f"destroyed {len(snaps)} snapshots and {len(clones)} clones; writer trees intact")
        self.umount()
        self.store_sizes["after destroying all"] = self.store_bytes()
        self.check("after destroying every clone and snapshot (unmounted)")

    def cleanup(self):
        self.up.clear()
        if hasattr(self, "watchdog_done"):
            self.watchdog_done.set()
        if is_mounted(self.mnt):
            r = self.cli("umount", self.mnt, timeout=120)
            if r.rc != 0:
                self.notes.append("cleanup: scion umount failed:\n" + r.describe())
        pid = self.daemon_pid()
        if pid:
            self.pids.add(pid)
        wait_for(lambda: not any(pid_alive(p) and self.our_pid(p) for p in self.pids), 20)
        for p in self.pids:
            if pid_alive(p) and self.our_pid(p):
                self.notes.append(f"cleanup: killing leftover daemon pid {p}")
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        if is_mounted(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def summary(self):
        s = self.stats
        self.daemon_log = self.scan_daemon_log()
        if self.daemon_log[1]:
            self.failures.append(f"the daemon logged {len(self.daemon_log[1])} errors or panics "
                                 f"({self.store}/daemon.log), first: {self.daemon_log[1][0]}")
        out = ["", "=== scion soak summary ==="]
        out.append(f"seed                {self.seed}  (python3 tests/soak.py --seed {self.seed} "
                   f"replays every thread's choices, not their interleaving)")
        out.append(f"load                {self.load_seconds:.0f} s; {self.args.writers} writers, "
                   f"{self.args.readers} readers, {self.args.cloners} cloners, "
                   f"{self.args.snapshotters} snapshotters; total {time.monotonic() - self.t0:.0f} s")
        wk = sorted((k[3:], v) for k, v in s.items() if k.startswith("op ") and k != "op skip")
        out.append(f"writer ops          {sum(v for _, v in wk)}: "
                   + ", ".join(f"{k} {v}" for k, v in wk)
                   + f" (and {s['op skip']} draws without a candidate)")
        out.append(f"fsyncs              {s['fsyncs (file and directory)']} (file and directory); "
                   f"tree self-checks {s['tree self-checks']}; fsynced paths verified "
                   f"{s['fsynced paths verified']}")
        out.append(f"data                {s['bytes written'] / MIB:.1f} MiB written, "
                   f"{s['bytes read'] / MIB:.1f} MiB read by walks; live in writer trees "
                   f"{sum(w.model.live_bytes() for w in self.writers) / MIB:.1f} MiB")
        cm = sorted((k[13:-1], v) for k, v in s.items() if k.startswith("clones made ("))
        out.append(f"clones              {sum(v for _, v in cm)} made ("
                   + ", ".join(f"{k} {v}" for k, v in cm) + f"), {s['clones made with --exclude']} "
                   f"with --exclude, {s['writes into clones']} writes into clones, "
                   f"{s['clones destroyed']} destroyed, at most {self.registry.max_live['clone']} live")
        sm = sorted((k[16:-1], v) for k, v in s.items() if k.startswith("snapshots made ("))
        out.append(f"snapshots           {sum(v for _, v in sm)} made ("
                   + ", ".join(f"{k} {v}" for k, v in sm) + f"), {s['snapshots destroyed']} "
                   f"destroyed, at most {self.registry.max_live['snapshot']} live, "
                   f"{s['EROFS refusals checked']} EROFS refusals checked")
        out.append(f"readers             {s['reader walks']} walks ({s['reader files read']} files), "
                   f"verified {s['reader verified clones']} clones, "
                   f"{s['reader verified snapshots']} snapshots, "
                   f"{s['reader verified stable files']} stable files")
        races = ", ".join(f"{k[23:]} {v}" for k, v in sorted(s.items())
                          if k.startswith("reader races tolerated"))
        out.append(f"races tolerated     {races or 'none'}")
        if self.args.tolerate_stale_cache:
            out.append(f"stale kernel cache  {s['stale kernel caches tolerated']} tolerated "
                       f"(--tolerate-stale-cache)" + "".join("\n                      " + x
                                                           for x in self.stale_examples))
        cli = ", ".join(f"{k[6:]} {v}" for k, v in sorted(s.items()) if k.startswith("scion "))
        out.append(f"scion commands      {cli}")
        out.append(f"kills               {s['kills']} (operations interrupted "
                   f"{s['operations interrupted by a kill']}, writer recoveries "
                   f"{s['recoveries of writers']}, clones/snapshots settled "
                   f"{s['clones settled after a kill'] + s['snapshots settled after a kill']}, "
                   f"lost with their command {s['clones lost with their command (kill)'] + s['snapshots lost with their command (kill)']})")
        out.append(f"scion check         " + ("; ".join(f"{why}: exit {rc}" for why, rc in self.checks)
                                              or "not run"))
        if self.store_sizes:
            out.append("store on disk       " + "; ".join(f"{k} {v / MIB:.1f} MiB"
                                                       for k, v in self.store_sizes.items()))
        counts, bad = self.daemon_log
        benign = sum(v for (lv, m), v in counts.items() if any(b in m for b in self.BENIGN))
        other = [(v, lv, m) for (lv, m), v in counts.items() if not any(b in m for b in self.BENIGN)]
        out.append(f"daemon log          {sum(counts.values())} warnings/errors ({benign} known "
                   f"benign: fuser's own unmount attempt, unimplemented ioctl)"
                   + "".join(f"\n                      {v}x {lv} {m}" for v, lv, m in sorted(other, reverse=True)[:8]))
        for n in self.notes:
            out.append("note: " + n)
        if self.failures:
            out.append(f"errors              {len(self.failures)}")
            out.append(f"RESULT: FAIL (seed {self.seed}; daemon log {self.store}/daemon.log; "
                       f"work dir {self.root} kept)")
            out.append("first failure:\n" + self.failures[0])
        else:
            out.append("errors              0")
            out.append("RESULT: PASS")
        for line in out:
            print(line)
            try:
                self.logf.write(line + "\n")
            except ValueError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, required=True, help="length of the load phase")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--bin", default=DEFAULT_BIN, help="scion binary (default $SCION_BIN or %(default)s)")
    ap.add_argument("--workdir", default=None,
                    help="where the store and mount point go (default a new /tmp/scion-soak/run-*)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir after a passing run")
    ap.add_argument("--kill-every", type=float, default=0,
                    help="SIGKILL the daemon about every this many seconds (default: never)")
    ap.add_argument("--tolerate-stale-cache", action="store_true",
                    help="count, instead of failing on, a tree or listing that is wrong but right "
                         "once the kernel's dentry/inode caches are dropped (a stale directory "
                         "listing or attribute cached by the kernel: a known scion bug, see "
                         "docs/testing.md)")
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--cloners", type=int, default=1)
    ap.add_argument("--snapshotters", type=int, default=1)
    ap.add_argument("--writer-mib", type=int, default=16, help="live file data per writer (MiB)")
    ap.add_argument("--max-clones", type=int, default=4)
    ap.add_argument("--max-snapshots", type=int, default=4)
    args = ap.parse_args()

    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        print(f"soak: scion binary {args.bin!r} not found or not executable (--bin, $SCION_BIN)",
              file=sys.stderr)
        return 2
    if not os.path.exists("/dev/fuse"):
        print("soak: /dev/fuse is missing", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("soak: run as root (the mount is allow_other; the test kills and remounts)",
              file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    if args.workdir:
        root, created = os.path.abspath(args.workdir), not os.path.exists(args.workdir)
        os.makedirs(root, exist_ok=True)
        if os.path.exists(join(root, "store")) or os.path.exists(join(root, "mnt")):
            print(f"soak: {root} already holds store/ or mnt/", file=sys.stderr)
            return 2
    else:
        os.makedirs("/tmp/scion-soak", exist_ok=True)
        root, created = tempfile.mkdtemp(prefix="run-", dir="/tmp/scion-soak"), True
    os.umask(0o022)     # the modes used (644, 600, 640, 755, 700) pass through it
    soak = Soak(args, seed, root, created)
    print(f"seed {seed}", flush=True)
    try:
        soak.run()
    except KeyboardInterrupt:
        soak.fail("interrupted (Ctrl-C)")
    except Exception as ex:  # noqa: BLE001
        soak.fail(exc_text(ex))
    finally:
        soak.stop.set()
        soak.cleanup()
    soak.summary()
    ok = not soak.failures
    if is_mounted(soak.mnt):
        print(f"soak: {soak.mnt} is still mounted", file=sys.stderr)
        ok = False
    if ok and not args.keep:
        soak.logf.close()
        if created:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for n in ("store", "mnt"):
                shutil.rmtree(join(root, n), ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
