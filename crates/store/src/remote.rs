//! Packs that live on a remote object store (issue 41).
//!
//! A tree pulled from a remote names its file data where the remote holds it: in packs whose
//! ids lie at `REMOTE_PACK_FIRST` and above, which no local pack reaches (a local pack id
//! grows by one per 4 GiB written). This crate reads such a pack through the handle a
//! [`RemotePacks`] gives (`scion-remote` fetches and caches the bytes); it never writes one,
//! and a freed remote block gives nothing back here (its pack is shared by every host).

use crate::host::HostFile;
use std::sync::Arc;

/// The first pack id that names a remote pack.
pub const REMOTE_PACK_FIRST: u32 = 1 << 23;

/// Whether pack `id` is a remote pack.
pub fn is_remote_pack(id: u32) -> bool {
    id >= REMOTE_PACK_FIRST
}

/// Where the bytes of remote packs come from.
pub trait RemotePacks: Send + Sync {
    /// A read-only handle on remote pack `id`: reads fetch what the local cache lacks and
    /// return verified bytes or an error, never others. `None`: no such pack is attached.
    fn pack(&self, id: u32) -> Option<Arc<dyn HostFile>>;
}
