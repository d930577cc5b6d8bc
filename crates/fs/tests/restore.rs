//! `restore` on random trees, differentially: the restored tree equals what the snapshot
//! held (names, kinds, modes, owners, mtimes, bytes, symlink targets, xattrs, hard links
//! within it), the live tree's later changes are set aside intact (or replaced), data is
//! shared, not copied (the store grows by records, not by file bytes), and the store checks
//! clean.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use scion_fs::{Fs, Ino, Kind};

fn random_tree(fs: &mut Fs, rng: &mut rand::rngs::StdRng, dir: Ino, depth: u32, files: &mut Vec<Ino>) {
    for i in 0..rng.gen_range(1..6) {
        let name = format!("n{i}");
        match rng.gen_range(0..10) {
            0..=4 => {
                let len = if rng.gen_bool(0.3) {
                    rng.gen_range(100_000..400_000)
                } else {
                    rng.gen_range(0..3000)
                };
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                let f = mkfile(fs, dir, &name, &data);
                fs.setattr(
                    f,
                    scion_fs::SetAttr {
                        mode: Some(rng.gen_range(0o400..0o777)),
                        uid: Some(rng.gen_range(0..3)),
                        ..Default::default()
                    },
                )
                .unwrap();
                if rng.gen_bool(0.3) {
                    fs.setxattr(f, b"user.tag", name.as_bytes(), 0).unwrap();
                }
                files.push(f);
            }
            5 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())];
                fs.link(f, dir, name.as_bytes()).unwrap();
            }
            6 => {
                fs.mknod(dir, name.as_bytes(), Kind::Symlink, 0o777, 0, 0, 0, 0, b"../target")
                    .unwrap();
            }
            7 => {
                fs.mknod(dir, name.as_bytes(), Kind::Fifo, 0o640, 0, 1, 1, 0, &[])
                    .unwrap();
            }
            _ if depth < 3 => {
                let d = fs
                    .mknod(dir, name.as_bytes(), Kind::Dir, 0o750, 0, 2, 2, 0, &[])
                    .unwrap()
                    .ino;
                random_tree(fs, rng, d, depth + 1, files);
            }
            _ => {}
        }
    }
}

#[test]
fn restored_trees_equal_the_snapshot() {
    for seed in 0..8u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (_tmp, store, mut fs) = new_store();
        let root = fs.root();
        let w = fs.mknod(root, b"w", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let t = fs.mknod(w, b"t", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        random_tree(&mut fs, &mut rng, t, 0, &mut Vec::new());
        fs.snapshot(w, b"s", b"/w").unwrap();
        let mut want = Vec::new();
        describe(&mut fs, t, "", &mut want);
        // Change the live tree: rewrite, remove, add.
        let first = fs.readdir(t).unwrap().into_iter().next().unwrap();
        if first.kind == Kind::Dir {
            fs.rename(t, &first.name, root, b"moved", 0).unwrap();
        } else {
            fs.unlink(t, &first.name).unwrap();
        }
        mkfile(&mut fs, t, "new", b"after the snapshot");
        let mut later = Vec::new();
        describe(&mut fs, t, "", &mut later);
        fs.checkpoint().unwrap();
        let before = std::fs::metadata(store.join("packs/00000001.pack"))
            .map(|m| m.len())
            .unwrap_or(0);

        let replace = seed % 2 == 1;
        let src = fs.in_snapshot(b"w/t", b"s").unwrap();
        assert_eq!(src, b"w/.snapshot/s/t");
        let r = fs.restore(&src, b"w/t", replace, "2026-11-24T201502Z").unwrap();
        let t2 = fs.resolve_path(b"w/t").unwrap();
        let mut got = Vec::new();
        describe(&mut fs, t2, "", &mut got);
        // Restoring ends with the mtimes of the snapshot's directories too.
        assert_eq!(got, want, "seed {seed}");
        if replace {
            assert!(r.kept_as.is_none());
            assert!(fs.resolve_path(b"w/t.scion-restore-2026-11-24T201502Z").is_err());
        } else {
            assert_eq!(r.kept_as.as_deref(), Some(&b"w/t.scion-restore-2026-11-24T201502Z"[..]));
            let kept = fs.resolve_path(b"w/t.scion-restore-2026-11-24T201502Z").unwrap();
            let mut k = Vec::new();
            describe(&mut fs, kept, "", &mut k);
            assert_eq!(k, later, "seed {seed}: what was there is kept as it was");
        }
        fs.checkpoint().unwrap();
        let after = std::fs::metadata(store.join("packs/00000001.pack"))
            .map(|m| m.len())
            .unwrap_or(0);
        // Shared, not copied: the packs grow by tree nodes, far less than the data restored.
        assert!(
            after - before < 64 * 1024 + r.bytes / 4,
            "seed {seed}: {} bytes written for {} restored",
            after - before,
            r.bytes
        );
        drop(fs);
        committed(&store);
        let mut fs = open(&store);
        let t3 = fs.resolve_path(b"w/t").unwrap();
        let mut again = Vec::new();
        describe(&mut fs, t3, "", &mut again);
        assert_eq!(again, want, "seed {seed}: after reopening");
        fs.close().unwrap();
    }
}

/// An ordinary user's restore copies as their `cp -a` would: theirs, group kept where they
/// are in it, no setuid or setgid from others, no `security.*` attributes; a file they cannot
/// read stops it; `--replace` and a destination of someone else's are refused.
#[test]
fn a_users_restore_is_their_own_copy() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let bob = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![50] };
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 1000, 1000, 0, &[]).unwrap().ino;
    let prog = fs.mknod(d, b"prog", Kind::File, 0o6755, 0, 0, 50, 0, &[]).unwrap().ino;
    fs.write(prog, 0, b"#!/bin/true\n").unwrap();
    fs.setxattr(prog, b"security.capability", b"\x01\x00\x00\x02", 0).unwrap();
    fs.setxattr(prog, b"user.note", b"kept", 0).unwrap();
    fs.mknod(d, b"his", Kind::File, 0o4755, 0, 1000, 1000, 0, &[]).unwrap();
    fs.snapshot(d, b"s", b"/d").unwrap();
    let r = fs.restore_as(b"d/.snapshot/s/prog", b"d/prog2", false, "t", Some(&bob)).unwrap();
    assert_eq!(r.files, 1);
    let p2 = lookup(&mut fs, d, "prog2").unwrap();
    let a = fs.getattr(p2).unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (1000, 50, 0o755), "theirs, group kept, no setuid/setgid");
    assert_eq!(read_all(&mut fs, p2), b"#!/bin/true\n");
    assert!(fs.getxattr(p2, b"security.capability").is_err());
    assert_eq!(fs.getxattr(p2, b"user.note").unwrap(), b"kept");
    fs.restore_as(b"d/.snapshot/s/his", b"d/his2", false, "t", Some(&bob)).unwrap();
    let h = lookup(&mut fs, d, "his2").unwrap();
    assert_eq!(fs.getattr(h).unwrap().perm, 0o4755, "their own setuid file stays so");
    // Unreadable to them: refused.
    let secret = fs.mknod(d, b"secret", Kind::File, 0o600, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.write(secret, 0, b"root only").unwrap();
    fs.snapshot(d, b"s2", b"/d").unwrap();
    let e = fs.restore_as(b"d/.snapshot/s2/secret", b"d/mine", false, "t", Some(&bob)).unwrap_err();
    assert_eq!(e, scion_fs::errno::EACCES);
    // --replace, and a destination that is not theirs.
    let e = fs.restore_as(b"d/.snapshot/s/his", b"d/his2", true, "t", Some(&bob)).unwrap_err();
    assert_eq!(e, scion_fs::errno::EPERM);
    let e = fs.restore_as(b"d/.snapshot/s/his", b"d/prog", false, "t", Some(&bob)).unwrap_err();
    assert_eq!(e, scion_fs::errno::EPERM);
}

/// A device node is a privilege: an ordinary user's restore of a tree that holds one is
/// refused whole (their `cp -a` fails at mknod), and a refused restore leaves the destination
/// as it was: nothing of the partial copy, and what stood there back in its place.
#[test]
fn a_users_restore_of_a_device_node_is_refused_and_leaves_nothing() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let bob = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![] };
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 1000, 1000, 0, &[]).unwrap().ino;
    let dev = fs.mknod(d, b"dev", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let a = fs.mknod(dev, b"a", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.write(a, 0, b"first, copied before the node").unwrap();
    // st_rdev 1:11 (/dev/kmsg), world-readable as on many systems.
    fs.mknod(dev, b"kmsg", Kind::CharDev, 0o644, 0, 0, 0, (1 << 8) | 11, &[]).unwrap();
    fs.snapshot(d, b"s", b"/d").unwrap();
    let e = fs.restore_as(b"d/.snapshot/s/dev", b"d/mine", false, "t", Some(&bob)).unwrap_err();
    assert_eq!(e, scion_fs::errno::EPERM);
    assert_eq!(lookup(&mut fs, d, "mine"), Err(scion_fs::errno::ENOENT), "nothing of the refused copy is left");
    // What stood at the destination is put back, not left set aside.
    let there = fs.mknod(d, b"there", Kind::File, 0o644, 0, 1000, 1000, 0, &[]).unwrap().ino;
    fs.write(there, 0, b"bob's").unwrap();
    let e = fs.restore_as(b"d/.snapshot/s/dev", b"d/there", false, "t", Some(&bob)).unwrap_err();
    assert_eq!(e, scion_fs::errno::EPERM);
    let names: Vec<Vec<u8>> = fs.readdir(d).unwrap().into_iter().map(|e| e.name).collect();
    assert!(!names.iter().any(|n| n.starts_with(b"there.scion-restore")), "{names:?}");
    let back = lookup(&mut fs, d, "there").unwrap();
    assert_eq!(read_all(&mut fs, back), b"bob's");
    // Root's restore makes the node, as root's `cp -a` would.
    fs.restore(b"d/.snapshot/s/dev", b"d/roots", false, "t").unwrap();
    let roots = lookup(&mut fs, d, "roots").unwrap();
    let k = lookup(&mut fs, roots, "kmsg").unwrap();
    assert_eq!(fs.getattr(k).unwrap().rdev, (1 << 8) | 11);
}
