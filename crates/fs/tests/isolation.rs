//! What a clone, a snapshot and a failed volume must keep apart (issue 23's review):
//! - an inode of a destroyed clone, still held by the kernel or a process, can do nothing
//!   (ESTALE), and destroying the clone asks the kernel to forget what it cached;
//! - everything reachable under a snapshot is read-only, clones nested in it included;
//! - `D/.snapshot/s` shows `D` as it was only if today's `D` is the same directory;
//! (A panic in a checkpoint: `panics.rs`.)
//!
//! Each test fails on the code before the fix (4ef7198): the first panicked in mknod, the
//! second wrote into the snapshot, the third showed bob's old files.

use scion_fs::clone::SNAPDIR_BIT;
use scion_fs::{Fs, Ino, Inval, Kind, SetAttr};

mod common;
use common::{committed, lookup, mkfile, new_store, open, read_all};

fn mkdir(fs: &mut Fs, dir: Ino, name: &str, mode: u32, uid: u32) -> Ino {
    fs.mknod(dir, name.as_bytes(), Kind::Dir, mode, 0, uid, uid, 0, &[])
        .unwrap()
        .ino
}

/// Every kind of change on `file` in directory `dir`, each refused with `errno`.
fn every_change_refused(fs: &mut Fs, dir: Ino, file: Ino, errno: i32, what: &str) {
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    let checks: Vec<(&str, scion_fs::FsResult<()>)> = vec![
        ("write", fs.write(file, 0, b"changed").map(|_| ())),
        ("truncate", fs.setattr(file, trunc).map(|_| ())),
        ("chmod", fs.setattr(file, chmod).map(|_| ())),
        ("setxattr", fs.setxattr(file, b"user.x", b"1", 0)),
        ("removexattr", fs.removexattr(file, b"user.keep")),
        ("fallocate", fs.fallocate(file, 0, 0, 1 << 20)),
        ("open for writing", fs.check_writable(file)),
        (
            "create",
            fs.mknod(dir, b"new", Kind::File, 0o644, 0, 0, 0, 0, &[]).map(|_| ()),
        ),
        (
            "mkdir",
            fs.mknod(dir, b"newdir", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).map(|_| ()),
        ),
        ("link", fs.link(file, dir, b"second").map(|_| ())),
        ("unlink", fs.unlink(dir, b"f")),
        ("rename", fs.rename(dir, b"f", dir, b"g", 0)),
        ("rmdir", fs.rmdir(dir, b"sub")),
    ];
    for (op, r) in checks {
        assert_eq!(r.map_err(|e| e.errno()), Err(errno), "{what}: {op}");
    }
}

#[test]
fn a_destroyed_clone_refuses_everything_and_loses_nothing_else() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let c0 = mkdir(&mut fs, root, "C0", 0o755, 0);
    let sub = mkdir(&mut fs, c0, "sub", 0o755, 0);
    mkfile(&mut fs, sub, "big", &vec![7u8; 10240]);
    let b = lookup(&mut fs, sub, "big").unwrap();
    fs.setxattr(b, b"user.keep", b"1", 0).unwrap();
    mkdir(&mut fs, sub, "sub", 0o755, 0);
    let c = fs.clone_dir(c0, root, b"C", &[], b"test").unwrap();
    // A process inside the clone: its directory and an open file are held by the kernel.
    let csub = lookup(&mut fs, c, "sub").unwrap();
    let big = lookup(&mut fs, csub, "big").unwrap();
    fs.open_file(big).unwrap();
    fs.take_invalidations();
    fs.destroy(c).unwrap();
    // The kernel is asked to forget the clone's entries and inodes it holds.
    let inval = fs.take_invalidations();
    for want in [
        Inval::Entry(root, b"C".to_vec()),
        Inval::Entry(c, b"sub".to_vec()),
        Inval::Inode(csub),
        Inval::Entry(csub, b"big".to_vec()),
        Inval::Inode(big),
    ] {
        assert!(inval.contains(&want), "{want:?} not in {inval:?}");
    }

    every_change_refused(&mut fs, csub, big, libc::ESTALE, "destroyed clone");
    assert_eq!(fs.getattr(big).map(|_| ()), Err(scion_fs::errno::ESTALE));
    assert_eq!(fs.read(big, 0, 10).map(|_| ()), Err(scion_fs::errno::ESTALE));
    assert_eq!(lookup(&mut fs, csub, "big"), Err(scion_fs::errno::ESTALE));
    assert_eq!(fs.readdir(csub).map(|_| ()), Err(scion_fs::errno::ESTALE));
    fs.release(big);
    fs.forget(big, 1);
    fs.forget(csub, 1);

    // The rest of the store goes on: files made and fsynced now survive a checkpoint and a
    // remount, and the store checks clean.
    for i in 0..20 {
        mkfile(&mut fs, root, &format!("f{i}"), format!("file {i}").as_bytes());
        fs.fsync().unwrap();
    }
    fs.list().unwrap();
    fs.close().unwrap();
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    for i in 0..20 {
        let f = lookup(&mut fs, root, &format!("f{i}")).unwrap();
        assert_eq!(read_all(&mut fs, f), format!("file {i}").as_bytes());
    }
    assert_eq!(lookup(&mut fs, root, "C"), Err(scion_fs::errno::ENOENT));
    let sub = sub_of(&mut fs, "C0");
    let big = lookup(&mut fs, sub, "big").unwrap();
    assert_eq!(read_all(&mut fs, big), vec![7u8; 10240]);
}

fn sub_of(fs: &mut Fs, top: &str) -> Ino {
    let root = fs.root();
    let t = lookup(fs, root, top).unwrap();
    lookup(fs, t, "sub").unwrap()
}

#[test]
fn everything_under_a_snapshot_is_read_only_nested_clones_included() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = mkdir(&mut fs, root, "D", 0o755, 0);
    let src = mkdir(&mut fs, d, "src", 0o755, 0);
    let f = mkfile(&mut fs, src, "f", b"original");
    fs.setxattr(f, b"user.keep", b"1", 0).unwrap();
    mkdir(&mut fs, src, "sub", 0o755, 0);
    fs.clone_dir(src, d, b"nested", &[], b"test").unwrap();
    fs.snapshot(d, b"s", b"test").unwrap();

    let snap = lookup(&mut fs, d | SNAPDIR_BIT, "s").unwrap();
    // The snapshot's own tree, and the clone nested in it.
    let ssrc = lookup(&mut fs, snap, "src").unwrap();
    let sf = lookup(&mut fs, ssrc, "f").unwrap();
    every_change_refused(&mut fs, ssrc, sf, libc::EROFS, "snapshot");
    let nested = lookup(&mut fs, snap, "nested").unwrap();
    let nf = lookup(&mut fs, nested, "f").unwrap();
    every_change_refused(&mut fs, nested, nf, libc::EROFS, "clone nested in a snapshot");
    // Nor may the nested clone be destroyed, renamed or snapshotted from inside the snapshot.
    assert_eq!(fs.destroy(nested).map(|_| ()), Err(scion_fs::errno::EROFS));
    assert_eq!(
        fs.rename(snap, b"nested", snap, b"moved", 0),
        Err(scion_fs::errno::EROFS)
    );
    assert_eq!(
        fs.snapshot(nested, b"t", b"test").map(|_| ()),
        Err(scion_fs::errno::EROFS)
    );
    assert_eq!(
        fs.clone_dir(ssrc, nested, b"x", &[], b"t").map(|_| ()),
        Err(scion_fs::errno::EROFS)
    );
    // A clone *of* something in a snapshot is writable, like any clone.
    let w = fs.clone_dir(nested, root, b"w", &[], b"test").unwrap();
    let wf = lookup(&mut fs, w, "f").unwrap();
    fs.write(wf, 0, b"writable").unwrap();

    for ino in [sf, nf] {
        assert_eq!(read_all(&mut fs, ino), b"original");
    }
    fs.close().unwrap();
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    let d = lookup(&mut fs, root, "D").unwrap();
    let snap = lookup(&mut fs, d | SNAPDIR_BIT, "s").unwrap();
    let nested = lookup(&mut fs, snap, "nested").unwrap();
    let nf = lookup(&mut fs, nested, "f").unwrap();
    assert_eq!(read_all(&mut fs, nf), b"original");
}

#[test]
fn dot_snapshot_shows_a_directory_only_where_it_is_the_same_directory() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let bob = 1000;
    let public = mkdir(&mut fs, root, "pub", 0o1777, 0);
    let b = mkdir(&mut fs, public, "b", 0o700, bob);
    let sub = mkdir(&mut fs, b, "sub", 0o755, bob);
    mkfile(&mut fs, sub, "secret", b"bob's");
    fs.snapshot(root, b"s", b"test").unwrap();
    // While /pub/b/sub is the directory it was, its snapshot is there.
    let old = lookup(&mut fs, sub | SNAPDIR_BIT, "s").unwrap();
    assert!(lookup(&mut fs, old, "secret").is_ok());
    let names: Vec<Vec<u8>> = fs
        .readdir(sub | SNAPDIR_BIT)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&b"s".to_vec()), "{names:?}");

    // Bob's directory goes; mallory makes the same path in the world-writable /pub.
    fs.unlink(sub, b"secret").unwrap();
    fs.rmdir(b, b"sub").unwrap();
    fs.rmdir(public, b"b").unwrap();
    let mallory = 1001;
    let b2 = mkdir(&mut fs, public, "b", 0o755, mallory);
    let sub2 = mkdir(&mut fs, b2, "sub", 0o755, mallory);
    assert_eq!(lookup(&mut fs, sub2 | SNAPDIR_BIT, "s"), Err(scion_fs::errno::ENOENT));
    assert!(fs.readdir(sub2 | SNAPDIR_BIT).unwrap().is_empty());
    assert_eq!(fs.resolve_path(b"pub/b/sub/.snapshot/s"), Err(scion_fs::errno::ENOENT));
    // The snapshot itself still holds them, behind the permissions they had then.
    let then = fs.resolve_path(b".snapshot/s/pub/b/sub/secret").unwrap();
    assert_eq!(read_all(&mut fs, then), b"bob's");
    let b_then = fs.resolve_path(b".snapshot/s/pub/b").unwrap();
    let a = fs.getattr(b_then).unwrap();
    assert_eq!((a.perm & 0o777, a.uid), (0o700, bob));
}

#[test]
fn paths_through_a_file_are_not_directories() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    mkfile(&mut fs, root, "file", b"x");
    assert_eq!(fs.resolve_path(b"file/.."), Err(scion_fs::errno::ENOTDIR));
    assert_eq!(fs.resolve_path(b"file/x"), Err(scion_fs::errno::ENOTDIR));
}
