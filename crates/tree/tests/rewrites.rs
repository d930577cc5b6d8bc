//! Each fold counts the nodes it makes and how many of those replace nodes the fold before
//! it made (`Forest::fold_begins`, `fold_rewrites`): the fold policy's measure of whether a
//! larger fold would have saved writes (scion_fs::fold_policy).

use scion_store::BlockStore;
use scion_tree::{Forest, RefTable, Value};
use std::sync::Arc;

fn forest(dir: &std::path::Path) -> Forest {
    std::fs::create_dir_all(dir.join("packs")).unwrap();
    let store = Arc::new(BlockStore::open(&scion_store::os_host(), dir, 1, 0, true).unwrap());
    Forest::new(store, RefTable::default())
}

/// 1,500 bytes: ten records to a 16 KiB leaf.
fn put(k: u32) -> (Vec<u8>, Option<Value>) {
    (format!("k{k:05}").into_bytes(), Some(Value::new(vec![k as u8; 1500], Vec::new())))
}

#[test]
fn a_fold_counts_the_nodes_it_replaces_that_the_fold_before_made() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = forest(dir.path());
    f.fold_begins();
    let v1 = f.apply(None, (0..200).map(put).collect()).unwrap();
    let (made, again) = f.fold_rewrites();
    assert!(made >= 21, "twenty leaves or so and a root: {made}");
    assert_eq!(again, None, "no fold before it made anything");

    // One key: its leaf and the root, both made by the fold before.
    f.fold_begins();
    let v2 = f.apply(v1.as_ref(), vec![put(5)]).unwrap();
    assert_eq!(f.fold_rewrites(), (2, Some(2)));

    // A key in another leaf: the root the fold before made, and a leaf made two folds ago.
    f.fold_begins();
    let v3 = f.apply(v2.as_ref(), vec![put(150)]).unwrap();
    assert_eq!(f.fold_rewrites(), (2, Some(1)));

    // Folds between applies with nothing made: the next has nothing to tell by.
    f.fold_begins();
    f.fold_begins();
    f.apply(v3.as_ref(), vec![put(7)]).unwrap();
    assert_eq!(f.fold_rewrites(), (2, None));
}
