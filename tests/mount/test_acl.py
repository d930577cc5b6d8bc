"""POSIX ACLs through the mount, as ext4 gives them: enforcement of named entries, default ACL
inheritance (the ACL masks the mode, the umask does not apply), chmod rewriting the ACL, and
all of it after a remount."""

import os
import pwd
import struct
import subprocess

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="scion-specific, needs root")

USER = "scion-test"
USER_OBJ, USER_E, GROUP_OBJ, GROUP_E, MASK, OTHER = 1, 2, 4, 8, 0x10, 0x20
NOID = 0xFFFFFFFF


def acl(*entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def entries(value):
    return [struct.unpack("<HHI", value[4 + 8 * k: 12 + 8 * k]) for k in range((len(value) - 4) // 8)]


def uid():
    try:
        return pwd.getpwnam(USER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
        return pwd.getpwnam(USER).pw_uid


def as_user(cmd):
    return subprocess.run(["su", USER, "-s", "/bin/sh", "-c", cmd], capture_output=True, text=True)


def test_named_user_entry_is_enforced(scion_mount):
    u = uid()
    d = os.path.join(scion_mount.mnt, "shared")
    os.mkdir(d, 0o755)
    # Let the user reach the mount point.
    p = scion_mount.mnt
    while p != "/":
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = os.path.dirname(p)
    r = as_user(f"touch {d}/denied")
    assert r.returncode != 0, "a 0755 root directory must refuse other users"
    os.setxattr(d, "system.posix_acl_access",
                acl((USER_OBJ, 7, NOID), (USER_E, 7, u), (GROUP_OBJ, 5, NOID), (MASK, 7, NOID), (OTHER, 5, NOID)))
    assert os.stat(d).st_mode & 0o777 == 0o775, "the mask shows in the group bits"
    r = as_user(f"touch {d}/allowed")
    assert r.returncode == 0, r.stderr
    scion_mount.remount()
    r = as_user(f"touch {d}/allowed-after-remount")
    assert r.returncode == 0, r.stderr


def test_default_acl_inheritance_and_chmod(scion_mount):
    u = uid()
    d = os.path.join(scion_mount.mnt, "inherit")
    os.mkdir(d, 0o755)
    default = acl((USER_OBJ, 7, NOID), (USER_E, 5, u), (GROUP_OBJ, 5, NOID), (MASK, 7, NOID), (OTHER, 0, NOID))
    os.setxattr(d, "system.posix_acl_default", default)
    old = os.umask(0o077)  # ignored where a default ACL applies
    try:
        fd = os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY, 0o666)
        os.close(fd)
        os.mkdir(os.path.join(d, "sub"), 0o777)
    finally:
        os.umask(old)
    f = os.path.join(d, "f")
    assert os.stat(f).st_mode & 0o777 == 0o660
    got = entries(os.getxattr(f, "system.posix_acl_access"))
    assert (USER_E, 5, u) in got and (MASK, 6, NOID) in got, got
    sub = os.path.join(d, "sub")
    assert os.getxattr(sub, "system.posix_acl_default") == default
    assert os.stat(sub).st_mode & 0o777 == 0o770
    os.chmod(f, 0o640)
    got = entries(os.getxattr(f, "system.posix_acl_access"))
    assert (MASK, 4, NOID) in got and (OTHER, 0, NOID) in got and (USER_OBJ, 6, NOID) in got, got
    # An ACL that says no more than a mode is not kept.
    os.setxattr(f, "system.posix_acl_access", acl((USER_OBJ, 7, NOID), (GROUP_OBJ, 4, NOID), (OTHER, 4, NOID)))
    assert os.stat(f).st_mode & 0o777 == 0o744
    with pytest.raises(OSError):
        os.getxattr(f, "system.posix_acl_access")
    scion_mount.remount()
    assert os.getxattr(sub, "system.posix_acl_default") == default
    assert os.stat(f).st_mode & 0o777 == 0o744
