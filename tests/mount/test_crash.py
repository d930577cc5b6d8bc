"""Crash test: a workload writes, overwrites, appends, truncates, renames and unlinks
files, always finishing each step with fsync (file and directory), and records what each
path must hold once that fsync returned. The daemon is SIGKILLed at a random moment; then
`scion check` must pass, and after a remount every path must hold what was fsynced.

  SCION_SEED            seed (default random; printed as seed=N)
  SCION_CRASH_ROUNDS    number of kill/recover rounds (default 20)
  SCION_CRASH_MAXDELAY  longest time the workload runs before the kill (default 1.2 s)
  SCION_CRASH_LONG_ROUNDS  extra rounds that run 28-40 s before the kill, so that the
                        daemon's periodic work (checkpoints) is under way (default 1)

About one round in four is "heavy": it also replaces two big files (16-96 MiB each), so
that much data is in flight when the kill lands.

Rules per path (what may be asserted after a crash):
  clean    no change since the last completed fsync: content must equal `durable`
           (None: the path must not exist)
  either   an atomic step (rename over, unlink) is in flight: `durable` or `alt`
  exists   an in-place change of a durable file is in flight / not yet fsynced: the file
           must exist (content unspecified)
  unknown  nothing can be asserted (e.g. a file being created)
"""

import errno
import os
import random
import threading
import time
import traceback

DIRS = ["a", "b"]
NFILES = 8


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


def get_seed():
    s = os.environ.get("SCION_SEED")
    return int(s) if s not in (None, "") else random.SystemRandom().randrange(1 << 32)


class Entry:
    __slots__ = ("cur", "durable", "alt", "status")

    def __init__(self):
        self.cur = None       # what the live mount holds now (None: absent)
        self.durable = None   # content guaranteed by the last completed fsync
        self.alt = None       # second acceptable content while status == "either"
        self.status = "clean"

    def describe(self):
        def d(x):
            return "absent" if x is None else f"{len(x)}B"
        return f"status={self.status} durable={d(self.durable)} alt={d(self.alt)} cur={d(self.cur)}"


def fmt_content(x):
    return "absent" if x is None else f"{len(x)} bytes"


def first_diff(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b))


class Workload:
    def __init__(self, mnt, seed):
        self.mnt = mnt
        self.base = os.path.join(mnt, "c")
        self.seed = seed
        self.state = {(d, f"f{i}"): Entry() for d in DIRS for i in range(NFILES)}
        self.big = [("a", "big0"), ("b", "big1")]
        for k in self.big:
            self.state[k] = Entry()
        self.heavy = False
        self.log = []
        self.tmpn = 0
        # per round
        self.rng = None
        self.dfd = None
        self.stop = threading.Event()
        self.kill_issued = threading.Event()
        self.error = None
        self.nops = 0

    # ------------------------------------------------------------ helpers
    def content(self):
        r = self.rng.random()
        if r < 0.05:
            n = 0
        elif r < 0.7:
            n = self.rng.randrange(1, 16 << 10)
        elif r < 0.95:
            n = self.rng.randrange(16 << 10, 256 << 10)
        else:
            n = self.rng.randrange(256 << 10, 2 << 20)
        if self.rng.random() < 0.2:
            return bytes([self.rng.randrange(256)]) * n
        return self.rng.randbytes(n)

    def write_all(self, fd, data, off=None):
        """Write data in random-sized chunks (so several requests reach the daemon)."""
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, self.rng.choice([4096, 65536, 131072, 1 << 20, 7777]))
            chunk = data[pos:pos + n]
            w = os.write(fd, chunk) if off is None else os.pwrite(fd, chunk, off + pos)
            if w != len(chunk):
                # a write cut short by the daemon's death is a failed write; one
                # before the kill is a bug
                if self.kill_issued.is_set():
                    raise OSError(errno.EIO, f"short write {w} < {len(chunk)} after the kill")
                raise AssertionError(f"short write {w} < {len(chunk)} before the kill")
            pos += w

    def begin_inplace(self, e):
        # an in-place change of a file that durably exists keeps it existing
        if (e.status == "clean" and e.durable is not None) or e.status == "exists":
            e.status = "exists"
        else:
            e.status = "unknown"

    def begin_atomic(self, e, alt):
        if e.status == "clean":
            e.status = "either"
            e.alt = alt
        elif e.status == "exists" and alt is not None:
            pass
        else:
            e.status = "unknown"

    def done(self, e, content):
        e.cur = e.durable = content
        e.alt = None
        e.status = "clean"

    def existing(self):
        return [k for k, e in self.state.items() if e.cur is not None and k not in self.big]

    def absent(self):
        return [k for k, e in self.state.items() if e.cur is None and k not in self.big]

    def names(self):
        return [k for k in self.state if k not in self.big]

    # ------------------------------------------------------------ operations
    def op_create(self):
        c = self.absent()
        if not c:
            return self.op_unlink()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        data = self.content()
        self.log.append(f"create {d}/{n} {len(data)}B")
        e.status = "unknown"
        fd = os.open(n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=self.dfd[d])
        e.cur = b""
        try:
            self.write_all(fd, data)
            e.cur = data
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(self.dfd[d])
        self.done(e, data)

    def op_overwrite(self):
        c = self.existing()
        if not c:
            return self.op_create()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        self.begin_inplace(e)
        new = bytearray(e.cur)
        fd = os.open(n, os.O_WRONLY, dir_fd=self.dfd[d])
        try:
            for _ in range(self.rng.randrange(1, 4)):
                off = self.rng.randrange(0, len(new) + (64 << 10))
                data = self.content()[: self.rng.randrange(1, 300 << 10)] or b"!"
                self.log.append(f"pwrite {d}/{n} off={off} {len(data)}B")
                self.write_all(fd, data, off)
                if off > len(new):
                    new.extend(bytes(off - len(new)))
                new[off:off + len(data)] = data
                e.cur = bytes(new)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.done(e, bytes(new))

    def op_append(self):
        c = self.existing()
        if not c:
            return self.op_create()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        self.begin_inplace(e)
        data = self.content()[: self.rng.randrange(1, 64 << 10)]
        self.log.append(f"append {d}/{n} {len(data)}B")
        fd = os.open(n, os.O_WRONLY | os.O_APPEND, dir_fd=self.dfd[d])
        try:
            self.write_all(fd, data)
            e.cur = e.cur + data
            os.fsync(fd)
        finally:
            os.close(fd)
        self.done(e, e.cur)

    def op_truncate(self):
        c = self.existing()
        if not c:
            return self.op_create()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        self.begin_inplace(e)
        size = len(e.cur)
        new = self.rng.choice([0, self.rng.randrange(size + 1), size + self.rng.randrange(1, 200000)])
        self.log.append(f"truncate {d}/{n} {size}->{new}")
        fd = os.open(n, os.O_WRONLY, dir_fd=self.dfd[d])
        try:
            os.ftruncate(fd, new)
            e.cur = e.cur[:new] + bytes(max(0, new - size))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.done(e, e.cur)

    def op_dirty_write(self):
        """A write that is never fsynced by itself: the path stays 'exists'."""
        c = self.existing()
        if not c:
            return self.op_create()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        self.begin_inplace(e)
        data = self.content()[: self.rng.randrange(1, 100 << 10)] or b"!"
        off = self.rng.randrange(0, len(e.cur) + 1)
        self.log.append(f"dirty pwrite {d}/{n} off={off} {len(data)}B (no fsync)")
        fd = os.open(n, os.O_WRONLY, dir_fd=self.dfd[d])
        try:
            self.write_all(fd, data, off)
            new = bytearray(e.cur)
            new[off:off + len(data)] = data
            e.cur = bytes(new)
        finally:
            os.close(fd)

    def op_replace(self):
        """write tmp, fsync tmp, rename tmp over target, fsync dir(s)."""
        d, n = self.rng.choice(self.names())
        self._replace(d, n, self.content())

    def op_bulk(self):
        """Atomic replace of a big file (tens of MiB)."""
        d, n = self.rng.choice(self.big)
        block = self.rng.randbytes(1 << 20)
        nblocks = self.rng.randrange(16, 97)
        data = b"".join(i.to_bytes(8, "little") + block[8:] for i in range(nblocks))
        self._replace(d, n, data)

    def _replace(self, d, n, data):
        e = self.state[(d, n)]
        td = d if self.rng.random() < 0.8 else self.rng.choice(DIRS)
        self.tmpn += 1
        tmp = f"{n}.tmp{self.tmpn}"
        self.log.append(f"replace {d}/{n} via {td}/{tmp} {len(data)}B")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=self.dfd[td])
        try:
            self.write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        # the tmp file is durable: from here on the target is old-or-new
        self.begin_atomic(e, data)
        os.rename(tmp, n, src_dir_fd=self.dfd[td], dst_dir_fd=self.dfd[d])
        e.cur = data
        os.fsync(self.dfd[d])
        if td != d:
            os.fsync(self.dfd[td])
        self.done(e, data)

    def op_unlink(self):
        c = self.existing()
        if not c:
            return self.op_create()
        d, n = self.rng.choice(c)
        e = self.state[(d, n)]
        self.log.append(f"unlink {d}/{n}")
        self.begin_atomic(e, None)
        os.unlink(n, dir_fd=self.dfd[d])
        e.cur = None
        os.fsync(self.dfd[d])
        self.done(e, None)

    def op_rename(self):
        c = self.existing()
        if not c:
            return self.op_create()
        src = self.rng.choice(c)
        dst = self.rng.choice(self.names())
        if dst == src:
            return
        es, ed = self.state[src], self.state[dst]
        self.log.append(f"rename {src[0]}/{src[1]} -> {dst[0]}/{dst[1]}")
        src_clean = es.status == "clean"
        moved = es.cur
        self.begin_atomic(es, None)
        if src_clean:
            self.begin_atomic(ed, es.durable)
        else:
            ed.status = "unknown"
        os.rename(src[1], dst[1], src_dir_fd=self.dfd[src[0]], dst_dir_fd=self.dfd[dst[0]])
        es.cur, ed.cur = None, moved
        os.fsync(self.dfd[src[0]])
        if dst[0] != src[0]:
            os.fsync(self.dfd[dst[0]])
        self.done(es, None)
        if src_clean:
            self.done(ed, moved)
        else:
            # the moved file had unsynced data: its name is durable, its content is not
            ed.cur = moved
            ed.durable = None
            ed.status = "exists"

    OPS = [("create", 3), ("overwrite", 4), ("append", 3), ("truncate", 2), ("dirty_write", 2),
           ("replace", 5), ("unlink", 2), ("rename", 3)]

    def run(self):
        ops = self.OPS + ([("bulk", 2)] if self.heavy else [])
        try:
            while not self.stop.is_set():
                name = self.rng.choices([n for n, _ in ops], [w for _, w in ops])[0]
                getattr(self, "op_" + name)()
                self.nops += 1
        except OSError as ex:
            if not self.kill_issued.is_set():
                self.error = (f"{ex!r} before the daemon was killed\n" + traceback.format_exc())
            else:
                self.log.append(f"  (stopped by the kill: {ex.strerror or ex})")
        except BaseException:  # noqa: BLE001
            self.error = traceback.format_exc()

    # ------------------------------------------------------------ after the crash
    def read_actual(self, d, n):
        p = os.path.join(self.base, d, n)
        try:
            with open(p, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def verify(self, when):
        problems = []
        actual = {}
        for (d, n), e in sorted(self.state.items()):
            a = actual[(d, n)] = self.read_actual(d, n)
            ok = True
            if e.status == "clean":
                ok = a == e.durable
            elif e.status == "either":
                ok = a == e.durable or a == e.alt
            elif e.status == "exists":
                ok = a is not None
            if not ok:
                msg = f"{d}/{n}: {e.describe()}, found {fmt_content(a)}"
                if a is not None and e.durable is not None and a != e.durable:
                    msg += f" (first difference from durable at offset {first_diff(a, e.durable)})"
                problems.append(msg)
        for d in DIRS:
            for name in os.listdir(os.path.join(self.base, d)):
                if (d, name) not in self.state and ".tmp" not in name:
                    problems.append(f"{d}/{name}: unexpected entry")
        if problems:
            raise AssertionError(
                f"seed={self.seed}: fsynced state lost {when}:\n  " + "\n  ".join(problems)
                + "\nlast operations:\n  " + "\n  ".join(self.log[-30:]))
        return actual

    def settle(self, actual):
        """After verification: make whatever survived the new durable state."""
        for d in DIRS:
            dp = os.path.join(self.base, d)
            for name in os.listdir(dp):
                if ".tmp" in name:
                    os.unlink(os.path.join(dp, name))
        for (d, n), e in self.state.items():
            if e.status != "clean":
                a = actual[(d, n)]
                if a is not None:
                    fd = os.open(os.path.join(self.base, d, n), os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                self.done(e, a)
        for d in DIRS:
            fd = os.open(os.path.join(self.base, d), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_crash_recovery(scion_mount):
    m = scion_mount
    seed = get_seed()
    print(f"seed={seed}")
    rounds = env_int("SCION_CRASH_ROUNDS", 20)
    long_rounds = env_int("SCION_CRASH_LONG_ROUNDS", 1)
    maxdelay = float(os.environ.get("SCION_CRASH_MAXDELAY", "1.2"))
    master = random.Random(seed)
    w = Workload(m.mnt, seed)
    os.mkdir(w.base)
    for d in DIRS:
        os.mkdir(os.path.join(w.base, d))
    fsync_dir(w.base)
    fsync_dir(m.mnt)

    total_ops = 0
    long_at = set(master.sample(range(rounds + long_rounds), long_rounds))
    for rnd in range(rounds + long_rounds):
        w.rng = random.Random(master.randrange(1 << 63))
        w.heavy = master.random() < 0.25
        w.stop.clear()
        w.kill_issued.clear()
        w.error = None
        w.nops = 0
        w.log.append(f"=== round {rnd} ===")
        w.dfd = {d: os.open(os.path.join(w.base, d), os.O_RDONLY | os.O_DIRECTORY) for d in DIRS}
        t = threading.Thread(target=w.run, name=f"workload-{rnd}", daemon=True)
        delay = master.choice([0.0, 0.01, 0.05]) if master.random() < 0.15 else \
            master.uniform(0.05, maxdelay)
        if rnd in long_at:
            delay = master.uniform(28, 40)
        t.start()
        time.sleep(delay)
        w.kill_issued.set()
        m.kill9()
        w.stop.set()
        t.join(60)
        assert not t.is_alive(), f"seed={seed} round {rnd}: workload thread still blocked 60 s after the kill"
        for fd in w.dfd.values():
            try:
                os.close(fd)
            except OSError:
                pass
        assert w.error is None, f"seed={seed} round {rnd}: workload failed:\n{w.error}"
        total_ops += w.nops
        w.log.append(f"--- killed after {delay:.3f}s, {w.nops} ops this round"
                     f"{' (heavy)' if w.heavy else ''} ---")
        m.check()
        m.mount()
        actual = w.verify(f"after kill in round {rnd} ({w.nops} ops, delay {delay:.3f}s"
                          f"{', heavy' if w.heavy else ''})")
        w.settle(actual)

    m.umount()
    m.check()
    m.mount()
    w.verify("after the final clean remount")
    print(f"seed={seed} rounds={rounds + long_rounds} ops={total_ops}")
