//! A view: the committed state as a filesystem of its own, for the read-only commands
//! (diff, scan, versions, the content hash, send) to walk without the engine lock.
//!
//! Taking one is the only step under the lock: a checkpoint folds everything in memory
//! (carried files too), then the namespace table's roots are copied. The view reads the
//! same block store; a pin (`pinned::Pin`) keeps every block the committed trees name
//! readable while it lives, as for scrub. Inode numbers are the engine's
//! (`make_ino(namespace, object id)`), so an inode a command resolved in the engine names
//! the same file in a view taken after. A view is read-only (`read_only`), has no journal,
//! and its checkpoints do nothing: there is nothing in it to commit.

use crate::checkpoint::Fold;
use crate::fs::{Fs, Namespace, Node};
use crate::pinned::Pin;
use crate::volume::Volume;
use scion_tree::{Forest, RefTable};
use std::collections::BTreeMap;

impl Fs {
    /// Commits what is in memory and returns a view of that state, for a read-only walk
    /// without the engine lock. Give it back with `end_view` (its hash memo returns).
    pub fn view(&mut self) -> crate::FsResult<Fs> {
        assert!(self.view.is_none(), "a view of a view");
        // The view reads the trees, so carried changes must be folded into them; an idle
        // volume's trees are already whole (`diff` and `versions` of an idle mount write
        // nothing).
        if !(self.committed_is_current() && self.carried.is_empty()) {
            self.checkpoint_with(Fold::All)?;
        }
        let pin = Pin::hold(&self.vol.pins);
        let vol = Volume::new(
            self.vol.dir.clone(),
            self.vol.store_id,
            self.vol.generation,
            self.vol.host.clone(),
            Box::new(()),
            // Reading needs no reference counts: nothing is freed through a view.
            Forest::new(self.vol.forest.store.clone(), RefTable::default()),
        );
        let mut v = Fs::blank(vol);
        v.view = Some(pin);
        v.read_only = true;
        v.journaled = false;
        v.show_snapdir = self.show_snapdir;
        v.ns_limit = self.ns_limit;
        v.next_ns = self.next_ns;
        v.ns_root = self.ns_root;
        v.relocations = self.relocations;
        v.hash_memo = std::mem::take(&mut self.hash_memo);
        for (&id, ns) in &self.namespaces {
            // Invariant: a checkpoint leaves no staged link-table change.
            assert!(ns.links.is_empty(), "namespace {id}: link table changes left after a checkpoint");
            let root = self.nodes.get(&ns.root).expect("a namespace's root is always loaded");
            v.nodes.insert(ns.root, Box::new(Node::new_root(root.inode.clone(), id)));
            v.namespaces.insert(
                id,
                Namespace {
                    root: ns.root,
                    link_root: ns.link_root,
                    links: BTreeMap::new(),
                    next_oid: ns.next_oid,
                    inodes: ns.inodes,
                    dirty: false,
                    info: ns.info.clone(),
                    mounts: ns.mounts.clone(),
                    mounted_at: None,
                },
            );
        }
        Ok(v)
    }

    /// Takes back what a view learned that stays true (the tree-hash memo: it is keyed by
    /// content). Quick: the caller drops the view (its nodes, and whatever memo it now
    /// holds) after letting go of the engine lock.
    pub fn end_view(&mut self, view: &mut Fs) {
        assert!(view.view.is_some(), "end_view of the engine itself");
        if view.hash_memo.len() > self.hash_memo.len() {
            std::mem::swap(&mut self.hash_memo, &mut view.hash_memo);
        }
    }
}
