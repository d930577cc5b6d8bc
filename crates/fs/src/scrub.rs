//! `scion scrub`: reads every live block of the committed trees, verifying each against the
//! hash its pointer carries, and names the damage by path. Unlike `check`, which proves
//! the structure, scrub answers "which of my files are hurt", and also runs on a mounted
//! store (through its daemon).

use crate::fs::*;
use crate::inode::*;
use scion_store::{BlockKind, BlockPtr};
use std::collections::HashSet;

#[derive(Default, Debug)]
pub struct ScrubReport {
    pub blocks: u64,
    pub bytes: u64,
    /// (path from the mount root, what is wrong), at most `MAX_DAMAGE`.
    pub damage: Vec<(String, String)>,
    pub damaged_total: u64,
}

const MAX_DAMAGE: usize = 10_000;

impl std::fmt::Display for ScrubReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} blocks ({} bytes) read and verified", self.blocks, self.bytes)?;
        if self.damaged_total == 0 {
            return writeln!(f, "no damage");
        }
        writeln!(f, "{} damaged:", self.damaged_total)?;
        for (p, e) in &self.damage {
            writeln!(f, "  {p}: {e}")?;
        }
        if self.damaged_total as usize > self.damage.len() {
            writeln!(f, "  ... and {} more", self.damaged_total as usize - self.damage.len())?;
        }
        Ok(())
    }
}

struct Scrubber {
    seen: HashSet<u64>,
    rep: ScrubReport,
}

impl Scrubber {
    fn damaged(&mut self, path: &str, what: String) {
        self.rep.damaged_total += 1;
        if self.rep.damage.len() < MAX_DAMAGE {
            self.rep.damage.push((path.to_string(), what));
        }
    }
}

impl Fs {
    /// Scrubs the committed state (a checkpoint is taken first). Every block is read once,
    /// however many clones share it; damage is reported under the first path that reached it.
    pub fn scrub(&mut self) -> FsResult<ScrubReport> {
        self.checkpoint().map_err(|e| e.errno())?;
        let mut s = Scrubber {
            seen: HashSet::new(),
            rep: ScrubReport::default(),
        };
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        for id in ids {
            let root = self.namespaces[&id].root;
            let base = match self.path_of_dir(root) {
                Ok(p) => format!("/{}", String::from_utf8_lossy(&p)),
                Err(_) => format!("(namespace {id}, directory gone)"),
            };
            let inode = self.node(root)?.inode.clone();
            self.scrub_dir(&mut s, &inode, &base);
            if let Some(l) = self.namespaces[&id].link_root {
                let what = format!("{base} (hard-linked files)");
                for (k, v) in self.scrub_tree(&mut s, &l, &what, false) {
                    let oid = chunk_index(&k).unwrap_or(0);
                    match inode_from_value(&v) {
                        Ok(i) => self.scrub_inode(&mut s, &i, &format!("{base} (hard-linked file oid {oid})")),
                        Err(e) => s.damaged(&what, e.to_string()),
                    }
                }
            }
        }
        Ok(s.rep)
    }

    fn scrub_block(&self, s: &mut Scrubber, p: &BlockPtr, path: &str) -> bool {
        if !s.seen.insert(p.addr) {
            return false;
        }
        s.rep.blocks += 1;
        s.rep.bytes += p.len as u64;
        if let Err(e) = self.vol.forest.store.read(p) {
            s.damaged(path, e.to_string());
            return false;
        }
        true
    }

    /// Reads a tree's nodes and, when `data`, the data blocks its values point at; values
    /// pointing at other trees are followed by the callers that know what they are.
    fn scrub_tree(
        &self,
        s: &mut Scrubber,
        root: &BlockPtr,
        path: &str,
        data: bool,
    ) -> Vec<(Vec<u8>, scion_tree::Value)> {
        let mut values = Vec::new();
        let mut stack = vec![*root];
        while let Some(p) = stack.pop() {
            if !self.scrub_block(s, &p, path) {
                continue;
            }
            match self.vol.forest.load(&p) {
                Ok(n) => match &*n {
                    scion_tree::Node::Leaf(entries) => values.extend(entries.iter().cloned()),
                    scion_tree::Node::Internal { children, .. } => stack.extend(children.iter().map(|c| c.1)),
                },
                Err(e) => s.damaged(path, e.to_string()),
            }
        }
        if data {
            for (_, v) in &values {
                for p in v.ptrs.iter().filter(|p| p.kind == BlockKind::Data) {
                    self.scrub_block(s, p, path);
                }
            }
        }
        values
    }

    fn scrub_inode(&self, s: &mut Scrubber, i: &Inode, path: &str) {
        match i.kind {
            Kind::Dir => self.scrub_dir(s, i, path),
            Kind::File => match (i.content, &i.direct) {
                (Some(c), Some(_)) => {
                    self.scrub_block(s, &c, path);
                }
                (Some(c), None) => {
                    self.scrub_tree(s, &c, path, true);
                }
                (None, _) => {}
            },
            _ => {}
        }
    }

    fn scrub_dir(&self, s: &mut Scrubber, dir: &Inode, path: &str) {
        if let Some(sum) = dir.summary {
            self.scrub_tree(s, &sum, path, false);
        }
        let Some(c) = dir.content else { return };
        for (name, v) in self.scrub_tree(s, &c, path, false) {
            let child = format!("{}/{}", path.trim_end_matches('/'), String::from_utf8_lossy(&name));
            match EntryRecord::from_value(&v) {
                Ok(EntryRecord::Inline(i)) => self.scrub_inode(s, &i, &child),
                Ok(_) => {} // link table records and clones are scrubbed with their namespace
                Err(e) => s.damaged(&child, e.to_string()),
            }
        }
    }
}
