//! Routing by inode number. Each volume (the store's main one, and one per cube) is an
//! [`Engine`] with its own lock, journal and failure state, and a request goes to the
//! volume its inode number names, so requests for different volumes never wait on one lock.
//!
//! Inode numbers as the kernel sees them:
//!
//! ```text
//!   bit 63       the `.snapshot` directory bit (scion-fs, kept as it is)
//!   bit 62       clear: the main volume; set: another volume
//!   bits 54-61   another volume's index - 1 (volumes 1 to 255)
//!   low bits     the volume's own inode number: (namespace - 1) << 40 | object id
//! ```
//!
//! The main volume's inode numbers are its own, unchanged (its namespaces stay below
//! `MAIN_NS_LIMIT`, so bit 62 stays clear); another volume's namespaces stay below
//! [`VOLUME_NS_LIMIT`], so its own numbers leave bits 54-62 clear.

use crate::Engine;
use scion_fs::{errno, FsResult, Ino, Inval, MAIN_NS_LIMIT};
use std::sync::RwLock;

const OTHER_BIT: u64 = 1 << 62;
const INDEX_SHIFT: u32 = 54;
const INDEX_MASK: u64 = 0xff << INDEX_SHIFT;
/// Namespaces a volume other than the main one may have: its st_ino has 54 bits.
pub const VOLUME_NS_LIMIT: u32 = 1 << (INDEX_SHIFT - 40);
/// Volumes a router serves, the main one included.
pub const MAX_VOLUMES: usize = 256;

/// Which volume: 0 is the store's main volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(u16);

impl VolumeId {
    pub const MAIN: VolumeId = VolumeId(0);

    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The volume a kernel inode number belongs to.
    pub fn of(ino: Ino) -> VolumeId {
        if ino & OTHER_BIT == 0 {
            VolumeId::MAIN
        } else {
            VolumeId((((ino & INDEX_MASK) >> INDEX_SHIFT) + 1) as u16)
        }
    }

    /// The kernel's inode number for this volume's own number `local`.
    pub fn global(self, local: Ino) -> Ino {
        if self == VolumeId::MAIN {
            debug_assert_eq!(local & OTHER_BIT, 0, "main volume inode {local:#x} has bit 62 set");
            return local;
        }
        debug_assert_eq!(
            local & (OTHER_BIT | INDEX_MASK),
            0,
            "inode {local:#x} overlaps the volume bits"
        );
        local | OTHER_BIT | ((self.0 as u64 - 1) << INDEX_SHIFT)
    }

    /// An invalidation the volume queued, in the kernel's inode numbers.
    pub fn global_inval(self, i: Inval) -> Inval {
        match i {
            Inval::Entry(parent, name) => Inval::Entry(self.global(parent), name),
            Inval::Inode(ino) => Inval::Inode(self.global(ino)),
        }
    }

    /// `global_inval` of each.
    pub fn global_invals(self, i: &[Inval]) -> Vec<Inval> {
        i.iter().cloned().map(|x| self.global_inval(x)).collect()
    }

    /// The volume's own inode number for the kernel's `ino`.
    pub fn local(ino: Ino) -> Ino {
        if ino & OTHER_BIT == 0 {
            ino
        } else {
            ino & !(OTHER_BIT | INDEX_MASK)
        }
    }
}

/// How a volume is served (a cube's mode and failure policy, `records::cubes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serving {
    /// `fsync` returns at once without syncing (mode `nofsync`).
    pub nofsync: bool,
    /// Once the volume failed, every request gets EIO (policy `fence`), not only changes.
    pub fence: bool,
}

struct Served {
    engine: Engine,
    serving: Serving,
    /// The generation of every entry this volume gives the kernel: another for each volume a
    /// slot serves, so an inode the kernel still holds of a volume the slot served before is
    /// found stale (the kernel compares generations when it finds an inode by number), and
    /// for a cube the same at every mount (`cubes::generation`), so its file handles last.
    generation: u64,
}

/// Where cubes hang in the tree: a directory of one volume (the graft) shows another
/// volume's root, as a mount point shows a mounted filesystem's.
#[derive(Default)]
struct Grafts {
    /// (volume, directory) -> the volume whose root it shows.
    at: std::collections::HashMap<(VolumeId, Ino), VolumeId>,
    /// Grafts and the directories above them, per cube: they may not be renamed or
    /// removed (EBUSY, as a mount point and its parents).
    pinned: std::collections::HashMap<VolumeId, Vec<(VolumeId, Ino)>>,
}

/// The volumes of one mount, by index. Looking one up takes a read lock on the table for
/// the time of a clone of the engine's handle, never an engine's lock.
pub struct Router {
    volumes: RwLock<Vec<Option<Served>>>,
    grafts: RwLock<Grafts>,
    /// Volumes taken out to be checked (`cubes.rs`): their requests get EIO, not ESTALE,
    /// and their slot stays theirs.
    fenced: RwLock<std::collections::HashSet<VolumeId>>,
    /// Cubes by id, as `MNT/.cubes/ID` shows them.
    cube_ids: RwLock<std::collections::BTreeMap<u32, VolumeId>>,
    /// Slots of volumes no longer served whose inodes the kernel still holds: the kernel
    /// references not yet forgotten. A slot is not given to another volume until the kernel
    /// has forgotten every inode of the last one: its numbers would name the new volume's
    /// inodes, and its FORGETs would count against them.
    retired: std::sync::Mutex<std::collections::HashMap<VolumeId, u64>>,
    /// The last generation given to a volume.
    generations: std::sync::atomic::AtomicU64,
}

/// The main volume's inode number of the `.cubes` directory at the mount root (above every
/// number a main-volume namespace can give: those stay below 2^62 - 2^40).
pub const CUBES_DIR_INO: Ino = (1 << 62) - 1;
/// Its name.
pub const CUBES_DIR_NAME: &[u8] = b".cubes";

impl Router {
    /// A router serving `main` as volume 0. Refused if the volume has namespace ids that
    /// would collide with the other volumes' inode numbers.
    pub fn new(main: Engine) -> FsResult<Router> {
        main.lock().limit_namespaces(MAIN_NS_LIMIT)?;
        Ok(Router {
            volumes: RwLock::new(vec![Some(Served { engine: main, serving: Serving::default(), generation: 0 })]),
            grafts: RwLock::default(),
            fenced: RwLock::default(),
            cube_ids: RwLock::default(),
            retired: Default::default(),
            generations: Default::default(),
        })
    }

    /// Serves one more volume; its namespaces are limited to [`VOLUME_NS_LIMIT`].
    pub fn add(&self, engine: Engine) -> FsResult<VolumeId> {
        let generation = self.generations.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.add_serving(engine, Serving::default(), generation)
    }

    /// `add`, served as `serving` says, its entries of `generation` (not 0: the main
    /// volume's).
    pub fn add_serving(&self, engine: Engine, serving: Serving, generation: u64) -> FsResult<VolumeId> {
        assert_ne!(generation, 0, "generation 0 is the main volume's");
        engine.lock().limit_namespaces(VOLUME_NS_LIMIT)?;
        let mut v = self.volumes.write().unwrap();
        let slot = self.free_slot(&mut v)?;
        v[slot] = Some(Served { engine, serving, generation });
        Ok(VolumeId(slot as u16))
    }

    /// A slot no volume holds or keeps (taken out, unavailable, retired), made if there is
    /// none.
    fn free_slot(&self, v: &mut Vec<Option<Served>>) -> FsResult<usize> {
        let retired = self.retired.lock().unwrap();
        let free = v
            .iter()
            .enumerate()
            .skip(1)
            .find(|(i, s)| s.is_none() && !self.is_taken_out(VolumeId(*i as u16)) && !retired.contains_key(&VolumeId(*i as u16)));
        match free.map(|(i, _)| i) {
            Some(i) => Ok(i),
            None if v.len() < MAX_VOLUMES => {
                v.push(None);
                Ok(v.len() - 1)
            }
            None => Err(errno::ENOSPC.with(format!("a mount serves at most {MAX_VOLUMES} volumes"))),
        }
    }

    /// Takes volume `id` out while it is checked: its requests get EIO until `put_back`.
    /// Returns its engine.
    pub fn take_out(&self, id: VolumeId) -> Option<Engine> {
        assert_ne!(id, VolumeId::MAIN, "the main volume is served for the mount's lifetime");
        self.fenced.write().unwrap().insert(id);
        self.volumes.write().unwrap().get_mut(id.index()).and_then(Option::take).map(|s| s.engine)
    }

    /// Serves `engine` again as volume `id`, taken out before.
    pub fn put_back(&self, id: VolumeId, engine: Engine, serving: Serving, generation: u64) -> FsResult<()> {
        engine.lock().limit_namespaces(VOLUME_NS_LIMIT)?;
        let mut v = self.volumes.write().unwrap();
        assert!(v[id.index()].is_none(), "volume {} is served already", id.0);
        v[id.index()] = Some(Served { engine, serving, generation });
        self.fenced.write().unwrap().remove(&id);
        Ok(())
    }

    /// A slot for a volume that could not be opened (a cube whose store is damaged): its
    /// requests get EIO until `release`, so its graft does not show an empty directory.
    pub fn add_unavailable(&self) -> FsResult<VolumeId> {
        let mut v = self.volumes.write().unwrap();
        let slot = self.free_slot(&mut v)?;
        self.fenced.write().unwrap().insert(VolumeId(slot as u16));
        Ok(VolumeId(slot as u16))
    }

    /// Gives back the slot of `add_unavailable`.
    pub fn release(&self, id: VolumeId) {
        self.ungraft(id);
        self.fenced.write().unwrap().remove(&id);
    }

    /// Cube `id` is volume `vol` (shown at `.cubes/ID`).
    pub fn name_cube(&self, id: u32, vol: VolumeId) {
        self.cube_ids.write().unwrap().insert(id, vol);
    }

    /// The cubes served, by id.
    pub fn cube_ids(&self) -> Vec<(u32, VolumeId)> {
        self.cube_ids.read().unwrap().iter().map(|(i, v)| (*i, *v)).collect()
    }

    /// Whether volume `id` is taken out to be checked.
    pub fn is_taken_out(&self, id: VolumeId) -> bool {
        self.fenced.read().unwrap().contains(&id)
    }

    /// How volume `id` is served now.
    pub fn serving(&self, id: VolumeId) -> Serving {
        self.volumes.read().unwrap().get(id.index()).and_then(|s| s.as_ref().map(|s| s.serving)).unwrap_or_default()
    }

    /// Serves volume `id` as `serving` says from the next request on.
    pub fn set_serving(&self, id: VolumeId, serving: Serving) {
        if let Some(Some(s)) = self.volumes.write().unwrap().get_mut(id.index()) {
            s.serving = serving;
        }
    }

    /// Serves `engine` as volume `id` in place of the one there (a cube recovered: the same
    /// store opened again, so its inode numbers are the same). Returns the old engine.
    pub fn replace(&self, id: VolumeId, engine: Engine) -> Option<Engine> {
        engine.lock().limit_namespaces(VOLUME_NS_LIMIT).ok()?;
        let mut v = self.volumes.write().unwrap();
        let s = v.get_mut(id.index())?.as_mut()?;
        Some(std::mem::replace(&mut s.engine, engine))
    }

    /// Directory `dir` of volume `at` shows the root of volume `cube` from now on; `dir` and
    /// `above` (the directories on its path, in `at`) may not be renamed or removed.
    pub fn graft(&self, at: VolumeId, dir: Ino, above: Vec<Ino>, cube: VolumeId) {
        let mut g = self.grafts.write().unwrap();
        g.at.insert((at, dir), cube);
        let mut pinned: Vec<(VolumeId, Ino)> = above.into_iter().map(|i| (at, i)).collect();
        pinned.push((at, dir));
        g.pinned.insert(cube, pinned);
    }

    /// Volume `cube` hangs nowhere any more.
    pub fn ungraft(&self, cube: VolumeId) {
        let mut g = self.grafts.write().unwrap();
        g.at.retain(|_, c| *c != cube);
        g.pinned.remove(&cube);
        self.cube_ids.write().unwrap().retain(|_, v| *v != cube);
    }

    /// The volume whose root directory `dir` of volume `at` shows, if it is a graft.
    pub fn grafted(&self, at: VolumeId, dir: Ino) -> Option<VolumeId> {
        let g = self.grafts.read().unwrap();
        if g.at.is_empty() {
            return None;
        }
        g.at.get(&(at, dir)).copied()
    }

    /// The main volume's directory volume `cube` hangs at (None for the main volume and for
    /// a volume hanging nowhere).
    pub fn graft_of(&self, cube: VolumeId) -> Option<Ino> {
        let g = self.grafts.read().unwrap();
        g.at.iter().find(|((at, _), c)| **c == cube && *at == VolumeId::MAIN).map(|((_, dir), _)| *dir)
    }

    /// Whether `ino` of volume `at` is a graft or a directory above one.
    pub fn pinned(&self, at: VolumeId, ino: Ino) -> bool {
        let g = self.grafts.read().unwrap();
        g.pinned.values().any(|p| p.contains(&(at, ino)))
    }

    /// Stops serving a volume (not the main one): its inode numbers get ESTALE from now on,
    /// and its slot is retired while the kernel holds any of its inodes (`forget_retired`).
    /// Returns its engine, for the caller to close.
    pub fn remove(&self, id: VolumeId) -> Option<Engine> {
        assert_ne!(id, VolumeId::MAIN, "the main volume is served for the mount's lifetime");
        self.ungraft(id);
        let engine = self.volumes.write().unwrap().get_mut(id.index()).and_then(Option::take).map(|s| s.engine)?;
        let held = engine.lock().kernel_references();
        if held > 0 {
            self.retired.lock().unwrap().insert(id, held);
        }
        Some(engine)
    }

    /// The kernel forgot `n` references to `ino`; true if it was of a retired volume (whose
    /// slot is free again once the kernel holds none of its inodes).
    pub fn forget_retired(&self, ino: Ino, n: u64) -> bool {
        let id = VolumeId::of(ino);
        let mut r = self.retired.lock().unwrap();
        let Some(held) = r.get_mut(&id) else { return false };
        *held = held.saturating_sub(n);
        if *held == 0 {
            r.remove(&id);
            log::debug!("volume slot {} free again: the kernel holds none of its inodes", id.0);
        }
        true
    }

    /// The generation of volume `id`'s entries (0 for the main volume and for a slot that
    /// serves nothing).
    pub fn generation(&self, id: VolumeId) -> u64 {
        self.volumes.read().unwrap().get(id.index()).and_then(|s| s.as_ref().map(|s| s.generation)).unwrap_or(0)
    }

    /// The engine of volume `id`. EIO for a fenced volume that failed.
    pub fn engine(&self, id: VolumeId) -> FsResult<Engine> {
        let (engine, fence) = match self.volumes.read().unwrap().get(id.index()) {
            Some(Some(s)) => (s.engine.clone(), s.serving.fence),
            _ if self.is_taken_out(id) => return Err(errno::EIO),
            _ => return Err(errno::ESTALE),
        };
        if fence {
            if let Some(why) = engine.lock().failure() {
                log::debug!("volume {} fenced: {why}", id.0);
                return Err(errno::EIO);
            }
        }
        Ok(engine)
    }

    /// The store's main volume.
    pub fn main(&self) -> Engine {
        self.any_engine(VolumeId::MAIN).expect("the main volume is always served")
    }

    /// The engine of volume `id`, fenced or not (for the commands that check or recover it).
    pub fn any_engine(&self, id: VolumeId) -> Option<Engine> {
        self.volumes.read().unwrap().get(id.index()).and_then(|s| s.as_ref().map(|s| s.engine.clone()))
    }

    /// Where a request for the kernel's inode `ino` goes: its volume, that volume's engine
    /// and the volume's own inode number. ESTALE for a volume no longer served.
    pub fn route(&self, ino: Ino) -> FsResult<(VolumeId, Engine, Ino)> {
        let id = VolumeId::of(ino);
        Ok((id, self.engine(id)?, VolumeId::local(ino)))
    }

    /// Every volume served, with its id.
    pub fn volumes(&self) -> Vec<(VolumeId, Engine)> {
        let v = self.volumes.read().unwrap();
        v.iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|s| (VolumeId(i as u16), s.engine.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scion_fs::clone::SNAPDIR_BIT;
    use scion_fs::make_ino;

    #[test]
    fn inode_numbers_round_trip_and_never_collide() {
        let samples = [(1u32, 1u64), (1, (1 << 40) - 1), (VOLUME_NS_LIMIT - 1, 7), (2, 12345)];
        let mut seen = std::collections::HashSet::new();
        for v in [0u16, 1, 2, 255] {
            let id = VolumeId(v);
            for &(ns, oid) in &samples {
                if v == 0 && ns >= MAIN_NS_LIMIT {
                    continue;
                }
                for snap in [0, SNAPDIR_BIT] {
                    let local = make_ino(ns, oid) | snap;
                    let g = id.global(local);
                    assert_eq!(VolumeId::of(g), id, "{g:#x}");
                    assert_eq!(VolumeId::local(g), local, "{g:#x}");
                    assert_eq!(g & SNAPDIR_BIT, snap);
                    assert!(seen.insert(g), "{g:#x} given twice");
                }
            }
        }
        // The main volume's largest namespace stays clear of the other volumes' bit.
        assert_eq!(VolumeId::of(make_ino(MAIN_NS_LIMIT - 1, (1 << 40) - 1)), VolumeId::MAIN);
    }
}
