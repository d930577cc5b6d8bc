//! A node rewritten by `apply` takes its unchanged values from the old node without copying
//! their bytes (`Value::bytes` is shared): a leaf of small files' records is rewritten whole
//! for one changed record, and copying the others was a fifth of a fold's time under the
//! engine lock.

use scion_store::BlockStore;
use scion_tree::{Forest, RefTable, Value};
use std::sync::Arc;

fn forest(dir: &std::path::Path) -> Forest {
    std::fs::create_dir_all(dir.join("packs")).unwrap();
    let store = Arc::new(BlockStore::open(&scion_store::os_host(), dir, 1, 0, true).unwrap());
    Forest::new(store, RefTable::default())
}

fn record(i: u32) -> Value {
    Value::new(vec![i as u8; 1500], Vec::new())
}

#[test]
fn unchanged_values_are_shared_by_the_rewritten_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = forest(dir.path());
    // Ten records of 1,500 bytes: one leaf (16 KiB target).
    let ops = (0..10u32).map(|i| (format!("f{i}").into_bytes(), Some(record(i)))).collect();
    let v1 = f.apply(None, ops).unwrap();
    let before = f.get(v1.as_ref(), b"f3").unwrap().unwrap();
    // One other record of the leaf changes: the new leaf holds f3's bytes, not a copy.
    let v2 = f.apply(v1.as_ref(), vec![(b"f7".to_vec(), Some(record(70)))]).unwrap();
    assert_ne!(v1, v2, "a new version of the leaf");
    let after = f.get(v2.as_ref(), b"f3").unwrap().unwrap();
    assert_eq!(after, before);
    assert_eq!(after.bytes.as_ptr(), before.bytes.as_ptr(), "an unchanged value was copied");
    assert_eq!(f.get(v2.as_ref(), b"f7").unwrap().unwrap(), record(70));
}
