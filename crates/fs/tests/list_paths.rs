//! `list` names every clone and snapshot by its path, found once per snapshotted directory
//! (`Fs::namespace_paths`, issue 38: 3,400 snapshots of one directory held every request up
//! 0.65-0.75 s while each searched the summaries for its directory). Checked against the
//! path each namespace's root has on its own (`path_of_dir`), over snapshots of the root,
//! of directories at several depths, of a clone's directory and of a clone nested in a clone,
//! and an orphaned snapshot (its directory removed), before and after a remount (when the
//! clones' mount entries must be found again). And each `.snapshot` listing names what a
//! lookup of each name finds (each snapshot resolved as listed, not looked up again: a
//! `.snapshot` of 3,000 held the engine lock 150-190 ms).

use scion_fs::clone::SNAPDIR_BIT;
use scion_fs::{Fs, Ino, NsKind};

mod common;
use common::{committed, lookup, mkdir, mkfile, new_store, open};

/// Each listed path, as `(ns, path, orphaned, snapshot)`, sorted, checked against
/// `path_of_dir`.
fn listed(fs: &mut Fs) -> Vec<(u32, Option<String>, bool, bool)> {
    let rows = fs.list().unwrap();
    let mut out = Vec::new();
    for r in rows {
        let root = fs.ns_root(r.ns).unwrap();
        let alone = fs.path_of_dir(root).ok();
        if r.orphaned {
            assert!(alone.is_none(), "ns {}: orphaned, yet its root has the path {alone:?}", r.ns);
        } else {
            assert_eq!(r.path, alone, "ns {}: listed path differs from its root's own", r.ns);
        }
        out.push((r.ns, r.path.map(|p| String::from_utf8(p).unwrap()), r.orphaned, r.kind == NsKind::Snapshot));
    }
    out.sort();
    out
}

#[test]
fn every_namespace_is_listed_at_its_own_path() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let a = mkdir(&mut fs, root, "a");
    let b = mkdir(&mut fs, a, "b");
    let deep = mkdir(&mut fs, b, "deep");
    mkfile(&mut fs, deep, "f", b"f");
    let gone = mkdir(&mut fs, root, "gone");
    let c = fs.clone_dir(a, root, b"c", &[], b"/a").unwrap();
    let cb = lookup(&mut fs, c, "b").unwrap();
    let nested = fs.clone_dir(cb, c, b"nested", &[], b"/c/b").unwrap();
    let ndeep = lookup(&mut fs, nested, "deep").unwrap();
    for (dir, n) in [(root, 3), (a, 40), (b, 25), (deep, 10), (cb, 7), (ndeep, 5), (gone, 2), (c, 4)] {
        for k in 0..n {
            fs.snapshot(dir, format!("s{k}").as_bytes(), b"").unwrap();
        }
    }
    // Clones side by side in one directory, made in an order their names do not sort in.
    for k in (0..30).rev() {
        fs.clone_dir(b, a, format!("x{k}").as_bytes(), &[], b"/a/b").unwrap();
    }
    fs.checkpoint().unwrap();
    fs.rmdir(root, b"gone").unwrap();
    let before = listed(&mut fs);
    assert_eq!(before.iter().filter(|r| r.3).count(), 96);
    // c, c/nested, the thirty, and the clones the snapshots of the root (c and c/nested
    // each) and of c (its nested) hold.
    assert_eq!(before.len(), 96 + 2 + 30 + 3 * 2 + 4);
    let has = |p: &str| before.iter().any(|r| r.1.as_deref() == Some(p));
    assert!(has("c/nested/deep/.snapshot/s4"), "{before:?}");
    assert!(has(".snapshot/s0"));
    assert!(has("c/.snapshot/s3"));
    assert!(has(".snapshot/s1/c/nested"));
    assert!(has("c/.snapshot/s2/nested"));
    assert!(has("a/b/.snapshot/s24"));
    assert!(has("a/x17"));
    let orphans: Vec<_> = before.iter().filter(|r| r.2).collect();
    assert_eq!(orphans.len(), 2, "{orphans:?}");
    for o in orphans {
        assert_eq!(o.1, Some(format!(".snapshot/@{}", o.0)));
    }
    for dir in [root, a, b, deep, c, cb, ndeep] {
        let snapdir = dir | SNAPDIR_BIT;
        let entries = fs.readdir(snapdir).unwrap();
        assert!(!entries.is_empty());
        for e in entries {
            let name = String::from_utf8(e.name).unwrap();
            assert_eq!(lookup(&mut fs, snapdir, &name).unwrap(), e.ino, "{dir:#x}/.snapshot/{name}");
        }
    }
    let names = |fs: &mut Fs, dir: Ino| -> Vec<String> {
        fs.readdir(dir | SNAPDIR_BIT).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect()
    };
    // a's own forty, shadowing the root's three of the same names; the root's two orphans.
    assert_eq!(names(&mut fs, a).len(), 40);
    assert_eq!(names(&mut fs, root).iter().filter(|n| n.starts_with('@')).count(), 2);
    fs.close().unwrap();
    committed(&store);
    let mut fs = open(&store);
    assert_eq!(listed(&mut fs), before, "after a remount");
    fs.close().unwrap();
}
