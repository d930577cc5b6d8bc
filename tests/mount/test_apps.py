"""Real programs in the mount, as users run them: git, SQLite in WAL mode with several
writer processes, file locks between processes, a C build, a Python venv. Each keeps its
data across a remount, and what git and SQLite committed survives a SIGKILL of the daemon.
These exercise call sequences no hand-written case does (git's rename-into-place and object
fsyncs, SQLite's shared-memory index mapped by several processes, flock and fcntl locks)."""
import fcntl
import multiprocessing
import os
import shutil
import sqlite3
import subprocess

import pytest


def run(*argv, cwd=None, env=None):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"$ {' '.join(argv)} (in {cwd})\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org", GIT_CONFIG_NOSYSTEM="1",
               HOME=repo)
    return run("git", "-c", "core.fsync=all", "-c", "safe.directory=*", *args, cwd=repo, env=env)


def make_tree(root, seed, files=120):
    """Source-like files: a few directories, text of assorted sizes (some over a chunk)."""
    rnd = __import__("random").Random(seed)
    for i in range(files):
        d = os.path.join(root, f"pkg{i % 7}", f"mod{i % 3}")
        os.makedirs(d, exist_ok=True)
        n = rnd.choice([40, 900, 3000, 20000, 150000])
        words = " ".join(f"w{rnd.randrange(10**6)}" for _ in range(n // 8 + 1))
        with open(os.path.join(d, f"f{i}.c"), "w") as f:
            f.write(words[:n] + "\n")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_gc_clone_and_crash(scion_mount):
    m = scion_mount
    repo = os.path.join(m.mnt, "repo")
    os.makedirs(repo)
    git(repo, "init", "-q", "-b", "main")
    make_tree(repo, 1)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    # Rewrite a third of the files and commit again, then pack everything (git writes packs
    # and renames them into place) and clone the repository inside the mount.
    make_tree(repo, 2, files=40)
    git(repo, "commit", "-qam", "second")
    git(repo, "gc", "-q", "--aggressive")
    git(repo, "fsck", "--full", "--strict")
    head = git(repo, "rev-parse", "HEAD").strip()
    clone = os.path.join(m.mnt, "clone")
    run("git", "-c", "safe.directory=*", "clone", "-q", "--no-hardlinks", repo, clone)
    assert git(clone, "rev-parse", "HEAD").strip() == head
    assert git(clone, "status", "--porcelain") == ""
    # A third commit, then the daemon is killed. git fsyncs its objects and the new ref's lock
    # file (core.fsync=all) but not the directory it renames the ref into, so POSIX does not
    # make the rename durable (on scion it would be within half a second, by the background
    # sync); a careful program fsyncs the directory, as done here.
    make_tree(repo, 3, files=10)
    git(repo, "commit", "-qam", "third")
    third = git(repo, "rev-parse", "HEAD").strip()
    fd = os.open(os.path.join(repo, ".git", "refs", "heads"), os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    m.kill9()
    m.check()
    m.mount()
    assert git(repo, "rev-parse", "HEAD").strip() == third
    git(repo, "fsck", "--full", "--strict")
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "3"
    m.remount()
    git(clone, "fsck", "--full", "--strict")
    m.umount()
    m.check()


def _sqlite_writer(db, n, rows):
    c = sqlite3.connect(db, timeout=60)
    c.execute("pragma synchronous=full")
    for i in range(rows):
        with c:
            c.execute("insert into t (writer, i, payload) values (?, ?, ?)", (n, i, os.urandom(300)))
    c.close()


def test_sqlite_wal_with_concurrent_writers_survives_kill(scion_mount):
    m = scion_mount
    db = os.path.join(m.mnt, "app.db")
    c = sqlite3.connect(db)
    assert c.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
    c.execute("create table t (id integer primary key, writer int, i int, payload blob)")
    c.commit()
    c.close()
    # Four processes write through the shared-memory index (app.db-shm, mapped by each).
    procs = [multiprocessing.Process(target=_sqlite_writer, args=(db, n, 150)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"writer exited with {p.exitcode}"
    c = sqlite3.connect(db)
    assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert c.execute("select count(*) from t").fetchone()[0] == 600
    assert c.execute("select count(distinct writer || ':' || i) from t").fetchone()[0] == 600
    c.close()
    # Committed with synchronous=full, still in the WAL (no checkpoint of SQLite's): kill.
    m.kill9()
    m.check()
    m.mount()
    c = sqlite3.connect(db)
    assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert c.execute("select count(*) from t").fetchone()[0] == 600
    c.execute("pragma wal_checkpoint(truncate)")
    c.close()
    m.remount()
    c = sqlite3.connect(db)
    assert c.execute("select count(*), sum(length(payload)) from t").fetchone() == (600, 600 * 300)
    c.close()
    m.umount()
    m.check()


def _try_locks(path, q):
    with open(path, "r+") as f:
        out = []
        for name, take in (("flock", lambda: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)),
                           ("fcntl", lambda: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0))):
            try:
                take()
                out.append(f"{name}:got")
            except BlockingIOError:
                out.append(f"{name}:busy")
        q.put(out)


def test_locks_between_processes(scion_mount):
    path = os.path.join(scion_mount.mnt, "lockfile")
    with open(path, "w") as f:
        f.write("x" * 100)
    q = multiprocessing.Queue()

    def other():
        p = multiprocessing.Process(target=_try_locks, args=(path, q))
        p.start()
        p.join(30)
        return q.get(timeout=5)

    a = open(path, "r+")
    b = open(path, "r+")
    fcntl.flock(a, fcntl.LOCK_EX)
    fcntl.lockf(b, fcntl.LOCK_EX, 10, 0)
    assert other() == ["flock:busy", "fcntl:busy"]
    fcntl.flock(a, fcntl.LOCK_UN)   # the fcntl lock, held through b, stays
    assert other() == ["flock:got", "fcntl:busy"]
    fcntl.flock(a, fcntl.LOCK_EX)
    a.close()   # closing any descriptor of the file drops the process's fcntl locks (POSIX)
    assert other() == ["flock:got", "fcntl:got"]
    b.close()


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_build_and_run_programs(scion_mount):
    m = scion_mount
    src = os.path.join(m.mnt, "proj")
    os.makedirs(src)
    for i in range(20):
        with open(os.path.join(src, f"u{i}.c"), "w") as f:
            f.write(f"int f{i}(int x) {{ return x * {i + 1}; }}\n")
    decls = "".join(f"int f{i}(int);\n" for i in range(20))
    calls = " + ".join(f"f{i}(1)" for i in range(20))
    with open(os.path.join(src, "main.c"), "w") as f:
        f.write(f'#include <stdio.h>\n{decls}int main(void) {{ printf("%d\\n", {calls}); return 0; }}\n')
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write("OBJS := $(patsubst %.c,%.o,$(wildcard *.c))\nprog: $(OBJS)\n\t$(CC) -o $@ $^\n"
                "clean:\n\trm -f prog *.o\n")
    run("make", "-s", "-j2", cwd=src)
    assert run(os.path.join(src, "prog")).strip() == str(sum(range(1, 21)))
    # A script with a shebang, executable by mode bits (MAY_EXEC checked by the kernel).
    script = os.path.join(src, "hello.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho hello from $(basename $0)\n")
    os.chmod(script, 0o755)
    assert run(script).strip() == "hello from hello.sh"
    # A Python virtual environment: symlinks, a tree of small files, an interpreter run from it.
    venv = os.path.join(m.mnt, "venv")
    run("python3", "-m", "venv", "--without-pip", venv)
    out = run(os.path.join(venv, "bin", "python"), "-c", "import sys; print(sys.prefix)")
    assert out.strip() == venv
    m.remount()
    assert run(os.path.join(src, "prog")).strip() == str(sum(range(1, 21)))
    run("make", "-s", "clean", cwd=src)
    assert not os.path.exists(os.path.join(src, "prog"))
    assert run(os.path.join(venv, "bin", "python"), "-c", "print(1)").strip() == "1"
    m.umount()
    m.check()


def test_tar_round_trip_keeps_everything(scion_mount, tmp_path):
    """A tree with every kind of entry, archived into the mount and out again: GNU tar's view
    of it (names, modes, owners, times, link targets, sparse files) is the same."""
    src = tmp_path / "src"
    src.mkdir()
    make_tree(str(src), 4, files=30)
    os.symlink("pkg0", src / "link")
    os.link(src / "pkg0" / "mod0" / "f0.c", src / "hard.c")
    os.mkfifo(src / "fifo")
    with open(src / "sparse", "wb") as f:
        f.truncate(8 << 20)
        f.seek(5 << 20)
        f.write(b"middle")
    os.setxattr(src / "hard.c", "user.note", b"kept")
    os.chmod(src / "pkg1", 0o2750)
    os.chown(src / "pkg2", 1234, 5678)
    dst = os.path.join(scion_mount.mnt, "untarred")
    os.makedirs(dst)
    archive = tmp_path / "a.tar"
    run("tar", "--xattrs", "--sparse", "-cf", str(archive), "-C", str(src), ".")
    run("tar", "--xattrs", "-xpf", str(archive), "-C", dst)
    scion_mount.remount()
    again = tmp_path / "again.tar"
    run("tar", "--xattrs", "--sparse", "-cf", str(again), "-C", dst, ".")
    # Fields, not columns: tar pads each column to the widest entry seen so far, which
    # depends on the order entries were archived in.
    listing = lambda a: [" ".join(l.split()) for l in  # noqa: E731, E741
                         run("tar", "--full-time", "--numeric-owner", "-tvf", str(a)).splitlines()]
    assert sorted(listing(again)) == sorted(listing(archive))
    out = tmp_path / "out"
    out.mkdir()
    run("tar", "--xattrs", "-xpf", str(again), "-C", str(out))
    run("diff", "-r", "--no-dereference", "-x", "fifo", str(src), str(out))
    assert os.path.exists(out / "fifo") and not os.path.isfile(out / "fifo")
    assert os.getxattr(os.path.join(dst, "hard.c"), "user.note") == b"kept"
    assert os.stat(os.path.join(dst, "hard.c")).st_nlink == 2
    scion_mount.umount()
    scion_mount.check()
