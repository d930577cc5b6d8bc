"""Differential test: the same random operations on the scion mount and on a plain
reference directory must give the same results and the same tree.

  SCION_SEED            seed (default: random; printed as seed=N)
  SCION_OPS             operations of the main variant (default 3000, batches of 100)
  SCION_REMOUNT_OPS     operations of the remount variant (default 2000)
  SCION_REMOUNT_EVERY   remount (umount, check, mount) every N batches (default 3)

Replay a failure with the printed seed: SCION_SEED=N pytest tests/mount -k differential
"""

import errno
import math
import os
import random
import stat
import time

from scion_helpers import (RENAME_EXCHANGE, RENAME_NOREPLACE, compare_snapshots,
                           drop_kernel_caches, errname, punch_hole, renameat2, snapshot)

BATCH = 100
MAX_ENTRIES = 70             # keep the tree small enough to compare every batch
MAX_TOTAL_BYTES = 24 << 20   # sum of file sizes (read through FUSE at every comparison)
MAX_OFFSET = 4 << 20
MAX_WRITE = 300 << 10
NAMES = ["a", "b", "c", "d", "e", "f", "g", "h", "dir1", "dir2", "x y", "ünï", "n" * 200]
XATTR_NAMES = ["user.a", "user.b", "user.c", "user.long." + "x" * 100]
WORK = "w"


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


def get_seed():
    s = os.environ.get("SCION_SEED")
    return int(s) if s not in (None, "") else random.SystemRandom().randrange(1 << 32)


class Mismatch(AssertionError):
    pass


class Differential:
    def __init__(self, ref_root, mnt_root, seed, cubes=(), make_cube=None):
        self.rng = random.Random(seed)
        # Top-level directories that are cubes on scion's side (plain on the reference's):
        # renames and links across their edge get EXDEV there, and the cubes themselves
        # stay where they are (EBUSY), as mount points do.
        self.cubes = set(cubes)
        self.seed = seed
        self.roots = (os.path.join(ref_root, WORK), os.path.join(mnt_root, WORK))
        self.log = []
        self.mtime_valid = set()    # ref inode numbers whose last mtime change was our utime
        self.nop = 0
        self.counts = {}
        self.handles = []           # (ref fd, scion fd, name at open time)
        for r in self.roots:
            os.mkdir(r, 0o755)
            # A setgid host directory (this machine's /tmp is 2777) would give the
            # reference root its setgid bit and so every directory made below it;
            # chmod clears what mkdir inherited, so both roots start alike.
            os.chmod(r, 0o755)
        for c in self.cubes:
            os.mkdir(os.path.join(self.roots[0], c), 0o755)
            make_cube(os.path.join(self.roots[1], c))

    # ------------------------------------------------------------ tree view (ref side)
    def entries(self):
        """Sorted list of (rel, kind, size) in the reference tree ('' = work root)."""
        out = []
        stack = [""]
        ref = self.roots[0]
        while stack:
            rel = stack.pop()
            p = os.path.join(ref, rel) if rel else ref
            st = os.lstat(p)
            m = st.st_mode
            if stat.S_ISDIR(m):
                kind = "d"
                for n in os.listdir(p):
                    stack.append(os.path.join(rel, n) if rel else n)
            elif stat.S_ISREG(m):
                kind = "f"
            elif stat.S_ISLNK(m):
                kind = "l"
            else:
                kind = "p"
            out.append((rel, kind, st.st_size))
        out.sort()
        return out

    def pick(self, ents, kinds=None, allow_root=False):
        c = [e for e in ents if (kinds is None or e[1] in kinds) and (allow_root or e[0])]
        return self.rng.choice(c) if c else None

    def new_path(self, ents, existing_ok=0.2):
        """A path in a random directory: a fresh name, or (sometimes) an existing entry."""
        if self.rng.random() < existing_ok:
            e = self.pick(ents)
            if e:
                return e[0]
        d = self.pick(ents, "d", allow_root=True)[0]
        r = self.rng.random()
        if r < 0.01:
            name = "L" * 255           # longest legal name
        elif r < 0.015:
            name = "T" * 256           # ENAMETOOLONG
        else:
            name = self.rng.choice(NAMES) + str(self.rng.randrange(6))
        return os.path.join(d, name) if d else name

    # ------------------------------------------------------------ cubes
    def volume(self, rel):
        top = rel.split("/")[0]
        return top if top in self.cubes else ""

    def pinned(self, *rels):
        return any(r in self.cubes for r in rels)

    def across(self, desc, fn, a, b):
        """An operation between `a` and `b`: if they lie on two sides of a cube's edge,
        scion must refuse it (EXDEV, or what the kernel checks first: EEXIST, ENOENT...)
        and change nothing (the next comparison shows it); the reference is left alone."""
        if self.volume(a) == self.volume(b):
            return False
        self.nop += 1
        try:
            fn(self.roots[1])
            got = "ok"
        except OSError as e:
            got = errname(e.errno)
        self.log.append(f"#{self.nop} {desc} (across a cube's edge) -> scion={got}")
        self.counts["across " + got] = self.counts.get("across " + got, 0) + 1
        if got == "ok":
            raise Mismatch(f"seed={self.seed}: {desc} across a cube's edge succeeded\n" + self.tail())
        return True

    # ------------------------------------------------------------ applying an op
    def ref_ino(self, rel, follow=False):
        p = os.path.join(self.roots[0], rel) if rel else self.roots[0]
        try:
            return (os.stat if follow else os.lstat)(p).st_ino
        except OSError:
            return None

    def invalidate(self, *rels, follow=()):
        """Forget the 'mtime set by utime' status of these entries and their parents."""
        for rel in rels:
            for r in {rel, os.path.dirname(rel)}:
                ino = self.ref_ino(r)
                self.mtime_valid.discard(ino)
        for rel in follow:
            self.mtime_valid.discard(self.ref_ino(rel, follow=True))

    def both(self, desc, fn):
        """Run fn(root) on both sides; results (value or errno) must match."""
        self.nop += 1
        res = []
        for root in self.roots:
            try:
                res.append(("ok", fn(root)))
            except OSError as e:
                res.append(("err", errname(e.errno)))
        def show(r):
            v = r[1]
            if isinstance(v, bytes):
                v = f"<{len(v)} bytes {v[:8]!r}...>" if len(v) > 16 else v
            return f"{r[0]}:{v}"
        line = f"#{self.nop} {desc} -> ref={show(res[0])} scion={show(res[1])}"
        self.log.append(line)
        if res[0] != res[1]:
            raise Mismatch(f"seed={self.seed}: operation gave different results\n{line}\n"
                           + self.tail())
        return res[0]

    def tail(self, n=40):
        return "last operations:\n  " + "\n  ".join(self.log[-n:])

    def data(self, n):
        r = self.rng.random()
        if r < 0.55:
            return self.rng.randbytes(n)
        if r < 0.75:
            return bytes([self.rng.randrange(256)]) * n
        if r < 0.87:
            return bytes(n)
        pat = self.rng.randbytes(self.rng.choice([1, 7, 16, 512]))
        return (pat * (n // len(pat) + 1))[:n]

    def offset(self, size):
        r = self.rng.random()
        if r < 0.35 and size > 0:
            return self.rng.randrange(size)
        if r < 0.5:
            return size                                   # append
        if r < 0.65:                                      # around a block boundary
            b = self.rng.choice([4096, 16384, 65536, 131072, 1 << 20])
            return max(0, b * self.rng.randrange(1, 9) + self.rng.randrange(-3, 4))
        if r < 0.85:
            return self.rng.randrange(0, min(size + (1 << 20), MAX_OFFSET) + 1)
        return self.rng.randrange(0, MAX_OFFSET)          # far: holes

    def wsize(self):
        return max(1, int(2 ** self.rng.uniform(0, math.log2(MAX_WRITE))))

    # ------------------------------------------------------------ operations
    def op_create(self, ents):
        rel = self.new_path(ents, existing_ok=0.1)
        mode = self.rng.choice([0o644, 0o600, 0o755, 0o666, 0o000, 0o4755, 0o2711, 0o1777])
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        r = self.rng.random()
        if r < 0.6:
            flags |= os.O_EXCL
        elif r < 0.8:
            flags |= os.O_TRUNC
        data = self.data(self.wsize()) if self.rng.random() < 0.5 else b""
        self.invalidate(rel, follow=[rel])

        def fn(root):
            fd = os.open(os.path.join(root, rel), flags, mode)
            try:
                return os.write(fd, data) if data else 0
            finally:
                os.close(fd)
        self.both(f"create {rel!r} flags={flags:o} mode={mode:o} len={len(data)}", fn)

    def op_write(self, ents):
        e = self.pick(ents, "fl" if self.rng.random() < 0.1 else "f")
        if not e:
            return self.op_create(ents)
        rel, _, size = e
        off = self.offset(size)
        data = self.data(self.wsize())
        if e[1] == "f" and off + len(data) > size and self.total_size(ents) > MAX_TOTAL_BYTES:
            return self.op_truncate(ents, shrink=True)
        self.invalidate(rel, follow=[rel])

        def fn(root):
            fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_NONBLOCK)
            try:
                return os.pwrite(fd, data, off)
            finally:
                os.close(fd)
        self.both(f"pwrite {rel!r} off={off} len={len(data)}", fn)

    def op_append(self, ents):
        e = self.pick(ents, "f")
        if not e:
            return self.op_create(ents)
        rel = e[0]
        data = self.data(self.wsize() // 4 + 1)
        self.invalidate(rel)

        def fn(root):
            fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_APPEND)
            try:
                n = os.write(fd, data)
                return n, os.lseek(fd, 0, os.SEEK_CUR)
            finally:
                os.close(fd)
        self.both(f"append {rel!r} len={len(data)}", fn)

    def total_size(self, ents):
        return sum(s for _, k, s in ents if k == "f")

    def op_truncate(self, ents, shrink=None):
        e = self.pick(ents, "fl" if self.rng.random() < 0.1 else "f")
        if not e:
            return self.op_create(ents)
        rel, _, size = e
        if shrink is None:
            shrink = self.total_size(ents) > MAX_TOTAL_BYTES or self.rng.random() < 0.5
        if shrink:
            new = self.rng.choice([0, self.rng.randrange(size + 1), max(0, size - 1)])
        else:
            new = self.rng.choice([size + 1, size + self.rng.randrange(1 << 20),
                                   self.rng.randrange(MAX_OFFSET)])
        use_fd = self.rng.random() < 0.5
        self.invalidate(rel, follow=[rel])

        def fn(root):
            p = os.path.join(root, rel)
            if use_fd:
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                try:
                    os.ftruncate(fd, new)
                finally:
                    os.close(fd)
            else:
                os.truncate(p, new)
        self.both(f"{'f' if use_fd else ''}truncate {rel!r} {size}->{new}", fn)

    def op_rename(self, ents):
        src = self.pick(ents)
        if not src:
            return
        src_rel, kind = src[0], src[1]
        dst_rel = self.new_path(ents, existing_ok=0.4)
        if kind == "d" and (dst_rel == src_rel or dst_rel.startswith(src_rel + "/")):
            if dst_rel != src_rel:
                return      # would move a directory into its own subtree: skip
        if self.pinned(src_rel, dst_rel):
            return
        self.invalidate(src_rel, dst_rel)

        def fn(root):
            os.rename(os.path.join(root, src_rel), os.path.join(root, dst_rel))
        if self.across(f"rename {src_rel!r} -> {dst_rel!r}", fn, src_rel, dst_rel):
            return
        self.both(f"rename {src_rel!r} -> {dst_rel!r}", fn)

    def op_rename2(self, ents):
        """renameat2 with RENAME_NOREPLACE or RENAME_EXCHANGE."""
        src = self.pick(ents)
        if not src:
            return
        flags = self.rng.choice([RENAME_NOREPLACE, RENAME_EXCHANGE])
        dst_rel = self.new_path(ents, existing_ok=0.7 if flags == RENAME_EXCHANGE else 0.4)
        a, b = src[0], dst_rel
        if b.startswith(a + "/") or a.startswith(b + "/"):
            return      # one inside the other: skip (as for plain rename)
        if self.pinned(a, b):
            return
        self.invalidate(a, b)
        name = "NOREPLACE" if flags == RENAME_NOREPLACE else "EXCHANGE"
        fn = lambda root: renameat2(os.path.join(root, a), os.path.join(root, b), flags)
        if self.across(f"renameat2 {a!r} <-> {b!r} {name}", fn, a, b):
            return
        self.both(f"renameat2 {a!r} <-> {b!r} {name}", fn)

    def op_link(self, ents):
        src = self.pick(ents, "flp" if self.rng.random() < 0.9 else None)
        if not src:
            return
        dst_rel = self.new_path(ents, existing_ok=0.1)
        self.invalidate(src[0], dst_rel)

        def fn(root):
            os.link(os.path.join(root, src[0]), os.path.join(root, dst_rel),
                    follow_symlinks=False)
        if src[1] != "d" and self.across(f"link {src[0]!r} -> {dst_rel!r}", fn, src[0], dst_rel):
            return
        self.both(f"link {src[0]!r} -> {dst_rel!r}", fn)

    def op_unlink(self, ents):
        e = self.pick(ents, "flp" if self.rng.random() < 0.9 else None)
        if not e:
            return
        self.invalidate(e[0])
        self.both(f"unlink {e[0]!r}", lambda root: os.unlink(os.path.join(root, e[0])))

    def op_mkdir(self, ents):
        rel = self.new_path(ents, existing_ok=0.1)
        mode = self.rng.choice([0o755, 0o700, 0o2775, 0o1777, 0o3755, 0o000, 0o777])
        self.invalidate(rel)
        self.both(f"mkdir {rel!r} {mode:o}", lambda root: os.mkdir(os.path.join(root, rel), mode))

    def op_rmdir(self, ents):
        e = self.pick(ents, "d" if self.rng.random() < 0.9 else None)
        if not e or self.pinned(e[0]):
            return
        self.invalidate(e[0])
        self.both(f"rmdir {e[0]!r}", lambda root: os.rmdir(os.path.join(root, e[0])))

    def op_symlink(self, ents):
        rel = self.new_path(ents, existing_ok=0.1)
        r = self.rng.random()
        target = "dangling/" + str(self.rng.randrange(100))
        if r < 0.6:
            t = self.pick(ents, allow_root=True)[0] or "."
            inside = os.path.relpath(t, os.path.dirname(rel) or ".")
            # No "..": once the link or a directory above it is renamed higher up, a target
            # that climbs leads out of the tree, and chmod, chown, truncate and open follow
            # links (they once changed the mode of the host's /tmp).
            if ".." not in inside.split(os.sep):
                target = inside
        elif r >= 0.9:
            target = "long-" + "t" * self.rng.randrange(100, 3000)
        self.invalidate(rel)
        self.both(f"symlink {rel!r} -> {target[:60]!r}",
                  lambda root: os.symlink(target, os.path.join(root, rel)))

    def op_chmod(self, ents):
        e = self.pick(ents, allow_root=True)
        perm = self.rng.choice([0o644, 0o755, 0o600, 0o000, 0o777, 0o640, 0o711])
        special = self.rng.choice([0, 0, 0, stat.S_ISUID, stat.S_ISGID, stat.S_ISVTX,
                                   stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX])
        mode = perm | special
        # chmod follows symlinks (no mtime change, so no invalidation)
        self.both(f"chmod {e[0]!r} {mode:o}", lambda root: os.chmod(os.path.join(root, e[0]), mode))

    def op_chown(self, ents):
        e = self.pick(ents, allow_root=True)
        uid = self.rng.choice([0, 1, 2, 3, -1])
        gid = self.rng.choice([0, 1, 2, 3, -1])
        follow = self.rng.random() < 0.5
        self.both(f"chown {e[0]!r} {uid}:{gid} follow={follow}",
                  lambda root: os.chown(os.path.join(root, e[0]), uid, gid,
                                        follow_symlinks=follow))

    def op_utime(self, ents):
        e = self.pick(ents, allow_root=True)
        def t():
            r = self.rng.random()
            if r < 0.1:
                return 0
            if r < 0.2:
                return self.rng.randrange(1 << 33) * 10**9           # whole seconds, > 2038
            return self.rng.randrange(10**18, 4 * 10**18)             # ~2001 .. 2096, odd ns
        ns = (t(), t())
        res = self.both(f"utime {e[0]!r} ns={ns}",
                        lambda root: os.utime(os.path.join(root, e[0]) if e[0] else root,
                                              ns=ns, follow_symlinks=False))
        if res[0] == "ok":
            self.mtime_valid.add(self.ref_ino(e[0]))

    def op_setxattr(self, ents):
        e = self.pick(ents, allow_root=True)
        name = self.rng.choice(XATTR_NAMES)
        value = self.rng.randbytes(self.rng.choice([0, 1, 10, 100, self.rng.randrange(1025)]))
        flags = self.rng.choice([0, 0, 0, os.XATTR_CREATE, os.XATTR_REPLACE])
        self.both(f"setxattr {e[0]!r} {name} len={len(value)} flags={flags}",
                  lambda root: os.setxattr(os.path.join(root, e[0]) if e[0] else root,
                                           name, value, flags, follow_symlinks=False))

    def op_removexattr(self, ents):
        e = self.pick(ents, allow_root=True)
        name = self.rng.choice(XATTR_NAMES)
        if self.rng.random() < 0.7:
            try:
                have = sorted(os.listxattr(os.path.join(self.roots[0], e[0]),
                                           follow_symlinks=False))
            except OSError:
                have = []
            if have:
                name = self.rng.choice(have)
        self.both(f"removexattr {e[0]!r} {name}",
                  lambda root: os.removexattr(os.path.join(root, e[0]) if e[0] else root, name,
                                              follow_symlinks=False))

    def op_fallocate(self, ents):
        e = self.pick(ents, "f")
        if not e:
            return self.op_create(ents)
        rel, _, size = e
        off = self.rng.randrange(0, size + (256 << 10))
        ln = self.rng.randrange(1, 1 << 20)
        if off + ln > size and self.total_size(ents) > MAX_TOTAL_BYTES:
            return self.op_truncate(ents, shrink=True)
        self.invalidate(rel)

        def fn(root):
            fd = os.open(os.path.join(root, rel), os.O_WRONLY)
            try:
                os.posix_fallocate(fd, off, ln)
            finally:
                os.close(fd)
        self.both(f"posix_fallocate {rel!r} off={off} len={ln}", fn)

    def op_punch(self, ents):
        e = self.pick(ents, "f")
        if not e:
            return self.op_create(ents)
        rel, _, size = e
        off = self.rng.choice([self.rng.randrange(size + 1), 4096 * self.rng.randrange(64),
                               65536 * self.rng.randrange(16)])
        ln = self.rng.choice([1, 4096, 65536, self.rng.randrange(1, 1 << 20), size + 1])
        self.invalidate(rel)

        def fn(root):
            fd = os.open(os.path.join(root, rel), os.O_WRONLY)
            try:
                punch_hole(fd, off, ln)
            finally:
                os.close(fd)
        self.both(f"punch_hole {rel!r} off={off} len={ln} (size {size})", fn)

    def op_mkfifo(self, ents):
        rel = self.new_path(ents, existing_ok=0.1)
        mode = self.rng.choice([0o644, 0o600, 0o666])
        self.invalidate(rel)
        self.both(f"mknod fifo {rel!r} {mode:o}",
                  lambda root: os.mknod(os.path.join(root, rel), stat.S_IFIFO | mode))

    # ---- operations through file descriptors kept open across other operations
    # (writes and reads after the name was renamed, unlinked or replaced)
    def op_hopen(self, ents):
        if len(self.handles) >= 4:
            return self.op_hclose(ents)
        e = self.pick(ents, "f")
        if not e:
            return self.op_create(ents)
        flags = os.O_RDWR | (os.O_APPEND if self.rng.random() < 0.2 else 0)
        fds = []

        def fn(root):
            fd = os.open(os.path.join(root, e[0]), flags)
            fds.append(fd)
            return "opened"
        try:
            self.both(f"open {e[0]!r} flags={flags:o} -> handle", fn)
        except Mismatch:
            for fd in fds:
                os.close(fd)
            raise
        if len(fds) == 2:
            self.handles.append((fds[0], fds[1], e[0]))
        else:
            for fd in fds:
                os.close(fd)

    def _handle(self):
        return self.rng.choice(self.handles) if self.handles else None

    def op_hwrite(self, ents):
        h = self._handle()
        if not h:
            return self.op_hopen(ents)
        size = os.fstat(h[0]).st_size
        off = self.offset(size)
        data = self.data(self.wsize() // 2 + 1)
        if off + len(data) > size and self.total_size(ents) > MAX_TOTAL_BYTES:
            return self.op_hclose(ents)
        self.mtime_valid.discard(os.fstat(h[0]).st_ino)
        self.both(f"pwrite via handle of {h[2]!r} off={off} len={len(data)}",
                  lambda root: os.pwrite(h[0] if root == self.roots[0] else h[1], data, off))

    def op_hread(self, ents):
        h = self._handle()
        if not h:
            return self.op_hopen(ents)
        size = os.fstat(h[0]).st_size
        off = self.rng.randrange(0, size + 10)
        n = self.rng.randrange(1, 300 << 10)
        self.both(f"pread via handle of {h[2]!r} off={off} len={n}",
                  lambda root: os.pread(h[0] if root == self.roots[0] else h[1], n, off))

    def op_hclose(self, ents):
        h = self._handle()
        if not h:
            return self.op_hopen(ents)
        self.handles.remove(h)
        self.both(f"close handle of {h[2]!r}",
                  lambda root: os.close(h[0] if root == self.roots[0] else h[1]))

    def close_handles(self):
        for a, b, _ in self.handles:
            for fd in (a, b):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.handles = []

    OPS = [
        ("hopen", 2), ("hwrite", 3), ("hread", 2), ("hclose", 1),
        ("create", 10), ("write", 22), ("append", 4), ("truncate", 6), ("rename", 9), ("rename2", 2),
        ("link", 4), ("unlink", 6), ("mkdir", 5), ("rmdir", 4), ("symlink", 4),
        ("chmod", 4), ("chown", 3), ("utime", 5), ("setxattr", 5), ("removexattr", 3),
        ("fallocate", 3), ("punch", 3), ("mkfifo", 2),
    ]
    GROWING = {"create", "mkdir", "symlink", "mkfifo", "link"}

    def step(self):
        ents = self.entries()
        ops = self.OPS
        if len(ents) > MAX_ENTRIES:
            ops = [(n, w // 4 if n in self.GROWING else w * (3 if n in ("unlink", "rmdir") else 1))
                   for n, w in ops]
        name = self.rng.choices([n for n, _ in ops], [w for _, w in ops])[0]
        self.counts[name] = self.counts.get(name, 0) + 1
        getattr(self, "op_" + name)(ents)

    # ------------------------------------------------------------ comparison
    def compare(self, when):
        ref, mnt = self.roots
        drop_kernel_caches()
        a = snapshot(ref)
        b = snapshot(mnt)
        valid = self.mtime_valid
        diffs = compare_snapshots(a, b, root_a=ref, root_b=mnt,
                                  check_mtime=lambda rel, e: e["ino"] in valid)
        if diffs:
            raise Mismatch(f"seed={self.seed}: trees differ {when} ({len(diffs)} shown)\n  "
                           + "\n  ".join(diffs) + "\n" + self.tail())
        return len(a)


def save_log(d, name):
    os.makedirs("/tmp/scion-tests", exist_ok=True)
    path = f"/tmp/scion-tests/{name}-seed{d.seed}.log"
    with open(path, "w") as f:
        f.write("\n".join(d.log) + "\n")
    return path


def host_ancestors(path):
    """Mode and owner of every directory above `path`, up to /."""
    out = []
    p = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(p)
        out.append((p, st.st_mode, st.st_uid, st.st_gid))
        if p == "/":
            return out
        p = os.path.dirname(p)


def run_differential(m, seed, nops, remount_every=None, cubes=()):
    old_umask = os.umask(0o022)
    outside = host_ancestors(m.ref)

    def make_cube(path):
        r = m.run("cube", "create", path)
        assert r.returncode == 0, r.describe()
    d = Differential(m.ref, m.mnt, seed, cubes, make_cube)
    t0 = time.monotonic()
    nbatches = (nops + BATCH - 1) // BATCH
    try:
        for batch in range(nbatches):
            for _ in range(min(BATCH, nops - batch * BATCH)):
                d.step()
            n = d.compare(f"after batch {batch + 1}/{nbatches} (op #{d.nop})")
            if remount_every and (batch + 1) % remount_every == 0:
                d.close_handles()
                m.umount()
                m.check()
                m.mount()
                d.log.append(f"--- remount after op #{d.nop} ---")
                d.compare(f"after remount following batch {batch + 1} (op #{d.nop})")
        d.close_handles()
        if remount_every:
            m.umount()
            m.check()
            m.mount()
            d.compare("after final remount")
    except BaseException:
        print(f"seed={seed}; full op log: {save_log(d, 'differential')}")
        raise
    finally:
        d.close_handles()
        os.umask(old_umask)
    # Nothing the operations did may reach outside the two trees (a link they follow, say).
    assert host_ancestors(m.ref) == outside, f"seed={seed}: a host directory above the trees changed"
    dt = time.monotonic() - t0
    print(f"seed={seed} ops={d.nop} entries={n} time={dt:.1f}s counts={sorted(d.counts.items())}")


def test_differential(scion_mount):
    seed = get_seed()
    print(f"seed={seed}")
    run_differential(scion_mount, seed, env_int("SCION_OPS", 3000))


def test_differential_remount(scion_mount):
    seed = get_seed()
    print(f"seed={seed}")
    run_differential(scion_mount, seed, env_int("SCION_REMOUNT_OPS", 2000),
                     remount_every=env_int("SCION_REMOUNT_EVERY", 3))


def test_differential_with_cubes(scion_mount):
    """The same random operations with two cubes among the directories (plain directories
    in the reference): everything inside and outside them behaves as on the host; renames and
    links across their edges get EXDEV; remounts on the way."""
    seed = get_seed()
    print(f"seed={seed}")
    run_differential(scion_mount, seed, env_int("SCION_CUBE_OPS", 1500), remount_every=3, cubes=("cubeA", "cubeB"))
