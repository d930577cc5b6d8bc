"""The differential test over NFS: the same random operations on a plain reference directory
and on scion's NFS export mounted through fuse-nfs (libnfs, a client no one here wrote;
built by scripts/fuse-nfs), with the operations NFSv3 can express (no extended attributes,
no renameat2 flags, no fallocate or hole punching, no FIFOs: NFSv3 has no call for them, and
MKNOD is not served; no open handles kept across removals, which a stateless protocol cannot
honour). Every batch, both trees are compared as the differential test compares
them, without xattrs; the same tree through scion's own FUSE mount is compared too.

  SCION_NFS_OPS   operations (default 1500, batches of 100); SCION_SEED as for the
                  differential test.
"""

import os
import shutil
import stat
import subprocess

import pytest

from conftest import PLAIN
from scion_helpers import compare_snapshots, drop_kernel_caches, fuse_nfs_client, mount_fuse_nfs, serve_nfs, snapshot
from test_differential import BATCH, Differential, Mismatch, env_int, get_seed, save_log

NOT_IN_NFSV3 = {"setxattr", "removexattr", "rename2", "fallocate", "punch", "mkfifo",
                # Open handles: NFSv3 keeps no state, so a file removed while open is gone
                # for its holders too (clients hide this by renaming it instead: silly rename).
                "hopen", "hwrite", "hread", "hclose"}

pytestmark = pytest.mark.skipif(
    PLAIN or os.geteuid() != 0 or shutil.which("nfs-cat") is None,
    reason="needs a scion mount, root, and libnfs (scripts/setup)",
)


class NfsDifferential(Differential):
    OPS = [(n, w) for n, w in Differential.OPS if n not in NOT_IN_NFSV3]

    def __init__(self, ref, nfs_root, mnt_root, seed):
        super().__init__(ref, nfs_root, seed)
        self.fuse_root = os.path.join(mnt_root, "w")

    def op_link(self, ents):
        # libnfs resolves the old path of a LINK following symlinks (a hard link to a
        # symlink becomes one to its target): a client's quirk, so only files are linked.
        ents = [e for e in ents if e[1] == "f" or not e[0]]
        if any(e[1] == "f" for e in ents):
            super().op_link(ents)

    # libnfs's path calls follow symlinks in chown and utimes (fuse-nfs has no lchown),
    # so a symlink's own owner and times cannot be set through this client: not asked.
    def op_chown(self, ents):
        super().op_chown([e for e in ents if e[1] != "l"])

    def op_utime(self, ents):
        # NFSv3 carries seconds in 32 bits (to 2106): times past that are not asked.
        e = self.pick([e for e in ents if e[1] != "l"], allow_root=True)
        if e is None:
            return
        ns = tuple(self.rng.choice([0, self.rng.randrange(1 << 32) * 10**9, self.rng.randrange(10**18, 4 * 10**18)])
                   for _ in range(2))
        res = self.both(f"utime {e[0]!r} ns={ns}",
                        lambda root: os.utime(os.path.join(root, e[0]) if e[0] else root,
                                              ns=ns, follow_symlinks=False))
        if res[0] == "ok":
            self.mtime_valid.add(self.ref_ino(e[0]))

    def op_mkdir(self, ents):
        # fuse-nfs makes a directory and then chmods it to the mode it was given, which drops
        # the setgid bit a setgid parent passes down (the kernel's NFS client sends the mode
        # in the MKDIR). So both sides are then set to the mode the reference got.
        rel = self.new_path(ents, existing_ok=0.1)
        mode = self.rng.choice([0o755, 0o700, 0o2775, 0o1777, 0o3755, 0o000, 0o777])
        self.invalidate(rel)
        res = self.both(f"mkdir {rel!r} {mode:o}", lambda root: os.mkdir(os.path.join(root, rel), mode))
        if res[0] == "ok":
            got = stat.S_IMODE(os.lstat(os.path.join(self.roots[0], rel)).st_mode)
            self.both(f"chmod {rel!r} {got:o} (what mkdir gave)", lambda root: os.chmod(os.path.join(root, rel), got))

    def compare(self, when):
        ref, nfs = self.roots
        drop_kernel_caches()
        a = snapshot(ref)
        # fuse-nfs sets times in whole seconds (libnfs's utimes takes seconds and
        # microseconds, and fuse-nfs passes seconds only).
        for e in a.values():
            e["xattrs"] = {}
            e["mtime_ns"] -= e["mtime_ns"] % 1_000_000_000
        valid = self.mtime_valid
        for label, root in (("nfs", nfs), ("scion", self.fuse_root)):
            b = snapshot(root)
            for e in b.values():
                e["xattrs"] = {}
                e["mtime_ns"] -= e["mtime_ns"] % 1_000_000_000
            diffs = compare_snapshots(a, b, label_b=label, root_a=ref, root_b=root,
                                      check_mtime=lambda rel, e: e["ino"] in valid)
            if diffs:
                raise Mismatch(f"seed={self.seed}: trees differ {when} ({len(diffs)} shown)\n  "
                               + "\n  ".join(diffs) + "\n" + self.tail())
        return len(a)


def test_differential_through_nfs(scion_mount):
    m = scion_mount
    client = fuse_nfs_client()
    if client is None:
        pytest.skip("fuse-nfs could not be built (scripts/fuse-nfs)")
    port = serve_nfs(m)
    nfsmnt = os.path.join(m.root, "nfs")
    # --hard_remove: no silly rename of files removed while open (libfuse's .fuse_hidden);
    # --use_ino: the server's file ids as inode numbers, so that hard links compare.
    mount_fuse_nfs(client, port, nfsmnt, "--hard_remove", "--use_ino")
    try:
        seed = get_seed()
        print(f"seed={seed}")
        old_umask = os.umask(0o022)
        d = NfsDifferential(m.ref, nfsmnt, m.mnt, seed)
        nops = env_int("SCION_NFS_OPS", 1500)
        try:
            for batch in range((nops + BATCH - 1) // BATCH):
                for _ in range(min(BATCH, nops - batch * BATCH)):
                    d.step()
                d.compare(f"after batch {batch + 1} (op #{d.nop})")
            d.close_handles()
        except BaseException:
            print(f"seed={seed}; full op log: {save_log(d, 'nfs-differential')}")
            raise
        finally:
            d.close_handles()
            os.umask(old_umask)
        print(f"seed={seed} ops={d.nop} counts={sorted(d.counts.items())}")
    finally:
        subprocess.run(["umount", "-l", nfsmnt], check=False)
