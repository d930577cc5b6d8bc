"""scion as an ordinary user: mount through fusermount3, use, unmount, check."""

import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import PLAIN, copy_scion

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="needs root to create a user")

USER = "scion-test"


def as_user(cmd, timeout=60):
    return subprocess.run(["su", USER, "-s", "/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)


def test_ordinary_user_mounts_through_fusermount3():
    if shutil.which("fusermount3") is None:
        pytest.fail("fusermount3 missing (apt-get install fuse3)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
    root = tempfile.mkdtemp(prefix="user-", dir="/tmp")
    os.chmod(root, 0o777)
    # The binary must be reachable by the user.
    exe = copy_scion(root)
    store, mnt = os.path.join(root, "store"), os.path.join(root, "mnt")
    try:
        r = as_user(f"mkdir {mnt} && {exe} init {store} && {exe} mount {store} {mnt} && "
                    f"echo hello > {mnt}/f && mkdir {mnt}/d && cat {mnt}/f && stat -c %U {mnt}/f")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.split()[-2:] == ["hello", USER], r.stdout
        with open(f"/proc/self/mountinfo") as f:
            line = [l for l in f if f" {mnt} " in l]
        assert line and "user_id=" in line[0], line
        r = as_user(f"{exe} umount {mnt} && {exe} check {store}")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "clean" in r.stdout
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
