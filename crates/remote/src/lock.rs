//! Pushes and gc keep out of each other's way with lock objects (`locks/push-ID`,
//! `locks/gc-ID`): each writes its own lock, then lists the other kind's. S3 lists what was
//! written before (strong read-after-write consistency), so of a push and a gc that start
//! together at least one sees the other: the push waits for the gc to end before it learns
//! what the remote holds, or the gc removes nothing. A lock older than `STALE_S` is one a
//! killed command left, and is ignored (and removed by the next gc).

use crate::client::Client;
use crate::layout;

/// Seconds after which a lock is taken for one a killed command left.
pub const STALE_S: i64 = 3600;

/// A lock held on the remote, removed when dropped.
pub struct Lock {
    client: Client,
    key: String,
}

impl Lock {
    /// Writes lock `kind` (`push` or `gc`).
    pub fn take(client: &Client, kind: &str) -> Result<Lock, String> {
        let id = format!("{:016x}{:08x}", rand_u64(), std::process::id());
        let key = layout::lock_key(kind, &id);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        client.put_new(&key, host.trim().as_bytes().to_vec()).map_err(|e| e.to_string())?;
        Ok(Lock { client: client.clone(), key })
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Err(e) = self.client.delete(&self.key) {
            log::warn!("remote {}: lock {} stays (ignored in {STALE_S} s): {e}", self.client.name(), self.key);
        }
    }
}

/// The locks of `kind` others hold (not stale at `now`), and the stale ones.
pub fn held(client: &Client, kind: &str, now: i64, mine: Option<&Lock>) -> Result<(Vec<String>, Vec<String>), String> {
    let prefix = format!("locks/{kind}-");
    let mut live = Vec::new();
    let mut stale = Vec::new();
    for o in client.list("locks/").map_err(|e| e.to_string())? {
        if !o.key.starts_with(&prefix) || mine.is_some_and(|m| m.key == o.key) {
            continue;
        }
        if now - o.modified > STALE_S {
            stale.push(o.key);
        } else {
            live.push(o.key);
        }
    }
    Ok((live, stale))
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        b = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)).to_le_bytes();
    }
    u64::from_le_bytes(b)
}

pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
