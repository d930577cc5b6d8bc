//! The differences between two trees, found by walking both at once and skipping every pair
//! of subtrees with the same content hash without reading it. Two versions of a tree that
//! share structure (a clone and its source, a snapshot and the live tree) differ only along
//! the paths their changes copied, so the cost follows the changes, not the trees: one
//! change in a tree of a million keys reads a handful of nodes.
//!
//! Each side is a cursor: a stack of what is left to visit, in key order, each item either
//! a subtree not read yet (known by its pointer and the lowest key its parent allows it) or
//! one entry of a leaf already read. The two fronts are compared: equal subtrees are
//! skipped, an entry below everything the other side has left is added or removed, and
//! otherwise the subtree that starts first (or the taller one) is read and replaced by its
//! children.

use crate::{Forest, Node, Value};
use scion_store::{BlockPtr, Result};
use std::sync::Arc;

/// What a diff cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffStats {
    /// Nodes read (both sides).
    pub nodes_read: u64,
    /// Pairs of subtrees skipped because their content hashes were equal.
    pub subtrees_skipped: u64,
}

enum Item {
    /// A subtree not read yet: its lower key bound (inclusive) and its height (`u8::MAX`
    /// for a root, whose height is not known until it is read).
    Sub { lo: Vec<u8>, ptr: BlockPtr, level: u8 },
    /// Entry `i` of a leaf.
    Entry(Arc<Node>, usize),
}

impl Item {
    fn key(&self) -> &[u8] {
        match self {
            Item::Sub { lo, .. } => lo,
            Item::Entry(n, i) => entry(n, *i).0,
        }
    }
}

fn entry(n: &Node, i: usize) -> (&[u8], &Value) {
    match n {
        Node::Leaf(e) => (&e[i].0, &e[i].1),
        Node::Internal { .. } => unreachable!("entries come from leaves"),
    }
}

/// One side: items left to visit, the next on top.
struct Cursor {
    stack: Vec<Item>,
}

impl Cursor {
    fn new(root: Option<&BlockPtr>) -> Cursor {
        let stack = root
            .map(|p| Item::Sub {
                lo: Vec::new(),
                ptr: *p,
                level: u8::MAX,
            })
            .into_iter()
            .collect();
        Cursor { stack }
    }

    /// Replaces the subtree on top with its children (or entries).
    fn expand(&mut self, forest: &Forest, stats: &mut DiffStats) -> Result<()> {
        let Some(Item::Sub { ptr, .. }) = self.stack.pop() else {
            unreachable!("expand of an entry");
        };
        let node = forest.load(&ptr)?;
        stats.nodes_read += 1;
        match &*node {
            Node::Leaf(e) => {
                for i in (0..e.len()).rev() {
                    self.stack.push(Item::Entry(node.clone(), i));
                }
            }
            Node::Internal { level, children } => {
                for (lo, p) in children.iter().rev() {
                    self.stack.push(Item::Sub {
                        lo: lo.clone(),
                        ptr: *p,
                        level: level - 1,
                    });
                }
            }
        }
        Ok(())
    }

    /// Reads down to the next entry, or None when nothing is left.
    fn next_entry(&mut self, forest: &Forest, stats: &mut DiffStats) -> Result<Option<(Arc<Node>, usize)>> {
        loop {
            match self.stack.pop() {
                None => return Ok(None),
                Some(Item::Entry(n, i)) => return Ok(Some((n, i))),
                Some(sub) => {
                    self.stack.push(sub);
                    self.expand(forest, stats)?;
                }
            }
        }
    }
}

impl Forest {
    /// Calls `f(key, old, new)` for every key whose value differs between the trees at `a`
    /// and `b`, in key order: `old` is its value in `a`, `new` in `b` (`None`: absent there).
    /// Subtrees with equal content hashes are skipped unread. `f` returns false to stop.
    pub fn diff(
        &self,
        a: Option<&BlockPtr>,
        b: Option<&BlockPtr>,
        f: &mut dyn FnMut(&[u8], Option<&Value>, Option<&Value>) -> bool,
    ) -> Result<DiffStats> {
        let mut stats = DiffStats::default();
        let (mut a, mut b) = (Cursor::new(a), Cursor::new(b));
        loop {
            let (Some(x), Some(y)) = (a.stack.last(), b.stack.last()) else {
                break;
            };
            match (x, y) {
                (Item::Sub { ptr: p, .. }, Item::Sub { ptr: q, .. }) if p.hash == q.hash && p.kind == q.kind => {
                    // Same content, and everything before it consumed on both sides: the same
                    // entries, skipped on both.
                    a.stack.pop();
                    b.stack.pop();
                    stats.subtrees_skipped += 1;
                }
                (Item::Entry(n, i), Item::Entry(m, j)) => {
                    let ((ka, va), (kb, vb)) = (entry(n, *i), entry(m, *j));
                    let go = match ka.cmp(kb) {
                        std::cmp::Ordering::Less => f(ka, Some(va), None),
                        std::cmp::Ordering::Greater => f(kb, None, Some(vb)),
                        std::cmp::Ordering::Equal => va == vb || f(ka, Some(va), Some(vb)),
                    };
                    if !go {
                        return Ok(stats);
                    }
                    match ka.cmp(kb) {
                        std::cmp::Ordering::Less => drop(a.stack.pop()),
                        std::cmp::Ordering::Greater => drop(b.stack.pop()),
                        std::cmp::Ordering::Equal => {
                            a.stack.pop();
                            b.stack.pop();
                        }
                    }
                }
                // An entry below the lowest key the other side has left is only on its side.
                (Item::Entry(n, i), y) if entry(n, *i).0 < y.key() => {
                    let (k, v) = entry(n, *i);
                    if !f(k, Some(v), None) {
                        return Ok(stats);
                    }
                    a.stack.pop();
                }
                (x, Item::Entry(m, j)) if entry(m, *j).0 < x.key() => {
                    let (k, v) = entry(m, *j);
                    if !f(k, None, Some(v)) {
                        return Ok(stats);
                    }
                    b.stack.pop();
                }
                (Item::Entry(..), _) => b.expand(self, &mut stats)?,
                (_, Item::Entry(..)) => a.expand(self, &mut stats)?,
                (Item::Sub { lo: la, level: va, .. }, Item::Sub { lo: lb, level: vb, .. }) => {
                    // Read the subtree that starts first; at the same start the taller one
                    // (its children may line up with the other), or both.
                    let (ea, eb) = match la.cmp(lb) {
                        std::cmp::Ordering::Less => (true, false),
                        std::cmp::Ordering::Greater => (false, true),
                        std::cmp::Ordering::Equal => (va >= vb, vb >= va),
                    };
                    if ea {
                        a.expand(self, &mut stats)?;
                    }
                    if eb {
                        b.expand(self, &mut stats)?;
                    }
                }
            }
        }
        // One side is done: the rest of the other is only on its side.
        while let Some((n, i)) = a.next_entry(self, &mut stats)? {
            let (k, v) = entry(&n, i);
            if !f(k, Some(v), None) {
                return Ok(stats);
            }
        }
        while let Some((n, i)) = b.next_entry(self, &mut stats)? {
            let (k, v) = entry(&n, i);
            if !f(k, None, Some(v)) {
                return Ok(stats);
            }
        }
        Ok(stats)
    }
}
