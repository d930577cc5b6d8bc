//! Giving back the memory of inodes nothing needs (issue 39). A file leaves memory when the
//! kernel forgets it and it has no pending change (`Fs::maybe_evict`). A directory also needs
//! that none of its children is loaded (each points at it, `Loc::Entry`), so it is only
//! noted then; notes are swept in batches, each sweep one pass over the loaded inodes to
//! count the children they point at, and a directory whose count falls to zero on the way
//! goes too, so a forgotten tree leaves from its leaves up.

use crate::fs::{Loc, Node};
use crate::inode::Kind;
use crate::{Fs, Ino, ROOT_INO};

/// Directories noted before the first sweep; after a sweep, twice those it kept, at least.
const SWEEP_FIRST: usize = 1024;

impl Fs {
    /// Directory `ino` may be idle: sweep it with the others once enough are noted.
    pub(crate) fn note_idle_dir(&mut self, ino: Ino) {
        self.idle_dirs.push(ino);
        self.idle_fresh += 1;
        if self.idle_fresh >= self.idle_sweep_at {
            self.sweep_noted_dirs();
        }
        self.shrink_nodes();
    }

    /// At a checkpoint and at the background's ticks: sweeps the directories noted (or left
    /// by their last loaded child) since the last sweep if there are many for the inodes
    /// loaded (a sweep visits them all), so that a forgotten tree smaller than a batch leaves
    /// too.
    pub(crate) fn sweep_noted_if_due(&mut self) {
        if self.idle_fresh > 0 && (self.nodes.len() < 1 << 16 || self.idle_fresh >= self.nodes.len() / 64) {
            self.sweep_noted_dirs();
            self.shrink_nodes();
        }
    }

    fn sweep_noted_dirs(&mut self) {
        let noted = std::mem::take(&mut self.idle_dirs);
        self.idle_dirs = self.sweep_dirs(noted);
        self.idle_fresh = 0;
        self.idle_sweep_at = (2 * self.idle_dirs.len()).max(SWEEP_FIRST);
    }

    /// Evicts the idle directories among `noted` and the idle ancestors they leave without
    /// loaded children; returns those of `noted` kept for now only because a child is loaded.
    pub(crate) fn sweep_dirs(&mut self, noted: Vec<Ino>) -> Vec<Ino> {
        let mut kids: crate::fs::InoMap<u32> = Default::default();
        for n in self.nodes.values() {
            if let Loc::Entry { parent, .. } = &n.loc {
                *kids.entry(*parent).or_default() += 1;
            }
        }
        for ns in self.namespaces.values() {
            *kids.entry(ns.root).or_default() += 1;
            if let Some((at, _)) = &ns.mounted_at {
                *kids.entry(*at).or_default() += 1;
            }
        }
        let mut work: Vec<Ino> = noted.iter().copied().filter(|i| !kids.contains_key(i)).collect();
        while let Some(ino) = work.pop() {
            let Some(n) = self.nodes.get(&ino) else { continue };
            if kids.contains_key(&ino) || !self.dir_idle(ino, n) {
                continue;
            }
            let Loc::Entry { parent, .. } = n.loc else { unreachable!("an idle directory is an entry") };
            self.unload(ino);
            if let Some(k) = kids.get_mut(&parent) {
                *k -= 1;
                if *k == 0 {
                    kids.remove(&parent);
                    work.push(parent);
                }
            }
        }
        let mut kept: Vec<Ino> = noted
            .into_iter()
            .filter(|i| self.nodes.get(i).is_some_and(|n| self.dir_idle(*i, n)))
            .collect();
        kept.sort_unstable();
        kept.dedup();
        kept
    }

    /// A directory nothing holds but perhaps loaded children: no kernel reference, not
    /// open, no change waiting for a checkpoint, in an entry of its parent (a namespace's
    /// root stays).
    fn dir_idle(&self, ino: Ino, n: &Node) -> bool {
        n.inode.kind == Kind::Dir
            && ino != ROOT_INO
            && n.lookups == 0
            && n.opens == 0
            && !n.pinned
            && n.entries.is_empty()
            && n.sum_delta.is_empty()
            && n.prepass.is_none()
            && n.prepass_sum.is_none()
            && matches!(n.loc, Loc::Entry { .. })
            && !self.dirty.contains(&ino)
            && !self.carried.contains(&ino)
    }

    /// Drops every loaded inode nothing holds (no kernel reference, not open, no change
    /// waiting), directories included: at a checkpoint once many were loaded, and after a
    /// walk that loads inodes without taking references (repack's plan).
    pub(crate) fn sweep_unheld(&mut self) {
        let idle: Vec<Ino> = self.nodes.iter().filter(|(i, n)| file_unheld(**i, n)).map(|(i, _)| *i).collect();
        for ino in idle {
            self.unload(ino);
        }
        let dirs: Vec<Ino> = self.nodes.iter().filter(|(_, n)| n.inode.kind == Kind::Dir).map(|(i, _)| *i).collect();
        self.idle_dirs = self.sweep_dirs(dirs);
        (self.idle_fresh, self.idle_sweep_at) = (0, (2 * self.idle_dirs.len()).max(SWEEP_FIRST));
        self.shrink_nodes();
        (self.loaded_since_sweep, self.sweep_at) = (0, self.nodes.len().max(1 << 16));
    }

    /// Drops loaded inode `ino` from memory, noting where it was (`reach::Whereabouts`).
    pub(crate) fn unload(&mut self, ino: Ino) {
        if let Some(n) = self.nodes.remove(&ino) {
            if let Loc::Entry { parent, name } = &n.loc {
                self.whereabouts.note(ino, *parent, name);
            }
        }
    }

    /// Gives back the inode table's slack once most of it is empty (`NodeTable::give_back_slack`).
    pub(crate) fn shrink_nodes(&mut self) {
        self.nodes.give_back_slack();
    }
}

/// A file (or symlink, or node) nothing holds: no kernel reference, not open, no change
/// waiting. A removed one is left to `Fs::maybe_evict`, which gives its content back.
pub(crate) fn file_unheld(ino: Ino, n: &Node) -> bool {
    ino != ROOT_INO
        && n.inode.kind != Kind::Dir
        && n.lookups == 0
        && n.opens == 0
        && !n.pinned
        && n.chunks.is_empty()
        && n.loc != Loc::Gone
}
