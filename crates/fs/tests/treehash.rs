//! `Fs::tree_hash`: equal for trees a user cannot tell apart, however they are stored (a
//! copy written in other pieces, a clone with patches, a snapshot, holes against stored
//! zeros), different when anything a user sees differs (a byte, a mode, an owner, an mtime,
//! an xattr, a symlink's target, a name, hard-link structure). And `chunk_changes`.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use scion_fs::treehash::{ChunkChange, HashMemo};
use scion_fs::{Fs, Ino, Kind, SetAttr, Ts};

fn ts(n: i64) -> Option<Ts> {
    Some(Ts { sec: 1_700_000_000 + n, nsec: 7 })
}

/// A file made with `data` written in pieces of `piece` bytes (0: one write).
fn file(fs: &mut Fs, dir: Ino, name: &str, data: &[u8], piece: usize) -> Ino {
    let f = fs.mknod(dir, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    if piece == 0 {
        fs.write(f, 0, data).unwrap();
    } else {
        for (k, c) in data.chunks(piece).enumerate() {
            if c.iter().any(|&b| b != 0) {
                fs.write(f, (k * piece) as u64, c).unwrap();
            }
        }
        fs.setattr(f, SetAttr { size: Some(data.len() as u64), ..Default::default() }).unwrap();
    }
    f
}

/// A random tree under `dir`, written with `piece`; the same `seed` gives the same tree.
fn build(fs: &mut Fs, dir: Ino, seed: u64, piece: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut dirs = vec![dir];
    let mut made = Vec::new();
    for i in 0..40 {
        let d = dirs[rng.gen_range(0..dirs.len())];
        let name = format!("e{i}");
        match rng.gen_range(0..8) {
            0 => dirs.push(fs.mknod(d, name.as_bytes(), Kind::Dir, 0o750, 0, 0, 0, 0, &[]).unwrap().ino),
            1 => {
                let l = fs.mknod(d, name.as_bytes(), Kind::Symlink, 0o777, 0, 0, 0, 0, b"somewhere").unwrap().ino;
                fs.setattr(l, SetAttr { mtime: ts(i), ..Default::default() }).unwrap();
            }
            2 if !made.is_empty() => {
                let (f, _): (Ino, u64) = made[rng.gen_range(0..made.len())];
                fs.link(f, d, name.as_bytes()).unwrap();
            }
            _ => {
                let n = [0, 10, 3000, 65536, 70_000, 300_000][rng.gen_range(0..6)];
                let mut data: Vec<u8> = (0..n).map(|_| rng.gen_range(0..3u8)).collect();
                if n > 200_000 {
                    data[70_000..200_000].fill(0); // a hole, or stored zeros
                }
                let f = file(fs, d, &name, &data, piece);
                fs.setattr(f, SetAttr { mode: Some(0o600 + rng.gen_range(0..0o100)), uid: Some(rng.gen_range(0..3)), mtime: ts(i), ..Default::default() }).unwrap();
                if rng.gen_bool(0.3) {
                    fs.setxattr(f, b"user.k", &[rng.gen()], 0).unwrap();
                }
                made.push((f, 0));
            }
        }
    }
    // Directories' times last, as cp -a sets them.
    for (k, d) in dirs.iter().enumerate().rev() {
        fs.setattr(*d, SetAttr { mtime: ts(100 + k as i64), ..Default::default() }).unwrap();
    }
}

fn hash(fs: &mut Fs, d: Ino) -> [u8; 32] {
    fs.tree_hash(d, &mut HashMemo::default()).unwrap()
}

#[test]
fn equal_trees_hash_alike_however_stored() {
    for seed in 0..6 {
        let (_tmp, _store, mut fs) = new_store();
        let root = fs.root();
        let a = fs.mknod(root, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let b = fs.mknod(root, b"b", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        build(&mut fs, a, seed, 0);
        fs.checkpoint().unwrap();
        build(&mut fs, b, seed, 1000); // other pieces, holes instead of zeros
        fs.setattr(a, SetAttr { mtime: ts(0), ..Default::default() }).unwrap();
        fs.setattr(b, SetAttr { mtime: ts(0), ..Default::default() }).unwrap();
        let ha = hash(&mut fs, a);
        assert_eq!(ha, hash(&mut fs, b), "seed {seed}");
        // A clone, a snapshot: the same; with one memo shared between them too.
        let c = fs.clone_dir(a, root, b"c", &[], b"/a").unwrap();
        assert_eq!(hash(&mut fs, c), ha);
        fs.snapshot(a, b"s", b"/a").unwrap();
        let s = lookup(&mut fs, a, ".snapshot").unwrap();
        let s = lookup(&mut fs, s, "s").unwrap();
        let mut memo = HashMemo::default();
        assert_eq!(fs.tree_hash(s, &mut memo).unwrap(), ha);
        assert_eq!(fs.tree_hash(c, &mut memo).unwrap(), ha);
        // A clone patched back to the same bytes: the same.
        let e = lookup(&mut fs, c, "e3").or_else(|_| lookup(&mut fs, c, "e4"));
        if let Ok(f) = e {
            if fs.getattr(f).unwrap().kind == Kind::File {
                let before = read_all(&mut fs, f);
                let m = fs.getattr(f).unwrap().mtime;
                if !before.is_empty() {
                    fs.write(f, 0, b"XY").unwrap();
                    fs.checkpoint().unwrap();
                    assert_ne!(hash(&mut fs, c), ha);
                    fs.write(f, 0, &before[..2.min(before.len())]).unwrap();
                    fs.setattr(f, SetAttr { mtime: Some(m), ..Default::default() }).unwrap();
                    fs.setattr(c, SetAttr { mtime: ts(0), ..Default::default() }).unwrap();
                    assert_eq!(hash(&mut fs, c), ha, "seed {seed}: patched back");
                }
            }
        }
    }
}

#[test]
fn anything_a_user_sees_changes_the_hash() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let a = fs.mknod(root, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let f = file(&mut fs, a, "f", &vec![1u8; 100_000], 0);
    let g = file(&mut fs, a, "g", &vec![1u8; 100_000], 0);
    fs.mknod(a, b"l", Kind::Symlink, 0o777, 0, 0, 0, 0, b"f").unwrap();
    let base = hash(&mut fs, a);
    let mut seen = vec![base];
    let mut differs = |fs: &mut Fs, what: &str| {
        let h = hash(fs, a);
        assert!(!seen.contains(&h), "{what} did not change the hash");
        seen.push(h);
    };
    fs.write(f, 99_999, &[2]).unwrap();
    differs(&mut fs, "a byte");
    fs.setattr(f, SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    differs(&mut fs, "a mode");
    fs.setattr(f, SetAttr { uid: Some(5), ..Default::default() }).unwrap();
    differs(&mut fs, "an owner");
    fs.setattr(g, SetAttr { mtime: ts(1), ..Default::default() }).unwrap();
    differs(&mut fs, "an mtime");
    fs.setxattr(g, b"user.x", b"1", 0).unwrap();
    differs(&mut fs, "an xattr");
    let l = lookup(&mut fs, a, "l").unwrap();
    fs.unlink(a, b"l").unwrap();
    fs.forget(l, 1);
    fs.mknod(a, b"l", Kind::Symlink, 0o777, 0, 0, 0, 0, b"g").unwrap();
    differs(&mut fs, "a symlink's target");
    fs.rename(a, b"g", a, b"h", 0).unwrap();
    differs(&mut fs, "a name");
    // Two names of one file against two files of the same bytes and metadata.
    let t1 = fs.mknod(root, b"t1", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let t2 = fs.mknod(root, b"t2", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let x = file(&mut fs, t1, "x", b"same", 0);
    fs.link(x, t1, b"y").unwrap();
    fs.setattr(x, SetAttr { mtime: ts(5), ..Default::default() }).unwrap();
    for n in ["x", "y"] {
        let f = file(&mut fs, t2, n, b"same", 0);
        fs.setattr(f, SetAttr { mtime: ts(5), ..Default::default() }).unwrap();
    }
    for d in [t1, t2] {
        fs.setattr(d, SetAttr { mtime: ts(9), ..Default::default() }).unwrap();
    }
    assert_ne!(hash(&mut fs, t1), hash(&mut fs, t2), "hard-link structure");
}

#[test]
fn chunk_changes_name_only_what_changed() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let a = fs.mknod(root, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    file(&mut fs, a, "f", &data, 0);
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(a, root, b"c", &[], b"/a").unwrap();
    let f = lookup(&mut fs, c, "f").unwrap();
    fs.write(f, 65536 + 10, b"0123456789abcdef").unwrap(); // a patch in chunk 1
    for at in [0, 8192, 20480] {
        fs.write(f, 2 * 65536 + at, &[0xff; 4096]).unwrap(); // chunk 2 layered (12 KiB of runs)
    }
    fs.write(f, 3 * 65536, &vec![9u8; 65536]).unwrap(); // chunk 3 rewritten
    fs.fallocate(f, 3, 4 * 65536, 65536).unwrap(); // chunk 4 a hole
    fs.checkpoint().unwrap();
    let (x, y) = (inode_of(&mut fs, a, "f"), inode_of(&mut fs, c, "f"));
    let got = fs.chunk_changes(&x, &y).unwrap();
    assert_eq!(
        got,
        [
            ChunkChange::Patch(1, vec![(10, b"0123456789abcdef".to_vec())]),
            ChunkChange::Patch(2, [0, 8192, 20480].map(|o| (o, vec![0xff; 4096])).to_vec()),
            ChunkChange::Data(3),
            ChunkChange::Hole(4)
        ]
    );
    // The layered chunk written back whole (a plain block of the original bytes) in a clone:
    // against the layered one, a chunk to send as data.
    let c2 = fs.clone_dir(c, root, b"c2", &[], b"/c").unwrap();
    let f2 = lookup(&mut fs, c2, "f").unwrap();
    fs.write(f2, 2 * 65536, &data[2 * 65536..3 * 65536]).unwrap();
    let mut want = data.clone();
    want[65536 + 10..65536 + 26].copy_from_slice(b"0123456789abcdef");
    want[3 * 65536..4 * 65536].fill(9);
    want[4 * 65536..5 * 65536].fill(0);
    fs.checkpoint().unwrap();
    assert_eq!(read_all(&mut fs, f2), want);
    let (y2, y) = (inode_of(&mut fs, c2, "f"), inode_of(&mut fs, c, "f"));
    assert_eq!(fs.chunk_changes(&y, &y2).unwrap(), [ChunkChange::Data(2)], "a layered chunk against a plain one");
}

fn inode_of(fs: &mut Fs, dir: Ino, name: &str) -> scion_fs::inode::Inode {
    let f = lookup(fs, dir, name).unwrap();
    fs.file_record(f).unwrap()
}

/// The engine's memo is shared by every hash it computes (a send hashes the new tree, then
/// its base). Two directories with the same entries but their own mode or mtime differing
/// (the live `tmp` after `rsync -a`, and a snapshot's) must not share a memo entry: the
/// snapshot hashed after the live tree once got the live directory's hash, and a receiver
/// holding an identical copy of the base refused the increment.
#[test]
fn a_shared_memo_keeps_directories_apart_that_differ_only_in_their_own_metadata() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let top = fs.mknod(root, b"top", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let sub = fs.mknod(top, b"tmp", Kind::Dir, 0o1777, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.mknod(sub, b"inner", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
    file(&mut fs, top, "f", b"bytes", 0);
    for d in [sub, top] {
        fs.setattr(d, SetAttr { mtime: ts(1), ..Default::default() }).unwrap();
    }
    fs.checkpoint().unwrap();
    fs.snapshot(top, b"s", b"/top").unwrap();
    let snap = fs.resolve_path(b"top/.snapshot/s").unwrap();
    let fresh = hash(&mut fs, snap);
    // Only the live tmp's own mtime changes (its entries, hence its content tree, do not).
    fs.setattr(sub, SetAttr { mtime: ts(2), ..Default::default() }).unwrap();
    fs.checkpoint().unwrap();
    let live = fs.content_hash_of(top).unwrap();
    let memoized = fs.content_hash_of(snap).unwrap();
    assert_eq!(memoized, fresh, "the snapshot's hash depends on what was hashed before");
    assert_ne!(live, memoized);
    fs.close().unwrap();
}

/// The content hashes a mount computed are kept across a clean unmount (`STORE/hash-memo`):
/// the next mount's first hash of the same tree walks none of it again (the memo answers
/// for the top directory), and gives the same hash. A memo file that is damaged or of
/// another version is ignored: the hash is computed again, and is the same.
#[test]
fn content_hashes_are_kept_across_mounts() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let t = fs.mknod(root, b"t", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for k in 0..20 {
        // (No hard links: a directory with some below is walked each time, memo or not.)
        let d = fs.mknod(t, format!("d{k}").as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for i in 0..30usize {
            let data: Vec<u8> = (0..[10, 3000, 70_000][i % 3]).map(|j| (j * 7 + i + k as usize) as u8).collect();
            let f = file(&mut fs, d, &format!("f{i}"), &data, 4096);
            fs.forget(f, 1);
        }
        fs.forget(d, 1);
    }
    fs.forget(t, 1);
    let t = lookup(&mut fs, root, "t").unwrap();
    let want = fs.content_hash_of(t).unwrap();
    fs.close().unwrap();
    let memo = store.join("hash-memo");
    assert!(memo.exists(), "no memo kept at unmount");

    // Inodes loaded by the first hash after a mount: with the memo, the top directory only.
    let first_hash = |store: &std::path::Path| {
        let mut fs = open(store);
        let root = fs.root();
        let t = lookup(&mut fs, root, "t").unwrap();
        let before = fs.memory().inodes;
        // (Read at its first use, not at open.)
        assert_eq!(fs.memory().hash_memo_entries, 0);
        let h = fs.content_hash_of(t).unwrap();
        let loaded = fs.memory().inodes - before;
        fs.close().unwrap();
        (h, loaded)
    };
    let (h, loaded) = first_hash(&store);
    assert_eq!(h, want);
    assert_eq!(loaded, 0, "the tree was walked again");

    let mut b = std::fs::read(&memo).unwrap();
    let n = b.len();
    b[n / 2] ^= 1;
    std::fs::write(&memo, &b).unwrap();
    let (h, loaded) = first_hash(&store);
    assert_eq!(h, want);
    assert!(loaded >= 20, "a damaged memo was used ({loaded} inodes loaded)");
    // ... and the mount that computed them again kept them.
    assert_eq!(first_hash(&store), (want, 0));
}
