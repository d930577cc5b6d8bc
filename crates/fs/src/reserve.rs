//! The host's reserve (issue 35 item 1): a full host filesystem is an ordinary condition,
//! never a failed volume. Changes are refused with ENOSPC before they would leave the next
//! checkpoint too little room (`Fs::room_for`), but another program may fill the host
//! meanwhile, and a checkpoint that cannot write would fail the volume. So the store keeps
//! `STORE/reserve`, a file of `RESERVE` bytes written while there is room: when a checkpoint
//! finds the host short, the reserve is given back first and the checkpoint writes into that
//! room; changes get ENOSPC while the host stays short (`scion status` says so), and once
//! there is room again the reserve is taken anew and changes are taken as before, with no
//! remount.

use crate::fs::Fs;
use scion_store::{Host, OpenMode};
use std::path::Path;

/// The reserve file's name in the store directory.
pub const FILE: &str = "reserve";
/// Bytes held back for checkpoints (what a checkpoint of a full host's metadata needs).
pub const RESERVE: u64 = 16 << 20;

/// Writes the reserve at `dir` (zeros, synced: allocated, not a hole). False if the host has
/// no room for it (what was written is given back).
fn take(host: &Host, dir: &Path) -> bool {
    let path = dir.join(FILE);
    let zeros = vec![0u8; 1 << 20];
    let r = host.open(&path, OpenMode::Create).and_then(|f| {
        for i in 0..RESERVE / zeros.len() as u64 {
            f.write_all_at(&zeros, i * zeros.len() as u64)?;
        }
        f.sync_data()
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            log::info!("host's reserve for checkpoints not taken ({e}): taken once there is room");
            give_back(host, dir);
            false
        }
    }
}

/// Gives the reserve's room back to the host.
fn give_back(host: &Host, dir: &Path) {
    let path = dir.join(FILE);
    if let Err(e) = host.open(&path, OpenMode::ReadWrite).and_then(|f| f.set_len(0)) {
        log::warn!("{}: {e}", path.display());
    }
}

/// Whether the reserve is held now, and whether the host was found full since.
#[derive(Default)]
pub(crate) struct Reserve {
    held: bool,
    /// The host was too full for a change or a checkpoint, and has not had room since.
    pub(crate) host_full: bool,
}

impl Fs {
    /// Takes the reserve if it is not held (at open, and when room is back).
    pub(crate) fn take_reserve(&mut self) {
        if !self.reserve.held && !self.read_only {
            self.reserve.held = take(&self.vol.host, &self.vol.dir);
        }
    }

    /// Before a checkpoint: if the host has less room than it may need, the reserve goes
    /// back to the host first, so the checkpoint can write.
    pub(crate) fn room_for_checkpoint(&mut self) {
        let Ok(sp) = self.vol.host.space(&self.vol.dir) else { return };
        let avail = sp.available.saturating_mul(sp.block_size);
        if avail >= self.dirty_bytes + RESERVE {
            return;
        }
        self.reserve.host_full = true;
        self.room = Default::default();
        if self.reserve.held {
            log::warn!("host filesystem full ({avail} bytes free): the reserve goes to the checkpoint; changes get ENOSPC until there is room");
            give_back(&self.vol.host, &self.vol.dir);
            self.reserve.held = false;
        }
    }

    /// The host has room again (`room_for` found it): the reserve is taken anew.
    pub(crate) fn room_is_back(&mut self, avail: u64) {
        if self.reserve.host_full && avail > 2 * RESERVE {
            self.take_reserve();
            if self.reserve.held {
                log::info!("host filesystem has room again ({avail} bytes free): changes are taken again");
                self.reserve.host_full = false;
            }
        }
    }

    /// Whether the reserve is held (its room kept back for checkpoints).
    pub(crate) fn reserve_held(&self) -> bool {
        self.reserve.held
    }

    /// Whether the host is full now (changes get ENOSPC), for `scion status`.
    pub fn host_full(&self) -> bool {
        self.reserve.host_full
    }
}
