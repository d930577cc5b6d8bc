//! The inodes loaded in memory (`Fs::nodes`), found by number and, for clones and snapshots,
//! by namespace: destroying or rolling back a clone visits that clone's loaded inodes, not
//! every one (with 120,000 loaded, the walk held the engine lock about 4 ms per destroy;
//! `bench/destroy`).
//!
//! Reads go through `Deref` to the map. Every change of membership goes through `insert`,
//! `remove` and `retain` here, which keep the index; a node's namespace is set when it is
//! made and never changes (`Node::ns`), so `get_mut` cannot break it. Debug builds check the
//! index whole whenever it is asked (`in_ns`, `has_ns`).

use crate::fs::{Ino, InoMap, InoSet, Node};
use std::collections::HashMap;
use std::ops::Deref;

/// The main tree's namespace: never destroyed nor rolled back, and holding most loaded inodes,
/// so it is left out of the index (which would otherwise cost a set entry per inode).
const MAIN_NS: u32 = 1;

#[derive(Default)]
pub(crate) struct NodeTable {
    map: InoMap<Box<Node>>,
    /// The loaded inodes of each namespace but the main one; no empty sets.
    by_ns: HashMap<u32, InoSet>,
}

impl Deref for NodeTable {
    type Target = InoMap<Box<Node>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl NodeTable {
    pub(crate) fn insert(&mut self, ino: Ino, node: Box<Node>) -> Option<Box<Node>> {
        let ns = node.ns;
        let old = self.map.insert(ino, node);
        if let Some(o) = &old {
            unindex(&mut self.by_ns, ino, o.ns);
        }
        if ns != MAIN_NS {
            self.by_ns.entry(ns).or_default().insert(ino);
        }
        old
    }

    pub(crate) fn remove(&mut self, ino: &Ino) -> Option<Box<Node>> {
        let n = self.map.remove(ino)?;
        unindex(&mut self.by_ns, *ino, n.ns);
        Some(n)
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Ino, &mut Box<Node>) -> bool) {
        let by_ns = &mut self.by_ns;
        self.map.retain(|ino, n| {
            let kept = keep(ino, n);
            if !kept {
                unindex(by_ns, *ino, n.ns);
            }
            kept
        });
    }

    pub(crate) fn get_mut(&mut self, ino: &Ino) -> Option<&mut Box<Node>> {
        self.map.get_mut(ino)
    }

    /// Gives back the table's slack once most of it is empty (a hash table never shrinks by
    /// itself: after a walk of a million files it would keep their slots).
    pub(crate) fn give_back_slack(&mut self) {
        if let Some(to) = shrunk(self.map.capacity(), self.map.len(), 4096) {
            self.map.shrink_to(to);
        }
    }

    /// Bytes the index's tables take (for `Fs::memory`): a key and a control byte per slot.
    pub(crate) fn index_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Ino>() + 1;
        let sets: usize = self.by_ns.values().map(|s| s.capacity() * slot).sum();
        sets + self.by_ns.capacity() * (std::mem::size_of::<(u32, InoSet)>() + 1)
    }

    /// The loaded inodes of clone or snapshot `ns`, in no particular order.
    pub(crate) fn in_ns(&self, ns: u32) -> Vec<Ino> {
        assert_ne!(ns, MAIN_NS, "the main tree's inodes are not indexed");
        self.debug_check();
        self.by_ns.get(&ns).map_or_else(Vec::new, |s| s.iter().copied().collect())
    }

    /// Whether any inode of clone or snapshot `ns` is loaded.
    pub(crate) fn has_ns(&self, ns: u32) -> bool {
        assert_ne!(ns, MAIN_NS, "the main tree's inodes are not indexed");
        self.debug_check();
        self.by_ns.contains_key(&ns)
    }

    /// Debug builds: the index holds exactly the loaded inodes outside the main tree, each
    /// under its own namespace.
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            let outside = self.map.values().filter(|n| n.ns != MAIN_NS).count();
            assert_eq!(self.by_ns.values().map(|s| s.len()).sum::<usize>(), outside, "index size");
            for (ns, set) in &self.by_ns {
                assert!(!set.is_empty(), "empty set kept for namespace {ns}");
                assert!(set.iter().all(|i| self.map.get(i).is_some_and(|n| n.ns == *ns)), "namespace {ns}");
            }
        }
    }
}

fn unindex(by_ns: &mut HashMap<u32, InoSet>, ino: Ino, ns: u32) {
    if ns == MAIN_NS {
        return;
    }
    let set = by_ns.get_mut(&ns).expect("a loaded inode's namespace is indexed");
    assert!(set.remove(&ino), "inode {ino} missing from namespace {ns}'s index");
    if set.is_empty() {
        by_ns.remove(&ns);
    } else if let Some(to) = shrunk(set.capacity(), set.len(), 1024) {
        // As the table's own (`give_back_slack`): a clone walked once and forgotten must not
        // keep a set sized for every inode it had loaded.
        set.shrink_to(to);
    }
}

/// The capacity to shrink a hash table of `capacity` slots holding `len` entries to, when more
/// than three quarters of it (and `slack` slots) are empty: half empty after, so that shrinking
/// is rare.
fn shrunk(capacity: usize, len: usize, slack: usize) -> Option<usize> {
    (capacity > 4 * len + slack).then_some(2 * len + slack / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Loc;
    use crate::inode::{Inode, Kind};

    fn node(ns: u32) -> Box<Node> {
        Box::new(Node::new(Inode::new(2, Kind::File, 0o644, 0, 0, Default::default()), ns, Loc::Linked))
    }

    #[test]
    fn the_index_follows_inserts_removals_and_retains() {
        let mut t = NodeTable::default();
        t.insert(1, node(1));
        t.insert(10, node(5));
        t.insert(11, node(5));
        t.insert(12, node(6));
        assert!(!t.has_ns(7));
        let mut five = t.in_ns(5);
        five.sort();
        assert_eq!(five, vec![10, 11]);
        // Replaced under the same number by a node of another namespace.
        t.insert(11, node(6));
        assert_eq!(t.in_ns(5), vec![10]);
        assert_eq!(t.in_ns(6).len(), 2);
        assert!(t.remove(&10).is_some());
        assert!(!t.has_ns(5), "an emptied namespace leaves the index");
        t.retain(|i, _| *i != 12);
        assert_eq!(t.in_ns(6), vec![11]);
        assert!(t.remove(&99).is_none());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_clone_walked_and_forgotten_gives_its_index_slack_back() {
        let mut t = NodeTable::default();
        for i in 0..20_000 {
            t.insert(100 + i, node(9));
        }
        let full = t.index_bytes();
        for i in 10..20_000 {
            t.remove(&(100 + i));
        }
        assert_eq!(t.in_ns(9).len(), 10);
        assert!(t.index_bytes() * 10 < full, "{} of {full} bytes kept", t.index_bytes());
    }
}
