//! Reaching an inode by its number alone, as an NFS file handle names it after a restart.
//!
//! An inode is stored in its directory entry (or, with several names, in its namespace's
//! link table), not in a table by number, so the engine loads it from its parent. Given only
//! a number, it is reached through a path: first a hint (the names from its namespace's root
//! that the caller last saw, `names_of`), taken only if the inode found there has that
//! number; failing that, a walk of the namespace's directories, in steps short enough for the
//! caller to let go of the engine lock between them. Numbers are never reused (namespace and
//! object ids only grow), so an inode found by number is the one the handle was made for.

use crate::error::{errno, eio, FsResult};
use crate::fs::{Attr, Fs, Ino, Loc, NsKind, MAX_OID};
use crate::inode::{summary_mount_key, Kind};
use crate::records::inode::oid_key;

/// Directories a walk scans per step (then the caller may let other requests in).
const WALK_STEP: usize = 64;
/// Entries a walk looks at before it gives up (ESTALE): a bound on one lost handle's cost.
pub const WALK_LIMIT: u64 = 1 << 22;
/// Deepest path a hint or a walk follows.
const MAX_DEPTH: usize = 4096;

/// A walk of one namespace for one inode number (`Fs::walk_step`).
pub struct Walk {
    target: Ino,
    /// Directories still to scan, as names from the namespace's root (depth first, so the
    /// stack holds one level's siblings at a time, not the whole tree's width).
    todo: Vec<Vec<Vec<u8>>>,
    seen: u64,
}

impl Walk {
    pub fn new(target: Ino) -> Walk {
        Walk {
            target,
            todo: vec![Vec::new()],
            seen: 0,
        }
    }
}

/// The namespace of a volume's own inode number.
fn ns_of(ino: Ino) -> u32 {
    (ino >> 40) as u32 + 1
}

impl Fs {
    /// Names from the root of `ino`'s namespace down to it: the hint `reach` takes back.
    /// Empty for a namespace's root and for a file with several names (the link table finds
    /// it by number). None if `ino` is not loaded or has no name.
    pub fn names_of(&self, ino: Ino) -> Option<Vec<Vec<u8>>> {
        let mut names = Vec::new();
        let mut cur = ino;
        for _ in 0..MAX_DEPTH {
            let n = self.nodes.get(&cur)?;
            match &n.loc {
                Loc::Root => {
                    names.reverse();
                    return Some(names);
                }
                Loc::Linked if cur == ino => return Some(Vec::new()),
                Loc::Entry { parent, name } => {
                    names.push(name.clone());
                    cur = *parent;
                }
                Loc::Linked | Loc::Gone => return None,
            }
        }
        None
    }

    /// Loads inode `ino` (a volume's own number, not a `.snapshot` one) and counts one
    /// reference to it, as `lookup` does: through the link table or the `hint` (names from
    /// its namespace's root). None if neither leads to it: then `walk_step`, or it is gone.
    /// ESTALE for a number no namespace of this volume can have.
    pub fn reach(&mut self, ino: Ino, hint: &[Vec<u8>]) -> FsResult<Option<Attr>> {
        let (ns, oid) = (ns_of(ino), ino & (MAX_OID - 1));
        let n = self.namespaces.get(&ns).ok_or(errno::ESTALE)?;
        if oid >= n.next_oid {
            return Err(errno::ESTALE);
        }
        if self.nodes.contains_key(&ino) {
            self.connect(ns);
            return self.remember(ino).map(Some);
        }
        if n.links.get(&oid).is_none()
            && self.vol.forest.get(n.link_root.as_ref(), &oid_key(oid)).map_err(eio)?.is_some()
        {
            self.connect(ns);
            return self.linked(ns, oid).and_then(|i| self.remember(i)).map(Some);
        }
        if hint.is_empty() || hint.len() > MAX_DEPTH {
            return Ok(None);
        }
        let (dir, last) = hint.split_at(hint.len() - 1);
        let Some(parent) = self.follow(ns, dir)? else { return Ok(None) };
        match self.child(parent, &last[0]) {
            Ok(Some(found)) if found == ino => {
                self.connect(ns);
                self.remember(ino).map(Some)
            }
            Ok(_) | Err(_) => Ok(None),
        }
    }

    /// Tells the root of clone `ns`, and of each clone it hangs in, where it hangs (its
    /// mount entry, found by the subtree summaries), as a lookup through that entry does:
    /// `parent_of` then leads from an inode reached by number up to the mount's root.
    fn connect(&mut self, ns: u32) {
        let mut cur = ns;
        for _ in 0..=self.namespaces.len() {
            let Some(n) = self.namespaces.get(&cur) else { return };
            let (info, known) = (n.info.clone(), n.mounted_at.is_some());
            if info.kind != NsKind::Clone {
                return;
            }
            if !known {
                let Ok(at) = self.find_named(info.parent, &summary_mount_key(info.anchor)) else { return };
                if let Some(n) = self.namespaces.get_mut(&cur) {
                    n.mounted_at = Some(at);
                }
            }
            cur = info.parent;
        }
    }

    /// The directory `names` lead to from namespace `ns`'s root, staying in that namespace.
    fn follow(&mut self, ns: u32, names: &[Vec<u8>]) -> FsResult<Option<Ino>> {
        let mut dir = self.namespaces.get(&ns).ok_or(errno::ESTALE)?.root;
        for name in names {
            match self.child(dir, name) {
                Ok(Some(d)) if ns_of(d) == ns && self.nodes.get(&d).is_some_and(|n| n.inode.kind == Kind::Dir) => dir = d,
                Ok(_) | Err(_) => return Ok(None),
            }
        }
        Ok(Some(dir))
    }

    /// One step of `walk`: scans up to `WALK_STEP` directories of the target's namespace.
    /// Some(attributes, one reference counted) once found; Ok(None) to be called again;
    /// ESTALE once the namespace is walked (or `WALK_LIMIT` entries seen) without it.
    pub fn walk_step(&mut self, walk: &mut Walk) -> FsResult<Option<Attr>> {
        let ns = ns_of(walk.target);
        if !self.namespaces.contains_key(&ns) {
            return Err(errno::ESTALE);
        }
        for _ in 0..WALK_STEP {
            let Some(path) = walk.todo.pop() else { return Err(errno::ESTALE) };
            // A directory renamed or removed since it was queued is skipped: what it holds
            // is reached from where it is now, or is gone.
            let Some(dir) = self.follow(ns, &path)? else { continue };
            for e in self.readdir_real(dir)? {
                walk.seen += 1;
                if walk.seen > WALK_LIMIT {
                    log::warn!("no inode {:#x} in the first {WALK_LIMIT} entries of namespace {ns}", walk.target);
                    return Err(errno::ESTALE);
                }
                if e.ino == walk.target {
                    return match self.child(dir, &e.name)? {
                        Some(i) if i == walk.target => {
                            self.connect(ns);
                            self.remember(i).map(Some)
                        }
                        _ => Err(errno::ESTALE),
                    };
                }
                if e.kind == Kind::Dir && ns_of(e.ino) == ns && path.len() < MAX_DEPTH {
                    let mut p = path.clone();
                    p.push(e.name);
                    walk.todo.push(p);
                }
            }
        }
        Ok(None)
    }
}
