"""O_TMPFILE through the mount (issue 36 item 7; xfstests generic/004, 389, 531): a file
made without a name is in no listing, `linkat` gives it a name and keeps its inode, and a
SIGKILLed daemon keeps it only if it was named before an fsync, with every byte it held.
overlayfs copies files up through it, and editors, systemd and git write files whole
before they appear this way."""

import ctypes
import ctypes.util
import errno
import hashlib
import os

import pytest

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_FOLLOW = 0x400


def link_fd(fd, path, dirfd=AT_FDCWD):
    """linkat of an open file by its /proc link, as `xfs_io -T` and glibc users do."""
    if libc.linkat(AT_FDCWD, f"/proc/self/fd/{fd}".encode(), dirfd, path.encode(), AT_SYMLINK_FOLLOW) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"linkat to {path}: {os.strerror(e)}")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_tmpfile_is_nameless_until_linked_and_survives_a_kill_only_named(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.mkdir(d)
    big = os.urandom((3 << 20) + 12345)
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
    os.write(fd, big)
    st = os.fstat(fd)
    assert (st.st_nlink, st.st_size) == (0, len(big))
    assert os.listdir(d) == []
    # One never named, and a file made after both (its object id replays after theirs).
    lost = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
    os.write(lost, b"never named" * 10000)
    with open(os.path.join(d, "after"), "wb") as f:
        f.write(b"made after")
    link_fd(fd, os.path.join(d, "named"))
    assert os.stat(os.path.join(d, "named")).st_ino == st.st_ino
    assert os.fstat(fd).st_nlink == 1
    os.pwrite(fd, b"changed after the link", 100)
    want = big[:100] + b"changed after the link" + big[122:]
    os.fsync(fd)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    m.kill9()
    os.close(fd)
    os.close(lost)
    m.mount()
    assert sorted(os.listdir(d)) == ["after", "named"]
    with open(os.path.join(d, "named"), "rb") as f:
        assert f.read() == want
    assert os.stat(os.path.join(d, "named")).st_ino == st.st_ino
    with open(os.path.join(d, "after"), "rb") as f:
        assert f.read() == b"made after"
    m.umount()
    m.check()


def test_o_excl_and_read_only_places_refuse_as_the_kernel_says(scion_mount):
    m = scion_mount
    d = os.path.join(m.mnt, "d")
    os.mkdir(d)
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
    os.write(fd, b"x")
    with pytest.raises(OSError) as e:
        link_fd(fd, os.path.join(d, "x"))
    assert e.value.errno == errno.ENOENT, "O_EXCL: never to be linked"
    os.close(fd)
    assert m.run("snapshot", d, "--name", "s").returncode == 0
    with pytest.raises(OSError) as e:
        os.open(os.path.join(d, ".snapshot", "s"), os.O_TMPFILE | os.O_RDWR, 0o600)
    assert e.value.errno == errno.EROFS
    # An ordinary user gets a file of their own where they may write, none where they may not
    # (the directories reached through descriptors opened before, so that the test's private
    # directories above the mount need not be searchable).
    os.chmod(d, 0o777)
    os.mkdir(os.path.join(m.mnt, "closed"), 0o755)
    open_dir = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    closed_dir = os.open(os.path.join(m.mnt, "closed"), os.O_RDONLY | os.O_DIRECTORY)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            t = os.open(f"/proc/self/fd/{open_dir}", os.O_TMPFILE | os.O_RDWR, 0o644)
            os.write(t, b"mine")
            link_fd(t, "theirs", open_dir)
            try:
                os.open(f"/proc/self/fd/{closed_dir}", os.O_TMPFILE | os.O_RDWR, 0o644)
                code = 2
            except PermissionError:
                code = 0
        except BaseException as e:
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.close(open_dir)
    os.close(closed_dir)
    assert os.waitstatus_to_exitcode(status) == 0
    st = os.stat(os.path.join(d, "theirs"))
    assert (st.st_uid, st.st_gid, st.st_size) == (65534, 65534, 4)
    m.umount()
    m.check()
