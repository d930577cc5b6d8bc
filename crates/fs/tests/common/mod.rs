//! Helpers the engine's integration tests share (each test file uses some of them).
#![allow(dead_code)]

use scion_fs::check::{check_committed, Report};
use scion_fs::{Fs, Ino, Kind, MountOptions};
use std::path::{Path, PathBuf};

pub fn open(dir: &Path) -> Fs {
    Fs::open(dir, MountOptions::new("test")).unwrap()
}

/// A fresh store, opened (the temporary directory lives as long as the first element).
pub fn new_store() -> (tempfile::TempDir, PathBuf, Fs) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Fs::create(&scion_store::os_host(), &store).unwrap();
    let fs = open(&store);
    (tmp, store, fs)
}

/// `check` of the committed state, which must be clean.
pub fn committed(dir: &Path) -> Report {
    let rep = check_committed(&scion_store::os_host(), dir).unwrap();
    assert!(rep.is_clean(), "{rep}");
    rep
}

pub fn read_all(fs: &mut Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// An fsync of everything acknowledged so far, as the daemon runs one (`sync_begin`, the
/// disk flushed without the engine lock, `sync_end`).
pub fn fsync(fs: &mut Fs) {
    let t = fs.sync_begin(false).unwrap();
    let r = t.run();
    fs.sync_end(t, r).unwrap();
}

/// A new file `name` in `dir` holding `data`.
pub fn mkfile(fs: &mut Fs, dir: Ino, name: &str, data: &[u8]) -> Ino {
    let f = fs
        .mknod(dir, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
        .unwrap()
        .ino;
    fs.write(f, 0, data).unwrap();
    f
}

pub fn mkdir(fs: &mut Fs, dir: Ino, name: &str) -> Ino {
    fs.mknod(dir, name.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino
}

/// `lookup` by name, the inode number or the errno.
pub fn lookup(fs: &mut Fs, dir: Ino, name: &str) -> scion_fs::FsResult<Ino> {
    fs.lookup(dir, name.as_bytes()).map(|a| a.ino)
}

/// Everything a copy of a tree must carry over (restore, rollback), as text, below `ino`
/// (sorted by name).
pub fn describe(fs: &mut Fs, ino: Ino, path: &str, out: &mut Vec<String>) {
    let mut entries = fs.readdir(ino).unwrap();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        // Looked up (and forgotten at the end), as the kernel would: readdir alone does not
        // load an inode.
        let a = fs.lookup(ino, &e.name).unwrap();
        let e = scion_fs::DirEntry { ino: a.ino, ..e };
        let mut line = format!(
            "{p} {:?} {:o} {}:{} mtime={:?} nlink={}",
            a.kind, a.perm, a.uid, a.gid, a.mtime, a.nlink
        );
        match a.kind {
            Kind::File => {
                line += &format!(
                    " data={:x?}",
                    blake3::hash(&read_all(fs, e.ino)).as_bytes()[..8].to_vec()
                )
            }
            Kind::Symlink => line += &format!(" -> {}", String::from_utf8_lossy(&fs.readlink(e.ino).unwrap())),
            _ => {}
        }
        for x in fs.listxattr(e.ino).unwrap() {
            line += &format!(" {}={:?}", String::from_utf8_lossy(&x), fs.getxattr(e.ino, &x).unwrap());
        }
        out.push(line);
        if a.kind == Kind::Dir {
            describe(fs, e.ino, &p, out);
        }
        fs.forget(e.ino, 1);
    }
}

/// `src` with a hard-linked file (`d/linked`, `d/other-name`) and a nested clone (`nested`,
/// holding `x`), its clone `c`, and in `c` the linked file and the nested clone's file
/// changed: what a clone keeps apart from its directory trees (its link table, the nested
/// clone's namespace) changed under directories whose trees are the same in both. Returns
/// (`src`, `c`).
pub fn clone_with_links_and_nested_changed(fs: &mut Fs) -> (Ino, Ino) {
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let d = fs.mknod(src, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let f = mkfile(fs, d, "linked", &vec![1u8; 100_000]);
    fs.link(f, d, b"other-name").unwrap();
    let inner = fs.mknod(src, b"inner", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(fs, inner, "x", b"inner file");
    fs.clone_dir(inner, src, b"nested", &[], b"/src/inner").unwrap();
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    fs.checkpoint().unwrap();
    let cd = lookup(fs, c, "d").unwrap();
    let cf = lookup(fs, cd, "linked").unwrap();
    fs.write(cf, 10, b"changed").unwrap();
    let cn = lookup(fs, c, "nested").unwrap();
    let cx = lookup(fs, cn, "x").unwrap();
    fs.write(cx, 0, b"INNER").unwrap();
    fs.checkpoint().unwrap();
    (src, c)
}
