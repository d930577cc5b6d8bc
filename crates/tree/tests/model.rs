//! The tree against an in-memory model (BTreeMap), with clones: random batches are applied
//! to several versions that share structure, and after every batch each version must equal
//! its model, every block must be counted exactly as often as it is referenced, and no block
//! reachable from a live version may have been freed.

use proptest::prelude::*;
use scion_store::{BlockKind, BlockPtr, BlockStore};
use scion_tree::{Forest, RefTable, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

fn forest(dir: &std::path::Path) -> Forest {
    std::fs::create_dir_all(dir.join("packs")).unwrap();
    let store = Arc::new(BlockStore::open(&scion_store::os_host(), dir, 1, 0, true).unwrap());
    Forest::new(store, RefTable::default())
}

fn contents(f: &Forest, root: Option<&BlockPtr>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    f.scan(root, &[], &mut |k, v| {
        out.insert(k.to_vec(), v.bytes.to_vec());
        true
    })
    .unwrap();
    out
}

/// Counts pointers from live roots and compares them with the reference table.
fn check_counts(f: &Forest, roots: &[Option<BlockPtr>], freed: &HashSet<u64>) {
    let mut found: HashMap<u64, u32> = HashMap::new();
    for r in roots.iter().flatten() {
        *found.entry(r.addr).or_default() += 1;
    }
    let mut stack: Vec<BlockPtr> = roots.iter().flatten().copied().collect();
    let mut seen = HashSet::new();
    while let Some(p) = stack.pop() {
        assert!(!freed.contains(&p.addr), "live block {p} was freed");
        if !seen.insert(p.addr) || p.kind != BlockKind::Node {
            continue;
        }
        for c in f.load(&p).unwrap().child_ptrs() {
            *found.entry(c.addr).or_default() += 1;
            stack.push(c);
        }
    }
    for (addr, n) in &found {
        assert_eq!(f.refs.get(*addr), *n, "count of block {addr:#x}");
    }
    for (addr, _) in f.refs.iter() {
        assert!(found.contains_key(&addr), "table keeps a dead block {addr:#x}");
    }
}

#[derive(Debug, Clone)]
enum Step {
    Batch {
        version: usize,
        ops: Vec<(u16, Option<u16>)>,
    },
    Clone {
        version: usize,
    },
    Drop {
        version: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0usize..4, prop::collection::vec((0u16..3000, prop::option::weighted(0.7, 0u16..500)), 1..400))
            .prop_map(|(version, ops)| Step::Batch { version, ops }),
        1 => (0usize..4).prop_map(|version| Step::Clone { version }),
        1 => (0usize..4).prop_map(|version| Step::Drop { version }),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key-{k:05}").into_bytes()
}

fn value(v: u16) -> Vec<u8> {
    // Values of varied size so that nodes split at different places.
    vec![(v % 251) as u8; (v as usize * 7) % 300]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn tree_matches_model_with_clones(steps in prop::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut f = forest(dir.path());
        let mut versions: Vec<(Option<BlockPtr>, BTreeMap<Vec<u8>, Vec<u8>>)> = vec![(None, BTreeMap::new())];
        let mut freed = HashSet::new();
        for s in steps {
            match s {
                Step::Batch { version, ops } => {
                    let i = version % versions.len();
                    let mut batch: BTreeMap<Vec<u8>, Option<Value>> = BTreeMap::new();
                    for (k, v) in ops {
                        batch.insert(key(k), v.map(|v| Value::new(value(v), vec![])));
                    }
                    let (root, model) = &mut versions[i];
                    for (k, v) in &batch {
                        match v {
                            Some(v) => { model.insert(k.clone(), v.bytes.to_vec()); }
                            None => { model.remove(k); }
                        }
                    }
                    let old = *root;
                    let new = f.apply(old.as_ref(), batch.into_iter().collect()).unwrap();
                    if let Some(o) = old { f.release(&o).unwrap(); }
                    versions[i].0 = new;
                }
                Step::Clone { version } => {
                    let i = version % versions.len();
                    let v = versions[i].clone();
                    if let Some(r) = v.0 { f.inc(&r); }
                    versions.push(v);
                }
                Step::Drop { version } => {
                    if versions.len() > 1 {
                        let i = version % versions.len();
                        let (r, _) = versions.remove(i);
                        if let Some(r) = r { f.release(&r).unwrap(); }
                    }
                }
            }
            freed.extend(f.freed.drain(..).map(|p| p.addr));
            for (root, model) in &versions {
                prop_assert_eq!(&contents(&f, root.as_ref()), model);
                if let Some(r) = root {
                    f.walk(r, &mut |_| true, &mut |_, _| Ok(())).unwrap();
                }
            }
            let roots: Vec<_> = versions.iter().map(|v| v.0).collect();
            check_counts(&f, &roots, &freed);
        }
        // Dropping every version frees every block.
        for (r, _) in versions.drain(..) {
            if let Some(r) = r { f.release(&r).unwrap(); }
        }
        prop_assert!(f.refs.is_empty());
    }
}

#[test]
fn get_and_scan_from_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = forest(dir.path());
    let ops = (0..5000u16)
        .map(|k| (key(k), Some(Value::new(value(k), vec![]))))
        .collect();
    let root = f.apply(None, ops).unwrap().unwrap();
    assert_eq!(f.get(Some(&root), &key(1234)).unwrap().unwrap().bytes, value(1234));
    assert!(f.get(Some(&root), b"nope").unwrap().is_none());
    let mut got = Vec::new();
    f.scan(Some(&root), &key(4990), &mut |k, _| {
        got.push(k.to_vec());
        true
    })
    .unwrap();
    assert_eq!(got.len(), 10);
    assert!(
        matches!(*f.load(&root).unwrap(), scion_tree::Node::Internal { .. }),
        "5000 entries need more than a leaf"
    );
}
