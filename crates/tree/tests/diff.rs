//! `Forest::diff` against a naive diff of the two trees' contents (proptest), on versions
//! that share structure and on unrelated trees; and its cost: one change in a tree of a
//! million keys reads only the nodes on the changed path of each side.

use proptest::prelude::*;
use scion_store::{BlockPtr, BlockStore};
use scion_tree::{Forest, Op, RefTable, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

fn forest(dir: &std::path::Path) -> Forest {
    std::fs::create_dir_all(dir.join("packs")).unwrap();
    let store = Arc::new(BlockStore::open(&scion_store::os_host(), dir, 1, 0, true).unwrap());
    Forest::new(store, RefTable::default())
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)>;

fn key(k: u32) -> Vec<u8> {
    // Long enough keys that a few hundred of them fill several nodes.
    let mut v = format!("key-{k:08}-").into_bytes();
    v.resize(120, b'.');
    v
}

fn build(f: &mut Forest, root: Option<&BlockPtr>, ops: &BTreeMap<u32, Option<u8>>) -> Option<BlockPtr> {
    let ops: Vec<Op> = ops
        .iter()
        .map(|(k, v)| (key(*k), v.map(|v| Value::new(vec![v; 40], Vec::new()))))
        .collect();
    f.apply(root, ops).unwrap()
}

fn contents(f: &Forest, root: Option<&BlockPtr>) -> Map {
    let mut out = Map::new();
    f.scan(root, &[], &mut |k, v| {
        out.insert(k.to_vec(), v.bytes.to_vec());
        true
    })
    .unwrap();
    out
}

fn naive(a: &Map, b: &Map) -> Changes {
    let mut keys: Vec<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| ((*k).clone(), a.get(k).cloned(), b.get(k).cloned()))
        .collect()
}

fn diff(f: &Forest, a: Option<&BlockPtr>, b: Option<&BlockPtr>) -> Changes {
    let mut out = Vec::new();
    f.diff(a, b, &mut |k, x, y| {
        out.push((k.to_vec(), x.map(|v| v.bytes.to_vec()), y.map(|v| v.bytes.to_vec())));
        true
    })
    .unwrap();
    out
}

fn batch() -> impl Strategy<Value = BTreeMap<u32, Option<u8>>> {
    prop::collection::btree_map(0u32..600, prop::option::weighted(0.8, any::<u8>()), 0..300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two versions sharing structure (the second made from the first by a batch), and
    /// two unrelated trees: the diff is the naive one, either way round, and from or to an
    /// empty tree.
    #[test]
    fn diff_equals_the_naive_diff(base in batch(), change in batch(), other in batch(), small in 0u32..5) {
        let tmp = tempfile::tempdir().unwrap();
        let mut f = forest(tmp.path());
        let a = build(&mut f, None, &base);
        // A small change half the time, so that most subtrees are shared.
        let change: BTreeMap<u32, Option<u8>> = if small > 1 {
            change.into_iter().take(small as usize).collect()
        } else {
            change
        };
        let b = build(&mut f, a.as_ref(), &change);
        let c = build(&mut f, None, &other);
        let (ma, mb, mc) = (contents(&f, a.as_ref()), contents(&f, b.as_ref()), contents(&f, c.as_ref()));
        prop_assert_eq!(diff(&f, a.as_ref(), b.as_ref()), naive(&ma, &mb));
        prop_assert_eq!(diff(&f, b.as_ref(), a.as_ref()), naive(&mb, &ma));
        prop_assert_eq!(diff(&f, a.as_ref(), c.as_ref()), naive(&ma, &mc));
        prop_assert_eq!(diff(&f, None, b.as_ref()), naive(&Map::new(), &mb));
        prop_assert_eq!(diff(&f, b.as_ref(), None), naive(&mb, &Map::new()));
        prop_assert!(diff(&f, a.as_ref(), a.as_ref()).is_empty());
    }
}

/// One changed key in a tree of 1,000,000: the diff reads the changed path on each side
/// (a root-to-leaf path is 3-4 nodes here), not the 1,000,000 entries' ~7,000 leaves.
#[test]
fn one_change_in_a_million_keys_reads_a_few_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut f = forest(tmp.path());
    let ops: Vec<Op> = (0..1_000_000u32)
        .map(|i| {
            (
                i.to_be_bytes().to_vec(),
                Some(Value::new(vec![(i % 251) as u8; 8], Vec::new())),
            )
        })
        .collect();
    let a = f.apply(None, ops).unwrap().unwrap();
    // The tree's height: nodes on one root-to-leaf path.
    let mut height = 0;
    {
        let mut p = a;
        loop {
            height += 1;
            match &*f.load(&p).unwrap() {
                scion_tree::Node::Internal { children, .. } => p = children[children.len() / 2].1,
                scion_tree::Node::Leaf(_) => break,
            }
        }
    }
    f.inc(&a); // the old version stays
    let k = 123_456u32.to_be_bytes().to_vec();
    let b = f
        .apply(
            Some(&a),
            vec![(k.clone(), Some(Value::new(b"changed".to_vec(), Vec::new())))],
        )
        .unwrap()
        .unwrap();
    let mut seen = Vec::new();
    let stats = f
        .diff(Some(&a), Some(&b), &mut |key, x, y| {
            seen.push((key.to_vec(), x.is_some(), y.map(|v| v.bytes.to_vec())));
            true
        })
        .unwrap();
    assert_eq!(seen, vec![(k, true, Some(b"changed".to_vec()))]);
    assert!(
        stats.nodes_read <= 2 * height,
        "{} nodes read for one change (height {height})",
        stats.nodes_read
    );
    assert!(stats.subtrees_skipped > 0);
    println!("one change in 1,000,000 keys: {stats:?}, height {height}");
}
