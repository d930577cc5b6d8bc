//! `restore --replace` is all or nothing across a crash (issue 34 item 3): a crash with the
//! restored tree half built, or with the directory emptied and not yet filled, leaves after
//! the next open the old tree or the restored one whole at the destination, nothing at the
//! hidden names, no intent left, and a clean store. The directory stays the same object, so
//! its snapshots stay in its `.snapshot` (issue 35 item 2). Its own test binary: the failpoints
//! it arms are process-wide.

mod common;
use common::*;
use scion_fs::records::intents;
use scion_fs::{failpoint, Fs, Ino, Kind};

/// Every file below `dir` (path, bytes), sorted.
fn files(fs: &mut Fs, dir: Ino, at: &str, out: &mut Vec<(String, Vec<u8>)>) {
    for e in fs.readdir(dir).unwrap() {
        if e.name == b"." || e.name == b".." || e.name == b".snapshot" {
            continue;
        }
        let name = String::from_utf8_lossy(&e.name).into_owned();
        let ino = fs.lookup(dir, &e.name).unwrap().ino;
        match e.kind {
            Kind::Dir => files(fs, ino, &format!("{at}/{name}"), out),
            _ => out.push((format!("{at}/{name}"), read_all(fs, ino))),
        }
        fs.forget(ino, 1);
    }
    out.sort();
}

#[test]
fn a_crash_during_restore_replace_leaves_one_tree_whole() {
    // (None: a crash before the restore returned may leave either tree, whole.)
    for (point, restored) in [("restore.copied", Some(false)), ("restore.emptied", Some(true)), ("", Some(true))] {
        let (_tmp, store, mut fs) = new_store();
        let root = fs.root();
        let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for i in 0..40 {
            mkfile(&mut fs, d, &format!("f{i}"), format!("snapshot's {i}").repeat(200).as_bytes());
        }
        fs.snapshot(d, b"s", b"/d").unwrap();
        fs.setxattr(d, b"user.then", b"1", 0).unwrap();
        let mut want_new = Vec::new();
        files(&mut fs, d, "d", &mut want_new);
        for i in 0..40 {
            fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
        mkfile(&mut fs, d, "live", b"written after the snapshot");
        let mut want_old = Vec::new();
        files(&mut fs, d, "d", &mut want_old);
        fs.fsync().unwrap();
        if !point.is_empty() {
            failpoint::arm(&format!("{point}@{}", store.display()), 1);
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fs.restore(b"d/.snapshot/s", b"d", true, "t").map(drop)
        }));
        failpoint::clear();
        assert_eq!(r.is_err(), !point.is_empty(), "{point}: the failpoint fired");
        if point.is_empty() {
            r.unwrap().unwrap();
            fs.fsync().unwrap();
        }
        drop(fs); // a crash: no checkpoint, the journal as it reached the disk
        let mut fs = open(&store);
        let root = fs.root();
        let names: Vec<Vec<u8>> = fs.readdir(root).unwrap().into_iter().map(|e| e.name).collect();
        assert!(!names.iter().any(|n| n.starts_with(b".d.scion-restore")), "{point}: the hidden tree stays: {names:?}");
        let d2 = lookup(&mut fs, root, "d").unwrap();
        if restored == Some(true) {
            assert_eq!(d2, d, "{point}: the directory is the same inode");
            assert_eq!(fs.listxattr(d).unwrap(), Vec::<Vec<u8>>::new(), "{point}: the snapshot's attributes");
        }
        let snaps: Vec<Vec<u8>> = fs.readdir(d2 | scion_fs::clone::SNAPDIR_BIT).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(snaps, vec![b"s".to_vec()], "{point}: the directory's snapshot stays");
        let d = d2;
        let mut got = Vec::new();
        files(&mut fs, d, "d", &mut got);
        let ok = match restored {
            Some(true) => got == want_new,
            Some(false) => got == want_old,
            None => got == want_new || got == want_old,
        };
        assert!(ok, "{point}: not the tree expected whole at d ({} files)", got.len());
        assert!(intents::load(&scion_store::os_host(), &store).unwrap().intents.is_empty(), "{point}: an intent left");
        fs.close().unwrap();
        committed(&store);
    }
}
