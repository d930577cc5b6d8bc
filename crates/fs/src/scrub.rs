//! `scion scrub`: reads every live block of the committed trees, verifying each against the
//! hash its pointer carries, and names the damage by path. Unlike `check`, which proves
//! the structure, scrub answers "which of my files are hurt", and also runs on a mounted
//! store (through its daemon), over a pinned committed state (`pinned.rs`) without holding
//! the engine, so the mount goes on meanwhile.

use crate::fs::*;
use crate::pinned::{Pinned, Visit};
use scion_store::BlockPtr;

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

impl Visit for ScrubReport {
    fn block(&mut self, path: &str, ptr: &BlockPtr, read: &scion_store::Result<Vec<u8>>) {
        self.blocks += 1;
        self.bytes += ptr.len as u64;
        if let Err(e) = read {
            self.damaged(path, e.to_string());
        }
    }

    fn damaged(&mut self, path: &str, what: String) {
        self.damaged_total += 1;
        if self.damage.len() < MAX_DAMAGE {
            self.damage.push((path.to_string(), what));
        }
    }
}

/// A scrub that tells `progress` (blocks, bytes) every `every` blocks.
struct WithProgress<'a> {
    rep: ScrubReport,
    every: u64,
    progress: &'a mut dyn FnMut(u64, u64),
}

impl Visit for WithProgress<'_> {
    fn block(&mut self, path: &str, ptr: &BlockPtr, read: &scion_store::Result<Vec<u8>>) {
        self.rep.block(path, ptr, read);
        if self.rep.blocks % self.every == 0 {
            (self.progress)(self.rep.blocks, self.rep.bytes);
        }
    }

    fn damaged(&mut self, path: &str, what: String) {
        self.rep.damaged(path, what);
    }
}

impl Pinned {
    /// Scrubs the pinned state: every block read once, however many clones share it, and
    /// its damage reported under the first path that reached it. Needs no engine lock.
    pub fn scrub(&self) -> ScrubReport {
        self.scrub_with_progress(u64::MAX, &mut |_, _| {})
    }

    /// `scrub`, telling `progress` the blocks and bytes read so far every `every` blocks.
    pub fn scrub_with_progress(&self, every: u64, progress: &mut dyn FnMut(u64, u64)) -> ScrubReport {
        let mut v = WithProgress {
            rep: ScrubReport::default(),
            every: every.max(1),
            progress,
        };
        self.walk(&mut v);
        v.rep
    }
}

impl Fs {
    /// Scrubs the committed state (a checkpoint is taken first), here and now. A daemon
    /// pins the state under its lock and scrubs it without (`Pinned::scrub`).
    pub fn scrub(&mut self) -> FsResult<ScrubReport> {
        Ok(self.pin_committed()?.scrub())
    }
}
