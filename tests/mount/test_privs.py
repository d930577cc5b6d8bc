"""setuid and setgid go when someone without CAP_FSETID changes a file's data (issue 36 item
2; xfstests generic/355, 683-685, 375), as the kernel's rules for local filesystems say
(setattr_should_drop_suidgid, posix_acl_update_mode): an O_DIRECT write, every fallocate
mode, and an access ACL set by the owner outside the file's group. Before, the daemon
cleared them on a direct write but the kernel kept showing the old mode, fallocate kept
them, and setfacl kept setgid."""

import os
import pwd
import subprocess

import pytest

USER = "scion-privs"


def user():
    try:
        p = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
        p = pwd.getpwnam(USER)
    return p.pw_uid, p.pw_gid


def as_user(cmd):
    r = subprocess.run(["su", USER, "-s", "/bin/sh", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def mode(p):
    return os.stat(p).st_mode & 0o7777


@pytest.fixture
def victim(scion_mount):
    uid, gid = user()
    p = scion_mount.mnt  # the user reaches the mount point
    while p != "/":
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = os.path.dirname(p)
    f = os.path.join(scion_mount.mnt, "f")
    with open(f, "wb") as h:
        h.write(b"x" * 8192)
    os.chown(f, uid, gid)
    return f


@pytest.mark.parametrize("how", [
    "dd if=/dev/zero of={f} bs=4k count=1 oflag=direct conv=notrunc status=none",
    "fallocate -l 64k {f}",
    "fallocate -p -o 0 -l 4k {f}",
    "fallocate -z -o 0 -l 4k {f}",
])
def test_a_change_by_the_owner_drops_setuid(victim, how):
    # 06755 with group execute: both go; 06644: setuid goes, setgid (no group execute, the
    # owner in the group) stays, as on ext4.
    for before, after in ((0o6755, 0o755), (0o6644, 0o2644)):
        os.chmod(victim, before)
        assert mode(victim) == before
        # What the user sees at once (the kernel's cached mode), then what the daemon holds.
        seen = int(as_user(how.format(f=victim) + f"; stat -c %a {victim}").stdout.split()[-1], 8)
        assert seen == after, f"{how}: {oct(before)} -> {oct(seen)} seen by the writer"
        assert mode(victim) == after, f"{how}: {oct(before)} -> {oct(mode(victim))}"


def test_root_keeps_them(victim):
    os.chmod(victim, 0o6755)
    subprocess.run(["fallocate", "-l", "64k", victim], check=True)
    assert mode(victim) == 0o6755


def test_an_acl_set_outside_the_files_group_drops_setgid(victim):
    if subprocess.run(["which", "setfacl"], capture_output=True).returncode != 0:
        pytest.skip("no setfacl (Debian: acl)")
    os.chown(victim, user()[0], 0)  # the owner is not in group root
    os.chmod(victim, 0o2755)
    as_user(f"setfacl -m u::rwx,g::rwx,o::rwx {victim}")
    assert mode(victim) == 0o777
    os.chown(victim, *user())  # in the group now: setgid stays
    os.chmod(victim, 0o2755)
    as_user(f"setfacl -m u::rwx,g::rwx,o::rwx {victim}")
    assert mode(victim) == 0o2777
