//! A committed state pinned for reading without the engine lock: the walker that scrub (and
//! later diff and send) runs over a checkpoint's trees while the mount goes on changing.
//!
//! Committed blocks are never rewritten, and a block freed by a later checkpoint stays
//! readable until it is punched; a pin holds punching off (`Volume::pins`), so every block
//! reachable from the pinned roots reads back as it was for as long as the pin lives. Taking
//! the pin is the only step under the lock (a checkpoint, then copying the namespace roots);
//! the walk reads the packs directly, verifying every block, and shares nothing with the
//! engine but the block store.

use crate::fs::Fs;
use crate::inode::*;
use scion_store::{BlockKind, BlockPtr, BlockStore};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One namespace of a pinned state.
struct PinnedNs {
    /// Where its root is, for naming what the walk finds ("/a/b", or why it has no path).
    base: String,
    root: Inode,
    links: Option<BlockPtr>,
}

/// A committed state, readable without the engine lock until dropped.
pub struct Pinned {
    store: Arc<BlockStore>,
    namespaces: Vec<PinnedNs>,
    _pin: Pin,
}

/// Holds punching off while it lives: every block a committed tree named when it was taken
/// stays readable.
pub(crate) struct Pin(Arc<AtomicUsize>);

impl Pin {
    pub(crate) fn hold(pins: &Arc<AtomicUsize>) -> Pin {
        pins.fetch_add(1, Ordering::AcqRel);
        Pin(pins.clone())
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a walk tells its visitor.
pub trait Visit {
    /// Block `ptr`, first reached under `path`, read and verified (`Ok`: its payload) or not.
    /// Called once per block, however many paths reach it.
    fn block(&mut self, path: &str, ptr: &BlockPtr, read: &scion_store::Result<Vec<u8>>);
    /// Something that is not a block read failed to decode (a record, a node).
    fn damaged(&mut self, path: &str, what: String);
}

impl Fs {
    /// Commits what is in memory (a checkpoint, unless there is nothing to commit) and pins
    /// that state for a walk without the engine lock.
    pub fn pin_committed(&mut self) -> crate::FsResult<Pinned> {
        self.pin_with_paths().map(|(pinned, _)| pinned)
    }

    /// `pin_committed`, with each namespace's path as `namespace_paths` gives it (for
    /// `list`, which names them too).
    pub(crate) fn pin_with_paths(&mut self) -> crate::FsResult<(Pinned, HashMap<u32, Option<Vec<u8>>>)> {
        // An idle volume's committed state is already its state: a `scion status` then
        // writes nothing and waits for no fsync.
        if !self.committed_is_current() {
            self.checkpoint()?;
        }
        let pin = Pin::hold(&self.vol.pins);
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        let paths = self.namespace_paths();
        let mut namespaces = Vec::with_capacity(ids.len());
        for id in ids {
            let root = self.namespaces[&id].root;
            let base = match paths.get(&id).and_then(Option::as_ref) {
                Some(p) => format!("/{}", String::from_utf8_lossy(p)),
                None => format!("(namespace {id}, directory gone)"),
            };
            namespaces.push(PinnedNs {
                base,
                root: self.node(root)?.inode.clone(),
                links: self.namespaces[&id].link_root,
            });
        }
        let pinned = Pinned {
            store: self.vol.forest.store.clone(),
            namespaces,
            _pin: pin,
        };
        Ok((pinned, paths))
    }
}

impl Pinned {
    /// Visits every block reachable from the pinned state once: each namespace's directory
    /// trees, files' content trees and data blocks, summaries, and link tables.
    pub fn walk(&self, v: &mut dyn Visit) {
        let mut w = Walk {
            store: &self.store,
            seen: HashSet::new(),
            v,
        };
        for ns in &self.namespaces {
            w.dir(&ns.root, &ns.base);
            if let Some(l) = ns.links {
                let what = format!("{} (hard-linked files)", ns.base);
                for (k, val) in w.tree(&l, &what, false) {
                    let oid = chunk_index(&k).unwrap_or(0);
                    match inode_from_value(&val) {
                        Ok(i) => w.inode(&i, &format!("{} (hard-linked file oid {oid})", ns.base)),
                        Err(e) => w.v.damaged(&what, e.to_string()),
                    }
                }
            }
        }
    }
}

struct Walk<'a> {
    store: &'a BlockStore,
    seen: HashSet<u64>,
    v: &'a mut dyn Visit,
}

impl Walk<'_> {
    /// Reads a block the first time it is reached; its payload if it verified.
    fn block(&mut self, p: &BlockPtr, path: &str) -> Option<Vec<u8>> {
        // A remote block is verified when it is fetched: a scrub does not fetch it.
        if !self.seen.insert(p.addr) || p.is_remote() {
            return None;
        }
        let r = self.store.read(p);
        self.v.block(path, p, &r);
        r.ok()
    }

    /// A tree's nodes and, when `data`, the data blocks its values point at; its values
    /// (entries pointing at other trees are followed by callers that know what they are).
    fn tree(&mut self, root: &BlockPtr, path: &str, data: bool) -> Vec<(Vec<u8>, scion_tree::Value)> {
        let mut values = Vec::new();
        let mut stack = vec![*root];
        while let Some(p) = stack.pop() {
            let Some(bytes) = self.block(&p, path) else { continue };
            match scion_tree::Node::decode(&bytes) {
                Ok(scion_tree::Node::Leaf(entries)) => values.extend(entries),
                Ok(scion_tree::Node::Internal { children, .. }) => stack.extend(children.iter().map(|c| c.1)),
                Err(e) => self.v.damaged(path, e.to_string()),
            }
        }
        if data {
            for (_, val) in &values {
                for p in val.ptrs.iter().filter(|p| p.kind == BlockKind::Data) {
                    self.block(p, path);
                }
            }
        }
        values
    }

    fn inode(&mut self, i: &Inode, path: &str) {
        match i.kind {
            Kind::Dir => self.dir(i, path),
            Kind::File => match (i.content, &i.direct) {
                (Some(c), Some(_)) => {
                    self.block(&c, path);
                }
                (Some(c), None) => {
                    self.tree(&c, path, true);
                }
                (None, _) => {}
            },
            _ => {}
        }
    }

    fn dir(&mut self, dir: &Inode, path: &str) {
        if let Some(sum) = dir.summary {
            self.tree(&sum, path, false);
        }
        let Some(c) = dir.content else { return };
        for (name, val) in self.tree(&c, path, false) {
            let child = format!("{}/{}", path.trim_end_matches('/'), String::from_utf8_lossy(&name));
            match EntryRecord::from_value(&val) {
                Ok(EntryRecord::Inline(i)) => self.inode(&i, &child),
                Ok(_) => {} // link table records and clones are walked with their namespace
                Err(e) => self.v.damaged(&child, e.to_string()),
            }
        }
    }
}
