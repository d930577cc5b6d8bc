"""Stores on host filesystems other than the usual ones (issue 35 item 5): the README
promises a store "on any filesystem", so one on exFAT (through exfat-fuse on a loop device:
no Unix sockets, no hard links, no xattrs, no permissions) mounts, serves, survives a
SIGKILL and checks clean. Before, the mount failed binding `STORE/control.sock`."""

import contextlib
import json
import os
import shutil
import socket
import subprocess

import pytest

from conftest import PLAIN

pytestmark = pytest.mark.skipif(PLAIN, reason="needs the scion daemon")


@contextlib.contextmanager
def exfat_host(m, size="256M"):
    """`m`'s store on a fresh exFAT volume (an image on a loop device, served by
    exfat-fuse); afterwards scion's daemon is killed if still up and the volume taken down."""
    img = os.path.join(m.root, "exfat.img")
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    subprocess.run(["mkfs.exfat", img], check=True, stdout=subprocess.DEVNULL)
    loop = subprocess.run(["losetup", "-f", "--show", img], check=True, capture_output=True, text=True).stdout.strip()
    vol = os.path.join(m.root, "exfat")
    os.makedirs(vol)
    try:
        subprocess.run(["mount.exfat-fuse", "-o", "umask=077", loop, vol], check=True, capture_output=True)
        shutil.rmtree(m.store)
        m.store = os.path.join(vol, "store")
        try:
            yield m
        finally:
            if m.mounted:
                m.kill9()
            subprocess.run(["umount", vol], check=False)
    finally:
        subprocess.run(["losetup", "-d", loop], check=False)


def test_a_store_on_exfat(scion_store):
    m = scion_store
    with exfat_host(m):
        # The host has no sockets (the reason this test exists) and no hard links.
        s = socket.socket(socket.AF_UNIX)
        vol = os.path.dirname(m.store)
        with pytest.raises(OSError):
            s.bind(os.path.join(vol, "probe.sock"))
        s.close()
        with open(os.path.join(vol, "a"), "w"):
            pass
        with pytest.raises(OSError):
            os.link(os.path.join(vol, "a"), os.path.join(vol, "b"))

        m.init()
        m.mount()
        with open(os.path.join(m.store, "control")) as f:
            sock = f.read().strip()
        assert not sock.startswith(m.store) and os.path.exists(sock), sock
        d = os.path.join(m.mnt, "d")
        os.makedirs(os.path.join(d, "sub"))
        want = {}
        for i in range(40):
            data = os.urandom(1000 * i)
            want[f"sub/f{i}"] = data
            with open(os.path.join(d, "sub", f"f{i}"), "wb") as f:
                f.write(data)
        os.link(os.path.join(d, "sub", "f1"), os.path.join(d, "hard"))
        os.symlink("sub/f2", os.path.join(d, "link"))
        os.setxattr(os.path.join(d, "sub"), "user.k", b"v")
        assert m.run("snapshot", d, "--name", "s").returncode == 0
        assert m.run("clone", d, os.path.join(m.mnt, "c")).returncode == 0
        c = os.path.join(m.mnt, "c")
        with open(os.path.join(c, "sub", "f3"), "wb") as f:
            f.write(b"changed")
            f.flush()
            os.fsync(f.fileno())
        r = m.run("list", "--json", m.mnt)
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.describe()
        m.kill9()
        m.mount()
        for name, data in want.items():
            with open(os.path.join(d, ".snapshot", "s", name), "rb") as f:
                assert f.read() == data, name
        with open(os.path.join(c, "sub", "f3"), "rb") as f:
            assert f.read() == b"changed"
        assert os.stat(os.path.join(d, "hard")).st_ino == os.stat(os.path.join(d, "sub", "f1")).st_ino
        assert os.readlink(os.path.join(c, "link")) == "sub/f2"
        assert os.getxattr(os.path.join(c, "sub"), "user.k") == b"v"
        m.umount()
        assert not os.path.exists(sock), "a clean unmount removes its socket"
        r = m.run("check", "--json", m.store)
        assert r.returncode == 0, r.describe()
        rep = json.loads(r.stdout.splitlines()[0])
        assert rep["problems"] == [] and rep["leftovers"] == [], rep
