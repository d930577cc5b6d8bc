//! `Fs::open_below`: the files open below a directory, as paths relative to it, which the
//! CLI flushes before a clone, snapshot, diff or scan of that directory instead of the whole
//! mount (issue 38). Files open elsewhere, closed or removed are not named; a file with
//! several names that may lie below, or more than the limit, makes it answer None (flush
//! the whole mount).

use scion_fs::{Fs, Ino, Kind};

mod common;
use common::new_store;

fn mkdir(fs: &mut Fs, parent: Ino, name: &[u8]) -> Ino {
    fs.mknod(parent, name, Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino
}

fn open_new(fs: &mut Fs, parent: Ino, name: &[u8]) -> Ino {
    let f = fs.mknod(parent, name, Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.open_file(f).unwrap();
    f
}

fn names(v: Option<Vec<Vec<u8>>>) -> Option<Vec<String>> {
    v.map(|v| v.into_iter().map(|p| String::from_utf8(p).unwrap()).collect())
}

#[test]
fn only_the_files_open_below_are_named() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = mkdir(&mut fs, root, b"src");
    let sub = mkdir(&mut fs, src, b"sub");
    let other = mkdir(&mut fs, root, b"other");
    let a = open_new(&mut fs, sub, b"a");
    open_new(&mut fs, src, b"b");
    open_new(&mut fs, other, b"elsewhere");
    let closed = open_new(&mut fs, src, b"closed");
    fs.release(closed);
    // Open twice, closed once: still open.
    fs.open_file(a).unwrap();
    fs.release(a);
    let gone = open_new(&mut fs, sub, b"gone");
    fs.unlink(sub, b"gone").unwrap();
    assert_eq!(names(fs.open_below(src, 10).unwrap()), Some(vec!["b".into(), "sub/a".into()]));
    assert_eq!(names(fs.open_below(sub, 10).unwrap()), Some(vec!["a".into()]));
    assert_eq!(names(fs.open_below(root, 10).unwrap()), Some(vec!["other/elsewhere".into(), "src/b".into(), "src/sub/a".into()]));
    // Past the limit: None, so the caller flushes everything.
    assert_eq!(fs.open_below(src, 1).unwrap(), None);
    // A rename moves the name it is found by; a checkpoint changes nothing of it.
    fs.rename(sub, b"a", other, b"moved", 0).unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(names(fs.open_below(src, 10).unwrap()), Some(vec!["b".into()]));
    assert_eq!(names(fs.open_below(other, 10).unwrap()), Some(vec!["elsewhere".into(), "moved".into()]));
    fs.release(a);
    fs.release(gone);
    assert_eq!(names(fs.open_below(other, 10).unwrap()), Some(vec!["elsewhere".into()]));
    // Not a directory.
    let b = fs.lookup(src, b"b").unwrap().ino;
    assert_eq!(fs.open_below(b, 10).unwrap_err(), libc::ENOTDIR);
}

#[test]
fn inside_a_clone_paths_are_the_clones_and_a_hard_link_asks_for_everything() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = mkdir(&mut fs, root, b"src");
    let f = fs.mknod(src, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.write(f, 0, b"x").unwrap();
    let top = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let inner = fs.lookup(top, b"f").unwrap().ino;
    fs.open_file(inner).unwrap();
    assert_eq!(names(fs.open_below(top, 10).unwrap()), Some(vec!["f".into()]));
    assert_eq!(names(fs.open_below(root, 10).unwrap()), Some(vec!["c/f".into()]));
    assert_eq!(names(fs.open_below(src, 10).unwrap()), Some(vec![]));
    // A file with two names has no one path: whoever may hold it below gets None.
    let l = open_new(&mut fs, src, b"linked");
    fs.link(l, src, b"again").unwrap();
    assert_eq!(fs.open_below(src, 10).unwrap(), None);
}
