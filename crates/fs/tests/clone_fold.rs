//! What a clone folds first (`Fs::fold`, issue 38 item 3): exactly what its source's trees
//! lack. The namespaces that can hold something below the source are found from its
//! namespace's mount table (the clones mounted below it, and theirs), not by asking every
//! namespace of the store: snapshots and clones elsewhere are neither asked nor folded.
//!
//! - A change in a clone nested two deep below the source is in the new clone, and after a
//!   crash too, while a thousand snapshots and dirty clones elsewhere sit in the store.
//! - Changes only elsewhere (in other clones) make no checkpoint, and the daemon is told
//!   not to fold ahead (`would_fold_below`).

use scion_fs::{Fs, Ino};

mod common;
use common::{committed, fsync, lookup, mkdir, mkfile, new_store, open, read_all};

/// `src/inner` cloned as `src/nested`, and `src/nested/deep` cloned as `src/nested/deeper`
/// (a clone nested in a clone below `src`); `other` with a thousand snapshots and twenty
/// clones of it at the top, each with an unfolded write. Returns (`src`, the file `x` in
/// `src/nested/deeper`, the clones of `other`).
fn store_with_much_elsewhere(fs: &mut Fs) -> (Ino, Ino, Vec<Ino>) {
    let root = fs.root();
    let src = mkdir(fs, root, "src");
    let inner = mkdir(fs, src, "inner");
    let deep = mkdir(fs, inner, "deep");
    mkfile(fs, deep, "x", b"committed x");
    let nested = fs.clone_dir(inner, src, b"nested", &[], b"/src/inner").unwrap();
    let ndeep = lookup(fs, nested, "deep").unwrap();
    let deeper = fs.clone_dir(ndeep, nested, b"deeper", &[], b"/src/nested/deep").unwrap();
    let other = mkdir(fs, root, "other");
    mkfile(fs, other, "f", b"other");
    for k in 0..1000 {
        fs.snapshot(other, format!("s{k}").as_bytes(), b"/other").unwrap();
    }
    let clones: Vec<Ino> = (0..20)
        .map(|k| fs.clone_dir(other, root, format!("c{k}").as_bytes(), &[], b"/other").unwrap())
        .collect();
    fs.checkpoint().unwrap();
    for &c in &clones {
        let f = lookup(fs, c, "f").unwrap();
        fs.write(f, 0, b"OTHER").unwrap();
    }
    let x = lookup(fs, deeper, "x").unwrap();
    (src, x, clones)
}

#[test]
fn a_clone_holds_what_changed_in_a_clone_nested_below_its_source() {
    let (_tmp, store, mut fs) = new_store();
    let (src, x, _) = store_with_much_elsewhere(&mut fs);
    fs.write(x, 0, b"CHANGED").unwrap();
    let root = fs.root();
    let copy = fs.clone_dir(src, root, b"copy", &[], b"/src").unwrap();
    let path = |fs: &mut Fs, top: Ino| {
        let n = lookup(fs, top, "nested").unwrap();
        let d = lookup(fs, n, "deeper").unwrap();
        lookup(fs, d, "x").unwrap()
    };
    let cx = path(&mut fs, copy);
    assert_eq!(read_all(&mut fs, cx), b"CHANGEDed x");
    fsync(&mut fs);
    drop(fs); // a crash: the clone lives in the journal
    let mut fs = open(&store);
    let root = fs.root();
    let copy = lookup(&mut fs, root, "copy").unwrap();
    let cx = path(&mut fs, copy);
    assert_eq!(read_all(&mut fs, cx), b"CHANGEDed x", "after the journal's replay");
    // The source's own nested file, apart from the copy's.
    let src = lookup(&mut fs, root, "src").unwrap();
    let sx = path(&mut fs, src);
    fs.write(sx, 0, b"AGAIN!!").unwrap();
    assert_eq!(read_all(&mut fs, cx), b"CHANGEDed x");
    fs.close().unwrap();
    committed(&store);
}

#[test]
fn changes_only_elsewhere_make_no_checkpoint() {
    let (_tmp, store, mut fs) = new_store();
    let (src, _, clones) = store_with_much_elsewhere(&mut fs);
    let before = fs.status_facts().generation;
    // What the daemon asks before folding ahead of a clone without the lock (`prefold`).
    assert!(!fs.would_fold_below(b"src"), "changes only elsewhere");
    assert!(fs.would_fold_below(b"c0"), "c0 has an unfolded write");
    assert!(fs.would_fold_below(b"no/such/dir"), "a path that does not resolve: cannot tell");
    let root = fs.root();
    for k in 0..5 {
        fs.clone_dir(src, root, format!("copy{k}").as_bytes(), &[], b"/src").unwrap();
    }
    assert_eq!(fs.status_facts().generation, before, "a clone of src folded changes made elsewhere");
    // A change below the source is folded by the next clone.
    let f = lookup(&mut fs, src, "inner").unwrap();
    mkfile(&mut fs, f, "new", b"new");
    fs.clone_dir(src, root, b"copy-after", &[], b"/src").unwrap();
    assert!(fs.status_facts().generation > before, "a change below src was not folded");
    // The other clones' writes are theirs.
    for c in clones {
        let f = lookup(&mut fs, c, "f").unwrap();
        assert_eq!(read_all(&mut fs, f), b"OTHER");
    }
    fs.close().unwrap();
    committed(&store);
}
