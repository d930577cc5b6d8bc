"""`scion diff` through the mount (issue 19 item 1, in part): a clone changed in every way a
tree can change, compared with its source both ways round against a walk of both trees that
reads every file (with --no-renames; by default a moved file is one rename); JSON Lines and
--stat; a snapshot against the live tree; exit codes as
`diff`."""

import json
import os
import random
import shutil
import stat
import subprocess

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="diff needs a scion mount")


def walk_diff(a, b, rel=""):
    """(letter, path) for every difference between trees a and b, reading every file."""
    out = []
    names = set()
    for d in (a, b):
        if os.path.isdir(d) and not os.path.islink(d):
            names |= {n for n in os.listdir(d) if n != ".snapshot"}
    for n in sorted(names):
        p = f"{rel}/{n}" if rel else n
        x, y = os.path.join(a, n), os.path.join(b, n)
        ex, ey = os.path.lexists(x), os.path.lexists(y)
        if ex and not ey:
            out.append(("D", p))
            continue
        if ey and not ex:
            out.append(("A", p))
            continue
        sx, sy = os.lstat(x), os.lstat(y)
        if stat.S_IFMT(sx.st_mode) != stat.S_IFMT(sy.st_mode):
            out.append(("T", p))
            continue
        meta = lambda f, s: (stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid,
                             sorted((k, os.getxattr(f, k, follow_symlinks=False))
                                    for k in os.listxattr(f, follow_symlinks=False)))
        if stat.S_ISDIR(sx.st_mode):
            if meta(x, sx) != meta(y, sy):
                out.append(("m", p))
            out += walk_diff(x, y, p)
            continue
        if stat.S_ISLNK(sx.st_mode):
            same = os.readlink(x) == os.readlink(y)
        else:
            with open(x, "rb") as f, open(y, "rb") as g:
                same = f.read() == g.read()
        if not same:
            out.append(("M", p))
        elif meta(x, sx) != meta(y, sy):
            out.append(("m", p))
    return out


def diff_lines(m, a, b, *extra):
    r = m.run("diff", *extra, a, b)
    assert r.returncode in (0, 1), r.describe()
    return r, [(l[0], l[2:]) for l in r.stdout.splitlines()]


def test_diff_against_a_walk_of_both_trees(scion_mount):
    m = scion_mount
    rng = random.Random(7)
    src = os.path.join(m.mnt, "src")
    for d in range(6):
        os.makedirs(f"{src}/d{d}/sub")
        for f in range(8):
            size = rng.choice([0, 10, 3000, 70000, 300000])
            with open(f"{src}/d{d}/f{f}", "wb") as h:
                h.write(bytes(rng.randrange(4) for _ in range(size)))
        os.symlink(f"f{d}", f"{src}/d{d}/link")
    c = os.path.join(m.mnt, "c")
    assert m.run("clone", src, c).returncode == 0
    # Changes on both sides, every kind, some synced and some only in the page cache.
    with open(f"{c}/d0/f1", "r+b") as h:
        h.seek(5000); h.write(b"x" * 10)
    with open(f"{c}/d0/f2", "rb") as h:
        same = h.read()
    with open(f"{c}/d0/f2", "wb") as h:
        h.write(same)                      # rewritten with the same bytes: no change
    os.chmod(f"{c}/d1/f0", 0o600)
    os.setxattr(f"{c}/d1/f1", "user.tag", b"v")
    os.remove(f"{c}/d2/f3")
    os.remove(f"{c}/d2/link"); os.symlink("elsewhere", f"{c}/d2/link")
    os.remove(f"{c}/d3/f4"); os.mkdir(f"{c}/d3/f4")
    os.makedirs(f"{c}/new/deeper"); open(f"{c}/new/deeper/x", "w").close()
    os.rename(f"{c}/d0/f7", f"{c}/moved")
    with open(f"{src}/d4/f5", "ab") as h:
        h.write(b"appended at the source")
    os.sync()
    with open(f"{c}/d5/f6", "ab") as h:
        h.write(b"not synced")
    for a, b in [(src, c), (c, src)]:
        r, got = diff_lines(m, a, b, "--no-renames")
        want = walk_diff(a, b)
        assert got == want, (got, want)
        assert r.returncode == 1
    # By default the moved file is one rename, not a deletion and an addition.
    r = m.run("diff", src, c)
    assert "R d0/f7 moved" in r.stdout.splitlines(), r.stdout
    assert "D d0/f7" not in r.stdout and "A moved" not in r.stdout, r.stdout
    r = m.run("diff", "--json", "--stat", src, c)
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert {"change": "deleted", "path": "d2/f3", "kind": "file"}.items() <= rows[[x["path"] for x in rows].index("d2/f3")].items()
    assert all({"change", "path", "kind", "old_size", "new_size"} <= set(x) for x in rows)
    r, rec = diff_lines(m, src, c, "--recursive")
    assert ("A", "new/deeper/x") in rec and ("A", "new") in rec
    # A snapshot against the live tree, a tree against itself, a missing path.
    assert m.run("snapshot", "--name", "s", c).returncode == 0
    r, got = diff_lines(m, os.path.join(c, ".snapshot", "s"), c)
    assert got == [] and r.returncode == 0, r.describe()
    open(f"{c}/after", "w").close()
    r, got = diff_lines(m, os.path.join(c, ".snapshot", "s"), c)
    assert got == [("A", "after")] and r.returncode == 1
    assert m.run("diff", src, os.path.join(m.mnt, "nope")).returncode == 2
    assert m.run("diff", "--help").returncode == 0


def test_diff_patch(scion_mount):
    m = scion_mount
    src, c = os.path.join(m.mnt, "s"), os.path.join(m.mnt, "c")
    os.makedirs(src)
    with open(f"{src}/notes.txt", "w") as h:
        h.write("one\ntwo\nthree\n")
    with open(f"{src}/blob", "wb") as h:
        h.write(bytes(range(256)) * 8)
    assert m.run("clone", src, c).returncode == 0
    with open(f"{c}/notes.txt", "w") as h:
        h.write("one\nTWO\nthree\n")
    with open(f"{c}/blob", "r+b") as h:
        h.write(b"\xff\xfe\xfd")
    # Written and still open: the bytes may sit in the page cache only, and diff sees them.
    held = open(f"{c}/open-file", "w")
    held.write("written, not closed\n")
    held.flush()
    r = m.run("diff", src, c)
    assert "A open-file" in r.stdout.splitlines(), r.stdout
    r = m.run("diff", "--stat", "--json", src, c)
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert {"path": "open-file", "new_size": 20}.items() <= rows[[x["path"] for x in rows].index("open-file")].items(), rows
    held.close()
    os.remove(f"{c}/open-file")
    r = m.run("diff", "--patch", src, c)
    assert r.returncode == 1, r.describe()
    assert "--- a/notes.txt\n+++ b/notes.txt\n" in r.stdout and "-two\n+TWO\n" in r.stdout, r.stdout
    assert "Binary files a/blob and b/blob differ" in r.stdout, r.stdout
    assert m.run("diff", "--patch", "--json", src, c).returncode == 2


def test_run_in_a_throwaway_clone(scion_mount):
    m = scion_mount
    src = os.path.join(m.mnt, "proj")
    os.makedirs(src)
    with open(f"{src}/a", "w") as h:
        h.write("hi\n")
    with open(f"{src}/b", "w") as h:
        h.write("x\n")
    # The command's writes may still sit in the page cache when it exits: listed all the same.
    r = m.run("run", src, "--", "sh", "-c", "echo more >> a; rm b; mkdir out; touch out/o; exit 3")
    assert r.returncode == 3, r.describe()
    assert r.stdout.splitlines() == ["M a", "D b", "A out"], r.stdout
    assert sorted(os.listdir(m.mnt)) == ["proj"], "the clone is gone"
    with open(f"{src}/a") as h:
        assert h.read() == "hi\n", "SRC untouched"
    assert sorted(os.listdir(src)) == ["a", "b"]
    r = m.run("run", "--keep", src, "--", "touch", "new")
    assert r.returncode == 0 and r.stdout.splitlines() == ["A new"], r.describe()
    kept = [n for n in os.listdir(m.mnt) if n.startswith("proj.scion-run-")]
    assert len(kept) == 1 and os.path.exists(os.path.join(m.mnt, kept[0], "new"))
    assert m.run("run", src, "--", "sh", "-c", "kill -TERM $$").returncode == 128 + 15
    assert m.run("run", src).returncode == 2
    assert m.run("run", os.path.join(m.mnt, "nope"), "--", "true").returncode == 2


def tree_of(root):
    """{relative path: (kind, mode, content)} of everything below root."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".snapshot"]
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as h:
                    body = h.read()
            else:
                body = None
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
    return out


def test_run_apply_gives_src_the_clones_tree(scion_mount, tmp_path):
    m = scion_mount
    src = os.path.join(m.mnt, "proj")
    os.makedirs(f"{src}/d/sub")
    for n, body in [("a", "hi\n"), ("b", "x\n"), ("d/x", "dx\n"), ("d/sub/y", "y" * 100000)]:
        with open(f"{src}/{n}", "w") as h:
            h.write(body)
    os.symlink("a", f"{src}/link")
    # The same command on a plain copy gives the tree SRC must end up as.
    script = ("echo more >> a; rm b; mkdir -p new/deep; echo n > new/deep/f; chmod 700 d; "
              "rm -r d/sub; echo z > d/sub; mv d/x moved; rm link; ln -s b link; touch empty")
    ref = str(tmp_path / "ref")
    shutil.copytree(src, ref, symlinks=True)
    subprocess.run(["sh", "-c", script], cwd=ref, check=True)
    r = m.run("run", "--apply", src, "--", "sh", "-c", script)
    assert r.returncode == 0, r.describe()
    assert tree_of(src) == tree_of(ref)
    assert sorted(os.listdir(m.mnt)) == ["proj"], "the clone is gone"
    assert os.listdir(f"{src}/.snapshot") == [], "the base snapshot is gone"
    assert "changes applied" in r.stderr, r.stderr

    # SRC changed meanwhile where the command changed it: nothing applied, the clone kept.
    before = tree_of(src)
    r = m.run("run", "--apply", src, "--", "sh", "-c", f"echo ours > a; echo theirs > {src}/a; echo new > other")
    assert r.returncode == 2, r.describe()
    assert "not applied" in r.stderr and "a" in r.stderr, r.stderr
    with open(f"{src}/a") as h:
        assert h.read() == "theirs\n"
    assert not os.path.exists(f"{src}/other")
    kept = [n for n in os.listdir(m.mnt) if n.startswith("proj.scion-run-")]
    assert len(kept) == 1, os.listdir(m.mnt)
    shutil.rmtree(os.path.join(m.mnt, kept[0]), ignore_errors=True)
    assert m.run("destroy", os.path.join(m.mnt, kept[0])).returncode in (0, 2)
    # The command failed: nothing applied, its exit status returned, the clone kept.
    before = tree_of(src)
    r = m.run("run", "--apply", src, "--", "sh", "-c", "echo partial > a; exit 4")
    assert r.returncode == 4 and tree_of(src) == before, r.describe()
    assert "nothing applied" in r.stderr
    assert m.run("run", "--apply", "--keep", src, "--", "true").returncode == 2


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap (Debian's bubblewrap)")
def test_run_in_a_sandbox(scion_mount, tmp_path):
    m = scion_mount
    proj = os.path.join(m.mnt, "proj")
    os.makedirs(proj)
    outside = str(tmp_path / "outside")
    # A project directory: the clone is the only place it can write; /tmp is its own.
    r = m.run("run", "--sandbox", proj, "--", "sh", "-c",
              f"touch inside && touch /tmp/t && ! touch {outside} 2>/dev/null && pwd")
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines()[-1] == "A inside", r.stdout
    assert not os.path.exists(outside)
    # A root filesystem (a shell and the libraries it needs): the clone is `/`.
    root = os.path.join(m.mnt, "rootfs")
    for d in ("etc", "usr/bin", "dev", "proc", "tmp"):
        os.makedirs(f"{root}/{d}")
    shell = os.path.realpath("/bin/dash" if os.path.exists("/bin/dash") else "/bin/sh")
    shutil.copy(shell, f"{root}/usr/bin/sh")
    libs = subprocess.run(["ldd", shell], capture_output=True, text=True).stdout
    for word in libs.split():
        if word.startswith("/") and os.path.exists(word):
            dst = root + os.path.realpath(word)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(word, dst)
            if os.path.realpath(word) != word:
                os.makedirs(os.path.dirname(root + word), exist_ok=True)
                if not os.path.lexists(root + word):
                    os.symlink(os.path.realpath(word), root + word)
    r = m.run("run", "--sandbox", root, "--", "/usr/bin/sh", "-c", "echo hi > /etc/motd; touch /tmp/t; test -d /proc/self")
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines() == ["A etc/motd"], r.stdout
    assert not os.path.exists(f"{root}/etc/motd"), "SRC untouched"
