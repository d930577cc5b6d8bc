//! Every version of a file (CCFS' `ccfsfind`, httm): the distinct states of one path across
//! the snapshots of every directory above it, and the live one. Distinct is decided from
//! the stored records alone (kind, size, mtime and the root of the file's content, which
//! names every block by its hash), never by reading file data, so the cost grows with the
//! number of snapshots, not with the file's size.

use crate::clone::SNAPDIR_NAME;
use crate::error::errno;
use crate::fs::{Fs, Ino};
use crate::inode::{Kind, Ts};
use crate::FsResult;

/// One distinct version of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The snapshots holding it, as paths from the mount root (`d/.snapshot/NAME`), oldest
    /// first.
    pub snapshots: Vec<Vec<u8>>,
    /// It is what the path holds now.
    pub live: bool,
    pub kind: Kind,
    pub size: u64,
    pub mtime: Ts,
    /// When the oldest snapshot holding it was taken (a version only the live tree holds:
    /// when asked).
    pub seen: Ts,
}

/// What makes two versions the same: kind, size, mtime and the content's identity (its
/// tree root or direct block, whose pointers carry the blocks' hashes; or the inline bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    kind: Kind,
    size: u64,
    mtime: Ts,
    content: Vec<u8>,
}

/// A path inside a file that `--deleted` reports: gone from the live directory, with the
/// newest snapshot holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// From the directory asked about.
    pub path: Vec<u8>,
    /// The newest snapshot holding it (`d/.snapshot/NAME`).
    pub snapshot: Vec<u8>,
    pub kind: Kind,
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut p = a.to_vec();
    if !p.is_empty() && !b.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(b);
    p
}

/// The names of a live path (no `..`, no `.snapshot`), empty ones and `.` dropped.
pub(crate) fn clean(path: &[u8]) -> FsResult<Vec<Vec<u8>>> {
    let names: Vec<Vec<u8>> = path
        .split(|b| *b == b'/')
        .filter(|n| !n.is_empty() && *n != b".")
        .map(<[u8]>::to_vec)
        .collect();
    if names.iter().any(|n| n == b".." || n == SNAPDIR_NAME) {
        return Err(errno::EINVAL.with("a live path without '..' or '.snapshot' is needed"));
    }
    Ok(names)
}

impl Fs {
    fn identity(&self, ino: Ino) -> FsResult<Identity> {
        let n = self.node(ino)?;
        let i = &n.inode;
        let mut content = Vec::new();
        if let Some(p) = i.content {
            content.extend_from_slice(&p.hash);
        }
        content.extend_from_slice(&self.inline_bytes(n)?);
        if !n.chunks.is_empty() || !n.entries.is_empty() {
            // Changes not folded into trees yet: the live version, unlike any snapshot's.
            content.extend_from_slice(b"\0pending");
        }
        Ok(Identity {
            kind: i.kind,
            size: i.size,
            mtime: i.mtime,
            content,
        })
    }

    /// The snapshots that hold `path` (of its directory or of any above it), oldest first
    /// (by time, then by id: ids grow as snapshots are made): (path of the snapshot, the
    /// path inside it, when it was taken).
    fn snapshot_views(&mut self, names: &[Vec<u8>]) -> FsResult<Vec<(Vec<u8>, Vec<u8>, Ts)>> {
        let mut views = Vec::new();
        let mut dir = Vec::new();
        let mut ino = self.resolve_path(b"")?;
        for depth in 0..=names.len() {
            if self.node(ino)?.inode.kind == Kind::Dir {
                let rest = names[depth..].join(&b'/');
                for s in self.dir_snapshots(ino)? {
                    let snap = join(&dir, &[SNAPDIR_NAME, b"/", &s.name].concat());
                    views.push((s.created, s.id, snap.clone(), join(&snap, &rest)));
                }
            }
            let Some(name) = names.get(depth) else { break };
            dir = join(&dir, name);
            if self.node(ino)?.inode.kind != Kind::Dir {
                break;
            }
            ino = match self.child(ino, name)? {
                Some(c) => c,
                // Gone from the live tree here: snapshots above still hold it.
                None => break,
            };
        }
        views.sort_by_key(|v| (v.0, v.1));
        Ok(views
            .into_iter()
            .map(|(t, _, snap, inside)| (snap, inside, Ts { sec: t, nsec: 0 }))
            .collect())
    }

    /// The distinct versions of `path` (from the mount root), oldest first, the live one
    /// last if the path exists. ENOENT if neither the live tree nor any snapshot holds it.
    pub fn versions(&mut self, path: &[u8]) -> FsResult<Vec<Version>> {
        let names = clean(path)?;
        let mut out: Vec<(Identity, Version)> = Vec::new();
        let add = |id: Identity, at: Option<(Vec<u8>, Ts)>, out: &mut Vec<(Identity, Version)>| {
            let live = at.is_none();
            match out.iter_mut().find(|(i, _)| *i == id) {
                Some((_, v)) => {
                    v.live |= live;
                    v.snapshots.extend(at.map(|a| a.0));
                }
                None => {
                    let seen = at.as_ref().map_or_else(Ts::now, |a| a.1);
                    let v = Version {
                        snapshots: at.into_iter().map(|a| a.0).collect(),
                        live,
                        kind: id.kind,
                        size: id.size,
                        mtime: id.mtime,
                        seen,
                    };
                    out.push((id, v));
                }
            }
        };
        for (snap, inside, taken) in self.snapshot_views(&names)? {
            // A snapshot taken before the path existed, or the caller cannot see: skipped.
            let Ok(ino) = self.resolve_path(&inside) else { continue };
            let id = self.identity(ino)?;
            add(id, Some((snap, taken)), &mut out);
        }
        let joined = names.join(&b'/');
        if let Ok(ino) = self.resolve_path(&joined) {
            let id = self.identity(ino)?;
            add(id, None, &mut out);
        }
        if out.is_empty() {
            return Err(errno::ENOENT);
        }
        // Oldest first: versions were met in the order of the snapshots first holding them,
        // and one only the live tree holds comes last.
        Ok(out.into_iter().map(|(_, v)| v).collect())
    }

    /// Names below directory `dir` that some snapshot of it (or of a directory above it)
    /// holds and the live directory does not, each with the newest snapshot holding it.
    pub fn deleted(&mut self, dir: &[u8]) -> FsResult<Vec<Deleted>> {
        let names = clean(dir)?;
        let live = self.resolve_path(&names.join(&b'/'))?;
        if self.node(live)?.inode.kind != Kind::Dir {
            return Err(errno::ENOTDIR);
        }
        let mut found: std::collections::BTreeMap<Vec<u8>, Deleted> = Default::default();
        for (snap, inside, _) in self.snapshot_views(&names)? {
            let Ok(root) = self.resolve_path(&inside) else { continue };
            self.walk_missing(root, live, &[], &snap, &mut found, 0)?;
        }
        Ok(found.into_values().collect())
    }

    /// Adds what `snap_dir` holds and `live_dir` (if any) does not, recursively.
    fn walk_missing(
        &mut self,
        snap_dir: Ino,
        live_dir: Ino,
        rel: &[u8],
        snap: &[u8],
        found: &mut std::collections::BTreeMap<Vec<u8>, Deleted>,
        depth: usize,
    ) -> FsResult<()> {
        // Paths nest at most this deep here (PATH_MAX / 2).
        if depth > 2048 {
            return Err(errno::ELOOP);
        }
        for e in self.readdir(snap_dir)? {
            let path = join(rel, &e.name);
            match self.child(live_dir, &e.name)? {
                None => {
                    // Snapshots come oldest first: the newest holding it wins.
                    found.insert(
                        path.clone(),
                        Deleted {
                            path,
                            snapshot: snap.to_vec(),
                            kind: e.kind,
                        },
                    );
                }
                Some(l) if e.kind == Kind::Dir && self.node(l)?.inode.kind == Kind::Dir => {
                    // Loaded by name: a listing does not load its entries.
                    let Some(s) = self.child(snap_dir, &e.name)? else {
                        continue;
                    };
                    self.walk_missing(s, l, &path, snap, found, depth + 1)?;
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
