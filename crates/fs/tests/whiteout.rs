//! `rename_whiteout` (renameat2 RENAME_WHITEOUT, overlayfs's upper layer): the rename and a
//! character device 0/0 at the old name, kept together through a crash and replay; refused
//! with RENAME_EXCHANGE; what is refused changes nothing.

mod common;
use common::*;
use scion_fs::{errno, Kind, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT, ROOT_INO};

#[test]
fn the_old_name_becomes_a_whiteout_also_after_replay() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, d, "f", b"salts");
    mkfile(&mut fs, d, "g", b"other");
    fs.rename_whiteout(d, b"f", d, b"f.bak", RENAME_WHITEOUT, 7, 8).unwrap();
    // Refused: exchange, and a taken name with NOREPLACE; neither leaves a whiteout.
    let both = RENAME_WHITEOUT | RENAME_EXCHANGE;
    assert_eq!(fs.rename_whiteout(d, b"g", d, b"f.bak", both, 0, 0), Err(errno::EINVAL));
    let noreplace = RENAME_WHITEOUT | RENAME_NOREPLACE;
    assert_eq!(fs.rename_whiteout(d, b"g", d, b"f.bak", noreplace, 0, 0).map_err(|e| e.errno()), Err(libc::EEXIST));
    fs.fsync().unwrap();
    drop(fs); // a crash: the two records are replayed
    let mut fs = open(&store);
    let d = lookup(&mut fs, ROOT_INO, "d").unwrap();
    let f = lookup(&mut fs, d, "f").unwrap();
    let w = fs.getattr(f).unwrap();
    assert_eq!((w.kind, w.perm, w.rdev, w.uid, w.gid), (Kind::CharDev, 0, 0, 7, 8));
    let bak = lookup(&mut fs, d, "f.bak").unwrap();
    assert_eq!(read_all(&mut fs, bak), b"salts");
    let g = lookup(&mut fs, d, "g").unwrap();
    assert_eq!(read_all(&mut fs, g), b"other");
    let mut names = Vec::new();
    describe(&mut fs, d, "d", &mut names);
    assert_eq!(names.len(), 3, "{names:?}"); // f, f.bak, g
}
