//! Reaching an inode by its number alone, as an NFS file handle names it after a restart.
//!
//! An inode is stored in its directory entry (or, with several names, in its namespace's
//! link table), not in a table by number, so the engine loads it from its parent. Given only
//! a number, it is reached through a path: first a hint (the names from its namespace's root
//! that the caller last saw, `names_of`), taken only if the inode found there has that
//! number; failing that, a walk of the namespace's directories, in steps short enough for the
//! caller to let go of the engine lock between them. Numbers are never reused (namespace and
//! object ids only grow), so an inode found by number is the one the handle was made for.
//!
//! Between the two, `Whereabouts`: where recently evicted inodes were, so that a handle used
//! soon after the kernel dropped its caches (FUSE's `open_by_handle_at`) finds its inode
//! without a walk.

use crate::clone::SNAPDIR_BIT;
use crate::error::{errno, eio, FsResult};
use crate::fs::{make_ino, Attr, Fs, InoMap, Ino, Loc, NsKind, MAX_OID};
use crate::inode::{summary_mount_key, Kind};
use crate::records::inode::oid_key;

/// Directories a walk scans per step (then the caller may let other requests in).
const WALK_STEP: usize = 64;
/// Entries a walk looks at before it gives up (ESTALE): a bound on one lost handle's cost.
pub const WALK_LIMIT: u64 = 1 << 22;
/// Deepest path a hint or a walk follows.
const MAX_DEPTH: usize = 4096;

/// Evicted inodes whose place `Whereabouts` keeps by default: about 3 MiB at most (names
/// included).
pub const WHEREABOUTS: usize = 1 << 15;

static WHEREABOUTS_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(WHEREABOUTS);

/// The bound of every volume's `Whereabouts` from now on, in inodes (mount option
/// `whereabouts=N`; 0 keeps none, and a handle of an evicted inode is found by a walk).
pub fn set_whereabouts_limit(entries: usize) {
    WHEREABOUTS_LIMIT.store(entries, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn whereabouts_limit() -> usize {
    WHEREABOUTS_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where the last `WHEREABOUTS` inodes evicted from memory were: each one's directory and
/// name. Only a hint: what is found there is taken only if it has the number looked for.
#[derive(Default)]
pub(crate) struct Whereabouts {
    at: InoMap<(Ino, Vec<u8>)>,
    /// Oldest first: the next to be dropped.
    order: std::collections::VecDeque<Ino>,
}

impl Whereabouts {
    /// Inode `ino`, evicted, was entry `name` of directory `parent`.
    pub(crate) fn note(&mut self, ino: Ino, parent: Ino, name: &[u8]) {
        if self.at.insert(ino, (parent, name.to_vec())).is_none() {
            self.order.push_back(ino);
        }
        while self.order.len() > whereabouts_limit() {
            let old = self.order.pop_front().expect("more than the bound");
            self.at.remove(&old);
        }
        debug_assert_eq!(self.at.len(), self.order.len());
    }

    /// Inodes noted.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    fn get(&self, ino: Ino) -> Option<&(Ino, Vec<u8>)> {
        self.at.get(&ino)
    }
}

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
        if !n.links.contains_key(&oid)
            && self.vol.forest.get(n.link_root.as_ref(), &oid_key(oid)).map_err(eio)?.is_some()
        {
            self.connect(ns);
            return self.linked(ns, oid).and_then(|i| self.remember(i)).map(Some);
        }
        if self.by_hint(ns, ino, hint)? || self.by_whereabouts(ns, ino)? {
            self.connect(ns);
            return self.remember(ino).map(Some);
        }
        Ok(None)
    }

    /// Whether `hint` (names from namespace `ns`'s root) leads to `ino`, loading it.
    fn by_hint(&mut self, ns: u32, ino: Ino, hint: &[Vec<u8>]) -> FsResult<bool> {
        debug_assert_eq!(ns, ns_of(ino));
        Ok(self.named_in(ino, hint)?.is_some())
    }

    /// The directory in which `names` (from `ino`'s namespace root) still name `ino`, if they
    /// do: one place of a file with several names, which has no one parent (`parent_of`).
    pub fn named_in(&mut self, ino: Ino, names: &[Vec<u8>]) -> FsResult<Option<Ino>> {
        if names.is_empty() || names.len() > MAX_DEPTH {
            return Ok(None);
        }
        let (dir, last) = names.split_at(names.len() - 1);
        let Some(parent) = self.follow(ns_of(ino), dir)? else { return Ok(None) };
        Ok(matches!(self.child(parent, &last[0]), Ok(Some(found)) if found == ino).then_some(parent))
    }

    /// Whether the places `Whereabouts` noted for `ino` and the directories above it, up to
    /// one still loaded, lead to it, loading it.
    fn by_whereabouts(&mut self, ns: u32, ino: Ino) -> FsResult<bool> {
        let mut chain = Vec::new();
        let mut cur = ino;
        while !self.nodes.contains_key(&cur) {
            let Some((parent, name)) = self.whereabouts.get(cur) else { return Ok(false) };
            // (Notes made at different times may loop: the bound ends that too.)
            if chain.len() >= MAX_DEPTH || ns_of(*parent) != ns {
                return Ok(false);
            }
            chain.push((cur, name.clone()));
            cur = *parent;
        }
        for (want, name) in chain.into_iter().rev() {
            match self.child(cur, &name) {
                Ok(Some(found)) if found == want => cur = found,
                Ok(_) | Err(_) => return Ok(false),
            }
        }
        Ok(cur == ino)
    }

    /// The directory `..` of loaded inode `ino` leads to, as the kernel asks when it
    /// connects a directory found by number to the tree: its parent; for a clone's root, the
    /// directory holding its mount entry; for a snapshot's root, its directory's `.snapshot`;
    /// the main root itself. ESTALE for an inode with no one directory.
    pub fn parent_ino(&mut self, ino: Ino) -> FsResult<Ino> {
        if ino & SNAPDIR_BIT != 0 {
            return Ok(ino & !SNAPDIR_BIT);
        }
        let n = self.node(ino)?;
        let ns = n.ns;
        match &n.loc {
            Loc::Entry { parent, .. } => Ok(*parent),
            Loc::Root => {
                self.connect(ns);
                let n = self.namespaces.get(&ns).ok_or(errno::ESTALE)?;
                match (n.info.kind, &n.mounted_at) {
                    (_, Some((at, _))) => Ok(*at),
                    (NsKind::Snapshot, None) => Ok(make_ino(n.info.parent, n.info.anchor) | SNAPDIR_BIT),
                    (NsKind::Main, None) => Ok(ino),
                    (NsKind::Clone, None) => Err(errno::ESTALE),
                }
            }
            Loc::Linked | Loc::Gone => Err(errno::ESTALE),
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
