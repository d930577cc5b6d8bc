"""rewinddir sees the directory as it is now (issue 36 item 5, xfstests generic/471):
POSIX says a rewinddir makes a directory stream refer to the directory's current state.
Before, the listing taken at opendir was served again."""

import ctypes
import ctypes.util
import os

import pytest


libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64), ("d_reclen", ctypes.c_ushort),
                ("d_type", ctypes.c_ubyte), ("d_name", ctypes.c_char * 256)]


libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.rewinddir.argtypes = [ctypes.c_void_p]
libc.closedir.argtypes = [ctypes.c_void_p]


def names(d):
    out = set()
    while True:
        e = libc.readdir(d)
        if not e:
            return out
        out.add(e.contents.d_name.decode())


@pytest.mark.parametrize("count", [3, 3000])
def test_rewinddir_sees_names_added_and_removed(scion_mount, count):
    m = scion_mount
    top = os.path.join(m.mnt, "d")
    os.makedirs(top)
    for i in range(count):
        open(os.path.join(top, f"f{i}"), "w").close()
    d = libc.opendir(top.encode())
    assert d
    try:
        first = names(d)
        assert {f"f{i}" for i in range(count)} <= first
        open(os.path.join(top, "added"), "w").close()
        os.unlink(os.path.join(top, "f0"))
        libc.rewinddir(d)
        again = names(d)
        assert "added" in again and "f0" not in again, sorted(again - first)
    finally:
        libc.closedir(d)


def test_names_made_between_opendir_and_rewinddir(scion_mount):
    """generic/471's case: nothing read before the rewind, 2,000 names made after opendir."""
    top = os.path.join(scion_mount.mnt, "d")
    os.makedirs(top)
    d = libc.opendir(top.encode())
    assert d
    try:
        for i in range(2000):
            open(os.path.join(top, str(i)), "w").close()
        libc.rewinddir(d)
        assert names(d) == {".", ".."} | {str(i) for i in range(2000)}
    finally:
        libc.closedir(d)
