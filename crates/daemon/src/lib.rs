//! The service layer between the filesystem model (`scion-fs`) and its front ends (the FUSE
//! adapter, the control socket). It owns how the engine is shared: the lock, the protocols
//! that keep slow disk work outside it (write-ahead, fsync, punch), and the background
//! worker (write-behind, journal sync, punching, checkpoint ticks, repack). The front ends
//! translate requests into calls on an [`Engine`] and know nothing of the lock.

mod background;
pub mod control;
pub mod cubes;
mod engine;
pub mod memory;
pub mod mirror;
pub mod remote;
pub mod rights;
pub mod scan_cache;
pub mod router;
pub mod scheduler;
pub mod send;
pub mod server;
pub mod wire;

pub use background::{requests_served_at_idle, Background, BackgroundOptions, SharedCompanions};
pub use engine::Engine;
pub use router::{Router, VolumeId};

/// The zstd level a compression request names: its own (1 to 22), or the default for 0.
pub fn compress_level(level: u8) -> i32 {
    match level {
        0 => scion_fs::compress::DEFAULT_LEVEL,
        n => (n as i32).min(22),
    }
}
