//! `rollback` of a clone to one of its snapshots: the clone's tree becomes what the snapshot
//! held (every name, mode, owner, time, byte, link and attribute), every snapshot of the
//! clone stays and can be rolled back to in turn, a file held open keeps what it opened,
//! nothing else changes, and the store checks clean and reads the same after a remount.

mod common;
use common::*;
use scion_fs::{errno, Fs, Ino, Kind, NsKind};

fn tree(fs: &mut Fs, ino: Ino) -> Vec<String> {
    let mut out = Vec::new();
    describe(fs, ino, "", &mut out);
    out
}

fn data(n: usize, tag: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect()
}

fn snapshot_names(fs: &mut Fs, dir: Ino) -> Vec<String> {
    let snapdir = fs.lookup(dir, b".snapshot").unwrap().ino;
    let mut names: Vec<String> = fs
        .readdir(snapdir)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    names
}

/// A clone with files, a subdirectory, a symlink and a hard link, then three rounds of
/// changes with a snapshot between each.
fn clone_with_history(fs: &mut Fs) -> (Ino, Vec<Vec<String>>) {
    let root = fs.root();
    let src = mkdir(fs, root, "src");
    mkfile(fs, src, "big", &data(300_000, 1));
    mkfile(fs, src, "small", b"small file");
    let d = mkdir(fs, src, "d");
    let e = mkfile(fs, d, "e", &data(5000, 2));
    fs.link(e, src, b"e-link").unwrap();
    fs.mknod(src, b"sym", Kind::Symlink, 0o777, 0, 0, 0, 0, b"d/e").unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let mut states = Vec::new();
    for round in 0..3u8 {
        fs.snapshot(c, format!("s{round}").as_bytes(), b"/c").unwrap();
        states.push(tree(fs, c));
        // Changes after the snapshot: an overwrite, a new file, a removal, a new directory.
        let big = lookup(fs, c, "big").unwrap();
        fs.write(big, 70_000, &data(10_000, 10 + round)).unwrap();
        mkfile(fs, c, &format!("new{round}"), &data(1000, round));
        if round == 0 {
            fs.unlink(c, b"small").unwrap();
        }
        mkdir(fs, c, &format!("dir{round}"));
    }
    (c, states)
}

#[test]
fn rollback_gives_back_each_snapshot_and_keeps_them_all() {
    let (_tmp, store, mut fs) = new_store();
    let (c, states) = clone_with_history(&mut fs);
    let root = fs.root();
    let c = fs.rollback(c, b"s0").unwrap();
    assert_eq!(tree(&mut fs, c), states[0], "the clone after rollback to s0");
    assert_eq!(lookup(&mut fs, root, "c").unwrap(), c, "the mount entry names the new root");
    assert_eq!(snapshot_names(&mut fs, c), ["s0", "s1", "s2"], "every snapshot stays");
    // Each snapshot still holds what it held, and is a rollback target in turn.
    for (i, want) in states.iter().enumerate() {
        let snapdir = fs.lookup(c, b".snapshot").unwrap().ino;
        let s = fs.lookup(snapdir, format!("s{i}").as_bytes()).unwrap().ino;
        assert_eq!(&tree(&mut fs, s), want, "snapshot s{i}");
    }
    let c = fs.rollback(c, b"s2").unwrap();
    assert_eq!(tree(&mut fs, c), states[2], "the clone after rollback to s2");
    // One clone, at its place; the source directory untouched.
    let clones: Vec<_> = fs.list().unwrap().into_iter().filter(|l| l.kind == NsKind::Clone).collect();
    assert_eq!(clones.len(), 1, "{clones:?}");
    assert_eq!(clones[0].path.as_deref(), Some(&b"c"[..]));
    let src = lookup(&mut fs, root, "src").unwrap();
    let small = lookup(&mut fs, src, "small").unwrap();
    assert_eq!(read_all(&mut fs, small), b"small file");
    // A snapshot taken after a rollback is anchored like the others.
    fs.snapshot(c, b"after", b"/c").unwrap();
    assert_eq!(snapshot_names(&mut fs, c), ["after", "s0", "s1", "s2"]);
    drop(fs);
    let rep = committed(&store);
    assert!(rep.is_clean(), "{rep}");
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c").unwrap();
    assert_eq!(tree(&mut fs, c), states[2], "after a remount");
    assert_eq!(snapshot_names(&mut fs, c), ["after", "s0", "s1", "s2"]);
}

#[test]
fn an_open_file_keeps_what_it_opened() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let src = mkdir(&mut fs, root, "src");
    mkfile(&mut fs, src, "f", b"as snapshotted");
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    fs.snapshot(c, b"s", b"/c").unwrap();
    let f = lookup(&mut fs, c, "f").unwrap();
    fs.write(f, 0, b"written since, and fsynced").unwrap();
    fs.fsync().unwrap();
    fs.open_file(f).unwrap();
    let c = fs.rollback(c, b"s").unwrap();
    // The open file is the file it was: its bytes, and it takes writes.
    assert_eq!(read_all(&mut fs, f), b"written since, and fsynced");
    fs.write(f, 0, b"WRITTEN").unwrap();
    assert_eq!(read_all(&mut fs, f), b"WRITTEN since, and fsynced");
    // The name now gives the snapshot's file, a different inode.
    let g = lookup(&mut fs, c, "f").unwrap();
    assert_ne!(g, f);
    assert_eq!(read_all(&mut fs, g), b"as snapshotted");
    fs.release(f);
    fs.checkpoint().unwrap();
    drop(fs);
    let rep = committed(&store);
    assert!(rep.is_clean(), "{rep}");
}

#[test]
fn rollback_refuses_what_it_cannot_do() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = mkdir(&mut fs, root, "src");
    let sub = mkdir(&mut fs, src, "sub");
    mkfile(&mut fs, sub, "f", b"x");
    fs.snapshot(src, b"s", b"/src").unwrap();
    // A plain directory, the mount root: not clones.
    assert_eq!(fs.rollback(src, b"s"), Err(errno::EINVAL));
    assert_eq!(fs.rollback(root, b"s"), Err(errno::EINVAL));
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    assert_eq!(fs.rollback(c, b"nope"), Err(errno::ENOENT));
    // A snapshot cannot be rolled back (it is read-only).
    fs.snapshot(c, b"s", b"/c").unwrap();
    let snapdir = fs.lookup(c, b".snapshot").unwrap().ino;
    let s = fs.lookup(snapdir, b"s").unwrap().ino;
    assert_eq!(fs.rollback(s, b"s"), Err(errno::EROFS));
    // Snapshots of a subdirectory of the clone would be lost: refused, nothing changed.
    let csub = lookup(&mut fs, c, "sub").unwrap();
    fs.snapshot(csub, b"inner", b"/c/sub").unwrap();
    mkfile(&mut fs, c, "later", b"y");
    assert_eq!(fs.rollback(c, b"s"), Err(errno::EBUSY));
    assert!(lookup(&mut fs, c, "later").is_ok());
}
