//! What a store records of its mirrors and answers for them: the next snapshot to send (the
//! newest first, then each later one, on the last one sent), across a reopen; what retention
//! must keep (the base; with keep_unmirrored, what is not sent); the last one sent destroyed
//! on the source; refusals.

use scion_fs::{Kind, Ts};

mod common;
use common::{new_store, open};

fn snap(fs: &mut scion_fs::Fs, d: u64, name: &str, sec: i64) {
    fs.snapshot_as(d, name.as_bytes(), b"/d", false, Ts { sec, nsec: 0 }).unwrap();
}

fn names(v: impl IntoIterator<Item = Vec<u8>>) -> Vec<String> {
    let mut v: Vec<String> = v.into_iter().map(|n| String::from_utf8(n).unwrap()).collect();
    v.sort();
    v
}

#[test]
fn next_snapshot_base_and_what_retention_keeps() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    assert!(fs.set_mirror(b"d", b"relative", false).is_err());
    assert!(fs.set_mirror(b"nowhere", b"/t", false).is_err());
    fs.set_mirror(b"d", b"/t", false).unwrap();
    let m = fs.mirror_list().unwrap()[0].clone();
    assert_eq!(fs.mirror_next(&m).unwrap(), None, "no snapshot yet");
    assert!(fs.mirror_protected(b"d").unwrap().is_empty());

    snap(&mut fs, d, "a", 100);
    snap(&mut fs, d, "b", 200);
    // A new mirror starts from the newest snapshot, sent whole.
    let n = fs.mirror_next(&m).unwrap().unwrap();
    assert_eq!((n.name.as_slice(), n.base, n.behind), (&b"b"[..], None, 1));
    fs.mirror_arrived(b"d", b"/t", b"b", 250).unwrap();
    snap(&mut fs, d, "c", 300);
    snap(&mut fs, d, "e", 400);
    let m = fs.mirror_list().unwrap()[0].clone();
    let n = fs.mirror_next(&m).unwrap().unwrap();
    assert_eq!((n.name.as_slice(), n.base.as_deref(), n.behind), (&b"c"[..], Some(&b"b"[..]), 2));
    assert_eq!(names(fs.mirror_protected(b"d").unwrap()), ["b"]);
    fs.set_mirror(b"d", b"/t", true).unwrap();
    assert_eq!(names(fs.mirror_protected(b"d").unwrap()), ["b", "c", "e"]);
    assert!(fs.mirror_protected(b"other").unwrap().is_empty());

    // Kept across a reopen.
    fs.close().unwrap();
    let mut fs = open(&store);
    let m = fs.mirror_list().unwrap()[0].clone();
    assert!(m.keep_unmirrored && m.last.as_deref() == Some(&b"b"[..]) && m.last_time == 250);

    // The last one sent destroyed here: what came after it goes, whole.
    let b = fs.resolve_path(b"d/.snapshot/b").unwrap();
    fs.destroy(b).unwrap();
    let n = fs.mirror_next(&m).unwrap().unwrap();
    assert_eq!((n.name.as_slice(), n.base, n.behind), (&b"c"[..], None, 2));
    assert_eq!(names(fs.mirror_protected(b"d").unwrap()), ["b", "c", "e"]);
    fs.mirror_arrived(b"d", b"/t", b"e", 450).unwrap();
    let m = fs.mirror_list().unwrap()[0].clone();
    assert_eq!(fs.mirror_next(&m).unwrap(), None);

    assert_eq!(fs.remove_mirror(b"d", Some(b"/other")).unwrap(), 0);
    assert_eq!(fs.remove_mirror(b"d", None).unwrap(), 1);
    assert!(fs.mirror_arrived(b"d", b"/t", b"e", 500).is_err());
    fs.close().unwrap();
}
