"""Users help themselves, as a property (README "Users help themselves", issue 18 item 6).

On a mount made by root for everyone, ordinary users call `scion` through the users' control
socket. The promise: through scion a user can do exactly what they could do by hand as
themselves (cp -a, ls, stat, cat, diff -r, find, rm -r, mknod), never more. This test checks it
as real Unix users (scion-alice, scion-bob, scion-mallory, made with useradd) through the
real mount:

- each round root builds a random tree: directories and files with random owners and modes
  (0700, 0711, 0755, 0640, 0600, setuid and setgid files...), POSIX ACLs naming a user,
  character devices (1:3 as /dev/null, 1:11 as /dev/kmsg; an image with its /dev), FIFOs and
  symlinks; root takes snapshots and clones of its own, and gives some of its clones to a user
  (chown of the top);
- then random users ask random requests, on paths they may and may not reach: snapshot,
  destroy (a path or @ID), clone, rollback, restore, versions, list, diff, scan;
- the oracle is what the same user can do by hand, asked as that user through the mount
  (`su USER`): a small probe (stat, open, ls and a find-like walk), `cp -a` and `diff -r`.
  Who made each clone and snapshot is recorded as the test goes (destroy and rollback are
  for what the user made, never for root's or another user's, even with the top theirs).

Every difference is collected and the test fails at the end with them (all of them in
/tmp/scion-tests/selfservice-seedN.log), each naming seed, round, user, request and what the
oracle expected. Afterwards the store must pass `scion check`.

    python3 -m pytest -q tests/mount/test_selfservice_property.py          # ~40 s on 2 cores
    SCION_SEED=7 python3 -m pytest -q tests/mount/test_selfservice_property.py   # another seed
    SCION_SELFSERVICE_ROUNDS=60 SCION_TEST_TIMEOUT=3000 \\
        python3 -m pytest -q tests/mount/test_selfservice_property.py      # ~5 min

  SCION_SEED                  seed (default 186, fixed; printed as seed=N)
  SCION_SELFSERVICE_ROUNDS    rounds, each a new random tree (default 8)
  SCION_SELFSERVICE_REQUESTS  random requests per round (default 45)
  (a run much longer than the default needs conftest's per-test watchdog, SCION_TEST_TIMEOUT
  (300 s), raised too)
"""

import hashlib
import json
import os
import pwd
import random
import re
import shlex
import stat
import struct
import subprocess
import sys
import time

import pytest

from conftest import BASE, CMD_TIMEOUT, PLAIN, copy_scion
from test_safety import ensure_user

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0,
                                reason="needs root to mount for everyone and make users")

USERS = ("scion-alice", "scion-bob", "scion-mallory")
DEFAULT_SEED = 186


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


# --------------------------------------------------------------------------------------------
# The by-hand oracle: a probe run as the user (through `su`), answering for many paths at once
# what that user's own system calls give. JSON in on stdin, JSON out.

PROBE = r'''
import errno, hashlib, json, os, stat, sys

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))

def lstat(p):
    try:
        s = os.lstat(p)
    except OSError as e:
        return {"err": err(e)}
    return {"err": None, "uid": s.st_uid, "mode": s.st_mode, "size": s.st_size}

def opens(p):
    # open(2) for reading as cat would (O_NONBLOCK: a FIFO never blocks); None if it opens
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY))
    except OSError as e:
        return err(e)
    return None

def listable(p):
    # ls and cd: reading the directory, and searching it (p/. is looked up through p)
    try:
        os.listdir(p)
        os.lstat(os.path.join(p, "."))
    except OSError:
        return False
    return True

def wx(p):
    # may create entries in p: write and search permission (what mkdir in it needs)
    try:
        os.lstat(os.path.join(p, "."))
    except OSError:
        return False
    return os.access(p, os.W_OK | os.X_OK)

KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
         (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "chardev"))

def kind(m):
    return next((k for f, k in KINDS if f(m)), "other")

def walk(root):
    # What `find ROOT` and `sha256sum` on every file it lists give this user: every entry of
    # each directory they may read and search; the hash of each regular file they may read.
    out = {"root_ok": listable(root), "trouble": False, "visible": {}, "readable": {}, "unreadable": [],
           "unsearchable": []}
    if not out["root_ok"]:
        out["trouble"] = True
        return out
    todo = [""]
    while todo:
        rel = todo.pop()
        for name in sorted(os.listdir(os.path.join(root, rel))):
            r = rel + "/" + name if rel else name
            p = os.path.join(root, r)
            try:
                m = os.lstat(p).st_mode
            except OSError:
                out["trouble"] = True
                continue
            out["visible"][r] = kind(m)
            if stat.S_ISDIR(m):
                if listable(p):
                    todo.append(r)
                else:
                    out["unsearchable"].append(r)
                    out["trouble"] = True
            elif stat.S_ISREG(m):
                try:
                    with open(p, "rb") as f:
                        out["readable"][r] = hashlib.sha256(f.read()).hexdigest()
                except OSError:
                    out["unreadable"].append(r)
                    out["trouble"] = True
    return out

OPS = {"lstat": lstat, "open": opens, "listable": listable, "wx": wx, "walk": walk}
json.dump([OPS[op](p) for op, p in json.load(sys.stdin)], sys.stdout)
'''


# --------------------------------------------------------------------------------------------
# POSIX ACLs, written as the raw xattr (as test_acl.py does): no need for setfacl.

USER_OBJ, USER_E, GROUP_OBJ, MASK, OTHER = 1, 2, 4, 0x10, 0x20
NOID = 0xFFFFFFFF


def acl_granting(mode, uid, perm):
    """An access ACL equal to `mode` plus a named entry giving user `uid` the rights `perm`;
    the mask (the group bits) lets it through."""
    g = (mode >> 3) & 7
    entries = [(USER_OBJ, (mode >> 6) & 7, NOID), (USER_E, perm, uid), (GROUP_OBJ, g, NOID),
               (MASK, g | perm, NOID), (OTHER, mode & 7, NOID)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


# --------------------------------------------------------------------------------------------
# Trees as root sees them.

def entries(top):
    """[(rel, lstat)] of `top` ("" for itself) and everything below it, as root, without
    following symlinks; `.snapshot` is hidden and so left out."""
    out = [("", os.lstat(top))]
    todo = [""] if stat.S_ISDIR(out[0][1].st_mode) else []
    while todo:
        rel = todo.pop()
        for name in sorted(os.listdir(os.path.join(top, rel))):
            r = f"{rel}/{name}" if rel else name
            st = os.lstat(os.path.join(top, r))
            out.append((r, st))
            if stat.S_ISDIR(st.st_mode):
                todo.append(r)
    return out


def content(path, st):
    """What a file holds (its bytes' hash), or a symlink's target."""
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path)
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return None


def at(top, rel):
    """The path of `rel` (as entries() names it) below `top`."""
    return f"{top}/{rel}" if rel else top


def in_snapshot(path):
    """A snapshot's top or anything in it: read-only."""
    return "/.snapshot/" in path + "/"


def live_path(path):
    """The live directory a path into a snapshot was taken of (`d/.snapshot/s/x` -> `d/x`)."""
    return re.sub(r"/\.snapshot/[^/]+", "", path)


def frozen(path):
    """Inside a snapshot, below its top: a clone listed there is part of the snapshot."""
    parts = path.split("/")
    return any(x == ".snapshot" and i + 2 < len(parts) for i, x in enumerate(parts))


def below(path, top):
    return path == top or path.startswith(top + "/")


def tail(s, n=1500):
    s = s.strip()
    return s if len(s) <= n else "..." + s[-n:]


# --------------------------------------------------------------------------------------------

class SelfService:
    """The mount, the users, who made which clone and snapshot, and the requests with their
    oracles. Failures are collected in self.failures."""

    def __init__(self, m, seed):
        self.m, self.M, self.seed = m, m.mnt, seed
        self.rng = random.Random(seed)
        self.uid = {u: ensure_user(u) for u in USERS}
        self.gid = {u: pwd.getpwnam(u).pw_gid for u in USERS}
        self.name = {v: k for k, v in self.uid.items()}
        self.name[0] = "root"
        os.chmod(m.root, 0o755)                    # the users reach the mount point
        self.exe = copy_scion(m.root)              # and a scion they may run
        self.probe_py = os.path.join(m.root, "probe.py")
        with open(self.probe_py, "w") as f:
            f.write(PROBE)
        os.chmod(self.probe_py, 0o644)
        self.python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                            if os.path.exists(p)), sys.executable)
        # Each user's own place outside the mount for their `cp -a` of what they restore.
        os.makedirs(os.path.join(m.root, "scratch"), mode=0o755)
        self.scratch = {}
        for u in USERS:
            d = os.path.join(m.root, "scratch", u)
            os.mkdir(d, 0o700)
            os.chown(d, self.uid[u], self.gid[u])
            self.scratch[u] = d
        self.made_by = {}    # clone or snapshot id -> uid of who made it (0: root)
        self.rows = {}       # id -> row of root's `scion list --json`
        self.had_nested = set()  # clones that ever held clones or snapshots of their subdirectories
        self.carried = set()     # directories that have or had snapshots (a clone copies the record)
        self.failures = []
        self.failed = {}     # verb -> differences found in its requests
        self.counts = {}
        self.round = None
        self.serial = 0
        self.contents = [os.urandom(n) for n in (0, 17, 900, 4096, 9000)]

    # ---------------------------------------------------------------- running things
    def as_user(self, user, argv, stdin=None):
        return subprocess.run(["su", user, "-s", "/bin/sh", "-c", shlex.join(argv)], input=stdin,
                              capture_output=True, text=True, errors="replace", timeout=CMD_TIMEOUT,
                              cwd=self.m.root)

    def scion(self, user, *args):
        return self.as_user(user, [self.exe, *args])

    def probe(self, user, queries):
        """The answers of the probe, run as `user`, to [(op, path)]."""
        r = self.as_user(user, [self.python, self.probe_py], stdin=json.dumps(queries))
        if r.returncode != 0:
            pytest.fail(f"the probe failed as {user}: {r.stderr}")
        return json.loads(r.stdout)

    def root_scion(self, *args):
        r = self.m.run(*args)
        assert r.returncode == 0, r.describe()
        return r.stdout

    def next_name(self, prefix):
        self.serial += 1
        return f"{prefix}{self.serial}"

    def fp(self, store_path):
        return self.M + store_path

    def sp(self, full):
        return full[len(self.M):] or "/"

    def show(self, args):
        return "scion " + " ".join(str(a).replace(self.M, "MNT") for a in args)

    # ---------------------------------------------------------------- who made what
    def sync(self, maker):
        """Root's listing again; ids new since the last one were made by `maker`. Returns
        (new ids, ids gone)."""
        out = self.root_scion("list", "--json", self.M)
        rows = {r["id"]: r for r in map(json.loads, out.splitlines())}
        new = sorted(set(rows) - set(self.rows))
        gone = sorted(set(self.rows) - set(rows))
        was = {self.rows[g]["path"]: g for g in gone}
        for i in new:
            # (a clone rolled back is listed again under a new id: made by whoever made it)
            old = was.get(rows[i]["path"])
            self.made_by[i] = self.made_by.get(old, maker) if old else maker
            if old in self.had_nested:
                self.had_nested.add(i)
        self.rows = rows
        # A rollback is refused while a clone has (or had, when the snapshot was taken)
        # snapshots of its subdirectories or clones in it: remembered, as the clones that ever
        # held others, and the directories that ever had snapshots (`carried`).
        for x in map(rows.get, new):
            if x["kind"] == "snapshot" and not frozen(x["path"]):
                self.carried.add(x["origin"])
            for i, r in rows.items():
                inside = x["path"][len(r["path"]) + 1:]
                if r["kind"] == "clone" and x["path"].startswith(r["path"] + "/") and \
                        not (inside.startswith(".snapshot/") and inside.count("/") == 1):
                    self.had_nested.add(i)
        return new, gone

    def row_at(self, full):
        return next((r for r in self.rows.values() if r["path"] == self.sp(full)), None)

    def held_by(self, row):
        """Ids of the clones and snapshots a destroy of `row` would take with it: what lies
        below it (nested clones, snapshots of it and of its directories)."""
        return [i for i, r in self.rows.items() if r["path"].startswith(row["path"] + "/")]

    def snapshots_of(self, row):
        pre = row["path"] + "/.snapshot/"
        return [r["path"][len(pre):] for r in self.rows.values()
                if r["kind"] == "snapshot" and r["path"].startswith(pre) and "/" not in r["path"][len(pre):]]

    def maker(self, row):
        return self.name.get(self.made_by.get(row["id"]), "?")

    # ---------------------------------------------------------------- verdicts
    def fail(self, user, args, why, r=None):
        msg = (f"seed={self.seed} round={self.round} user={user}\n  request: {self.show(args)}\n"
               f"  oracle: {why}")
        if r is not None:
            msg += f"\n  got: exit {r.returncode}"
            if r.stdout.strip():
                msg += f"\n  stdout: {tail(r.stdout)}"
            if r.stderr.strip():
                msg += f"\n  stderr: {tail(r.stderr)}"
        self.failures.append(msg)
        self.failed[args[0]] = self.failed.get(args[0], 0) + 1

    def outcome(self, user, args, r, allowed, why):
        """Success where the oracle allows, refusal where it does not. True if so."""
        key = (args[0], "allowed" if allowed else "refused")
        self.counts[key] = self.counts.get(key, 0) + 1
        if allowed and r.returncode != 0:
            self.fail(user, args, f"expected success: {why}", r)
            return False
        if not allowed and r.returncode == 0:
            self.fail(user, args, f"expected refusal: {why}", r)
            return False
        return True

    # ---------------------------------------------------------------- the random tree
    def build_round(self, base):
        """A random tree at `base` made by root, and root's own clones and snapshots."""
        rng = self.rng
        owners = [0] + [self.uid[u] for u in USERS]
        gid_of = {0: 0, **{self.uid[u]: self.gid[u] for u in USERS}}

        def own(path, uid, mode, link=False):
            # chown first: a chown clears setuid and setgid bits
            os.lchown(path, uid, gid_of[uid])
            if not link:
                os.chmod(path, mode)

        os.makedirs(f"{base}/home")
        os.chmod(base, 0o755)
        os.chmod(f"{base}/home", 0o755)
        os.mkdir(f"{base}/pub")
        os.chmod(f"{base}/pub", 0o1777)            # anyone may make things here (sticky)
        os.mkdir(f"{base}/srv", 0o755)
        # An image a root filesystem is made from (README's /srv/images/base), with its /dev.
        image = f"{base}/srv/image"
        os.makedirs(f"{image}/dev", 0o755)
        os.mknod(f"{image}/dev/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.chmod(f"{image}/dev/null", 0o666)
        os.mknod(f"{image}/dev/kmsg", stat.S_IFCHR | 0o600, os.makedev(1, 11))
        os.chmod(f"{image}/dev/kmsg", rng.choice([0o600, 0o644, 0o660]))
        dirs = [f"{base}/pub", f"{base}/srv", image, f"{image}/dev"]
        modes = {}                                 # directories get their modes at the end
        for u in USERS:
            h = f"{base}/home/{u}"
            os.mkdir(h)
            own(h, self.uid[u], 0o755)
            modes[h] = rng.choice([0o700, 0o711, 0o750, 0o755, 0o755])
            dirs.append(h)
        for i in range(rng.randint(22, 32)):
            parent = rng.choice(dirs)
            uid = rng.choice(owners)
            kind = rng.choices(["dir", "file", "setid", "dev", "fifo", "link"], [5, 8, 2, 1, 1, 2])[0]
            if kind == "dir":
                p = f"{parent}/d{i}"
                os.mkdir(p)
                os.lchown(p, uid, gid_of[uid])
                modes[p] = rng.choice([0o755, 0o755, 0o711, 0o700, 0o750, 0o777, 0o555, 0o744])
                dirs.append(p)
            elif kind in ("file", "setid"):
                p = f"{parent}/f{i}"
                with open(p, "wb") as f:
                    f.write(rng.choice(self.contents))
                mode = (rng.choice([0o644, 0o644, 0o600, 0o640, 0o444, 0o755, 0o700, 0o000]) if kind == "file"
                        else rng.choice([0o4755, 0o2755, 0o6755, 0o4711, 0o2750]))
                own(p, uid, mode)
            elif kind == "dev":
                # /dev/null's and /dev/kmsg's numbers: this mount does not say nodev
                major_minor = rng.choice([(1, 3), (1, 11)])
                p = f"{parent}/{'null' if major_minor == (1, 3) else 'kmsg'}{i}"
                os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(*major_minor))
                own(p, rng.choice([0, 0, uid]), rng.choice([0o666, 0o644, 0o600, 0o660, 0o620]))
            elif kind == "fifo":
                p = f"{parent}/p{i}"
                os.mkfifo(p)
                own(p, uid, rng.choice([0o644, 0o600, 0o666]))
            else:
                p = f"{parent}/l{i}"
                target = rng.choice(["f1", "../f2", "nowhere", "/etc/shadow", f"{base}/srv",
                                     rng.choice(dirs)])
                os.symlink(target, p)
                own(p, uid, 0, link=True)
            # A few ACLs: a named user may read what the mode alone keeps from them.
            if kind in ("dir", "file") and rng.random() < 0.15:
                who = self.uid[rng.choice(USERS)]
                if kind == "dir":
                    os.setxattr(p, "system.posix_acl_access", acl_granting(modes[p], who, 5))
                    modes[p] = None                 # the ACL set the mode already
                else:
                    mode = os.lstat(p).st_mode & 0o777
                    os.setxattr(p, "system.posix_acl_access", acl_granting(mode, who, 4))
        for p, mode in modes.items():
            if mode is not None:
                os.chmod(p, mode)
        # Root's own: snapshots of some directories (users' included), a clone, and a clone
        # given to a user (its top chowned to them), with a snapshot to roll it back to.
        live = [p for p in dirs if p != f"{base}/pub"]
        for d in [image] + rng.sample(live, 2):
            self.root_scion("snapshot", "--name", self.next_name("rs"), d)
        self.sync(0)
        dst = f"{base}/srv/{self.next_name('rootclone')}"
        src = rng.choice([d for d in live if not below(dst, d)])
        self.root_scion("clone", src, dst)
        self.carry(src, dst)
        u = rng.choice(USERS)
        given = f"{base}/home/{u}/{self.next_name('given')}"
        src = rng.choice([d for d in live if not below(given, d)])
        self.root_scion("clone", src, given)
        self.carry(src, given)
        os.chown(given, self.uid[u], self.gid[u])
        os.chmod(given, 0o755)
        self.root_scion("snapshot", "--name", self.next_name("rs"), given)
        self.sync(0)

    # ---------------------------------------------------------------- what to ask about
    def pool(self, base):
        """Paths to pick from: live directories and other entries below `base`, and the
        directories and entries of its snapshots."""
        p = {"dirs": [], "others": [], "snap_dirs": [], "snap_all": []}
        for rel, st in entries(base):
            path = at(base, rel)
            p["dirs" if stat.S_ISDIR(st.st_mode) else "others"].append((path, st))
        for r in self.rows.values():
            if r["kind"] == "snapshot" and below(r["path"], self.sp(base)):
                top = self.fp(r["path"])
                for rel, st in entries(top):
                    path = at(top, rel)
                    p["snap_all"].append(path)
                    if stat.S_ISDIR(st.st_mode):
                        p["snap_dirs"].append(path)
        return p

    def pick_dir(self, p, user=None, own_bias=0.0):
        """A live directory; with `own_bias`, likelier one of `user`'s (or the shared one)."""
        dirs = p["dirs"]
        if user and self.rng.random() < own_bias:
            mine = [d for d, st in dirs if st.st_uid == self.uid[user] or d.endswith("/pub")]
            if mine:
                return self.rng.choice(mine)
        return self.rng.choice(dirs)[0]

    def pick_row(self, kinds, user=None, own_bias=0.0, base=None, want=None):
        """A clone or snapshot from root's listing, of this round's tree if there is one;
        with `own_bias`, likelier one `user` made (and, with `want`, one that passes it)."""
        rows = [r for r in self.rows.values() if r["kind"] in kinds and not r["orphaned"]]
        if base:
            rows = [r for r in rows if below(r["path"], self.sp(base))] or rows
        if user and self.rng.random() < own_bias:
            mine = [r for r in rows if self.made_by.get(r["id"]) == self.uid[user] and not frozen(r["path"])]
            rows = [r for r in mine if want is None or want(r)] or mine or rows
        return self.rng.choice(rows) if rows else None

    # ---------------------------------------------------------------- requests
    def req_clone(self, user, base, p, src=None, parent=None):
        """Returns DST if the clone was made."""
        rng = self.rng
        if src is None:
            src = rng.choice(p["snap_dirs"]) if p["snap_dirs"] and rng.random() < 0.3 else self.pick_dir(p)
        for _ in range(20):
            parent = parent or (rng.choice(p["snap_dirs"]) if p["snap_dirs"] and rng.random() < 0.08
                                else self.pick_dir(p, user, 0.6))
            if not below(parent, src):
                break
            parent = None
        else:
            return None
        dst = f"{parent}/{self.next_name('c')}"
        args = ["clone", src, dst]
        src_ok, dst_ok = self.probe(user, [("listable", src), ("wx", parent)])
        dst_ok = dst_ok and not in_snapshot(parent)
        allowed = src_ok and dst_ok
        why = (f"as cp -a SRC DST by hand: {user} may read and search SRC: {src_ok}; "
               f"may write in DST's directory: {dst_ok}")
        r = self.scion(user, *args)
        new, _ = self.sync(self.uid[user])
        self.outcome(user, args, r, allowed, why)
        if r.returncode != 0:
            if os.path.lexists(dst) or new:
                self.fail(user, args, f"a refused clone leaves nothing (found: {os.path.lexists(dst)}, new ids {new})", r)
            return None
        self.check_clone(user, args, src, dst)
        self.carry(src, dst)
        return dst

    def carry(self, src, dst):
        """A clone copies its source's record of the snapshots its subdirectories had."""
        s = live_path(self.sp(src))
        for t in [t for t in self.carried if t.startswith(s + "/")]:
            self.carried.add(self.sp(dst) + t[len(s):])

    def ever_held(self, row):
        """Whether clone `row` holds or held clones, or snapshots of its subdirectories."""
        return row["id"] in self.had_nested or any(t.startswith(row["path"] + "/") for t in self.carried)

    def check_clone(self, user, args, src, dst):
        """What a user's clone gives them, against what they had at the source."""
        uid = self.uid[user]
        got = entries(dst)
        at_src = dict(entries(src))
        if {rel for rel, _ in got} != set(at_src):
            self.fail(user, args, f"the clone holds what SRC holds: {sorted(set(at_src) ^ {r for r, _ in got})[:10]}")
            return
        top = got[0][1]
        if top.st_uid != uid:
            self.fail(user, args, f"(c) the clone's top is the user's, as their cp -a makes it; "
                                  f"it is owned by {self.name.get(top.st_uid, top.st_uid)}")
        opened = [(rel, st) for rel, st in got if stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)]
        qs = []
        for rel, _ in opened:
            qs += [("open", at(dst, rel)), ("open", at(src, rel))]
        answers = self.probe(user, qs) if qs else []
        self.check_setid(user, args, got, at_src, "the clone")
        for k, (rel, st) in enumerate(opened):
            in_clone, at_source = answers[2 * k] is None, answers[2 * k + 1] is None
            if stat.S_ISCHR(st.st_mode):
                if in_clone and not at_source:
                    self.fail(user, args, f"(a) device {rel} ({os.major(st.st_rdev)}:{os.minor(st.st_rdev)}) "
                                          f"opens in the clone, not at the source")
                if st.st_uid == uid and st.st_rdev and at_src[rel].st_uid != uid:
                    self.fail(user, args, f"(a) device {rel} ({os.major(st.st_rdev)}:{os.minor(st.st_rdev)}) "
                                          f"is theirs in the clone (they may chmod it), not at the source")
            elif in_clone and not at_source:
                self.fail(user, args, f"(d) {rel} was unreadable to them at the source "
                                      f"({answers[2 * k + 1]}) and reads in the clone")

    def check_setid(self, user, args, got, before, what):
        """(b) In what a user made, others' files are not setuid or setgid; their own keep
        the bits they showed (`before`: rel -> lstat), as their cp -a keeps them."""
        uid = self.uid[user]
        for rel, st in got:
            if stat.S_ISDIR(st.st_mode):
                continue
            bits = st.st_mode & 0o6000
            if bits and st.st_uid != uid:
                self.fail(user, args, f"(b) {rel} is setuid/setgid ({oct(st.st_mode & 0o7777)}) in {what} "
                                      f"and not theirs (owner {self.name.get(st.st_uid, st.st_uid)})")
            elif st.st_uid == uid and rel in before and before[rel].st_mode & 0o6000 & ~bits:
                self.fail(user, args, f"(b) {rel} is theirs: its setuid/setgid bits stay as they were "
                                      f"({oct(before[rel].st_mode & 0o7777)}), not {oct(st.st_mode & 0o7777)} in {what}")

    def req_snapshot(self, user, base, p, d=None):
        """Returns the snapshot's name if it was taken."""
        rng = self.rng
        x = rng.random()
        if d is not None:
            pass
        elif x < 0.1 and p["snap_dirs"]:
            d = rng.choice(p["snap_dirs"])
        elif x < 0.4 and self.pick_row(("clone",), base=base):
            d = self.fp(self.pick_row(("clone",), user, 0.7, base)["path"])
        else:
            d = self.pick_dir(p, user, 0.5)
        name = self.next_name("s")
        args = ["snapshot", "--name", name, d]
        (st,) = self.probe(user, [("lstat", d)])
        reachable = st["err"] is None
        clone = self.row_at(d)
        clone = clone if clone and clone["kind"] == "clone" else None
        theirs = reachable and st["uid"] == self.uid[user]
        made_for_them = clone is not None and self.made_by.get(clone["id"]) == self.uid[user]
        allowed = (reachable and not in_snapshot(d)
                   and ((theirs and (clone is None or made_for_them)) or made_for_them))
        why = (f"a snapshot of a directory they own, not a clone another made: reachable: {reachable} "
               f"({st['err']}), owner: {self.name.get(st.get('uid'), st.get('uid'))}, "
               f"clone made by: {self.maker(clone) if clone else '-'}, in a snapshot: {in_snapshot(d)}")
        r = self.scion(user, *args)
        new, _ = self.sync(self.uid[user])
        if not self.outcome(user, args, r, allowed, why):
            return None
        if r.returncode == 0:
            self.check_snapshot(user, args, d, f"{d}/.snapshot/{name}")
        if r.returncode != 0 and new:
            self.fail(user, args, f"a refused snapshot makes nothing: new ids {new}", r)
        return name if r.returncode == 0 else None

    def check_snapshot(self, user, args, d, snap):
        """A user's snapshot holds what DIR holds, made for them: the setuid and setgid bits
        of files they do not own hidden, nothing else changed."""
        if not os.path.isdir(snap):
            self.fail(user, args, "the snapshot shows in DIR/.snapshot")
            return
        live, got = dict(entries(d)), dict(entries(snap))
        if set(live) != set(got):
            self.fail(user, args, f"the snapshot holds what DIR holds: {sorted(set(live) ^ set(got))[:10]}")
            return
        for rel, a in live.items():
            b = got[rel]
            want = a.st_mode
            if not stat.S_ISDIR(a.st_mode) and a.st_uid != self.uid[user]:
                want &= ~0o6000
            if (b.st_mode, b.st_uid, b.st_gid) != (want, a.st_uid, a.st_gid) \
                    or content(at(snap, rel), b) != content(at(d, rel), a):
                self.fail(user, args, f"{rel or '.'} in their snapshot: mode/uid/gid {oct(b.st_mode)}/{b.st_uid}/"
                                      f"{b.st_gid}, expected {oct(want)}/{a.st_uid}/{a.st_gid} (live "
                                      f"{oct(a.st_mode)}: only others' setuid/setgid bits hidden)")

    def req_restore(self, user, base, p):
        if not p["snap_all"]:
            return
        # Half the time one entry rather than a tree; device nodes, which a user's cp -a cannot
        # make, often.
        dirs = set(p["snap_dirs"])
        singles = [x for x in p["snap_all"] if x not in dirs]
        devices = [x for x in singles if stat.S_ISCHR(os.lstat(x).st_mode)]
        x = self.rng.random()
        src = self.rng.choice(devices if devices and x < 0.15 else
                              singles if singles and x < 0.5 else p["snap_all"])
        parent = self.pick_dir(p, user, 0.6)
        dst = f"{parent}/{self.next_name('r')}"
        args = ["restore", dst, "--from", src]
        dst_ok, w = self.probe(user, [("wx", parent), ("walk", src)])
        copy = os.path.join(self.scratch[user], "copy")
        subprocess.run(["rm", "-rf", copy], check=True)
        cp = self.as_user(user, ["cp", "-a", src, copy])
        # cp -a gets through an empty directory it may read but not search; scion asks for
        # both (README), as cp -a does of every directory with something in it.
        unsearchable = os.path.isdir(src) and not os.path.islink(src) and (not w["root_ok"] or w["unsearchable"])
        allowed = dst_ok and cp.returncode == 0 and not unsearchable
        why = (f"as their own cp -a SRC DST: may write in DST's directory: {dst_ok}; "
               f"cp -a as {user}: exit {cp.returncode} {tail(cp.stderr, 300)}; "
               f"directories they may read but not search: {unsearchable}")
        r = self.scion(user, *args)
        if not self.outcome(user, args, r, allowed, why):
            if r.returncode == 0 and cp.returncode != 0 and os.path.lexists(dst):
                self.report_devices(user, args, dst)
            return
        if r.returncode != 0:
            left = [n for n in os.listdir(parent) if n.split(".scion-restore")[0] == os.path.basename(dst)]
            if left:
                self.fail(user, args, f"a refused restore leaves nothing at DST; found {left}: "
                                      f"{[rel for rel, _ in entries(dst)][:8] if os.path.lexists(dst) else ''}", r)
            return
        self.compare_restored(user, args, src, dst, copy)

    def report_devices(self, user, args, dst):
        """Says which device nodes a wrongly allowed restore gave the user."""
        for rel, st in entries(dst) if os.path.isdir(dst) else [("", os.lstat(dst))]:
            if stat.S_ISCHR(st.st_mode):
                self.fail(user, args, f"the restore made device {rel or '.'} "
                                      f"({os.major(st.st_rdev)}:{os.minor(st.st_rdev)}) owned by "
                                      f"{self.name.get(st.st_uid, st.st_uid)} mode {oct(st.st_mode & 0o7777)}: "
                                      f"users cannot mknod devices")

    def compare_restored(self, user, args, src, dst, copy):
        """The restore against the user's own `cp -a` of the same source."""
        uid = self.uid[user]
        at_src = dict(entries(src))
        got, want = dict(entries(dst)), dict(entries(copy))
        if stat.S_IFMT(got[""].st_mode) != stat.S_IFMT(want[""].st_mode):
            self.fail(user, args, f"DST is what cp -a makes of SRC: kind {oct(stat.S_IFMT(got[''].st_mode))}, "
                                  f"cp -a made {oct(stat.S_IFMT(want[''].st_mode))} (a symlink is copied, not followed)")
            return
        if set(got) != set(want):
            self.fail(user, args, f"restore holds what cp -a copied; differ: {sorted(set(got) ^ set(want))[:10]}")
            return
        for rel in sorted(got):
            g, w = got[rel], want[rel]
            where = rel or "."
            bits = 0o777 if stat.S_ISDIR(g.st_mode) else 0o7777   # cp clears a foreign sticky dir's bit
            if stat.S_IFMT(g.st_mode) != stat.S_IFMT(w.st_mode):
                self.fail(user, args, f"{where}: kind {oct(stat.S_IFMT(g.st_mode))}, cp -a made {oct(stat.S_IFMT(w.st_mode))}")
                continue
            if g.st_uid != uid:
                self.fail(user, args, f"{where}: a restored file is theirs; owner {self.name.get(g.st_uid, g.st_uid)}")
            if g.st_gid != w.st_gid:
                self.fail(user, args, f"{where}: group {g.st_gid}, cp -a gave {w.st_gid}")
            if not stat.S_ISLNK(g.st_mode) and g.st_mode & bits != w.st_mode & bits:
                self.fail(user, args, f"{where}: mode {oct(g.st_mode & 0o7777)}, cp -a gave {oct(w.st_mode & 0o7777)}")
            if not stat.S_ISDIR(g.st_mode) and g.st_mode & 0o6000 and at_src[rel].st_uid != uid:
                self.fail(user, args, f"{where}: setuid/setgid kept on a file that was not theirs")
            if content(at(dst, rel), g) != content(at(copy, rel), w):
                self.fail(user, args, f"{where}: content differs from cp -a's copy")
            if stat.S_ISREG(g.st_mode) and g.st_mtime_ns != w.st_mtime_ns:
                self.fail(user, args, f"{where}: mtime {g.st_mtime_ns}, cp -a kept {w.st_mtime_ns}")

    def req_destroy(self, user, base, p):
        rng = self.rng
        x = rng.random()
        recursive = False
        if x < 0.2:
            target = self.pick_dir(p, user, 0.5)        # most often not a clone at all
            row = self.row_at(target)
            args = ["destroy", target]
        else:
            row = self.pick_row(("clone", "snapshot"), user, 0.6, base)
            if row is None:
                return
            target = self.fp(row["path"])
            recursive = rng.random() < 0.3
            args = (["destroy", f"@{row['id']}", "--mount", self.M] if x < 0.4
                    else ["destroy", target])
            if recursive:
                args.insert(1, "-r")
        (st,) = self.probe(user, [("lstat", target)])
        reachable = st["err"] is None
        held = self.held_by(row) if row else []
        mine = row is not None and self.made_by.get(row["id"]) == self.uid[user]
        others_held = [h for h in held if self.made_by.get(h) != self.uid[user]]
        stuck = row is not None and frozen(row["path"])
        allowed = (row is not None and not stuck and reachable and mine
                   and (not held or (recursive and not others_held)))
        why = (f"a clone or snapshot they made, reachable, not inside a snapshot ({stuck}): is one: {row is not None}, "
               f"made by: {self.maker(row) if row else '-'}, reachable: {reachable} ({st['err']}), "
               f"holds: {[self.rows[h]['path'] for h in held]} (theirs: {not others_held}), -r: {recursive}")
        r = self.scion(user, *args)
        _, gone = self.sync(self.uid[user])
        if not self.outcome(user, args, r, allowed, why):
            return
        expect_gone = sorted(([row["id"]] + (held if recursive else [])) if r.returncode == 0 else [])
        if gone != expect_gone:
            self.fail(user, args, f"ids gone: {gone}, expected {expect_gone}", r)
        if (r.returncode == 0) == os.path.lexists(target):
            self.fail(user, args, f"after exit {r.returncode}, {target} exists: {os.path.lexists(target)}", r)

    def rollable(self, user, row):
        """A clone `user` made, with a snapshot, that never held others."""
        return (self.made_by.get(row["id"]) == self.uid[user] and bool(self.snapshots_of(row))
                and not self.ever_held(row) and not frozen(row["path"]))

    def prepare_rollback(self, user, base, p):
        """A clone for `user` to roll back, made as they would: they clone a directory that
        holds no clones into their home and snapshot it (both checked as requests), then
        change it by hand. Returns its row, or None."""
        clones = [self.fp(r["path"]) for r in self.rows.values() if r["kind"] == "clone"]
        plain = [d for d, _ in p["dirs"] if not any(below(c, d) for c in clones)
                 and not any(t.startswith(self.sp(d) + "/") for t in self.carried)]
        if not plain:
            return None
        dst = self.req_clone(user, base, p, src=self.rng.choice(plain), parent=f"{base}/home/{user}")
        if dst is None or self.req_snapshot(user, base, self.pool(base), d=dst) is None:
            return None
        self.as_user(user, ["sh", "-c", f"echo after > {shlex.quote(dst)}/new; rm -rf {shlex.quote(dst)}/d*"])
        return self.row_at(dst)

    def req_rollback(self, user, base, p):
        row = self.pick_row(("clone",), user, 0.7, base, want=lambda r: self.rollable(user, r))
        if (row is None or not self.rollable(user, row)) and self.rng.random() < 0.6:
            row = self.prepare_rollback(user, base, p) or row
        if row is None:
            return
        snaps = self.snapshots_of(row)
        to = self.rng.choice(snaps) if snaps and self.rng.random() < 0.85 else "nosuch"
        target = self.fp(row["path"])
        args = ["rollback", target, "--to", to]
        (st,) = self.probe(user, [("lstat", target)])
        reachable = st["err"] is None
        mine = self.made_by.get(row["id"]) == self.uid[user]
        nested = self.ever_held(row)
        allowed = reachable and mine and to in snaps and not frozen(row["path"])
        why = (f"a clone they made, to one of its snapshots: made by {self.maker(row)}, "
               f"inside a snapshot: {frozen(row['path'])}, "
               f"reachable: {reachable} ({st['err']}), snapshot {to} exists: {to in snaps}")
        r = self.scion(user, *args)
        self.sync(self.uid[user])
        if nested and allowed:
            return       # what a rollback does to clones nested in it is not this test's question
        if not self.outcome(user, args, r, allowed, why) or r.returncode != 0:
            return
        self.check_setid(user, args, entries(target), {}, "the clone rolled back")
        now, then = dict(entries(target)), dict(entries(f"{target}/.snapshot/{to}"))
        if set(now) != set(then):
            self.fail(user, args, f"after the rollback the clone holds what the snapshot does: {sorted(set(now) ^ set(then))[:10]}")
            return
        for rel in now:
            a, b = now[rel], then[rel]
            if (a.st_mode, a.st_uid, a.st_gid) != (b.st_mode, b.st_uid, b.st_gid) or \
                    content(at(target, rel), a) != content(at(f"{target}/.snapshot/{to}", rel), b):
                self.fail(user, args, f"after the rollback {rel or '.'} is not as the snapshot holds it: "
                                      f"mode/uid/gid {oct(a.st_mode)}/{a.st_uid}/{a.st_gid}, in the snapshot "
                                      f"{oct(b.st_mode)}/{b.st_uid}/{b.st_gid}")

    def req_versions(self, user, base, p):
        rng = self.rng
        if rng.random() < 0.15:
            path = f"{self.pick_dir(p)}/{self.next_name('gone')}"
        else:
            path = rng.choice(p["dirs"] + p["others"])[0]
        args = ["versions", "--json", path]
        (st,) = self.probe(user, [("lstat", path)])
        r = self.scion(user, *args)
        if st["err"] == "EACCES":
            self.count("versions", False)
            if r.returncode != 2 or r.stdout.strip():
                self.fail(user, args, f"stat PATH as {user} gives EACCES: refused (exit 2: no answer "
                                      f"about existence, sizes or times), nothing on stdout", r)
        elif st["err"] is None:
            self.count("versions", True)
            rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()] if r.returncode == 0 else []
            live = [x for x in rows if x.get("live")]
            if r.returncode != 0 or not live:
                self.fail(user, args, f"stat PATH as {user} works: its live version is listed", r)
            elif stat.S_ISLNK(st["mode"]) and live[-1].get("kind") != "symlink":
                self.fail(user, args, "PATH is a symlink: its versions are the symlink's, as stat "
                                      "and ls -l show it (not followed)", r)
            elif stat.S_ISREG(st["mode"]) and live[-1].get("size") != st["size"]:
                self.fail(user, args, f"the live version's size is stat's {st['size']}", r)

    def count(self, verb, allowed):
        key = (verb, "allowed" if allowed else "refused")
        self.counts[key] = self.counts.get(key, 0) + 1

    def req_list(self, user, base, p):
        args = ["list", "--json", self.M]
        r = self.scion(user, *args)
        self.count("list", True)
        if r.returncode != 0:
            self.fail(user, args, "a listing is for everyone", r)
            return
        theirs = {x["path"] for x in map(json.loads, r.stdout.splitlines())}
        everyone = sorted(x["path"] for x in self.rows.values())
        sts = self.probe(user, [("lstat", self.fp(x)) for x in everyone])
        reach = {x for x, st in zip(everyone, sts) if st["err"] is None}
        if theirs - reach:
            self.fail(user, args, f"listed only what {user} can reach (stat): shown but out of reach: {sorted(theirs - reach)}")
        if reach - theirs:
            self.fail(user, args, f"everything {user} can reach is listed: missing {sorted(reach - theirs)}")

    def req_diff(self, user, base, p):
        rng = self.rng
        x = rng.random()
        snap = self.pick_row(("snapshot",), base=base)
        clone = self.pick_row(("clone",), base=base)
        if x < 0.4 and snap:
            a, b = self.fp(snap["path"]), self.fp(snap["origin"])
        elif x < 0.7 and clone:
            a, b = self.fp(clone["origin"]), self.fp(clone["path"])
        else:
            a, b = self.pick_dir(p), self.pick_dir(p)
        if not (os.path.isdir(a) and os.path.isdir(b)):
            return
        flags = [f for f, pr in (("--json", 0.5), ("--recursive", 0.3)) if rng.random() < pr]
        args = ["diff", *flags, a, b]
        wa, wb = self.probe(user, [("walk", a), ("walk", b)])
        r = self.scion(user, *args)
        if not (wa["root_ok"] and wb["root_ok"]):
            self.count("diff", False)
            if r.returncode != 2 or r.stdout.strip():
                self.fail(user, args, f"ls A / ls B as {user} fail ({wa['root_ok']}, {wb['root_ok']}): "
                                      f"refused with exit 2 and nothing on stdout", r)
            return
        self.count("diff", True)
        if r.returncode not in (0, 1, 2):
            self.fail(user, args, "exit 0, 1 or 2", r)
            return
        for change, path, old in self.parse_diff(r.stdout, "--json" in flags):
            if path in ("", "."):
                continue          # A and B themselves: they may read both
            need = {"A": [(wb, path)], "D": [(wa, path)], "R": [(wa, old), (wb, path)]}.get(
                change, [(wa, path), (wb, path)])
            hidden = [w is wa and "A" or "B" for w, q in need if q not in w["visible"]]
            if hidden:
                self.fail(user, args, f"'{change} {path}' names what {user}'s diff -r cannot see "
                                      f"(in {'/'.join(hidden)}: a directory they may not read and search)", r)
            elif change == "M" and wa["visible"].get(path) == "file" and wb["visible"].get(path) == "file" \
                    and not (path in wa["readable"] and path in wb["readable"]):
                self.fail(user, args, f"'M {path}': a changed file {user} may not read is refused, "
                                      f"not compared", r)
        if r.returncode == 2:
            # --recursive lists what is inside a directory on one side only: diff -N reads it
            by_hand = self.as_user(user, ["diff", "-r", "-q", "--no-dereference", a, b]
                                   if "--recursive" not in flags else
                                   ["diff", "-r", "-q", "-N", "--no-dereference", a, b])
            # (diff -r gets through an empty directory it may read but not search; scion asks
            # for both, as diff -r does of every directory with something in it)
            excused = any(f"{d}: you may not read and search it" in r.stderr
                          for d in wa["unsearchable"] + wb["unsearchable"])
            if by_hand.returncode != 2 and not excused:
                self.fail(user, args, f"refused, but {user}'s own diff -r works (exit {by_hand.returncode})", r)

    JSON_CHANGES = {"added": "A", "deleted": "D", "modified": "M", "metadata": "m", "type": "T", "renamed": "R"}

    def parse_diff(self, out, as_json):
        """[(change letter, path, old path)] from scion diff's output."""
        found = []
        for line in out.splitlines():
            if not line.strip():
                continue
            if as_json:
                d = json.loads(line)
                found.append((self.JSON_CHANGES[d["change"]], d["path"].lstrip("/"),
                               (d.get("old_path") or "").lstrip("/")))
            else:
                change, rest = line[0], line[2:]
                old, _, new = rest.partition(" ") if change == "R" else ("", "", rest)
                found.append((change, new.lstrip("/"), old.lstrip("/")))
        return found

    HASH_LINE = re.compile(r"^([0-9a-f]{64})  (.*)$")

    def req_scan(self, user, base, p):
        rng = self.rng
        root = rng.choice(p["snap_dirs"]) if p["snap_dirs"] and rng.random() < 0.3 else self.pick_dir(p)
        flags = [f for f, pr in (("--json", 0.5), ("--no-cache", 0.3)) if rng.random() < pr]
        args = ["scan", *flags, root, "--", "sha256sum", "{}"]
        (w,) = self.probe(user, [("walk", root)])
        r = self.scion(user, *args)
        self.count("scan", w["root_ok"])
        before = len(self.failures)
        if not w["root_ok"]:
            if r.returncode == 0 or r.stdout.strip():
                self.fail(user, args, f"ls ROOT as {user} fails: refused, nothing on stdout", r)
            return
        readable = {f"{root}/{rel}": h for rel, h in w["readable"].items()}
        unreadable = {f"{root}/{rel}" for rel in w["unreadable"]}
        shown = {}
        for line in r.stdout.splitlines():
            if "--json" in flags:
                d = json.loads(line)
                path = d["path"]
                if path in unreadable:
                    if d.get("content") or d.get("stdout"):
                        self.fail(user, args, f"{path} is unreadable to {user}: no content key or result "
                                              f"(content={d.get('content')!r}, stdout={d.get('stdout')!r})")
                    continue
                m = self.HASH_LINE.match(d.get("stdout", "").strip())
                shown[path] = m.group(1) if m else None
            else:
                m = self.HASH_LINE.match(line)
                if not m:
                    self.fail(user, args, f"an output line that is not sha256sum's: {line!r}")
                    continue
                shown[m.group(2)] = m.group(1)
        for path, h in shown.items():
            if path in unreadable:
                self.fail(user, args, f"a result for {path}, which {user} may not read (sha256sum as them fails)")
            elif path not in readable:
                self.fail(user, args, f"a result for {path}, which {user}'s find below ROOT does not list")
            elif h is not None and h != readable[path]:
                self.fail(user, args, f"{path}: {h}, sha256sum as {user} gives {readable[path]}")
        missing = sorted(set(readable) - {q for q, h in shown.items() if h})
        if missing:
            self.fail(user, args, f"every file {user} may read has its sha256sum: missing {missing[:6]}", r)
        if len(self.failures) > before:
            return        # the exit status would only say it again
        if w["trouble"] and r.returncode == 0:
            self.fail(user, args, f"{user}'s find/sha256sum meet a directory or file they may not read "
                                  f"({(w['unsearchable'] + w['unreadable'])[:4]}): exit not 0", r)
        if not w["trouble"] and r.returncode != 0:
            self.fail(user, args, "everything below ROOT is readable to them: exit 0", r)

    VERBS = {"clone": (req_clone, 4), "snapshot": (req_snapshot, 3), "restore": (req_restore, 3),
             "destroy": (req_destroy, 3), "rollback": (req_rollback, 2), "versions": (req_versions, 2),
             "list": (req_list, 1), "diff": (req_diff, 2), "scan": (req_scan, 2)}

    def request(self, base):
        user = self.rng.choice(USERS)
        names = list(self.VERBS)
        verb = self.rng.choices(names, [self.VERBS[v][1] for v in names])[0]
        self.VERBS[verb][0](self, user, base, self.pool(base))


def test_users_get_through_scion_what_they_get_by_hand(scion_mount):
    m = scion_mount
    seed = env_int("SCION_SEED", DEFAULT_SEED)
    rounds = env_int("SCION_SELFSERVICE_ROUNDS", 8)
    per_round = env_int("SCION_SELFSERVICE_REQUESTS", 45)
    print(f"seed={seed} rounds={rounds} requests={per_round}")
    w = SelfService(m, seed)
    assert w.probe(USERS[0], []) == [], "the probe runs as a user"
    t0 = time.monotonic()
    for rnd in range(rounds):
        w.round = rnd
        base = f"{m.mnt}/r{rnd}"
        w.build_round(base)
        for _ in range(per_round):
            w.request(base)
    print(f"seed={seed} time={time.monotonic() - t0:.1f}s failures={len(w.failures)} "
          f"counts={sorted(w.counts.items())}")
    m.umount()
    assert "clean" in m.check()
    if w.failures:
        log = os.path.join(BASE, f"selfservice-seed{seed}.log")
        with open(log, "w") as f:
            f.write("\n\n".join(w.failures) + "\n")
        shown = "\n\n".join(w.failures[:40])
        more = f"\n\n... and {len(w.failures) - 40} more (all in {log})" if len(w.failures) > 40 else ""
        pytest.fail(f"seed={seed}: {len(w.failures)} differences between scion and what the user "
                    f"can do by hand (replay: SCION_SEED={seed}); by request: {sorted(w.failed.items())}"
                    f"\n\n{shown}{more}", pytrace=False)
