//! O_TMPFILE (issue 36, xfstests generic/004, 389, 531): a file made without a name is in no
//! listing, keeps its inode number when `link` names it, and a crash keeps it only if it
//! was named before an fsync, with all it held. The crash-state harness's "tmpfiles"
//! workload goes through every power-cut state of the same.

mod common;
use common::{committed, lookup, mkfile, new_store, open, read_all};
use scion_fs::{errno, Fs, Ino, Kind, ROOT_INO};

/// A file made without a name in `dir`, open as O_TMPFILE leaves it.
fn tmpfile(fs: &mut Fs, dir: Ino) -> Ino {
    let a = fs.tmpfile(dir, 0o640, 0o022, 1000, 1000).unwrap();
    assert_eq!(a.nlink, 0);
    fs.open_file(a.ino).unwrap();
    a.ino
}

fn names(fs: &mut Fs, dir: Ino) -> Vec<String> {
    let mut v: Vec<String> = fs.readdir(dir).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
    v.sort();
    v
}

#[test]
fn a_named_tmpfile_keeps_its_number_and_everything_it_held_across_a_crash() {
    let (_t, store, mut fs) = new_store();
    let d = fs.mknod(ROOT_INO, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let f = tmpfile(&mut fs, d);
    assert!(names(&mut fs, d).is_empty(), "a nameless file is listed");
    // Whole chunks (written ahead to a pack), a buffered partial chunk, a hole between.
    let mut want = vec![0u8; 300_000];
    for (i, b) in want.iter_mut().enumerate().take(3 * 65536) {
        *b = (i * 7 % 251) as u8;
    }
    want[290_000..].fill(9);
    fs.write(f, 0, &want[..3 * 65536]).unwrap();
    fs.write(f, 290_000, &want[290_000..]).unwrap();
    fs.setxattr(f, b"user.k", b"v", 0).unwrap();
    fs.fallocate(f, libc::FALLOC_FL_KEEP_SIZE, 300_000, 1 << 20).unwrap();
    let blocks = fs.getattr(f).unwrap().blocks;
    // A checkpoint while it has no name takes nothing of it.
    fs.checkpoint().unwrap();
    let later = mkfile(&mut fs, d, "later", b"made after");
    let a = fs.link(f, d, b"named").unwrap();
    assert_eq!((a.ino, a.nlink, a.size), (f, 1, 300_000));
    assert_eq!(names(&mut fs, d), ["later", "named"]);
    fs.write(f, 5, b"after the link").unwrap();
    want[5..19].copy_from_slice(b"after the link");
    fs.fsync().unwrap();
    drop(fs); // a crash: the journal is replayed at the next open

    let mut fs = open(&store);
    let d = lookup(&mut fs, ROOT_INO, "d").unwrap();
    let g = lookup(&mut fs, d, "named").unwrap();
    assert_eq!(g, f, "the inode number changed");
    assert_eq!(read_all(&mut fs, g), want);
    let a = fs.getattr(g).unwrap();
    assert_eq!((a.nlink, a.perm, a.uid, a.blocks), (1, 0o640 & !0o022, 1000, blocks));
    assert_eq!(fs.getxattr(g, b"user.k").unwrap(), b"v");
    assert_eq!(lookup(&mut fs, d, "later").unwrap(), later);
    fs.close().unwrap();
    committed(&store);
}

#[test]
fn a_tmpfile_never_named_leaves_nothing_and_the_files_after_it_replay() {
    let (_t, store, mut fs) = new_store();
    let f = tmpfile(&mut fs, ROOT_INO);
    fs.write(f, 0, &vec![3u8; 200_000]).unwrap();
    let after = mkfile(&mut fs, ROOT_INO, "after", b"x");
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open(&store);
    assert_eq!(names(&mut fs, ROOT_INO), ["after"]);
    assert_eq!(lookup(&mut fs, ROOT_INO, "after").unwrap(), after);
    // Its id stays taken: the next file gets a new one.
    let next = mkfile(&mut fs, ROOT_INO, "next", b"y");
    assert!(next != f && next != after);
    fs.close().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.unreferenced_bytes, 0, "the nameless file's blocks were not given back");
}

#[test]
fn a_tmpfile_is_named_once_where_link_allows_and_then_links_as_any_file() {
    let (_t, store, mut fs) = new_store();
    let src = fs.mknod(ROOT_INO, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, ROOT_INO, "taken", b"");
    let c = fs.clone_dir(src, ROOT_INO, b"c", &[], b"test").unwrap();
    let f = tmpfile(&mut fs, ROOT_INO);
    fs.write(f, 0, b"hello").unwrap();
    assert_eq!(fs.link(f, ROOT_INO, b"taken").unwrap_err(), errno::EEXIST);
    assert_eq!(fs.link(f, c, b"x").unwrap_err(), errno::EXDEV, "named in another namespace");
    fs.snapshot(src, b"s", b"test").unwrap();
    fs.link(f, ROOT_INO, b"one").unwrap();
    fs.link(f, ROOT_INO, b"two").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    // Named and removed again: an orphan like any other, which nothing brings back.
    let g = tmpfile(&mut fs, ROOT_INO);
    fs.link(g, ROOT_INO, b"gone").unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();
    assert_eq!(fs.link(g, ROOT_INO, b"back").unwrap_err(), errno::ENOENT);
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open(&store);
    assert_eq!(names(&mut fs, ROOT_INO), ["c", "one", "src", "taken", "two"]);
    let one = lookup(&mut fs, ROOT_INO, "one").unwrap();
    assert_eq!(read_all(&mut fs, one), b"hello");
    assert_eq!(fs.getattr(one).unwrap().nlink, 2);
    fs.close().unwrap();
    committed(&store);
}

#[test]
fn a_tmpfile_takes_its_setgid_directorys_group() {
    let (_t, _store, mut fs) = new_store();
    let d = fs.mknod(ROOT_INO, b"d", Kind::Dir, 0o2775, 0, 0, 50, 0, &[]).unwrap().ino;
    let f = tmpfile(&mut fs, d);
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.uid, a.gid), (1000, 50), "the setgid directory's group");
}
