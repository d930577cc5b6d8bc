"""fsx (xfstests' ltp/fsx, a file exerciser no one here wrote) over NFS: scion's export
mounted through fuse-nfs (libnfs), random reads, writes, truncates and mmaps of one file,
each read checked by fsx against its own model of the file; then the file read through the
FUSE mount must hold the same bytes as over NFS. fsx is built by scripts/xfstests; CI
(scripts/test) runs this file again after xfstests with SCION_REQUIRE_FSX=1, so it cannot
be skipped there."""

import os
import random
import subprocess

import pytest

from conftest import PLAIN
from scion_helpers import fuse_nfs_client, mount_fuse_nfs, serve_nfs

FSX = os.environ.get("FSX", "/var/tmp/scion-xfstests/xfstests/ltp/fsx")

pytestmark = pytest.mark.skipif(PLAIN or os.geteuid() != 0, reason="needs a scion mount and root")


def test_fsx_through_nfs(scion_mount):
    if not os.access(FSX, os.X_OK):
        if os.environ.get("SCION_REQUIRE_FSX") == "1":
            pytest.fail(f"no fsx at {FSX} (scripts/xfstests builds it)")
        pytest.skip(f"no fsx at {FSX} (scripts/xfstests builds it)")
    client = fuse_nfs_client()
    if client is None:
        pytest.fail("fuse-nfs could not be built (scripts/fuse-nfs)")
    m = scion_mount
    port = serve_nfs(m)
    nfsmnt = os.path.join(m.root, "nfs")
    mount_fuse_nfs(client, port, nfsmnt, "--hard_remove", "--use_ino")
    try:
        seed = int(os.environ.get("SCION_SEED", random.randrange(1, 1 << 30)))
        ops = int(os.environ.get("SCION_NFS_FSX_OPS", "10000"))
        print(f"fsx seed={seed} ops={ops}")
        r = subprocess.run([FSX, "-q", "-N", str(ops), "-S", str(seed), "-P", m.root,
                            f"{nfsmnt}/fsxfile"], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"fsx -S {seed} failed:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
        with open(f"{nfsmnt}/fsxfile", "rb") as f:
            over_nfs = f.read()
        with open(f"{m.mnt}/fsxfile", "rb") as f:
            through_mount = f.read()
        assert over_nfs == through_mount, "the file differs between NFS and the FUSE mount"
    finally:
        subprocess.run(["umount", "-l", nfsmnt], check=False)
