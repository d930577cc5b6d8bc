//! Directories of several tree nodes shared by a source and its clone. A change in the
//! clone copies the path to the leaves it touches, and both versions keep sharing the other
//! leaves: `check` must count the pointers in a shared leaf once (it once counted them once
//! per version, and called a clean store damaged after `apt-get install` in a clone of a
//! Debian root), and the counts must be right, so that removing files on either side, or the
//! whole clone, frees nothing the other side still reads.

use scion_fs::{Fs, Ino, Kind};

const CHUNK: usize = 64 << 10;
use std::collections::BTreeMap;

mod common;
use common::{committed, new_store, open, read_all};

/// Sizes that give every content form: inline bytes, one chunk named from the record, and a
/// content tree of two chunks.
fn contents(i: u32) -> Vec<u8> {
    let len = match i % 3 {
        0 => 100 + i as usize % 50,
        1 => 3000 + i as usize % 5000,
        _ => 70_000 + i as usize,
    };
    (0..len).map(|j| (i as usize * 31 + j / 7) as u8).collect()
}

fn lookup(fs: &mut Fs, dir: Ino, name: &str) -> Ino {
    fs.lookup(dir, name.as_bytes()).unwrap().ino
}

fn put(fs: &mut Fs, dir: Ino, name: &str, data: &[u8]) {
    let f = fs
        .mknod(dir, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
        .unwrap()
        .ino;
    fs.write(f, 0, data).unwrap();
}

/// Every file of `dir` and its bytes, against what the test expects.
fn verify(fs: &mut Fs, dir: Ino, want: &BTreeMap<String, Vec<u8>>, side: &str) {
    let names: Vec<String> = fs
        .readdir(dir)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    assert_eq!(names.len(), want.len(), "{side}: number of files");
    for (name, data) in want {
        let f = lookup(fs, dir, name);
        assert!(read_all(fs, f) == *data, "{side}: {name} reads back wrong");
    }
}

#[test]
fn clones_share_the_leaves_of_big_directories() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let bin = fs.mknod(d, b"bin", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut src: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..900 {
        let name = format!("file-{i:05}");
        let data = contents(i);
        put(&mut fs, bin, &name, &data);
        src.insert(name, data);
    }
    // A sparse file whose content tree has several leaves: 700 chunks of 100 bytes.
    let sparse = fs.mknod(d, b"sparse", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut sparse_bytes = vec![0u8; 700 * CHUNK];
    for i in 0..700 {
        let b = vec![(i % 200) as u8 + 1; 100];
        fs.write(sparse, (i * CHUNK) as u64, &b).unwrap();
        sparse_bytes[i * CHUNK..i * CHUNK + 100].copy_from_slice(&b);
    }
    sparse_bytes.truncate(699 * CHUNK + 100);
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(d, root, b"c", &[], b"test").unwrap();
    fs.checkpoint().unwrap();
    committed(&store);

    // The clone gains files written under a temporary name and renamed (as dpkg does), loses
    // some, renames some; the source loses others. Each side touches a few leaves of the
    // nine or so, so that most stay shared.
    let cbin = lookup(&mut fs, c, "bin");
    let mut cl = src.clone();
    for i in 0..40u32 {
        let name = format!("new-{i:03}");
        let data = contents(1000 + i);
        put(&mut fs, cbin, &format!("{name}.dpkg-new"), &data);
        fs.rename(cbin, format!("{name}.dpkg-new").as_bytes(), cbin, name.as_bytes(), 0)
            .unwrap();
        cl.insert(name, data);
    }
    for i in (0..40).step_by(7) {
        let name = format!("file-{i:05}");
        fs.unlink(cbin, name.as_bytes()).unwrap();
        cl.remove(&name);
    }
    for i in (800..860).step_by(13) {
        let (old, new) = (format!("file-{i:05}"), format!("moved-{i:05}"));
        fs.rename(cbin, old.as_bytes(), cbin, new.as_bytes(), 0).unwrap();
        let data = cl.remove(&old).unwrap();
        cl.insert(new, data);
    }
    // A chunk added past the end of the clone's sparse file changes one leaf of its tree.
    let csparse = lookup(&mut fs, c, "sparse");
    let mut csparse_bytes = sparse_bytes.clone();
    csparse_bytes.resize(700 * CHUNK + 10, 0);
    csparse_bytes[700 * CHUNK..].copy_from_slice(&[9; 10]);
    fs.write(csparse, (700 * CHUNK) as u64, &[9; 10]).unwrap();
    for i in (400..430).step_by(11) {
        let name = format!("file-{i:05}");
        fs.unlink(bin, name.as_bytes()).unwrap();
        src.remove(&name);
    }
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert!(rep.shared_blocks > 0, "the two versions share blocks:\n{rep}");
    verify(&mut fs, bin, &src, "source");
    verify(&mut fs, cbin, &cl, "clone");
    assert!(read_all(&mut fs, sparse) == sparse_bytes, "the source's sparse file");
    assert!(read_all(&mut fs, csparse) == csparse_bytes, "the clone's sparse file");

    // Reopened, then without the clone: the source reads back whole, and check is clean.
    fs.close().unwrap();
    let mut fs = open(&store);
    let root = fs.root();
    let (d, c) = (lookup(&mut fs, root, "d"), lookup(&mut fs, root, "c"));
    let (bin, cbin) = (lookup(&mut fs, d, "bin"), lookup(&mut fs, c, "bin"));
    verify(&mut fs, bin, &src, "source after reopening");
    verify(&mut fs, cbin, &cl, "clone after reopening");
    fs.destroy(c).unwrap();
    fs.checkpoint().unwrap();
    committed(&store);
    verify(&mut fs, bin, &src, "source after destroying the clone");
    fs.close().unwrap();
    committed(&store);
}

/// A clone of a tree whose hard-linked files have all their names inside it shares the
/// source's link table by one reference. Its records hold small files' bytes inline, so
/// copying them (what a clone does when the counts differ) cost a tree of 300 linked small
/// files about as much space as the files. A clone of part of it, where the counts differ,
/// gets its own records, counting only its names.
#[test]
fn clones_share_the_link_table_when_every_name_is_inside() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let (a, b) = (
        fs.mknod(d, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino,
        fs.mknod(d, b"b", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino,
    );
    for i in 0..300u32 {
        let name = format!("f{i:03}");
        put(&mut fs, a, &name, &contents(i * 3)); // inline sizes
        let f = lookup(&mut fs, a, &name);
        fs.link(f, b, name.as_bytes()).unwrap();
    }
    fs.checkpoint().unwrap();
    let before = committed(&store).block_bytes;

    // All names inside: the link table is shared, the clone costs next to nothing.
    let c = fs.clone_dir(d, root, b"c", &[], b"test").unwrap();
    fs.checkpoint().unwrap();
    let grown = committed(&store).block_bytes - before;
    assert!(grown < 8 << 10, "a clone of 300 linked small files took {grown} bytes");

    // Only `a`: the names in `b` lie outside, so the clone's records count one name each.
    let ca = fs.clone_dir(a, root, b"ca", &[], b"test").unwrap();
    fs.checkpoint().unwrap();
    committed(&store);
    let f = lookup(&mut fs, ca, "f007");
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);

    // A tree whose linked files have every name inside it, in a namespace with others: the
    // clone's table holds its own file only.
    let x = fs.mknod(d, b"x", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    put(&mut fs, x, "one", b"pair");
    let one = lookup(&mut fs, x, "one");
    fs.link(one, x, b"two").unwrap();
    fs.checkpoint().unwrap();
    let cx = fs.clone_dir(x, root, b"cx", &[], b"test").unwrap();
    fs.checkpoint().unwrap();
    committed(&store);
    let cone = lookup(&mut fs, cx, "one");
    assert_eq!(fs.getattr(cone).unwrap().nlink, 2);

    // Changes on each side stay there.
    let (cb, ca2) = (lookup(&mut fs, c, "b"), lookup(&mut fs, c, "a"));
    let g = lookup(&mut fs, ca2, "f010");
    fs.link(g, c, b"third").unwrap();
    fs.write(g, 0, b"clone's").unwrap();
    fs.unlink(cb, b"f020").unwrap();
    fs.unlink(b, b"f030").unwrap();
    fs.checkpoint().unwrap();
    committed(&store);
    let nlink = |fs: &mut Fs, dir: Ino, name: &str| {
        let f = lookup(fs, dir, name);
        fs.getattr(f).unwrap().nlink
    };
    assert_eq!(nlink(&mut fs, ca2, "f010"), 3);
    assert_eq!(nlink(&mut fs, a, "f010"), 2);
    assert_eq!(nlink(&mut fs, ca2, "f020"), 1);
    assert_eq!(nlink(&mut fs, a, "f020"), 2);
    assert_eq!(nlink(&mut fs, a, "f030"), 1);
    assert_eq!(nlink(&mut fs, ca2, "f030"), 2);
    let (src_f, clone_f) = (lookup(&mut fs, b, "f010"), lookup(&mut fs, cb, "f010"));
    assert!(read_all(&mut fs, src_f) == contents(30));
    assert_eq!(&read_all(&mut fs, clone_f)[..7], b"clone's");
    fs.close().unwrap();
    committed(&store);
}
