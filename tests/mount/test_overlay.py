"""scion as overlayfs's upper layer (xfstests generic/631): container engines keep image
layers and each container's writable layer as overlay upper directories. overlayfs asks an
upper layer reached through FUSE for RENAME_WHITEOUT, xattrs and d_type, else it refuses to
mount ("upper fs missing required features")."""
import os
import stat
import subprocess

import pytest


def overlay(m, tag):
    base = m.mnt
    merged = f"{base}/merged{tag}"
    for d in (merged, f"{base}/upper{tag}", f"{base}/work{tag}"):
        os.makedirs(d, exist_ok=True)
    opts = f"lowerdir={base}/lower,upperdir={base}/upper{tag},workdir={base}/work{tag},index=off"
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, merged], capture_output=True, text=True)
    if r.returncode != 0 and "unknown filesystem type" in r.stderr:
        pytest.skip("no overlayfs in this kernel")
    assert r.returncode == 0, r.stderr
    return merged


def whiteout(path):
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def test_an_overlay_with_its_upper_layer_on_scion(scion_mount):
    m = scion_mount
    os.makedirs(f"{m.mnt}/lower/etc")
    with open(f"{m.mnt}/lower/etc/access.conf", "w") as h:
        h.write("salts\n")
    with open(f"{m.mnt}/lower/etc/hosts", "w") as h:
        h.write("127.0.0.1 localhost\n")
    merged = overlay(m, 0)
    try:
        # generic/631's operations: a lower file renamed away (a whiteout left in its place
        # by RENAME_WHITEOUT), a new one made, and again.
        for _ in range(2):
            os.rename(f"{merged}/etc/access.conf", f"{merged}/etc/access.conf.bak")
            open(f"{merged}/etc/access.conf", "w").close()
        # A lower file removed and one renamed: whiteouts in the upper layer hide them.
        os.unlink(f"{merged}/etc/access.conf.bak")
        os.rename(f"{merged}/etc/hosts", f"{merged}/etc/hosts.old")
        assert sorted(os.listdir(f"{merged}/etc")) == ["access.conf", "hosts.old"]
        with open(f"{merged}/etc/hosts.old") as h:
            assert h.read() == "127.0.0.1 localhost\n"
    finally:
        subprocess.run(["umount", merged], check=True)
    assert whiteout(f"{m.mnt}/upper0/etc/hosts"), os.lstat(f"{m.mnt}/upper0/etc/hosts")
    # The layers survive a remount of scion: the same merged view.
    m.remount()
    merged = overlay(m, 0)
    try:
        assert sorted(os.listdir(f"{merged}/etc")) == ["access.conf", "hosts.old"]
        assert os.path.getsize(f"{merged}/etc/access.conf") == 0
    finally:
        subprocess.run(["umount", merged], check=True)
    # The lower layer is untouched.
    assert sorted(os.listdir(f"{m.mnt}/lower/etc")) == ["access.conf", "hosts"]
