"""File handles (issue 36 item 4; xfstests generic/426, 467, 477, 756, 777): what
name_to_handle_at gives names the same file after the kernel dropped its caches and after a
remount, for files and directories of the main tree, a clone, a snapshot and a cube, and a
file with two names; a removed file's handle is stale, and so is a removed cube's, never the
next cube's file. Handles are what knfsd re-exporting a FUSE mount, fanotify and backup
tools name files by. Needs root (open_by_handle_at wants CAP_DAC_READ_SEARCH)."""

import ctypes
import ctypes.util
import errno
import os
import shutil
import struct

import pytest

from scion_helpers import drop_kernel_caches

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AT_FDCWD = -100
MAX_HANDLE_SZ = 128

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="open_by_handle_at needs root")


def handle_of(path):
    buf = ctypes.create_string_buffer(8 + MAX_HANDLE_SZ)
    struct.pack_into("I", buf, 0, MAX_HANDLE_SZ)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), buf, ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"name_to_handle_at {path}: {os.strerror(e)}")
    size, _ = struct.unpack_from("Ii", buf, 0)
    return buf.raw[:8 + size]


def open_by(mnt, handle, flags=os.O_RDONLY):
    """An fd for `handle` on the mount at `mnt`, or OSError with the errno."""
    mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = ctypes.create_string_buffer(handle, len(handle))
        fd = libc.open_by_handle_at(mfd, buf, flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


def seen(mnt, handle, is_dir):
    """What the handle's file holds (a directory: its sorted names)."""
    fd = open_by(mnt, handle, os.O_RDONLY | (os.O_DIRECTORY if is_dir else 0))
    try:
        if is_dir:
            return sorted(os.listdir(fd))
        return os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)


def stale(mnt, handle):
    try:
        os.close(open_by(mnt, handle))
    except OSError as e:
        return e.errno == errno.ESTALE
    return False


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def test_handles_name_the_same_files_after_dropped_caches_and_a_remount(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.makedirs(os.path.join(d, "sub", "deeper"))
    write(os.path.join(d, "a"), b"a" * 5000)
    write(os.path.join(d, "sub", "deeper", "b"), b"bee")
    write(os.path.join(d, "two"), b"two names")
    os.link(os.path.join(d, "two"), os.path.join(d, "sub", "second"))
    for i in range(300):
        write(os.path.join(d, "sub", f"f{i}"), str(i).encode())
    assert m.run("snapshot", d, "--name", "s1").returncode == 0
    assert m.run("clone", d, os.path.join(m.mnt, "c")).returncode == 0
    write(os.path.join(m.mnt, "c", "only-in-clone"), b"clone's own")
    assert m.run("cube", "create", os.path.join(m.mnt, "q")).returncode == 0
    os.makedirs(os.path.join(m.mnt, "q", "in"))
    write(os.path.join(m.mnt, "q", "in", "f"), b"in a cube")

    paths = ["d", "d/a", "d/sub", "d/sub/deeper", "d/sub/deeper/b", "d/two", "d/sub/second", "d/sub/f7",
             "c", "c/only-in-clone", "c/sub/deeper/b", "d/.snapshot/s1/a", "d/.snapshot/s1/sub/deeper/b",
             "q", "q/in", "q/in/f"]
    handles = {}
    want = {}
    for p in paths:
        full = os.path.join(m.mnt, p)
        handles[p] = handle_of(full)
        is_dir = os.path.isdir(full)
        want[p] = (is_dir, sorted(os.listdir(full)) if is_dir else open(full, "rb").read())
    os.sync()

    for when in ["the kernel's caches dropped", "a remount"]:
        if when == "a remount":
            m.remount()
        drop_kernel_caches()
        for p in paths:
            is_dir, content = want[p]
            try:
                got = seen(m.mnt, handles[p], is_dir)
            except OSError as e:
                raise AssertionError(f"{p} after {when}: {e}") from e
            assert got == content, f"{p} after {when}"

    # Through a handle, a file opens for writing too, and the change shows by its name.
    fd = open_by(m.mnt, handles["d/sub/deeper/b"], os.O_WRONLY)
    os.pwrite(fd, b"B", 0)
    os.close(fd)
    assert open(os.path.join(d, "sub", "deeper", "b"), "rb").read() == b"Bee"
    m.umount()
    m.check()


def test_a_removed_files_handle_is_stale(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.mkdir(d)
    for i in range(50):
        write(os.path.join(d, f"f{i}"), b"x" * i)
    handles = [handle_of(os.path.join(d, f"f{i}")) for i in range(50)]
    for i in range(0, 50, 2):
        os.unlink(os.path.join(d, f"f{i}"))
    os.rename(os.path.join(d, "f1"), os.path.join(m.mnt, "moved"))
    drop_kernel_caches()
    for i in range(50):
        if i % 2 == 0:
            assert stale(m.mnt, handles[i]), f"removed f{i} opened by its handle"
        else:
            assert seen(m.mnt, handles[i], False) == b"x" * i, f"f{i}"
    m.remount()
    assert stale(m.mnt, handles[0])
    assert seen(m.mnt, handles[1], False) == b"x"


def test_a_removed_cubes_handles_are_stale_not_the_next_cubes(scion_mount):
    m = scion_mount
    q = os.path.join(m.mnt, "q")
    assert m.run("cube", "create", q).returncode == 0
    write(os.path.join(q, "f"), b"first cube")
    old = handle_of(os.path.join(q, "f"))
    old_root = handle_of(q)
    assert m.run("cube", "remove", q).returncode == 0
    shutil.rmtree(q)
    # A new cube, where the last one was: the same inode numbers inside it.
    assert m.run("cube", "create", q).returncode == 0
    write(os.path.join(q, "f"), b"second cube")
    for when in ["now", "after a remount"]:
        if when != "now":
            m.remount()
        drop_kernel_caches()
        assert stale(m.mnt, old), f"a removed cube's file opened by its handle {when}"
        assert stale(m.mnt, old_root), f"a removed cube's root opened by its handle {when}"
    assert open(os.path.join(q, "f"), "rb").read() == b"second cube"


def test_snapshot_directories_by_handle_with_a_visible_snapdir(scion_store):
    """The kernel connects a directory found by number to the tree by listing its parent
    for its name; a hidden `.snapshot` is in no listing, so directories below it need
    `-o snapdir=visible` once the kernel has dropped them (files need nothing)."""
    m = scion_store
    m.mount("snapdir=visible")
    os.makedirs(os.path.join(m.mnt, "d", "sub", "deeper"))
    write(os.path.join(m.mnt, "d", "sub", "deeper", "b"), b"b")
    assert m.run("snapshot", os.path.join(m.mnt, "d"), "--name", "s1").returncode == 0
    for p, names in [("d/.snapshot/s1/sub/deeper", [".snapshot", "b"]), ("d/.snapshot/s1", [".snapshot", "sub"]),
                     ("d/.snapshot", ["s1"])]:
        h = handle_of(os.path.join(m.mnt, p))
        m.umount()
        m.mount("snapdir=visible")
        drop_kernel_caches()
        assert seen(m.mnt, h, True) == names, p
