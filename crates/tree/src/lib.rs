//! Persistent copy-on-write B+trees over the block store.
//!
//! A tree maps byte keys to values; a value carries bytes and may *own* pointers to other
//! blocks (the root of another tree, a data block), which is how the filesystem above builds
//! a tree of trees. Trees are changed only by [`Forest::apply`], which takes a sorted batch of
//! puts and removes and returns a new root, copying the path from each changed leaf to the
//! root (shadowing) while every unchanged subtree stays shared with the old version.
//!
//! Space is tracked with reference counts in the style of Rodeh ("B-trees, shadowing, and
//! clones"): a block's count is the number of nodes or values pointing at it, kept in a
//! [`RefTable`] that stores only counts above one. When a shared node is shadowed its
//! children gain a reference; when a count drops to zero the block is freed and its children
//! lose one. Freeing therefore costs time in proportion to what is freed, never to the size
//! of the store, and cloning a whole tree is one increment.

mod diff;
mod node;
mod refs;

pub use diff::DiffStats;
pub use node::{Node, Value, MAX_KEY_LEN};
pub use refs::RefTable;

use lru::LruCache;
use scion_store::{BlockKind, BlockPtr, BlockStore, Error, Result};
use std::sync::{Arc, Mutex};

/// Target encoded size of a node; a node is split when it grows past this.
pub const NODE_TARGET: usize = 16 << 10;

/// The most node addresses a fold keeps for the next to compare with (`Rewrites`): 8 MiB or
/// so. A larger fold (a checkpoint of a million changed files) is not compared; the folds
/// that policy asks about are a thousand inodes or so.
const REWRITES_KEPT: usize = 1 << 18;

/// One change of a batch: `Some(value)` puts, `None` removes.
pub type Op = (Vec<u8>, Option<Value>);

/// What the node cache may hold by default, counted in the memory its decoded nodes take
/// (`Node::memory`; about twice their encoded size): the metadata of a tree like the Linux
/// sources' (78,579 files, ~40 MiB encoded) mostly stays in the daemon after the kernel's
/// caches are dropped, as ZFS's ARC would keep it, and the daemon's memory stays bounded
/// (mount option `node_cache`).
pub const NODE_CACHE_BYTES: usize = 64 << 20;

static NODE_CACHE_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(NODE_CACHE_BYTES);

/// The bound of the node cache of each forest opened from now on (mount option
/// `node_cache=`; at least 1 MiB). The daemon sets it before it opens any volume.
pub fn set_node_cache_limit(bytes: usize) {
    NODE_CACHE_LIMIT.store(bytes.max(1 << 20), std::sync::atomic::Ordering::Relaxed);
}

fn node_cache_limit() -> usize {
    NODE_CACHE_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Decoded nodes by block address, bounded by their encoded size, least recently used out
/// first. (A bound in nodes held 16,384 of them: one per small file's content tree, so a
/// tree of 78,579 files went back to the disk for every file it listed or read.)
struct NodeCache {
    lru: LruCache<u64, (Arc<Node>, usize)>,
    bytes: usize,
    limit: usize,
    /// Nodes let go of while drops are deferred (`Forest::defer_drops`), for the taker to drop.
    dead: Option<Vec<Arc<Node>>>,
}

impl NodeCache {
    fn new(limit: usize) -> NodeCache {
        NodeCache {
            lru: LruCache::unbounded(),
            bytes: 0,
            limit,
            dead: None,
        }
    }

    fn get(&mut self, addr: u64) -> Option<Arc<Node>> {
        self.lru.get(&addr).map(|(n, _)| n.clone())
    }

    fn put(&mut self, addr: u64, node: Arc<Node>, size: usize) {
        if let Some((_, old)) = self.lru.put(addr, (node, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        self.shrink();
    }

    /// Evicts least recently used nodes until the cache fits its bound.
    fn shrink(&mut self) {
        while self.bytes > self.limit {
            let Some((_, (node, s))) = self.lru.pop_lru() else { break };
            self.bytes -= s;
            if let Some(dead) = &mut self.dead {
                dead.push(node);
            }
        }
    }
}

/// The set of all trees of a store: their blocks, a cache of decoded nodes, the reference
/// counts and the list of blocks freed since the last checkpoint.
pub struct Forest {
    pub store: Arc<BlockStore>,
    /// Shared with read-only views (`Forest::view`): nodes are immutable once written.
    cache: Arc<Mutex<NodeCache>>,
    /// A view: reads only (`apply`, `inc` and `release` panic).
    read_only: bool,
    pub refs: RefTable,
    /// Blocks whose count reached zero. They stay readable until the checkpoint that drops
    /// them is durable; then the layer above punches them.
    pub freed: Vec<BlockPtr>,
    /// Which nodes the last fold made, and how many of them this one replaces.
    rewrites: Rewrites,
}

/// The nodes written since the last fold began (`fresh`) and in the fold before (`last`),
/// and how many of those `last` ones were replaced again: a fold that replaces many nodes
/// the fold before it made (names scattered over a directory of few leaves, a directory's
/// last leaf as files are added in order) would have written fewer had it waited for more,
/// and one that replaces none (each change in a leaf nobody touched lately) gains nothing
/// by waiting (`Forest::fold_begins`, `scion_fs::fold_policy`).
#[derive(Debug, Default)]
struct Rewrites {
    /// At most `REWRITES_KEPT`; past that (fewer kept than `made`) the next fold is not
    /// compared.
    fresh: std::collections::HashSet<u64>,
    last: std::collections::HashSet<u64>,
    /// Nodes made since the fold began.
    made: u64,
    /// Nodes of `last` replaced since.
    again: u64,
}

impl Forest {
    pub fn new(store: Arc<BlockStore>, refs: RefTable) -> Forest {
        Forest {
            store,
            cache: Arc::new(Mutex::new(NodeCache::new(node_cache_limit()))),
            read_only: false,
            refs,
            freed: Vec::new(),
            rewrites: Rewrites::default(),
        }
    }

    /// A read-only view of the same trees, sharing the node cache, for readers that work
    /// without the owner's lock (a walk of a pinned committed state). Blocks are never
    /// rewritten, so what it reads stays right as long as its roots' blocks are not punched.
    pub fn view(&self) -> Forest {
        Forest {
            store: self.store.clone(),
            cache: self.cache.clone(),
            read_only: true,
            refs: RefTable::default(),
            freed: Vec::new(),
            rewrites: Rewrites::default(),
        }
    }

    /// Reads and decodes a node, through the cache.
    pub fn load(&self, ptr: &BlockPtr) -> Result<Arc<Node>> {
        if ptr.kind != BlockKind::Node {
            return Err(Error::corrupt("tree pointer", ptr, "points at a non-node block"));
        }
        if let Some(n) = self.cache.lock().unwrap().get(ptr.addr) {
            return Ok(n);
        }
        let bytes = self.store.read(ptr)?;
        let node = Arc::new(Node::decode(&bytes).map_err(|e| match e {
            Error::Corrupt { detail, location, .. } => {
                Error::corrupt("tree node", ptr, format!("{detail} ({location})"))
            }
            e => e,
        })?);
        let size = node.memory();
        self.cache.lock().unwrap().put(ptr.addr, node.clone(), size);
        Ok(node)
    }

    /// From now until `take_dropped`, the nodes the cache lets go of are kept for the caller
    /// to drop later. A fold's new nodes push old ones out, and dropping those (their values
    /// freed, and the allocator giving the pages back at once, issue 39) was a sixth of a
    /// fold's hold of the engine lock (docs/benchmarks.md, "What a pile of rewrites costs to
    /// fold"); the background drops them after the lock (`PackSync::run`).
    pub fn defer_drops(&self) {
        self.cache.lock().unwrap().dead.get_or_insert_with(Vec::new);
    }

    /// The nodes let go of since `defer_drops`; drops are no longer deferred.
    pub fn take_dropped(&self) -> Vec<Arc<Node>> {
        self.cache.lock().unwrap().dead.take().unwrap_or_default()
    }

    /// Bytes the node cache holds (decoded nodes' memory) and its bound.
    pub fn cache_usage(&self) -> (usize, usize) {
        let c = self.cache.lock().unwrap();
        (c.bytes, c.limit)
    }


    /// A fold begins: the nodes made since the last one began are its `last` now.
    pub fn fold_begins(&mut self) {
        let r = &mut self.rewrites;
        // (Each node made has an address of its own, so only a cap keeps fewer than made.)
        let stopped_short = r.made > r.fresh.len() as u64;
        r.last = std::mem::take(&mut r.fresh);
        if stopped_short {
            // Stopped short: nothing to tell the next fold by.
            r.last.clear();
        }
        r.made = 0;
        r.again = 0;
    }

    /// Nodes made and nodes of the fold before replaced, since this fold began; None for
    /// the latter if the fold before made none (the first fold after a mount) or more than
    /// `REWRITES_KEPT`: nothing to tell by.
    pub fn fold_rewrites(&self) -> (u64, Option<u64>) {
        let r = &self.rewrites;
        (r.made, (!r.last.is_empty()).then_some(r.again))
    }

    fn write_node(&mut self, node: Node) -> Result<BlockPtr> {
        // Written out by the sync before the commit, not under the fold's lock (`write_deferred`);
        // encoded where it waits.
        let ptr = self.store.write_deferred_with(BlockKind::Node, NODE_TARGET + 1024, |buf| node.encode_into(buf))?;
        let size = node.memory();
        self.cache.lock().unwrap().put(ptr.addr, Arc::new(node), size);
        let r = &mut self.rewrites;
        r.made += 1;
        if r.fresh.len() < REWRITES_KEPT {
            r.fresh.insert(ptr.addr);
        }
        Ok(ptr)
    }

    /// The value stored under `key`.
    pub fn get(&self, root: Option<&BlockPtr>, key: &[u8]) -> Result<Option<Value>> {
        let Some(mut ptr) = root.copied() else { return Ok(None) };
        loop {
            let node = self.load(&ptr)?;
            match &*node {
                Node::Leaf(entries) => {
                    return Ok(entries
                        .binary_search_by(|(k, _)| k.as_slice().cmp(key))
                        .ok()
                        .map(|i| entries[i].1.clone()))
                }
                Node::Internal { children, .. } => ptr = children[route(children, key)].1,
            }
        }
    }

    /// Calls `f` on every entry with key >= `from`, in key order, until it returns false.
    pub fn scan(&self, root: Option<&BlockPtr>, from: &[u8], f: &mut dyn FnMut(&[u8], &Value) -> bool) -> Result<()> {
        if let Some(root) = root {
            self.scan_node(root, from, f)?;
        }
        Ok(())
    }

    fn scan_node(&self, ptr: &BlockPtr, from: &[u8], f: &mut dyn FnMut(&[u8], &Value) -> bool) -> Result<bool> {
        let node = self.load(ptr)?;
        match &*node {
            Node::Leaf(entries) => {
                let start = entries.partition_point(|(k, _)| k.as_slice() < from);
                for (k, v) in &entries[start..] {
                    if !f(k, v) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Node::Internal { children, .. } => {
                for (_, c) in &children[route(children, from)..] {
                    if !self.scan_node(c, from, f)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Applies a batch of changes to the tree at `root` and returns the new root.
    ///
    /// Ownership rules, which every caller relies on:
    /// - the caller's reference to `root` is *not* consumed: the old tree stays valid until
    ///   the caller releases it (usually by replacing the value that held it);
    /// - the returned root carries one reference, owned by the caller;
    /// - the pointers inside each put value are moved into the tree (the caller must own a
    ///   reference to each), and the pointers of every replaced or removed value are released.
    ///
    /// `ops` must be sorted by key with no key twice.
    pub fn apply(&mut self, root: Option<&BlockPtr>, ops: Vec<Op>) -> Result<Option<BlockPtr>> {
        assert!(!self.read_only, "apply on a read-only view of the forest");
        debug_assert!(ops.windows(2).all(|w| w[0].0 < w[1].0), "ops must be sorted and unique");
        if ops.is_empty() {
            if let Some(r) = root {
                self.refs.inc(r);
            }
            return Ok(root.copied());
        }
        let mut level_nodes = match root {
            None => {
                let entries: Vec<(Vec<u8>, Value)> = ops.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
                self.build(Node::Leaf(entries))?
            }
            Some(r) => {
                self.refs.inc(r);
                self.apply_node(r, ops)?
            }
        };
        // Grow: put new levels on top until one root remains.
        while level_nodes.len() > 1 {
            let level = level_nodes[0].2 + 1;
            let children = level_nodes.into_iter().map(|(k, p, _)| (k, p)).collect();
            level_nodes = self.build(Node::Internal { level, children })?;
        }
        let Some((_, mut root, mut level)) = level_nodes.pop() else {
            return Ok(None);
        };
        // Shrink: an internal root with a single child is replaced by that child.
        while level > 0 {
            let node = self.load(&root)?;
            let Node::Internal { children, .. } = &*node else { break };
            if children.len() != 1 {
                break;
            }
            let child = children[0].1;
            // The fresh root has count one; its only child moves up to the caller.
            self.freed.push(root);
            root = child;
            level -= 1;
        }
        Ok(Some(root))
    }

    /// Shadows the node at `ptr`, consuming one reference to it, and applies `ops` below it.
    /// Returns the replacement nodes (none if it became empty) as (min key, ptr, level).
    fn apply_node(&mut self, ptr: &BlockPtr, ops: Vec<Op>) -> Result<Vec<(Vec<u8>, BlockPtr, u8)>> {
        let node = self.load(ptr)?;
        if self.rewrites.last.contains(&ptr.addr) {
            self.rewrites.again += 1;
        }
        if self.refs.get(ptr.addr) > 1 {
            // Shared: the copy we are about to make also points at every child.
            for c in node.child_ptrs() {
                self.refs.inc(&c);
            }
            self.refs.dec(ptr);
        } else {
            // Sole owner: the children move to the copy; the old node dies.
            self.freed.push(*ptr);
        }
        match &*node {
            Node::Leaf(entries) => {
                let mut out = Vec::with_capacity(entries.len() + ops.len());
                let mut ops = ops.into_iter().peekable();
                for (k, v) in entries.iter() {
                    while let Some((ok, _)) = ops.peek() {
                        if ok < k {
                            let (ok, ov) = ops.next().unwrap();
                            if let Some(ov) = ov {
                                out.push((ok, ov));
                            }
                        } else {
                            break;
                        }
                    }
                    if ops.peek().is_some_and(|(ok, _)| ok == k) {
                        let (ok, ov) = ops.next().unwrap();
                        for p in &v.ptrs {
                            self.release(p)?;
                        }
                        if let Some(ov) = ov {
                            out.push((ok, ov));
                        }
                    } else {
                        out.push((k.clone(), v.clone()));
                    }
                }
                for (ok, ov) in ops {
                    if let Some(ov) = ov {
                        out.push((ok, ov));
                    }
                }
                self.build(Node::Leaf(out))
            }
            Node::Internal { level, children } => {
                let level = *level;
                let mut out: Vec<(Vec<u8>, BlockPtr)> = Vec::with_capacity(children.len() + 4);
                let mut ops = ops.into_iter().peekable();
                for (i, (k, c)) in children.iter().enumerate() {
                    let mut batch = Vec::new();
                    while let Some((ok, _)) = ops.peek() {
                        let belongs = i + 1 == children.len() || ok.as_slice() < children[i + 1].0.as_slice();
                        if belongs {
                            batch.push(ops.next().unwrap());
                        } else {
                            break;
                        }
                    }
                    if batch.is_empty() {
                        out.push((k.clone(), *c));
                    } else {
                        for (nk, np, _) in self.apply_node(c, batch)? {
                            out.push((nk, np));
                        }
                    }
                }
                debug_assert!(ops.peek().is_none());
                if out.is_empty() {
                    return Ok(Vec::new());
                }
                self.build(Node::Internal { level, children: out })
            }
        }
    }

    /// Writes `node`, split into as many nodes as its size needs.
    fn build(&mut self, node: Node) -> Result<Vec<(Vec<u8>, BlockPtr, u8)>> {
        let level = node.level();
        let mut out = Vec::new();
        for part in node.split(NODE_TARGET) {
            let key = part.min_key().to_vec();
            out.push((key, self.write_node(part)?, level));
        }
        Ok(out)
    }

    /// Adds a reference to a block (a tree root shared by a clone, a value copied).
    pub fn inc(&mut self, ptr: &BlockPtr) {
        assert!(!self.read_only, "inc on a read-only view of the forest");
        self.refs.inc(ptr);
    }

    /// Drops a reference to a block; if it was the last, frees the block and drops the
    /// references it held, recursively (iteratively, so deep trees of trees cannot overflow
    /// the stack).
    pub fn release(&mut self, ptr: &BlockPtr) -> Result<()> {
        assert!(!self.read_only, "release on a read-only view of the forest");
        let mut stack = vec![*ptr];
        while let Some(p) = stack.pop() {
            if self.refs.dec(&p) > 0 {
                continue;
            }
            self.freed.push(p);
            if p.kind == BlockKind::Node {
                let node = self.load(&p)?;
                stack.extend(node.child_ptrs());
            }
        }
        Ok(())
    }

    /// Visits the tree at `root` depth-first, checking structure: key order, key bounds
    /// against the parent's separators, uniform leaf depth. `visit` sees every node pointer
    /// and answers whether to descend (false for a subtree already checked, so shared
    /// subtrees are read once); the values of every leaf descended into go to `value`.
    pub fn walk(
        &self,
        root: &BlockPtr,
        visit: &mut dyn FnMut(&BlockPtr) -> bool,
        value: &mut dyn FnMut(&[u8], &Value) -> Result<()>,
    ) -> Result<()> {
        let mut leaf_level = None;
        self.walk_node(root, None, None, &mut leaf_level, 0, visit, value)
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_node(
        &self,
        ptr: &BlockPtr,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        leaf_depth: &mut Option<usize>,
        depth: usize,
        visit: &mut dyn FnMut(&BlockPtr) -> bool,
        value: &mut dyn FnMut(&[u8], &Value) -> Result<()>,
    ) -> Result<()> {
        if !visit(ptr) {
            return Ok(());
        }
        let node = self.load(ptr)?;
        let bad = |d: String| Err(Error::corrupt("tree node", ptr, d));
        let keys: Vec<&[u8]> = match &*node {
            Node::Leaf(e) => e.iter().map(|(k, _)| k.as_slice()).collect(),
            Node::Internal { children, .. } => children.iter().map(|(k, _)| k.as_slice()).collect(),
        };
        if keys.is_empty() {
            return bad("empty node".into());
        }
        if !keys.windows(2).all(|w| w[0] < w[1]) {
            return bad("keys out of order".into());
        }
        if lo.is_some_and(|lo| keys[0] < lo) || hi.is_some_and(|hi| *keys.last().unwrap() >= hi) {
            return bad("key outside the range its parent gives it".into());
        }
        match &*node {
            Node::Leaf(entries) => {
                if leaf_depth.get_or_insert(depth) != &depth {
                    return bad("leaves at different depths".into());
                }
                for (k, v) in entries {
                    value(k, v)?;
                }
            }
            Node::Internal { children, level } => {
                for (i, (k, c)) in children.iter().enumerate() {
                    let child = self.load(c)?;
                    if child.level() + 1 != *level {
                        return bad(format!("child level {} under level {}", child.level(), level));
                    }
                    let next = children.get(i + 1).map(|(k, _)| k.as_slice()).or(hi);
                    self.walk_node(c, Some(k), next, leaf_depth, depth + 1, visit, value)?;
                }
            }
        }
        Ok(())
    }
}

/// Index of the child of an internal node whose range holds `key`.
fn route(children: &[(Vec<u8>, BlockPtr)], key: &[u8]) -> usize {
    children.partition_point(|(k, _)| k.as_slice() <= key).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(n: u8) -> Arc<Node> {
        Arc::new(Node::Leaf(vec![(vec![n], Value::default())]))
    }

    #[test]
    fn node_cache_is_bounded_by_bytes_and_evicts_least_recently_used() {
        let mut c = NodeCache::new(100);
        for a in 0..4u64 {
            c.put(a, leaf(a as u8), 30);
        }
        // 120 bytes asked for 100: the oldest node left.
        assert_eq!(c.bytes, 90);
        assert!(c.get(0).is_none());
        // Touch 1, so 2 is now the oldest; a big node pushes out 2 and 3 but not 1.
        assert!(c.get(1).is_some());
        c.put(9, leaf(9), 60);
        assert_eq!(c.bytes, 90);
        assert!(c.get(1).is_some() && c.get(9).is_some());
        assert!(c.get(2).is_none() && c.get(3).is_none());
        // Putting an address again replaces its size instead of adding to it.
        c.put(9, leaf(9), 10);
        assert_eq!(c.bytes, 40);
        // A node larger than the whole cache is not kept (and nothing else is).
        c.put(7, leaf(7), 500);
        assert_eq!(c.bytes, 0);
        assert!(c.get(7).is_none());
    }

    /// While drops are deferred (`Forest::defer_drops`), evicted nodes wait for their taker,
    /// in the order they left; afterwards the cache drops them itself again.
    #[test]
    fn evicted_nodes_wait_for_their_taker_while_drops_are_deferred() {
        let mut c = NodeCache::new(100);
        c.dead.get_or_insert_with(Vec::new);
        for a in 0..5u64 {
            c.put(a, leaf(a as u8), 30);
        }
        let dead = c.dead.take().expect("deferred");
        let keys: Vec<&[u8]> = dead.iter().map(|n| n.min_key()).collect();
        assert_eq!(keys, [&[0u8][..], &[1u8][..]], "the two oldest, in order");
        assert_eq!(c.bytes, 90);
        c.put(9, leaf(9), 90);
        assert!(c.dead.is_none(), "no longer deferred: dropped at once");
        assert_eq!(c.bytes, 90);
    }
}
