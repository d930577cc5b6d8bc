//! Routing by inode number. Each volume (the store's main one; later one per cube) is an
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

    /// The volume's own inode number for the kernel's `ino`.
    pub fn local(ino: Ino) -> Ino {
        if ino & OTHER_BIT == 0 {
            ino
        } else {
            ino & !(OTHER_BIT | INDEX_MASK)
        }
    }
}

/// The volumes of one mount, by index. Looking one up takes a read lock on the table for
/// the time of a clone of the engine's handle, never an engine's lock.
pub struct Router {
    volumes: RwLock<Vec<Option<Engine>>>,
}

impl Router {
    /// A router serving `main` as volume 0. Refused if the volume has namespace ids that
    /// would collide with the other volumes' inode numbers.
    pub fn new(main: Engine) -> FsResult<Router> {
        main.lock().limit_namespaces(MAIN_NS_LIMIT)?;
        Ok(Router {
            volumes: RwLock::new(vec![Some(main)]),
        })
    }

    /// Serves one more volume; its namespaces are limited to [`VOLUME_NS_LIMIT`].
    pub fn add(&self, engine: Engine) -> FsResult<VolumeId> {
        engine.lock().limit_namespaces(VOLUME_NS_LIMIT)?;
        let mut v = self.volumes.write().unwrap();
        let slot = match v.iter().skip(1).position(Option::is_none) {
            Some(i) => i + 1,
            None if v.len() < MAX_VOLUMES => {
                v.push(None);
                v.len() - 1
            }
            None => return Err(errno::ENOSPC.with(format!("a mount serves at most {MAX_VOLUMES} volumes"))),
        };
        v[slot] = Some(engine);
        Ok(VolumeId(slot as u16))
    }

    /// Stops serving a volume (not the main one): its inode numbers get ESTALE from now on.
    /// Returns its engine, for the caller to close.
    pub fn remove(&self, id: VolumeId) -> Option<Engine> {
        assert_ne!(id, VolumeId::MAIN, "the main volume is served for the mount's lifetime");
        self.volumes.write().unwrap().get_mut(id.index()).and_then(Option::take)
    }

    /// The engine of volume `id`.
    pub fn engine(&self, id: VolumeId) -> FsResult<Engine> {
        match self.volumes.read().unwrap().get(id.index()) {
            Some(Some(e)) => Ok(e.clone()),
            _ => Err(errno::ESTALE),
        }
    }

    /// The store's main volume.
    pub fn main(&self) -> Engine {
        self.engine(VolumeId::MAIN).expect("the main volume is always served")
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
            .filter_map(|(i, e)| e.clone().map(|e| (VolumeId(i as u16), e)))
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
